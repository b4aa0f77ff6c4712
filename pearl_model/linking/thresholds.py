"""A threshold a user can choose: from labelled pairs (pairs known to match), the precision/recall
curve of the best matches and the smallest threshold that reaches a target precision (the one that
keeps the most matches). Without labels nothing is chosen: scores are reported as they are.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NO_LABELS = "no labelled pairs: no threshold is chosen, scores are reported as they are"


@dataclass
class ThresholdChoice:
    """The threshold chosen (None: none is; ``note`` says why), its precision and recall."""

    target: float
    threshold: float | None
    precision: float | None
    recall: float | None
    labelled: int  # left rows with a labelled match, the recall's denominator
    note: str
    curve: pa.Table = field(repr=False)  # threshold, precision, recall; one row per distinct score


def labelled_best_matches(matches: pa.Table, labels: pa.Table) -> tuple[np.ndarray, np.ndarray, int]:
    """(scores, correct, labelled): the rank-1 match of each left row whose name the labels name
    (``labels``: columns ``left``, ``right``, one pair known to match per row), whether its right
    name is a labelled match, and how many left rows have a labelled match (those without a
    candidate included, as misses)."""
    pairs = set(zip(labels["left"].to_pylist(), labels["right"].to_pylist()))
    known = pa.array(sorted({left for left, _ in pairs}), pa.string())
    best = matches.filter(pc.and_(pc.equal(matches["rank"], 1), pc.is_in(matches["left"], known)))
    correct = np.array([pair in pairs for pair in zip(best["left"].to_pylist(), best["right"].to_pylist())], bool)
    return best["score"].to_numpy().astype(np.float64), correct, best.num_rows


def threshold_for_precision(scores: np.ndarray, correct: np.ndarray, target: float,
                            labelled: int | None = None) -> ThresholdChoice:
    """The smallest score threshold at which the matches scoring at least it are ``target`` precise.

    ``correct[i]``: match i is a true one; ``labelled``: the true matches there are (default: the
    correct ones among ``scores``), recall's denominator."""
    from sklearn.metrics import precision_recall_curve

    scores, correct = np.asarray(scores, np.float64), np.asarray(correct, bool)
    labelled = int(correct.sum()) if labelled is None else labelled
    empty = pa.table({"threshold": pa.array([], pa.float64()), "precision": pa.array([], pa.float64()),
                      "recall": pa.array([], pa.float64())})
    if len(scores) == 0:
        return ThresholdChoice(target, None, None, None, labelled, NO_LABELS, empty)
    if not correct.any():
        return ThresholdChoice(target, None, 0.0, 0.0, labelled,
                               "no labelled match is found at any threshold: none is chosen", empty)
    precision, recall, thresholds = precision_recall_curve(correct, scores, drop_intermediate=False)
    # the last point has no threshold; recall counts the labelled rows never found too
    precision, recall = precision[:-1], recall[:-1] * correct.sum() / max(labelled, 1)
    curve = pa.table({"threshold": thresholds, "precision": precision, "recall": recall})
    reach = np.flatnonzero(precision >= target)
    if len(reach) == 0:
        return ThresholdChoice(target, None, float(precision.max()), None, labelled,
                               f"no threshold reaches precision {target}: none is chosen", curve)
    i = reach[0]  # thresholds ascend: the first that reaches the target keeps the most matches
    return ThresholdChoice(target, float(thresholds[i]), float(precision[i]), float(recall[i]), labelled,
                           f"the smallest threshold with precision >= {target} on {len(scores)} labelled matches",
                           curve)
