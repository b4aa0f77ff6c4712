"""`bash scripts/deploy.sh`, the one way to deploy (issue 45): against a fresh server (no work pools,
PEARL_SCHEDULE unset) it creates both process pools and the shared training limit and deploys
prefect.yaml, with the pull step's `{{ $PEARL_PROJECT_DIR }}` left for each worker to resolve; a
bad server address or auth string is one line and a non-zero exit. And the two train
deployments (one flow) never train at once: two runs of `train` against the real server hold the
`pearl-training` slot one after the other."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from flows.training_limit import TRAINING_LIMIT
from tests.prefect_stack import ROOT, Stack, free_port, stop_tree

pytestmark = pytest.mark.e2e  # a real Prefect server
DEPLOY = ["bash", "scripts/deploy.sh"]
PULL_STEP = [{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $PEARL_PROJECT_DIR }}"}}]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A server with nothing on it: no work pool, no concurrency limit, no deployment."""
    stack = Stack(tmp_path_factory.mktemp("deploy-command"), pools=())
    stack.env.pop("PEARL_SCHEDULE", None)  # as on a machine where nobody set it
    try:
        stack.start()
        yield stack
    finally:
        survivors = stack.stop()
        assert not survivors, f"processes left running: {survivors}"


def prefect_yaml_deployments() -> dict[str, dict]:
    return {d["name"]: d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]}


def test_deploy_sets_up_a_fresh_server_and_leaves_the_code_path_to_each_worker(fresh):
    # Deployed from a checkout whose environment names its own path (scripts/env.sh exports it),
    # as `prefect deploy` run by hand there would store it.
    assert fresh.env["PEARL_PROJECT_DIR"] == str(ROOT) and "PEARL_SCHEDULE" not in fresh.env
    out = fresh.run(DEPLOY, timeout=400).stdout
    assert "created process work pool local-process" in out and "created process work pool gpu" in out, out
    assert f"created global concurrency limit {TRAINING_LIMIT}" in out, out

    wanted = prefect_yaml_deployments()

    async def read(client):
        pools = {name: await client.read_work_pool(name) for name in ("local-process", "gpu")}
        limit = await client.read_global_concurrency_limit_by_name(TRAINING_LIMIT)
        deployments = await client.read_deployments()
        flows = {f.id: f.name for f in await client.read_flows()}
        return pools, limit, {f"{flows[d.flow_id]}/{d.name}": d for d in deployments}

    pools, limit, deployments = fresh.api(read)
    assert {name: pool.type for name, pool in pools.items()} == {"local-process": "process", "gpu": "process"}
    assert (limit.limit, limit.active) == (1, True)
    assert {name.split("/")[1] for name in deployments} == set(wanted)
    for name, deployment in deployments.items():
        assert deployment.work_pool_name == wanted[name.split("/")[1]]["work_pool"]["name"]
        # not the deploying checkout's path: each worker's own PEARL_PROJECT_DIR, at run time
        assert deployment.pull_steps == PULL_STEP, (name, deployment.pull_steps)
    weekly = deployments["retrain/weekly"]
    assert [s.active for s in weekly.schedules] == [False], "PEARL_SCHEDULE unset must deploy the schedule off"

    # Run again (an upgrade): nothing to create, everything deployed again.
    again = fresh.run(DEPLOY, timeout=400).stdout
    assert "[deploy] created" not in again, again


def test_a_worker_resolves_the_pull_step_to_its_own_code(fresh, tmp_path, monkeypatch):
    """What the flow-run process does before loading the flow (prefect.flows.load_flow_from_flow_run):
    run the stored pull steps in its environment, here a worker's whose code is somewhere else."""
    from prefect.deployments.steps.core import run_steps

    elsewhere = tmp_path / "worker-checkout"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)  # the step changes directory; monkeypatch restores it
    monkeypatch.setenv("PEARL_PROJECT_DIR", str(elsewhere))

    async def pull(client):
        deployment = await client.read_deployment_by_name("train/pearl-gpu")
        return await run_steps(deployment.pull_steps)

    assert fresh.api(pull)["directory"] == str(elsewhere)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    lines = result.stdout.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1 and "Traceback" not in result.stdout, result.stdout
    return lines[0]


