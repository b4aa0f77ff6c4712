"""build-corpus on a real cluster: a Prefect server on PostgreSQL and an existing Dask cluster.

Starts PostgreSQL (initdb in a temporary directory, loopback only), `prefect server start` on
it, and a `dask scheduler` with two `dask worker` processes; then runs `build_corpus` with
`dask_address` pointing at that scheduler, in a process of its own with PREFECT_API_URL at the
server, as docs/running-at-scale.md describes. Checks the run in the API and in PostgreSQL's
tables, the datasets it wrote, and that its tasks ran on those workers (a flow that started a
local cluster would leave them idle). Teardown stops everything by pid and fails on survivors.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.cluster_stack import DaskCluster, Postgres, find_postgres_bin, sweep
from tests.prefect_stack import ROOT, Stack, stop_tree

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

MAX_PAGES = 40
PAGES_PER_PARTITION = 20
RUN_TIMEOUT = 480  # seconds for the flow run (under a minute on 2 busy cores; the test about 1 min)
RUN_NAME = "real-cluster"
# Stages mapped over parts and buckets: these go to the Dask cluster (the plans and commits run in the flow).
MAPPED = {"extract_part_task", "mine_chunk_task", "phrase_bucket_task", "training_set_part_task"}

# The flow run as a deployment's flow-run process would do it: its own process, the stack's env.
RUN_FLOW = textwrap.dedent("""
    import json, sys
    from flows.build_corpus import build_corpus

    params, name, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    state = build_corpus.with_options(flow_run_name=name)(**params, return_state=True)
    result = state.result(raise_on_failure=False) if state.is_completed() else None
    with open(out, "w") as f:
        json.dump({"flow_run_id": str(state.state_details.flow_run_id), "state": state.type.value,
                   "message": state.message, "result": result}, f, default=str)
