"""The stable protocol (scores over draws, per-item scores) and paired differences with intervals,
on a tiny random-weight model and on constructed vectors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pearl_model.evaluation import run_benchmark
from pearl_model.evaluation.clustering import evaluate_clustering
from pearl_model.evaluation.common import CachedEncoder
from pearl_model.evaluation.paraphrase import split_indices, train_probe, train_probes
from pearl_model.evaluation.stable import (
    average_difference,
    item_score,
    paired_difference,
)
from tests.conftest import tiny_benchmark

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

WORDS = ["the", "new", "york", "times", "big", "cat", "lion", "dog", "of", "a", "red", "car", "river", "bank"]


@pytest.fixture(scope="module")
def tiny():
    """A random-weight BERT with a word-level vocabulary behind the library's PhraseEncoder."""
    import tempfile

    from pearl_model.inference.backbones import BackboneInfo
    from pearl_model.inference.encoder import PhraseEncoder

    d = tempfile.mkdtemp(prefix="tiny-stable-")
    with open(f"{d}/vocab.txt", "w") as fh:
        fh.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS))
    tok = transformers.BertTokenizerFast(f"{d}/vocab.txt")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    model = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    return PhraseEncoder(model, tok, BackboneInfo("tiny", d, "local", query_prefix="", max_length=16, dim=16),
                         backend="torch")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """A benchmark folder in the authors' formats, small enough for a unit test."""
    root = tmp_path_factory.mktemp("bench")
    tiny_benchmark(root, WORDS)
    rng = np.random.default_rng(1)
    (root / "ppdb").mkdir()
    pairs = [[" ".join(rng.choice(WORDS, 2)), " ".join(rng.choice(WORDS, 2)), rng.choice(["pos", "neg"]), None]
             for _ in range(120)]
    (root / "ppdb" / "ppdb.json").write_text(json.dumps(pairs))
    return root


