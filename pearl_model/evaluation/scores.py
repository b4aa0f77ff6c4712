"""Benchmark rows -> one score per (model, dataset): what tables, comparisons, the retrain gate
and the checkpoint selection all read."""
from __future__ import annotations

import statistics
from collections import defaultdict

from . import DATASETS


def primary_scores(rows: list[dict]) -> dict[tuple[str, str], tuple[float, float | None, str]]:
    """(model, dataset) -> (mean, std over seeds or None, metric) of each dataset's primary
    metric: the first metric the task reports for it. Rows without a model count as model ""."""
    first_metric: dict[str, str] = {}
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        first_metric.setdefault(r["dataset"], r["metric"])
        if r["metric"] == first_metric[r["dataset"]]:
            values[(r.get("model", ""), r["dataset"])].append(r["value"])
    out = {}
    for key, vals in values.items():
        std = statistics.stdev(vals) if len(vals) > 1 else None
        out[key] = (statistics.fmean(vals), std, first_metric[key[1]])
    return out


def in_table_order(datasets) -> list[str]:
    """The paper's Table 1 column order; datasets it does not have follow, sorted."""
    return [d for d in DATASETS if d in datasets] + sorted(d for d in datasets if d not in DATASETS)
