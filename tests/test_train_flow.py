"""The `train` flow on a tiny corpus: real Prefect (test harness), real Dask for the evaluation,
a tiny random BERT as the backbone, a hand-made training set with its manifests."""
from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pearl_model.training import selection  # noqa: E402
from pearl_model.evaluation import data  # noqa: E402
from pearl_model.training.config import TrainConfig  # noqa: E402
from storage.datasets import Dataset  # noqa: E402
from storage.schemas import ALIASES, AUGMENTATIONS, HELDOUT_ALIASES, TRAINING_SET, WORD_VECTORS  # noqa: E402

BENCH = data.default_benchmark_dir()
WORDS = sorted(set(("the new york times post review bank river city red car green house big small old paper news "
                    "blue sky north south east west lake road street market cat lion dog bird fish tree stone "
                    "water fire light dark music art game team club school church bridge tower island").split()))


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-backbone")
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
                                           + list("abcdefghijklmnopqrstuvwxyz")))
    transformers.BertTokenizerFast(str(d / "vocab.txt")).save_pretrained(d)
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(WORDS) + 31, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    transformers.BertModel(cfg, add_pooling_layer=False).save_pretrained(d)
    (d / "pearl_backbone.json").write_text(json.dumps({"pooling": "mean", "query_prefix": "",
                                                       "add_pooling_layer": False}))
    return str(d)


def tiny_training(backbone: str) -> dict:
    """retrain's `training` for a tiny backbone: two CPU steps, one character epoch, no dev selection."""
    return {"backbone": backbone, "max_steps": 2, "batch_size": 4, "char_epochs": 1, "char_max_words": 0,
            "char_proj_dim": 4, "select_every": 0, "device": "cpu"}


def tiny_corpus(root: str) -> str:
    """word_vectors -> augmentations (manifest only) -> training_set, linked as build-corpus links them."""
    rng = np.random.default_rng(0)
    wv = Dataset(root, "word_vectors", "wv1", WORD_VECTORS)
    vecs = rng.normal(size=(len(WORDS), 8)).astype(np.float32)
    wv.write_part(0, pa.table({"word": WORDS, "count": list(range(len(WORDS), 0, -1)),
                               "vector": [v.tolist() for v in vecs]}))
    wv.commit(code_version="t", params={}, inputs={})
    aug = Dataset(root, "augmentations", "aug1", AUGMENTATIONS)
    aug.commit(code_version="t", params={}, inputs={"word_vectors": wv.version})
    r = random.Random(0)
    rows = []
    for i in range(60):
        phrase = " ".join(r.sample(WORDS, r.randint(1, 3)))
        rows.append({"phrase": phrase, "phrase_key": f"{phrase}#{i}", "label": "NP-OTHER", "label_id": i % 7,
                     "frequency": 2, "positives": [{"kind": "wordnet", "text": phrase + " news"}] if i % 2 else [],
                     "negatives": [" ".join(r.sample(WORDS, 2))], "split": "validation" if i % 10 == 0 else "train"})
    heldout = tiny_heldout(root)
    ts = Dataset(root, "training_set", "ts1", TRAINING_SET)
    ts.write_part(0, pa.Table.from_pylist(rows, schema=TRAINING_SET))
    ts.commit(code_version="t", params={}, inputs={"augmentations": aug.version, "heldout_aliases": heldout.version})
    return ts.version


HELD = [("the times", "new york times"), ("river side", "river bank"), ("glass house", "green house")]


def tiny_heldout(root: str) -> Dataset:
    """aliases (3 held-out articles + 5 others) -> heldout_aliases, linked as build-corpus links them."""
    others = ["north lake", "old market", "blue sky", "big city", "red car"]
    rows = [{"alias": a, "title": t, "source": "redirect", "count": 2} for a, t in HELD]
    rows += [{"alias": f"the {t}", "title": t, "source": "anchor", "count": 2} for t in others]
    aliases = Dataset(root, "aliases", "al1", ALIASES)
    aliases.write_part(0, pa.Table.from_pylist(rows, schema=ALIASES))
    aliases.commit(code_version="t", params={}, inputs={})
    heldout = Dataset(root, "heldout_aliases", "ho1", HELDOUT_ALIASES)
    heldout.write_part(0, pa.Table.from_pylist(rows[:3], schema=HELDOUT_ALIASES))
    heldout.commit(code_version="t", params={}, inputs={"aliases": aliases.version})
    return heldout


