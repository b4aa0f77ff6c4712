"""T5Paraphraser on a tiny random-weight T5 built here (no downloads), and clean_candidates.

The tokenizer is a SentencePiece unigram model trained on sentences made up here and
wrapped as a T5 tokenizer (pad 0, eos 1, unk 2, as in T5's own vocabulary). With random
weights the paraphrases are gibberish, so these tests check the plumbing (one list per
phrase, in order; the limits; seeding; batching) and the clean-up contract, not quality.
"""
from __future__ import annotations

import io
import random
import time

import pytest
import sentencepiece as spm
import torch
from transformers import BertConfig, BertModel, T5Config, T5ForConditionalGeneration, T5TokenizerFast

from pearl_model.pairs.paraphrase import T5Paraphraser, clean_candidates, normalize
from pearl_model.phrases.spans import ModelMissing

ADJ = ["new", "old", "big", "small", "red", "quiet", "famous", "local", "early", "modern", "public", "green"]
NOUN = ["city", "river", "company", "house", "game", "phrase", "model", "report", "station", "bridge",
        "language", "museum", "village", "league", "album", "army", "school", "market"]
PREP = ["of", "in", "near", "for", "with", "across", "under", "after"]
PHRASES = ["the old bridge", "", "a famous museum near the river", "   ", "public school",
           "an early album of the band", "green  market in the village", "modern army"]


SYLLABLES = ["ka", "lo", "ri", "ven", "tor", "mi", "sa", "bel", "dun", "pha", "gri", "os", "que", "zan",
             "til", "ew", "ur", "nox", "pel", "ard", "sto", "im", "rh", "cy"]


def _sentences(n: int = 600) -> list[str]:
    """Phrases in Parrot's input format; made-up names give SentencePiece enough pieces to learn."""
    rng = random.Random(0)

    def name() -> str:
        return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()

    out = []
    for _ in range(n):
        words = [rng.choice(ADJ), rng.choice(NOUN), rng.choice(PREP), "the", name(), rng.choice(NOUN),
                 rng.choice(PREP), name()]
        out.append("paraphrase: " + " ".join(words[:rng.randint(2, 8)]))
    return out


def _save_tiny_t5(path) -> str:
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(_sentences()), model_writer=buf, vocab_size=256,
                                   model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   num_threads=1, hard_vocab_limit=False, shrinking_factor=0.95, minloglevel=2)
    (path / "spiece.src").mkdir(parents=True)
    vocab_file = path / "spiece.src" / "spiece.model"
    vocab_file.write_bytes(buf.getvalue())
    # legacy=True is T5's original SentencePiece handling (and what the hub's T5 tokenizers use).
    tok = T5TokenizerFast(vocab_file=str(vocab_file), extra_ids=0, model_max_length=64, legacy=True)
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert 200 <= len(tok) <= 256
    config = T5Config(vocab_size=len(tok), d_model=32, d_ff=64, d_kv=16, num_layers=2, num_heads=2,
                      pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(0)
    T5ForConditionalGeneration(config).save_pretrained(path / "model")
    tok.save_pretrained(path / "model")
    return str(path / "model")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matmuls run far faster on one thread than on two contended ones; restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory) -> str:
    return _save_tiny_t5(tmp_path_factory.mktemp("t5"))


@pytest.fixture(scope="module")
def para(t5_dir) -> T5Paraphraser:
    return T5Paraphraser(t5_dir, device="cpu", batch_size=8, max_new_tokens=8)


# --- clean_candidates ------------------------------------------------------------------------------

def test_clean_candidates_normalises_dedupes_and_drops_the_input():
    cands = ["  the  Old\tbridge ", "an aged bridge", "An  aged bridge", "", "   ", "THE OLD BRIDGE",
             "the ancient\nbridge", "an aged bridge ", "bridge"]
    assert clean_candidates("the old  bridge", cands) == ["an aged bridge", "the ancient bridge", "bridge"]
    assert clean_candidates("the old bridge", cands, limit=2) == ["an aged bridge", "the ancient bridge"]
    assert clean_candidates("x", []) == []
    assert clean_candidates("x", ["X", " x "]) == []


