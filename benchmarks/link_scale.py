"""The `link` flow at scale: synthetic tables of names, a measured run, and a projection to 100M x 100M.

    python benchmarks/link_scale.py make --corpus-root data --rows 1000000 --out /tmp/linkscale/1m
    python benchmarks/link_scale.py run --tables /tmp/linkscale/200k --tables /tmp/linkscale/1m \\
        --partition-rows 100000 --workers 2 --out benchmarks/results/link_scale_1m_cpu.json
    python benchmarks/link_scale.py project benchmarks/results/link_scale_1m_cpu.json --cores 256
    python benchmarks/link_scale.py search --index-vectors part-00000.faiss --query-vectors part-00001.faiss

`make`: a right and a left table of N names each (column `title`, Parquet), from the built corpus's
phrases and page titles (the storage root's latest `phrases` and `pages`, or `raw_pages`). The right
table holds the distinct names, shuffled, then variants of them with 1 to `max_edits` character
edits (insert, delete, substitute, transpose) until it has N rows. A `match_fraction` of the left
rows are edited copies of a right row (`source_row` names it: the ground truth); the rest are edited
corpus names with no known match (`source_row` null, not scored). Seeded (`random.Random(seed)`).
With a corpus of B names, the right table holds ~N/B variants of each, so top-1 gets harder with N:
a copy may land nearer another variant of its name than its source.

`run`: per table pair, the real `link` flow (one Prefect API, `benchmarks/prefect_api.py`, a fresh Dask LocalCluster of
`workers` single-threaded processes given as `dask_address`, the model loaded on every worker before
the flow: `load_s`), in this process. Per stage (the flow's task runs, read back from the API): wall
seconds (first start to last end) and task seconds (the sum of the task runs' run time: core-seconds,
one thread per worker); peak RSS of every worker process and of this process over the run (sampled
with psutil, `PeakPerProcess`); right names encoded and indexed per task second; top-1 accuracy on the edited copies (the
rank-1 right name is the source row's name); the index kind and, when approximate, its recall.

`search`: one partition pair's search, which query-left repeats for every (left, right) pair: the
flow's HNSW index built on one right partition's vectors, queried by another's, timed on one thread
per efSearch beside exact inner product, with its recall against exact.

`project`: see `project_link`: the encoding is linear in names, the index build in right names, the
search in left names x index shards (each a shard of `index_rows` names), so a run's costs split into
seconds per name encoded, per right name indexed and per (left name, shard) searched; and memory per
worker must not grow with the tables once the right side fills a shard (`memory_flat`).
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import random
import re
import string
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np
import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from phrase_mining import PeakPerProcess  # noqa: E402  (benchmarks/ is on sys.path)
from prefect_api import prefect_api  # noqa: E402
from stage_rates import MB, call_and_drop, machine, markdown  # noqa: E402

app = typer.Typer(add_completion=False)
EDITS = ("insert", "delete", "substitute", "transpose")
ALPHABET = string.ascii_lowercase
TARGET = 100_000_000  # names on each side of the projection
FLAT = 1.25  # peak RSS per worker at the largest run / at the smallest, same partition_rows: "flat" below


# --- synthetic tables --------------------------------------------------------------------------
def edit_name(name: str, rng: random.Random, edits: int) -> str:
    """``name`` after ``edits`` random character edits: its Damerau-Levenshtein distance to ``name``
    is at most ``edits`` (a transposition of equal letters changes nothing)."""
    chars = list(name)
    for _ in range(edits):
        ops = EDITS if len(chars) >= 2 else ("insert", "substitute") if chars else ("insert",)
        op = rng.choice(ops)
        if op == "insert":
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(ALPHABET))
        elif op == "delete":
            del chars[rng.randrange(len(chars))]
        elif op == "substitute":
            i = rng.randrange(len(chars))
            chars[i] = rng.choice([c for c in ALPHABET if c != chars[i]])
        else:
            i = rng.randrange(len(chars) - 1)
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
    return "".join(chars)


def make_names(base: list[str], rows: int, match_fraction: float = 0.5, max_edits: int = 2,
               seed: int = 0) -> dict:
    """The right and left names (`make`): right, left, source (the right row a left row is an edited
    copy of, else None) and edits (how many edits made each left name)."""
    rng = random.Random(seed)
    base = sorted(set(base))
    rng.shuffle(base)
    right = base[:rows] + [edit_name(base[i % len(base)], rng, rng.randint(1, max_edits))
                           for i in range(len(base), rows)]
    copies = set(rng.sample(range(rows), round(rows * match_fraction)))
    left, source, edits = [], [], []
    for j in range(rows):
        k = rng.randint(1, max_edits)
        src = rng.randrange(rows) if j in copies else None
        left.append(edit_name(right[src] if src is not None else rng.choice(base), rng, k))
        source.append(src)
        edits.append(k)
    return {"right": right, "left": left, "source": source, "edits": edits}


def corpus_names(root: str) -> tuple[list[str], dict]:
    """The latest phrases and page titles (`pages`, else `raw_pages`) under a storage root."""
    from storage import schemas
    from storage.datasets import Dataset, latest_version

    names, used = [], {}
    for name, column in (("phrases", "phrase"), ("pages", "title"), ("raw_pages", "title")):
        version = latest_version(root, name)
        if version is None or (name == "raw_pages" and "pages" in used):
            continue
        col = Dataset(root, name, version, schemas.ALL[name]).read(columns=[column])[column].drop_null()
        names += [n for n in col.to_pylist() if n.strip()]
        used[name] = version
    if not names:
        raise typer.BadParameter(f"{root}: no phrases, pages or raw_pages dataset")
    return names, used


@app.command()
def make(corpus_root: str = typer.Option("data", help="a storage root holding a built corpus"),
         rows: int = typer.Option(..., help="names on each side"),
         out: Path = typer.Option(..., help="a directory: left.parquet, right.parquet, tables.json"),
         match_fraction: float = typer.Option(0.5, help="share of left rows that are edited copies of right rows"),
         max_edits: int = typer.Option(2, help="character edits per name: 1 to this"),
         seed: int = typer.Option(0)) -> None:
    """Write synthetic left/right tables from the corpus's phrases and titles, with ground truth."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base, versions = corpus_names(corpus_root)
    t = time.perf_counter()
    made = make_names(base, rows, match_fraction, max_edits, seed)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"title": made["right"]}), out / "right.parquet")
    pq.write_table(pa.table({"title": made["left"], "source_row": pa.array(made["source"], pa.int64()),
                             "edits": pa.array(made["edits"], pa.int8())}), out / "left.parquet")
    meta = {"rows": rows, "corpus_root": corpus_root, "corpus_versions": versions, "corpus_names": len(set(base)),
            "match_fraction": match_fraction, "max_edits": max_edits, "seed": seed,
            "copies": sum(s is not None for s in made["source"]), "seconds": round(time.perf_counter() - t, 1)}
    (out / "tables.json").write_text(json.dumps(meta, indent=1))
    typer.echo(json.dumps(meta))