@pytest.mark.parametrize("worst_by_check, tried, seed, step", [
    ([-2, -1, -3, -4, 0.5, -1, 9, 9, 9], 2, 1, 6),   # the second seed has a check at or above the backbone: stop
    ([-2, -1, -3, -4, -5, -6, -3, -0.5, -2], 3, 2, 6),  # none has: all three tried, the best kept one exported
])
def test_restarts_try_seeds_until_one_beats_the_backbone_on_dev(tiny_backbone, tmp_path, monkeypatch,
                                                                worst_by_check, tried, seed, step):
    import tasks.training as tt
    from storage.files import FileSet
    from tasks.char_encoder import run_char_encoder

    root = str(tmp_path / "store")
    tiny_corpus(root)
    ts = tt.resolve_training_set(root)
    char = run_char_encoder(root, {"target": "word_vectors", "epochs": 2, "max_words": 0, "seed": 0},
                            tt.word_vectors_of(ts))["fileset"]
    checks, seeds_seen = iter(worst_by_check), []

    def select(model):  # the dev checks' verdicts, in the order the runs reach them (3 per run of 7 steps)
        seeds_seen.append(float(model.char_proj.weight.detach().sum()))
        worst = next(checks)
        return {"dev_heldout_alias_top1": 50.0 + worst, "select_worst": worst, "select_mean": worst}

    monkeypatch.setattr(selection, "dev_selection", lambda *a, **k: (select, {"heldout_alias_top1": 50.0}))
    cfg = TrainConfig(char_proj_dim=4, batch_size=8, epochs=1, lr=1e-3, average_weight=0.5, seed=0,
                      checkpoint_every=0, select_every=3, restarts=3, device="cpu")
    out = tt.plan_model(ts, char, tiny_backbone, cfg)
    man = tt.train_model(ts, char, out, tiny_backbone, cfg)
    stats = man["stats"]
    assert stats["restarts_tried"] == tried and stats["selected_seed"] == seed and stats["selected_step"] == step
    assert stats["select_worst"] == max(worst_by_check[:3 * tried])
    log = tt.training_log(FileSet(root, "models", out.version))
    assert [r["seed"] for r in log["restarts"]] == list(range(tried))
    assert len(set(seeds_seen[::3])) == tried  # each run started from its own seed's new layers
    assert not any((tmp_path / "store" / "checkpoints").glob(f"{out.version}*"))  # every run's removed


