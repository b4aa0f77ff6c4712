"""build-corpus on a real cluster with no shared disk: a Prefect server on PostgreSQL, an existing
Dask cluster, and an S3-compatible server as the only place they share (issue 67, item 4).

Starts PostgreSQL (initdb in a temporary directory, loopback only), `prefect server start` on
it, and a `dask scheduler` with two `dask worker` processes, each in a directory of its own
(working directory, HOME, TMPDIR, PEARL_CACHE, PREFECT_HOME), confined so that file modes bind
them (tests/cluster_stack.py); the flow's folders and the test's have mode 000. The storage
root is a bucket of moto's S3 server (tests/s3_stack.py), and so is Prefect's result storage (a
`remote-file-system` block, PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK); credentials and endpoint
only in the environment. Then runs `build_corpus` with `dask_address` pointing at that scheduler,
in a process of its own with PREFECT_API_URL at the server, as docs/running-at-scale.md describes.
Checks the run in the API and in PostgreSQL's tables, that its tasks ran on those workers (a flow
that started a local cluster would leave them idle) and persisted their results in the bucket,
and that its datasets equal the same build on local disk (run in-process, `corpus_wiring` with the
task bodies, while the servers start). Then deploys prefect.yaml, starts a worker on the `gpu` pool
set up as the Dask workers are, and runs `retrain` on the same corpus (reused) in the flow's process,
its training through `train/pearl-gpu` (a tiny random-weight backbone, two steps): the training run's
result is read back from the bucket, where the test finds it, and from no local folder. Teardown
stops everything by pid and fails on survivors.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pearl_model.inference.backbones import cache_root
from storage.contents import dataset_contents
from storage.datasets import Dataset, latest_version
from storage.registry import ModelRegistry
from tasks.evaluation import default_benchmark_dir
from tests.cluster_stack import DaskCluster, Postgres, confined, find_postgres_bin, machine_home, sweep
from tests.e2e_fixtures import GPU_POOL
from tests.prefect_stack import ROOT, Stack, stop_tree
from tests.test_train_flow import tiny_backbone, tiny_training  # noqa: F401  (the tiny random BERT fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

MAX_PAGES = 40
PAGES_PER_PARTITION = 20
RUN_TIMEOUT = 900  # seconds for the flow run (a few minutes on 2 cores; over 8 when other tests load them)
RUN_NAME = "real-cluster"
RETRAIN_NAME = "real-cluster-retrain"
TRAIN_DEPLOYMENT = "train/pearl-gpu"  # what retrain/weekly trains through
RESULTS_BLOCK = "pearl-results"  # the remote-file-system block of Prefect's result storage
DATASETS = ("raw_pages", "pages", "sentences", "phrases", "word_vectors", "negatives", "training_set")
# Stages mapped over parts and buckets: these go to the Dask cluster (the plans and commits run in the flow).
MAPPED = {"extract_part_task", "mine_chunk_task", "phrase_bucket_task", "training_set_part_task"}

# A flow run as a deployment's flow-run process would do it: its own process, the stack's env.
RUN_FLOW = textwrap.dedent("""
    import importlib, json, sys

    module, _, attr = sys.argv[1].partition(":")
    params, name, out = json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    flow = getattr(importlib.import_module(module), attr)
    state = flow.with_options(flow_run_name=name)(**params, return_state=True)
    result = state.result(raise_on_failure=False) if state.is_completed() else None
    with open(out, "w") as f:
        json.dump({"flow_run_id": str(state.state_details.flow_run_id), "state": state.type.value,
                   "message": state.message, "result": result}, f, default=str)
""")

# The same build on local disk: the flow's wiring with each task body called in this process (no
# Prefect, no cluster), with the arguments build_corpus gives it; it prints the versions it wrote.
BUILD_ON_DISK = textwrap.dedent("""
    import json, sys
    from benchmarks.stage_rates import wiring_args
    from flows.build_corpus import corpus_wiring
    from tests.test_incremental_corpus import InProcess

    root, overrides, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    built = corpus_wiring(InProcess(), **wiring_args("sample", root, 1, overrides))
    with open(out, "w") as f:
        json.dump(built["versions"], f)
