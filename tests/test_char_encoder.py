"""Tests of the LOVE-style character encoder (pearl_model.training.char_encoder).

The target matrix is synthetic but has the structure a character model can learn: words
are 2-3 distinct syllables out of 40 random ones, and a word's vector is the normalised sum
of fixed random syllable vectors. Held-out words are new combinations of the same syllables,
so their vectors are predictable from spelling alone. A control with the rows of the
target matrix shuffled (no link between spelling and vector) must stay near zero.

Thresholds (measured on this data, 20 epochs, batch 32, lr 3e-3, small CNN, seeds 0-3):
held-out mean cosine 0.60-0.65 trained vs ~0.02 untrained; typo hit@10 0.95-0.99 among 300
training words (chance 10/300 = 0.033, untrained 0.04). Asserted: cosine > 0.45 and
> untrained + 0.3; hit@10 >= 0.5 and > 5 x untrained.
"""
from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest
import torch

from pearl_model.pairs.augment import CHAR_OPS, augment
from pearl_model.training.char_encoder import (BOW, EOW, PAD, UNK, CharEncoder, CharVocab, heldout_cosine, load,
                                               misspelling_rank, phrase_vector, phrase_vectors, rank_summary,
                                               train_char_encoder, word_vectors)
from pearl_model.inference.network import save_char_encoder as save

torch.set_num_threads(1)

SMALL = {"n_filters": 32, "hidden": 128}
TRAIN = {"epochs": 20, "batch_size": 32, "lr": 3e-3, "seed": 0, **SMALL}


def make_data(seed: int = 0, n: int = 400, dim: int = 50):
    rng = np.random.default_rng(seed)
    cons, vows = list("bcdfghjklmnprstvwz"), list("aeiou")
    sylls: list[str] = []
    while len(sylls) < 40:
        s = rng.choice(cons) + rng.choice(vows) + (rng.choice(cons) if rng.random() < 0.5 else "")
        if s not in sylls:
            sylls.append(str(s))
    svec = {s: rng.standard_normal(dim) for s in sylls}
    words, parts_of, seen = [], [], set()
    while len(words) < n:
        parts = [sylls[i] for i in rng.choice(len(sylls), int(rng.integers(2, 4)), replace=False)]
        w = "".join(parts)
        if w not in seen:
            seen.add(w)
            words.append(w)
            parts_of.append(parts)
    vecs = np.stack([sum(svec[p] for p in parts) for parts in parts_of]).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return words, vecs


@pytest.fixture(scope="module")
def data():
    words, vecs = make_data()
    return words[:300], vecs[:300], words[300:], vecs[300:]


@pytest.fixture(scope="module")
def trained(data):
    tr, vtr, _, _ = data
    return train_char_encoder(tr, vtr, **TRAIN)


def untrained(vocab: CharVocab, dim: int) -> CharEncoder:
    torch.manual_seed(0)
    return CharEncoder(len(vocab), dim, **SMALL).eval()


def typo_pairs(words, n=100, seed=1):
    rng = random.Random(seed)
    kinds = sorted(CHAR_OPS)
    return [(augment(w, rng.choice(kinds), rng), w) for w in words[:n]]


def test_vocab_encode():
    voc = CharVocab.build(["abc", "cab"])
    assert voc.chars == ["a", "b", "c"] and len(voc) == 7
    ids = voc.encode(["ab", "abcz", "abcabcabc"], max_len=5)
    assert ids.dtype == torch.long and ids.shape == (3, 5)
    a, b, c = (voc.index[ch] for ch in "abc")
    assert ids[0].tolist() == [BOW, a, b, EOW, PAD]
    assert ids[1].tolist() == [BOW, a, b, c, EOW]  # truncated to max_len - 2 characters
    assert voc.encode(["zq"], max_len=5)[0].tolist() == [BOW, UNK, UNK, EOW, PAD]
    with pytest.raises(ValueError):
        voc.encode(["ab"], max_len=2)


def test_forward_shape(data):
    tr, vtr, _, _ = data
    voc = CharVocab.build(tr)
    out = untrained(voc, 50)(voc.encode(tr[:7]))
    assert out.shape == (7, 50)


def test_training_learns_spelling_structure(data, trained):
    tr, vtr, te, vte = data
    model, voc, hist = trained
    assert len(hist) == TRAIN["epochs"] and hist[-1] < 0.5 * hist[0]
    cos = heldout_cosine(model, voc, te, vte)
    cos0 = heldout_cosine(untrained(voc, vtr.shape[1]), voc, te, vte)
    assert cos > 0.45 and cos > cos0 + 0.3, (cos, cos0)


def test_shuffled_targets_control(data):
    # Same training, but vectors no longer follow spelling: held-out cosine must stay low.
    tr, vtr, te, vte = data
    perm = np.random.default_rng(0).permutation(len(tr))
    model, voc, _ = train_char_encoder(tr, vtr[perm], **TRAIN)
    assert heldout_cosine(model, voc, te, vte) < 0.25


def test_misspellings_rank_true_word(data, trained):
    tr, vtr, _, _ = data
    model, voc, _ = trained
    pairs = typo_pairs(tr)
    assert all(t != w for t, w in pairs)
    ranks = misspelling_rank(model, voc, tr, vtr, pairs)
    ranks0 = misspelling_rank(untrained(voc, vtr.shape[1]), voc, tr, vtr, pairs)
    assert len(ranks) == 100 and all(1 <= r <= len(tr) for r in ranks)
    s, s0 = rank_summary(ranks), rank_summary(ranks0)
    chance = 10 / len(tr)
    assert s["hit@10"] >= 0.5 and s["hit@10"] > 5 * max(s0["hit@10"], chance), (s, s0)
    assert s["mrr"] > 5 * s0["mrr"]


