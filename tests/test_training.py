"""pearl_model.training.loop on a tiny random BERT + tiny CharEncoder (CPU, seconds)."""
from __future__ import annotations

import json
import math
import random
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pearl_model.evaluation.alias_retrieval import AliasRetrieval, alias_retrieval  # noqa: E402
from pearl_model.inference.backbones import BackboneInfo  # noqa: E402
from pearl_model.training.char_encoder import CharEncoder, CharVocab  # noqa: E402
from pearl_model.inference.encoder import PhraseEncoder  # noqa: E402
from pearl_model.inference.model import PearlModel  # noqa: E402
from pearl_model.training import loop as T  # noqa: E402
from pearl_model.training.checkpoints import SELECTED_WEIGHTS  # noqa: E402

torch.set_num_threads(1)

WORDS = ("the new york times post review bank river of a city red car green house big small old "
         "river bank paper news blue sky north south east west lake road street market").split()


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS))
                                           + list("abcdefghijklmnopqrstuvwxyz")))
    tok = transformers.BertTokenizerFast(str(d / "vocab.txt"))
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    return d, tok, cfg


def make_model(parts, seed: int = 0, char_proj_dim: int = 8) -> PearlModel:
    d, tok, cfg = parts
    torch.manual_seed(seed)
    bert = transformers.BertModel(cfg, add_pooling_layer=False)
    vocab = CharVocab.build(WORDS)
    char = CharEncoder(len(vocab), 12, char_dim=8, kernel_sizes=(2, 3), n_filters=8, hidden=16, max_len=12)
    enc = PhraseEncoder(bert, tok, BackboneInfo("tiny", str(d), "local", max_length=16, dim=32))
    return PearlModel.from_parts(enc, char, char_proj_dim=char_proj_dim, char_vocab=vocab)


def toy_examples(n: int = 48, seed: int = 0) -> list[T.Example]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        phrase = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
        cached = {"wordnet": (phrase + " news",)} if i % 3 == 0 else {}
        negs = tuple(" ".join(rng.sample(WORDS, 2)) for _ in range(i % 3))
        out.append(T.Example(f"{phrase} {i}", i % 5, cached, negs))
    return out


def cfg(**kw) -> T.TrainConfig:
    # the plain loop (nothing frozen, no distillation, fp32 on any CPU): each test switches on what it tests
    base = dict(batch_size=8, epochs=2, lr=1e-3, log_every=1, checkpoint_every=0, device="cpu", seed=3, cpu_bf16=False,
                freeze_embeddings=False, freeze_layers=0, distill_weight=0.0, distill_target="layout", select_every=0)
    return T.TrainConfig(**{**base, **kw})


def test_examples_from_rows_and_positive_draws():
    rows = [{"phrase": "new york", "label_id": 3, "positives": [{"kind": "alias", "text": "NYC"},
                                                                {"kind": "alias", "text": "new york"},
                                                                {"kind": "wordnet", "text": " "}],
             "negatives": ["new work", ""]}]
    counts = Counter()
    (ex,) = T.examples_from_rows(rows, counts)
    assert counts == {"positives_read": 3, "positives_dropped_blank_or_same": 2, "negatives_read": 2,
                      "negatives_dropped_blank": 1}
    assert ex.cached == {"alias": ("NYC",)} and ex.negatives == ("new work",) and ex.label_id == 3
    assert T.positive_kinds(ex) == ["char", "swap_tokens", "change_case", "alias"]
    rng = random.Random(0)
    seen = {}
    for _ in range(300):
        kind, text = T.draw_positive(ex, rng)
        seen[kind] = seen.get(kind, 0) + 1
        assert text != "new york" and text
    assert set(seen) == {"char", "swap_tokens", "change_case", "alias"} and min(seen.values()) > 50  # uniform
    assert T.positive_kinds(T.Example("river", 0)) == ["char", "change_case"]
    assert T.draw_positive(T.Example("1", 0), rng) == ("identity", "1")  # nothing applies: itself


def test_plan_epoch_covers_every_example_once_and_buckets_by_length():
    lengths = [random.Random(i).randint(1, 40) for i in range(103)]
    plan = T.plan_epoch(lengths, 10, seed=1, epoch=0, window=50)
    flat = np.concatenate(plan)
    assert sorted(flat.tolist()) == list(range(103))
    assert all(np.all(np.diff([lengths[i] for i in b]) >= 0) for b in plan)  # sorted within one window
    assert [b.tolist() for b in plan] == [b.tolist() for b in T.plan_epoch(lengths, 10, 1, 0, 50)]
    assert [b.tolist() for b in plan] != [b.tolist() for b in T.plan_epoch(lengths, 10, 1, 1, 50)]


