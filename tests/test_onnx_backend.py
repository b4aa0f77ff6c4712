"""pearl_model.inference.onnx_backend: ONNX Runtime gives PyTorch's vectors; graphs are cached, rebuilt when stale."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from pearl_model.inference.checksums import ChecksumError  # noqa: E402
from pearl_model.inference.export import export_pearl, load_pearl  # noqa: E402
from pearl_model.inference.onnx_backend import OnnxGraphError, resolve_backend  # noqa: E402
from tests.test_encoder import WORDS, tiny  # noqa: E402,F401  (fixture)
from tests.test_export import PHRASES, model, original, tok  # noqa: E402,F401  (fixtures)

SENTENCES = [" ".join(WORDS[i:i + k]) for k in (1, 3, 6) for i in range(0, len(WORDS) - k, 2)] + ["", "  "]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_backbone_onnx_gives_torchs_vectors_and_caches_its_graph(tiny):
    ref = tiny.encode(SENTENCES, batch_size=4, normalize=False, backend="torch")
    fast = tiny.encode(SENTENCES, batch_size=4, normalize=False, backend="onnx")
    np.testing.assert_allclose(fast, ref, atol=1e-4, rtol=1e-4)
    graph = tiny._runners["onnx"].dir
    meta = json.loads((graph / "graph.json").read_text())
    assert meta["inputs"] == ["input_ids", "attention_mask"] and (graph / "model.onnx").is_file()
    int8 = tiny.encode(SENTENCES, batch_size=4, normalize=False, backend="onnx-int8")
    assert cosines(int8, ref).mean() > 0.9 and not np.allclose(int8, ref, atol=1e-6)  # quantised, close
    assert tiny.encode(["a city"], backend="auto").shape == (1, 32)
    assert resolve_backend(None, "cuda") == "torch"


def test_auto_takes_openvino_bf16_on_a_bf16_cpu_else_onnx_else_torch(monkeypatch):
    import pearl_model.inference.onnx_backend as ob

    assert resolve_backend("auto", "cpu") == "onnx"  # the suite's pin (conftest)
    monkeypatch.setenv("PEARL_BACKEND", "openvino-int8")
    assert resolve_backend("auto", "cpu") == "openvino-int8" and resolve_backend("torch", "cpu") == "torch"
    monkeypatch.setenv("PEARL_BACKEND", "tensorrt")
    with pytest.raises(ValueError, match="PEARL_BACKEND must be one of"):
        resolve_backend("auto", "cpu")
    monkeypatch.delenv("PEARL_BACKEND")
    monkeypatch.setattr(ob, "cpu_runs_bf16", lambda: True)
    assert resolve_backend("auto", "cpu") == "openvino-bf16" and resolve_backend("auto", "cuda") == "torch"
    monkeypatch.setattr(ob, "cpu_runs_bf16", lambda: False)
    assert resolve_backend("auto", "cpu") == "onnx"
    monkeypatch.setattr(ob, "engine_available", lambda engine: False)
    assert resolve_backend("auto", "cpu") == "torch"


def test_pearl_model_onnx_gives_torchs_vectors_char_branch_included(model, tmp_path):
    path = export_pearl(model, tmp_path / "m")
    loaded = load_pearl(path, device="cpu")
    assert loaded.backend == "auto"
    ref = loaded.encode(PHRASES + [""], batch_size=3, normalize=False, backend="torch")
    fast = loaded.encode(PHRASES + [""], batch_size=3, normalize=False)
    np.testing.assert_allclose(fast, ref, atol=1e-4, rtol=1e-4)
    assert loaded._onnx_runners["onnx"].dir == path / "onnx"  # the graph the export ships
    char_part = slice(model.backbone_dim, None)
    assert np.abs(fast[:, char_part]).max() > 1e-3  # the character branch is in the graph


def as_before_checksums(path) -> None:
    """Make ``path`` an export as written before checksums: no listing, and none named."""
    (path / "checksums.sha256").unlink()
    config = json.loads((path / "pearl_model.json").read_text())
    del config["checksums"]
    (path / "pearl_model.json").write_text(json.dumps(config))


def test_corrupt_graph_names_its_file_and_stale_graph_is_rebuilt(model, tmp_path, monkeypatch):
    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "cache"))
    path = export_pearl(model, tmp_path / "m")
    graph = path / "onnx" / "model.onnx"
    good = graph.read_bytes()
    graph.write_bytes(b"not a graph")
    with pytest.raises(ChecksumError, match=r"onnx/model\.onnx: sha256 differs"):
        load_pearl(path, device="cpu")
    as_before_checksums(path)  # the check out of the way: the engine names the file
    with pytest.raises(OnnxGraphError, match=r"onnx/model\.onnx is not a usable ONNX graph"):
        load_pearl(path, device="cpu").encode(PHRASES)
    graph.write_bytes(good)
    loaded = load_pearl(path, device="cpu")
    loaded.encode(PHRASES, backend="onnx-int8")
    int8 = loaded._onnx_runners["onnx-int8"]
    assert int8.dir.parent == tmp_path / "cache" / "onnx" and int8.path.is_file()  # built in the cache

    changed = load_pearl(path, device="cpu")
    with torch.no_grad():
        changed.char_proj.weight.mul_(2.0)  # other weights than the shipped graph's
    v = changed.encode(PHRASES, normalize=False)
    np.testing.assert_allclose(v, changed.encode(PHRASES, normalize=False, backend="torch"), atol=1e-4, rtol=1e-4)
    rebuilt = changed._onnx_runners["onnx"].dir
    assert rebuilt not in (path / "onnx", int8.dir)  # a graph of its own weights, in the cache
    assert json.loads((rebuilt / "graph.json").read_text())["fingerprint"] != int8.fingerprint


def test_backend_names_are_checked(tiny):
    with pytest.raises(ValueError, match="backend must be one of"):
        tiny.encode(["a"], backend="tensorrt")
    with pytest.raises(TypeError, match="not a single string"):  # encode()'s own checks come first
        tiny.encode("a city", backend="onnx")


def test_onnx_session_takes_torchs_thread_count_not_every_core(tiny):
    # Dask's worker processes set OMP_NUM_THREADS=1 (torch follows it); ORT alone would start
    # one thread per core in each of them.
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        tiny._runners.pop("onnx", None)
        tiny.encode(["a city"], backend="onnx")
        assert tiny._runners["onnx"].session.get_session_options().intra_op_num_threads == 1
    finally:
        torch.set_num_threads(before)


def test_openvino_gives_torchs_vectors_from_the_same_cached_graph(model, tmp_path):
    pytest.importorskip("openvino")
    path = export_pearl(model, tmp_path / "m")
    loaded = load_pearl(path, device="cpu")
    ref = loaded.encode(PHRASES + [""], batch_size=3, normalize=False, backend="torch")
    f32 = loaded.encode(PHRASES + [""], batch_size=3, normalize=False, backend="openvino")
    np.testing.assert_allclose(f32, ref, atol=1e-4, rtol=1e-4)  # f32 precision asked for: exact
    assert sorted(p.name for p in (path / "onnx").glob("*.onnx")) == ["model.onnx"]  # no graph of its own
    bf16 = loaded.encode(PHRASES + [""], batch_size=3, normalize=False, backend="openvino-bf16")
    assert cosines(bf16, ref).min() > 0.9
    graph = path / "onnx" / "model.onnx"
    as_before_checksums(path)  # the check out of the way: the engine names the file
    graph.write_bytes(b"not a graph")
    json.loads((path / "onnx" / "graph.json").read_text())  # still current: the corrupt file is used
    with pytest.raises(OnnxGraphError, match=r"onnx/model\.onnx is not a usable graph for OpenVINO"):
        load_pearl(path, device="cpu").encode(PHRASES, backend="openvino")


def test_a_backend_whose_engine_is_missing_names_the_package(monkeypatch):
    import pearl_model.inference.onnx_backend as ob

    monkeypatch.setattr(ob, "engine_available", lambda engine: engine != "openvino")
    with pytest.raises(ImportError, match=r"pip install openvino=="):
        resolve_backend("openvino", "cpu")
    assert resolve_backend("onnx", "cpu") == "onnx"


def test_bf16_on_a_cpu_without_it_falls_back_to_fp32_openvino_with_one_warning(monkeypatch):
    import pearl_model.inference.onnx_backend as ob

    monkeypatch.setattr(ob, "engine_available", lambda engine: True)
    monkeypatch.setattr(ob, "cpu_runs_bf16", lambda: False)
    with pytest.warns(RuntimeWarning, match=r"openvino-bf16 needs .* using openvino \(fp32\)") as seen:
        assert resolve_backend("openvino-bf16", "cpu") == "openvino"
    assert len(seen) == 1 and "\n" not in str(seen[0].message)
    monkeypatch.setattr(ob, "cpu_runs_bf16", lambda: True)
    assert resolve_backend("openvino-bf16", "cpu") == "openvino-bf16"


def test_openvino_int8_is_calibrated_close_to_torch_and_cached_until_the_weights_change(model, tmp_path):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    from pearl_model.inference.onnx_backend import calibration_phrases

    path = export_pearl(model, tmp_path / "m")
    loaded = load_pearl(path, device="cpu")
    ref = loaded.encode(PHRASES, batch_size=3, normalize=False, backend="torch")
    q = loaded.encode(PHRASES, batch_size=3, normalize=False, backend="openvino-int8")
    assert cosines(q, ref).mean() > 0.9 and not np.allclose(q, ref, atol=1e-6)  # quantised, close
    ir = loaded._onnx_runners["openvino-int8"].path
    assert ir.parent != path / "onnx" and ir.is_file() and ir.with_suffix(".bin").is_file()  # in the cache
    stamp = ir.stat().st_mtime_ns
    load_pearl(path, device="cpu").encode(PHRASES, backend="openvino-int8")
    assert ir.stat().st_mtime_ns == stamp  # cached: not quantised again
    changed = load_pearl(path, device="cpu")
    with torch.no_grad():
        changed.char_proj.weight.mul_(2.0)
    changed.encode(PHRASES, backend="onnx")
    assert changed._onnx_runners["onnx"].dir != ir.parent  # other weights: never the old weights' graphs
    words = calibration_phrases(loaded.batcher.tokenizer, n=50)
    assert len(words) == 50 and words == calibration_phrases(loaded.batcher.tokenizer, n=50)  # seeded


def test_openvino_batches_started_side_by_side_come_back_in_order(model, tmp_path, monkeypatch):
    """OpenVINO runs two batches at once (`OnnxRunner.submit`): every batch's vectors land on its
    own phrases, also across several collections of pending batches."""
    pytest.importorskip("openvino")
    import pearl_model.inference.encoder as E

    monkeypatch.setattr(E, "GPU_FLUSH_BATCHES", 2)
    loaded = load_pearl(export_pearl(model, tmp_path / "m"), device="cpu")
    phrases = PHRASES * 3 + ["a city of york", "the river"]
    ref = loaded.encode(phrases, batch_size=1, normalize=False, backend="torch")
    got = loaded.encode(phrases, batch_size=1, normalize=False, backend="openvino")
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    runner = loaded._onnx_runners["openvino"]
    assert runner.session._done == {}  # every started batch was collected


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning is invisible on one core")
def test_openvino_leaves_its_threads_on_every_core(model, tmp_path):
    """OpenVINO pins its inference threads to the lowest cores by default: every Dask worker process
    (one thread each) then ran its encoder on core 0, and two workers were no faster than one. Watched
    in a process of its own, as a Dask worker is: threads other tests left in this one are not its."""
    import subprocess
    import sys

    pytest.importorskip("openvino")
    exported = export_pearl(model, tmp_path / "m")
    script = f"""
