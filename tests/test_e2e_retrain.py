"""`retrain/weekly` end to end through the real server: the GPU pool's worker trains, the gate
decides, the registry's pointer moves only on promotion, a scheduled run fires and a second run
waits for it (concurrency limit), a failing run leaves the current model, and the Prefect UI
shows it all in a real browser.

Shares the session stack and corpus of test_e2e.py (tests/e2e_fixtures.py): the retrain runs
build the same 60-page corpus, so build-corpus reuses every dataset.
"""
from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest

from storage.registry import ModelRegistry
from tasks.evaluation import default_benchmark_dir
from tests.e2e_fixtures import GPU_POOL, MAX_PAGES, PAGES_PER_PARTITION, run_deployment

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800),
              pytest.mark.skipif(default_benchmark_dir() is None, reason="the gate needs the PEARL benchmark files")]

RETRAIN = "retrain/weekly"
RETRAIN_TIMEOUT = 540


def params(max_steps: int, **training) -> dict:
    """A small retrain: the e2e corpus, a few CPU steps on real E5, BIRD for the gate."""
    return {"corpus": {"max_pages": MAX_PAGES, "pages_per_partition": PAGES_PER_PARTITION},
            "training": {"max_steps": max_steps, "batch_size": 16, "char_epochs": 1, "char_max_words": 3000,
                         "device": "cpu", **training},
            "benchmark_datasets": ["bird"], "eval_seeds": [0], "dask_workers": 1}


def by_key(artifacts) -> dict:
    out = {}
    for a in artifacts:  # newest first
        out.setdefault(a.key, a)
    return out


def descendants(stack, run_id) -> list:
    async def read(client):
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

        found, frontier = [], [run_id]
        while frontier:
            children = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)))
            found += children
            frontier = [c.id for c in children]
        return found

    return stack.api(read)


@pytest.fixture(scope="module")
def promoted(stack, first):
    """The first retrain on this storage root: nothing is current, so its model is promoted."""
    root: Path = first["storage_root"]
    assert ModelRegistry(str(root)).current_version() is None
    return {"root": root, **run_deployment(stack, root, "e2e-retrain-1", RETRAIN, params(2), timeout=RETRAIN_TIMEOUT)}


def test_first_retrain_trains_on_the_gpu_pool_and_promotes(stack, first, promoted):
    result, root = promoted["result"], promoted["root"]
    assert result["outcome"] == "promoted" and result["current_before"] is None
    assert result["corpus"]["training_set"] == first["result"]["versions"]["training_set"]  # reused
    reg = ModelRegistry(str(root))
    assert reg.current_version() == result["model"] == result["current"]
    entry = reg.entry(result["model"])
    assert entry["training"]["steps"] == 2 and entry["decision"]["outcome"] == "promoted"
    assert set(entry["benchmark"]["scores"]) == {"bird"} and entry["run"]["flow_run_id"] == str(promoted["run"].id)

    children = descendants(stack, promoted["run"].id)
    trains = [c for c in children if c.work_pool_name == GPU_POOL]
    assert len(trains) == 1 and trains[0].state.is_completed(), [(c.name, c.work_pool_name) for c in children]

    arts = by_key(promoted["artifacts"])
    for key in ("corpus-counts", "phrase-datasets", "dataset-training-set", "training-curves", "training-summary",
                "benchmark-scores", "promotion-decision", "model-registry"):
        assert key in arts, f"artifacts of the retrain run: {sorted(arts)}"
    assert arts["dataset-training-set"].type == "link"
    assert result["corpus"]["training_set"] in arts["dataset-training-set"].data
    assert arts["promotion-decision"].data.startswith("# Promoted")
    registry_rows = json.loads(arts["model-registry"].data)
    assert [(r["version"], r["current"]) for r in registry_rows] == [(result["model"], "yes")]


def test_deployment_is_scheduled_weekly_with_a_concurrency_limit(stack):
    async def read(client):
        return await client.read_deployment_by_name(RETRAIN)

    dep = stack.api(read)
    crons = [(s.schedule.cron, s.active) for s in dep.schedules if getattr(s.schedule, "cron", None)]
    assert crons == [("0 3 * * 1", True)]
    limit = dep.global_concurrency_limit
    assert limit is not None and limit.limit == 1
    assert dep.concurrency_options.collision_strategy.value == "ENQUEUE"


def wait_until(what: str, check, stack, timeout: float, every: float = 3.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout}s\n{stack.log_tails()}")
        time.sleep(every)