def test_clean_candidates_keeps_the_given_order_and_first_spelling():
    assert clean_candidates("p", ["b", "a", "B", "c", "A"]) == ["b", "a", "c"]
    assert clean_candidates("p", ["New York", "new york"]) == ["New York"]
    assert normalize("  a \t b\n\nc  ") == "a b c"


# --- generation ------------------------------------------------------------------------------------

def test_one_cleaned_list_per_phrase_in_order(para):
    out = para.paraphrases(PHRASES)
    assert len(out) == len(PHRASES)
    assert out[1] == [] and out[3] == []  # blank phrases
    for phrase, cands in zip(PHRASES, out):
        assert len(cands) <= para.num_return_sequences
        keys = [c.casefold() for c in cands]
        assert len(set(keys)) == len(keys)
        for c in cands:
            assert c and c == normalize(c)
            assert c.casefold() != normalize(phrase).casefold()
    # The generation path produced something (random weights still decode to some pieces).
    assert any(out)
    # Each phrase's result is the same as asked alone: order and neighbours do not matter.
    assert para.paraphrases([PHRASES[2]]) == [out[2]]
    assert para.paraphrases(PHRASES[::-1]) == out[::-1]


def test_deterministic_across_calls_loads_and_batch_sizes(t5_dir, para):
    first = para.paraphrases(PHRASES)
    assert para.paraphrases(PHRASES) == first
    for bs in (1, 3):
        again = T5Paraphraser(t5_dir, device="cpu", batch_size=bs, max_new_tokens=8)
        assert again.paraphrases(PHRASES) == first


def test_sampling_is_seeded_and_leaves_the_global_rng_alone(t5_dir):
    a = T5Paraphraser(t5_dir, device="cpu", sampling=True, seed=3, max_new_tokens=8)
    b = T5Paraphraser(t5_dir, device="cpu", sampling=True, seed=3, max_new_tokens=8)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    out = a.paraphrases(PHRASES)
    assert torch.equal(torch.get_rng_state(), state)
    assert b.paraphrases(PHRASES) == out == a.paraphrases(PHRASES)
    assert all(len(c) <= 3 for c in out) and out[1] == []


def test_num_return_sequences_caps_the_lists(t5_dir):
    one = T5Paraphraser(t5_dir, device="cpu", num_return_sequences=1, num_beams=4, max_new_tokens=8)
    assert all(len(c) <= 1 for c in one.paraphrases(PHRASES))
    assert any(one.paraphrases(PHRASES))


def test_empty_input_and_type_errors(para):
    assert para.paraphrases([]) == []
    assert para.paraphrases(["", " \t"]) == [[], []]
    with pytest.raises(TypeError, match="int"):
        para.paraphrases(["the old bridge", 3])
    with pytest.raises(TypeError, match="NoneType"):
        para.paraphrases([None])
    with pytest.raises(TypeError, match="not one str"):
        para.paraphrases("the old bridge")


def test_bad_arguments(t5_dir):
    with pytest.raises(ValueError, match="num_beams"):
        T5Paraphraser(t5_dir, num_return_sequences=4, num_beams=2)
    with pytest.raises(ValueError, match="positive"):
        T5Paraphraser(t5_dir, batch_size=0)


# --- missing or wrong models -----------------------------------------------------------------------

def test_missing_local_model_raises_model_missing(tmp_path):
    with pytest.raises(ModelMissing, match="no-such-dir.*is not a directory"):
        T5Paraphraser(str(tmp_path / "no-such-dir"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelMissing, match="has no config.json"):
        T5Paraphraser(str(tmp_path / "empty"))


def test_model_without_tokenizer_raises_model_missing(t5_dir, tmp_path):
    T5ForConditionalGeneration.from_pretrained(t5_dir).save_pretrained(tmp_path / "weights-only")
    with pytest.raises(ModelMissing, match="tokenizer could not be loaded"):
        T5Paraphraser(str(tmp_path / "weights-only"))


def test_encoder_only_model_is_rejected(tmp_path):
    BertModel(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                         intermediate_size=8)).save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match="not a seq2seq"):
        T5Paraphraser(str(tmp_path / "bert"))


def test_unreachable_hub_fails_fast(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    t0 = time.monotonic()
    with pytest.raises(ModelMissing, match="pearl-test/no-such-paraphraser"):
        T5Paraphraser("pearl-test/no-such-paraphraser")
    assert time.monotonic() - t0 < 10
