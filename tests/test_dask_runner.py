"""The Dask task runner of the data flows: the local cluster listens on loopback only, and a
flow on it names its dashboard in the flow run's log and a `dask-dashboard` link artifact, and
keeps distributed's performance report under the storage root (`dask-performance`)."""
from __future__ import annotations

import asyncio
import re
import urllib.request

import psutil
import pytest

from flows.dask_runner import dask_task_runner


def listening(procs: list[psutil.Process]) -> set[tuple[str, int]]:
    found = set()
    for p in procs:
        try:
            found |= {(c.laddr.ip, c.laddr.port) for c in p.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            pass
    return found


def test_local_cluster_listens_on_loopback_only(monkeypatch):
    monkeypatch.delenv("PEARL_DASK_DASHBOARD", raising=False)
    me = psutil.Process()
    before, others = listening([me]), {p.pid for p in me.children(recursive=True)}
    with dask_task_runner(n_workers=1) as runner:
        link = runner.client.dashboard_link  # starts the cluster as a flow run does
        page = urllib.request.urlopen(link, timeout=30).read().decode()
        workers = [p for p in me.children(recursive=True) if p.pid not in others]
        opened = (listening([me]) - before) | listening(workers)
    assert workers, "the local cluster started no worker process"
    assert len(opened) >= 3, opened  # scheduler, dashboard, worker (and its nanny)
    assert {ip for ip, _ in opened} == {"127.0.0.1"}, opened
    assert link.startswith("http://127.0.0.1:")
    # The dashboard draws its pages with bokeh; without it /status is one line asking for it.
    assert "bokeh>=" not in page and "Dask needs" not in page, page[:300]


def test_dashboard_address_is_an_explicit_switch(monkeypatch):
    monkeypatch.setenv("PEARL_DASK_DASHBOARD", "0.0.0.0:8790")
    assert dask_task_runner().cluster_kwargs["dashboard_address"] == "0.0.0.0:8790"
    monkeypatch.delenv("PEARL_DASK_DASHBOARD")
    assert dask_task_runner().cluster_kwargs["dashboard_address"] == "127.0.0.1:8787"


def test_a_flow_run_links_its_dashboard_and_keeps_its_performance_report(tmp_path):
    """Two runs on one Prefect API: one on a local root, one failing on an fsspec (memory://) root.
    Each links its live dashboard, saying it is live only while the run runs, and keeps
    distributed's performance report of its body as <root>/run_reports/<flow run id>/, linked as
    `dask-performance`, the failed one too."""
    import fsspec
    from prefect import flow, task
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler
    from prefect.testing.utilities import prefect_test_harness

    from flows.dask_runner import dask_run_records, performance_report_url

    @task
    def double(x: int) -> int:
        return 2 * x

    @flow(task_runner=dask_task_runner(n_workers=1))
    def on_dask(storage_root: str, fail: bool) -> list[int]:
        with dask_run_records(storage_root):
            doubled = double.map([1, 2]).result()
            if fail:
                raise RuntimeError("the body failed")
            return doubled

    async def read(run_id):
        async with get_client() as client:
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
            arts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
        return [entry.message for entry in logs], {a.key: a for a in arts if a.key}  # keyless: the result

    local, remote = str(tmp_path / "store"), "memory://pearl-dask-report-test/store"
    with prefect_test_harness(server_startup_timeout=120):
        states = [on_dask(local, False, return_state=True), on_dask(remote, True, return_state=True)]
        APILogHandler().flush()  # send the queued logs before reading them
        ids = [state.state_details.flow_run_id for state in states]
        runs = [asyncio.run(read(run_id)) for run_id in ids]
        assert states[0].result() == [2, 4]
        with pytest.raises(RuntimeError, match="the body failed"):  # the body's own error, not the report's
            states[1].result()
    for (messages, arts), root, run_id in zip(runs, (local, remote), ids):
        links = [m.removeprefix("Dask dashboard: ") for m in messages if m.startswith("Dask dashboard: ")]
        assert len(links) == 1 and links[0].startswith("http://127.0.0.1:"), messages
        link = links[0]
        assert set(arts) == {"dask-dashboard", "dask-performance"}
        assert arts["dask-dashboard"].type == "markdown"  # a link is stored as markdown
        assert f"]({link})" in arts["dask-dashboard"].data
        assert "while this run runs only" in arts["dask-dashboard"].description
        url = performance_report_url(root, run_id)
        assert url.endswith(f"/run_reports/{run_id}/dask-performance.html")
        assert f"```text\n{url}\n```" in arts["dask-performance"].data  # a path to copy, not a file:// link
        with fsspec.open(url, "r") as f:
            report = f.read()
        # distributed's report: its title, and the task stream of the body's tasks; self-contained
        assert "Dask Performance Report" in report and "double" in report, report[:300]
        assert not re.search(r"<script[^>]+src=", report), "the report loads a script from elsewhere"
    assert [p.name for p in (tmp_path / "store" / "run_reports" / str(ids[0])).iterdir()] == ["dask-performance.html"]


class Started(Exception):
    pass


@pytest.mark.parametrize("flow_module, flow_name", [("flows.build_corpus", "corpus_stages"),
                                                    ("flows.evaluate", "score_models"), ("flows.link", "link_stages")])
def test_the_dask_flows_keep_their_records_first(monkeypatch, flow_module, flow_name):
    import importlib
    import inspect

    module = importlib.import_module(flow_module)
    roots = []

    def records(storage_root):
        roots.append(storage_root)
        raise Started

    monkeypatch.setattr(module, "dask_run_records", records)
    fn = getattr(module, flow_name).fn
    with pytest.raises(Started):  # before any stage runs: no other argument is looked at
        fn(**{name: "ROOT" if name == "storage_root" else None for name in inspect.signature(fn).parameters})
    assert roots == ["ROOT"]  # the records go under the run's own storage root