""")
# Made in the bucket through the API (Prefect's own block type; s3fs reads the endpoint from the environment).
SAVE_RESULTS_BLOCK = textwrap.dedent("""
    import sys
    from prefect.filesystems import RemoteFileSystem

    RemoteFileSystem(basepath=sys.argv[1]).save(sys.argv[2], overwrite=True)
""")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server):
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL binaries (initdb, postgres, pg_ctl) in /usr/lib/postgresql/*/bin or on PATH")
    tmp = tmp_path_factory.mktemp("real-cluster")
    bucket = s3_server.bucket()
    pg = Postgres(bin_dir, logs=tmp / "logs")  # made by Stack; every log lands there
    # No work pool: the flow runs in a process of the test's, as a flow-run process would. Its results
    # (and its tasks', on the workers) go to the bucket: no process reads another's local disk.
    stack = Stack(tmp, pools=(), env={"PREFECT_API_DATABASE_CONNECTION_URL": pg.url,
                                      "PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK": f"remote-file-system/{RESULTS_BLOCK}"})
    # The workers run Prefect tasks: they report to the same server and persist results alike. Each
    # gets the converted E5 backbone in its own PEARL_CACHE, as a worker's image would carry it.
    dask = DaskCluster(tmp, stack.logs, env=stack.env,
                       seed_cache=tuple(p for p in (cache_root() / "backbones", cache_root() / "onnx") if p.is_dir()))
    # The build to compare with, on local disk, while the servers start (its own process, stopped by pid).
    disk_root, disk_versions = tmp / "disk-store", tmp / "disk-versions.json"
    with open(stack.logs / "disk-build.log", "ab") as log:
        disk = subprocess.Popen([sys.executable, "-c", BUILD_ON_DISK, str(disk_root), json.dumps(OVERRIDES),
                                 str(disk_versions)], cwd=ROOT, env={**stack.env, "PYTHONPATH": str(ROOT)},
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    survivors: list[str] = []
    try:
        pg.start()
        stack.start()
        stack.run([sys.executable, "-c", SAVE_RESULTS_BLOCK, f"s3://{bucket}/prefect-results", RESULTS_BLOCK])
        dask.start()
        yield {"pg": pg, "stack": stack, "dask": dask, "tmp": tmp, "bucket": bucket, "disk": disk,
               "disk_root": disk_root, "disk_versions": disk_versions}
    finally:
        # Dask before the server its tasks report to, the server before its database.
        for stop in (lambda: stop_tree([disk]), dask.stop, lambda: survivors.extend(stack.stop()),
                     lambda: survivors.extend(pg.stop())):
            try:
                stop()
            except Exception as e:  # go on stopping the rest
                survivors.append(f"stopping failed: {e!r}")
        survivors += sweep(stack.tag) + sweep(pg.tag)
        assert not survivors, f"processes left running after teardown: {survivors}"


OVERRIDES = {"max_pages": MAX_PAGES, "pages_per_partition": PAGES_PER_PARTITION}


@pytest.fixture(scope="module")
def flow_home(cluster) -> Path:
    """The flow runs' process has its own folders too, which the workers cannot read (mode 000: the
    flow, as root, still can; the confined workers cannot), nor the test's."""
    home = cluster["tmp"] / "flow-home"
    for sub in ("tmp", "cache"):
        (home / sub).mkdir(parents=True)
    if os.geteuid() == 0:
        for d in (home, cluster["tmp"]):
            d.chmod(0)
    return home


