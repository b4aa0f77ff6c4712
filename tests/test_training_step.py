"""The training step's GPU path, checked on a CPU: on a GPU the step reads nothing back to the host
but its one loss check (dense character vectors, attention masks left on the device, the type loss's
mean written out), and each of these computes what the plain path computes."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch.nn.functional as F  # noqa: E402

from pearl_model.inference.network import PearlNetwork  # noqa: E402
from pearl_model.training import loop as T  # noqa: E402
from tests.test_training import cfg, make_model, parts, toy_examples  # noqa: E402,F401  (parts: a fixture)

CPU = torch.device("cpu")


def host_reads(fn) -> list[str]:
    """The HOST_READ_OPS that ``fn()`` runs (each would make the host wait for a GPU)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sorted(e.key for e in prof.key_averages() if e.key in T.HOST_READ_OPS)


def gpu_path(monkeypatch) -> None:
    """What a GPU runs, forced on this CPU: dense character vectors and the masks kept on the device."""
    real = PearlNetwork.char_vectors
    monkeypatch.setattr(PearlNetwork, "char_vectors", lambda self, ids, mask, dense=None: real(self, ids, mask, True))
    monkeypatch.setattr(T, "device_masks", lambda device: T.mask_read_skipped())


def one_step(model, batch, config):
    """The step's forward, losses (the recipe's distillation included) and backward, as train() runs them."""
    labels = batch["labels"]
    with T.device_masks(CPU):
        emb, logits, anchors = T.forward_groups(model, batch, CPU)
    loss, _ = T.pearl_loss(emb, logits, labels, config.temperature, config.type_loss_weight,
                           config.type_loss_on, config.type_loss_labels)
    d, _ = T.distill_term(emb[:len(labels), :model.backbone_dim], emb[:len(labels), :model.backbone_dim].detach() + 1,
                          labels, config)
    (loss + d).backward()


def test_the_gpu_path_of_a_step_reads_nothing_back_where_the_plain_one_does(parts, monkeypatch):
    model = make_model(parts).train()
    exs = toy_examples()
    exs = [T.Example(e.phrase, 18 if i % 2 else e.label_id, e.cached, e.negatives) for i, e in enumerate(exs)]  # OTHERs
    config = cfg(distill_weight=1.0, distill_target="vectors", type_loss_labels="entities")
    batch = T.StepBatches(exs, [np.arange(12)], model.batcher, 0, 0, 2)[0]
    plain = host_reads(lambda: one_step(model, batch, config))
    assert "aten::nonzero" in plain  # the detector sees the word gather (and so can fail below)
    gpu_path(monkeypatch)
    assert host_reads(lambda: one_step(model, batch, config)) == []


def test_dense_character_vectors_equal_the_gathered_ones(parts):
    model = make_model(parts)
    gen = torch.Generator().manual_seed(0)
    for words in (1, 3, 7):
        ids = torch.randint(4, len(model.batcher.char_vocab), (9, words, 12), generator=gen)
        mask = torch.rand(9, words, generator=gen) < 0.6
        mask[0] = False  # a blank phrase: no word, a zero vector either way
        mask[1] = True
        ids[~mask] = 0
        with torch.no_grad():
            dense, gathered = model.char_vectors(ids, mask, dense=True), model.char_vectors(ids, mask, dense=False)
        torch.testing.assert_close(dense, gathered, rtol=1e-6, atol=1e-6)
        assert torch.equal(dense[0], torch.zeros_like(dense[0]))


