"""What every task shares: encoding deduplicated phrases, cosine, tie-aware top-1, result rows.

Rows. Every score is one row: `value` (x100 for scores), `std` and `n` over its draws, and
`paper_value`, the paper protocol's own single draw. A dataset scored by a random draw (KMeans'
random state, a probe's seed) keeps each draw in `draws`, in draw order, so that two models of
one run pair draw i with draw i; a deterministic one is a single draw (`std` 0, `n` 1) and keeps
its per-item scores in `items` (and `item_targets` where the metric correlates the items with
gold values) for a paired bootstrap (`stable.py`).

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

import os
from contextlib import contextmanager

import numpy as np

TIE_TOLERANCE = 1e-6  # scores this close to the maximum count as tied


def model_name(model) -> str:
    """The model's `name` (a string is a name already)."""
    if isinstance(model, str):
        return model
    return str(getattr(model, "name", None) or type(model).__name__)


def row(model, task: str, dataset: str, metric: str, value: float, items=None, item_targets=None) -> dict:
    """A deterministic score: one draw, with its per-item scores when given."""
    return {"model": model_name(model), "task": task, "dataset": dataset, "metric": metric,
            "value": float(value), "std": 0.0, "n": 1, "paper_value": float(value), "draws": None,
            "items": None if items is None else [float(v) for v in items],
            "item_targets": None if item_targets is None else [float(v) for v in item_targets]}


def draws_row(model, task: str, dataset: str, metric: str, draws, paper_draw: int = 0) -> dict:
    """A score over random draws: their mean, sample standard deviation and each draw;
    ``paper_draw`` indexes the draw the paper's protocol makes."""
    draws = np.asarray(draws, dtype=np.float64)
    if len(draws) < 2:
        raise ValueError(f"{dataset} {metric}: a score over draws needs at least 2, got {len(draws)}")
    return {"model": model_name(model), "task": task, "dataset": dataset, "metric": metric,
            "value": float(draws.mean()), "std": float(draws.std(ddof=1)), "n": len(draws),
            "paper_value": float(draws[paper_draw]), "draws": draws.tolist(), "items": None, "item_targets": None}


class CachedEncoder:
    """An encoder's raw vectors, each distinct string encoded once and kept: datasets, draws and
    views (raw or unit vectors) that share strings share their encoding."""

    def __init__(self, base, name: str | None = None):
        self.base, self.name = base, name or model_name(base)
        self.cache: dict[str, np.ndarray] = {}

    def raw(self, phrases, batch_size: int | None = None) -> np.ndarray:
        missing = list(dict.fromkeys(p for p in phrases if p not in self.cache))
        if missing:
            kwargs = {"normalize": False} | ({"batch_size": batch_size} if batch_size is not None else {})
            self.cache.update(zip(missing, np.asarray(self.base.encode(missing, **kwargs), dtype=np.float32)))
        return np.stack([self.cache[p] for p in phrases]) if phrases else np.zeros((0, 0), np.float32)

    def encode(self, phrases, normalize: bool = True, batch_size: int | None = None, **_) -> np.ndarray:
        x = self.raw(phrases, batch_size)
        return l2_normalize(x) if normalize else x


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


def pearson(x, y, axis: int = -1):
    """Pearson r of x and y along ``axis`` (0 where either is constant: r is undefined there)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    xc, yc = x - x.mean(axis=axis, keepdims=True), y - y.mean(axis=axis, keepdims=True)
    denom = np.sqrt((xc * xc).sum(axis=axis) * (yc * yc).sum(axis=axis))
    r = np.divide((xc * yc).sum(axis=axis), denom, out=np.zeros_like(denom), where=denom > 0)
    return float(r) if r.ndim == 0 else r


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


def cores_shared_by(tasks: int | None) -> int | None:
    """This machine's cores shared by ``tasks`` running side by side (None: unknown, e.g. on an
    external cluster's workers, which keep their own setting)."""
    if not tasks:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // tasks)


@contextmanager
def cpu_threads(n: int | None):
    """Within the block, torch (the probes, the ONNX/OpenVINO sessions opened there) and OpenMP/BLAS
    (KMeans) use ``n`` threads; None: leave the process's setting. A Dask worker starts with one
    (its nanny sets OMP_NUM_THREADS=1), sized for tasks side by side: a task that runs alone
    would leave the other cores idle."""
    if not n:
        yield
        return
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(n):
            yield
    finally:
        torch.set_num_threads(before)
