"""Benchmark rows -> one score per (model, dataset): what tables, comparisons, the retrain gate
and the checkpoint selection all read."""
from __future__ import annotations

import statistics

from . import DATASETS
from .stable import Difference, paired_difference


def primary_rows(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """(model, dataset) -> the row of the dataset's primary metric: the first metric the task
    reports for it. Rows without a model count as model ""."""
    first_metric: dict[str, str] = {}
    out = {}
    for r in rows:
        first_metric.setdefault(r["dataset"], r["metric"])
        if r["metric"] == first_metric[r["dataset"]]:
            out[(r.get("model", ""), r["dataset"])] = r
    return out


def primary_scores(rows: list[dict]) -> dict[tuple[str, str], tuple[float, float | None, str]]:
    """(model, dataset) -> (value, std over draws or None for one draw, metric) of each
    dataset's primary metric."""
    return {key: (r["value"], r["std"] if r.get("n", 1) > 1 else None, r["metric"])
            for key, r in primary_rows(rows).items()}


def in_table_order(datasets) -> list[str]:
    """The paper's Table 1 column order; datasets it does not have follow, sorted."""
    return [d for d in DATASETS if d in datasets] + sorted(d for d in datasets if d not in DATASETS)


def paired_changes(rows: list[dict], model: str, baseline: str) -> dict[str, tuple[dict, dict, Difference | None]]:
    """dataset -> (``model``'s primary row, ``baseline``'s, the paired difference model - baseline
    with its interval; None where the rows hold nothing to pair), for the datasets both were
    scored on in this run, in table order."""
    primary = primary_rows(rows)
    datasets = in_table_order({d for m, d in primary if m == model} & {d for m, d in primary if m == baseline})
    out = {}
    for d in datasets:
        a, b = primary[(model, d)], primary[(baseline, d)]
        try:
            diff = paired_difference(a, b)
        except ValueError:  # a dataset without per-draw or per-item scores (the extra tasks)
            diff = None
        out[d] = (a, b, diff)
    return out


def compare(rows: list[dict], model: str, baseline: str) -> list[dict]:
    """One line per dataset both were scored on (table order), then their average: both scores,
    the change model - baseline and its 95% interval (``low``/``high``, None where the rows hold
    nothing to pair), and the verdict: better, worse, "no difference" (the interval holds 0) or
    "not paired"."""
    from .stable import average_difference

    changes = paired_changes(rows, model, baseline)
    lines = [_line(d, base["value"], ours["value"], diff, ours["metric"]) for d, (ours, base, diff) in changes.items()]
    if lines:
        diffs = [diff for _, _, diff in changes.values()]
        lines.append(_line("average", statistics.fmean(b["value"] for _, b, _ in changes.values()),
                           statistics.fmean(a["value"] for a, _, _ in changes.values()),
                           average_difference(diffs) if None not in diffs else None, ""))
    return lines


def _line(dataset: str, baseline: float, model: float, diff: Difference | None, metric: str) -> dict:
    return {"dataset": dataset, "metric": metric, "baseline": round(baseline, 2), "model": round(model, 2),
            "change": round(model - baseline, 2), "low": diff and round(diff.low, 2),
            "high": diff and round(diff.high, 2), "verdict": diff.verdict if diff is not None else "not paired"}