def run_flow(cluster, flow_home: Path, flow: str, params: dict, name: str) -> dict:
    """Run `flow` ("module:function") in a process of its own in `flow_home`; what RUN_FLOW wrote,
    the run completed."""
    stack = cluster["stack"]
    out_file = cluster["tmp"] / f"{name}.json"
    # PREFECT_LOCAL_STORAGE_PATH stays the stack's (tmp/results): a run that persisted a result on
    # local disk would put it there
    env = {**stack.env, "HOME": str(flow_home), "TMPDIR": str(flow_home / "tmp"),
           "PEARL_CACHE": str(flow_home / "cache"), "PYTHONPATH": str(ROOT)}
    log = open(stack.logs / f"flow-{name}.log", "ab")
    try:
        proc = subprocess.Popen([sys.executable, "-c", RUN_FLOW, flow, json.dumps(params), name, str(out_file)],
                                cwd=flow_home, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()
    try:
        proc.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        stop_tree([proc])
        pytest.fail(f"the flow {flow} ran over {RUN_TIMEOUT}s\n{stack.log_tails()}")
    assert proc.returncode == 0 and out_file.exists(), (
        f"the flow process exited {proc.returncode}\n{stack.log_tails()}")
    out = json.loads(out_file.read_text())
    assert out["state"] == "COMPLETED", f"{flow} ended {out['state']}: {out['message']}\n{stack.log_tails()}"
    return out


@pytest.fixture(scope="module")
def run(cluster, flow_home):
    dask = cluster["dask"]
    tmp: Path = cluster["tmp"]
    with dask.client() as c:
        executed_before = c.run(lambda dask_worker: dask_worker.state.executed_count)
    storage_root = f"s3://{cluster['bucket']}/pearl"
    params = {"source": "sample", "storage_root": storage_root, "dask_address": dask.address,
              "read": {"max_pages": MAX_PAGES, "pages_per_partition": PAGES_PER_PARTITION}}
    out = run_flow(cluster, flow_home, "flows.build_corpus:build_corpus", params, RUN_NAME)

    with dask.client() as c:
        executed = c.run(lambda dask_worker: dask_worker.state.executed_count)
        prefixes = c.run_on_scheduler(
            lambda dask_scheduler: {name: dict(p.state_counts) for name, p in dask_scheduler.task_prefixes.items()})
        # What a worker sees of the flow's folders and of the test's: nothing.
        seen = c.run(_readable, [str(flow_home), str(tmp), str(cluster["disk_root"])])
    return {**out, "storage_root": storage_root, "seen": seen,
            "executed": {w: n - executed_before.get(w, 0) for w, n in executed.items()}, "prefixes": prefixes}


def _readable(paths: list[str]) -> dict:
    """{path: whether this process can list it} (run on each worker)."""
    out = {}
    for p in paths:
        try:
            os.listdir(p)
            out[p] = True
        except OSError:
            out[p] = False
    return out


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


def test_datasets_written_to_the_bucket_equal_the_build_on_local_disk(cluster, run):
    root = run["storage_root"]
    result = run["result"]
    assert result["pages_read"] == MAX_PAGES
    versions = result["versions"]
    for name in DATASETS:
        # every part's footer read from the bucket and checked against the manifest's count
        assert sum(p.rows for p in Dataset(root, name, versions[name], None).parts(verify=True)) > 0, name
    assert latest_version(root, "training_set") == versions["training_set"]

    disk = cluster["disk"]
    try:
        disk.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the build on local disk ran over {RUN_TIMEOUT}s")
    assert disk.returncode == 0, (cluster["stack"].logs / "disk-build.log").read_text(errors="replace")[-4000:]
    on_disk = json.loads(cluster["disk_versions"].read_text())
    assert on_disk == versions
    assert dataset_contents(root, versions) == dataset_contents(cluster["disk_root"], on_disk)


def test_workers_see_no_local_folder_of_the_flow_and_results_are_in_the_bucket(cluster, run):
    import fsspec

    if os.geteuid() == 0:  # not root: workers and flow are one user, their folders separate but not closed
        assert run["seen"] and not any(v for seen in run["seen"].values() for v in seen.values()), run["seen"]
    # the task runs on the workers persisted their results where the flow can read them: the bucket
    assert fsspec.filesystem("s3").ls(f"{cluster['bucket']}/prefect-results")


def test_tasks_ran_on_the_external_workers(run):
    executed, prefixes = run["executed"], run["prefixes"]
    assert len(executed) == 2 and all(n > 0 for n in executed.values()), \
        f"tasks executed per worker of the external cluster: {executed}"
    ran = {name for name, counts in prefixes.items() if counts.get("memory")}  # finished, result held
    assert MAPPED <= ran, f"task prefixes the scheduler saw: {sorted(prefixes)}"


# --- retrain: training on the GPU pool's worker, its result read back through the bucket -------------
@pytest.fixture(scope="module")
def gpu_pool(cluster, tiny_backbone):  # noqa: F811  (the imported fixture)
    """prefect.yaml deployed (scripts/deploy.sh) and a worker on the `gpu` pool, set up as a machine of
    its own like the Dask workers (tests/cluster_stack.py): its own folders, confined, the tiny backbone
    in its PEARL_CACHE as its image would carry it. Stopped by pid, its folders removed."""
    stack = cluster["stack"]
    stack.run(["bash", "scripts/deploy.sh"], timeout=300)
    home, env = machine_home("gpu-worker", stack.env, seed=(Path(tiny_backbone),))
    worker = None
    try:
        worker = stack.start_worker(GPU_POOL, machine=(confined(), home, env))
        yield {"home": home, "env": env, "backbone": str(home / "cache" / Path(tiny_backbone).name)}
    finally:
        if worker is not None:
            stop_tree([worker])
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def retrained(cluster, flow_home, run, gpu_pool):
    """`retrain` in the flow's process on the same corpus (every stage reused) with its training step on
    the GPU pool (train/pearl-gpu): a tiny random-weight backbone, two steps; evaluation on the Dask
    workers, limited to one benchmark dataset."""
    bench = default_benchmark_dir()
    if bench is None:
        pytest.skip("the gate needs the PEARL benchmark files ($PEARL_BENCHMARKS)")
    params = {"source": "sample", "storage_root": run["storage_root"], "corpus": OVERRIDES,
              "training": tiny_training(gpu_pool["backbone"]), "train_deployment": TRAIN_DEPLOYMENT,
              "train_timeout_hours": RUN_TIMEOUT / 3600, "benchmark_datasets": ["turney"],
              "benchmark_dir": str(bench), "eval_seeds": [0, 1], "dask_address": cluster["dask"].address}
    out = run_flow(cluster, flow_home, "flows.retrain:retrain", params, RETRAIN_NAME)

    async def read(client):
        from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

        runs = await client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(
            any_=[TRAIN_DEPLOYMENT.partition("/")[2]])))
        block = await client.read_block_document_by_name(RESULTS_BLOCK, "remote-file-system")
        return runs, block.id

    trains, block_id = cluster["stack"].api(read)
    return {**out, "trains": trains, "results_block_id": block_id}


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


