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

from .common import encode_unique, l2_normalize, row, top1_credit
from .data import load_bird, load_turney

TASK = "phrase_similarity"


def turney_accuracy(encoder, items: list[tuple[str, list[str]]], batch_size: int | None = None) -> float:
    """items: (bigram, candidates with the correct one first). Returns 0..1."""
    n_cand = len(items[0][1])
    phrases = [p for bigram, cands in items for p in [bigram, *cands]]
    vectors = l2_normalize(encode_unique(encoder, phrases, normalize=True, batch_size=batch_size))
    vectors = vectors.reshape(len(items), n_cand + 1, -1)
    scores = np.einsum("nd,ncd->nc", vectors[:, 0], vectors[:, 1:])
    correct = np.zeros_like(scores, dtype=bool)
    correct[:, 0] = True
    return float(top1_credit(scores, correct).mean())


def pearson(x, y) -> float:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    xc, yc = x - x.mean(), y - y.mean()
    denom = np.sqrt((xc ** 2).sum() * (yc ** 2).sum())
    return float((xc * yc).sum() / denom) if denom > 0 else 0.0


def bird_pearson(encoder, term1: list[str], term2: list[str], human: list[float],
                 batch_size: int | None = None) -> float:
    vectors = l2_normalize(encode_unique(encoder, term1 + term2, normalize=True, batch_size=batch_size))
    cos = (vectors[:len(term1)] * vectors[len(term1):]).sum(axis=1)
    return pearson((cos + 1) / 2, human)


def evaluate_turney(encoder, benchmark_dir, batch_size: int | None = None) -> list[dict]:
    acc = turney_accuracy(encoder, load_turney(benchmark_dir), batch_size)
    return [row(encoder, TASK, "turney", "accuracy", 100 * acc)]


def evaluate_bird(encoder, benchmark_dir, batch_size: int | None = None) -> list[dict]:
    r = bird_pearson(encoder, *load_bird(benchmark_dir), batch_size=batch_size)
    return [row(encoder, TASK, "bird", "pearson", 100 * r)]