""")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL binaries (initdb, postgres, pg_ctl) in /usr/lib/postgresql/*/bin or on PATH")
    tmp = tmp_path_factory.mktemp("real-cluster")
    pg = Postgres(bin_dir, logs=tmp / "logs")  # made by Stack; every log lands there
    # No work pool: the flow runs in a process of the test's, as a flow-run process would.
    stack = Stack(tmp, pools=(), env={"PREFECT_API_DATABASE_CONNECTION_URL": pg.url})
    # The workers run Prefect tasks: they report to the same server and persist results alike.
    dask = DaskCluster(tmp, stack.logs, env=stack.env)
    survivors: list[str] = []
    try:
        pg.start()
        stack.start()
        dask.start()
        yield {"pg": pg, "stack": stack, "dask": dask, "tmp": tmp}
    finally:
        # Dask before the server its tasks report to, the server before its database.
        for stop in (dask.stop, lambda: survivors.extend(stack.stop()), lambda: survivors.extend(pg.stop())):
            try:
                stop()
            except Exception as e:  # go on stopping the rest
                survivors.append(f"stopping failed: {e!r}")
        survivors += sweep(stack.tag) + sweep(pg.tag)
        assert not survivors, f"processes left running after teardown: {survivors}"


@pytest.fixture(scope="module")
def run(cluster):
    stack, dask = cluster["stack"], cluster["dask"]
    tmp: Path = cluster["tmp"]
    with dask.client() as c:
        executed_before = c.run(lambda dask_worker: dask_worker.state.executed_count)
    storage_root = tmp / "store"
    params = {"source": "sample", "storage_root": str(storage_root), "dask_address": dask.address,
              "read": {"max_pages": MAX_PAGES, "pages_per_partition": PAGES_PER_PARTITION}}
    out_file = tmp / "run.json"
    log = open(stack.logs / "flow.log", "ab")
    try:
        proc = subprocess.Popen([sys.executable, "-c", RUN_FLOW, json.dumps(params), RUN_NAME, str(out_file)],
                                cwd=ROOT, env=stack.env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()
    try:
        proc.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        stop_tree([proc])
        pytest.fail(f"the flow ran over {RUN_TIMEOUT}s\n{stack.log_tails()}")
    assert proc.returncode == 0 and out_file.exists(), (
        f"the flow process exited {proc.returncode}\n{stack.log_tails()}")
    out = json.loads(out_file.read_text())
    assert out["state"] == "COMPLETED", f"flow ended {out['state']}: {out['message']}\n{stack.log_tails()}"

    with dask.client() as c:
        executed = c.run(lambda dask_worker: dask_worker.state.executed_count)
        prefixes = c.run_on_scheduler(
            lambda dask_scheduler: {name: dict(p.state_counts) for name, p in dask_scheduler.task_prefixes.items()})
    return {**out, "storage_root": storage_root,
            "executed": {w: n - executed_before.get(w, 0) for w, n in executed.items()}, "prefixes": prefixes}


def test_flow_run_completed_in_the_api_and_in_postgres(cluster, run):
    stack, pg = cluster["stack"], cluster["pg"]

    async def read(client):
        from prefect.client.schemas.filters import (
            FlowRunFilter, FlowRunFilterParentFlowRunId, TaskRunFilter, TaskRunFilterFlowRunId,
        )
        from prefect.client.schemas.sorting import TaskRunSort

        flow_run = await client.read_flow_run(run["flow_run_id"])
        # The stages run in the corpus-stages subflow: its parent is a task run of this flow.
        subflows = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run.id])))
        task_runs, page = [], None
        while page is None or len(page) == 200:  # the API's largest page
            page = await client.read_task_runs(
                task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[s.id for s in subflows])),
                sort=TaskRunSort.ID_DESC, offset=len(task_runs), limit=200)
            task_runs += page
        return flow_run, subflows, task_runs

    flow_run, subflows, task_runs = stack.api(read)
    assert flow_run.name == RUN_NAME and flow_run.state.is_completed(), flow_run.state
    assert [s.state.type.value for s in subflows] == ["COMPLETED"]
    assert task_runs and all(t.state.is_completed() for t in task_runs), \
        sorted({(t.name, t.state.type.value) for t in task_runs if not t.state.is_completed()})

    # What the API said is what PostgreSQL holds: the server keeps nothing in SQLite.
    rows = pg.fetch("SELECT name, state_type::text AS state FROM flow_run WHERE id = $1", flow_run.id)
    assert rows == [{"name": RUN_NAME, "state": "COMPLETED"}]
    counted = pg.fetch("SELECT count(*) AS n FROM task_run WHERE flow_run_id = $1 AND state_type = 'COMPLETED'",
                       subflows[0].id)
    assert counted[0]["n"] == len(task_runs) > 0
    assert not list((stack.tmp / "prefect-home").glob("*.db")), "the server wrote a SQLite database"


def test_datasets_written_to_storage(run):
    root: Path = run["storage_root"]
    result = run["result"]
    assert result["pages_read"] == MAX_PAGES
    versions = result["versions"]
    for name in ("raw_pages", "pages", "sentences", "phrases", "word_vectors", "negatives", "training_set"):
        d = root / name / versions[name]
        manifest = json.loads((d / "_manifest.json").read_text())
        parts = sorted(d.glob("part-*.parquet"))
        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
        assert rows == manifest["rows"] > 0, f"{name}: {rows} rows in Parquet, {manifest['rows']} in the manifest"
    assert result["training_set"]["rows"] == json.loads(
        (root / "training_set" / versions["training_set"] / "_manifest.json").read_text())["rows"]
    assert json.loads((root / "training_set" / "_latest.json").read_text())["version"] == versions["training_set"]


def test_tasks_ran_on_the_external_workers(run):
    executed, prefixes = run["executed"], run["prefixes"]
    assert len(executed) == 2 and all(n > 0 for n in executed.values()), \
        f"tasks executed per worker of the external cluster: {executed}"
    ran = {name for name, counts in prefixes.items() if counts.get("memory")}  # finished, result held
    assert MAPPED <= ran, f"task prefixes the scheduler saw: {sorted(prefixes)}"