def test_the_attention_mask_kept_on_the_device_gives_the_same_vectors(parts):
    model = make_model(parts).eval()
    for texts in (["red car", "the new york times post"], ["red car", "big river"]):  # padded, and not
        feats = model.batcher(texts)
        with torch.no_grad():
            plain = model.backbone(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"])
            with T.mask_read_skipped():
                kept = model.backbone(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"])
        torch.testing.assert_close(kept.last_hidden_state, plain.last_hidden_state, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_the_type_loss_is_cross_entropys_mean_over_the_counted_rows(seed):
    """The mean written out equals cross entropy's own (values and gradients), and a batch without an
    entity phrase has a zero term with a zero gradient, where cross entropy's mean is NaN."""
    gen = torch.Generator().manual_seed(seed)
    b = 6
    emb = torch.randn(3 * b, 8, generator=gen)
    labels = torch.randint(0, 95, (b,), generator=gen)
    labels[0], labels[1] = 18, 3  # an OTHER label and an entity type in every batch
    for lab in (labels, torch.full((b,), 37)):  # the second: OTHERs only
        logits = torch.randn(3 * b, 95, generator=gen, requires_grad=True)
        _, parts_ = T.pearl_loss(emb, logits, lab, 0.07, 1.0, "anchors", "entities")
        counted = ~torch.isin(lab, T._other_ids(CPU))
        if counted.any():
            expected = F.cross_entropy(logits[:b][counted], lab[counted])
        else:
            expected = logits.sum() * 0.0
            assert math.isnan(F.cross_entropy(logits[:b].detach(), lab.masked_fill(~counted, -100), ignore_index=-100))
        torch.testing.assert_close(parts_["type_ce"], expected.detach(), rtol=1e-6, atol=1e-7)
        got, = torch.autograd.grad(T.pearl_loss(emb, logits, lab, 0.07, 1.0, "anchors", "entities")[0], logits)
        want, = torch.autograd.grad(expected, logits) if counted.any() else (torch.zeros_like(logits),)
        torch.testing.assert_close(got[:b], want[:b], rtol=1e-5, atol=1e-7)


def test_the_gpu_path_trains_as_the_plain_one(parts, monkeypatch):
    """A few steps of the recipe (distillation, the type loss on entities) on the plain path and on the
    GPU path forced on this CPU, same seed: the same losses, logged values and weights."""
    exs = toy_examples()
    config = cfg(max_steps=4, distill_weight=1.0, distill_target="vectors", log_every=2)

    def run():
        model = make_model(parts)
        steps = []
        res = T.train(model, exs, config, reference=T.backbone_state(model), on_step=steps.append)
        assert steps == [1, 2, 3, 4]
        return res, model.state_dict()

    plain, plain_weights = run()
    gpu_path(monkeypatch)
    gpu, gpu_weights = run()
    assert [r["step"] for r in gpu.history] == [2, 4]
    for a, b in zip(plain.history, gpu.history):
        for key in ("loss", "infonce", "type_ce", "distill", "retrieval_acc"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key
    for k, v in plain_weights.items():
        torch.testing.assert_close(gpu_weights[k], v, rtol=1e-4, atol=1e-6)


def test_loader_workers_are_the_setting_else_four_on_a_gpu_and_none_on_a_cpu():
    assert T.loader_workers(cfg(), torch.device("cuda")) == 4 and T.loader_workers(cfg(), CPU) == 0
    assert T.loader_workers(cfg(num_workers=3), torch.device("cuda")) == 3 == T.loader_workers(cfg(num_workers=3), CPU)


def test_torch_compile_is_a_runtime_setting_applied_in_place(parts, monkeypatch):
    """Off by default; where training runs, not what is trained (the model version ignores it); when
    set, the backbone and the teacher are compiled in place (their weights keep their names)."""
    assert T.TrainConfig().torch_compile == "off"
    assert T.TrainConfig(torch_compile="reduce-overhead").version_params() == T.TrainConfig().version_params()
    compiled = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: compiled.append((type(self).__name__, kw)))
    model = make_model(parts)
    keys = set(model.state_dict())
    T.train(model, toy_examples(), cfg(max_steps=1, distill_weight=1.0, torch_compile="default"),
            reference=T.backbone_state(model))
    assert compiled == [("BertModel", {"mode": "default", "dynamic": True})] * 2
    assert set(model.state_dict()) == keys
    with pytest.raises(ValueError):
        T.TrainConfig(torch_compile="fast")
