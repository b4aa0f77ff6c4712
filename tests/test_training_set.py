"""tasks.training_set: phrases + augmentations + negatives joined part by part."""
from __future__ import annotations

import pyarrow as pa

from storage.datasets import Dataset
from storage.schemas import AUGMENTATIONS, NEGATIVES, PHRASES
from tasks import training_set as ts


def ds(root, name, schema, parts):
    d = Dataset(root, name, "v1", schema)
    for i, rows in enumerate(parts):
        d.write_part(i, pa.Table.from_pylist(rows, schema=schema))
    d.commit(code_version="t", params={}, inputs={})
    return d


def phrase(text, label="NP-ORG", label_id=11):
    return {"phrase": text, "phrase_key": text.lower(), "lexical_type": "NP", "entity_type": "ORG",
            "label": label, "label_id": label_id, "frequency": 3, "example_sentence_ids": [1]}


def test_join_keeps_every_phrase_with_its_positives_and_negatives_in_order(root):
    phrases = ds(root, "phrases", PHRASES, [[phrase("The New York Times"), phrase("Apple")], [phrase("Paris")]])
    aug = ds(root, "augmentations", AUGMENTATIONS, [[
        {"phrase_key": "the new york times", "phrase": "The New York Times", "kind": "alias", "positive": "NYT",
         "source": "redirect", "rank": 1},
        {"phrase_key": "the new york times", "phrase": "The New York Times", "kind": "alias",
         "positive": "New York Times", "source": "anchor", "rank": 0},
        {"phrase_key": "the new york times", "phrase": "The New York Times", "kind": "wordnet",
         "positive": "The New York Multiplication", "source": "wordnet-3.0", "rank": 0}], []])
    negs = ds(root, "negatives", NEGATIVES, [[
        {"phrase_key": "the new york times", "phrase": "The New York Times", "negative": "The New York Review",
         "negative_key": "the new york review", "edit_sim": 0.81, "cosine": 0.8, "score": 0.8, "rank": 1},
        {"phrase_key": "the new york times", "phrase": "The New York Times", "negative": "The New York Post",
         "negative_key": "the new york post", "edit_sim": 0.8, "cosine": 0.7, "score": 0.8, "rank": 0}]])
    params = {"validation_fraction": 0.5}
    out = ts.plan_training_set(phrases, aug, negs, params)
    for part in range(2):
        ts.write_part(phrases, aug, negs, part, out, params)
    man = ts.commit_training_set(out, phrases, aug, negs, params)
    rows = {r["phrase"]: r for r in out.read().to_pylist()}
    assert set(rows) == {"The New York Times", "Apple", "Paris"} and man["rows"] == 3
    nyt = rows["The New York Times"]
    assert nyt["positives"] == [{"kind": "alias", "text": "New York Times"}, {"kind": "alias", "text": "NYT"},
                                {"kind": "wordnet", "text": "The New York Multiplication"}]
    assert nyt["negatives"] == ["The New York Post", "The New York Review"]
    assert rows["Paris"]["positives"] == [] and rows["Paris"]["negatives"] == []
    assert man["stats"]["phrases_without_negative"] == 2
    assert man["stats"].get("phrases_train", 0) + man["stats"].get("phrases_validation", 0) == 3
    assert len(man["extra"]["labels"]) == 95


def test_split_is_a_stable_hash_of_the_phrase():
    keys = [f"phrase {i}" for i in range(4000)]
    split = [ts.split_of(k, 0.05) for k in keys]
    assert split == [ts.split_of(k, 0.05) for k in keys]
    assert 0.03 < split.count("validation") / len(keys) < 0.07
    assert all(ts.split_of(k, 0.0) == "train" for k in keys[:100])
