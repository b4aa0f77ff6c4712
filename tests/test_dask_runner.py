"""The Dask task runner of the data flows: the local cluster listens on loopback only, and a
flow on it names its dashboard in the flow run's log and a `dask-dashboard` link artifact."""
from __future__ import annotations

import asyncio
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


def test_flow_run_logs_the_dashboard_and_links_it():
    from prefect import flow, task
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, LogFilter, LogFilterFlowRunId
    from prefect.context import get_run_context
    from prefect.logging.handlers import APILogHandler
    from prefect.testing.utilities import prefect_test_harness

    from flows import dask_runner

    @task
    def double(x: int) -> int:
        return 2 * x

    @flow(task_runner=dask_task_runner(n_workers=1))
    def on_dask() -> tuple[str, str, list[int]]:
        link = dask_runner.report_dask_dashboard()
        return str(get_run_context().flow_run.id), link, double.map([1, 2]).result()

    async def read(run_id):
        async with get_client() as client:
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
            arts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
        return [entry.message for entry in logs], arts

    with prefect_test_harness(server_startup_timeout=120):
        run_id, link, doubled = on_dask()
        APILogHandler().flush()  # send the queued logs before reading them
        messages, arts = asyncio.run(read(run_id))
    assert doubled == [2, 4]
    assert link and link.startswith("http://127.0.0.1:")
    assert f"Dask dashboard: {link}" in messages
    assert [(a.key, a.type) for a in arts] == [("dask-dashboard", "markdown")]  # a link is stored as markdown
    assert f"]({link})" in arts[0].data


class Started(Exception):
    pass


@pytest.mark.parametrize("flow_module, flow_name", [("flows.build_corpus", "corpus_stages"),
                                                    ("flows.evaluate", "score_models")])
def test_the_dask_flows_report_their_dashboard_first(monkeypatch, flow_module, flow_name):
    import importlib
    import inspect

    module = importlib.import_module(flow_module)

    def report():
        raise Started

    monkeypatch.setattr(module, "report_dask_dashboard", report, raising=False)
    fn = getattr(module, flow_name).fn
    with pytest.raises(Started):  # before any stage runs: no argument is looked at
        fn(*[None] * len(inspect.signature(fn).parameters))
