"""The promotion gate: a newly trained model against the current one, on the same benchmark run.

Both models are scored in one `evaluate` run (same code, datasets, probe seeds, KMeans random
states and items), so every change is paired and has a 95% interval
(`pearl_model.evaluation.stable`). The gate acts only on a difference it can see:

- a dataset blocks the promotion when its whole interval lies below ``-dataset_tolerance``: a
  drop larger than the tolerance that the run can see, not one that the draws or the items could
  have made;
- the candidate is promoted only when the interval of its benchmark average change lies above
  ``-average_tolerance``: the run can see that the candidate is at most that many points worse on
  average (0: that it is better). A candidate the run cannot tell from the current model by more
  than the draws' and items' noise ("no difference") is not promoted unless that noise is within
  the tolerance.

Tolerances are in points (scores x100). A dataset whose rows hold nothing to pair (the extra
tasks of an older run) falls back to its point change against ``dataset_tolerance``. The first
model ever trained on a storage root is promoted (there is nothing to compare with). Whatever the
decision, the candidate is registered with its scores and the decision; only a promotion moves the
registry's current pointer, and it names the version it replaces (compare-and-swap).

An extra check, off unless ``alias_tolerance`` is given: the candidate's top-1 on the corpus's
held-out aliases (alias -> title retrieval, independent of the benchmark), exported model
against the same model before training, must not drop by more than that many points.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from storage.registry import ModelRegistry, model_location


@dataclass
class GateDecision:
    promote: bool
    reasons: list[str]
    lines: list[dict] = field(default_factory=list)  # per dataset: current, candidate, change, interval, verdict
    candidate_average: float | None = None
    current_average: float | None = None


def decide(rows: list[dict], candidate: str, current: str | None, average_tolerance: float = 0.5,
           dataset_tolerance: float = 3.0) -> GateDecision:
    """Promote or keep, with the reasons. ``rows``: the `eval_results` rows of one run that scored
    ``candidate`` and ``current`` (model names as the rows give them; ``current`` None when no
    model is current yet)."""
    from pearl_model.evaluation.scores import compare, primary_rows

    if average_tolerance < 0 or dataset_tolerance < 0:
        raise ValueError("tolerances are drops in points and cannot be negative")
    primary = primary_rows(rows)
    cand = {d: r["value"] for (m, d), r in primary.items() if m == candidate}
    bad = sorted(d for d, v in cand.items() if v is None or not math.isfinite(v))
    if not cand or bad:
        what = f"non-finite scores on {', '.join(bad)}" if bad else "no benchmark scores"
        return GateDecision(False, [f"the candidate has {what}: not promoted"])
    if current is None:
        return GateDecision(True, ["no model is current yet: the first trained model is promoted"],
                            [{"dataset": d, "current": None, "candidate": round(v, 2), "change": None, "low": None,
                              "high": None, "verdict": "new"} for d, v in cand.items()],
                            round(statistics.fmean(cand.values()), 2), None)

    missing = [d for (m, d) in primary if m == current and d not in cand]
    lines = [{"dataset": x["dataset"], "current": x["baseline"], "candidate": x["model"],
              **{k: x[k] for k in ("change", "low", "high", "verdict")}} for x in compare(rows, candidate, current)]
    reasons, promote = [], True
    for x in lines[:-1]:
        # unpaired rows (an older run's): the point change stands for the interval
        if (x["change"] if x["high"] is None else x["high"]) < -dataset_tolerance:
            promote = False
            x["verdict"] = f"drop > {dataset_tolerance:g} seen"
            reasons.append(f"{x['dataset']} drops by {-x['change']:.2f} points ({x['current']:.2f} -> "
                           f"{x['candidate']:.2f}{interval(x)}), more than the dataset tolerance of {dataset_tolerance:g}")
    if missing:
        promote = False
        reasons.append(f"the candidate was not scored on {', '.join(missing)}, which the current model was")
    if not lines:
        return GateDecision(False, reasons or ["no dataset scored for both models"], [],
                            round(statistics.fmean(cand.values()), 2), None)
    avg = lines[-1]
    seen = f"{avg['change']:+.2f} points ({avg['current']:.2f} -> {avg['candidate']:.2f}{interval(avg)})"
    if (avg["change"] if avg["low"] is None else avg["low"]) <= -average_tolerance:
        promote = False
        reasons.insert(0, f"the benchmark average changes by {seen}: the run cannot see that the candidate is "
                          f"within the average tolerance of {average_tolerance:g} of the current model"
                          + (" (no difference)" if avg["verdict"] == "no difference" else ""))
        avg["verdict"] = f"not within {average_tolerance:g}"
    if promote:
        reasons.append(f"the benchmark average changes by {seen}, above -{average_tolerance:g} (the average "
                       f"tolerance), and no dataset is seen to drop by more than {dataset_tolerance:g}")
    return GateDecision(promote, reasons, lines, avg["candidate"], avg["current"])


def interval(line: dict) -> str:
    return "" if line["low"] is None else f", 95% interval {line['low']:+.2f} to {line['high']:+.2f}"


def alias_check(stats: dict, tolerance: float) -> str | None:
    """Why the candidate fails the held-out alias check (None when it passes). ``stats``: the
    model's training summary; its scores are fractions, the tolerance is in points (x100)."""
    if tolerance < 0:
        raise ValueError("alias_tolerance is a drop in points and cannot be negative")
    before = stats.get("val_alias_top1_before")
    after = stats.get("alias_top1_exported", stats.get("val_alias_top1"))
    if before is None or after is None:
        return "the candidate has no held-out alias scores (before and after training) to check"
    change = 100 * (after - before)
    if change < -tolerance:
        return (f"held-out alias top-1 drops by {-change:.2f} points in training ({100 * before:.2f} -> "
                f"{100 * after:.2f}), more than the alias tolerance of {tolerance:g}")
    return None