def entity_file(path, spans: list[tuple[str, str]]) -> None:
    """A CoNLL-style JSON-lines file with one sentence per (name, type)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "test.json").write_text("".join(
        json.dumps({"sentences": [name.split()], "ner": [[[0, len(name.split()) - 1, typ]]]}) + "\n"
        for name, typ in spans))


class Lookup:
    def __init__(self, table: dict[str, list[float]], name: str = "lookup"):
        self.table, self.name = {k: np.asarray(v, dtype=np.float32) for k, v in table.items()}, name

    def encode(self, phrases, normalize=True, batch_size=None):
        v = np.stack([self.table[p] for p in phrases])
        return v / np.linalg.norm(v, axis=1, keepdims=True) if normalize else v


def test_a_deterministic_dataset_is_one_draw_with_its_items(tiny, bench):
    rows = run_benchmark(tiny, bench, datasets=["turney", "bird"])
    turney, bird = rows
    for r in (turney, bird):
        assert r["std"] == 0.0 and r["n"] == 1 and r["draws"] is None and r["paper_value"] == r["value"]
    assert len(turney["items"]) == 40 and turney["value"] == pytest.approx(item_score(turney["items"]))
    assert len(bird["items"]) == len(bird["item_targets"]) == 60
    assert bird["value"] == pytest.approx(item_score(bird["items"], bird["item_targets"]))


def test_a_random_dataset_is_scored_over_its_draws(tiny, bench):
    rows = run_benchmark(tiny, bench, datasets=["ppdb"], seeds=(0, 1, 2))
    acc, converged = rows[0], rows[1]
    assert (acc["metric"], converged["metric"]) == ("accuracy", "accuracy_converged")
    assert acc["n"] == 3 and len(acc["draws"]) == 3 and acc["paper_value"] == acc["draws"][0]
    assert acc["value"] == pytest.approx(np.mean(acc["draws"])) and acc["std"] == pytest.approx(np.std(acc["draws"], ddof=1))


def test_clustering_two_tied_layouts_spread_over_random_states(tmp_path):
    """Four corners of a square, two types split left/right: cutting the square left/right or
    top/bottom has exactly the same inertia, so each random state keeps whichever its
    initialisations find first, and the NMI is 100 or 0 from one state to another."""
    corners = {"a b": [0, 0], "c d": [0, 1], "e f": [1, 0], "g h": [1, 1]}
    spans = [(n, "Chemical" if v[0] == 0 else "Disease") for n, v in corners.items() for _ in range(5)]
    entity_file(tmp_path / "bc5cdr", spans)
    nmi = evaluate_clustering(Lookup(corners), tmp_path, "bc5cdr", draws=10)[0]
    assert nmi["metric"] == "nmi" and nmi["n"] == 10
    assert nmi["std"] > 0 and set(np.round(nmi["draws"], 6)) == {0.0, 100.0}

    separated = {"a b": [0, 0], "c d": [0, 0.1], "e f": [1, 0], "g h": [1, 0.1]}  # one layout: no spread
    assert evaluate_clustering(Lookup(separated), tmp_path, "bc5cdr", draws=10)[0]["std"] == 0


def test_subsampled_clustering_varies_the_entities_the_same_way_for_every_encoder(tmp_path):
    """Two well separated types and one Disease name that sits among the Chemicals: on the whole
    set every random state finds the same layout (no spread); over random halves the NMI moves with
    how many of that name's occurrences a half holds, and two encoders see the same halves."""
    table = {**{f"c {i}": [0, i / 100] for i in range(6)}, **{f"d {i}": [1, i / 100] for i in range(6)}, "x y": [0, 0.5]}
    spans = [(n, "Chemical" if n.startswith("c") else "Disease") for n in table for _ in range(4)]
    entity_file(tmp_path / "bc5cdr", spans)
    whole = evaluate_clustering(Lookup(table), tmp_path, "bc5cdr", draws=8)[0]
    halves = evaluate_clustering(Lookup(table), tmp_path, "bc5cdr", draws=8, subsample=0.5)[0]
    assert whole["std"] == 0 and halves["std"] > 0 and halves["n"] == 8
    again = evaluate_clustering(Lookup(dict(table), name="other"), tmp_path, "bc5cdr", draws=8, subsample=0.5)[0]
    assert again["draws"] == halves["draws"]  # the same occurrences in each draw: a paired change of 0
    with pytest.raises(ValueError, match="subsample"):
        evaluate_clustering(Lookup(table), tmp_path, "bc5cdr", subsample=1.0)


def test_a_model_against_itself_differs_by_nothing_and_the_interval_holds_0(tiny, bench):
    rows = run_benchmark(tiny, bench, datasets=["ppdb", "turney", "bird"], seeds=(0, 1))
    again = run_benchmark(tiny, bench, datasets=["ppdb", "turney", "bird"], seeds=(0, 1))
    diffs = [paired_difference(a, b) for a, b in zip(rows, again) if a["metric"] in ("accuracy", "pearson")]
    assert [d.paired_by for d in diffs] == ["draws", "items", "items"]
    for d in diffs:
        assert d.low <= 0 <= d.high and d.change == 0 and not d.seen and d.verdict == "no difference"
    avg = average_difference(diffs)
    assert avg.low <= 0 <= avg.high and "no difference" in avg.text()


def test_a_visible_difference_has_an_interval_without_0():
    good = {"dataset": "yago-10kdict", "metric": "top1_accuracy", "items": [1.0] * 180 + [0.0] * 20}
    bad = {"dataset": "yago-10kdict", "metric": "top1_accuracy", "items": [1.0] * 100 + [0.0] * 100}
    d = paired_difference(good, bad)
    assert d.change == pytest.approx(40.0) and d.low > 0 and d.seen and d.verdict == "better"
    assert paired_difference(bad, good).verdict == "worse" and d.n == 200
    drawn_a = {"dataset": "bc5cdr", "metric": "nmi", "draws": [60.0, 61.0, 59.5, 60.5]}
    drawn_b = {"dataset": "bc5cdr", "metric": "nmi", "draws": [50.0, 52.0, 49.0, 50.5]}
    d = paired_difference(drawn_a, drawn_b)
    assert d.paired_by == "draws" and d.low > 0 and d.change == pytest.approx(9.875)
    with pytest.raises(ValueError, match="same draws"):
        paired_difference(drawn_a, {**drawn_b, "draws": [50.0, 52.0]})


