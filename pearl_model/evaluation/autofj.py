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


def join_accuracy(model, left: list[str], right: list[str], gold: dict[str, str],
                  batch_size: int | None = None) -> float:
    """Share (0..1) of right titles with a gold left title whose best match is that title."""
    queries = [r for r in right if r in gold]
    left = list(dict.fromkeys(left))
    position = {t: i for i, t in enumerate(left)}
    queries = [q for q in queries if gold[q] in position]
    if not queries:
        return float("nan")
    if hasattr(model, "similarity") and not hasattr(model, "encode"):
        scores = np.asarray(model.similarity(queries, left), dtype=np.float64)
    else:
        vectors = l2_normalize(encode_unique(model, queries + left, normalize=True, batch_size=batch_size))
        scores = vectors[:len(queries)] @ vectors[len(queries):].T
    correct = np.zeros(scores.shape, dtype=bool)
    correct[np.arange(len(queries)), [position[gold[q]] for q in queries]] = True
    return float(top1_credit(scores, correct).mean())


def evaluate_autofj(model, benchmark_dir, batch_size: int | None = None) -> list[dict]:
    """Primary row: mean accuracy over the tables; then one row per table."""
    per_table = []
    for name in autofj_dataset_names(benchmark_dir):
        table = load_autofj(name)
        acc = join_accuracy(model, table.left, table.right, table.gold, batch_size)
        per_table.append((name, acc))
        log.info("autofj %s: %.3f", name, acc)
    scored = [a for _, a in per_table if not np.isnan(a)]
    rows = [row(model, TASK, "autofj", "accuracy", 100 * float(np.mean(scored)))]
    rows += [row(model, TASK, "autofj", f"accuracy:{name}", 100 * acc) for name, acc in per_table]
    return rows
