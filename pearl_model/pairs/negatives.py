"""PEARL hard-negative mining: lexically close, semantically far phrases.

For every phrase, candidates are the other phrases whose edit similarity is at least
``threshold`` (the paper: 0.70, at most 50 candidates, the most similar kept); each candidate
gets ``score = edit_sim - cos_norm`` where ``cos_norm`` is its embedding cosine min-max
normalised within the phrase's candidate list, and the top ``k`` with ``score > margin``
(0.3) are the hard negatives ("The New York Review" for "The New York Times").

Edit similarity. ``edit_sim(a, b) = Indel.normalized_similarity(norm(a), norm(b))`` from
rapidfuzz, i.e. ``fuzz.ratio / 100`` (python-Levenshtein's ``ratio``), which is
``1 - (m + n - 2L) / (m + n) = 2L / (m + n)`` for lengths m, n and L = the length of a longest
common subsequence. (Not ``Levenshtein.normalized_similarity``, ``1 - lev / max(m, n)``.)
``norm`` casefolds, turns control characters into spaces and collapses whitespace. A pair is a
candidate when ``edit_sim >= threshold`` (rapidfuzz's inclusive ``score_cutoff``); phrases with
an empty normal form, and pairs whose normal forms are identical (the same phrase), never are.

Candidate generation is a prefix-filtering set-similarity join, never all pairs. Tokens of a
phrase are the character q-grams of its normal form padded with q-1 sentinels on each side
(``m + q - 1`` of them), the i-th repeat of a gram numbered i so that a multiset is a set.
Lemma (q-gram count filter for the Indel distance ``d = m + n - 2L``): the padded q-gram
multisets of a and b share at least ``B = L + q - 1 - (q-1)*d`` grams. Proof: write c for a
common subsequence of length L; padded c has ``L + q - 1`` windows of q consecutive symbols,
each spanning q-1 of its gaps. a is c with ``m - L`` symbols inserted into gaps of c, b is c with
``n - L`` others inserted, so at most d gaps receive anything; a window spanning no such gap
occurs verbatim in both padded a and padded b, distinct windows at distinct positions, and each
gap is spanned by at most q-1 windows. So ``B = (2q-1)L - (q-1)(m+n) + q - 1``; for q=1 it is
``B = L``. Since ``edit_sim >= t`` means ``L >= ceil(t(m+n)/2)`` and B grows with L, the overlap
any partner of a length-m phrase is guaranteed is ``alpha(m) = min_n B(m, n, ceil(t(m+n)/2))``
over partner lengths n with ``ceil(t(m+n)/2) <= min(m, n)`` (``min_overlap``).
Prefix filter (Chaudhuri et al. 2006; Bayardo et al. 2007): with tokens sorted by one global
total order, if ``|x & y| >= alpha`` then the first ``|x| - alpha + 1`` tokens of x and of y
share a token (the smallest common token has at least alpha-1 common tokens after it in each).
Using ``alpha(m) <= B <= |x & y|`` on each side only lengthens the prefixes, so every pair with
``edit_sim >= t`` shares at least one blocking key. The order is global rarity (document
frequency from ``gram_counts``, ties by the token), which makes the prefixes the rarest grams.

Why q=2 and not 3: the guarantee needs ``alpha >= 1``. As ``m + n`` grows, B at the threshold
behaves like ``(m+n)(t(2q-1)/2 - (q-1))``, non-negative for all lengths only when
``t >= 2(q-1)/(2q-1)``: any t for q=1, ``t >= 2/3`` for q=2, ``t >= 0.8`` for q=3. At t=0.7
3-grams guarantee nothing: "oabpcdqefrghsijtklmn" / "awbcxdeyfgzhijklumnv" (the core
"abcdefghijklmn" with 6 new symbols inserted into each side so that no two adjacent gaps of the
core stay clean) have ratio 0.70 and no shared padded 3-gram (and exactly alpha(20) = 3 shared
bigrams: the bound is tight). ``blocking_keys`` raises rather than return keys that cannot be
trusted. q=2 prunes better than q=1 on phrases (bigrams are far rarer than characters).

How much this prunes. At t=0.7 the bound is weak (alpha is 2-5 bigrams for phrases of 5-40
characters), so a prefix is most of a phrase's bigrams, a block is every phrase sharing a
not-too-common bigram, and a pair sharing several keys is checked in each of their blocks.
Measured (pairs checked / n(n-1)/2): 0.52 on 20k Wikipedia titles and anchors with variants,
1.3 on a synthetic corpus drawn from a 57-word vocabulary; at t=0.85, 0.06. That is exact
and can run partitioned; what bounds the cost is ``max_block``: a member is compared with at
most ``max_block - 1`` neighbours per block, so the join costs at most
``keys * (max_block - 1)`` comparisons, linear in the corpus, and the pairs it leaves out are
counted (``CandidateStats.pairs_skipped``).

Map-reduce for a Dask stage, no process ever holding all pairs:
  1. map ``gram_counts`` over partitions, reduce with ``merge_gram_counts``, broadcast;
  2. map ``blocking_keys`` -> rows (key, id, phrase); shuffle on key;
  3. per key: ``candidate_pairs(block, threshold, max_block=..., stats=...)``; members sorted
     by length, each compared only with the following ones of feasible length (exact), at
     most ``max_block - 1`` of them (sorted neighbourhood by length; ``None``: all);
  4. ``both_directions`` then shuffle on the query id; per query ``top_candidates`` (dedupes
     pairs found in several blocks, keeps the ``max_candidates`` most similar);
  5. join the embeddings; ``select_negatives`` per query.
``mine_negatives`` runs the same functions in one process (tests, small corpora).
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Hashable, Iterable, Iterator, Sequence

import numpy as np
from rapidfuzz.distance import Indel
from rapidfuzz.process import cdist

__all__ = [
    "normalize", "edit_similarity", "qgram_tokens", "min_overlap", "gram_counts",
    "merge_gram_counts", "blocking_keys", "default_q", "max_partner_length", "candidate_pairs",
    "both_directions", "top_candidates", "cosine_scores", "normalise_cosines", "rank_negatives",
    "select_negatives", "semantic_neighbours", "CandidateStats", "blocked_candidates",
    "brute_force_candidates", "mine_negatives",
]

LEFT_PAD, RIGHT_PAD, _SEP = "\x02", "\x03", "\x1f"  # control chars: never in a normal form
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SPACES = re.compile(r"\s+")
# The bound is computed for threshold - _EPS so float rounding of a ratio that sits exactly
# on the threshold can only make the prefixes longer, never drop a pair.
_EPS = 1e-9
_DEGENERATE_RANGE = 1e-9

Pair = tuple[Hashable, Hashable, float]


def normalize(phrase: str) -> str:
    """Casefold, control characters to spaces, whitespace runs to one space, strip."""
    return _SPACES.sub(" ", _CONTROL.sub(" ", phrase.casefold())).strip()


def edit_similarity(a: str, b: str) -> float:
    """``Indel.normalized_similarity`` (= ``fuzz.ratio / 100``) of the normal forms."""
    return Indel.normalized_similarity(normalize(a), normalize(b))


def qgram_tokens(norm: str, q: int = 2) -> list[str]:
    """Padded q-grams of a normal form in text order, the i-th repeat of a gram as ``gram\\x1fi``."""
    if q < 1:
        raise ValueError(f"q must be >= 1, got {q}")
    padded = LEFT_PAD * (q - 1) + norm + RIGHT_PAD * (q - 1)
    seen: Counter[str] = Counter()
    out = []
    for i in range(len(padded) - q + 1):
        gram = padded[i:i + q]
        out.append(f"{gram}{_SEP}{seen[gram]}")
        seen[gram] += 1
    return out


@lru_cache(maxsize=4096)
def min_overlap(m: int, threshold: float = 0.7, q: int = 2) -> int:
    """alpha(m): q-gram tokens a length-m normal form shares with any partner of ratio >= threshold.

    ``min over n of (2q-1)*L - (q-1)*(m+n) + q - 1`` with ``L = ceil(t*(m+n)/2)`` (the least LCS
    the ratio allows), over the n for which that L fits (``L <= min(m, n)``); see the module
    docstring for the proof. ``<= 0`` means no shared token is guaranteed.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if m < 1:
        raise ValueError("min_overlap needs a non-empty string")
    t = threshold - _EPS
    best = None
    for n in range(1, int(m * (2 - t) / t) + 2):
        lcs = math.ceil(t * (m + n) / 2)
        if lcs <= min(m, n):
            bound = (2 * q - 1) * lcs - (q - 1) * (m + n) + q - 1
            best = bound if best is None else min(best, bound)
    return best  # n = m is always feasible, so best is set