@pytest.mark.skipif(BENCH is None, reason="PEARL benchmark files not beside the checkout")
def test_train_flow_trains_exports_evaluates_and_reuses(tiny_backbone, tmp_path, dev_bench):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.testing.utilities import prefect_test_harness

    from flows.train import train
    from pearl_model.inference.export import load_pearl
    from storage.files import FileSet

    root = str(tmp_path / "store")
    tiny_corpus(root)
    kw = dict(storage_root=root, backbone=tiny_backbone, char_epochs=2, char_max_words=0,
              training={"char_proj_dim": 4, "batch_size": 8, "epochs": 1, "lr": 1e-3, "checkpoint_every": 3,
                        "device": "cpu"},
              benchmark_datasets=["turney", "bird"], benchmark_dir=str(dev_bench), eval_seeds=[0], dask_workers=1)
    with prefect_test_harness():
        out = train(**kw)
        version = out["model"]["version"]
        model = FileSet(root, "models", version)
        man = model.manifest()
        assert man["inputs"]["training_set"] == "ts1"
        assert man["stats"]["steps"] == 7 and man["stats"]["train_phrases"] == 54  # batch 8: 6 full + one of 6
        assert man["stats"]["validation_phrases"] == 6 and "val_loss" in man["stats"]
        assert man["stats"]["positives_read"] == 30 and man["stats"]["negatives_read"] == 60  # all kept
        assert man["stats"]["positives_dropped_blank_or_same"] == 0
        assert not (tmp_path / "store" / "checkpoints" / version).exists()  # removed once the model is stored
        log = json.loads((tmp_path / "store" / "models" / version / "training_log.json").read_text())
        assert [r["step"] for r in log["history"]][-1] == 7
        assert all(np.isfinite(r["loss"]) for r in log["history"])
        assert [v["step"] for v in log["validation"]] == [0, 7]  # before training, after the epoch
        # select_every (50 by default) > the 7 steps: one dev check, at the end, which is the export
        assert [r["step"] for r in log["selection"]] == [7] and man["stats"]["selected_step"] == 7
        assert "dev_bc5cdr:dev" in man["stats"] and "select_worst" in man["stats"]
        # the held-out aliases, scored among their 3 titles + 5 distractors at both points and exported
        assert all(0 <= v["val_alias_top1"] <= v["val_alias_mrr"] <= 1 for v in log["validation"])
        assert man["stats"]["alias_holdout_pairs"] == 3 and man["stats"]["alias_holdout_titles"] == 8
        assert man["stats"]["val_alias_top1_before"] == log["validation"][0]["val_alias_top1"]
        assert man["stats"]["val_alias_mrr"] == log["validation"][-1]["val_alias_mrr"]
        assert 1 / 8 <= man["stats"]["alias_mrr_exported"] <= 1

        pearl = load_pearl(model.local_copy())
        v = pearl.encode(["red car", "new york times"])
        assert v.shape == (2, 16 + 4) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)

        datasets = [line["dataset"] for line in out["comparison"]]
        assert datasets == ["turney", "bird", "average"]
        avg = out["comparison"][-1]
        assert avg["change"] == pytest.approx(avg["trained"] - avg["backbone"], abs=0.11)

        async def keys():
            async with get_client() as client:
                arts = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[
                    "training-curves", "training-summary", "model", "model-vs-backbone", "char-encoder-metrics",
                    "benchmark-scores"])))
                return {a.key for a in arts}

        assert asyncio.run(keys()) == {"training-curves", "training-summary", "model", "model-vs-backbone",
                                       "char-encoder-metrics", "benchmark-scores"}

        # nothing changed: nothing is trained again
        again = train(**{**kw, "evaluate_model": False})
        assert again["model"]["version"] == version
        assert model.manifest()["created_at"] == man["created_at"]


def test_retrieval_task_caps_pairs_and_titles_and_drops_aliases_that_are_titles(tmp_path):
    from tasks.training import heldout_of, retrieval_task, resolve_training_set

    root = str(tmp_path / "store")
    tiny_corpus(root)
    heldout = heldout_of(resolve_training_set(root, "ts1"))
    full = retrieval_task(heldout, 2000, 10_000)
    assert sorted(zip(full.aliases, (full.titles[g] for g in full.gold))) == sorted(HELD)
    assert len(full.titles) == 8 and set(t for _, t in HELD) <= set(full.titles)
    assert retrieval_task(heldout, 2000, 10_000) == full  # hash-chosen: the same every time
    small = retrieval_task(heldout, 2, 4)
    assert len(small.aliases) == 2 and len(small.titles) == 4
    assert set(small.aliases) <= {a for a, _ in HELD} and [small.titles[g] for g in small.gold] == [
        t for a in small.aliases for aa, t in HELD if aa == a]
    assert retrieval_task(heldout, 0, 10) is None
    # an alias spelt like another candidate's title cannot be scored fairly: left out
    clash = Dataset(root, "heldout_aliases", "ho2", HELDOUT_ALIASES)
    clash.write_part(0, pa.Table.from_pylist([{"alias": "Blue Sky", "title": "river bank", "source": "anchor",
                                               "count": 1}, *[{"alias": a, "title": t, "source": "redirect",
                                                               "count": 1} for a, t in HELD[:1]]],
                                             schema=HELDOUT_ALIASES))
    clash.commit(code_version="t", params={}, inputs={"aliases": "al1"})
    assert retrieval_task(clash, 10, 10).aliases == ("the times",)


