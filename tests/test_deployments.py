"""prefect.yaml: every deployment runs one at a time, and the weekly retrain's schedule is on
only where it is deployed with PEARL_SCHEDULE=on (deployed for real on a throwaway server)."""
from __future__ import annotations

import subprocess
import time

import pytest
import yaml

from tests.prefect_stack import POOL, ROOT, Stack

RETRAIN = "retrain/weekly"


def deployments() -> dict[str, dict]:
    config = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return {d["name"]: d for d in config["deployments"]}


def test_every_deployment_runs_one_at_a_time():
    found = {name: d.get("concurrency_limit") for name, d in deployments().items()}
    assert set(found) >= {"wiki", "benchmark", "tables", "pearl", "pearl-gpu", "weekly"}
    assert found == {name: {"limit": 1, "collision_strategy": "ENQUEUE"} for name in found}


def test_link_tables_runs_the_link_flow_with_its_parameters():
    import inspect

    from flows.link import link

    d = deployments()["tables"]
    assert d["entrypoint"] == "flows/link.py:link" and link.name == "link"  # `link/tables`
    signature = inspect.signature(link.fn).parameters
    assert set(d["parameters"]) <= set(signature)
    assert {"left", "right", "left_column", "right_column", "model", "top_k", "threshold", "labels", "precision",
            "dedupe", "storage_root"} <= set(signature)
    assert signature["model"].default == d["parameters"]["model"] == "current"
    assert d["work_pool"]["name"] == "local-process"


def test_only_weekly_is_scheduled():
    scheduled = {name: d["schedules"] for name, d in deployments().items() if d.get("schedules")}
    assert list(scheduled) == ["weekly"]
    assert [s["cron"] for s in scheduled["weekly"]] == ["0 3 * * 1"]


@pytest.mark.parametrize("given, expect", [(None, "off"), ("on", "on"), ("off", "off")])
def test_env_sh_defaults_the_schedule_to_off(given, expect):
    set_it = "unset PEARL_SCHEDULE" if given is None else f"export PEARL_SCHEDULE={given}"
    out = subprocess.run(["bash", "-c", f'{set_it}; . scripts/env.sh; echo "$PEARL_SCHEDULE"'],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == expect


def test_env_sh_has_the_server_stream_logs_for_watch():
    """`prefect deployment run --watch` prints a run's logs (runs/progress.py's stage lines and summary)
    only from a server that streams them, off by default; the services start with env.sh's settings."""
    names = ["PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED", "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED"]
    out = subprocess.run(["bash", "-c", ". scripts/env.sh; " + "; ".join(f'echo "${n}"' for n in names)],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["true", "true"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # The scheduler service polls every 2 s instead of 60.
    stack = Stack(tmp_path_factory.mktemp("deploy"), pools=(),
                  env={"PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2"})
    try:
        stack.start()
        stack.cli("work-pool", "create", POOL, "--type", "process")
        yield stack
    finally:
        survivors = stack.stop()
        assert not survivors, f"processes left running: {survivors}"


def deploy(stack: Stack, schedule: str) -> tuple[list[bool], list]:
    """Deploy retrain/weekly and build-corpus/wiki with PEARL_SCHEDULE=schedule; return the
    weekly cron's `active` flags and the deployments as the server has them."""
    stack.env["PEARL_SCHEDULE"] = schedule
    stack.cli("--no-prompt", "deploy", "--name", "weekly", "--name", "wiki", timeout=300)

    async def read(client):
        return [await client.read_deployment_by_name(name) for name in (RETRAIN, "build-corpus/wiki")]

    deps = stack.api(read)
    return [s.active for s in deps[0].schedules if getattr(s.schedule, "cron", None) == "0 3 * * 1"], deps


def scheduled_runs(stack: Stack, deployment_id) -> list:
    from prefect.client.schemas.filters import (
        DeploymentFilter, DeploymentFilterId, FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    async def read(client):
        return await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
                any_=[StateType.SCHEDULED]))))

    return stack.api(read)


def test_the_weekly_schedule_is_on_only_with_pearl_schedule_on(server):
    active, (weekly, wiki) = deploy(server, "off")
    assert active == [False]
    for dep in (weekly, wiki):  # the limit as Prefect applied it
        assert dep.global_concurrency_limit.limit == 1
        assert dep.concurrency_options.collision_strategy.value == "ENQUEUE"

    active, (weekly, _) = deploy(server, "on")
    assert active == [True]
    deadline = time.monotonic() + 120
    while not (runs := scheduled_runs(server, weekly.id)):
        assert time.monotonic() < deadline, f"no run scheduled for the active schedule\n{server.log_tails()}"
        time.sleep(1)
    assert {(r.expected_start_time.weekday(), r.expected_start_time.hour) for r in runs} == {(0, 3)}

    # A machine deployed with the schedule on, deployed again as scripts/env.sh leaves it:
    # the schedule is off and its Monday runs are gone.
    active, (weekly, _) = deploy(server, "off")
    assert active == [False]
    assert scheduled_runs(server, weekly.id) == []


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_the_image_deploys_the_schedule_off_unless_told(variant):
    from tests.test_dockerfile import env, image_steps

    assert env(image_steps(variant))["PEARL_SCHEDULE"] == "off"
