"""A FAISS index over unit vectors, searched by inner product (= cosine).

``exact`` is ``IndexFlatIP``: every vector scored, the reference. ``hnsw`` is an approximate graph
index (``IndexHNSWFlat``, inner product), for a right side too large to score in full per query;
:func:`recall_against_exact` measures what it misses, and :func:`tune_ef_search` finds the smallest
efSearch (candidates visited per query) that reaches a recall target. ``auto`` picks exact up to
``exact_limit`` vectors. Another kind (IVF, a GPU index) is one more entry in :data:`KINDS`.

Both kinds keep their vectors (flat storage): :func:`stored_vectors` gives them back, so a saved
index needs no copy of its vectors beside it.
"""
from __future__ import annotations

import numpy as np

EXACT_LIMIT = 1_000_000  # vectors an exact index holds under "auto"; above it an approximate one
HNSW_NEIGHBOURS = 32  # graph degree (faiss's M)
HNSW_EF_SEARCH = 128  # candidates visited per query: recall against time
# efSearch tried in turn by tune_ef_search, the last one the cap (beyond it a 100k-name HNSW index
# costs a query about what scoring every vector does)
EF_SEARCH_STEPS = (16, 32, 64, 128, 256, 512, 1024)


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


def set_ef_search(index, ef_search: int) -> None:
    """The efSearch of an HNSW index (an exact index has none: unchanged)."""
    hnsw = getattr(index, "hnsw", None)
    if hnsw is not None:
        hnsw.efSearch = ef_search


def stored_vectors(index) -> np.ndarray:
    """The vectors ``index`` holds, in id order (both kinds store them as they were added): a view of
    the index's own storage, not a copy (a million vectors are 1.5 GB), valid while ``index`` lives."""
    import faiss

    flat = faiss.downcast_index(index.storage) if hasattr(index, "storage") else index
    view = faiss.rev_swig_ptr(flat.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)
    return np.asarray(_Holding(index, view))


class _Holding:
    """An array interface over ``view`` that keeps ``index`` (which owns the memory) alive as the
    array's base: the array may outlive the caller's reference to the index."""

    def __init__(self, index, view: np.ndarray):
        self.index = index
        self.__array_interface__ = view.__array_interface__


def exact_search(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`search` of an exact index of ``vectors``, without building one (which copies them)."""
    import faiss

    k = min(k, len(vectors))
    if k < 1 or len(queries) == 0:
        return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
    return faiss.knn(np.ascontiguousarray(queries, dtype=np.float32), np.ascontiguousarray(vectors, dtype=np.float32),
                     k, metric=faiss.METRIC_INNER_PRODUCT)


def recall_against_exact(vectors: np.ndarray | None, queries: np.ndarray, k: int, index,
                         self_ids: np.ndarray | None = None) -> float:
    """The share of the exact top ``k`` ids of ``queries`` that ``index`` (built on ``vectors``; None:
    the vectors ``index`` holds) finds. ``self_ids``: see :func:`tune_ef_search`."""
    vectors = stored_vectors(index) if vectors is None else vectors
    extra = 0 if self_ids is None else 1
    _, exact = exact_search(vectors, queries, k + extra)
    _, found = search(index, queries, k + extra)
    return recall(others(exact, self_ids, k), others(found, self_ids, k))


def tune_ef_search(index, queries: np.ndarray, k: int, target: float, steps=EF_SEARCH_STEPS,
                   candidates: int | None = None, self_ids: np.ndarray | None = None) -> list[tuple[int, float]]:
    """[(efSearch, recall@k against exact)] of ``queries`` on the HNSW ``index`` at each of ``steps`` in
    turn, up to the first that reaches ``target`` (all of them when none does: the last is the cap).
    ``candidates`` (default ``k``): the hits a query asks for, as the caller will search; recall counts
    the first ``k`` of them. A step below ``candidates`` is not tried: FAISS searches with
    max(efSearch, hits asked for), so it would repeat the search at ``candidates``. The index is
    left at the last efSearch tried.

    ``self_ids`` (dedupe: a table linked with itself): each query's own id in ``index``, -1 where it
    holds none. A query finds itself at any efSearch, so its own id is left out of the exact and the
    found neighbours alike, one more hit asked for, as a dedupe query does: recall is that of the
    nearest *other* items."""
    extra = 0 if self_ids is None else 1
    candidates = max(candidates or k, k) + extra
    _, exact = exact_search(stored_vectors(index), queries, k + extra)
    exact = others(exact, self_ids, k)
    tried = []
    for ef in [ef for ef in steps if ef >= candidates] or [max(steps)]:
        set_ef_search(index, ef)
        tried.append((ef, recall(exact, others(search(index, queries, candidates)[1], self_ids, k))))
        if tried[-1][1] >= target:
            break
    return tried


def others(ids: np.ndarray, self_ids: np.ndarray | None, k: int) -> np.ndarray:
    """The first ``k`` ids of each row of ``ids`` (queries x hits) but the row's own (``self_ids``; None:
    no query has one), in order; -1 pads a row with fewer."""
    if self_ids is None:
        return ids[:, :k]
    kept = np.where(ids == np.asarray(self_ids, np.int64)[:, None], -1, ids)
    order = np.argsort(kept < 0, axis=1, kind="stable")  # the ids kept first, as they were ordered
    out = np.take_along_axis(kept, order, axis=1)[:, :k]
    return np.pad(out, ((0, 0), (0, k - out.shape[1])), constant_values=-1)


def chosen_ef_search(tried: list[tuple[int, float]], target: float) -> tuple[int, float, bool]:
    """(efSearch, its recall, whether it reaches ``target``) of one index's :func:`tune_ef_search`:
    the first that reaches the target, else the last tried (the cap)."""
    for ef, r in tried:
        if r >= target:
            return ef, r, True
    return tried[-1][0], tried[-1][1], False


def recall(exact: np.ndarray, found: np.ndarray) -> float:
    """The share of the ids in ``exact`` (queries x k; -1: none, an index with fewer items) that
    ``found`` holds on the same row (-1: no hit)."""
    hits = sum(len(np.intersect1d(e[e >= 0], f[f >= 0])) for e, f in zip(exact, found))
    total = int((exact >= 0).sum())
    return hits / total if total else 1.0
