"""Phrase similarity: Turney (pick the unigram closest to a bigram) and BIRD (correlation
with human relatedness).

Turney: for each bigram, the cosine with its 5 candidate unigrams (the correct one and 4
distractors; the bigram's own words are not candidates); accuracy of the argmax, with ties
shared as in `common.top1_credit` (so a constant encoder scores chance, 20, not 100).
Cosine, not the raw dot product: unnormalised vectors score 2-3 points lower.

BIRD: Pearson r between (cos + 1) / 2 and the human score. The affine map does not change r;
it is kept to follow the authors. If every cosine is equal (a constant encoder), r is
undefined and reported as 0.
"""
from __future__ import annotations

import numpy as np

from .common import encode_unique, l2_normalize, pearson, row, top1_credit
from .data import load_bird, load_turney

TASK = "phrase_similarity"


def turney_credit(encoder, items: list[tuple[str, list[str]]], batch_size: int | None = None) -> np.ndarray:
    """items: (bigram, candidates with the correct one first). Returns each item's credit, 0..1."""
    n_cand = len(items[0][1])
    phrases = [p for bigram, cands in items for p in [bigram, *cands]]
    vectors = l2_normalize(encode_unique(encoder, phrases, normalize=True, batch_size=batch_size))
    vectors = vectors.reshape(len(items), n_cand + 1, -1)
    scores = np.einsum("nd,ncd->nc", vectors[:, 0], vectors[:, 1:])
    correct = np.zeros_like(scores, dtype=bool)
    correct[:, 0] = True
    return top1_credit(scores, correct)


def turney_accuracy(encoder, items: list[tuple[str, list[str]]], batch_size: int | None = None) -> float:
    """Mean credit, 0..1."""
    return float(turney_credit(encoder, items, batch_size).mean())


def bird_similarities(encoder, term1: list[str], term2: list[str], batch_size: int | None = None) -> np.ndarray:
    """(cos + 1) / 2 of each pair."""
    vectors = l2_normalize(encode_unique(encoder, term1 + term2, normalize=True, batch_size=batch_size))
    return ((vectors[:len(term1)] * vectors[len(term1):]).sum(axis=1) + 1) / 2


def bird_pearson(encoder, term1: list[str], term2: list[str], human: list[float],
                 batch_size: int | None = None) -> float:
    return pearson(bird_similarities(encoder, term1, term2, batch_size), human)


def evaluate_turney(encoder, benchmark_dir, batch_size: int | None = None) -> list[dict]:
    credit = turney_credit(encoder, load_turney(benchmark_dir), batch_size)
    return [row(encoder, TASK, "turney", "accuracy", 100 * credit.mean(), items=credit)]


def evaluate_bird(encoder, benchmark_dir, batch_size: int | None = None) -> list[dict]:
    term1, term2, human = load_bird(benchmark_dir)
    sims = bird_similarities(encoder, term1, term2, batch_size)
    return [row(encoder, TASK, "bird", "pearson", 100 * pearson(sims, human), items=sims, item_targets=human)]
