"""What every task shares: encoding deduplicated phrases, cosine, tie-aware top-1, result rows.

An encoder is any object with a `name` and `encode(list[str], normalize=...) -> np.ndarray`
(one row per phrase; `normalize=True`: L2-normalised rows, `normalize=False`: the raw
pooled vectors). Nothing else about it is assumed.

Ties. When several candidates share the top score (a constant encoder, out-of-vocabulary
words that all map to zero, two strings with the same character n-grams), picking the first
one would reward whatever order the file happens to list candidates in (Turney lists the
correct answer first: a constant encoder would score 100). Instead a query whose top score
is shared by k candidates, g of them correct, scores g/k: the expected accuracy under a
uniformly random choice among the tied candidates. With no ties this is plain top-1.
"""
from __future__ import annotations

import numpy as np

TIE_TOLERANCE = 1e-6  # scores this close to the maximum count as tied


def model_name(model) -> str:
    return str(getattr(model, "name", None) or type(model).__name__)


def row(model, task: str, dataset: str, metric: str, value: float, seed: int | None = None) -> dict:
    return {"model": model_name(model), "task": task, "dataset": dataset, "metric": metric,
            "value": float(value), "seed": seed}


def encode_unique(encoder, phrases: list[str], normalize: bool = True, batch_size: int | None = None) -> np.ndarray:
    """Vectors aligned with `phrases`, each distinct phrase encoded once."""
    unique = list(dict.fromkeys(phrases))
    kwargs = {"normalize": normalize}
    if batch_size is not None:
        kwargs["batch_size"] = batch_size
    vectors = np.asarray(encoder.encode(unique, **kwargs), dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(unique):
        raise ValueError(f"{model_name(encoder)}.encode returned shape {vectors.shape} for "
                         f"{len(unique)} phrases; expected ({len(unique)}, dim)")
    if not np.isfinite(vectors).all():
        raise ValueError(f"{model_name(encoder)}.encode returned non-finite values")
    if len(unique) == len(phrases):
        return vectors
    position = {p: i for i, p in enumerate(unique)}
    return vectors[[position[p] for p in phrases]]


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; all-zero rows stay zero (their cosine with anything is 0)."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def top1_credit(scores: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Per query (row): the share of its top-scoring candidates that are correct.

    scores: (queries, candidates); correct: boolean, same shape (or broadcastable).
    """
    best = scores.max(axis=1, keepdims=True)
    tied = scores >= best - TIE_TOLERANCE
    return (tied & correct).sum(axis=1) / tied.sum(axis=1)


def top1_credit_chunked(queries: np.ndarray, candidates: np.ndarray, gold_index: np.ndarray,
                        chunk: int = 2048) -> np.ndarray:
    """top1_credit of inner-product search (exact), queries in chunks to bound memory;
    the correct candidate of query i is candidates[gold_index[i]]."""
    out = np.empty(len(queries))
    for start in range(0, len(queries), chunk):
        scores = queries[start:start + chunk] @ candidates.T
        idx = gold_index[start:start + chunk]
        correct = np.zeros(scores.shape, dtype=bool)
        correct[np.arange(len(idx)), idx] = True
        out[start:start + chunk] = top1_credit(scores, correct)
    return out