# --- a measured run ------------------------------------------------------------------------------
def stage_of(task_run_name: str) -> str:
    """The flow's task behind a task run's name: "query-left-3" -> "query-left", "plan-link-ad8" -> "plan-link",
    "split-right" -> "split-side"."""
    if task_run_name in ("split-left", "split-right"):
        return "split-side"
    return re.sub(r"-(\d+|[0-9a-f]{3})$", "", task_run_name)  # a part's number, or Prefect's suffix


def task_run_stages(since: dt.datetime) -> dict:
    """Per stage, from the task runs that started after ``since``: tasks, wall seconds (first start to
    last end) and task seconds (the sum of their run times)."""
    from prefect import get_client

    runs, page = [], 200  # the API's largest page
    with get_client(sync_client=True) as client:
        while batch := client.read_task_runs(limit=page, offset=len(runs)):
            runs += batch
    runs = [r for r in runs if r.start_time and r.start_time >= since]
    stages: dict = {}
    for r in sorted(runs, key=lambda r: r.start_time):
        s = stages.setdefault(stage_of(r.name), {"tasks": 0, "start": r.start_time, "end": r.end_time, "task_s": 0.0})
        s["tasks"] += 1
        s["end"] = max(s["end"], r.end_time) if s["end"] and r.end_time else s["end"] or r.end_time
        s["task_s"] += r.total_run_time.total_seconds()
    return {k: {"tasks": s["tasks"], "wall_s": round((s["end"] - s["start"]).total_seconds(), 3),
                "task_s": round(s["task_s"], 3)} for k, s in stages.items()}


