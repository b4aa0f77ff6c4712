"""Lexical diversity of a model's nearest neighbours (Phrase-BERT's measure), with alias hits.

For each query phrase, its top-k neighbours by cosine among all candidate phrases (itself
excluded): the share that share **no content word** with it (a lexically diverse neighbour:
the model found it by meaning, not by shared words), and, where the corpus knows aliases of
the query (redirects, link anchors), the share of neighbours that are one of them (a
diverse neighbour that is also right). A model that only matches words scores low on the
first; a model that scatters phrases at random scores high on it and low on the second,
which is why they are shown together.

Content words: lower-cased alphanumeric tokens that are not spaCy English stop words.
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

import numpy as np

from pearl_model.pairs.synonyms import _is_stop
from .common import encode_unique, row

TASK = "lexical_diversity"
_TOKEN = re.compile(r"[^\W_]+")


def content_words(phrase: str) -> frozenset[str]:
    return frozenset(t for t in _TOKEN.findall(phrase.casefold()) if not _is_stop(t))


def nearest(query_vecs: np.ndarray, cand_vecs: np.ndarray, k: int, exclude: Sequence[int], batch: int = 512
            ) -> np.ndarray:
    """(Q, k) indices of each query's k most cosine-similar candidates, its own index excluded
    (``exclude[i]``: the query's position among the candidates, or -1)."""
    q = query_vecs / np.clip(np.linalg.norm(query_vecs, axis=1, keepdims=True), 1e-12, None)
    c = cand_vecs / np.clip(np.linalg.norm(cand_vecs, axis=1, keepdims=True), 1e-12, None)
    out = np.empty((len(q), k), dtype=np.int64)
    for start in range(0, len(q), batch):
        sims = q[start:start + batch] @ c.T
        rows = np.arange(sims.shape[0])
        own = np.asarray(exclude[start:start + batch])
        sims[rows[own >= 0], own[own >= 0]] = -np.inf
        top = np.argpartition(-sims, k, axis=1)[:, :k] if k < sims.shape[1] else np.argsort(-sims, axis=1)[:, :k]
        order = np.take_along_axis(sims, top, axis=1).argsort(axis=1)[:, ::-1]
        out[start:start + batch] = np.take_along_axis(top, order, axis=1)
    return out


def lexical_diversity(encoder, queries: Sequence[str], candidates: Sequence[str], k: int = 10,
                      aliases: Mapping[str, set[str]] | None = None, examples: int = 5,
                      batch_size: int | None = None) -> tuple[list[dict], list[dict]]:
    """(rows, example neighbour lists) for one encoder.

    Rows (x100): ``diverse@k`` (mean share of neighbours sharing no content word with the
    query; queries without content words are left out and counted), ``alias_hit@k`` (mean share
    that are a known alias, over the queries that have aliases among the candidates) and the
    counts behind both."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    candidates = list(dict.fromkeys(candidates))
    if len(candidates) <= k:
        raise ValueError(f"need more than k={k} candidate phrases, got {len(candidates)}")
    position = {p: i for i, p in enumerate(candidates)}
    vecs = encode_unique(encoder, candidates, normalize=True, batch_size=batch_size)
    qvecs = encode_unique(encoder, list(queries), normalize=True, batch_size=batch_size)
    top = nearest(qvecs, vecs, k, [position.get(q, -1) for q in queries])
    diverse, hits, no_content, with_alias, shown = [], [], 0, 0, []
    for q, idx in zip(queries, top):
        words = content_words(q)
        neigh = [candidates[i] for i in idx]
        if words:
            diverse.append(np.mean([not (words & content_words(n)) for n in neigh]))
        else:
            no_content += 1
        known = {a for a in (aliases or {}).get(q, ()) if a in position and a != q}
        if known:
            with_alias += 1
            hits.append(np.mean([n in known for n in neigh]))
            if len(shown) < examples:
                shown.append({"query": q, "neighbours": neigh, "aliases": sorted(known)})
    rows = [row(encoder, TASK, "corpus", f"diverse@{k}", 100 * float(np.mean(diverse)) if diverse else 0.0),
            row(encoder, TASK, "corpus", f"alias_hit@{k}", 100 * float(np.mean(hits)) if hits else 0.0),
            row(encoder, TASK, "corpus", "queries", len(queries)),
            row(encoder, TASK, "corpus", "queries_without_content_words", no_content),
            row(encoder, TASK, "corpus", "queries_with_aliases", with_alias),
            row(encoder, TASK, "corpus", "candidates", len(candidates))]
    return rows, shown
