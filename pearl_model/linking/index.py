"""A FAISS index over unit vectors, searched by inner product (= cosine).

``exact`` is ``IndexFlatIP``: every vector scored, the reference. ``hnsw`` is an approximate graph
index (``IndexHNSWFlat``, inner product), for a right side too large to score in full per query;
:func:`recall_against_exact` measures what it misses. ``auto`` picks exact up to ``exact_limit``
vectors. Another kind (IVF, a GPU index) is one more entry in :data:`KINDS`.
"""
from __future__ import annotations

import numpy as np

EXACT_LIMIT = 1_000_000  # vectors an exact index holds under "auto"; above it an approximate one
HNSW_NEIGHBOURS = 32  # graph degree (faiss's M)
HNSW_EF_SEARCH = 128  # candidates visited per query: recall against time


def _exact(dim: int):
    import faiss

    return faiss.IndexFlatIP(dim)


def _hnsw(dim: int):
    import faiss

    index = faiss.IndexHNSWFlat(dim, HNSW_NEIGHBOURS, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efSearch = HNSW_EF_SEARCH
    return index


KINDS = {"exact": _exact, "hnsw": _hnsw}


def choose_kind(n: int, kind: str = "auto", exact_limit: int = EXACT_LIMIT) -> str:
    if kind == "auto":
        return "exact" if n <= exact_limit else "hnsw"
    if kind not in KINDS:
        raise ValueError(f"unknown index kind {kind!r}: one of auto, {', '.join(KINDS)}")
    return kind


def build_index(vectors: np.ndarray, kind: str = "auto", exact_limit: int = EXACT_LIMIT):
    """An index of ``vectors`` (unit rows; id = row number)."""
    base = np.ascontiguousarray(vectors, dtype=np.float32)
    index = KINDS[choose_kind(len(base), kind, exact_limit)](base.shape[1])
    index.add(base)
    return index


def search(index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids), each (n_queries, min(k, index size)), best first; an approximate index may
    return fewer hits, padded with id -1."""
    k = min(k, index.ntotal)
    if k < 1 or len(queries) == 0:
        return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), k)


def recall_against_exact(vectors: np.ndarray, queries: np.ndarray, k: int, index) -> float:
    """The share of the exact top ``k`` ids of ``queries`` that ``index`` (built on ``vectors``) finds."""
    _, exact = search(build_index(vectors, "exact"), queries, k)
    _, found = search(index, queries, k)
    return recall(exact, found)


def recall(exact: np.ndarray, found: np.ndarray) -> float:
    """The share of the ids in ``exact`` (queries x k) that ``found`` holds on the same row (-1: no hit)."""
    hits = sum(len(np.intersect1d(e, f[f >= 0])) for e, f in zip(exact, found))
    return hits / exact.size if exact.size else 1.0
