"""AutoFJ fuzzy join: for each right title with a gold match, pick the left title of highest
similarity; accuracy per table, averaged over the 50 tables (the paper's protocol).

Any encoder works (cosine of normalised embeddings); a model with a `similarity(left,
right)` method instead (the character 3-gram baseline) is scored with that. Ties at the
top share the credit (`common.top1_credit`).
"""
from __future__ import annotations

import logging

import numpy as np

from .common import encode_unique, l2_normalize, row, top1_credit
from .data import autofj_dataset_names, load_autofj

TASK = "fuzzy_join"
log = logging.getLogger(__name__)


def join_strings(left: list[str], right: list[str], gold: dict[str, str]) -> tuple[list[str], list[str]]:
    """(queries, distinct left titles): the right titles whose gold left title is among the left."""
    left = list(dict.fromkeys(left))
    known = set(left)
    return [r for r in right if r in gold and gold[r] in known], left


def join_accuracy(model, left: list[str], right: list[str], gold: dict[str, str],
                  batch_size: int | None = None, vectors: dict[str, np.ndarray] | None = None) -> float:
    """Share (0..1) of right titles with a gold left title whose best match is that title.
    ``vectors``: unit vectors already encoded for these strings (else the model encodes them)."""
    queries, left = join_strings(left, right, gold)
    position = {t: i for i, t in enumerate(left)}
    if not queries:
        return float("nan")
    if hasattr(model, "similarity") and not hasattr(model, "encode"):
        scores = np.asarray(model.similarity(queries, left), dtype=np.float64)
    else:
        strings = queries + left
        v = np.stack([vectors[t] for t in strings]) if vectors is not None else \
            l2_normalize(encode_unique(model, strings, normalize=True, batch_size=batch_size))
        scores = v[:len(queries)] @ v[len(queries):].T
    correct = np.zeros(scores.shape, dtype=bool)
    correct[np.arange(len(queries)), [position[gold[q]] for q in queries]] = True
    return float(top1_credit(scores, correct).mean())


def evaluate_autofj(model, benchmark_dir, batch_size: int | None = None) -> list[dict]:
    """Primary row: mean accuracy over the tables (its items: the tables' accuracies, 0..1, the
    unit a paired bootstrap resamples); then one row per table."""
    tables = {name: load_autofj(name) for name in autofj_dataset_names(benchmark_dir)}
    vectors = None
    if hasattr(model, "encode"):
        # one call for all 50 tables: batches sorted by length across tables, each string once
        strings = list(dict.fromkeys(s for t in tables.values() for part in join_strings(t.left, t.right, t.gold)
                                     for s in part))
        vectors = dict(zip(strings, l2_normalize(encode_unique(model, strings, normalize=True,
                                                               batch_size=batch_size))))
    per_table = []
    for name, table in tables.items():
        acc = join_accuracy(model, table.left, table.right, table.gold, batch_size, vectors)
        per_table.append((name, acc))
        log.info("autofj %s: %.3f", name, acc)
    scored = [a for _, a in per_table if not np.isnan(a)]
    rows = [row(model, TASK, "autofj", "accuracy", 100 * float(np.mean(scored)), items=scored)]
    rows += [row(model, TASK, "autofj", f"accuracy:{name}", 100 * acc) for name, acc in per_table]
    return rows
