"""Top-k matches of one side's names among another's: rows ``left_row, right_row, left, right,
score, rank`` (rank 1 the best; equal scores ranked by right_row), and a threshold that drops the
rows below it.

Each distinct name is encoded and indexed once: rows holding the same name share its vector, so
they tie exactly and are ranked by their row. The table's schema is the matches artifact's
(``storage.schemas.MATCHES``: the CLI and the flow cast to it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import index as vector_index
from .sides import Side

COLUMNS = ("left_row", "right_row", "left", "right", "score", "rank")


@dataclass
class Encoded:
    """A side's distinct names and their unit vectors; ``inverse[i]``: the distinct name of name i."""

    side: Side
    distinct: list[str]
    vectors: np.ndarray | None  # (len(distinct), dim) float32, L2-normalised; None: held by an index alone
    inverse: np.ndarray  # int64, one per side.names
    _members: dict = field(default_factory=dict, repr=False)

    def members(self, cap: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, positions): the first ``cap`` positions in the side (ascending) of each distinct
        name are ``positions[starts[d]:starts[d + 1]]``."""
        if cap not in self._members:  # a right side is queried batch after batch
            self._members = {cap: self._first_members(cap)}
        return self._members[cap]

    def _first_members(self, cap: int) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(self.inverse, kind="stable")
        counts = np.minimum(np.bincount(self.inverse, minlength=len(self.distinct)), cap)
        first = np.searchsorted(self.inverse[order], np.arange(len(self.distinct)))
        starts = np.concatenate([[0], np.cumsum(counts)])
        positions = order[_ranges(first, counts)]
        return starts, positions


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of arange(s, s + n) for each (s, n)."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offsets = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + offsets


def encode_side(encoder, side: Side, batch_size: int | None = None) -> Encoded:
    """Encode each distinct name of ``side`` once, with a loaded encoder (unit vectors)."""
    distinct, inverse = distinct_names(side)
    vectors = encoder.encode(distinct, batch_size=batch_size, show_progress=False)  # (0, dim) for none
    return Encoded(side, distinct, np.asarray(vectors, np.float32), inverse)


def distinct_names(side: Side) -> tuple[list[str], np.ndarray]:
    """(the distinct names of ``side`` in order of first appearance, each name's index among them)."""
    dictionary = pa.array(side.names, pa.string()).dictionary_encode()
    return dictionary.dictionary.to_pylist(), dictionary.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def encoded_from_vectors(side: Side, vectors: np.ndarray | None, count: int | None = None) -> Encoded:
    """``side`` with the vectors :func:`encode_side` gave it earlier (kept by a flow), or without them
    (None, and ``count``: how many the index holding them has): the right side of :func:`top_k` needs
    only its names and rows, the index has its vectors."""
    distinct, inverse = distinct_names(side)
    count = len(vectors) if vectors is not None else count
    if count is not None and count != len(distinct):
        raise ValueError(f"{count} vectors for {len(distinct)} distinct names")
    return Encoded(side, distinct, None if vectors is None else np.asarray(vectors, np.float32), inverse)


def build_index(right: Encoded, kind: str = "auto", exact_limit: int = vector_index.EXACT_LIMIT):
    """An index of the right side's distinct names."""
    return vector_index.build_index(right.vectors, kind, exact_limit)


def top_k(left: Encoded, right: Encoded, index, k: int = 1, exclude_self: bool = False) -> pa.Table:
    """The ``k`` best right rows of each left row (fewer where the right side has fewer). Of the right
    side only its names and rows are used (its vectors are ``index``'s; they may be None here).

    ``exclude_self``: left and right are one table (dedupe; the same side, or partitions of it
    with the table's rows): a row is never its own match, though other rows with the same name are.
    Partial results over partitions of the right side combine with :func:`merge_top_k`.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    cap = k + 1 if exclude_self else k  # rows of one distinct name that can make a row's top k
    scores, ids = vector_index.search(index, left.vectors, cap)
    starts, positions = right.members(cap)
    # candidates of each distinct left name: every hit's first rows, best first, ties by right row
    query = np.repeat(np.arange(len(left.distinct)), ids.shape[1])
    hit, score = ids.ravel(), scores.ravel()
    found = hit >= 0
    query, hit, score = query[found], hit[found], score[found]
    sizes = starts[hit + 1] - starts[hit]
    query, score = np.repeat(query, sizes), np.repeat(score, sizes)
    right_pos = positions[_ranges(starts[hit], sizes)]
    order = np.lexsort((right_pos, -score, query))
    query, score, right_pos = query[order], score[order], right_pos[order]
    # each left row takes its distinct name's candidates
    first = np.searchsorted(query, np.arange(len(left.distinct)))
    counts = np.bincount(query, minlength=len(left.distinct))
    lengths = counts[left.inverse]
    left_pos = np.repeat(np.arange(len(left.inverse)), lengths)
    pick = _ranges(first[left.inverse], lengths)
    right_pos, score = right_pos[pick], score[pick]
    if exclude_self:
        other = left.side.rows[left_pos] != right.side.rows[right_pos]
        left_pos, right_pos, score = left_pos[other], right_pos[other], score[other]
    rank = _ranks(left_pos)
    best = rank <= k
    left_pos, right_pos, score, rank = left_pos[best], right_pos[best], score[best], rank[best]
    return pa.table({
        "left_row": pa.array(left.side.rows[left_pos], pa.int64()),
        "right_row": pa.array(right.side.rows[right_pos], pa.int64()),
        "left": pa.array(left.side.names, pa.string()).take(pa.array(left_pos)),
        "right": pa.array(right.side.names, pa.string()).take(pa.array(right_pos)),
        "score": pa.array(score.astype(np.float32), pa.float32()),
        "rank": pa.array(rank.astype(np.int32), pa.int32()),
    })


def _ranks(group: np.ndarray) -> np.ndarray:
    """1, 2, ... within each run of equal values of a sorted ``group``."""
    return (np.arange(len(group)) - np.searchsorted(group, group) + 1).astype(np.int32)


def merge_top_k(parts: list[pa.Table], k: int) -> pa.Table:
    """The top ``k`` of each left row over :func:`top_k`'s results against partitions of the right
    side (rows being the whole table's), ranked again: best score first, ties by right_row."""
    both = pa.concat_tables(parts)
    both = both.sort_by([("left_row", "ascending"), ("score", "descending"), ("right_row", "ascending")])
    rank = _ranks(both["left_row"].to_numpy())
    return both.set_column(both.schema.get_field_index("rank"), "rank", pa.array(rank, pa.int32())).filter(rank <= k)


def above_threshold(matches: pa.Table, threshold: float | None) -> tuple[pa.Table, int]:
    """(the rows with score >= ``threshold``, how many were dropped); no threshold keeps all."""
    if threshold is None:
        return matches, 0
    kept = matches.filter(pc.greater_equal(matches["score"], pa.scalar(threshold, pa.float32())))
    return kept, matches.num_rows - kept.num_rows


@dataclass
class Counts:
    """How every left row ended: skipped (blank name), matched, every candidate below the threshold,
    or no candidate at all (a table of one distinct row linked to itself).

    ``rows == skipped + matched + below_threshold + no_candidate``, and the pairs likewise:
    ``candidate_pairs == pairs + pairs_below_threshold``."""

    rows: int
    skipped: int
    matched: int
    below_threshold: int
    no_candidate: int
    candidate_pairs: int
    pairs: int
    pairs_below_threshold: int


def count(left: Side, candidates: pa.Table, kept: pa.Table) -> Counts:
    """The counts of a left side whose ``candidates`` (:func:`top_k`) were cut to ``kept``."""
    with_candidates = len(pc.unique(candidates["left_row"]))
    matched = len(pc.unique(kept["left_row"]))
    return Counts(left.total, left.skipped, matched, with_candidates - matched, len(left.names) - with_candidates,
                  candidates.num_rows, kept.num_rows, candidates.num_rows - kept.num_rows)
