"""What the verified reader costs on the real read patterns (issue 64): a reducer reading its bucket's
row groups of every part, and a whole dataset read, each in a fresh process, with and without the
check (the path handed to pyarrow, as before the writers' records).

A whole-file digest would make a reducer read every part in full; `storage.verified.verified_once`
hashes a part the first time a process reads it and keeps the verdict while the file's size and
modification stamp stay the same, so a worker that reduces many buckets hashes each part once.

    python benchmarks/verified_reads.py [--parts 16] [--rows 200000] [--buckets 64]

Writes benchmarks/results/verified_reads.json (CPU seconds of each pattern in its own process, and
the ratio verified / unchecked)."""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def _build(root: str, parts: int, rows: int, buckets: int) -> None:
    import numpy as np
    import pyarrow as pa

    from storage.datasets import Dataset
    from storage.schemas import ALIAS_MENTIONS

    d = Dataset(root, "alias_mentions", "bench", ALIAS_MENTIONS)
    rng = np.random.default_rng(0)
    for i in range(parts):
        b = rng.integers(0, buckets, rows)
        d.write_part(i, pa.table({"bucket": pa.array(b, pa.int32()),
                                  "alias": pa.array([f"alias {x}" for x in rng.integers(0, 10**6, rows)]),
                                  "target": pa.array([f"Title {x}" for x in rng.integers(0, 10**5, rows)]),
                                  "source": pa.array(["anchor"] * rows), "count": pa.array(np.ones(rows, np.int64))}))
    d.commit(code_version="bench", params={}, inputs={})


def _measure(args: tuple) -> dict:
    """One pattern in this (fresh) process: CPU and wall seconds, rows read."""
    root, pattern, checked, buckets = args
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from storage.datasets import Dataset
    from storage.schemas import ALIAS_MENTIONS

    d = Dataset(root, "alias_mentions", "bench", ALIAS_MENTIONS)
    paths = [f"{d.path}/{p.file}" for p in d.parts()]

    def unchecked_bucket(b: int) -> pa.Table:  # the reducer's read before the writers' records
        pieces = []
        for path in paths:
            f = pq.ParquetFile(path)
            col = f.schema_arrow.get_field_index("bucket")
            groups = [g for g in range(f.metadata.num_row_groups)
                      if (s := f.metadata.row_group(g).column(col).statistics) is None or s.min <= b <= s.max]
            if groups:
                t = f.read_row_groups(groups)
                pieces.append(t.filter(pc.equal(t["bucket"], b)))
        return pa.concat_tables(pieces)

    cpu, wall, rows = time.process_time(), time.perf_counter(), 0
    if pattern == "reducer":
        for b in range(buckets):
            rows += (d.read_bucket(b) if checked else unchecked_bucket(b)).num_rows
    else:
        rows = (d.read() if checked else pq.read_table(paths)).num_rows
    return {"pattern": pattern, "checked": checked, "rows": rows,
            "cpu_s": round(time.process_time() - cpu, 3), "wall_s": round(time.perf_counter() - wall, 3)}


def main() -> None:
    from machine_info import machine

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", type=int, default=16)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--buckets", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "verified_reads.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        _build(root, a.parts, a.rows, a.buckets)
        size = sum(p.stat().st_size for p in Path(root).rglob("part-*.parquet"))
        ctx = mp.get_context("spawn")  # a fresh process per run: no verdict kept from another
        runs = []
        for _ in range(a.repeats):
            for pattern in ("reducer", "whole"):
                for checked in (False, True):
                    with ctx.Pool(1) as pool:
                        runs.append(pool.apply(_measure, ((root, pattern, checked, a.buckets),)))
    best = {}
    for r in runs:
        key = (r["pattern"], r["checked"])
        best[key] = min(best.get(key, float("inf")), r["cpu_s"])
    result = {
        "question": "what reading through the verified reader costs on a reducer's and a whole read's pattern",
        "command": f"python benchmarks/verified_reads.py --parts {a.parts} --rows {a.rows} --buckets {a.buckets}",
        "dataset": {"parts": a.parts, "rows_per_part": a.rows, "buckets": a.buckets, "bytes": size},
        "best_cpu_s": {f"{p}_{'verified' if c else 'unchecked'}": v for (p, c), v in sorted(best.items())},
        "ratio_verified_to_unchecked": {p: round(best[(p, True)] / best[(p, False)], 3) for p in ("reducer", "whole")},
        "runs": runs,
        "machine": machine(),
    }
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("dataset", "best_cpu_s", "ratio_verified_to_unchecked")}, indent=2))


if __name__ == "__main__":
    main()
