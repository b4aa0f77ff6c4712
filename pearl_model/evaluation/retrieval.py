"""Entity retrieval (YAGO, UMLS), "10k-dictionary" variant.

The paper retrieves each mention's canonical name from the full YAGO (572K names) and UMLS
(750K names) dictionaries. Those files are not shipped with the benchmark, so the dictionary
here is the set of distinct canonical names of the 10,000 test lines: a much easier task,
reported under the dataset names `yago-10kdict` and `umls-10kdict` and never comparable
with the paper's YAGO/UMLS figures.

Search is exact inner product on L2-normalised vectors (the paper used an approximate
faiss IVF-PQ index; exact search is both affordable and more faithful at 10k). A hit is an
exact string match of the retrieved name with the gold canonical name; ties at the top
score share the credit (`common.top1_credit`), so a constant encoder scores 1/N.
"""
from __future__ import annotations

import numpy as np

from .common import encode_unique, l2_normalize, row, top1_credit_chunked
from .data import load_retrieval

TASK = "entity_retrieval"
SUFFIX = "-10kdict"


def dataset_name(name: str) -> str:
    return name + SUFFIX


def retrieval_credit(encoder, mentions: list[str], gold: list[str], dictionary: list[str] | None = None,
                     batch_size: int | None = None) -> np.ndarray:
    """Each mention's top-1 credit (0..1) for retrieving gold[i] among `dictionary`
    (default: the distinct gold names, in file order)."""
    dictionary = list(dict.fromkeys(dictionary if dictionary is not None else gold))
    position = {name: i for i, name in enumerate(dictionary)}
    missing = [g for g in gold if g not in position]
    if missing:
        raise ValueError(f"{len(missing)} gold names are not in the dictionary, e.g. {missing[0]!r}")
    vectors = l2_normalize(encode_unique(encoder, mentions + dictionary, normalize=True, batch_size=batch_size))
    queries, names = vectors[:len(mentions)], vectors[len(mentions):]
    gold_index = np.array([position[g] for g in gold])
    return top1_credit_chunked(queries, names, gold_index)


def retrieval_accuracy(encoder, mentions: list[str], gold: list[str], dictionary: list[str] | None = None,
                       batch_size: int | None = None) -> float:
    """Top-1 accuracy, 0..1."""
    return float(retrieval_credit(encoder, mentions, gold, dictionary, batch_size).mean())


def evaluate_retrieval(encoder, benchmark_dir, name: str, batch_size: int | None = None) -> list[dict]:
    mentions, gold = load_retrieval(benchmark_dir, name)
    credit = retrieval_credit(encoder, mentions, gold, batch_size=batch_size)
    return [row(encoder, TASK, dataset_name(name), "top1_accuracy", 100 * credit.mean(), items=credit)]
