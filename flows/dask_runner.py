"""The task runner the data flows use: an existing Dask cluster, or a local one."""
from __future__ import annotations

import os
from contextlib import ExitStack

from prefect import get_run_logger
from prefect.context import FlowRunContext
from prefect_dask import DaskTaskRunner

from runs.artifacts import publish_link
from runs.prefect_api import shared_api

# The dashboard has no authentication, so the local cluster's listens on loopback only;
# PEARL_DASK_DASHBOARD (host:port, e.g. 0.0.0.0:8787) opens it elsewhere on purpose.
DASHBOARD_ENV = "PEARL_DASK_DASHBOARD"
DEFAULT_DASHBOARD = "127.0.0.1:8787"  # taken: distributed picks a free port (the log says which)


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


def report_dask_dashboard() -> str | None:
    """Log the Dask dashboard's address to the running flow's log and keep it as its
    `dask-dashboard` link artifact (prefect_dask logs it to the worker's log only).
    Call at the start of a flow that runs on `dask_task_runner`; starts its cluster."""
    runner = FlowRunContext.get().task_runner
    if not isinstance(runner, DaskTaskRunner):
        return None
    link = runner.client.dashboard_link
    if not link:
        get_run_logger().info("The Dask cluster has no dashboard")
        return None
    get_run_logger().info("Dask dashboard: %s", link)
    publish_link(link, link_text=link, key="dask-dashboard",
                 description="The dashboard of this run's Dask cluster (live while the run lasts)")
    return link
