"""A threshold a user can choose: from labels (a random sample of left names, each with its partner in
the right table or an empty right cell: no partner), the precision/recall curve of the best matches and
the smallest threshold whose precision on the labels reaches a target (the one that keeps the most
matches), with 95% Wilson intervals on its precision and recall. Without labels nothing is chosen:
scores are reported as they are.

The rule is the point estimate's, not the interval's lower bound: with the hundred or so labels a
user checks, a lower bound of 0.9 needs a labelled precision near 0.97, which tables with ambiguous
names never reach (no threshold at all) or reach by dropping most matches; once names without a
partner count against it, the point rule delivers about the target. The interval says how far to
trust it (docs/using-the-model.md#choosing-a-threshold).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pearl_model.linking.sides import MAX_ROW_BYTES, LinkInputError, read_columns

NO_LABELS = "no labelled pairs: no threshold is chosen, scores are reported as they are"
UPPER_BOUND = ("the labels hold no left name without a partner (an empty right cell): the precision counts only "
               "names that have one, and is an upper bound")


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion (``successes`` of ``trials``); [0, 1] where there
    is no trial. It stays inside [0, 1] and keeps its coverage near 0 and 1, where precision lives,
    unlike the normal approximation."""
    from scipy.stats import binomtest

    if trials == 0:
        return 0.0, 1.0
    ci = binomtest(int(successes), int(trials)).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


@dataclass
class Labelled:
    """The rank-1 match of each labelled left name found among the candidates (its score, whether it is
    right: a name labelled without a partner is never), and the labelled names: with a partner (the
    recall's denominator, those without a candidate included as misses) and without one."""

    scores: np.ndarray
    correct: np.ndarray
    with_partner: int
    without_partner: int


@dataclass
class ThresholdChoice:
    """The threshold chosen (None: none is; ``note`` says why), its precision and recall on the labels
    with their 95% Wilson intervals and the counts behind them."""

    target: float
    threshold: float | None
    precision: float | None
    recall: float | None
    labelled: int  # left names labelled with a partner, the recall's denominator
    note: str
    curve: pa.Table = field(repr=False)  # threshold, precision, recall; one row per distinct score
    without_partner: int = 0  # left names labelled with no partner
    kept: int = 0  # labelled names whose best match the threshold keeps: the precision's denominator
    right: int = 0  # of them, matched to their partner
    precision_interval: tuple[float, float] | None = None
    recall_interval: tuple[float, float] | None = None

    @property
    def warning(self) -> str | None:
        """One line when the precision cannot see the commonest error, a match for a name that has none."""
        return UPPER_BOUND if self.labelled and not self.without_partner else None

    def summary(self) -> str:
        """The chosen threshold in one line: its precision and recall with their intervals and counts."""
        p, r = self.precision_interval, self.recall_interval
        return (f"threshold {self.threshold:.4f}: precision {self.precision:.3f} (95% {p[0]:.3f}-{p[1]:.3f}, "
                f"{self.right} right of {self.kept} labelled matches kept), recall {self.recall:.3f} "
                f"(95% {r[0]:.3f}-{r[1]:.3f}) on {self.labelled} left names labelled with a partner and "
                f"{self.without_partner} without ({self.note})")


def label_pairs(pairs: pa.Table, source: str) -> pa.Table:
    """Labels (columns ``left``, ``right``, read as text) as this module reads them: a row with a blank
    left cell is dropped, a blank or null right cell becomes null (the name has no partner). A left name
    both with a partner and without one is refused: such labels say two things of one name."""
    blank = lambda c: pc.fill_null(pc.equal(pc.utf8_trim_whitespace(c), ""), True)  # noqa: E731
    pairs = pairs.select(["left", "right"]).filter(pc.invert(blank(pairs["left"])))
    right = pc.if_else(blank(pairs["right"]), pa.scalar(None, pa.string()), pairs["right"])
    pairs = pa.table({"left": pairs["left"], "right": right})
    none = pc.is_null(pairs["right"])
    both = pc.is_in(pairs.filter(none)["left"], pc.unique(pairs.filter(pc.invert(none))["left"]))
    if pc.any(both).as_py():
        name = pairs.filter(none)["left"].filter(both)[0].as_py()
        partner = pairs.filter(pc.and_(pc.equal(pairs["left"], name), pc.invert(none)))["right"][0].as_py()
        raise LinkInputError(f"{source}: the left name {name!r} has a partner ({partner!r}) and an empty right "
                             "cell (no partner); a labelled name has partners or none")
    return pairs


def read_labels(url: str, max_row_bytes: int = MAX_ROW_BYTES) -> pa.Table:
    """The labels table at ``url`` (columns ``left``, ``right``; CSV or Parquet) through the link tables'
    door (:func:`~pearl_model.linking.sides.read_columns`), as :func:`label_pairs` reads it."""
    return label_pairs(read_columns(url, ["left", "right"], max_row_bytes), url)