import glob, json, os, threading, time
import torch
torch.set_num_threads(1)  # a Dask worker's share: the LATENCY path
from pearl_model.inference.export import load_pearl
loaded = load_pearl({str(exported)!r}, device="cpu")
phrases = {PHRASES!r}
loaded.encode(phrases, backend="openvino")  # the graph built and compiled before the watch
seen, done = set(), threading.Event()

def watch():
    while not done.is_set():
        for status in glob.glob(f"/proc/{{os.getpid()}}/task/*/status"):
            try:
                text = open(status).read()
            except OSError:  # the thread ended between the listing and the read
                continue
            seen.update(line.split(":\t")[1].strip() for line in text.splitlines()
                        if line.startswith("Cpus_allowed_list"))
        time.sleep(0.002)

watcher = threading.Thread(target=watch)
watcher.start()
try:
    for _ in range(20):
        loaded.encode(phrases * 50, batch_size=4, backend="openvino")
finally:
    done.set()
    watcher.join()
print(json.dumps(sorted(seen)))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = set(json.loads(out.stdout.strip().splitlines()[-1]))
    allowed = os.sched_getaffinity(0)
    whole = f"{min(allowed)}-{max(allowed)}" if len(allowed) == max(allowed) - min(allowed) + 1 else None
    assert seen and (whole is None or seen == {whole}), seen