def test_ablation_parameters_that_cannot_work_are_refused_before_training(tmp_path):
    from prefect.testing.utilities import prefect_test_harness

    from flows.train import train

    ok = TrainConfig(type_loss_weight=0, average_weight=1.0, positive_kinds=["alias"])
    assert ok.type_loss_weight == 0 and ok.positive_kinds == ("alias",)
    for bad, name in [({"average_weight": 1.5}, "average_weight"), ({"average_weight": -0.1}, "average_weight"),
                      ({"type_loss_weight": -1}, "type_loss_weight"), ({"positive_kinds": []}, "positive_kinds"),
                      ({"char_scale": 0}, "char_scale"), ({"char_scale": [0.5, -1]}, "char_scale"),
                      ({"char_scale": []}, "char_scale"), ({"restarts": 0}, "restarts"),
                      ({"restarts": 2, "select_every": 0}, "restarts"), ({"batch_size": 1}, "batch_size"),
                      ({"distill_target": "layouts"}, "distill_target"), ({"epoch": 2}, "epoch")]:
        with pytest.raises(ValueError, match=name):
            TrainConfig(**bad)
    with prefect_test_harness():  # the flow refuses them on its parameters, before any task runs
        for bad, name in [({"training": {"average_weight": 1.5}}, "average_weight"),
                          ({"training": {"type_loss_weight": -0.5}}, "type_loss_weight"),
                          ({"training": {"positive_kinds": []}}, "positive_kinds"),
                          ({"training": {"char_scale": [0.5, 0.0]}}, "char_scale"),
                          ({"alias_holdout_pairs": -1}, "alias_holdout_pairs")]:
            with pytest.raises(Exception, match=name):
                train(storage_root=str(tmp_path / "empty"), evaluate_model=False, **bad)


def test_train_flow_without_a_training_set_says_what_to_run(tmp_path):
    from prefect.testing.utilities import prefect_test_harness

    from flows.train import train
    from tasks.training import TrainingSetMissing

    with prefect_test_harness():
        with pytest.raises(TrainingSetMissing, match="build-corpus"):
            train(storage_root=str(tmp_path / "empty"), evaluate_model=False)


def test_training_curves_show_the_held_out_aliases():
    from tasks.training import alias_lines, curve_pngs, curves_markdown, selection_lines

    hist = [{"step": s, "loss": 2.0, "infonce": 1.5, "type_ce": 0.5, "lr": 1e-3, "anchors_per_s": 9.0} for s in (1, 2)]
    val = [{"step": 0, "epoch": -1, "val_loss": 2.5, "val_alias_top1": 0.25, "val_alias_mrr": 0.5},
           {"step": 2, "epoch": 0, "val_loss": 2.0, "val_alias_top1": 0.5, "val_alias_mrr": 0.625}]
    md = alias_lines(val, {"alias_holdout_pairs": 4, "alias_holdout_titles": 9, "alias_top1_exported": 0.75,
                           "alias_mrr_exported": 0.8})
    assert "(4 aliases among 9 titles)" in md
    assert "| step 0 (before training) | 0.250 | 0.500 |" in md and "| exported (averaged) | 0.750 | 0.800 |" in md
    assert alias_lines([{"step": 0, "val_loss": 1.0}], {}) == ""
    sel = [{"step": s, "dev_bc5cdr:dev": v, "dev_bc5cdr:dev/l2": 1.0, "dev_heldout_alias_top1": 66.0,
            "dev_heldout_alias_mrr": 70.0, "select_worst": w, "select_mean": 1.0, "char_scale": c,
            "scores_by_scale": {}, "select_changes": {"bc5cdr:dev": ch, "heldout_alias_top1": [0.0, -1.0, 1.0]}}
           for s, v, w, c, ch in ((25, 45.0, -13.0, 0.5, [-13.0, -15.0, -11.0]), (50, 66.0, 0.5, 0.25, [0.5, -0.5, 1.5]))]
    table = selection_lines(sel, {"selected_step": 50})
    # the table narrow enough to show whole; the changes the intervals see listed below it
    assert "| step | char scale | bc5cdr:dev | heldout_alias_top1 | worst change | mean change | kept |" in table
    assert "| 25 | 0.5 | 45.0 | 66.0 | -13.0 | +1.0 |  |" in table
    assert "| 50 | 0.25 | 66.0 | 66.0 | +0.5 | +1.0 | **kept** |" in table
    assert "- step 25: bc5cdr:dev -13.0 [-15.0, -11.0]\n- step 50: no difference on any dev signal" in table
    assert selection_lines([], {}) == ""
    with_backbone = selection_lines(sel, {"selected_step": 50}, {"bc5cdr:dev": 58.2, "heldout_alias_top1": 66.6})
    assert "| backbone |  | 58.2 | 66.6 |  |  |  |\n| 25 |" in with_backbone
    # one figure per curve, each about the width of the UI's page (four in one strip were unreadable)
    figures = curve_pngs(hist, val)
    assert [t for t, _ in figures] == ["training loss", "held-out aliases -> titles", "learning rate", "throughput"]
    for _, png in figures:
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") <= 1000  # the PNG's width
    assert curves_markdown(hist, val).count("data:image/png;base64,") == 4