def test_loss_is_infonce_plus_type_ce():
    torch.manual_seed(0)
    emb, logits, labels = torch.randn(7, 5), torch.randn(7, 4), torch.tensor([0, 3, 1])
    loss, parts = T.pearl_loss(emb, logits, labels, temperature=0.5, type_loss_weight=2.0)
    e = torch.nn.functional.normalize(emb, dim=-1)
    sims = e[:3] @ e[3:].T / 0.5
    nce = -torch.log_softmax(sims, dim=1)[torch.arange(3), torch.arange(3)].mean()
    ce = torch.nn.functional.cross_entropy(logits[:3], labels)
    assert torch.allclose(loss, nce + 2.0 * ce, atol=1e-6)
    assert torch.allclose(parts["infonce"], nce) and torch.allclose(parts["type_ce"], ce)


def test_distill_loss_is_zero_for_the_teachers_layout_and_grows_as_it_moves():
    torch.manual_seed(0)
    t = torch.randn(6, 4)
    assert T.distill_loss(3 * t, t, 0.1).abs() < 1e-6  # the same directions: nothing to keep
    moved = t.clone()
    moved[0] = -moved[0]
    far = T.distill_loss(moved, t, 0.1)
    assert far > T.distill_loss(t + 0.1 * torch.randn(6, 4), t, 0.1) > 0
    s = moved.clone().requires_grad_(True)
    T.distill_loss(s, t, 0.1).backward()
    assert s.grad.abs().sum() > 0


def test_distillation_keeps_the_anchors_layout_and_needs_the_original_weights(parts):
    exs = toy_examples()
    with pytest.raises(ValueError, match="distill_weight > 0 needs the backbone's original weights"):
        T.train(make_model(parts), exs, cfg(distill_weight=1.0))
    with pytest.raises(ValueError, match=r"distill_weight\n  Input should be greater than or equal to 0"):
        T.train(make_model(parts), exs, cfg(distill_weight=-1.0))
    drift = {w: _drift(parts, exs, lambda now, before: T.distill_loss(now, before, 0.05), distill_weight=w)
             for w in (0.0, 10.0)}
    assert drift[10.0] < drift[0.0], drift  # the term holds the layout the plain recipe moves


def _drift(parts, exs, measure, **overrides) -> float:
    """``measure`` of how far training moved the backbone part of the vectors of ``exs``."""
    model = make_model(parts)
    original = T.backbone_state(model)
    res = T.train(model, exs, cfg(epochs=4, lr=3e-3, **overrides), reference=original)
    assert ("distill" in res.history[-1]) == (overrides.get("distill_weight", 0) > 0)
    with torch.no_grad():
        batch = model.batcher([e.phrase for e in exs])
        now = model(**batch)[0][:, :model.backbone_dim]
        model.backbone.load_state_dict(original)
        before = model(**batch)[0][:, :model.backbone_dim]
    return float(measure(now, before))


def test_vector_distillation_counts_only_the_anchors_it_is_told_to():
    from pearl_model.phrases.labels import LABELS, OTHER

    other = next(i for i, lab in enumerate(LABELS) if lab.endswith(f"-{OTHER}"))
    entity = next(i for i, lab in enumerate(LABELS) if not lab.endswith(f"-{OTHER}"))
    torch.manual_seed(0)
    t = torch.randn(4, 8)
    s = t.clone()
    s[0] = -s[0]  # an entity anchor turned around
    labels = torch.tensor([entity, other, other, entity])
    assert float(T.vector_distill_loss(2 * t, t)) == pytest.approx(0.0, abs=1e-6)  # the norm is free
    every, _ = T.distill_term(s, t, labels, T.TrainConfig(distill_weight=1.0, distill_target="vectors"))
    assert float(every) == pytest.approx(2 / 4, abs=1e-5)  # (1 - (-1)) / 4 anchors
    only_other, _ = T.distill_term(s, t, labels, T.TrainConfig(distill_weight=1.0, distill_target="vectors", distill_labels="other"))
    assert float(only_other) == pytest.approx(0.0, abs=1e-6)  # the entity anchor is the type head's
    s[1] = -s[1]
    assert float(T.distill_term(s, t, labels, T.TrainConfig(distill_weight=1.0, distill_target="vectors",
                                                            distill_labels="other"))[0]) == pytest.approx(1.0, abs=1e-5)
    # no OTHER anchor in the batch: a zero term that still backpropagates, not a NaN
    none, _ = T.distill_term(s.requires_grad_(True), t, torch.tensor([entity] * 4),
                             T.TrainConfig(distill_weight=1.0, distill_target="vectors", distill_labels="other"))
    none.backward()
    assert float(none.detach()) == 0.0 and torch.isfinite(s.grad).all()
    with pytest.raises(ValueError, match=r"distill_target\n  Input should be .layout. or .vectors."):
        T.TrainConfig(distill_target="norms")


