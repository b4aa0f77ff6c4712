"""The task runner the data flows use: an existing Dask cluster, or a local one; and the records
a flow run keeps of its cluster (`dask_run_records`)."""
from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack, contextmanager
from typing import Iterator

import distributed
import fsspec
from prefect import get_run_logger
from prefect.context import FlowRunContext
from prefect_dask import DaskTaskRunner

from pearl_redact import redact
from runs.artifacts import publish_link, publish_location
from runs.prefect_api import shared_api
from storage.atomic import atomic_path
from storage.datasets import resolve_root

# The dashboard has no authentication, so the local cluster's listens on loopback only;
# PEARL_DASK_DASHBOARD (host:port, e.g. 0.0.0.0:8787) opens it elsewhere on purpose.
DASHBOARD_ENV = "PEARL_DASK_DASHBOARD"
DEFAULT_DASHBOARD = "127.0.0.1:8787"  # taken: distributed picks a free port (the log says which)
# A run's own records beside its datasets: <storage_root>/run_reports/<flow run id>/
RUN_REPORTS = "run_reports"
PERFORMANCE_REPORT = "dask-performance.html"


class SharedAPIDaskTaskRunner(DaskTaskRunner):
    """A DaskTaskRunner whose workers report to this process's Prefect API (`runs.prefect_api.shared_api`):
    without PREFECT_API_URL each worker would start a temporary API server of its own."""

    def __enter__(self):
        self._api = ExitStack()
        self._api.enter_context(shared_api())  # before the cluster starts: its workers inherit the API
        try:
            return super().__enter__()
        except BaseException:
            self._api.close()
            raise

    def __exit__(self, *args) -> None:
        try:
            super().__exit__(*args)
        finally:
            self._api.close()


def dask_task_runner(address: str | None = None, n_workers: int = 2) -> DaskTaskRunner:
    if address:  # workers elsewhere cannot reach this machine's loopback API: they need PREFECT_API_URL's
        return DaskTaskRunner(address=address)
    # One thread per worker process: the stages are CPU-bound pure Python (GIL).
    # host: the scheduler and the workers listen on loopback too.
    # A task that runs alone may widen its OpenMP pool (the evaluation's probes and KMeans): waiting
    # OpenMP threads then sleep instead of spinning, or on a busy machine they spin on the cores the
    # working threads need (docs/research/speed-evaluation.md).
    return SharedAPIDaskTaskRunner(
        cluster_kwargs={"n_workers": n_workers, "threads_per_worker": 1, "processes": True,
                        "host": "127.0.0.1", "env": {"OMP_WAIT_POLICY": "PASSIVE"},
                        "dashboard_address": os.environ.get(DASHBOARD_ENV) or DEFAULT_DASHBOARD}
    )


def report_dask_dashboard(runner: DaskTaskRunner) -> str | None:
    """Log the Dask dashboard's address to the running flow's log and keep it as its
    `dask-dashboard` link artifact (prefect_dask logs it to the worker's log only); starts the
    cluster. The address is the next run's cluster once this one ends, and the artifact says so."""
    link = runner.client.dashboard_link
    if not link:
        get_run_logger().info("The Dask cluster has no dashboard")
        return None
    get_run_logger().info("Dask dashboard: %s", link)
    publish_link(link, link_text=link, key="dask-dashboard",
                 description="The live dashboard of this run's Dask cluster, while this run runs only: once it "
                             "ends, the address shows whichever cluster serves it next. What stays is the "
                             "`dask-performance` report.")
    return link


def performance_report_url(storage_root: str, flow_run_id: object) -> str:
    return f"{resolve_root(storage_root)}/{RUN_REPORTS}/{flow_run_id}/{PERFORMANCE_REPORT}"


@contextmanager
def dask_run_records(storage_root: str) -> Iterator[None]:
    """Around the body of a flow that runs on `dask_task_runner`: its dashboard's link
    (`report_dask_dashboard`) at the start, and distributed's performance report of the whole
    body (task stream, worker profiles, transfers) kept as the run's own record at
    `performance_report_url` and linked as its `dask-performance` artifact, even when the body
    fails. The report is one self-contained HTML file, written locally, then copied to the storage root (any fsspec root) under
    a temporary name and renamed. A report that cannot be kept is a warning in the run's log: it
    never fails the run or hides the body's error. Outside a Dask flow run, nothing is recorded."""
    context = FlowRunContext.get()
    runner = context.task_runner if context else None
    if not isinstance(runner, DaskTaskRunner):
        yield
        return
    report_dask_dashboard(runner)
    url = performance_report_url(storage_root, context.flow_run.id)
    with tempfile.TemporaryDirectory(prefix="pearl-dask-report-") as tmp:
        local = os.path.join(tmp, PERFORMANCE_REPORT)
        # bokeh's scripts inlined: the record opens offline, not only where its CDN is reachable
        report = distributed.performance_report(filename=local, mode="inline")
        with runner.client.as_current():  # prefect_dask's client is not the process's default one
            report.__enter__()
        try:
            yield
        finally:
            try:
                with runner.client.as_current():
                    report.__exit__(None, None, None)
                fs, path = fsspec.core.url_to_fs(url)
                with atomic_path(fs, path) as staged:
                    fs.put_file(local, staged)
            except Exception as e:  # the store's own text may repeat the root's credentials: redacted
                get_run_logger().warning(redact(f"The Dask performance report was not kept at {url}: "
                                                f"{type(e).__name__}: {e}", url))
            else:
                publish_location(url, key="dask-performance", title="Dask performance report",
                                 note="An HTML page: paste its path into the browser's address bar "
                                      "(the UI may not link to a file).",
                                 description="distributed's performance report of this run's Dask cluster "
                                             "(task stream, worker profiles, transfers), kept with its datasets")
