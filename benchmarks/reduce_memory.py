"""Memory of the phrase reducer as the corpus grows: fixed bucket counts against buckets sized to the input.

    python benchmarks/reduce_memory.py /work/corpus14 --replicates 1,4,16 \\
        --out benchmarks/results/reduce_memory_cpu_sample_ovos.json

The real `phrase_occurrences` of a built corpus are copied `r` times with distinct phrase keys
(as a corpus `r` times larger with the same phrase statistics would give) and written as the
mining map writes them (one part per chunk of rows, bucketed by phrase key). Then one reducer,
`tasks.phrases.write_bucket` on its largest bucket, runs in a fresh process, and its peak RSS
(Linux VmHWM, reset after the imports), seconds and rows are recorded, for:
  fixed   8 buckets (the flow's count before it sized them);
  sized   `storage.buckets.buckets_for(rows, 1, --rows-per-bucket)`: the flow's rule, with the
          target scaled down (default: the rows a bucket of this corpus holds at 8 buckets) so
          that the copies here cross it as enwiki crosses the flow's 2M;
and the read of one bucket (`Dataset.read_bucket`) from the same rows written unsorted (parts
without row groups per bucket, as before) against bucket-sorted parts.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from storage.buckets import bucket_of, buckets_for  # noqa: E402
from storage.datasets import Dataset, latest_version  # noqa: E402
from storage.schemas import PHRASE_OCCURRENCES, PHRASES  # noqa: E402

PARAMS = {"min_freq": 2, "examples_per_phrase": 3}


def replicate(base: pa.Table, copies: int, n_buckets: int) -> pa.Table:
    """``copies`` of the occurrences with distinct keys (``key#i``), bucketed for ``n_buckets``."""
    tables = []
    for i in range(copies):
        keys = pc.binary_join_element_wise(base["phrase_key"], pa.scalar(f"#{i}"), "") if i else base["phrase_key"]
        t = base.set_column(base.schema.get_field_index("phrase_key"), "phrase_key", keys)
        tables.append(t)
    t = pa.concat_tables(tables)
    buckets = pa.array([bucket_of(k, n_buckets) for k in t["phrase_key"].to_pylist()], pa.int32())
    return t.set_column(t.schema.get_field_index("bucket"), "bucket", buckets)


def write(root: str, name: str, table: pa.Table, rows_per_part: int, bucket_sorted: bool = True) -> Dataset:
    """Parts as the mining map writes them; ``bucket_sorted`` False: as it wrote them before."""
    d = Dataset(root, name, "v", PHRASE_OCCURRENCES)
    # without the schema's bucket column a part is written whole, one row group: the layout before
    writer = d if bucket_sorted else Dataset(root, name, "v", PHRASE_OCCURRENCES.remove_metadata())
    for i, start in enumerate(range(0, table.num_rows, rows_per_part)):
        writer.write_part(i, table.slice(start, rows_per_part))
    d.commit(code_version="bench", params={}, inputs={})
    return d


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    raise KeyError(field)


def _reduce(root: str, name: str, bucket: int, queue) -> None:
    from tasks.phrases import write_bucket

    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to now: imports not counted
    base = _status_mb("VmRSS")
    occ = Dataset(root, name, "v", PHRASE_OCCURRENCES)
    t0 = time.perf_counter()
    stats = write_bucket(occ, bucket, Dataset(root, f"{name}_phrases", "v", PHRASES), PARAMS)
    queue.put({"seconds": round(time.perf_counter() - t0, 2), "occurrences_in": stats["occurrences_in"],
               "distinct_phrases": stats["distinct_phrases"],
               "peak_rss_mb": _status_mb("VmHWM"), "rss_before_mb": base})


def reduce_in_fresh_process(root: str, name: str, bucket: int) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_reduce, args=(root, name, bucket, queue))
    p.start()
    out = queue.get()
    p.join()
    return out


def read_seconds(d: Dataset, bucket: int, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        d.read_bucket(bucket)
        best = min(best, time.perf_counter() - t0)
    return round(best, 3)


def main(storage_root: str, replicates: str = typer.Option("1,4,16"),
         rows_per_bucket: int = typer.Option(0, help="the sized rule's target (0: this corpus's rows / 8)"),
         rows_per_part: int = typer.Option(17_000, help="rows per map part (~ one mining chunk of 2,000 sentences)"),
         out: Path = typer.Option(None)) -> None:
    occ = Dataset(storage_root, "phrase_occurrences", latest_version(storage_root, "phrase_occurrences"),
                  PHRASE_OCCURRENCES)
    base = occ.read()
    target = rows_per_bucket or -(-base.num_rows // 8)
    runs = []
    with tempfile.TemporaryDirectory(prefix="reduce-mem-") as root:
        for r in map(int, replicates.split(",")):
            rows = base.num_rows * r
            for mode, n in (("fixed", 8), ("sized", buckets_for(rows, 1, target))):
                name = f"occ_{mode}_{r}"
                table = replicate(base, r, n)
                d = write(root, name, table, rows_per_part)
                sizes = np.bincount(table["bucket"].to_numpy(), minlength=n)
                largest = int(sizes.argmax())
                rec = {"replicate": r, "mode": mode, "buckets": n, "rows": rows, "bucket": largest,
                       "bucket_rows": int(sizes[largest]),
                       **reduce_in_fresh_process(root, name, largest),
                       "read_bucket_s_sorted": read_seconds(d, largest)}
                if mode == "sized" and r == max(map(int, replicates.split(","))):
                    unsorted = write(root, f"{name}_unsorted", table, rows_per_part, bucket_sorted=False)
                    rec["read_bucket_s_unsorted"] = read_seconds(unsorted, largest)
                print(json.dumps(rec), flush=True)
                runs.append(rec)
    result = {"storage_root": storage_root, "phrase_occurrences": occ.version, "base_rows": base.num_rows,
              "rows_per_bucket_target": target, "rows_per_part": rows_per_part,
              "machine": f"{platform.machine()}, {mp.cpu_count()} cores", "runs": runs}
    if out:
        out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    typer.run(main)