def decision_markdown(decision: GateDecision, candidate: str, current: str | None, outcome: str) -> str:
    title = {"promoted": "Promoted", "kept": "Not promoted: the current model stays",
             "unchanged": "Unchanged: the candidate is already the current model"}[outcome]
    out = [f"# {title}", "", f"- candidate: `{candidate}`", f"- current before this run: `{current or 'none'}`", ""]
    out += ["## Why", ""] + [f"- {r}" for r in decision.reasons]
    if decision.lines:
        out += ["", "## Benchmark, same run for both (x100; changes paired, 95% intervals)", "",
                "| dataset | current | candidate | change | 95% interval | verdict |", "|---|---|---|---|---|---|"]
        fmt = (lambda v: "" if v is None else f"{v:.2f}")
        out += [f"| {x['dataset']} | {fmt(x['current'])} | {fmt(x['candidate'])} | "
                f"{'' if x['change'] is None else format(x['change'], '+.2f')} | "
                f"{'' if x.get('low') is None else format(x['low'], '+.2f') + ' to ' + format(x['high'], '+.2f')} | "
                f"{x['verdict']} |" for x in decision.lines]
    return "\n".join(out)


def failure_markdown(stage: str, error: BaseException, current: str | None) -> str:
    return "\n".join([
        "# Not promoted: the run failed", "",
        f"- failed at: **{stage}**",
        f"- error: `{type(error).__name__}: {str(error)[:500]}`",
        f"- the current model is unchanged: `{current or 'none'}`", "",
        "Nothing was promoted; the datasets and models that finished before the failure are kept "
        "and reused by the next run."])


def scores_by_model(rows: list[dict]) -> dict[str, dict[str, float]]:
    """model -> dataset -> primary score (mean over seeds), from eval_results rows."""
    from pearl_model.evaluation.scores import primary_scores

    out: dict[str, dict[str, float]] = {}
    for (model, dataset), (mean, _, _) in primary_scores(rows).items():
        out.setdefault(model, {})[dataset] = mean  # already x100
    return out


def gate(storage_root: str, candidate: str, current: str | None, rows: list[dict],
         candidate_key: str, current_key: str | None, eval_version: str | None, average_tolerance: float,
         dataset_tolerance: float, run: dict | None = None,
         alias_tolerance: float | None = None) -> tuple[GateDecision, str]:
    """Decide on ``rows`` (`eval_results` of one run, the models named ``candidate_key`` and
    ``current_key``), register the candidate with its scores and the decision, promote when it
    passes. Returns the decision and the outcome (promoted, kept, unchanged)."""
    reg = ModelRegistry(storage_root)
    if current is not None and candidate == current:
        prior = reg.entry(candidate)
        decision = GateDecision(False, [f"training produced model {candidate} again (nothing changed in its "
                                        "inputs or parameters), which is already current"],
                                candidate_average=(prior.get("benchmark") or {}).get("average"))
        return decision, "unchanged"
    cand_scores = scores_by_model(rows).get(candidate_key, {})
    decision = decide(rows, candidate_key, current_key, average_tolerance, dataset_tolerance)
    if alias_tolerance is not None:
        failed = alias_check(reg.model(candidate).manifest().get("stats") or {}, alias_tolerance)
        if failed:
            decision.promote = False
            decision.reasons.insert(0, failed)
    benchmark = {"eval_results": eval_version, "scores": {d: round(v, 4) for d, v in cand_scores.items()},
                 "average": decision.candidate_average, "compared_with": current}
    outcome = "promoted" if decision.promote else "kept"
    reg.register(candidate, benchmark=benchmark, decision={"outcome": outcome, **asdict(decision)}, run=run)
    if decision.promote:
        reg.promote(candidate, "; ".join(decision.reasons), expected_current=current)
    return decision, outcome