def test_pinned_anchors_stay_where_the_backbone_put_them(parts):
    exs = toy_examples()
    drift = {w: _drift(parts, exs, T.vector_distill_loss, distill_weight=w, distill_target="vectors")
             for w in (0.0, 10.0)}
    assert drift[10.0] < drift[0.0], drift


def test_the_norm_pin_counts_norm_ratios_not_directions_and_needs_the_direction_pin():
    torch.manual_seed(0)
    t = torch.randn(4, 8)
    assert float(T.norm_distill_loss(-t, t)) == pytest.approx(0.0, abs=1e-6)  # directions are the other term's
    scaled = t * torch.tensor([[2.0], [1.0], [0.5], [1.0]])
    expected = (2 * torch.log(torch.tensor(2.0)) ** 2 / 4).item()
    assert float(T.norm_distill_loss(scaled, t)) == pytest.approx(expected, rel=1e-5)
    labels = torch.zeros(4, dtype=torch.long)
    total, parts = T.distill_term(scaled, t, labels, T.TrainConfig(distill_weight=10.0, distill_target="vectors",
                                                                 distill_norm_weight=100.0))
    assert set(parts) == {"distill", "distill_norm"} and float(parts["distill"]) == pytest.approx(0.0, abs=1e-6)
    assert float(total) == pytest.approx(100 * expected, rel=1e-5)
    for bad in (dict(distill_norm_weight=-1.0), dict(distill_norm_weight=1.0, distill_weight=0.0),
                dict(distill_norm_weight=1.0, distill_weight=1.0, distill_target="layout")):
        with pytest.raises(ValueError, match="distill_norm_weight"):
            T.TrainConfig(**bad)


def test_pinned_norms_stay_where_the_backbone_put_them(parts):
    exs = toy_examples()
    drift = {w: _drift(parts, exs, T.norm_distill_loss, distill_weight=10.0, distill_target="vectors",
                       distill_norm_weight=w, type_loss_weight=5.0) for w in (0.0, 100.0)}
    assert drift[100.0] < drift[0.0], drift


def test_lr_decays_in_steps():
    c = T.TrainConfig(lr=1e-3, lr_decay=0.5, lr_decay_every=10)
    assert [T.lr_at(s, c) for s in (0, 9, 10, 25)] == [1e-3, 1e-3, 5e-4, 2.5e-4]


def test_a_few_steps_lower_the_loss(parts):
    model = make_model(parts)
    exs = toy_examples()
    typed = {"type_loss_weight": 1.0}  # the type head is trained and scored too (off by default)
    before = T.evaluate_loss(model, exs, cfg(**typed))
    res = T.train(model, exs, cfg(epochs=6, **typed), validation=exs[:16])
    after = T.evaluate_loss(model, exs, cfg(**typed))
    assert [v["step"] for v in res.validation] == [0, 6, 12, 18, 24, 30, 36]
    assert res.validation[-1]["val_loss"] < res.validation[0]["val_loss"]
    assert res.steps == 6 * 6 and len(res.history) == res.steps
    assert after["val_loss"] < before["val_loss"] - 0.3, (before, after)
    assert after["val_type_ce"] < before["val_type_ce"]
    assert all(r["anchors_per_s"] > 0 for r in res.history)
    assert sum(res.positive_kinds.values()) == 6 * len(exs)  # one positive per anchor per step
    assert {"char", "swap_tokens", "wordnet"} <= set(res.positive_kinds)


