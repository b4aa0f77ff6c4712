"""Rescoring embedding candidates with string similarity: the top-k right names of each left row
(:func:`.matches.top_k`, k > 1) scored again by a linear combination of their cosine and
rapidfuzz's scorers, then ranked again.

Embeddings find names that mean the same though spelt apart; string similarity rewards the exact
tokens (years, numbers, initials) that an embedding blurs. The weights are constants chosen by
the AutoFJ study (``benchmarks/link_autofj.py``, ``docs/research/eval-link-autofj.md``), not
fitted per table: a user without labels gets them as they are.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from rapidfuzz import fuzz, process, utils

from .matches import COLUMNS, merge_top_k
from .request import COSINE_WEIGHT, WEIGHTS

SCORERS = {"ratio": fuzz.ratio, "token_set_ratio": fuzz.token_set_ratio, "WRatio": fuzz.WRatio}
# lower-cased, non-alphanumerics as spaces: case and punctuation are not what tells names apart
PROCESSOR = utils.default_process
FEATURES = ("cosine", *SCORERS)

# chosen by the study on the labelled halves of the 50 AutoFJ tasks (see the module docstring): the
# correct name is among the 20 best by cosine for most rows, and each more candidate costs a string
# score per row. The weights are a request's defaults, so they live with its rules (.request).
CANDIDATES = 20  # embedding candidates rescored per left row: top_k's k


def default_weights(cosine_weight: float = COSINE_WEIGHT) -> dict[str, float]:
    """The study's combination at ``cosine_weight`` (the rest on its string scorer)."""
    if not 0.0 <= cosine_weight <= 1.0:
        raise ValueError(f"cosine_weight {cosine_weight} is not in [0, 1]")
    (scorer,) = set(WEIGHTS) - {"cosine"}
    return {"cosine": cosine_weight, scorer: 1.0 - cosine_weight}


def candidate_count(k: int, cosine_weight: float = COSINE_WEIGHT) -> int:
    """How many embedding candidates per left row :func:`best` needs to return ``k``."""
    default_weights(cosine_weight)
    return k if cosine_weight == 1.0 else max(k, CANDIDATES)


def best(candidates: pa.Table, k: int, cosine_weight: float = COSINE_WEIGHT) -> pa.Table:
    """The ``k`` best of each left row's :func:`candidate_count` embedding candidates by the
    default score, in the matches' columns (``score`` the combined one)."""
    if cosine_weight == 1.0:  # candidate_count asked top_k for k: they are the k best already, ranked
        return candidates
    return rescore(candidates, k, default_weights(cosine_weight)).select(list(COLUMNS))


def string_similarity(left: list[str], right: list[str], scorer: str) -> np.ndarray:
    """rapidfuzz's ``scorer`` of each pair (left[i], right[i]), 0..1."""
    scores = process.cpdist(left, right, scorer=SCORERS[scorer], processor=PROCESSOR, dtype=np.float32, workers=-1)
    return np.asarray(scores, np.float32) / 100


def with_features(matches: pa.Table, scorers=tuple(SCORERS)) -> pa.Table:
    """``matches`` with a ``cosine`` column (its embedding score) and one column per rapidfuzz
    scorer; columns already there are kept, so a table rescored many times is scored once."""
    if "cosine" not in matches.column_names:
        matches = matches.append_column("cosine", matches["score"])
    left, right = matches["left"].to_pylist(), matches["right"].to_pylist()
    for name in scorers:
        if name not in matches.column_names:
            matches = matches.append_column(name, pa.array(string_similarity(left, right, name), pa.float32()))
    return matches


def combined(matches: pa.Table, weights: dict[str, float] = WEIGHTS) -> np.ndarray:
    """The weighted sum of the features named in ``weights`` (columns of :func:`with_features`)."""
    _check(weights)
    total = np.zeros(matches.num_rows, np.float64)
    for name, weight in weights.items():
        total += weight * matches[name].to_numpy().astype(np.float64)
    return total.astype(np.float32)


def rescore(matches: pa.Table, k: int = 1, weights: dict[str, float] = WEIGHTS) -> pa.Table:
    """The ``k`` best of each left row's candidates by the combined score (``score``; the
    embedding's cosine kept in ``cosine``, each string score in its column), ranked again: best
    first, ties by right_row."""
    _check(weights)
    matches = with_features(matches, [name for name in weights if name != "cosine"])
    scored = matches.set_column(matches.schema.get_field_index("score"), "score",
                                pa.array(combined(matches, weights), pa.float32()))
    return merge_top_k([scored], k)


def _check(weights: dict[str, float]) -> None:
    unknown = set(weights) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}: one of {', '.join(FEATURES)}")
