"""tasks/lexical_diversity.py: the corpus sample the evaluate flow measures neighbours on."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from storage.datasets import Dataset
from storage.schemas import ALIASES, PHRASES
from tasks.lexical_diversity import NoCorpus, diversity_markdown, diversity_sample, gives_vectors, measure


def tiny_corpus(root: str, n_others: int = 30) -> None:
    """Phrases by frequency, and aliases: redirects for two of them, a link anchor for another."""
    names = ["heart attack", "myocardial infarction", "aspirin", "acetylsalicylic acid", "then", "old kingdom"]
    names += [f"phrase {i}" for i in range(n_others)]
    rows = [{"phrase": p, "phrase_key": p, "lexical_type": "NP", "entity_type": "OTHER", "label": "NP-OTHER",
             "label_id": 18, "frequency": 1000 - i, "example_sentence_ids": [i]} for i, p in enumerate(names)]
    ph = Dataset(root, "phrases", "ph1", PHRASES)
    ph.write_part(0, pa.Table.from_pylist(rows, schema=PHRASES))
    ph.commit(code_version="t", params={}, inputs={})
    al = Dataset(root, "aliases", "al1", ALIASES)
    al.write_part(0, pa.Table.from_pylist([
        {"alias": "heart attack", "title": "myocardial infarction", "source": "redirect", "count": 3},
        {"alias": "acetylsalicylic acid", "title": "aspirin", "source": "redirect", "count": 2},
        {"alias": "then", "title": "old kingdom", "source": "anchor", "count": 9},  # a link anchor: not an alias here
    ], schema=ALIASES))
    al.commit(code_version="t", params={}, inputs={})


def test_sample_puts_queries_with_redirect_aliases_first(tmp_path):
    tiny_corpus(str(tmp_path))
    s = diversity_sample(str(tmp_path), queries=6, candidates=8)
    assert s.queries[:4] == ["heart attack", "myocardial infarction", "aspirin", "acetylsalicylic acid"]
    assert s.queries[4:] == ["then", "old kingdom"]  # then the most frequent others
    assert s.aliases["heart attack"] == {"myocardial infarction"}
    assert "then" not in s.aliases and "old kingdom" not in s.aliases  # anchors left out
    assert len(s.candidates) == len(set(s.candidates)) == 8
    assert s.setup["queries_with_aliases_in_corpus"] == 4 and s.setup["phrases_in_dataset"] == 36
    # fewer candidates than queries' aliases: the aliases are still among the candidates
    small = diversity_sample(str(tmp_path), queries=4, candidates=1)
    assert set(small.candidates) == {"heart attack", "myocardial infarction", "aspirin", "acetylsalicylic acid"}


def test_no_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(NoCorpus, match="no published phrases or aliases"):
        diversity_sample(str(tmp_path))


class Synonyms:
    """Toy vectors: each alias pair shares a direction; every other phrase its own."""
    name = "toy"

    def encode(self, phrases, normalize=True, batch_size=None):
        groups = {"heart attack": 0, "myocardial infarction": 0, "aspirin": 1, "acetylsalicylic acid": 1}
        out = np.zeros((len(phrases), 64), dtype=np.float32)
        for i, p in enumerate(phrases):
            out[i, groups.get(p, 2 + sum(map(ord, p)) % 62)] = 1.0
            out[i, 63] += 0.01 * len(p)  # ties broken, still nearest to its group
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_measure_and_report_on_toy_vectors(tmp_path):
    tiny_corpus(str(tmp_path))
    s = diversity_sample(str(tmp_path), queries=4, candidates=36)
    got = measure(Synonyms(), s, k=1, examples=2)
    # each query's nearest neighbour is its alias: shares no content word, and is a known alias
    assert got["scores"]["diverse@1"] == 100.0 and got["scores"]["alias_hit@1"] == 100.0
    assert got["examples"][0] == {"query": "heart attack", "neighbours": ["myocardial infarction"],
                                  "aliases": ["myocardial infarction"]}
    md = diversity_markdown({"toy": got}, s.setup, k=1)
    assert "| toy | 100.0 | 100.0 |" in md and "*myocardial infarction*" in md
    from pearl_model.inference.baselines import CharNgramJaccard

    assert gives_vectors(Synonyms()) and not gives_vectors(CharNgramJaccard(n=3))