def test_auto_is_the_fastest_engine_that_passes_the_written_engine_bar(monkeypatch):
    """The CPU default is what the engine results say: of the engines that pass the bar on the
    stable protocol (benchmarks/benchmark_by_engine.py), the fastest on BIRD's phrases
    (benchmarks/encode_throughput.py --bird), on a CPU like the one measured (native bf16)."""
    import pearl_model.inference.onnx_backend as ob
    from pearl_model.inference.onnx_backend import BACKENDS

    results = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks", "results")
    with open(os.path.join(results, "engines_stable_cpu.json"), encoding="utf-8") as f:
        quality = json.load(f)
    with open(os.path.join(results, "encode_throughput_bird_cpu.json"), encoding="utf-8") as f:
        speed = json.load(f)["rows"]
    reference = quality["setup"]["reference"]
    passing = [e for e, r in quality["engines"].items() if e in BACKENDS and (e == reference or r["passes"])]
    assert reference in passing and len(quality["engines"]) > 2  # the reference and engines judged against it
    fastest = max(passing, key=lambda e: speed[f"encode(backend={e})"]["phrases_per_s"])
    monkeypatch.delenv("PEARL_BACKEND", raising=False)
    monkeypatch.setattr(ob, "engine_available", lambda engine: True)
    monkeypatch.setattr(ob, "cpu_runs_bf16", lambda: True)
    assert resolve_backend("auto", "cpu") == fastest