def check_names(pairs: pa.Table, source: str, left_names, right_names, left: str, right: str) -> None:
    """Refuse labels that name a left name absent from ``left_names`` or a partner absent from
    ``right_names`` (the tables' names; ``left``, ``right``: the tables, for the message): such a
    label judges no match, and is most likely a typo or labels of other tables."""
    for side, names, table in (("left", left_names, left), ("right", right_names, right)):
        absent = absent_names(pairs, side, names)
        if absent:
            more = f" (nor are {len(absent) - 1} more)" if len(absent) > 1 else ""
            raise LinkInputError(f"{source}: the {side} name {absent[0]!r} is not in {table}{more}; labels name "
                                 "the tables' names as they are written")


def absent_names(pairs: pa.Table, side: str, names) -> list[str]:
    """The distinct names of the labels' ``side`` column (left or right; no-partner cells aside) that
    ``names`` (an array of the table's names) does not hold."""
    wanted = pc.unique(pairs[side].drop_null())
    return pc.filter(wanted, pc.invert(pc.is_in(wanted, pa.array(names, pa.string())))).to_pylist()


def labelled_best_matches(matches: pa.Table, labels: pa.Table) -> Labelled:
    """The rank-1 match of each left row whose name the labels (:func:`label_pairs`) name, judged
    against them: right when the pair is labelled, wrong otherwise (always, for a name labelled with
    no partner)."""
    partnered = labels.filter(pc.is_valid(labels["right"]))
    pairs = set(zip(partnered["left"].to_pylist(), partnered["right"].to_pylist()))
    with_partner = {left for left, _ in pairs}
    without = set(labels.filter(pc.is_null(labels["right"]))["left"].to_pylist())
    known = pa.array(sorted(with_partner | without), pa.string())
    best = matches.filter(pc.and_(pc.equal(matches["rank"], 1), pc.is_in(matches["left"], known)))
    correct = np.array([pair in pairs for pair in zip(best["left"].to_pylist(), best["right"].to_pylist())], bool)
    in_best = best["left"].to_pylist()
    return Labelled(best["score"].to_numpy().astype(np.float64), correct,
                    # a labelled name no best match holds (no candidate) is a miss of the recall
                    sum(name in with_partner for name in in_best) + len(with_partner - set(in_best)),
                    sum(name in without for name in in_best))


def threshold_for_precision(scores: np.ndarray, correct: np.ndarray, target: float,
                            labelled: int | None = None, without_partner: int | None = None) -> ThresholdChoice:
    """The smallest score threshold at which the matches scoring at least it are ``target`` precise.

    ``correct[i]``: match i is a true one; ``labelled``: the true matches there are (default: the
    correct ones among ``scores``), recall's denominator; ``without_partner``: the labelled names
    with no partner among ``scores`` (only said in the report: their matches are wrong ones)."""
    from sklearn.metrics import precision_recall_curve

    scores, correct = np.asarray(scores, np.float64), np.asarray(correct, bool)
    labelled = int(correct.sum()) if labelled is None else labelled
    without_partner = 0 if without_partner is None else without_partner
    empty = pa.table({"threshold": pa.array([], pa.float64()), "precision": pa.array([], pa.float64()),
                      "recall": pa.array([], pa.float64())})
    if len(scores) == 0:
        return ThresholdChoice(target, None, None, None, labelled, NO_LABELS, empty, without_partner)
    if not correct.any():
        return ThresholdChoice(target, None, 0.0, 0.0, labelled,
                               "no labelled match is found at any threshold: none is chosen", empty, without_partner)
    precision, recall, thresholds = precision_recall_curve(correct, scores, drop_intermediate=False)
    # the last point has no threshold; recall counts the labelled rows never found too
    precision, recall = precision[:-1], recall[:-1] * correct.sum() / max(labelled, 1)
    curve = pa.table({"threshold": thresholds, "precision": precision, "recall": recall})
    reach = np.flatnonzero(precision >= target)
    if len(reach) == 0:
        return ThresholdChoice(target, None, float(precision.max()), None, labelled,
                               f"no threshold reaches precision {target}: none is chosen", curve, without_partner)
    i = reach[0]  # thresholds ascend: the first that reaches the target keeps the most matches
    keep = scores >= thresholds[i]
    kept, right = int(keep.sum()), int(correct[keep].sum())
    precision_interval, recall_interval = wilson(right, kept), wilson(right, labelled)
    return ThresholdChoice(target, float(thresholds[i]), float(precision[i]), float(recall[i]), labelled,
                           f"the smallest threshold with precision >= {target} on {len(scores)} labelled matches",
                           curve, without_partner, kept, right, precision_interval, recall_interval)