def top1_accuracy(matches, left, right) -> dict:
    """Share of the left rows that are edited copies whose rank-1 right name is their source's name."""
    import pyarrow.compute as pc

    best = matches.filter(pc.equal(matches["rank"], 1))
    found = dict(zip(best["left_row"].to_pylist(), best["right"].to_pylist()))
    source = left["source_row"].to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(~np.isnan(source.astype(float)))
    names = right["title"].to_pylist()
    correct = sum(found.get(int(j)) == names[int(source[j])] for j in rows)
    return {"copies": len(rows), "correct": int(correct), "top1": round(correct / len(rows), 4) if len(rows) else None}


def run_one(tables: Path, workers: int, partition_rows: int, model: str, index_kind: str,
            exact_limit: Optional[int], batch_size: Optional[int], interval: float, search: dict) -> dict:
    import pyarrow.parquet as pq
    from distributed import Client, LocalCluster

    from flows.link import link
    from pearl_model.inference.backbones import DEFAULT_BACKBONE
    from storage import schemas
    from storage.datasets import Dataset
    from storage.registry import resolve_model
    from tasks.matches import load_model

    left, right = tables / "left.parquet", tables / "right.parquet"
    with tempfile.TemporaryDirectory(prefix="link_scale_") as root, \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                         dashboard_address=None) as cluster, Client(cluster) as client:
        pids = sorted(client.run(os.getpid).values())
        t = time.perf_counter()
        client.run(call_and_drop, load_model, resolve_model(model, root, DEFAULT_BACKBONE).spec)
        load_s = time.perf_counter() - t
        since = dt.datetime.now(dt.timezone.utc)
        with PeakPerProcess(interval) as mem:
            t = time.perf_counter()
            result = link(str(left), str(right), storage_root=root, model=model, partition_rows=partition_rows,
                          index_kind=index_kind, batch_size=batch_size, dask_address=cluster.scheduler_address,
                          **({"exact_limit": exact_limit} if exact_limit is not None else {}),
                          **{k: v for k, v in search.items() if v is not None})
            wall = time.perf_counter() - t
        matches = Dataset(root, result["dataset"], result["version"], schemas.MATCHES).read(
            columns=["left_row", "right", "rank"])
        manifest = Dataset(root, result["dataset"], result["version"], schemas.MATCHES).manifest()
    stages = task_run_stages(since)
    left_t, right_t = pq.read_table(left), pq.read_table(right)
    L, R = left_t.num_rows, right_t.num_rows
    # right names encoded and indexed, nothing else (encode-right: the flow encodes in its own tasks since
    # link_scale_1m_shards_cpu.json; index-right alone before)
    encode_s = stages.get("encode-right", {}).get("task_s", 0.0) + stages["index-right"]["task_s"]
    return {"tables": str(tables), "left_rows": L, "right_rows": R, "workers": workers, "partition_rows": partition_rows,
            "left_parts": manifest["stats"]["left_parts"], "right_parts": manifest["stats"]["right"]["parts"],
            "model": manifest["stats"]["model"], "index": result["index"], "recall": result["recall"],
            "ef_search": result["ef_search"], "index_stats": manifest["stats"]["index"],
            "index_rows": search.get("index_rows") or partition_rows,
            "load_s": round(load_s, 2), "wall_s": round(wall, 2), "stages": stages,
            "left_rows_per_s": round(L / wall, 1), "right_names_per_task_s": round(R / encode_s, 1) if encode_s else None,
            "peak_rss_mb_per_worker": [round(mem.peaks.get(p, 0) / MB, 1) for p in pids],
            "peak_rss_mb_flow": round(mem.peaks.get(os.getpid(), 0) / MB, 1),
            "accuracy": top1_accuracy(matches, left_t, right_t), "counts": result["counts"]}