@pytest.mark.parametrize("with_benchmark", [False, True])
def test_a_selecting_run_exports_the_checkpoint_chosen_on_dev_data(tiny_backbone, tmp_path, with_benchmark,
                                                                   dev_bench):
    from storage.files import FileSet
    from tasks.char_encoder import run_char_encoder
    from tasks.training import plan_model, resolve_training_set, train_model, training_log, word_vectors_of

    if with_benchmark and BENCH is None:
        pytest.skip("PEARL benchmark files not beside the checkout")
    root = str(tmp_path / "store")
    tiny_corpus(root)
    ts = resolve_training_set(root)
    char = run_char_encoder(root, {"target": "word_vectors", "epochs": 2, "max_words": 0, "seed": 0},
                            word_vectors_of(ts))["fileset"]
    cfg = TrainConfig(char_proj_dim=4, batch_size=8, epochs=1, lr=1e-3, seed=0,
                      checkpoint_every=0, select_every=3, device="cpu",
                      # without the benchmark, the selection also chooses the character part's scale, and
                      # the averaging weight among candidates
                      average_weight=0.5 if with_benchmark else [0.5, 0.25],
                      char_scale=1.0 if with_benchmark else [0.5, 2.0])
    out = plan_model(ts, char, tiny_backbone, cfg)
    bench = str(dev_bench) if with_benchmark else str(tmp_path / "no-benchmark")
    man = train_model(ts, char, out, tiny_backbone, cfg, benchmark_dir=bench)
    log = training_log(FileSet(root, "models", out.version))
    steps = [r["step"] for r in log["selection"]]
    assert steps == [3, 6, 7]  # every 3 steps and the last (7)
    best = max(log["selection"], key=lambda r: (r["select_worst"], r["select_mean"], -r["step"]))
    assert man["stats"]["selected_step"] == best["step"]
    assert "heldout_alias_top1" in log["selection_baseline"]  # the backbone's scores, the bar
    assert man["stats"]["backbone_dev_scores"] == "computed"  # and kept under the root for the next run
    assert man["stats"]["select_worst"] == best["select_worst"]
    expected = {"dev_heldout_alias_top1"} | ({"dev_conll2003:dev", "dev_bc5cdr:dev", "dev_ppdb_filtered:validation"}
                                             if with_benchmark else set())
    assert expected <= {k for k in best if k.startswith("dev_")}
    if not with_benchmark:  # on the held-out aliases alone
        assert not any(k.startswith(("dev_conll", "dev_bc5", "dev_ppdb")) for k in best)
        assert all(set(r["scores_by_scale"]) == {"0.5", "2.0"} for r in log["selection"])
        assert best["dev_heldout_alias_top1"] == best["scores_by_scale"][str(best["char_scale"])]["heldout_alias_top1"]
        exported = FileSet(root, "models", out.version)
        with exported.fs.open(f"{exported.path}/pearl_model.json") as fh:
            config = json.load(fh)
        assert config["char_scale"] == best["char_scale"] == man["stats"]["char_scale"]
        tried = man["stats"]["average_weights_tried"]
        assert tried["0.5"] == [best["select_worst"], best["select_mean"]]  # the checks' weight: the kept record
        if best["select_worst"] < 0:  # the next candidate was scored at the same checkpoint
            assert set(tried) == {"0.5", "0.25"}
            winner = max(tried, key=lambda w: (tried[w][0], tried[w][1], w == "0.5"))
        else:
            assert set(tried) == {"0.5"}
            winner = "0.5"
        assert config["average_weight"] == man["stats"]["average_weight"] == float(winner)
    else:
        assert "scores_by_scale" not in best and man["stats"]["char_scale"] == 1.0
        assert man["stats"]["average_weight"] == 0.5 and "average_weights_tried" not in man["stats"]


