"""pearl_model.inference.model: PearlModel on a tiny random BERT and a tiny random CharEncoder."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pearl_model.inference.backbones import BackboneInfo  # noqa: E402
from pearl_model.training.char_encoder import CharEncoder, CharVocab, phrase_vectors  # noqa: E402
from pearl_model.inference.encoder import PhraseEncoder  # noqa: E402
from pearl_model.inference.model import Batcher, PearlModel, collate, mean_pool  # noqa: E402
from pearl_model.phrases.labels import LABELS  # noqa: E402

torch.set_num_threads(1)

WORDS = ["the", "new", "york", "times", "post", "review", "bank", "river", "of", "a", "city", "red", "car"]
HIDDEN, CHAR_OUT, PROJ, MAX_CHARS = 32, 12, 8, 12


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS))
    tok = transformers.BertTokenizerFast(str(d / "vocab.txt"))
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=HIDDEN, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    bert = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    vocab = CharVocab.build(WORDS)
    char = CharEncoder(len(vocab), CHAR_OUT, char_dim=8, kernel_sizes=(2, 3), n_filters=8, hidden=16,
                       max_len=MAX_CHARS).eval()
    enc = PhraseEncoder(bert, tok, BackboneInfo("tiny", str(d), "local", query_prefix="", max_length=16,
                                                dim=HIDDEN))
    return enc, char, vocab


@pytest.fixture()
def model(parts):
    enc, char, vocab = parts
    torch.manual_seed(1)
    return PearlModel.from_parts(enc, char, char_proj_dim=PROJ, char_vocab=vocab).eval()


def _batch(model, phrases):
    return model.batcher(phrases)


def test_shapes_and_collate(model, parts):
    enc, _, vocab = parts
    b = collate(["the new york times", "a red car"], enc.tokenizer, vocab, max_words=3, max_chars=MAX_CHARS)
    assert b["char_ids"].shape == (2, 3, MAX_CHARS) and b["word_mask"].tolist() == [[1, 1, 1], [1, 1, 1]]
    b = Batcher(enc.tokenizer, vocab, max_chars=MAX_CHARS)(["the new york times", "car"])
    assert b["char_ids"].shape == (2, 4, MAX_CHARS) and b["word_mask"].sum(1).tolist() == [4, 1]
    assert b["input_ids"].shape == b["attention_mask"].shape
    emb, logits = model(**b)
    assert emb.shape == (2, HIDDEN + PROJ) and model.dim == HIDDEN + PROJ
    assert logits.shape == (2, len(LABELS)) == (2, 95)


def test_branches_match_their_references(model, parts):
    enc, char, vocab = parts
    phrases = ["the new york times", "Bank of the River", "car"]
    b = _batch(model, phrases)
    with torch.no_grad():
        emb, _ = model(**b)
        cv = model.char_vectors(b["char_ids"], b["word_mask"]).numpy()
    assert np.allclose(cv, phrase_vectors(char, vocab, phrases), atol=1e-5)
    sem = emb[:, :HIDDEN].numpy()
    ref = enc.encode(phrases, normalize=False)
    assert np.allclose(sem, ref, atol=1e-5)


def test_a_phrase_is_the_same_alone_and_padded_in_a_batch(model):
    phrases = ["car", "the new york times review of a city", "red", "bank of the river", "york"]
    with torch.no_grad():
        batched_emb, batched_logits = model(**_batch(model, phrases))
        for i, p in enumerate(phrases):
            emb, logits = model(**_batch(model, [p]))
            assert np.allclose(emb[0].numpy(), batched_emb[i].numpy(), atol=1e-5), p
            assert np.allclose(logits[0].numpy(), batched_logits[i].numpy(), atol=1e-5), p
    # char branch alone: extra all-padding word slots change nothing
    b = _batch(model, ["car"])
    wide_ids = torch.cat([b["char_ids"], torch.zeros(1, 3, MAX_CHARS, dtype=torch.long)], dim=1)
    wide_mask = torch.cat([b["word_mask"], torch.zeros(1, 3, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        assert torch.allclose(model.char_vectors(b["char_ids"], b["word_mask"]),
                              model.char_vectors(wide_ids, wide_mask), atol=1e-6)


def test_gradients_reach_every_part(model):
    model.train()
    model.zero_grad()
    emb, logits = model(**_batch(model, ["the new york times", "a red car", "river"]))
    loss = emb.pow(2).sum() + torch.nn.functional.cross_entropy(logits, torch.tensor([0, 5, 94]))
    loss.backward()
    for name, params in [("backbone", model.backbone.parameters()), ("char encoder", model.char_encoder.parameters()),
                         ("char projection", model.char_proj.parameters()), ("type head", model.type_head.parameters())]:
        grads = [p.grad for p in params if p.requires_grad]
        assert grads and any(g is not None and g.abs().sum() > 0 for g in grads), name
    assert model.char_encoder.convs[0].weight.grad.abs().sum() > 0
    assert model.backbone.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    model.zero_grad()
    model.eval()


def test_encode_unit_vectors_in_input_order(model):
    phrases = ["car", "the new york times review of a city", "red", "bank of the river", "york"]
    was_training = model.training
    v = model.encode(phrases, batch_size=2)
    assert model.training == was_training
    assert v.shape == (5, HIDDEN + PROJ) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    alone = np.stack([model.encode([p])[0] for p in phrases])
    assert np.allclose(v, alone, atol=1e-5)
    assert not np.allclose(v[0], v[2], atol=1e-3)  # a permutation would be caught
    with torch.no_grad():
        emb, _ = model(**_batch(model, phrases))
    assert np.allclose(v, torch.nn.functional.normalize(emb, dim=-1).numpy(), atol=1e-5)


def test_gpu_runner_casts_only_the_backbone(model):
    """The GPU path's bf16 copy covers the backbone; the character branch and heads stay float32
    (the forward joins them in float32). Run on the CPU here, which has bf16 matmuls too."""
    from pearl_model.inference.encoder import CudaRunner, encode_batches

    runner = CudaRunner(model, torch.device("cpu"), pool=False)
    assert runner.params["backbone.embeddings.word_embeddings.weight"].dtype == torch.bfloat16
    assert runner.params["char_proj.weight"].dtype == torch.float32
    assert runner.params["char_encoder.convs.0.weight"].dtype == torch.float32
    phrases = ["car", "the new york times review of a city", "red", "bank of the river", "york"]
    featurize = lambda b: model.batcher(b, allow_blank=True)  # noqa: E731
    got = encode_batches(phrases, 2, model.dim, featurize, runner, True, False, "t")
    ref = model.encode(phrases, batch_size=2, backend="torch")
    assert (got * ref).sum(1).min() > 0.999
    # the character part (float32 throughout) is the same up to float32 rounding
    assert np.allclose(got[:, HIDDEN:] / np.linalg.norm(got[:, HIDDEN:], axis=1, keepdims=True),
                       ref[:, HIDDEN:] / np.linalg.norm(ref[:, HIDDEN:], axis=1, keepdims=True), atol=1e-5)


def test_a_model_cast_to_bf16_still_encodes(model):
    """A user's ``.to(torch.bfloat16)`` (sentence-transformers' half-precision advice) must not
    break the forward that joins the float32 backbone vector and the character branch."""
    import copy

    fp32 = model
    half = copy.deepcopy(fp32).to(torch.bfloat16)
    phrases = ["car", "the new york times review of a city", "bank of the river"]
    with torch.no_grad():
        e32, _ = fp32(**_batch(fp32, phrases))
        e16, logits = half(**_batch(half, phrases))
    assert e16.dtype == torch.float32 and logits.dtype == torch.bfloat16
    assert torch.nn.functional.cosine_similarity(e16, e32).min() > 0.99


def test_blank_phrase_encodes_as_the_prefix_alone(model):
    v = model.encode(["car", "  ", ""])
    assert np.isfinite(v).all() and np.allclose(v[1], v[2], atol=1e-6)
    raw = model.encode(["  "], normalize=False)
    assert np.allclose(raw[0, model.backbone_dim:], model.char_proj.bias.detach().numpy(), atol=1e-6)  # no words
    raw_car = model.encode(["car"], normalize=False)[0]
    assert np.allclose(raw_car / np.linalg.norm(raw_car), model.encode(["car"])[0], atol=1e-6)


def test_errors(model, parts):
    enc, char, vocab = parts
    with pytest.raises(ValueError, match="empty"):
        model.encode([])
    with pytest.raises(ValueError, match="empty"):
        collate(["car", "  "], enc.tokenizer, vocab)  # a training batch never holds a blank phrase
    with pytest.raises(ValueError, match="empty"):
        collate([], enc.tokenizer, vocab)
    with pytest.raises(TypeError, match="single string"):
        model.encode("car")
    with pytest.raises(TypeError, match="phrase 1"):
        model.encode(["car", None])
    with pytest.raises(ValueError):
        model.encode(["car"], batch_size=0)
    bare = PearlModel.from_parts(enc.model, char, char_proj_dim=PROJ)
    with pytest.raises(RuntimeError, match="tokenizer"):
        bare.encode(["car"])
    with pytest.raises(ValueError):
        model.char_vectors(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool))


def test_mean_pool_ignores_masked_positions():
    h = torch.tensor([[[1.0], [3.0], [100.0]]])
    assert mean_pool(h, torch.tensor([[1, 1, 0]])).item() == 2.0
    assert mean_pool(h, torch.tensor([[0, 0, 0]])).item() == 0.0


def test_model_module_imports_no_pipeline_code():
    import subprocess
    import sys
    code = ("import sys, pearl_model.inference.model; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('prefect', 'tasks', 'flows', 'storage')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
