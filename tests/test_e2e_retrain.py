"""`retrain/weekly` end to end through the real server: the GPU pool's worker trains, the gate
decides, the registry's pointer moves only on promotion, a scheduled run fires on a newer dump and
reuses the older corpus's page and sentence work (and says so, as the corpus-reuse artifact) while
a second run waits for it (concurrency limit), a failing run leaves the current model, and the
Prefect UI shows it all in a real browser.

Shares the session stack and corpus of test_e2e.py (tests/e2e_fixtures.py): the retrain runs
build the same 60-page corpus, so build-corpus reuses every dataset.
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import json
import random
import time
from pathlib import Path

import pytest

from storage.registry import ModelRegistry
from tasks.evaluation import default_benchmark_dir
from tests import ui_browser
from tests.e2e_fixtures import GPU_POOL, MAX_PAGES, PAGES_PER_PARTITION, run_deployment

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800),
              pytest.mark.skipif(default_benchmark_dir() is None, reason="the gate needs the PEARL benchmark files")]

RETRAIN = "retrain/weekly"
RETRAIN_TIMEOUT = 900  # about 4 minutes alone on 2 cores; longer beside the other test process
EDITED, REMOVED = 3, 2  # of the e2e corpus's pages, in the newer dump


def params(max_steps: int, **training) -> dict:
    """A small retrain: the e2e corpus, a few CPU steps on real E5, BIRD for the gate."""
    return {"corpus": {"max_pages": MAX_PAGES, "pages_per_partition": PAGES_PER_PARTITION},
            "training": {"max_steps": max_steps, "batch_size": 16, "char_epochs": 1, "char_max_words": 3000,
                         "device": "cpu", "select_every": 0, **training},  # dev selection: test_e2e's train
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
    # a dataset's location as a path to copy (no file:// link, which a browser refuses from the UI)
    assert f"```text\n{root}/training_set/{result['corpus']['training_set']}\n```" in arts["dataset-training-set"].data
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


def tree_artifacts(stack, run_id) -> dict:
    """The newest artifact of each key made in a run or any of its subflow runs."""
    ids = [run_id, *(c.id for c in descendants(stack, run_id))]

    async def read(client):
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
        from prefect.client.schemas.sorting import ArtifactSort

        return await client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=ids)),
                                           sort=ArtifactSort.CREATED_DESC)

    return by_key(stack.api(read))


@pytest.fixture(scope="module")
def newer_dump(tmp_path_factory) -> str:
    """Next month's sample: the e2e corpus's pages, EDITED articles each with a sentence inserted and
    REMOVED pages gone (benchmarks/incremental_build.py's edit)."""
    spec = importlib.util.spec_from_file_location(
        "incremental_build", Path(__file__).resolve().parents[1] / "benchmarks" / "incremental_build.py")
    ib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ib)
    pages, _, headers = ib.read_pages(["sample"], MAX_PAGES, 0)
    articles = [i for i, p in enumerate(pages) if b"<redirect" not in p["data"]]  # a few: most are redirects
    edited = set(articles[:EDITED])
    removed = set([i for i in range(len(pages)) if i not in edited][-REMOVED:])
    rng = random.Random(0)
    newer = [ib.edit_page(p, "The town council met again in the spring of that year.", rng) if i in edited else p
             for i, p in enumerate(pages) if i not in removed]
    return ib.write_dump(newer, headers, tmp_path_factory.mktemp("newer-dump"))[0]


@pytest.fixture(scope="module")
def scheduled(stack, promoted, newer_dump):
    """A schedule that fires in a few seconds (with small parameters, on a newer dump) and, while
    that run is running, a second run of the same deployment: it must wait for the first."""
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId, FlowRunFilter
    from prefect.client.schemas.schedules import IntervalSchedule

    root = promoted["root"]
    small = {**params(3), "storage_root": str(root), "source": newer_dump}

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


def reuse_row(markdown: str, first_cell: str) -> list[str]:
    rows = [line.strip("|").split("|") for line in markdown.splitlines() if line.startswith(f"| {first_cell} |")]
    assert len(rows) == 1, markdown
    return [c.strip() for c in rows[0]]


def test_the_weekly_run_on_a_newer_dump_reuses_the_older_corpus_and_says_what_it_saved(stack, scheduled):
    """The scheduled run read a newer dump: the older corpus's page extracts and sentence mining
    (the e2e build's stores) served every page and sentence that did not change."""
    report = tree_artifacts(stack, scheduled["fired"].id)["corpus-reuse"].data
    unchanged = MAX_PAGES - EDITED - REMOVED
    for what, count in (("unchanged", unchanged), ("edited", EDITED), ("removed", REMOVED), ("new", 0),
                        ("moved", 0)):
        assert reuse_row(report, what)[1] == str(count), report
    _, items, reused, computed, refused, _, per_item, saved, cost_from = reuse_row(report, "pages")
    assert (int(items), int(reused), int(computed), int(refused)) == (unchanged + EDITED, unchanged, EDITED, 0)
    assert float(per_item) > 0 and float(saved) == pytest.approx(unchanged * float(per_item), abs=0.1)
    # priced at the e2e build's cost per page: it extracted every page, this run EDITED
    assert cost_from.startswith("the previous build (") and cost_from.endswith(f", {MAX_PAGES} items computed")
    _, items, reused, computed, *_ = reuse_row(report, "phrase_occurrences")
    assert int(reused) > 0 and int(reused) + int(computed) == int(items)
    assert "Estimated time saved" in report
    # the queued run read the same dump: its datasets were all committed, nothing recomputed
    again = tree_artifacts(stack, scheduled["queued"].id)["corpus-reuse"].data
    assert "nothing was recomputed" in again


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