def test_resume_takes_the_same_next_step(parts, tmp_path):
    exs = toy_examples()
    straight = make_model(parts)
    full = T.train(straight, exs, cfg(max_steps=8, checkpoint_every=3), checkpoint_dir=tmp_path / "a")

    interrupted = make_model(parts)
    T.train(interrupted, exs, cfg(max_steps=7, checkpoint_every=3), checkpoint_dir=tmp_path / "b")
    assert json.loads((tmp_path / "b" / "latest.json").read_text())["step"] == 7
    resumed = make_model(parts, seed=99)  # other init: everything must come from the checkpoint
    res = T.train(resumed, exs, cfg(max_steps=8, checkpoint_every=3), checkpoint_dir=tmp_path / "b")
    assert res.resumed_from == 7 and res.steps == 8
    assert res.history[-1]["loss"] == pytest.approx(full.history[-1]["loss"], abs=1e-6)
    a, b = straight.state_dict(), resumed.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert len(list((tmp_path / "a").glob("step-*"))) == 2  # only the last two are kept


@pytest.mark.parametrize("damage", ["flip", "truncate", "pointer"])
def test_a_damaged_checkpoint_is_trained_again_never_loaded(parts, tmp_path, damage):
    """A checkpoint is a cache of the run: a byte flipped in its weights, a truncated file (each
    checked against the size and sha256 its writer recorded in state.json) or a pointer leading out
    of the directory is warned about and the run starts over, with the model untouched by it."""
    exs = toy_examples()
    T.train(make_model(parts), exs, cfg(max_steps=3, checkpoint_every=3), checkpoint_dir=tmp_path)
    weights = tmp_path / "step-0000003" / "model.safetensors"
    if damage == "flip":
        data = bytearray(weights.read_bytes())
        data[-3] ^= 0x01  # inside the last tensor's values: safetensors alone would load it
        weights.write_bytes(bytes(data))
    elif damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:-8])
    else:
        (tmp_path / "latest.json").write_text(json.dumps({"step": 3, "path": "../elsewhere/step-0000003"}))
    res = T.train(make_model(parts), exs, cfg(max_steps=4, checkpoint_every=3), checkpoint_dir=tmp_path)
    assert res.resumed_from is None and res.steps == 4


def test_nan_loss_stops_with_the_last_good_checkpoint(parts, tmp_path, monkeypatch):
    model = make_model(parts)
    exs = toy_examples()
    T.train(model, exs, cfg(max_steps=2, checkpoint_every=2), checkpoint_dir=tmp_path)
    good = {k: v.clone() for k, v in model.state_dict().items()}
    real, calls = T.pearl_loss, []

    def poisoned(*args, **kw):  # the 2nd step after resuming diverges
        loss, parts_ = real(*args, **kw)
        calls.append(1)
        return (loss * float("nan") if len(calls) == 2 else loss), parts_

    monkeypatch.setattr(T, "pearl_loss", poisoned)
    with pytest.raises(T.NonFiniteLoss, match="step 3 .*step-0000003"):
        T.train(model, exs, cfg(max_steps=5, checkpoint_every=1), checkpoint_dir=tmp_path)
    # step 3 was checkpointed before the bad one; no checkpoint was written after it
    assert json.loads((tmp_path / "latest.json").read_text())["step"] == 3
    assert all(torch.isfinite(v).all() for v in model.state_dict().values() if v.is_floating_point())
    assert any(not torch.equal(good[k], v) for k, v in model.state_dict().items())


def test_bad_config_and_inputs(parts):
    with pytest.raises(ValueError, match="batch_size"):
        T.train(make_model(parts), toy_examples(), cfg(batch_size=1))
    with pytest.raises(ValueError, match="at least 2"):
        T.train(make_model(parts), toy_examples()[:1], cfg())
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            T.train(make_model(parts), toy_examples(), cfg(device="cuda"))