def test_the_train_result_is_stored_as_json_and_retrain_reads_it_as_json(tiny_backbone, tmp_path, monkeypatch):
    """retrain reads a train run's result from result storage (train/pearl-gpu runs elsewhere): stored as
    JSON, read with json.loads; a stored record that names a pickle is refused, never unpickled."""
    import base64
    import pickle
    from pathlib import Path

    import prefect.deployments
    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    from flows.train import train
    from tasks.training import train_on_deployment_task

    root = str(tmp_path / "store")
    tiny_corpus(root)
    with prefect_test_harness():
        state = train(storage_root=root, backbone=tiny_backbone, char_epochs=1, char_max_words=0,
                      training={"char_proj_dim": 4, "batch_size": 8, "epochs": 1, "checkpoint_every": 0,
                                "select_every": 0, "device": "cpu"},
                      alias_holdout_pairs=0, evaluate_model=False, return_state=True)
        returned = state.result()
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(state.state_details.flow_run_id)
        stored = Path(run.state.data.storage_key)
        assert json.loads(stored.read_bytes()) == returned  # the file is the result, as plain JSON
        assert returned["model"]["version"] and returned["model"]["summary"]["steps"] == 7

        monkeypatch.setattr(prefect.deployments, "run_deployment", lambda *a, **k: run)  # as train/pearl-gpu ran it
        assert train_on_deployment_task("train/pearl-gpu", {}, 60) == returned

        class Payload:  # what a pickle could run on load
            def __reduce__(self):
                return (Path.write_text, (tmp_path / "pwned", "ran"))

        stored.write_text(json.dumps({"metadata": {"serializer": {"type": "pickle"}, "storage_key": str(stored)},
                                      "result": base64.b64encode(pickle.dumps(Payload())).decode()}))
        with pytest.raises(Exception, match="not a train flow's result"):
            train_on_deployment_task("train/pearl-gpu", {}, 60)
    assert not (tmp_path / "pwned").exists()