# --- the projection ------------------------------------------------------------------------------
def _slope(a: float, b: float, xa: float, xb: float) -> float:
    """Marginal cost (b - a) / (xb - xa), 0 where the cost did not grow (noise on a flat step)."""
    return max((b - a) / (xb - xa), 0.0)


def project_link(runs: list[dict], cores: int, left: float = TARGET, right: float = TARGET,
                 partition_rows: Optional[int] = None) -> dict:
    """Hours of the `link` flow on ``left`` x ``right`` names on ``cores`` cores, with the largest
    run's ``partition_rows`` and ``index_rows`` (the runs fitted on are those of both).

    The cost model, in task seconds (core-seconds), from the smallest and the largest run:
      encode  encode-left and encode-right: ``enc`` s per name (the marginal cost in names encoded,
              so fixed costs drop out);
      index   index-right builds each shard from its vectors: ``build`` s per right name, at the
              largest run's shard size (HNSW's build grows a little faster than linearly: the
              largest run, whose right side fills a whole shard, prices a shard of ``index_rows``);
      query   query-left searches every shard for each left name: ``search`` s per (left name,
              shard), at the largest run's shard size and efSearch, merge and rescoring included;
      split   split-side streams both sides (two tasks, one per side): s per name (marginal);
      write   write-matches cuts and commits every left partition in one task: s per left row.
    Hours per stage: its core-seconds over min(cores, its tasks) (encode: both sides' partitions;
    index: the shards; query: the left partitions), summed over the stages: an upper bound, since
    the flow encodes the left side while the right side's shards are indexed.
    """
    def size(r: dict) -> int:
        return r["left_rows"] * r["right_rows"]

    p = partition_rows or max(runs, key=size)["partition_rows"]
    shard = max((r for r in runs if r["partition_rows"] == p), key=size).get("index_rows", p)
    mine = sorted((r for r in runs if r["partition_rows"] == p and r.get("index_rows", p) == shard),
                  key=size)
    if len(mine) < 2 or size(mine[0]) == size(mine[-1]):
        raise ValueError(f"the projection needs two runs of different sizes at partition_rows {p}, index_rows {shard}")
    a, b = mine[0], mine[-1]
    if any("encode-right" not in r["stages"] for r in (a, b)):
        raise ValueError("the runs predate the flow's encode tasks (matches-4): rerun them")

    def task_s(run: dict, *stages: str) -> float:
        return sum(run["stages"].get(stage, {}).get("task_s", 0.0) for stage in stages)

    def shards(run: dict) -> int:
        return math.ceil(run["right_parts"] / math.ceil(shard / p))

    enc = _slope(task_s(a, "encode-left", "encode-right"), task_s(b, "encode-left", "encode-right"),
                 a["left_rows"] + a["right_rows"], b["left_rows"] + b["right_rows"])
    build = task_s(b, "index-right") / b["right_rows"]
    search = task_s(b, "query-left") / (b["left_rows"] * shards(b))
    split = _slope(task_s(a, "split-side"), task_s(b, "split-side"), a["left_rows"] + a["right_rows"],
                   b["left_rows"] + b["right_rows"])
    write = _slope(task_s(a, "write-matches"), task_s(b, "write-matches"), a["left_rows"], b["left_rows"])
    lp, rp = math.ceil(left / p), math.ceil(right / p)
    target_shards = math.ceil(rp / math.ceil(shard / p))
    hours = {"split": split * max(left, right) / 3600, "encode": enc * (left + right) / min(cores, lp + rp) / 3600,
             "index": build * right / min(cores, target_shards) / 3600,
             "query": search * left * target_shards / min(cores, lp) / 3600, "write": write * left / 3600}
    from pearl_model.linking.index import EXACT_LIMIT, choose_kind

    return {"cores": cores, "left": left, "right": right, "partition_rows": p, "index_rows": shard,
            "left_parts": lp, "right_parts": rp, "shards": target_shards, "measured_shards": shards(b),
            "shard_filled": b["right_rows"] >= shard, "ef_search": b.get("ef_search"),
            "from": [a["left_rows"], b["left_rows"]], "index_measured": b["index"],
            "index_at_target": choose_kind(int(right), "auto", EXACT_LIMIT),
            "per_name_s": enc, "build_per_name_s": build, "search_per_query_shard_s": search,
            "split_per_name_s": split, "write_per_row_s": write,
            "hours": hours, "total_hours": sum(hours.values()), "load_s": b["load_s"],
            "memory": memory_flat(runs)}