@pytest.fixture(scope="module")
def scheduled(stack, promoted):
    """A schedule that fires in a few seconds (with small parameters) and, while that run is
    running, a second run of the same deployment: it must wait for the first."""
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId, FlowRunFilter
    from prefect.client.schemas.schedules import IntervalSchedule

    root = promoted["root"]
    small = {**params(3), "storage_root": str(root)}

    async def add_schedule(client):
        dep = await client.read_deployment_by_name(RETRAIN)
        anchor = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=10)
        made = await client.create_deployment_schedules(dep.id, [DeploymentScheduleCreate(
            schedule=IntervalSchedule(interval=dt.timedelta(hours=1), anchor_date=anchor), active=True,
            parameters=small, slug="e2e-hourly")])
        return dep.id, made[0].id

    dep_id, schedule_id = stack.api(add_schedule)

    def runs():
        async def read(client):
            return await client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep_id])),
                                               flow_run_filter=FlowRunFilter())
        return [r for r in stack.api(read) if r.id != promoted["run"].id]

    def running_scheduled():
        found = [r for r in runs() if r.state.is_running() and r.auto_scheduled]
        return found[0] if found else None

    fired = wait_until("the scheduled run is running", running_scheduled, stack, timeout=120)
    stack.cli("deployment", "run", RETRAIN, "--flow-run-name", "e2e-retrain-queued",
              *[a for k, v in small.items() for a in ("--param", f"{k}={v if isinstance(v, str) else json.dumps(v)}")])

    def both_final():
        rs = {r.id: r for r in runs()}
        queued = [r for r in rs.values() if r.name == "e2e-retrain-queued"]
        if queued and rs[fired.id].state.is_final() and queued[0].state.is_final():
            return rs[fired.id], queued[0]
        return None

    fired, queued = wait_until("both retrain runs finished", both_final, stack, timeout=2 * RETRAIN_TIMEOUT, every=5)

    async def states(client):
        return await client.read_flow_run_states(queued.id)

    return {"root": root, "fired": fired, "queued": queued, "queued_states": stack.api(states),
            "schedule_id": schedule_id, "dep_id": dep_id, "before": promoted["result"]["model"]}


def test_scheduled_run_is_gated_and_a_second_run_waits(stack, scheduled):
    fired, queued = scheduled["fired"], scheduled["queued"]
    assert fired.state.is_completed(), f"{fired.state.message}\n{stack.log_tails()}"
    assert queued.state.is_completed(), f"{queued.state.message}\n{stack.log_tails()}"
    # never interleaved: the second one waited for a slot, then started after the first ended
    assert "AwaitingConcurrencySlot" in [s.name for s in scheduled["queued_states"]]
    assert queued.start_time >= fired.end_time

    async def results(client):
        return [await (await client.read_flow_run(r.id)).state.aresult() for r in (fired, queued)]

    first_result, second_result = stack.api(results)
    reg = ModelRegistry(str(scheduled["root"]))
    assert first_result["current_before"] == scheduled["before"]
    assert first_result["model"] != scheduled["before"]  # 3 steps instead of 2: a new candidate
    assert first_result["outcome"] in ("promoted", "kept")
    expect = first_result["model"] if first_result["outcome"] == "promoted" else scheduled["before"]
    assert reg.current_version() == expect == first_result["current"]
    compared = {line["dataset"] for line in first_result["lines"]}
    assert compared == {"bird", "average"}
    # the same parameters again: the same model, already gated
    assert second_result["model"] == first_result["model"]
    assert second_result["outcome"] in ("unchanged", "kept")
    assert reg.current_version() == expect


def test_pausing_the_schedule(stack, scheduled):
    stack.cli("deployment", "schedule", "pause", RETRAIN, str(scheduled["schedule_id"]))

    async def read(client):
        return await client.read_deployment_schedules(scheduled["dep_id"])

    active = {str(s.id): s.active for s in stack.api(read)}
    assert active[str(scheduled["schedule_id"])] is False
    assert list(active.values()).count(True) == 1  # the weekly cron stays on

    async def upcoming(client):
        from prefect.client.schemas.filters import (
            DeploymentFilter, DeploymentFilterId, FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType,
        )
        from prefect.client.schemas.objects import StateType

        return await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[scheduled["dep_id"]])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))))

    time.sleep(8)  # a scheduler loop: it would re-create runs for an active schedule
    hourly = [r for r in stack.api(upcoming) if (r.parameters.get("training") or {}).get("max_steps") == 3]
    weekly = [r for r in stack.api(upcoming) if "training" not in r.parameters]
    assert hourly == [], "the paused schedule's runs are still scheduled"
    assert weekly, "the weekly schedule has no upcoming run"


def test_a_failing_retrain_leaves_the_current_model(stack, scheduled, tmp_path):
    root = scheduled["root"]
    reg = ModelRegistry(str(root))
    pointer = reg.pointer()
    bad = params(2, backbone=str(tmp_path / "no-such-backbone"))
    run = run_deployment(stack, root, "e2e-retrain-broken", RETRAIN, bad, timeout=RETRAIN_TIMEOUT,
                         expect_completed=False)
    assert run["run"].state.is_failed(), run["run"].state
    assert reg.pointer() == pointer
    decision = by_key(run["artifacts"])["promotion-decision"]
    assert "failed at: **train**" in decision.data and "no-such-backbone" in decision.data
    assert f"`{pointer['version']}`" in decision.data
