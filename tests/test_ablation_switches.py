"""Each ablation switch changes what it claims (tiny random models, CPU, seconds), the dev splits
are the ones docs/research/recipe-ablations.md names, and the ablation script's scaling and table do what they say."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pearl_model.training import loop as T  # noqa: E402
from pearl_model.evaluation import data  # noqa: E402
from pearl_model.evaluation.dev import DEV_SPLITS, run_dev_benchmark  # noqa: E402
from pearl_model.inference.export import PearlEncoder, export_pearl, load_pearl  # noqa: E402
from tests.test_training import cfg, make_model, parts, toy_examples  # noqa: E402,F401  (parts: a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import ablations  # noqa: E402

BENCH = data.default_benchmark_dir()
needs_bench = pytest.mark.skipif(BENCH is None, reason="PEARL benchmark files not beside the checkout")


def _state(module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _changed(before: dict, module) -> set[str]:
    return {k for k, v in module.state_dict().items() if not torch.equal(before[k], v)}


def test_character_branch_off_exports_the_backbones_dimension(parts, tmp_path):
    model = make_model(parts, char_proj_dim=0)
    assert model.char_proj is None and model.dim == model.backbone_dim == 32
    T.train(model, toy_examples(), cfg(epochs=1))
    path = export_pearl(model, tmp_path / "m")
    enc = PearlEncoder(load_pearl(path, device="cpu"))
    vectors = enc.encode(["river bank", "new york times"])
    assert vectors.shape == (2, 32)
    # the same vectors as the backbone alone (the char branch adds nothing)
    backbone = model.backbone.eval()
    batch = model.batcher(["river bank"])
    with torch.no_grad():
        hidden = backbone(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    ref = torch.nn.functional.normalize(hidden.mean(1), dim=-1).numpy()[0]
    assert np.allclose(vectors[0], ref, atol=1e-5)
    with_char = make_model(parts)
    assert with_char.dim == 32 + 8


def test_type_loss_weight_0_gives_the_head_no_gradient(parts):
    for weight, head_moves in [(0.0, False), (1.0, True)]:
        model = make_model(parts)
        before = _state(model.type_head)
        T.train(model, toy_examples(), cfg(epochs=1, type_loss_weight=weight))
        assert bool(_changed(before, model.type_head)) == head_moves, weight


def test_type_loss_on_both_adds_the_positives_cross_entropy():
    torch.manual_seed(0)
    emb, logits, labels = torch.randn(8, 5), torch.randn(8, 4), torch.tensor([0, 3, 1])
    _, anchors = T.pearl_loss(emb, logits, labels, 0.5, 1.0)
    loss, both = T.pearl_loss(emb, logits, labels, 0.5, 1.0, type_loss_on="both")
    ce = torch.nn.functional.cross_entropy(logits[:6], torch.tensor([0, 3, 1, 0, 3, 1]))
    assert torch.allclose(both["type_ce"], ce) and not torch.allclose(anchors["type_ce"], ce)
    assert torch.allclose(loss, both["infonce"] + ce)


@pytest.mark.parametrize("layers", [1, None])  # None: the lower half (1 of the tiny model's 2), the flow's default
def test_frozen_embeddings_and_layers_do_not_move(parts, layers):
    model = make_model(parts)
    emb, layers_before = _state(model.backbone.embeddings), [_state(b) for b in model.backbone.encoder.layer]
    T.train(model, toy_examples(), cfg(epochs=1, freeze_embeddings=True, freeze_layers=layers))
    layers = layers_before
    assert not _changed(emb, model.backbone.embeddings)
    assert not _changed(layers[0], model.backbone.encoder.layer[0])
    assert _changed(layers[1], model.backbone.encoder.layer[1])  # the rest still trains


def test_impossible_freezing_and_type_loss_targets_are_refused_by_name(parts):
    model = make_model(parts)
    with pytest.raises(ValueError, match=r"^freeze_layers is 5, but the backbone has 2 layers"):
        T.train(model, toy_examples(), cfg(freeze_layers=5))
    with pytest.raises(ValueError, match=r"type_loss_on\n  Input should be 'anchors' or 'both'"):
        T.train(model, toy_examples(), cfg(type_loss_on="positives"))


class Lookup:
    name = "lookup"

    def __init__(self, dim: int = 6):
        self.dim, self.calls = dim, 0

    def encode(self, phrases, normalize=True, batch_size=None):
        self.calls += 1
        v = np.stack([np.random.default_rng(abs(hash(p)) % 2**32).normal(size=self.dim) for p in phrases])
        v = v.astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True) if normalize else v


@needs_bench
def test_dev_splits_are_the_ones_the_docs_name():
    assert DEV_SPLITS == {"ppdb": "validation", "ppdb_filtered": "validation", "conll2003": "dev", "bc5cdr": "dev"}
    for name in ("conll2003", "bc5cdr"):
        dev, test = data.load_entities(BENCH, name, "dev")[0], data.load_entities(BENCH, name, "test")[0]
        assert dev and dev != test
    rows = run_dev_benchmark(Lookup(), BENCH, datasets=("conll2003",))
    assert {r["dataset"] for r in rows} == {"conll2003:dev"}
    with pytest.raises(ValueError, match="no dev split for"):
        run_dev_benchmark(Lookup(), BENCH, datasets=("turney",))


def test_ppdb_validation_split_reports_the_probes_validation_accuracy(monkeypatch):
    from pearl_model.evaluation import paraphrase

    rng = np.random.default_rng(0)
    p1, p2 = [f"a{i}" for i in range(400)], [f"b{i}" for i in range(400)]
    monkeypatch.setattr(paraphrase, "load_ppdb", lambda d, f: (p1, p2, list(rng.integers(0, 2, 400))))
    monkeypatch.setattr(paraphrase, "train_probes", lambda x, y, split, seeds, patiences, **kw: [
        {p: paraphrase.ProbeResult(0.25, 0.75, 1, 2) for p in patiences} for _ in seeds])
    assert paraphrase.evaluate_ppdb(Lookup(), "x", seeds=(0, 1))[0]["value"] == 25.0
    assert paraphrase.evaluate_ppdb(Lookup(), "x", seeds=(0, 1), split="validation")[0]["value"] == 75.0
    with pytest.raises(ValueError, match="split must be"):
        paraphrase.evaluate_ppdb(Lookup(), "x", split="dev")


def test_dev_probe_waits_longer_than_the_test_protocol(monkeypatch):
    from pearl_model.evaluation import dev, paraphrase

    p1, p2 = [f"a{i}" for i in range(40)], [f"b{i}" for i in range(40)]
    monkeypatch.setattr(paraphrase, "load_ppdb", lambda d, f: (p1, p2, [i % 2 for i in range(40)]))
    seen = []
    monkeypatch.setattr(paraphrase, "train_probes", lambda x, y, split, seeds, patiences, **kw: (
        seen.append(patiences), [{p: paraphrase.ProbeResult(0.5, 0.5, 1, 2) for p in patiences} for _ in seeds])[1])
    dev.run_dev_benchmark(Lookup(), "x", datasets=("ppdb_filtered",), seeds=(0, 1))
    paraphrase.evaluate_ppdb(Lookup(), "x", filtered=True, seeds=(0, 1))
    # the test protocol's patience first (the primary metric), then the converged reading
    assert seen == [(dev.DEV_PROBE_PATIENCE,), (paraphrase.PATIENCE, paraphrase.CONVERGED_PATIENCE)]
    assert dev.DEV_PROBE_PATIENCE > paraphrase.PATIENCE


def test_table_reports_deltas_against_the_backbone_with_their_interval_over_seeds():
    base = {"variant": "backbone", "seed": None, "a:dev": 50.0, "b:validation": 80.0, "heldout_alias_top1": 60.0}
    recs = [base] + [{"variant": "v", "seed": s, "average_weight": 0.5, "char_scale": 1.0, "steps": 10,
                      "anchors_per_s": 5.0, "a:dev": 50.0 + d, "b:validation": 80.0, "heldout_alias_top1": 61.0}
                     for s, d in [(0, 1.0), (1, 3.0)]]
    md, deltas = ablations.table(recs)
    assert ("| v | 0.5 | 1.0 | 2 | 10 | 5 | no difference (+2.0 [-10.7, +14.7]) | no difference (+0.0 [+0.0, +0.0]) "
            "| +1.0 [+1.0, +1.0] | no difference (+1.0 [-5.4, +7.4]) |") in md
    assert deltas == [("v w0.5 x1.0", {"a:dev": 2.0, "b:validation": 0.0, "heldout_alias_top1": 1.0,
                                         "dev mean": 1.0})]


def test_learning_curve_points_are_rows_of_their_own():
    base = {"variant": "backbone", "seed": None, "a:dev": 50.0}
    recs = [base] + [{"variant": "v", "seed": 0, "average_weight": 0.5, "char_scale": 1.0, "steps": a // 10,
                      "anchors_per_s": 5.0, "anchors": a, "a:dev": 50.0 + a / 1000} for a in (1000, 3000)]
    md, deltas = ablations.table(recs)
    assert "| v, 1,000 anchors | 0.5 | 1.0 | 1 | 100 | 5 | +1.0 | +1.0 |" in md
    assert [d["a:dev"] for _, d in deltas] == [1.0, 3.0]  # not averaged together as seeds


def test_type_head_on_unit_vectors_leaves_the_norm_alone(parts):
    """type_input='unit': the type loss's gradient on each vector is orthogonal to it (no push on
    its norm); 'raw' pushes the norm. The choice travels with the export."""
    for type_input, radial in [("unit", False), ("raw", True)]:
        model = make_model(parts)
        model.type_input = type_input
        batch = model.batcher(["river bank", "new york times", "red car"])
        emb, logits = model(**batch)
        emb = emb.detach().requires_grad_(True)
        typed = torch.nn.functional.normalize(emb, dim=-1) if type_input == "unit" else emb
        assert torch.allclose(logits, model.type_head(typed), atol=1e-6)  # what forward() feeds the head
        loss = torch.nn.functional.cross_entropy(model.type_head(typed), torch.tensor([0, 1, 2]))
        (grad,) = torch.autograd.grad(loss, emb)
        along = (grad * emb).sum(-1).abs() / emb.norm(dim=-1)
        assert bool((along > 1e-4).any()) == radial, type_input
    with pytest.raises(ValueError, match="type_input must be one of"):
        make_model(parts).__class__(model.backbone, model.char_encoder, 8, type_input="normalized")


def test_type_input_travels_with_the_export(parts, tmp_path):
    model = make_model(parts)
    model.type_input = "unit"
    loaded = load_pearl(export_pearl(model, tmp_path / "m"), device="cpu")
    assert loaded.type_input == "unit"


def test_report_writes_the_chart_and_publishes_the_ablations_artifact(tmp_path):
    import json

    from prefect.testing.utilities import prefect_test_harness

    from tests.test_retrain_flow import latest_artifact

    base = {"variant": "backbone", "seed": None, "bc5cdr:dev": 58.0, "heldout_alias_top1": 66.0}
    recs = [base, {"variant": "type_1", "seed": 0, "average_weight": 0.5, "char_scale": 1.0, "steps": 100,
                   "anchors_per_s": 20.0, "bc5cdr:dev": 67.5, "heldout_alias_top1": 67.0}]
    setup = {"anchors": 6400, "batch_size": 64, "training_set": "t", "train_phrases": 10, "char_encoder": "c",
             "probe_seeds": [0], "heldout_pairs": 3, "heldout_titles": 9, "machine": "test"}
    results = tmp_path / "ablations.json"
    results.write_text(json.dumps({"setup": setup, "records": recs}))
    with prefect_test_harness(server_startup_timeout=120):  # a busy machine starts it slowly
        ablations.report(results, artifact=True)
        art = latest_artifact("ablations")
    assert results.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
    assert "| type_1 | 0.5 | 1.0 | 1 | 100 | 20 | +9.5 | +1.0 | +9.5 |" in art.data
    assert "data:image/png;base64," in art.data


def test_corpus_size_subsets_nest_keep_order_and_refuse_impossible_sizes():
    examples = [T.Example(f"phrase {i}", 0) for i in range(200)]
    small, large = ablations.subset(examples, 50), ablations.subset(examples, 120)
    assert len(small) == 50 and len(large) == 120
    assert {e.phrase for e in small} < {e.phrase for e in large}          # nested: a curve adds phrases
    order = {e.phrase: i for i, e in enumerate(examples)}
    assert [order[e.phrase] for e in large] == sorted(order[e.phrase] for e in large)
    assert [e.phrase for e in ablations.subset(examples, 200)] == [e.phrase for e in examples]
    for bad in (0, 201):
        with pytest.raises(Exception, match="train-phrases"):
            ablations.subset(examples, bad)