def memory_flat(runs: list[dict]) -> list[dict]:
    """Per (partition_rows, index_rows): the largest peak RSS of a worker in the smallest and in the
    largest run, and whether it stayed flat (ratio under FLAT) while the tables grew. A worker holds
    one shard's index, so memory grows with the right side until it fills a shard: ``flat`` is None
    where the smaller run's right side did not (it is then no test of flatness)."""
    out = []
    for p, shard in sorted({(r["partition_rows"], r.get("index_rows", r["partition_rows"])) for r in runs}):
        mine = sorted((r for r in runs if r["partition_rows"] == p and r.get("index_rows", p) == shard),
                      key=lambda r: r["left_rows"] * r["right_rows"])
        a, b = mine[0], mine[-1]
        pa_, pb = max(a["peak_rss_mb_per_worker"]), max(b["peak_rss_mb_per_worker"])
        fills = a["right_rows"] >= shard
        out.append({"partition_rows": p, "index_rows": shard, "rows": [a["left_rows"], b["left_rows"]],
                    "peak_mb": [pa_, pb], "ratio": round(pb / pa_, 3) if pa_ else None,
                    "flat": bool(pa_) and pb / pa_ < FLAT if len(mine) > 1 and fills else None})
    return out


def projection_markdown(proj: dict) -> str:
    h = proj["hours"]
    rows = [[k, f"{v:.2f}"] for k, v in h.items()] + [["**total**", f"**{proj['total_hours']:.2f}**"]]
    mem = "; ".join(f"partition_rows {m['partition_rows']}, index_rows {m['index_rows']}: {m['peak_mb'][0]:,.0f} -> "
                    f"{m['peak_mb'][1]:,.0f} MB ({m['rows'][0]:,} -> {m['rows'][1]:,} rows; "
                    f"{'flat' if m['flat'] else 'GROWS' if m['flat'] is False else 'not compared: a shard not filled'})"
                    for m in proj["memory"])
    note = ("" if proj["index_measured"] == proj["index_at_target"] else
            f"\n\nThe runs used the {proj['index_measured']} index; `auto` would use {proj['index_at_target']} at "
            f"{proj['right']:,.0f} right names: rerun with --index-kind {proj['index_at_target']} for its costs.")
    return (markdown(rows, ["stage", f"hours, {proj['left']:,.0f} x {proj['right']:,.0f} on {proj['cores']} cores"])
            + f"\n\n{proj['per_name_s'] * 1e3:.3f} ms per name encoded, {proj['build_per_name_s'] * 1e3:.3f} ms per "
            f"right name indexed, {proj['search_per_query_shard_s'] * 1e3:.3f} ms per (left name, shard) searched "
            f"(index_rows {proj['index_rows']:,}: {proj['shards']:,} shards), fitted on {proj['from'][0]:,} and "
            f"{proj['from'][1]:,} rows.\n\nPeak RSS per worker: {mem}." + note)


def run_table(runs: list[dict]) -> str:
    rows = []
    for r in runs:
        st = r["stages"]
        rows.append([f"{r['left_rows']:,} x {r['right_rows']:,}", r["partition_rows"], r["workers"],
                     f"{r['left_parts']} x {r['right_parts']}", r["wall_s"],
                     *(st.get(s, {}).get("wall_s", "-") for s in ("split-side", "encode-right", "encode-left", "index-right",
                                                                   "query-left", "write-matches")),
                     r["right_names_per_task_s"], "/".join(f"{x:,.0f}" for x in r["peak_rss_mb_per_worker"]),
                     r["accuracy"]["top1"], r["index"]])
    return markdown(rows, ["size", "partition_rows", "workers", "partitions", "wall s", "split s", "encode right s",
                           "encode left s", "index s", "query s", "write s", "right names/task-s (index)", "peak RSS per worker MB", "top-1", "index"])