def quantised_matmuls(model) -> set[str]:
    """The MatMuls of an OpenVINO model whose activation input comes through a FakeQuantize (past
    the layout operations between them)."""
    found = set()
    for op in model.get_ops():
        if op.get_type_name() != "MatMul":
            continue
        for value in op.input_values():
            node = value.get_node()
            while node.get_type_name() in ("Reshape", "Transpose", "Convert"):
                node = node.input_value(0).get_node()
            if node.get_type_name() == "FakeQuantize" and node.input_value(0).get_node().get_type_name() != "Constant":
                found.add(op.get_friendly_name())
    return found


@pytest.mark.parametrize("keep", [(), ("attention",), ("ends",), ("scores", "ffn_down"), ("ffn_down@1-1", "attention@0-0")])
def test_an_int8_recipe_leaves_the_parts_it_keeps_unquantised(tiny, keep):
    """`Int8Recipe.keep_float`: the MatMuls of the kept parts run on float activations, every
    other MatMul on int8 ones (the tiny BERT has two layers: "ends" keeps both), but the product of
    the attention probabilities and V, which NNCF's transformer type leaves in float itself."""
    pytest.importorskip("nncf")
    ov = pytest.importorskip("openvino")
    import re

    from pearl_model.inference.onnx_backend import Int8Recipe, calibration_phrases, feature_batches, quantize_int8

    runner = tiny.exported_graph("onnx")
    batches = feature_batches(tiny.featurize, calibration_phrases(tiny.tokenizer, n=64), runner.input_names)
    matmuls = {op.get_friendly_name() for op in ov.Core().read_model(str(runner.dir / "model.onnx")).get_ops()
               if op.get_type_name() == "MatMul"}
    recipe = Int8Recipe(keep_float=keep)
    quantised = quantised_matmuls(quantize_int8(ov.Core().read_model(str(runner.dir / "model.onnx")), batches, recipe))
    kept = {m for m in matmuls if any(re.fullmatch(p, m) for p in recipe.ignored_patterns(matmuls))}
    by_nncf = {m for m in matmuls if m.endswith("/attention/self/MatMul_1")}
    assert len(matmuls) == 16 and len(by_nncf) == 2  # 2 layers x (Q, K, V, 2 scores, out, 2 FFN)
    assert quantised == matmuls - kept - by_nncf
    assert {"attention": len(kept) == 12, "ends": kept == matmuls, "scores": len(kept) == 6, (): not kept,
            "ffn_down@1-1": len(kept) == 7 and any("/layer.1/output/dense/" in m for m in kept)
            and not any("/layer.0/output/" in m or "/layer.1/attention/" in m for m in kept)}[keep[0] if keep else ()]
    for bad in ("embeddings", "ffn_down@1-0", "ends@0-1", "ffn_down@1"):
        with pytest.raises(ValueError, match="unknown keep_float parts"):
            Int8Recipe(keep_float=(bad,))