def test_training_module_imports_no_pipeline_code():
    import subprocess
    import sys
    code = ("import sys, pearl_model.training; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('prefect', 'tasks', 'flows', 'storage')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_alias_retrieval_top1_and_mrr():
    vecs = {"a0": [1, 0], "a1": [0, 1], "a2": [0.9, 0.1], "T0": [1, 0], "T1": [0.8, 0.6], "T2": [0, 1]}

    def encode(texts):
        return np.array([vecs[t] for t in texts], dtype=np.float32)

    task = AliasRetrieval(("a0", "a1", "a2"), ("T0", "T1", "T2"), (0, 1, 2))
    # a0 finds T0 first; a1 ranks T1 second (T2 closer); a2: T0 (0.9) > T1 (0.78) > T2 (0.1): third
    assert alias_retrieval(encode, task) == pytest.approx({"alias_top1": 1 / 3, "alias_mrr": (1 + 1 / 2 + 1 / 3) / 3})
    assert alias_retrieval(encode, AliasRetrieval((), ("T0",), ())) == {}
    with pytest.raises(ValueError, match="index of its title"):
        AliasRetrieval(("a0",), ("T0",), (1,))


def tiny_retrieval() -> AliasRetrieval:
    titles = ("new york times", "river bank", "green house", "north lake", "old market", "blue sky")
    return AliasRetrieval(("the times", "bank of the river", "a green house"), titles, (0, 1, 2))


def test_held_out_alias_retrieval_is_logged_before_training_after_each_epoch_and_kept_on_resume(parts, tmp_path):
    exs = toy_examples()
    res = T.train(make_model(parts), exs, cfg(epochs=2), validation=exs[:16], retrieval=tiny_retrieval())
    assert [v["step"] for v in res.validation] == [0, 6, 12]
    for v in res.validation:
        assert 0 <= v["val_alias_top1"] <= v["val_alias_mrr"] <= 1 and "val_loss" in v
    # the scores are the model's: recomputed with its encode() after training, they match the last record
    model = make_model(parts)
    T.train(model, exs, cfg(epochs=2), retrieval=tiny_retrieval())
    last = alias_retrieval(model.encode, tiny_retrieval())
    assert last["alias_mrr"] == pytest.approx(res.validation[-1]["val_alias_mrr"], abs=1e-6)

    # retrieval alone (no validation phrases) still gives the validation points
    alone = T.train(make_model(parts), exs, cfg(epochs=1), retrieval=tiny_retrieval())
    assert [sorted(v) for v in alone.validation] == [["epoch", "step", "val_alias_mrr", "val_alias_top1"]] * 2

    # an interrupted run keeps the 'before' record through its checkpoint
    cut = T.train(make_model(parts), exs, cfg(epochs=2, max_steps=8, checkpoint_every=4), retrieval=tiny_retrieval(),
                  checkpoint_dir=tmp_path)
    resumed = T.train(make_model(parts), exs, cfg(epochs=2, checkpoint_every=4), retrieval=tiny_retrieval(),
                      checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 8 and [v["step"] for v in resumed.validation] == [0, 6, 12]
    assert resumed.validation[:2] == cut.validation[:2]


def test_positive_kinds_restrict_the_draws():
    ex = T.Example("new york", 0, {"alias": ("NYC",), "wordnet": ("new yorkshire",)})
    rng = random.Random(0)
    assert {T.draw_positive(ex, rng, ("alias",))[0] for _ in range(50)} == {"alias"}
    assert {T.draw_positive(ex, rng, ("char", "wordnet"))[0] for _ in range(100)} == {"char", "wordnet"}
    assert T.draw_positive(ex, rng, ("fasttext",)) == ("identity", "new york")  # no allowed kind applies


def test_ablation_parameters_that_cannot_work_are_refused_naming_the_parameter(parts):
    exs = toy_examples()
    model = make_model(parts)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for bad, message in [({"type_loss_weight": -0.1}, r"type_loss_weight\n  Input should be greater than or equal to 0"),
                         ({"positive_kinds": ()}, r"positive_kinds\n  Tuple should have at least 1 item"),
                         ({"positive_kinds": ("fastext",)}, r"^positive_kinds names \['fastext'\]"),
                         ({"lr_decay": 1.5}, r"lr_decay\n  Input should be less than or equal to 1")]:
        with pytest.raises(ValueError, match=message):
            T.train(model, exs, cfg(**bad))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # refused before any step
    res = T.train(model, exs, cfg(epochs=1, positive_kinds=("wordnet",)))
    assert set(res.positive_kinds) == {"wordnet", "identity"}  # phrases without a wordnet positive: themselves


def test_groups_are_padded_apart_and_equal_one_padded_forward(parts):
    model = make_model(parts).eval()
    exs = [T.Example(f"red car {i}", 1, {"context": ("the old [MASK] in the north of the big river city market",)},
                     ("blue sky", "the news")) for i in range(4)]
    ds = T.StepBatches(exs, [np.arange(4)], model.batcher, 0, 0, 2, ("context",))
    batch = ds[0]
    phrases, positives = batch["groups"]
    assert phrases["input_ids"].shape[0] == 4 + 8 and positives["input_ids"].shape[0] == 4
    assert phrases["input_ids"].shape[1] < positives["input_ids"].shape[1]  # phrases not padded to the context
    with torch.no_grad():
        emb, logits, first = T.forward_groups(model, batch, torch.device("cpu"))
        texts = [e.phrase for e in exs] + [e.cached["context"][0] for e in exs] + [n for e in exs for n in e.negatives]
        one_emb, one_logits = model(**model.batcher(texts))
    assert torch.equal(first["input_ids"], phrases["input_ids"][:4])
    torch.testing.assert_close(emb, one_emb, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(logits, one_logits, atol=1e-5, rtol=1e-4)


def scripted_selector(worst_by_step: dict[int, float], seen: dict):
    """A select() whose verdict is scripted per step; it records the weights it was shown."""
    def select(model):
        step = len(seen) + 1
        seen[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return {"select_worst": worst_by_step.get(step, -9.0), "select_mean": 0.0}
    return select


def test_selection_keeps_the_weights_of_the_best_scored_step(parts, tmp_path):
    exs = toy_examples()
    seen: dict = {}
    model = make_model(parts)
    # select at steps 2, 4, 6 (and the end, 6): the 2nd call (step 4) is scored best
    res = T.train(model, exs, cfg(max_steps=6, select_every=2), checkpoint_dir=tmp_path,
                  select=scripted_selector({1: -1.0, 2: 0.5, 3: 0.2}, seen))
    assert [r["step"] for r in res.selection] == [2, 4, 6] and res.selected_step == 4 and res.steps == 6
    state = model.state_dict()
    assert all(torch.equal(state[k].cpu(), seen[2][k].cpu()) for k in state)
    assert any(not torch.equal(state[k].cpu(), seen[3][k].cpu()) for k in state)  # not the last step's
    # the last checkpoint is still the resume point; the chosen weights are stored beside it
    assert json.loads((tmp_path / "latest.json").read_text())["step"] == 6
    assert (tmp_path / SELECTED_WEIGHTS).is_file()

    # a finished run called again trains nothing and ends on the same chosen weights
    again = make_model(parts, seed=5)
    res2 = T.train(again, exs, cfg(max_steps=6, select_every=2), checkpoint_dir=tmp_path,
                   select=scripted_selector({}, {}))
    assert res2.selected_step == 4 and len(res2.selection) == 3
    assert all(torch.equal(again.state_dict()[k].cpu(), state[k].cpu()) for k in state)


def test_selection_survives_an_interruption_and_ties_go_to_the_earlier_step(parts, tmp_path):
    exs = toy_examples()
    seen: dict = {}
    first = make_model(parts)
    T.train(first, exs, cfg(max_steps=4, select_every=2, checkpoint_every=2), checkpoint_dir=tmp_path,
            select=scripted_selector({1: 1.0, 2: 1.0}, seen))  # steps 2 and 4 tie: step 2 kept
    resumed = make_model(parts, seed=7)
    res = T.train(resumed, exs, cfg(max_steps=8, select_every=2, checkpoint_every=2), checkpoint_dir=tmp_path,
                  select=lambda m: {"select_worst": 0.0, "select_mean": 0.0})
    assert res.resumed_from == 4 and [r["step"] for r in res.selection] == [2, 4, 6, 8]
    assert res.selected_step == 2
    assert all(torch.equal(resumed.state_dict()[k].cpu(), seen[1][k].cpu()) for k in seen[1])


def test_selection_rule_mean_keeps_the_largest_gain_among_checkpoints_that_lose_nothing(parts):
    from pearl_model.training.selection import rank

    # step 2 has the best worst change, step 4 loses nothing and gains most on average, step 6 gains
    # more but loses on one signal
    verdicts = {1: (3.0, 5.0), 2: (0.5, 8.0), 3: (-0.4, 9.0)}

    def select(model):
        worst, mean = verdicts[len(calls) + 1]
        calls.append(1)
        return {"select_worst": worst, "select_mean": mean}

    for rule, expected in (("worst", 2), ("mean", 4)):
        calls: list = []
        res = T.train(make_model(parts), toy_examples(), cfg(max_steps=6, select_every=2, select_rule=rule),
                      select=select)
        assert res.selected_step == expected, rule
    # nothing at or above the backbone: the mean rule falls back to the largest worst change
    recs = [{"step": 2, "select_worst": -2.0, "select_mean": 9.0}, {"step": 4, "select_worst": -0.5, "select_mean": 1.0}]
    assert max(recs, key=lambda r: rank(r, "mean"))["step"] == 4
    with pytest.raises(ValueError, match="select_rule"):
        cfg(select_rule="best")


def test_without_select_every_the_last_weights_are_kept(parts):
    calls = []
    res = T.train(make_model(parts), toy_examples(), cfg(max_steps=3),
                  select=lambda m: calls.append(1) or {"select_worst": 0.0, "select_mean": 0.0})
    assert calls == [] and res.selection == [] and res.selected_step is None
    with pytest.raises(ValueError, match="select_every"):
        cfg(select_every=-1)


def test_type_loss_on_entities_only_leaves_the_other_labels_out():
    from pearl_model.phrases.labels import label_id

    torch.manual_seed(0)
    emb = torch.randn(8, 6)  # 4 anchors, 4 positives
    logits = torch.randn(8, 95, requires_grad=True)
    other, person = label_id("NP-OTHER"), label_id("NP-PERSON")
    mixed = torch.tensor([other, person, other, label_id("PP-GPE")])
    _, everything = T.pearl_loss(emb, logits, mixed, 0.07, 1.0)
    _, ents = T.pearl_loss(emb, logits, mixed, 0.07, 1.0, type_loss_labels="entities")
    expected = torch.nn.functional.cross_entropy(logits[[1, 3]].detach(), mixed[[1, 3]])
    assert ents["type_ce"] == pytest.approx(float(expected), abs=1e-6)
    assert everything["type_ce"] != pytest.approx(float(expected), abs=1e-3)
    # a batch of OTHER phrases only: no type term, no gradient to the head, no NaN
    loss, parts = T.pearl_loss(emb, logits, torch.full((4,), other), 0.07, 1.0, type_loss_labels="entities")
    loss.backward()
    assert float(parts["type_ce"]) == 0.0 and torch.isfinite(loss)
    assert logits.grad is not None and float(logits.grad.abs().sum()) == 0.0
    with pytest.raises(ValueError, match="type_loss_labels"):
        cfg(type_loss_labels="some")


def sensed(exs: list[T.Example]) -> list[T.Example]:
    """The toy examples with a sense on every other one (ids as in pearl_model.phrases.senses)."""
    from dataclasses import replace

    return [replace(e, sense_id=i % 4 if i % 2 == 0 else -1) for i, e in enumerate(exs)]


def test_sense_loss_counts_only_the_anchors_with_a_sense():
    torch.manual_seed(0)
    head = torch.nn.Linear(6, 26)
    anchors = torch.randn(4, 6, requires_grad=True)
    senses = torch.tensor([3, -1, 24, -1])
    ce, parts = T.sense_loss(head, anchors, senses)
    expected = torch.nn.functional.cross_entropy(head(anchors[[0, 2]]), senses[[0, 2]])
    assert float(ce.detach()) == pytest.approx(float(expected.detach()), abs=1e-6) and set(parts) == {"sense_ce", "sense_acc"}
    ce.backward()
    assert float(anchors.grad[[1, 3]].abs().sum()) == 0.0 and float(anchors.grad[[0, 2]].abs().sum()) > 0
    none, parts = T.sense_loss(head, anchors, torch.full((4,), -1))  # no sensed anchor: no term, no NaN
    assert float(none) == 0.0 and parts == {}


def test_the_sense_head_trains_moves_the_vectors_and_is_gone_after_training(parts):
    exs = sensed(toy_examples())
    plain, with_sense = make_model(parts), make_model(parts)
    T.train(plain, exs, cfg(max_steps=6))
    res = T.train(with_sense, exs, cfg(max_steps=6, sense_loss_weight=1.0))
    assert not hasattr(with_sense, "sense_head")  # a training aid only
    assert set(with_sense.state_dict()) == set(plain.state_dict())
    assert all("sense_ce" in r and 0 <= r["sense_acc"] <= 1 for r in res.history)
    # the term reaches the encoder: the same seed and data train other backbone weights
    a, b = plain.state_dict(), with_sense.state_dict()
    assert any(not torch.allclose(a[k], b[k]) for k in a if k.startswith("backbone."))


def test_the_sense_head_resumes_exactly(parts, tmp_path):
    exs = sensed(toy_examples())
    straight = make_model(parts)
    full = T.train(straight, exs, cfg(max_steps=6, checkpoint_every=2, sense_loss_weight=1.0),
                   checkpoint_dir=tmp_path / "a")
    T.train(make_model(parts), exs, cfg(max_steps=4, checkpoint_every=2, sense_loss_weight=1.0),
            checkpoint_dir=tmp_path / "b")
    resumed = make_model(parts, seed=99)
    res = T.train(resumed, exs, cfg(max_steps=6, checkpoint_every=2, sense_loss_weight=1.0),
                  checkpoint_dir=tmp_path / "b")
    assert res.resumed_from == 4
    assert res.history[-1]["sense_ce"] == pytest.approx(full.history[-1]["sense_ce"], abs=1e-6)
    a, b = straight.state_dict(), resumed.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_sense_weight_without_sensed_phrases_or_below_zero_is_refused(parts):
    with pytest.raises(ValueError, match="sense_loss_weight"):
        T.train(make_model(parts), toy_examples(), cfg(max_steps=2, sense_loss_weight=1.0))
    with pytest.raises(ValueError, match="sense_loss_weight"):
        cfg(sense_loss_weight=-0.5)


def test_examples_from_rows_labels_senses_and_counts_them():
    rows = [{"phrase": "pneumonia", "label_id": 0, "positives": [], "negatives": []},
            {"phrase": "Paris", "label_id": 1, "positives": [], "negatives": []}]
    counts = Counter()
    exs = T.examples_from_rows(rows, counts, sense_of=lambda p, lab: 23 if p == "pneumonia" else -1)
    assert [e.sense_id for e in exs] == [23, -1] and counts["sense_labelled"] == 1
    assert [e.sense_id for e in T.examples_from_rows(rows)] == [-1, -1]


def forward_dtypes(model, exs, config) -> tuple[set, dict]:
    """The dtypes the backbone's first attention projection put out during train(), and the result."""
    seen = set()
    hook = model.backbone.encoder.layer[0].attention.self.query.register_forward_hook(
        lambda module, args, output: seen.add(output.dtype))
    try:
        return seen, T.train(model, exs, config)
    finally:
        hook.remove()


@pytest.mark.parametrize("native", [True, False])
def test_cpu_bf16_runs_the_forward_in_bf16_where_the_cpu_has_it(parts, monkeypatch, native):
    """cpu_bf16: the forward under bf16 autocast on a CPU with bf16 instructions (faked here either
    way, so the test does not depend on this machine's), the loss still float32 and finite; fp32
    without the setting or without the instructions."""
    monkeypatch.setattr(T, "cpu_has_bf16", lambda: native)
    exs = toy_examples()
    seen, res = forward_dtypes(make_model(parts), exs, cfg(max_steps=3, cpu_bf16=True))
    assert seen == ({torch.bfloat16} if native else {torch.float32})
    assert all(math.isfinite(r["loss"]) for r in res.history)
    plain, _ = forward_dtypes(make_model(parts), exs, cfg(max_steps=1))  # cpu_bf16 off
    assert plain == {torch.float32}
    assert not T.TrainConfig().cpu_bf16  # off by default: one dev set below fp32 beyond its interval


def test_cpu_bf16_is_where_training_runs_not_part_of_the_model_version():
    on, off = T.TrainConfig(cpu_bf16=True), T.TrainConfig(cpu_bf16=False)
    assert on.version_params() == off.version_params() and "cpu_bf16" not in on.version_params()
    assert T.TrainConfig(bucket_window=7).version_params() != T.TrainConfig().version_params()


def test_only_listed_candidates_that_nothing_chooses_among_are_warned_of(monkeypatch):
    import logging

    from pearl_model.training.config import TrainConfig
    from tasks.training import check_train_config, log

    monkeypatch.setattr(log, "disabled", False)  # as test_train_flow: an earlier flow run's logging set-up
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # caplog's handler on the root is gone once Prefect sets logging up

    def warnings(**fields) -> list[str]:
        records.clear()
        log.addHandler(handler)
        try:
            check_train_config(TrainConfig(**fields))
        finally:
            log.removeHandler(handler)
        return [r.getMessage().split(" lists ")[0] for r in records]

    assert warnings(select_every=0) == []  # the recipe's own list, as the quickstart leaves it: the first is exported
    assert warnings(select_every=0, average_weight=(0.5, 0.25), char_scale=(0.5, 1.0)) == ["char_scale",
                                                                                           "average_weight"]
    assert warnings(average_weight=(0.5, 0.25)) == []  # the dev checks choose