def test_fewer_than_two_draws_for_a_random_dataset_is_refused(tiny, bench):
    with pytest.raises(ValueError, match="at least 2 distinct probe seeds"):
        run_benchmark(tiny, bench, datasets=["ppdb"], seeds=(0,))
    with pytest.raises(ValueError, match="at least 2 draws"):
        run_benchmark(tiny, bench, datasets=["conll2003"], draws=1)
    assert run_benchmark(tiny, bench, datasets=["turney"], seeds=(0,), draws=1)  # deterministic: no draws needed


def test_one_run_gives_every_seed_and_patience_as_separate_runs_would():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6)).astype(np.float32)
    y = (x[:, 0] + rng.normal(scale=2.0, size=400) > 0).astype(np.int64)
    split = split_indices(len(y), 0)
    runs = train_probes(x, y, split, seeds=[1, 2, 3], patiences=(2, 6), max_epochs=40)
    for seed, both in zip([1, 2, 3], runs):
        for p in (2, 6):
            alone = train_probe(x, y, split, seed=seed, patience=p, max_epochs=40)
            assert (both[p].epochs, both[p].best_epoch) == (alone.epochs, alone.best_epoch)
            assert both[p].test_accuracy == pytest.approx(alone.test_accuracy)
        assert both[2].epochs <= both[6].epochs
    assert len({r[6].test_accuracy for r in runs}) > 1  # the seeds are different runs


def test_every_string_is_encoded_once_per_model_across_datasets_and_views():
    seen = []

    class Counting(Lookup):
        def encode(self, phrases, normalize=True, batch_size=None):
            seen.extend(phrases)
            return super().encode(phrases, normalize, batch_size)

    enc = CachedEncoder(Counting({"a": [1, 0], "b": [0, 2]}))
    raw = enc.encode(["a", "b", "a"], normalize=False)
    unit = enc.encode(["b", "a"])
    assert sorted(seen) == ["a", "b"]
    assert np.allclose(raw[1], [0, 2]) and np.allclose(unit, [[0, 1], [1, 0]])


def test_the_evaluate_stage_refuses_too_few_draws_before_loading_any_model(tmp_path, bench):
    from tasks.evaluation import plan_results

    with pytest.raises(ValueError, match="ppdb, ppdb_filtered score a random probe"):
        plan_results(str(tmp_path), ["m"], str(bench), None, [0], 10)
    with pytest.raises(ValueError, match="conll2003, bc5cdr score a random KMeans draw"):
        plan_results(str(tmp_path), ["m"], str(bench), None, [0, 1], 1)
    assert plan_results(str(tmp_path), ["m"], str(bench), ["turney"], [0], 1).name == "eval_results"


@pytest.mark.parametrize("shape", [(3, 24, 16), (2, 16, 1)])
def test_the_probes_adam_rounds_as_the_per_tensor_loop(shape):
    """The probe's optimizer is a speed-up only: its steps are bit for bit those of torch's per-tensor
    Adam loop, so the probes' early stops and scores stay as they were."""
    from pearl_model.evaluation.paraphrase import probe_optimizer

    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(shape, generator=gen), torch.randn(shape[0], 1, shape[2], generator=gen)]
    grads = [[torch.randn(p.shape, generator=gen) * 10 ** -k for p in start] for k in range(40)]
    kept = []
    for make in (lambda ps: probe_optimizer(ps, 1e-2), lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=False)):
        params = [p.clone().requires_grad_() for p in start]
        opt = make(params)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.clone()
            opt.step()
        kept.append([p.detach() for p in params])
    assert not torch.equal(kept[0][0], start[0])  # the steps moved the weights
    assert all(torch.equal(a, b) for a, b in zip(*kept))
