"""Session fixtures of the end-to-end tests: one real Prefect stack and the corpus its first run builds.

`stack` starts the server (UI on), the two process work pools of prefect.yaml (local-process and
gpu) with a worker each, and deploys prefect.yaml (scripts/deploy.sh); `first` runs build-corpus/wiki on a slice of
the real sample dump. Shared by test_e2e.py (the corpus, train) and test_e2e_retrain.py
(retrain, the schedule, the gate, the UI in a browser). Teardown fails on any survivor.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.prefect_stack import POOL, Stack

GPU_POOL = "gpu"
DEPLOYMENT = "build-corpus/wiki"
MAX_PAGES = 60
PAGES_PER_PARTITION = 20
RUN_TIMEOUT = 600  # seconds for one flow run (about 45 s on 2 cores alone; longer beside the other test process)
# The scheduler and the deployment concurrency queue poll every 5 s instead of 60 / 30.
FAST_SERVICES = {"PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5",
                 "PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS": "5"}


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    """One server (UI on), the CPU and GPU process pools with a worker each, prefect.yaml deployed."""
    # PEARL_SCHEDULE=on: deployed as in production, with retrain/weekly's schedule on.
    s = Stack(tmp_path_factory.mktemp("e2e"), ui=True, pools=(POOL, GPU_POOL),
              env={**FAST_SERVICES, "PEARL_SCHEDULE": "on"})
    try:
        s.start()
        # The one way to deploy (scripts/run.sh uses it too): the stored pull step keeps
        # `{{ $PEARL_PROJECT_DIR }}`, which each flow run resolves from the worker's environment.
        s.run(["bash", "scripts/deploy.sh"], timeout=300)
        yield s
    finally:
        survivors = s.stop()
        assert not survivors, f"processes left running after teardown: {survivors}"


# --- one run of the deployment -----------------------------------------------------------
def run_deployment(stack: Stack, storage_root: Path, name: str, deployment: str = DEPLOYMENT,
                   params: dict | None = None, timeout: float = RUN_TIMEOUT, expect_completed: bool = True) -> dict:
    if params is None:
        params = {"read": {"max_pages": MAX_PAGES, "pages_per_partition": PAGES_PER_PARTITION}}
    # The CLI parses each value as JSON when it can: strings and ints go as they are, the rest as JSON.
    plain = (lambda v: isinstance(v, (str, int)) and not isinstance(v, bool))
    param_args = [a for k, v in params.items() for a in ("--param", f"{k}={v if plain(v) else json.dumps(v)}")]
    out = stack.cli(
        "deployment", "run", deployment,
        "--param", f"storage_root={storage_root}",
        *param_args,
        "--flow-run-name", name,
        "--watch", "--watch-timeout", str(int(timeout)),
        timeout=timeout + 30, check=False,
    )

    async def read(client):
        from prefect.client.schemas.filters import (
            ArtifactFilter, ArtifactFilterFlowRunId, FlowRunFilter, FlowRunFilterName, FlowRunFilterParentFlowRunId,
        )
        from prefect.client.schemas.sorting import ArtifactSort

        runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
        assert len(runs) == 1, f"expected one flow run named {name}, found {len(runs)}"
        run = runs[0]
        result = await run.state.aresult(raise_on_failure=False) if run.state.is_completed() else None
        # The artifacts are made by tasks of the subflows (and their subflows).
        run_ids, frontier = [run.id], [run.id]
        while frontier:
            children = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)))
            frontier = [c.id for c in children]
            run_ids += frontier
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=run_ids)),
            sort=ArtifactSort.CREATED_DESC)
        return run, result, artifacts

    run, result, artifacts = stack.api(read)
    if not expect_completed:
        return {"run": run, "result": result, "artifacts": artifacts, "cli": out.stdout}
    assert out.returncode == 0 and run.state.is_completed(), (
        f"flow run {name} ended {run.state.type.value} ({run.state.message}); CLI exited {out.returncode}:\n"
        f"{out.stdout[-4000:]}\n{stack.log_tails()}")
    return {"run": run, "result": result, "artifacts": artifacts, "cli": out.stdout}


@pytest.fixture(scope="session")
def first(stack, tmp_path_factory):
    storage_root = tmp_path_factory.mktemp("storage")
    return {"storage_root": storage_root, **run_deployment(stack, storage_root, "e2e-first")}