def gram_counts(phrases: Iterable[str], q: int = 2) -> Counter[str]:
    """Document frequency of every token (first pass; map it over partitions, then merge)."""
    counts: Counter[str] = Counter()
    for phrase in phrases:
        counts.update(qgram_tokens(normalize(phrase), q))  # tokens of a phrase are distinct
    return counts


def merge_gram_counts(parts: Iterable[Counter[str]]) -> Counter[str]:
    """Reduce step for ``gram_counts`` (associative, so a tree reduction works)."""
    total: Counter[str] = Counter()
    for part in parts:
        total.update(part)
    return total


def blocking_keys(phrase: str, counts: Counter[str] | dict[str, int], threshold: float = 0.7,
                  q: int = 2) -> list[str]:
    """The prefix of the phrase's tokens in global rarity order (ascending count, then token).

    Any two phrases with ``edit_sim >= threshold`` share at least one key (module docstring).
    Tokens missing from ``counts`` count 0. An empty normal form has no keys. Raises
    ``ValueError`` when (length, threshold, q) guarantees no shared q-gram (e.g. q=3, t=0.7).
    """
    norm = normalize(phrase)
    if not norm:
        return []
    alpha = min_overlap(len(norm), threshold, q)
    if alpha < 1:
        raise ValueError(f"q={q} cannot block at threshold {threshold} for a {len(norm)}-char "
                         f"phrase: no shared {q}-gram is guaranteed (q=2 needs t >= 2/3; q=1 works for any t)")
    tokens = sorted(qgram_tokens(norm, q), key=lambda tok: (counts.get(tok, 0), tok))
    return tokens[:len(tokens) - alpha + 1]