@app.command()
def run(tables: list[Path] = typer.Option(..., help="directories written by `make`, smallest first"),
        partition_rows: int = typer.Option(100_000), workers: int = typer.Option(2),
        model: str = typer.Option("current", help="as the flow's model (current: the E5 backbone on an empty root)"),
        index_kind: str = typer.Option("auto"), exact_limit: Optional[int] = typer.Option(None),
        index_rows: Optional[int] = typer.Option(None, help="right rows per index shard (the flow's index_rows)"),
        ef_search: Optional[int] = typer.Option(None, help="HNSW efSearch (the flow's ef_search; default 128)"),
        recall_target: Optional[float] = typer.Option(None, help="tune efSearch to this recall@k (the flow's "
                                                                 "recall_target; not with --ef-search)"),
        batch_size: Optional[int] = typer.Option(None), interval: float = typer.Option(0.1, help="seconds between RSS samples"),
        cores: int = typer.Option(256, help="cores of the projection printed at the end"),
        out: Path = typer.Option(Path("benchmarks/results/link_scale.json"))) -> None:
    """Run the link flow on each table pair, measured; write the results (and the projection)."""
    with prefect_api():  # one API for this process and the Dask workers it starts
        _run(tables, partition_rows, workers, model, index_kind, exact_limit, batch_size, interval, cores, out,
             {"index_rows": index_rows, "ef_search": ef_search, "recall_target": recall_target})


def _run(tables, partition_rows, workers, model, index_kind, exact_limit, batch_size, interval, cores, out,
         search) -> None:
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("distributed"):
            logging.getLogger(name).setLevel(logging.WARNING)
    from storage.datasets import git_commit

    results = {"setup": {"machine": machine(), "git_commit": git_commit(), "model": model, "workers": workers,
                         "partition_rows": partition_rows, "index_kind": index_kind, **search,
                         "command": " ".join(["python", "benchmarks/link_scale.py", *sys.argv[1:]]),
                         "tables": [json.loads((t / "tables.json").read_text()) for t in tables],
                         "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}, "runs": []}
    for t in tables:
        results["runs"].append(run_one(t, workers, partition_rows, model, index_kind, exact_limit, batch_size, interval,
                                       search))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=str))  # each run kept as it ends
        typer.echo(run_table(results["runs"][-1:]))
    if len(results["runs"]) > 1:
        results["projection"] = project_link(results["runs"], cores)
        typer.echo(projection_markdown(results["projection"]))
    out.write_text(json.dumps(results, indent=1, default=str))
    typer.echo(f"wrote {out}")


@app.command()
def project(results: list[Path] = typer.Argument(..., help="JSONs written by `run` (their runs pooled)"),
            cores: int = typer.Option(256), left: float = typer.Option(TARGET), right: float = typer.Option(TARGET),
            partition_rows: Optional[int] = typer.Option(None, help="the runs to fit on (default: the largest run's)"),
            save: Optional[Path] = typer.Option(None, help="also write the projection as JSON here")) -> None:
    """Print the projection to LEFT x RIGHT names on CORES cores, and whether memory stayed flat."""
    runs = [r for path in results for r in json.loads(path.read_text())["runs"]]
    proj = project_link(runs, cores, left, right, partition_rows)
    typer.echo(run_table(runs) + "\n\n" + projection_markdown(proj))
    if save:
        save.parent.mkdir(parents=True, exist_ok=True)
        save.write_text(json.dumps(proj, indent=1))


