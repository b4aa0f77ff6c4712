"""Differences between two models scored in one run, with their 95% intervals.

A difference is paired: both models are scored on the same items with the same draws, so what
differs between them is the model, not the luck of the draw or of the item sample.

- A dataset scored over random draws (KMeans' random states, the PPDB probe's seeds) pairs draw
  i of one model with draw i of the other (the same random state or seed): the interval is
  Student's t over the per-draw differences (few draws: a bootstrap of three or ten values would
  be too narrow).
- A deterministic dataset (Turney, BIRD, the retrieval sets, AutoFJ) resamples its items, the
  same items for both models (a paired bootstrap, scipy's percentile interval, `RESAMPLES`
  resamples from a fixed seed, so the interval is reproducible): the difference of accuracies,
  or of Pearson correlations with the gold scores for BIRD.
- An average over datasets sums the datasets' variances (their samples are independent): a
  normal interval around the mean difference (an average of one dataset is that dataset's).

An interval that holds 0 is reported as "no difference": the run cannot tell the two apart.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .common import pearson

__all__ = ["CONFIDENCE", "RESAMPLES", "Difference", "average_difference", "paired_difference", "item_score"]

CONFIDENCE = 0.95
RESAMPLES = 2000
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class Difference:
    """``change`` = a - b in the rows' units (x100), its interval [``low``, ``high``] at
    ``CONFIDENCE``, its standard error, and what was paired (``draws`` or ``items``, ``n`` of them)."""
    change: float
    low: float
    high: float
    se: float
    paired_by: str
    n: int

    @property
    def seen(self) -> bool:
        """The interval excludes 0: the run can tell the two models apart."""
        return self.low > 0 or self.high < 0

    @property
    def verdict(self) -> str:
        return ("better" if self.change > 0 else "worse") if self.seen else "no difference"

    def text(self, digits: int = 2) -> str:
        """'+1.20 [+0.40, +2.00]', or 'no difference (+0.10 [-0.30, +0.50])'."""
        s = f"{self.change:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"
        return s if self.seen else f"no difference ({s})"

    def as_dict(self, digits: int = 2) -> dict:
        return {k: round(v, digits) if isinstance(v, float) else v for k, v in asdict(self).items()}


def item_score(items, targets=None, axis: int = -1):
    """A deterministic dataset's score (x100) from its per-item values: their mean, or their
    Pearson correlation with ``targets`` where the row has them (BIRD)."""
    if targets is None:
        return 100 * np.asarray(items, dtype=np.float64).mean(axis=axis)
    return 100 * pearson(items, np.broadcast_to(np.asarray(targets, dtype=np.float64), np.shape(items)), axis)


def _from_values(change: float, se: float, low: float, high: float, paired_by: str, n: int) -> Difference:
    return Difference(float(change), float(low), float(high), float(se), paired_by, int(n))


def paired_difference(a: dict, b: dict) -> Difference:
    """Row ``a`` minus row ``b``: the same dataset and metric of two models from one run."""
    from scipy import stats

    if (a["dataset"], a["metric"]) != (b["dataset"], b["metric"]):
        raise ValueError(f"rows of different scores: {a['dataset']} {a['metric']} vs {b['dataset']} {b['metric']}")
    if a.get("draws") and b.get("draws"):
        d = np.asarray(a["draws"], dtype=np.float64) - np.asarray(b["draws"], dtype=np.float64) \
            if len(a["draws"]) == len(b["draws"]) else None
        if d is None:
            raise ValueError(f"{a['dataset']}: {len(a['draws'])} draws against {len(b['draws'])}; "
                             "a paired difference needs the same draws")
        mean, se = d.mean(), d.std(ddof=1) / math.sqrt(len(d))
        if se == 0:  # every draw differs by the same amount (a model against itself: 0)
            return _from_values(mean, 0.0, mean, mean, "draws", len(d))
        low, high = stats.t.interval(CONFIDENCE, len(d) - 1, loc=mean, scale=se)
        return _from_values(mean, se, low, high, "draws", len(d))
    if a.get("items") and b.get("items"):
        x, y = np.asarray(a["items"], dtype=np.float64), np.asarray(b["items"], dtype=np.float64)
        if len(x) != len(y):
            raise ValueError(f"{a['dataset']}: {len(x)} items against {len(y)}; a paired difference needs the same items")
        targets = a.get("item_targets")
        change = float(item_score(x, targets) - item_score(y, targets))
        if targets is None:  # a difference of means is the mean of the per-item differences
            data, statistic = (x - y,), (lambda d, axis: item_score(d, axis=axis))
        else:
            data = (x, y, np.asarray(targets, dtype=np.float64))
            statistic = (lambda u, v, t, axis: item_score(u, t, axis) - item_score(v, t, axis))
        if np.ptp(data[0]) == 0 and targets is None:  # every item differs by the same amount
            return _from_values(change, 0.0, change, change, "items", len(x))
        res = stats.bootstrap(data, statistic, paired=True, vectorized=True, n_resamples=RESAMPLES,
                              confidence_level=CONFIDENCE, method="percentile", batch=200,
                              rng=np.random.default_rng(BOOTSTRAP_SEED))
        ci = res.confidence_interval
        return _from_values(change, res.standard_error, ci.low, ci.high, "items", len(x))
    raise ValueError(f"{a['dataset']} {a['metric']}: no per-draw or per-item scores to pair (rows of an older "
                     "evaluation code version?)")


def average_difference(diffs: list[Difference]) -> Difference:
    """The mean of datasets' differences, its interval normal with the datasets' variances summed
    (one dataset: its own difference and interval)."""
    if not diffs:
        raise ValueError("no differences to average")
    if len(diffs) == 1:
        return diffs[0]
    from scipy import stats

    change = float(np.mean([d.change for d in diffs]))
    se = math.sqrt(sum(d.se ** 2 for d in diffs)) / len(diffs)
    half = stats.norm.ppf(0.5 + CONFIDENCE / 2) * se
    return _from_values(change, se, change - half, change + half, "datasets", len(diffs))