@pytest.fixture(scope="module")
def broken(stack, scheduled, tmp_path_factory):
    root = scheduled["root"]
    pointer = ModelRegistry(str(root)).pointer()
    bad = params(2, backbone=str(tmp_path_factory.mktemp("nothing") / "no-such-backbone"))
    run = run_deployment(stack, root, "e2e-retrain-broken", RETRAIN, bad, timeout=RETRAIN_TIMEOUT,
                         expect_completed=False)
    return {"pointer": pointer, **run}


def test_a_failing_retrain_leaves_the_current_model(scheduled, broken):
    assert broken["run"].state.is_failed(), broken["run"].state
    assert ModelRegistry(str(scheduled["root"])).pointer() == broken["pointer"]
    decision = by_key(broken["artifacts"])["promotion-decision"]
    assert "failed at: **train**" in decision.data and "no-such-backbone" in decision.data
    assert f"`{broken['pointer']['version']}`" in decision.data


def test_the_runs_and_their_artifacts_render_in_the_prefect_ui(stack, promoted, scheduled, broken, request):
    """Headless Chromium on the server's UI: the retrain run's page, the promotion decisions
    (one per run under one key), the benchmark table against the current model, the registry."""
    ui_browser.require_browser()
    shots = ui_browser.screenshot_dir(request)
    fired = scheduled["fired"]

    async def read(client):
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

        return await client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[fired.id]),
            key=ArtifactFilterKey(any_=["benchmark-vs-current", "promotion-decision"])))

    fired_arts = by_key(stack.api(read))
    first = by_key(promoted["artifacts"])
    model = promoted["result"]["model"]
    base = ui_browser.ui_base(stack.ui_url, "v1")
    with ui_browser.open_browser() as browser:
        page = ui_browser.new_page(browser)
        ui_browser.login(page, base, stack.auth_string, shots / "login.png")
        ui_browser.visit(page, ui_browser.flow_run_url(base, promoted["run"].id),
                         ["e2e-retrain-1", "retrain", "Completed"], shots / "retrain-run.png")
        ui_browser.visit(page, ui_browser.flow_run_url(base, broken["run"].id),
                         ["e2e-retrain-broken", "Failed"], shots / "retrain-failed-run.png")
        # the decision rendered: a heading and the reason, not markdown source
        text = ui_browser.visit(page, ui_browser.artifact_url(base, first["promotion-decision"].id),
                                ["Promoted", "no model is current yet", model], shots / "decision-promoted.png")
        assert page.get_by_role("heading", name="Promoted").count() == 1 and "# Promoted" not in text
        ui_browser.visit(page, ui_browser.artifact_url(base, by_key(broken["artifacts"])["promotion-decision"].id),
                         ["Not promoted: the run failed", "failed at:", "train", "no-such-backbone"],
                         shots / "decision-failed.png")
        # the gate's table against the current model, as a table
        table = fired_arts["benchmark-vs-current"]
        text = ui_browser.visit(page, ui_browser.artifact_url(base, table.id),
                                ["current", "candidate", "change", "verdict", "bird", "average"],
                                shots / "benchmark-vs-current.png")
        assert page.get_by_role("columnheader", name="verdict").count() == 1, text
        assert page.locator("table td", has_text="bird").count() >= 1, text
        # the registry table, the current model marked
        ui_browser.visit(page, ui_browser.artifact_url(base, first["model-registry"].id),
                         ["version", "current", model, "yes", "promoted"], shots / "model-registry.png")
        # one key, one history: every retrain run's decision listed under promotion-decision
        ui_browser.visit(page, ui_browser.artifact_key_url(base, "promotion-decision"),
                         ["promotion-decision", "e2e-retrain-1", "e2e-retrain-broken", fired.name],
                         shots / "promotion-decision-history.png")
        # the list page shows a screenful of its cards (more load as one scrolls: with the reuse
        # stores' artifacts a key can be below it), so each key is opened by its own page
        ui_browser.visit(page, ui_browser.artifacts_url(base), ["Artifacts", "Search artifacts"], shots / "artifacts.png")
        for key in ("benchmark-vs-current", "model-registry", "training-curves", "corpus-counts", "corpus-reuse",
                    "dataset-training-set"):
            ui_browser.visit(page, ui_browser.artifact_key_url(base, key), [f"Created {key}", "Flow run"],
                             shots / f"artifact-key-{key}.png")