class StageTracker:
    """Which step of a retrain run is running; on a failure, the `promotion-decision` artifact says
    where it failed and that the current model is untouched, and the error goes on up."""

    def __init__(self, current: str | None):
        self.current = current
        self.stage = "start"

    def at(self, stage: str) -> None:
        self.stage = stage

    def __enter__(self) -> "StageTracker":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            try:
                from prefect.artifacts import create_markdown_artifact

                create_markdown_artifact(failure_markdown(self.stage, exc, self.current), key="promotion-decision",
                                         description=f"retrain failed at {self.stage}: nothing promoted")
            except Exception:  # the report must never hide the error it reports
                pass
        return False


# --- Prefect wrappers --------------------------------------------------------------------
from prefect import task  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402


@task(name="current-model", cache_policy=NONE)
def current_model_task(storage_root: str) -> dict | None:
    """The current model's version and location (`model_location`: what the evaluation's workers load
    it from), or None before the first promotion."""
    reg = ModelRegistry(storage_root)
    version = reg.current_version()
    if version is None:
        return None
    return {"version": version, "dir": model_location(reg.model(version))}


@task(name="promotion-gate", cache_policy=NONE)
def gate_task(storage_root: str, candidate: dict, current: dict | None, evaluation: dict | None,
              average_tolerance: float, dataset_tolerance: float, alias_tolerance: float | None = None) -> dict:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.context import get_run_context

    from storage.datasets import Dataset, resolve_root
    from storage.schemas import EVAL_RESULTS

    rows: list[dict] = []
    if evaluation is not None:
        rows = Dataset(resolve_root(storage_root), "eval_results", evaluation["version"], EVAL_RESULTS).read().to_pylist()
    ctx = get_run_context()
    run = {"flow_run_id": str(ctx.task_run.flow_run_id)} if getattr(ctx, "task_run", None) else None
    decision, outcome = gate(storage_root, candidate["version"], current and current["version"], rows,
                             candidate["dir"], current and current["dir"], evaluation and evaluation["version"],
                             average_tolerance, dataset_tolerance, run, alias_tolerance)
    from prefect.logging import get_run_logger

    get_run_logger().info("%s: candidate %s, current before %s: %s", outcome, candidate["version"],
                          current and current["version"], "; ".join(decision.reasons))
    md = decision_markdown(decision, candidate["version"], current and current["version"], outcome)
    create_markdown_artifact(md, key="promotion-decision", description=f"{outcome}: {candidate['version']}")
    if decision.lines:
        create_table_artifact(decision.lines, key="benchmark-vs-current",
                              description=f"candidate {candidate['version']} vs current "
                                          f"{current and current['version']}, same benchmark run, x100, "
                                          "paired changes with 95% intervals")
    create_table_artifact(ModelRegistry(storage_root).summary(), key="model-registry",
                          description="registered models, newest first; 'current' marks the promoted one")
    now = ModelRegistry(storage_root).current_version()
    return {"outcome": outcome, "promoted": outcome == "promoted", "reasons": decision.reasons,
            "lines": decision.lines, "current": now}


@task(name="dataset-links", cache_policy=NONE)
def dataset_links_task(storage_root: str, versions: dict[str, str]) -> None:
    """One artifact per dataset version the run used, under a stable key per dataset: its location
    (and, for the training set, the command that trains on it)."""
    from runs.artifacts import publish_location, train_command
    from storage.datasets import Dataset, resolve_root

    root = resolve_root(storage_root)
    for name, version in versions.items():
        publish_location(Dataset(root, name, version, None).url, key=f"dataset-{name.replace('_', '-')}",
                         title=f"{name} {version}", description=f"{name} version used by this run",
                         commands=[train_command(root, version)] if name == "training_set" else ())