def test_an_unreachable_server_is_one_line(fresh):
    url = f"http://127.0.0.1:{free_port()}/api"  # nothing listens there
    line = one_line_error(fresh.run(DEPLOY, env={"PREFECT_API_URL": url}, check=False, timeout=120))
    assert line.startswith("[deploy] error: cannot reach the Prefect API at " + url), line


def test_without_prefect_api_url_it_deploys_to_this_checkouts_local_server(fresh):
    port = free_port()  # nothing listens there: the command stops at its check, before any change
    unset = {"PREFECT_API_URL": None, "PREFECT_API_AUTH_STRING": None}
    line = one_line_error(fresh.run(DEPLOY, env={**unset, "PEARL_PREFECT_PORT": str(port)}, check=False))
    assert line.startswith(f"[deploy] error: cannot reach the Prefect API at http://127.0.0.1:{port}/api"), line


@pytest.mark.parametrize("auth", ["pearl:not-the-password", None])  # None: not set
def test_a_refused_auth_string_is_one_line(fresh, auth):
    run = fresh.run(DEPLOY, env={"PREFECT_API_AUTH_STRING": auth}, check=False, timeout=120)
    line = one_line_error(run)
    assert "401 Unauthorized" in line and fresh.api_url in line, line
    assert ("does not accept" if auth else "no PREFECT_API_AUTH_STRING") in line, line


# --- the training limit ------------------------------------------------------------------------
# One `train` run (train/pearl or train/pearl-gpu: the same flow) with its steps replaced: the
# training set step waits until both runs are there, so both reach the training steps together;
# the training step notes when it ran and how many slots of the limit were taken meanwhile.
TRAIN_RUN = r"""
import json, sys, time
from pathlib import Path

import flows.train as train_flow
from flows.training_limit import TRAINING_LIMIT
from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound

out, me = Path(sys.argv[1]), sys.argv[2]


def both_ready(*args, **kwargs):
    (out / f"ready-{me}").touch()
    deadline = time.monotonic() + 180
    while len(list(out.glob("ready-*"))) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("the other training run never got ready")
        time.sleep(0.05)
    return "training-set"


def training(*args, **kwargs):
    start = time.time()
    with get_client(sync_client=True) as client:
        try:
            taken = client.read_global_concurrency_limit_by_name(TRAINING_LIMIT).active_slots
        except ObjectNotFound:
            taken = 0
    time.sleep(3)
    (out / f"trained-{me}.json").write_text(json.dumps({"start": start, "end": time.time(), "taken": taken}))


train_flow.resolve_training_set_task = both_ready
train_flow.char_encoder_task = lambda *args, **kwargs: {"fileset": None}
train_flow.plan_model_task = lambda *args, **kwargs: "model"
train_flow.train_model_task = training
train_flow.training_report_task = lambda model: {"version": me}
print(json.dumps(train_flow.train(char_target="glove", evaluate_model=False)))
"""


def test_two_trainings_never_hold_the_training_slot_at_once(fresh, tmp_path):
    script = tmp_path / "train_run.py"
    script.write_text(TRAIN_RUN)
    runs = {me: subprocess.Popen([sys.executable, str(script), str(tmp_path), me], cwd=ROOT, env=fresh.env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, start_new_session=True)
            for me in ("pearl", "pearl-gpu")}
    try:
        outputs = {me: run.communicate(timeout=300)[0] for me, run in runs.items()}
    finally:
        stop_tree(list(runs.values()))
    for me, run in runs.items():
        assert run.returncode == 0, f"{me}:\n{outputs[me][-4000:]}"
        assert json.loads(outputs[me].strip().splitlines()[-1]) == {"model": {"version": me}}

    first, second = sorted((json.loads((tmp_path / f"trained-{me}.json").read_text()) for me in runs),
                           key=lambda t: t["start"])
    assert first["end"] <= second["start"], f"the two trainings overlapped: {first} {second}"
    assert first["taken"] == second["taken"] == 1, "each training held the limit's one slot"

    async def read(client):
        return await client.read_global_concurrency_limit_by_name(TRAINING_LIMIT)

    assert fresh.api(read).active_slots == 0, "the slot is given back after training"
