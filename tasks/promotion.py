"""The promotion gate: a newly trained model against the current one, on the same benchmark run.

Both models are scored in one `evaluate` run (same code, datasets and seeds), so the gate
compares like with like. The candidate is promoted when its benchmark average is not below
the current model's by more than ``average_tolerance`` and no dataset drops by more than
``dataset_tolerance`` (both in points, scores x100). The first model ever trained on a
storage root is promoted (there is nothing to compare with). Whatever the decision, the
candidate is registered with its scores and the decision; only a promotion moves the
registry's current pointer, and it names the version it replaces (compare-and-swap).

An extra check, off unless ``alias_tolerance`` is given: the candidate's top-1 on the corpus's
held-out aliases (alias -> title retrieval, independent of the benchmark), exported model
against the same model before training, must not drop by more than that many points.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from storage.registry import ModelRegistry


@dataclass
class GateDecision:
    promote: bool
    reasons: list[str]
    lines: list[dict] = field(default_factory=list)  # per dataset: current, candidate, change, verdict
    candidate_average: float | None = None
    current_average: float | None = None


def decide(candidate: dict[str, float], current: dict[str, float] | None, average_tolerance: float = 0.5,
           dataset_tolerance: float = 3.0) -> GateDecision:
    """Promote or keep, with the reasons. ``candidate`` / ``current``: dataset -> primary score x100
    from the same benchmark run; ``current`` None when no model is current yet."""
    if average_tolerance < 0 or dataset_tolerance < 0:
        raise ValueError("tolerances are drops in points and cannot be negative")
    bad = sorted(d for d, v in candidate.items() if v is None or not math.isfinite(v))
    if not candidate or bad:
        what = f"non-finite scores on {', '.join(bad)}" if bad else "no benchmark scores"
        return GateDecision(False, [f"the candidate has {what}: not promoted"])
    cand_avg = statistics.fmean(candidate.values())
    if current is None:
        return GateDecision(True, ["no model is current yet: the first trained model is promoted"],
                            [{"dataset": d, "current": None, "candidate": round(v, 2), "change": None, "verdict": "new"}
                             for d, v in candidate.items()], round(cand_avg, 2), None)

    missing = [d for d in current if d not in candidate]
    common = [d for d in current if d in candidate]
    lines, reasons, promote = [], [], True
    for d in common:
        change = candidate[d] - current[d]
        collapsed = change < -dataset_tolerance
        lines.append({"dataset": d, "current": round(current[d], 2), "candidate": round(candidate[d], 2),
                      "change": round(change, 2), "verdict": f"drop > {dataset_tolerance:g}" if collapsed else "ok"})
        if collapsed:
            promote = False
            reasons.append(f"{d} drops by {-change:.2f} points ({current[d]:.2f} -> {candidate[d]:.2f}), "
                           f"more than the dataset tolerance of {dataset_tolerance:g}")
    if missing:
        promote = False
        reasons.append(f"the candidate was not scored on {', '.join(missing)}, which the current model was")
    if not common:
        return GateDecision(False, reasons or ["no dataset scored for both models"], lines, round(cand_avg, 2), None)
    cand_common = statistics.fmean(candidate[d] for d in common)
    cur_avg = statistics.fmean(current[d] for d in common)
    delta = cand_common - cur_avg
    if delta < -average_tolerance:
        promote = False
        reasons.insert(0, f"the benchmark average drops by {-delta:.2f} points ({cur_avg:.2f} -> {cand_common:.2f}), "
                          f"more than the average tolerance of {average_tolerance:g}")
    if promote:
        reasons.append(f"the benchmark average changes by {delta:+.2f} points ({cur_avg:.2f} -> {cand_common:.2f}; "
                       f"tolerance {average_tolerance:g}) and no dataset drops by more than {dataset_tolerance:g}")
    lines.append({"dataset": "average", "current": round(cur_avg, 2), "candidate": round(cand_common, 2),
                  "change": round(delta, 2), "verdict": f"drop > {average_tolerance:g}" if delta < -average_tolerance
                  else "ok"})
    return GateDecision(promote, reasons, lines, round(cand_common, 2), round(cur_avg, 2))


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
        out += ["", "## Benchmark, same run for both (x100)", "",
                "| dataset | current | candidate | change | verdict |", "|---|---|---|---|---|"]
        fmt = (lambda v: "" if v is None else f"{v:.2f}")
        out += [f"| {x['dataset']} | {fmt(x['current'])} | {fmt(x['candidate'])} | "
                f"{'' if x['change'] is None else format(x['change'], '+.2f')} | {x['verdict']} |"
                for x in decision.lines]
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


def gate(storage_root: str, candidate: str, current: str | None, scores: dict[str, dict[str, float]],
         candidate_key: str, current_key: str | None, eval_version: str | None, average_tolerance: float,
         dataset_tolerance: float, run: dict | None = None,
         alias_tolerance: float | None = None) -> tuple[GateDecision, str]:
    """Decide, register the candidate with its scores and the decision, promote when it passes.
    Returns the decision and the outcome (promoted, kept, unchanged)."""
    reg = ModelRegistry(storage_root)
    if current is not None and candidate == current:
        prior = reg.entry(candidate)
        decision = GateDecision(False, [f"training produced model {candidate} again (nothing changed in its "
                                        "inputs or parameters), which is already current"],
                                candidate_average=(prior.get("benchmark") or {}).get("average"))
        return decision, "unchanged"
    cand_scores = scores.get(candidate_key, {})
    cur_scores = scores.get(current_key) if current_key is not None else None
    decision = decide(cand_scores, cur_scores, average_tolerance, dataset_tolerance)
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
    """The current model's version and local directory, or None before the first promotion."""
    reg = ModelRegistry(storage_root)
    version = reg.current_version()
    if version is None:
        return None
    return {"version": version, "dir": str(reg.model(version).local_copy())}


@task(name="promotion-gate", cache_policy=NONE)
def gate_task(storage_root: str, candidate: dict, current: dict | None, evaluation: dict | None,
              average_tolerance: float, dataset_tolerance: float, alias_tolerance: float | None = None) -> dict:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.context import get_run_context

    from storage.datasets import Dataset, resolve_root
    from storage.schemas import EVAL_RESULTS

    scores: dict = {}
    if evaluation is not None:
        rows = Dataset(resolve_root(storage_root), "eval_results", evaluation["version"], EVAL_RESULTS).read()
        scores = scores_by_model(rows.to_pylist())
    ctx = get_run_context()
    run = {"flow_run_id": str(ctx.task_run.flow_run_id)} if getattr(ctx, "task_run", None) else None
    decision, outcome = gate(storage_root, candidate["version"], current and current["version"], scores,
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
                                          f"{current and current['version']}, same benchmark run, x100")
    create_table_artifact(ModelRegistry(storage_root).summary(), key="model-registry",
                          description="registered models, newest first; 'current' marks the promoted one")
    now = ModelRegistry(storage_root).current_version()
    return {"outcome": outcome, "promoted": outcome == "promoted", "reasons": decision.reasons,
            "lines": decision.lines, "current": now}


@task(name="dataset-links", cache_policy=NONE)
def dataset_links_task(storage_root: str, versions: dict[str, str]) -> None:
    """One link artifact per dataset version the run used, under a stable key per dataset."""
    from runs.artifacts import publish_link
    from storage.datasets import Dataset, resolve_root

    root = resolve_root(storage_root)
    for name, version in versions.items():
        publish_link(Dataset(root, name, version, None).url, key=f"dataset-{name.replace('_', '-')}",
                     link_text=f"{name} {version}", description=f"{name} version used by this run")