def default_q(threshold: float) -> int:
    """Bigrams where they are safe for every length (t >= 2/3), characters below."""
    return 2 if threshold >= 2 / 3 else 1


def max_partner_length(m: int, threshold: float = 0.7) -> int:
    """Longest partner a length-m normal form can reach the threshold with.

    ``2L/(m+n) >= t`` and ``L <= min(m, n)`` give ``n <= m*(2-t)/t`` (and, symmetrically,
    ``n >= m*t/(2-t)``); computed for ``t - 1e-9`` so float rounding never drops a pair.
    """
    t = threshold - _EPS
    return int(m * ((2 - t) / t))


_ROWS = 32  # cdist is called on chunks of at most this many rows (fewer for small blocks)


def candidate_pairs(block: Sequence[tuple[Hashable, str]], threshold: float = 0.7, *,
                    max_block: int | None = None,
                    stats: "CandidateStats | None" = None) -> list[Pair]:
    """Verified pairs ``(id_a, id_b, edit_sim)`` of one block, ``edit_sim >= threshold``.

    ``block`` is ``[(id, phrase), ...]`` (ids orderable, e.g. ints); each pair comes once, with
    ``id_a < id_b``. Members are sorted by (length, normal form, id); a member is compared with
    the following members up to ``max_partner_length`` -- a contiguous run, so this length
    filter is exact and costs nothing -- with ``rapidfuzz.process.cdist`` and ``score_cutoff``
    on chunks of rows. ``max_block`` (>= 2) caps the run at the next ``max_block - 1`` members:
    blocks of up to ``max_block`` members are compared completely, a larger block costs at most
    ``size * (max_block - 1)`` pairs and keeps each member's nearest in length (sorted
    neighbourhood); the length-feasible pairs it leaves out are added to
    ``stats.pairs_skipped``. ``stats`` (optional) is updated in place.
    """
    if max_block is not None and max_block < 2:
        raise ValueError(f"max_block must be >= 2, got {max_block}")
    items = sorted((len(norm), norm, i) for i, norm in ((i, normalize(p)) for i, p in block) if norm)
    size = len(items)
    if size < 2:
        return []
    norms = [norm for _, norm, _ in items]
    lens = np.array([m for m, _, _ in items])
    first = np.arange(1, size + 1)
    t = threshold - _EPS  # the same longest partner as max_partner_length, for every member
    stop = np.maximum(np.searchsorted(lens, np.floor(lens * ((2 - t) / t)), side="right"), first)
    capped = stop if max_block is None else np.minimum(stop, first + max_block - 1)
    out, cells, step = [], 0, min(_ROWS, max(8, size // 2))  # small blocks: fewer rows, less waste
    for r0 in range(0, size - 1, step):
        r1 = min(r0 + step, size - 1)
        c1 = int(capped[r0:r1].max())
        if c1 <= r0 + 1:
            continue
        sims = cdist(norms[r0:r1], norms[r0 + 1:c1], scorer=Indel.normalized_similarity,
                     score_cutoff=threshold, dtype=np.float64, workers=1)
        cells += sims.size
        rows, cols = np.arange(r0, r1)[:, None], np.arange(r0 + 1, c1)[None, :]
        hits = (sims >= threshold) & (cols > rows) & (cols < capped[r0:r1, None])
        for ri, ci in zip(*np.nonzero(hits)):
            a, b = r0 + int(ri), r0 + 1 + int(ci)
            if norms[a] != norms[b]:
                ia, ib, s = items[a][2], items[b][2], float(sims[ri, ci])
                out.append((ia, ib, s) if ia < ib else (ib, ia, s))
    if stats is not None:
        skipped = int((stop - capped).sum())
        stats.blocks += 1
        stats.largest_block = max(stats.largest_block, size)
        stats.split_blocks += skipped > 0
        stats.pairs_compared += int((capped - first).sum())
        stats.pairs_skipped += skipped
        stats.cells_scored += cells
    return out


def both_directions(pairs: Iterable[Pair]) -> Iterator[Pair]:
    """(a, b, s) -> (a, b, s), (b, a, s): rows to shuffle on the query (first) id."""
    for a, b, s in pairs:
        yield a, b, s
        yield b, a, s


def top_candidates(query_id: Hashable, pairs: Iterable[Pair],
                   max_candidates: int = 50) -> list[tuple[Hashable, float]]:
    """The query's candidates ``(other_id, edit_sim)``, deduplicated, most similar first.

    ``pairs`` may hold the query on either side, the same pair from several blocks, and pairs
    without the query (ignored). Ties are broken by the candidate id.
    """
    best: dict[Hashable, float] = {}
    for a, b, s in pairs:
        other = b if a == query_id else a if b == query_id else None
        if other is not None and other != query_id:
            best[other] = max(s, best.get(other, s))
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:max_candidates]


def _unit_rows(x: np.ndarray, dtype=np.float64) -> np.ndarray:
    x = np.asarray(x, dtype=dtype)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def cosine_scores(query_vec: np.ndarray, cand_vecs: np.ndarray) -> np.ndarray:
    """Cosine of the query with each candidate (a zero vector has cosine 0), float64.

    A plain numpy dot on L2-normalised rows: with <= 50 candidates per query, a faiss index
    adds nothing but the cost of building it; faiss is used for search (``semantic_neighbours``).
    """
    cand = np.atleast_2d(np.asarray(cand_vecs))
    if cand.shape[0] == 0:
        return np.zeros(0)
    return _unit_rows(cand) @ _unit_rows(np.asarray(query_vec).ravel())


def normalise_cosines(cos: np.ndarray) -> np.ndarray:
    """Min-max normalisation to [0, 1] within one candidate list.

    Degenerate case (one candidate, or all cosines equal within 1e-9): there is no spread to
    normalise by, so the raw cosine clipped to [0, 1] is used -- a near-synonym (cos ~ 1) is not
    called a negative, an unrelated phrase (cos <= 0) is judged by its edit similarity alone.
    """
    cos = np.asarray(cos, dtype=np.float64)
    if cos.size == 0:
        return cos
    lo, hi = cos.min(), cos.max()
    if hi - lo <= _DEGENERATE_RANGE:
        return np.clip(cos, 0.0, 1.0)
    return (cos - lo) / (hi - lo)


def rank_negatives(cosines: np.ndarray, edit_sims: np.ndarray, margin: float = 0.3,
                   k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the top k candidates by ``edit_sim - cos_norm`` among those with
    score > margin; ties by index."""
    edit_sims = np.asarray(edit_sims, dtype=np.float64)
    if edit_sims.shape != np.shape(cosines):
        raise ValueError(f"{edit_sims.shape[0]} edit similarities for {np.shape(cosines)} cosines")
    scores = edit_sims - normalise_cosines(cosines)
    keep = np.flatnonzero(scores > margin)
    order = keep[np.lexsort((keep, -scores[keep]))][:max(k, 0)]
    return order, scores[order]


def select_negatives(query_vec: np.ndarray, cand_vecs: np.ndarray, edit_sims: np.ndarray,
                     margin: float = 0.3, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Hard negatives among one query's candidates: (indices into cand_vecs, scores)."""
    return rank_negatives(cosine_scores(query_vec, cand_vecs), edit_sims, margin, k)


def semantic_neighbours(vectors: np.ndarray, k: int,
                        queries: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosine k-nearest neighbours with faiss ``IndexFlatIP`` on L2-normalised float32.

    Returns (cosines, indices), each (n_queries, min(k, n)); queries default to the vectors
    themselves (each then finds itself first). For checks such as "is this negative among the
    phrase's semantic neighbours" or mining positives over a whole partition.
    """
    from pearl_model.linking import index  # the linking's exact index: one faiss seam in the library

    base = _unit_rows(vectors, np.float32)
    query = base if queries is None else _unit_rows(np.atleast_2d(queries), np.float32)
    return index.search(index.build_index(base, "exact"), query, k)


@dataclass
class CandidateStats:
    """Accounting of candidate generation (sums over blocks; add them up across partitions)."""
    phrases: int = 0
    keys: int = 0              # (key, phrase) rows emitted by blocking_keys
    blocks: int = 0            # blocks with >= 2 non-empty phrases
    largest_block: int = 0
    split_blocks: int = 0      # blocks where max_block left pairs out
    pairs_compared: int = 0    # length-feasible pairs checked; a pair in k blocks counts k times
    pairs_skipped: int = 0     # length-feasible pairs left out by max_block (upper bound of loss)
    cells_scored: int = 0      # cdist matrix cells actually computed (row chunks: >= compared)
    candidates: int = 0        # distinct pairs with edit_sim >= threshold


def blocked_candidates(phrases: Sequence[str], threshold: float = 0.7, *, q: int | None = None,
                       max_block: int | None = None,
                       counts: Counter[str] | None = None) -> tuple[list[Pair], CandidateStats]:
    """Steps 1-3 in one process: all candidate pairs ``(i, j, edit_sim)``, i < j, sorted.

    ``q`` defaults to ``default_q(threshold)``; ``counts`` (from ``gram_counts`` with the same q)
    defaults to the counts of ``phrases``.
    """
    q = default_q(threshold) if q is None else q
    counts = gram_counts(phrases, q) if counts is None else counts
    blocks: dict[str, list[tuple[int, str]]] = defaultdict(list)
    stats = CandidateStats(phrases=len(phrases))
    for i, phrase in enumerate(phrases):
        for key in blocking_keys(phrase, counts, threshold, q):
            blocks[key].append((i, phrase))
            stats.keys += 1
    found: dict[tuple[int, int], float] = {}
    for block in blocks.values():
        for a, b, s in candidate_pairs(block, threshold, max_block=max_block, stats=stats):
            found[a, b] = s
    stats.candidates = len(found)
    return sorted((a, b, s) for (a, b), s in found.items()), stats


def brute_force_candidates(phrases: Sequence[str], threshold: float = 0.7,
                           chunk: int = 2048) -> list[Pair]:
    """All pairs, exactly (quadratic: tests only). Same definition as ``candidate_pairs``."""
    norms = [normalize(p) for p in phrases]
    out = []
    for r0 in range(0, len(norms), chunk):
        sims = cdist(norms[r0:r0 + chunk], norms, scorer=Indel.normalized_similarity,
                     score_cutoff=threshold, dtype=np.float64, workers=1)
        for ri, b in zip(*np.nonzero(sims >= threshold)):
            a = r0 + int(ri)
            if b > a and norms[a] and norms[a] != norms[b]:
                out.append((a, int(b), float(sims[ri, b])))
    return sorted(out)


def mine_negatives(phrases: Sequence[str], embed: Callable[[list[str]], np.ndarray],
                   threshold: float = 0.7, max_candidates: int = 50, margin: float = 0.3,
                   k: int = 2, *, q: int | None = None,
                   max_block: int | None = None) -> list[list[tuple[str, float, float]]]:
    """Hard negatives of every phrase: ``[(negative, edit_sim, cosine), ...]``, best first.

    ``embed`` is called once, on the phrases that have at least one candidate, and must return
    one row per phrase.
    """
    pairs, _ = blocked_candidates(phrases, threshold, q=q, max_block=max_block)
    by_query: dict[int, list[Pair]] = defaultdict(list)
    for a, b, s in both_directions(pairs):
        by_query[a].append((a, b, s))
    out: list[list[tuple[str, float, float]]] = [[] for _ in phrases]
    if not by_query:
        return out
    ids = sorted(by_query)
    vecs = np.asarray(embed([phrases[i] for i in ids]))
    if vecs.ndim != 2 or vecs.shape[0] != len(ids):
        raise ValueError(f"embed returned shape {vecs.shape} for {len(ids)} phrases")
    row = {i: r for r, i in enumerate(ids)}
    for query in ids:
        cands = top_candidates(query, by_query[query], max_candidates)
        cand_ids = [c for c, _ in cands]
        cos = cosine_scores(vecs[row[query]], vecs[[row[c] for c in cand_ids]])
        picked, _ = rank_negatives(cos, np.array([s for _, s in cands]), margin, k)
        out[query] = [(phrases[cand_ids[j]], cands[j][1], float(cos[j])) for j in picked]
    return out