def test_word_calibration_takes_whole_words_of_any_vocabulary(tmp_path, monkeypatch):
    """quantization_recipes.py's "words" calibration: the entries the tokenizer keeps as whole words,
    whichever side it marks (WordPiece marks continuations, SentencePiece and byte-level BPE word
    starts)."""
    import importlib

    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders

    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))
    recipes = importlib.import_module("quantization_recipes")
    whole_words, word_phrases = recipes.whole_words, recipes.word_phrases

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "river", "bank",
                                                   "run", "##ning", "##ers", "ban", "##k", "a"]))
    wordpiece = transformers.BertTokenizerFast(str(tmp_path / "vocab.txt"))
    assert whole_words(wordpiece) == ["ban", "bank", "river", "run"]  # "##ning", "a" (too short) left out
    spm = Tokenizer(models.Unigram([("<unk>", 0.0), ("▁river", -1.0), ("▁bank", -1.0), ("ning", -2.0),
                                    ("▁run", -1.5), ("ers", -2.0), ("▁", -3.0)], unk_id=0))
    spm.pre_tokenizer, spm.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    sentencepiece = transformers.PreTrainedTokenizerFast(tokenizer_object=spm, unk_token="<unk>")
    assert whole_words(sentencepiece) == ["bank", "river", "run"]  # "ning", "ers": pieces
    phrases = word_phrases(sentencepiece, n=40)
    assert {w for p in phrases for w in p.split()} == {"bank", "river", "run"}
    assert phrases == word_phrases(sentencepiece, n=40) != word_phrases(sentencepiece, n=40, seed=1)


def test_the_int8_graph_is_named_by_its_recipe_and_calibration():
    """A changed recipe or calibration is a graph of another name: a cached graph of the old one
    is never served for the new."""
    from pearl_model.inference.onnx_backend import _FILES, CALIBRATION_VERSION, OPENVINO_INT8, Int8Recipe

    keys = {Int8Recipe().key(1), Int8Recipe().key(2), Int8Recipe(keep_float=("ffn_down",)).key(2),
            Int8Recipe(smooth_quant=0.5).key(2), Int8Recipe(preset="performance").key(2)}
    assert len(keys) == 5 and Int8Recipe(keep_float=("ends", "scores")).key(2) == \
        Int8Recipe(keep_float=("scores", "ends")).key(2)
    assert _FILES["openvino-int8"] == f"model_int8_{OPENVINO_INT8.key(CALIBRATION_VERSION)}_ov.xml"