def test_retrain_reads_the_gpu_runs_result_from_the_bucket(cluster, run, gpu_pool, retrained):
    import fsspec
    from prefect.results import ResultRecordMetadata

    result = retrained["result"]
    assert result["corpus"] == run["result"]["versions"]  # the corpus built above, reused
    assert result["outcome"] == "promoted" and result["current_before"] is None
    # the training ran as a run of the GPU pool's deployment, in the worker's process, not in the flow's
    trains = retrained["trains"]
    assert [(t.work_pool_name, t.state.type.value) for t in trains] == [(GPU_POOL, "COMPLETED")], trains
    meta = trains[0].state.data
    # its result persisted in the bucket, through the results block, under a key relative to its base:
    # not a local file that json_result would have read from a path on this machine
    assert isinstance(meta, ResultRecordMetadata) and meta.storage_block_id == retrained["results_block_id"]
    assert not Path(meta.storage_key).is_absolute(), meta.storage_key
    s3, stored = fsspec.filesystem("s3"), f"{cluster['bucket']}/prefect-results/{meta.storage_key}"
    assert stored in s3.ls(f"{cluster['bucket']}/prefect-results", detail=False, refresh=True)
    assert json.loads(s3.cat_file(stored))["model"]["version"] == result["model"]
    # no process wrote a result to its local disk: neither the flow's process (the stack's
    # PREFECT_LOCAL_STORAGE_PATH) nor the GPU worker's
    stack = cluster["stack"]
    assert files_under(stack.results) == [] and files_under(Path(gpu_pool["env"]["PREFECT_LOCAL_STORAGE_PATH"])) == []
    # the model the GPU run trained is the registry's current one, in the bucket
    reg = ModelRegistry(run["storage_root"])
    assert reg.current_version() == result["model"]
    entry = reg.entry(result["model"])
    assert entry["training"]["steps"] == 2 and set(entry["benchmark"]["scores"]) == {"turney"}