def test_rank_summary_and_ties():
    assert rank_summary([1, 2, 20]) == {"n": 3.0, "mrr": pytest.approx((1 + 0.5 + 0.05) / 3),
                                        "hit@10": pytest.approx(2 / 3)}
    # A constant model ties every word: ties count against the true word (rank = n).
    voc = CharVocab.build(["ab", "cd", "ef"])
    model = untrained(voc, 4)
    for p in model.parameters():
        torch.nn.init.zeros_(p)
    torch.nn.init.ones_(model.mlp[2].bias)
    ranks = misspelling_rank(model, voc, ["ab", "cd", "ef"], np.ones((3, 4), np.float32), [("ab", "cd")])
    assert ranks == [3]
    with pytest.raises(ValueError):
        rank_summary([])


def test_deterministic_training(data):
    tr, vtr, _, _ = data
    kw = {**TRAIN, "epochs": 3}
    m1, _, h1 = train_char_encoder(tr, vtr, **kw)
    m2, _, h2 = train_char_encoder(tr, vtr, **kw)
    m3, _, h3 = train_char_encoder(tr, vtr, **{**kw, "seed": 1})
    assert h1 == h2 and h1 != h3
    s1, s2, s3 = m1.state_dict(), m2.state_dict(), m3.state_dict()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    assert not all(torch.equal(s1[k], s3[k]) for k in s1)


def test_global_rng_untouched(data):
    tr, vtr, _, _ = data
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train_char_encoder(tr[:20], vtr[:20], epochs=1, batch_size=8, seed=0, **SMALL)
    assert torch.equal(torch.rand(3), expected)


def test_phrase_vector_independent_of_batch(data, trained):
    tr, _, te, _ = data
    model, voc, _ = trained
    phrase = f"{tr[0]} {te[1]}"
    batch = [tr[5], phrase, f"{te[3]} {tr[7]} {tr[9]}", "Zzq!", f"{tr[0]}"]
    alone = phrase_vector(model, voc, phrase)
    together = phrase_vectors(model, voc, batch)
    reordered = phrase_vectors(model, voc, batch[::-1])
    assert together.shape == (5, 50)
    np.testing.assert_allclose(together[1], alone, rtol=0, atol=1e-6)
    np.testing.assert_allclose(reordered[3], alone, rtol=0, atol=1e-6)
    for i, p in enumerate(batch):
        np.testing.assert_allclose(together[i], phrase_vector(model, voc, p), rtol=0, atol=1e-6)
    # mean of the unit word vectors of the lowercased tokens
    wv = word_vectors(model, voc, [tr[0], te[1]])
    np.testing.assert_allclose(np.linalg.norm(wv, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(alone, wv.mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(phrase_vector(model, voc, phrase.upper()), alone, atol=1e-6)
    with pytest.raises(ValueError):
        phrase_vector(model, voc, "   ")
    with pytest.raises(TypeError):
        phrase_vectors(model, voc, "a phrase")


def test_save_load_roundtrip(tmp_path, data, trained, monkeypatch):
    tr, _, te, _ = data
    model, voc, _ = trained
    save(model, voc, tmp_path / "ck")
    assert (tmp_path / "ck" / "model.safetensors").is_file()
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert cfg["chars"] == voc.chars and cfg["model"]["out_dim"] == 50

    def no_unpickle(*a, **k):
        raise AssertionError("load must not unpickle")

    monkeypatch.setattr(torch, "load", no_unpickle)
    monkeypatch.setattr(pickle, "load", no_unpickle)
    monkeypatch.setattr(pickle, "loads", no_unpickle)
    model2, voc2 = load(tmp_path / "ck")
    assert voc2.chars == voc.chars and not model2.training
    ids = voc.encode(tr[:10] + te[:10] + ["qqxx"])
    with torch.no_grad():
        assert torch.equal(model(ids), model2(ids))
    assert np.array_equal(phrase_vectors(model, voc, te[:5]), phrase_vectors(model2, voc2, te[:5]))


def test_error_cases(data):
    tr, vtr, _, _ = data
    with pytest.raises(ValueError, match="empty"):
        train_char_encoder([], np.zeros((0, 50), np.float32), epochs=1, batch_size=4, seed=0)
    with pytest.raises(ValueError, match="vectors"):
        train_char_encoder(tr[:10], vtr[:9], epochs=1, batch_size=4, seed=0)
    with pytest.raises(ValueError):
        train_char_encoder(tr[:10], vtr[:10, 0], epochs=1, batch_size=4, seed=0)  # 1-D
    with pytest.raises(ValueError):
        train_char_encoder(tr[:10], vtr[:10], epochs=1, batch_size=1, seed=0)
    with pytest.raises(ValueError):
        train_char_encoder(tr[:10], vtr[:10], epochs=0, batch_size=4, seed=0)
    bad = vtr[:10].copy()
    bad[3] = 0.0
    with pytest.raises(ValueError, match="zero"):
        train_char_encoder(tr[:10], bad, epochs=1, batch_size=4, seed=0)
    with pytest.raises(TypeError):
        train_char_encoder(tr[:9] + [3], vtr[:10], epochs=1, batch_size=4, seed=0)
    with pytest.raises(ValueError):
        train_char_encoder(tr[:9] + [""], vtr[:10], epochs=1, batch_size=4, seed=0)
    with pytest.raises(ValueError):
        CharVocab.build([])
    voc = CharVocab.build(tr)
    model = untrained(voc, 50)
    with pytest.raises(ValueError, match="not in vocab_words"):
        misspelling_rank(model, voc, tr, vtr, [("xyz", "notaword")])
    with pytest.raises(ValueError):
        heldout_cosine(model, voc, tr[:3], vtr[:2])