# --- one partition pair's search ------------------------------------------------------------------
def search_costs(base: np.ndarray, queries: np.ndarray, k: int, efs: list[int]) -> list[dict]:
    """The flow's HNSW index (pearl_model.linking.index) on ``base`` beside exact inner product: per
    efSearch the milliseconds per query of a top-``k`` search and its recall against exact (rank-1
    found; share of the exact top k found), with the seconds the HNSW index took to build."""
    from pearl_model.linking import index as vector_index

    t = time.perf_counter()
    hnsw = vector_index.build_index(base, "hnsw")
    build_s = round(time.perf_counter() - t, 1)
    exact = vector_index.build_index(base, "exact")
    t = time.perf_counter()
    _, truth = vector_index.search(exact, queries, k)
    rows = [{"base": len(base), "index": "exact", "ef_search": None, "build_s": None,
             "ms_per_query": round((time.perf_counter() - t) / len(queries) * 1e3, 4), "recall_at_1": 1.0,
             "recall_at_k": 1.0}]
    for ef in efs:
        vector_index.set_ef_search(hnsw, ef)
        t = time.perf_counter()
        _, found = vector_index.search(hnsw, queries, k)
        ms = (time.perf_counter() - t) / len(queries) * 1e3
        rows.append({"base": len(base), "index": "hnsw", "ef_search": ef, "build_s": build_s,
                     "ms_per_query": round(ms, 4), "recall_at_1": round(float(np.mean(found[:, 0] == truth[:, 0])), 4),
                     "recall_at_k": round(vector_index.recall(truth, found), 4)})
    return rows


def load_vectors(path: Path) -> np.ndarray:
    """Vectors from a .npy file, or those a saved FAISS index holds (the flow keeps its index shards as
    storage_root/link_work/<version>/index/part-N.faiss, the vectors inside)."""
    if path.suffix != ".faiss":
        return np.load(path)
    import faiss

    from pearl_model.linking.index import stored_vectors

    return stored_vectors(faiss.read_index(str(path)))


@app.command()
def search(index_vectors: list[Path] = typer.Option(..., help="right partitions' vectors (.npy, or the flow's index "
                                                              "shards: storage_root/link_work/<version>/index/"
                                                              "part-N.faiss), concatenated"),
           query_vectors: Path = typer.Option(..., help="another partition's vectors (.npy or .faiss): the queries"),
           sizes: str = typer.Option("", help="index the first N vectors, for each N (default: all)"),
           queries: int = typer.Option(5000), k: int = typer.Option(0, help="0: the flow's default candidates"),
           ef: str = typer.Option("32,64,128,256", help="efSearch values"), threads: int = typer.Option(1),
           out: Path = typer.Option(Path("benchmarks/results/link_search_cpu.json"))) -> None:
    """One partition pair's search, which query-left repeats for every pair: time and recall per
    efSearch, at one or more index sizes (what one larger index would cost instead of several).

    The vectors are the flow's own: the index-right tasks leave each right partition's index (its
    vectors inside) under the working directory until write-matches ends the run (copy them while
    the query stage runs)."""
    import faiss

    from pearl_model.linking import index as vector_index
    from pearl_model.linking.rescore import candidate_count

    faiss.omp_set_num_threads(threads)  # a worker's task: one thread
    base = np.concatenate([load_vectors(f) for f in index_vectors])
    q = load_vectors(query_vectors)[:queries]
    k = k or candidate_count(1)
    rows = [r for n in ([int(x) for x in sizes.split(",")] if sizes else [len(base)])
            for r in search_costs(base[:n], q, k, [int(e) for e in ef.split(",")])]
    result = {"setup": {"machine": machine(), "threads": threads, "queries": len(q), "k": k, "dim": base.shape[1],
                        "hnsw_neighbours": vector_index.HNSW_NEIGHBOURS,
                        "default_ef_search": vector_index.HNSW_EF_SEARCH,
                        "inputs": {"index": [str(f) for f in index_vectors], "queries": str(query_vectors)},
                        "command": " ".join(["python", "benchmarks/link_scale.py", *sys.argv[1:]])},
              "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    typer.echo(markdown([[f"{r['base']:,}", r["index"], r["ef_search"] or "-", r["build_s"] or "-", r["ms_per_query"],
                          r["recall_at_1"], r["recall_at_k"]] for r in rows],
                        ["index size", "index", "efSearch", "build s", "ms/query", "recall@1", f"recall@{k}"]))


if __name__ == "__main__":
    app()
