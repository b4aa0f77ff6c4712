"""Alias -> title retrieval: held-out aliases (or WordNet's other names), each to be found among
candidate titles by cosine; top-1 accuracy and MRR. Training logs it on its held-out aliases, the
dev selection and :mod:`.synonym_retrieval` score it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .common import row

__all__ = ["AliasRetrieval", "alias_retrieval", "alias_rows"]
TASK = "alias_retrieval"


@dataclass(frozen=True)
class AliasRetrieval:
    """Held-out aliases, each to be found among ``titles``: ``gold[i]`` indexes alias i's title."""
    aliases: tuple[str, ...]
    titles: tuple[str, ...]
    gold: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.aliases) != len(self.gold) or not all(0 <= g < len(self.titles) for g in self.gold):
            raise ValueError("every alias needs the index of its title among the titles")


def gold_ranks(encode: Callable[[list[str]], np.ndarray], task: AliasRetrieval) -> np.ndarray:
    """Per alias, how many titles are strictly closer than its gold title (``encode``: unit vectors)."""
    a, t = encode(list(task.aliases)), encode(list(task.titles))
    sims = a @ t.T
    gold = np.asarray(task.gold)
    return (sims > sims[np.arange(len(gold)), gold][:, None]).sum(axis=1)


def alias_retrieval(encode: Callable[[list[str]], np.ndarray], task: AliasRetrieval) -> dict[str, float]:
    """Top-1 accuracy and MRR of alias -> title by cosine (``encode`` returns unit vectors)."""
    if not task.aliases:
        return {}
    rank = gold_ranks(encode, task)
    return {"alias_top1": float(np.mean(rank == 0)), "alias_mrr": float(np.mean(1.0 / (rank + 1)))}


def alias_rows(encoder, name: str, task: AliasRetrieval) -> list[dict]:
    """Benchmark rows `top1` and `mrr` (x100) of dataset ``name``, with each alias's score as items."""
    if not task.aliases:
        return []
    rank = gold_ranks(encoder.encode, task)
    return [row(encoder, TASK, name, metric, 100 * float(np.mean(items)), items=items)
            for metric, items in (("top1", (rank == 0).astype(float)), ("mrr", 1.0 / (rank + 1)))]
