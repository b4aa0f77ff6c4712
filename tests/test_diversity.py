"""pearl_model.evaluation.diversity on hand-checkable vectors."""
from __future__ import annotations

import numpy as np
import pytest

from pearl_model.evaluation.diversity import content_words, lexical_diversity, nearest

VECS = {"heart attack": [1, 0, 0], "myocardial infarction": [0.9, 0.1, 0], "heart rate": [0.8, 0, 0.2],
        "the attack": [0, 1, 0], "stock market": [0, 0, 1], "the": [0, 0, 0.5]}


class Toy:
    name = "toy"

    def encode(self, phrases, normalize=True, batch_size=None):
        v = np.array([VECS[p] for p in phrases], dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True) if normalize else v


def table(rows):
    return {r["metric"]: r["value"] for r in rows}


def test_content_words_drop_stop_words_and_case():
    assert content_words("The Heart of an Attack") == {"heart", "attack"}
    assert content_words("of the") == frozenset()


def test_nearest_excludes_the_query_itself():
    v = np.eye(3, dtype=np.float32)
    v[1] = [0.9, 0.1, 0]
    assert nearest(v[:1], v, 1, [0]).tolist() == [[1]]
    assert nearest(v[:1], v, 1, [-1]).tolist() == [[0]]


def test_diverse_share_and_alias_hits():
    cands = list(VECS)
    rows, shown = lexical_diversity(Toy(), ["heart attack", "the"], cands, k=2,
                                    aliases={"heart attack": {"myocardial infarction", "not a candidate"}})
    t = table(rows)
    # heart attack's two neighbours: myocardial infarction (no shared word) and heart rate (shares "heart")
    assert t["diverse@2"] == pytest.approx(50.0)
    assert t["alias_hit@2"] == pytest.approx(50.0) and t["queries_with_aliases"] == 1
    assert t["queries_without_content_words"] == 1  # "the": counted, not scored
    assert shown == [{"query": "heart attack", "neighbours": ["myocardial infarction", "heart rate"],
                      "aliases": ["myocardial infarction"]}]
    with pytest.raises(ValueError, match="more than k=9"):
        lexical_diversity(Toy(), ["the"], cands, k=9)