def test_two_runs_of_one_model_version_keep_their_own_checkpoints(tmp_path):
    """train/pearl and train/pearl-gpu training one version at once get a checkpoint directory each;
    a run that died leaves its directory to the next run of the version, which resumes from it."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import tasks.training as tt
    from storage.files import FileSet

    out = FileSet(str(tmp_path / "store"), "models", "abcd1234")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time, tasks.training as tt\nfrom storage.files import FileSet\n"
         f"with tt.run_checkpoints(FileSet({out.root!r}, 'models', 'abcd1234')) as d:\n"
         "    (d / 'step-0000004').mkdir(); print(d, flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        held = Path(holder.stdout.readline().strip())
        assert held.parent == tt.checkpoint_dir(out) and (held / "step-0000004").is_dir()
        with tt.run_checkpoints(out) as mine, tt.run_checkpoints(out) as third:
            assert len({held, mine, third}) == 3  # live runs never share, however many
            (mine / "step-0000002").mkdir()
        holder.send_signal(signal.SIGKILL)  # killed: the kernel drops its lock
        holder.wait(30)
        with tt.run_checkpoints(out) as next_run:
            assert next_run == held  # of the interrupted runs, the one that got furthest (step 4)
    finally:
        holder.kill()
        holder.wait(30)


def test_the_backbones_dev_scores_are_kept_by_their_key_and_damage_is_computed_again(tiny_backbone, tmp_path,
                                                                                       monkeypatch, caplog, request):
    """A second run with the same inputs reads the backbone's dev rows instead of loading and encoding;
    another backbone file or other held-out aliases compute them again; a damaged entry is never served."""
    import logging
    import shutil

    import tasks.training as tt
    from pearl_model.evaluation.alias_retrieval import AliasRetrieval
    from pearl_model.inference.loading import model_digest

    root, loads, real = str(tmp_path / "store"), [], selection.load_encoder
    monkeypatch.setattr(selection, "load_encoder", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    cfg = TrainConfig(select_every=3, select_synonym_pairs=0, device="cpu")
    task = AliasRetrieval(("the times", "river side"), ("new york times", "river bank", "green house"), (0, 1))

    # Prefect's logging set-up (an earlier test's flow run) may have disabled this module's logger
    monkeypatch.setattr(tt.log, "disabled", False)
    caplog.set_level(logging.INFO, logger=tt.log.name)  # setLevel: the logger's cached verdicts cleared too
    tt.log.addHandler(caplog.handler)
    request.addfinalizer(lambda: tt.log.removeHandler(caplog.handler))

    def run(backbone=tiny_backbone, retrieval=task):
        keep, before = tt.KeptBaselines(root), len(loads)
        _, scores = selection.dev_selection(backbone, cfg, {}, retrieval, "cpu", str(tmp_path / "no-bench"), keep=keep)
        return keep.outcome, len(loads) - before, scores

    outcome, loaded, first = run()
    assert (outcome, loaded) == ("computed", 1) and "heldout_alias_top1" in first
    caplog.clear()
    assert run() == ("kept", 0, first)  # the backbone never loaded
    assert "not computed again" in caplog.text
    assert run(retrieval=AliasRetrieval(task.aliases, task.titles, (1, 1)))[:2] == ("computed", 1)

    copy = tmp_path / "backbone-copy"
    shutil.copytree(tiny_backbone, copy)
    assert run(str(copy))[:2] == ("computed", 1)  # another name
    assert run(str(copy))[:2] == ("kept", 0)
    with open(copy / "config.json", "a") as fh:  # same name, other files
        fh.write("\n")
    model_digest.cache_clear()
    assert run(str(copy))[:2] == ("computed", 1)

    entries = sorted((tmp_path / "store" / tt.BASELINES).glob(f"*/{tt.BASELINE_ROWS}"))
    assert len(entries) == 4
    for entry in entries:  # one entry's bytes edited, one's writer's record gone
        entry.write_bytes(entry.read_bytes().replace(b'"value": ', b'"value": 1', 1))
    (entries[0].parent / "_written" / f"{tt.BASELINE_ROWS}.json").unlink()
    caplog.clear()
    assert run() == ("recomputed", 1, first)
    assert "damaged, computed again" in caplog.text
    assert run() == ("kept", 0, first)


def test_the_baseline_key_names_every_input_of_the_backbones_dev_rows(tiny_backbone, tmp_path, monkeypatch):
    from pearl_model.evaluation.alias_retrieval import AliasRetrieval
    from pearl_model.evaluation.data import entities_file

    bench = tmp_path / "bench"
    for d, rel in selection.dev_files(selection.SELECT_DATASETS).items():
        (bench / rel).parent.mkdir(parents=True, exist_ok=True)
        (bench / rel).write_text(d)
    task = AliasRetrieval(("a",), ("b", "c"), (0,))
    syn = {"wordnet_synonym": AliasRetrieval(("x",), ("y", "z"), (1,))}

    def key(**kw):
        args = dict(backbone=tiny_backbone, cache_dir=None, device="cpu", benchmark_dir=bench,
                    datasets=selection.SELECT_DATASETS, retrieval=task, synonyms=syn) | kw
        return selection.baseline_key(**args)

    base = key()
    assert base == key()
    assert base["backbone_files"] and set(base["dev_files"]) == set(selection.SELECT_DATASETS)
    (bench / entities_file("bc5cdr", "dev")).write_text("edited")
    edited = key()
    assert edited["dev_files"]["bc5cdr"] != base["dev_files"]["bc5cdr"]
    others = [key(datasets=("conll2003",)), key(retrieval=None),
              key(synonyms={"wordnet_synonym": AliasRetrieval(("x",), ("y", "w"), (1,))}),  # `seen` drew others
              key(device="meta")]
    monkeypatch.setattr(selection, "scoring_code_digest", lambda: "other code")
    others.append(key())
    monkeypatch.undo()
    torch.set_default_dtype(torch.float64)
    try:
        others.append(key())
    finally:
        torch.set_default_dtype(torch.float32)
    assert all(k != edited for k in others)
    assert selection.baseline_key("intfloat/not-here", None, "cpu", bench, (), None, None) is None
