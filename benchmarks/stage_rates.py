"""Every stage of `build-corpus`, measured, and the full English Wikipedia build projected.

    python benchmarks/stage_rates.py run --max-pages 100 --workers 1,2 --replicate 1,4 \\
        --out benchmarks/results/stage_rates_sample.json
    python benchmarks/stage_rates.py run --source sample --source data/inputs/ovos_summaries.jsonl ...
    python benchmarks/stage_rates.py project benchmarks/results/stage_rates_sample.json [--cores 64]
    python benchmarks/stage_rates.py storage --max-pages 40 --workers 2 \
        --out benchmarks/results/stage_rates_storage.json   # local disk against S3 on loopback

`run`: for each (workers, replicate), in a process of its own, the corpus stages as the flow
runs them, on a fresh storage root and a fresh Dask LocalCluster of `workers` single-threaded
worker processes. Per stage: wall seconds, units (from the flow's result and the datasets'
manifests), units/s per core, CPU seconds, peak RSS of every worker process and of the flow's
process (sampled every 50 ms), bytes written; per step the same, and its number of tasks.

How a stage is run: the flow's own wiring, `corpus_wiring` (flows/build_corpus.py, which the
`corpus-stages` flow runs with Prefect's task runs), with the arguments `build_corpus` gives it
(its defaults and the overrides) and `MeasuredSteps` for how its tasks run (runs/steps.py): each
task's body (`task.fn`) where the flow runs it, `.map` over the Dask workers (one future per
item, gathered: the flow's `.result()` barrier), `.submit` as one task on a worker (raw_pages),
and a direct call (`plan-*`, `commit-*`, reports, word_vectors, held-out aliases) in this
process, as a Prefect 3 flow runs a task it calls directly. A stage is what the wiring marks
with `steps.stage` up to the next mark; its units come from the run's counts (STAGE_UNITS).
Not through a Prefect server: with one, each stage would also carry the API's per-task-run
calls and a server process on the same 2 cores, and its windows would have to be pieced
together from task-run timestamps; here a stage is exactly the span between two barriers.
Outside a run the tasks' run logs are off (`prefect.logging.disable_run_logger`) and their
artifacts are computed, not sent (`runs.artifacts.publish`). What is left out: the Prefect API's
overhead per task run (the number of tasks per step is recorded), and model loading (spaCy,
WordNet, E5, fastText neighbours), which the wiring names with `steps.load` and which is done
on every worker before the stage's tasks need it and reported as `load_s`: once per worker,
seconds against hours at scale.

Replication (`--replicate N`): the input's first `--max-pages` pages are written N times into
a temporary input of the same format and compression, copy k with page ids + k * 10^d and
" (copy k)" in titles and redirect targets (before a trailing "(...)", so "(disambiguation)"
still reads), so every copy is a distinct page with the same text.

`project` (also printed by `run`): each stage's hours for full English Wikipedia on
`--cores` cores, from the largest replicate's per-core rates (the issue's figure, an upper
bound on a small input: fixed costs are scaled up too) and from the marginal cost between
the smallest and the largest replicate (the headline), with the bottleneck, what moves each
stage, and the bytes it would write; see `project_stages`.
"""
from __future__ import annotations

import bz2
import datetime as dt
import gzip
import json
import logging
import math
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import psutil
import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from phrase_mining import PeakPerProcess  # noqa: E402  (benchmarks/ is on sys.path)

from runs.steps import Steps  # noqa: E402

app = typer.Typer(add_completion=False)
MB = 2**20

# Full English Wikipedia, the sizes the projection scales to (override on the command line).
# Articles and words: https://en.wikipedia.org/wiki/Wikipedia:Size_of_Wikipedia (6,816,939
# articles and 4.5 billion words in April 2024). Pages of a pages-articles dump with the
# redirects: ~23M (tasks/pages/, find_duplicate_pages, on a full dump). Sentences: ~150M
# (4.5B words at ~30 words per kept prose sentence; lists, tables and infoboxes are not kept).
ENWIKI = {"articles": 6.7e6, "pages": 23e6, "sentences": 150e6}
METHOD = ("the flow's wiring (corpus_wiring) with each Prefect task body (task.fn) where the flow runs it: "
          ".map/.submit on a Dask LocalCluster of single-threaded worker processes, direct calls in the flow's "
          "process; no Prefect server; models loaded before their stage (load_s); each (workers, replicate) in a "
          "fresh process")
SOURCES_NOTE = ("enwiki sizes: 6.7M articles and 4.5B words (en.wikipedia.org/wiki/Wikipedia:Size_of_Wikipedia, "
                "April 2024); ~23M pages with redirects in a pages-articles dump (tasks/pages/); ~150M sentences "
                "(4.5B words / ~30 words per kept sentence)")


# --- the flow's parameters ------------------------------------------------------------------
def wiring_args(source, storage_root: str, workers: int, overrides: dict) -> dict:
    """The arguments `build_corpus` gives `corpus_stages` (by name), which hands them to `corpus_wiring`:
    its defaults, then `overrides` (flat: a stage setting by its field name, or a build-corpus parameter)."""
    import inspect

    from flows.build_corpus import build_corpus, corpus_stages
    from flows.corpus_config import STAGES, group_settings

    grouped, rest = group_settings(overrides, STAGES)
    bound = inspect.signature(build_corpus.fn).bind(source=source, storage_root=storage_root, dask_workers=workers,
                                                    **rest, **grouped)
    bound.apply_defaults()
    return {k: bound.arguments[k] for k in inspect.signature(corpus_stages.fn).parameters}


def recorded_params(args: dict) -> dict:
    """The stage parameters a run's result keeps (what `project` reads), from `wiring_args`."""
    backbone, neg = (args["negative_backbone"], args["backbone_cache_dir"]), args["negatives"]
    return {**args["read"].model_dump(), **args["pages"].model_dump(), "phrase_params": args["phrases"].params(),
            "positive_params": {"fasttext": args["word_vectors"].params(),
                                "augmentations": args["positives"].params(*backbone),
                                "negatives": neg.params(*backbone, None, neg.negative_buckets),
                                "training_set": args["training_set"].params()}}


def parse_overrides(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


# --- replicated inputs ------------------------------------------------------------------------
_TITLE = re.compile(rb"<title>(.*?)</title>", re.S)
_ID = re.compile(rb"<id>(\d+)</id>")
_REDIRECT = re.compile(rb'<redirect title="([^"]*)"')


def copy_title(title: str, k: int) -> str:
    """Copy k's title: " (copy k)" before a trailing "(...)", so page_kind still reads
    "(disambiguation)" and "List of ..."; copy 0 is the page itself."""
    if k == 0:
        return title
    mark = f" (copy {k})"
    if title.endswith(")") and " (" in title:
        i = title.rindex(" (")
        return title[:i] + mark + title[i:]
    return title + mark


def _open_out(path: Path):
    if path.suffix == ".bz2":
        return bz2.open(path, "wb", compresslevel=9)
    if path.suffix == ".gz":
        return gzip.open(path, "wb")
    return open(path, "wb")


def _suffix(path: str) -> str:
    m = re.search(r"\.(bz2|gz|xz)$", path.lower())
    return "" if m is None or m.group(1) == "xz" else f".{m.group(1)}"


def read_xml_pages(path: str, limit: int | None) -> tuple[bytes, list[bytes]]:
    """The dump's header and its first `limit` <page> blocks, cut as raw_pages cuts them
    (streamed: a whole dump is not read for a slice)."""
    import fsspec

    from tasks.raw_pages.xml_dump import Reached, cut_pages, decompressor, split_header

    header, pages = None, []
    if limit == 0:
        return b"", []
    with fsspec.open(path, "rb") as raw:
        for kind, data, _ in cut_pages(decompressor(path, raw), 1 << 62, Reached()):
            if header is None:
                header, _ = split_header(data)
            if kind == "page":
                pages.append(data)
                if limit is not None and len(pages) >= limit:
                    break
    return header or b"", pages


def read_jsonl_records(path: str, limit: int | None) -> list[dict]:
    """The first `limit` records of a JSON-lines input (lines that are not a record with a
    string title are left out: this is benchmark input, not a quarantine test)."""
    import fsspec

    from tasks.raw_pages.xml_dump import decompressor

    out = []
    if limit == 0:
        return out
    with fsspec.open(path, "rb") as raw:
        for line in decompressor(path, raw):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("title"), str):
                out.append(record)
                if limit is not None and len(out) >= limit:
                    break
    return out


def _xml_copy(block: bytes, k: int, offset: int) -> bytes:
    if k == 0:
        return block
    block = _TITLE.sub(lambda m: b"<title>" + copy_title(m.group(1).decode(), k).encode() + b"</title>", block, count=1)
    block = _ID.sub(lambda m: b"<id>%d</id>" % (int(m.group(1)) + k * offset), block, count=1)  # the page's id
    return _REDIRECT.sub(lambda m: b'<redirect title="' + copy_title(m.group(1).decode(), k).encode() + b'"',
                         block, count=1)


def _json_id(record: dict) -> int | None:
    i = record.get("id")
    return int(i) if isinstance(i, int) or (isinstance(i, str) and i.isdigit()) else None


def replicate_inputs(sources: list[str], max_pages: int | None, copies: int, out_dir: Path) -> dict:
    """One input per source: its pages (the first `max_pages` over all sources, in order)
    written `copies` times with distinct ids and titles. Returns the paths and page counts."""
    from tasks.raw_pages.xml_dump import detect_format, resolve_source

    out_dir.mkdir(parents=True, exist_ok=True)
    taken, left, ids = [], max_pages, [1]
    for source in sources:
        path = resolve_source(source)
        fmt = detect_format(path)
        if fmt == "mediawiki-xml":
            header, items = read_xml_pages(path, left)
            ids += [int(m.group(1)) for b in items if (m := _ID.search(b))]
        else:
            header, items = b"", read_jsonl_records(path, left)
            ids += [i for r in items if (i := _json_id(r)) is not None]
        taken.append((source, path, fmt, header, items))
        left = None if left is None else left - len(items)
    offset = 10 ** len(str(max(ids)))  # copy k's ids: id + k * offset, clear of every original id
    paths, pages = [], []
    for n, (source, path, fmt, header, items) in enumerate(taken):
        pages.append({"source": source, "pages": len(items), "pages_written": len(items) * copies})
        if not items:  # max_pages ran out before this input
            continue
        target = out_dir / f"input{n}{'.xml' if fmt == 'mediawiki-xml' else '.jsonl'}{_suffix(path)}"
        with _open_out(target) as fh:
            if fmt == "mediawiki-xml":
                fh.write(header + b"\n")
                for k in range(copies):
                    for block in items:
                        fh.write(_xml_copy(block, k, offset) + b"\n")
                fh.write(b"</mediawiki>\n")
            else:
                for k in range(copies):
                    for record in items:
                        r = dict(record, title=copy_title(record["title"], k))
                        if k and _json_id(record) is not None:
                            r["id"] = _json_id(record) + k * offset
                        fh.write(json.dumps(r, ensure_ascii=False).encode() + b"\n")
        paths.append(str(target))
    if not paths:
        raise ValueError(f"no page read from {sources} (max_pages={max_pages})")
    return {"paths": paths, "pages": pages, "id_offset": offset}


# --- measuring ------------------------------------------------------------------------------
def _cpu(pid: int) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return float("nan")


def _rss(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0


def task_ref(task) -> tuple[str, str]:
    """Where a Prefect task object is importable from (its body is not: `task.fn` is no module's
    attribute), so that a worker runs the very task the wiring named."""
    import importlib

    ref = (task.fn.__module__, task.fn.__name__)
    if getattr(importlib.import_module(ref[0]), ref[1], None) is not task:
        raise ValueError(f"task {task.name} is not {ref[0]}.{ref[1]}")
    return ref


def run_body(ref: tuple[str, str], args: tuple):
    """A task's body, as its task run would execute it (no run: no run logs, no artifacts sent)."""
    import importlib

    from prefect.logging import disable_run_logger

    with disable_run_logger():
        return getattr(importlib.import_module(ref[0]), ref[1]).fn(*args)


def call_and_drop(fn, *args) -> None:
    """`fn(*args)` on a worker, its result (a loaded model) left there."""
    fn(*args)


def warm_imports() -> None:
    """Import what the stages import (once per process in a real run too), so that the first
    task of a stage does not carry it."""
    import importlib

    from runs.figures import pyplot

    for module in ("flows.build_corpus", "gensim.models", "pearl_model.pairs.synonyms", "pearl_model.pairs.negatives"):
        importlib.import_module(module)
    pyplot()


def map_items(args: tuple) -> list[tuple]:
    """Prefect's `Task.map` arguments -> one argument tuple per task: `unmapped(x)` and what is not
    iterable are given to every task, the iterables item by item (prefect.task_runners does the same)."""
    from prefect.utilities.annotations import unmapped
    from prefect.utilities.collections import isiterable

    mapped = {i: list(a) for i, a in enumerate(args) if not isinstance(a, unmapped) and isiterable(a)}
    lengths = {len(v) for v in mapped.values()}
    if len(lengths) != 1:
        raise ValueError(f"map over iterables of lengths {sorted(lengths)}")
    return [tuple(mapped[i][k] if i in mapped else a.unwrap() if isinstance(a, unmapped) else a
                  for i, a in enumerate(args)) for k in range(lengths.pop())]


def committed(root: str) -> set[str]:
    """name/version of every committed dataset under the storage root (a manifest is the commit),
    on local disk or an object store (one listing, never cached: storage.stores)."""
    from storage.datasets import MANIFEST
    from storage.stores import store

    fs, path = store(root)
    return {"/".join(m.rstrip("/").split("/")[-3:-1]) for m in fs.glob(f"{path}/*/*/{MANIFEST}")}


def _du(root: str, dataset: str) -> int:
    """Bytes under root/dataset (name/version), on local disk or an object store."""
    from storage.stores import store

    fs, path = store(f"{root}/{dataset}")
    return fs.du(path)


# What a stage's units are and which of the run's counts gives them.
STAGE_UNITS = {"raw_pages": ("pages", "pages"), "pages": ("pages", "pages"),
               "aliases": ("alias mentions", "alias_mentions"), "corpus_report": ("pages", "pages"),
               "phrase_occurrences": ("sentences", "sentences"), "pmi_word_totals": ("sentences", "sentences"),
               "phrases": ("phrases", "phrases"), "phrase_types": ("phrases", "phrases"),
               "phrase_report": ("phrases", "phrases"), "word_vectors": ("corpus words", "corpus_words"),
               "augmentations": ("phrases", "phrases"), "phrase_embeddings": ("phrases", "phrases"),
               "negatives": ("phrases", "phrases"), "training_set": ("phrases", "phrases")}


def map_widths() -> dict:
    """What a `.map`'s number of tasks grows with at full size (`_tasks_at_scale`), for the maps
    not over the phrase buckets (the rest are)."""
    from tasks.aliases import alias_bucket_task
    from tasks.negatives import candidates_task
    from tasks.pages import extract_part_task, page_keys_task
    from tasks.phrase_occurrences import mine_chunk_task, sentence_keys_task

    return {extract_part_task: "parts", page_keys_task: "parts", mine_chunk_task: "chunks",
            sentence_keys_task: "chunks", alias_bucket_task: "alias_buckets", candidates_task: "negative_buckets"}


class MeasuredSteps(Steps):
    """The wiring's steps (runs.steps.Steps) where the flow runs them, each measured: `map` and
    `submit` run the task bodies on the Dask workers (one future per item, gathered: the flow's
    `.result()` barrier), `call` runs one in this process, as a Prefect flow runs a task it calls
    directly. Per step: wall and CPU seconds of the processes doing it, peak RSS of every process
    (sampled every `interval` s), the number of tasks; per stage (`stage` to the next `stage`)
    their sums, the models' loading (`load`, not in the stage's time) and the datasets committed."""

    def __init__(self, client, root: str, interval: float = 0.05):
        self.client, self.root, self.interval = client, root, interval
        self.driver = os.getpid()
        self.workers = sorted(client.run(os.getpid).values())
        self.stages: list[dict] = []
        self.current: dict | None = None
        self.widths = map_widths()

    def stage(self, name: str) -> None:
        self.finish()
        if name not in STAGE_UNITS:
            raise ValueError(f"stage {name!r} of the flow's wiring has no unit here (STAGE_UNITS)")
        self.current = {"stage": name, "unit": STAGE_UNITS[name][0], "units": None, "load_s": 0.0, "steps": [],
                        "outputs": [], "rss_start_mb": {"driver": round(_rss(self.driver) / MB, 1),
                                                        "workers": [round(_rss(p) / MB, 1) for p in self.workers]},
                        "_before": committed(self.root)}

    def load(self, fn, *args, in_flow: bool = False) -> None:
        t = time.perf_counter()
        self.client.run(call_and_drop, fn, *args)
        if in_flow:
            fn(*args)
        self.current["load_s"] += time.perf_counter() - t

    def finish(self) -> None:
        """End the current stage (the next `stage`, or the end of the wiring)."""
        st, self.current = self.current, None
        if st is None:
            return
        steps = st["steps"]
        st["load_s"] = round(st["load_s"], 2)
        st["wall_s"] = round(sum(s["wall_s"] for s in steps), 3)
        st["core_s"] = round(sum(s["wall_s"] * s["cores"] for s in steps), 3)
        st["cpu_s"] = round(sum(s["cpu_s"] for s in steps), 3)
        mapped = [s for s in steps if s["kind"] != "flow"]
        st["peak_rss_mb_per_worker"] = [max(vals) for vals in zip(*(s["peak_rss_mb_workers"] for s in mapped))] \
            if mapped else []
        st["peak_rss_mb_driver"] = max(s["peak_rss_mb_driver"] for s in steps) if steps else None
        st["outputs"] = sorted(committed(self.root) - st.pop("_before"))
        st["output_bytes"] = sum(_du(self.root, d) for d in st["outputs"])
        self.stages.append(st)

    @contextmanager
    def _step(self, task, kind: str, tasks: int, rule: str | None = None, threads: int = 1):
        pids = [self.driver] if kind == "flow" else self.workers
        cpu0 = sum(_cpu(p) for p in pids)
        t0 = time.perf_counter()
        with PeakPerProcess(self.interval) as mem:
            yield
        wall = time.perf_counter() - t0
        cpu = sum(_cpu(p) for p in pids) - cpu0
        for p in [self.driver, *self.workers]:  # a step shorter than the interval may have no sample
            mem.peaks[p] = max(mem.peaks.get(p, 0), _rss(p))
        self.current["steps"].append({
            "step": task.name, "task": task.fn.__name__, "kind": kind, "tasks": tasks, "tasks_rule": rule,
            "threads": threads, "wall_s": round(wall, 3), "cores": len(self.workers) if kind == "map" else 1,
            "cpu_s": round(cpu, 3), "peak_rss_mb_workers": [round(mem.peaks.get(p, 0) / MB, 1) for p in self.workers],
            "peak_rss_mb_driver": round(mem.peaks.get(self.driver, 0) / MB, 1)})

    def call(self, task, *args):
        from prefect.logging import disable_run_logger

        from tasks.word_vectors import word_vectors_task

        threads = args[1]["workers"] if task is word_vectors_task else 1  # fastText's threads
        with self._step(task, "flow", 1, threads=threads), disable_run_logger():
            return task.fn(*args)

    def submit(self, task, *args):
        with self._step(task, "task", 1):
            return self.client.submit(run_body, task_ref(task), args, pure=False).result()

    def map(self, task, *args) -> list:
        items = map_items(args)
        with self._step(task, "map", len(items), self.widths.get(task, "phrase_buckets")):
            return self.client.gather(self.client.map(run_body, [task_ref(task)] * len(items), items, pure=False))


def run_counts(result: dict, args: dict) -> dict:
    """The run's counts, from what the wiring returned (the flow's own result) and its datasets."""
    from storage import schemas
    from storage.datasets import Dataset

    root, versions = args["storage_root"], result["versions"]

    def manifest(name: str) -> dict:
        return Dataset(root, name, versions[name], schemas.ALL[name]).manifest()

    wv = manifest("word_vectors")["stats"]
    return {"pages": result["pages_read"], "kept": result["kept"], "filtered": result["filtered"],
            "quarantined": result["quarantined"], "sentences": result["sentences"],
            "alias_mentions": manifest("alias_mentions")["rows"],
            "occurrences": result["phrases"]["mining"].get("occurrences_kept"),
            "phrases": manifest("phrases")["rows"], "corpus_words": wv["corpus_words"],
            "fasttext_sentences": wv["corpus_sentences"], "fasttext_epochs": args["word_vectors"].params()["epochs"],
            "augmentations": manifest("augmentations")["rows"], "negatives": manifest("negatives")["rows"],
            "training_set": result["training_set"]["rows"],
            "word_vectors_scan_s_per_sentence": scan_cost(Dataset(root, "sentences", versions["sentences"],
                                                                  schemas.SENTENCES))}


def scan_cost(sentences, rows: int = 200_000, per_part: int = 10_000) -> float:
    """Seconds per sentence of one hash-share pass of word_vectors' corpus (above
    fasttext_max_sentences it reads every sentence on every pass and keeps a share): the
    run's sentences tiled to `rows`, in parts of a real run's size (500 pages of enwiki),
    so the per-file cost of a small input does not count as per-sentence cost."""
    import pyarrow as pa

    from storage.datasets import Dataset
    from tasks.word_vectors import SentenceCorpus

    texts = sentences.read(columns=["text"])["text"].to_pylist() or ["A sentence."]
    with tempfile.TemporaryDirectory() as tmp:
        d = Dataset(tmp, "sentences", "scan", sentences.schema)
        for part, start in enumerate(range(0, rows, per_part)):
            ids = list(range(start, start + per_part))
            d.write_part(part, pa.table({"sentence_id": ids, "page_id": [i // 20 for i in ids], "index": ids,
                                         "text": [texts[i % len(texts)] for i in ids]}, schema=sentences.schema))
        d.commit(code_version="scan", params={}, inputs={})
        t = time.perf_counter()
        sum(1 for _ in SentenceCorpus(d, share=1e-9))  # keeps 1 in 10,000 (in_share's resolution)
        return (time.perf_counter() - t) / rows


def run_once(inputs: list[str], workers: int, root: str, overrides: dict, interval: float) -> dict:
    """`corpus_wiring` (flows/build_corpus.py) with `build_corpus`'s arguments, its steps measured."""
    from distributed import Client, LocalCluster

    from flows.build_corpus import corpus_wiring

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("distributed"):
            logging.getLogger(name).setLevel(logging.WARNING)

    args = wiring_args(inputs[0] if len(inputs) == 1 else inputs, root, workers, overrides)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        steps = MeasuredSteps(client, root, interval)
        t = time.perf_counter()
        client.run(warm_imports)
        warm_imports()
        imports = time.perf_counter() - t
        t = time.perf_counter()
        result = corpus_wiring(steps, **args)
        steps.finish()
        wall = time.perf_counter() - t
    counts = run_counts(result, args)
    for st in steps.stages:
        st["units"] = counts[STAGE_UNITS[st["stage"]][1]]
        st["units_per_s_per_core"] = round(st["units"] / st["core_s"], 2) if st["units"] and st["core_s"] else None
    return {"counts": counts, "stages": steps.stages, "wall_s": round(wall, 2), "imports_s": round(imports, 2),
            "params": recorded_params(args), "versions": result["versions"], "reuse_stores": result["reuse_stores"]}


# --- tables ---------------------------------------------------------------------------------
def _fmt(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def markdown(rows: list[list], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def run_table(run: dict) -> str:
    rows = []
    for st in run["stages"]:
        busy = st["cpu_s"] / st["wall_s"] if st["wall_s"] else None
        rows.append([st["stage"], st["unit"], st["units"], _fmt(st["wall_s"], 2), _fmt(st["units_per_s_per_core"]),
                     _fmt(busy, 2), "/".join(_fmt(x, 0) for x in st["peak_rss_mb_per_worker"]) or "-",
                     _fmt(st["peak_rss_mb_driver"], 0), _fmt(st["output_bytes"] / MB, 2), _fmt(st["load_s"])])
    total = sum(st["wall_s"] for st in run["stages"])
    rows.append(["**total**", "", "", _fmt(total, 1), "", "", "", "", "", ""])
    return markdown(rows, ["stage", "unit", "units", "wall s", "units/s per core", "CPU/wall",
                           "peak RSS per worker MB", "flow-process peak MB", "output MB", "load s"])


def scaling_table(runs: list[dict]) -> str:
    """Per worker count: the largest replicate against the smallest, stage by stage."""
    rows = []
    for w in sorted({r["workers"] for r in runs}):
        mine = sorted((r for r in runs if r["workers"] == w), key=run_size)
        if len(mine) < 2:
            continue
        a, b = mine[0], mine[-1]
        for sa, sb in zip(a["stages"], b["stages"]):
            units = sb["units"] / sa["units"] if sa["units"] else None
            secs = sb["wall_s"] / sa["wall_s"] if sa["wall_s"] else None
            per_unit = secs / units if secs and units else None
            rss_a = max(sa["peak_rss_mb_per_worker"] or [sa["peak_rss_mb_driver"]])
            rss_b = max(sb["peak_rss_mb_per_worker"] or [sb["peak_rss_mb_driver"]])
            rows.append([w, f"{run_size(a)}->{run_size(b)}", sa["stage"], _fmt(units, 2), _fmt(secs, 2),
                         _fmt(per_unit, 2), f"{_fmt(rss_a, 0)} -> {_fmt(rss_b, 0)}", _fmt(rss_b / rss_a, 2)])
    return markdown(rows, ["workers", "replicate", "stage", "units x", "wall x", "s per unit x",
                           "peak RSS MB (worker; flow process if none)", "RSS x"])


# --- projection -----------------------------------------------------------------------------
# What each stage's work grows with, at full size. Sentences stand for the text volume (the
# sample's pages are far longer than enwiki's average, so pages would not); the phrase reduce
# reads the mined occurrences, which grow with the sentences; the later stages work on the
# distinct phrases.
DRIVERS = {"raw_pages": "sentences", "pages": "sentences", "aliases": "sentences", "corpus_report": "sentences",
           "phrase_occurrences": "sentences", "pmi_word_totals": "sentences", "phrases": "sentences",
           "phrase_types": "phrases", "phrase_report": "phrases",
           "word_vectors": "corpus_words", "augmentations": "phrases", "phrase_embeddings": "phrases",
           "negatives": "phrases", "training_set": "phrases"}

HINTS = {
    "raw_pages": "a multistream dump (read in parallel, as assumed here); a plain .xml.bz2 is one core",
    "pages": "more cores (wikitext cleaning + sentence splitting, per part)",
    "corpus_report": "little: one pass in the flow process",
    "phrase_occurrences": "more cores (spaCy parse + NER, per chunk); ner_scope: examples (no NER here: it runs "
                          "on the kept phrases' examples, phrase_types); parser: pmi (~1.3x per core: "
                          "benchmarks/results/pmi_phrases_sample_ovos.json)",
    "phrase_types": "examples_per_phrase (NER on that many sentences per kept phrase)",
    "phrase_report": "little: one pass in the flow process",
    "augmentations": "the E5 cosine check of replacement words (min_cosine) runs the encoder: a GPU (its share "
                     "of the time is not measured here)",
    "phrase_embeddings": "E5 on a GPU (~16,000 phrases/s on an H100) or, on CPU, the openvino-bf16 default (~1.8x "
                         "onnx here) and openvino-int8 (~2.8x, below the quality bar; docs/research/speed-encoding.md)",
    "negatives": "pairs grow faster than phrases until blocks reach negative_max_block",
}
BUCKET_PARAMS = {"alias_buckets": "alias_buckets", "phrase_buckets": "phrase_buckets",
                 "negative_buckets": "negative_buckets"}


def _tasks_at_scale(step: dict, params: dict, totals: dict) -> int:
    """How many tasks the step's `.map` makes at full size (what can run in parallel)."""
    rule = step["tasks_rule"]
    if rule == "parts":
        return math.ceil(totals["pages"] / params["pages_per_partition"])
    if rule == "chunks":  # at least; a part's tail makes one more
        return math.ceil(totals["sentences"] / params["phrase_params"]["sentences_per_chunk"])
    # a count left unset (the flow's default) is sized from the full input, as the flow would
    from tasks.negatives import block_bucket_count
    from tasks.pages import alias_bucket_count
    from tasks.phrase_occurrences import phrase_bucket_count

    if rule == "alias_buckets":
        return params["alias_buckets"] or alias_bucket_count(totals["pages"])
    if rule == "phrase_buckets":
        return params["phrase_params"]["phrase_buckets"] or phrase_bucket_count(totals["sentences"])
    if rule == "negative_buckets":
        return params["positive_params"]["negatives"]["block_buckets"] or block_bucket_count(int(totals["phrases"]))
    raise ValueError(f"unknown tasks rule {rule!r}")


def _core_s(step: dict, basis: str) -> float:
    """Core-seconds a step took: wall * the cores it held, or the CPU seconds its processes used."""
    return step["cpu_s"] if basis == "cpu" else step["wall_s"] * step["cores"]


def run_size(run: dict) -> int:
    """How much input a run read: copies x pages taken (runs of one --max-pages: the copies)."""
    return run["replicate"] * (run.get("max_pages") or 1)


def project_stages(results: dict, cores: int = 64, enwiki: dict | None = None, phrases: float | None = None,
                   raw_pages: str = "multistream", basis: str = "cpu", min_s: float = 2.0,
                   buckets: int | None = None) -> dict:
    """Hours per stage for full enwiki on `cores` cores.

    Per step, core-seconds per unit of the stage's driver (DRIVERS), the slower of the worker
    counts, two ways:
      rate      wall * cores held (a `.map`: all workers; else 1) / driver at the largest
                replicate: the issue's units/s per core. Every fixed cost of the step (task
                start-up, a report's figure, a commit) is scaled up with the corpus too, so on a
                small input this is an upper bound.
      marginal  (core-s at the largest replicate - at the smallest) / (driver there - here):
                what one more unit costs, fixed costs dropped (a step whose time did not grow
                counts 0). Core-s on `basis`: "cpu", the CPU seconds of the processes doing the
                step (what dedicated cores would take: the machine may be shared), or "wall".
    Hours = driver at full size * that / the cores the step can use: a `.map` min(cores, its
    tasks at full size; parts and chunks grow with the corpus, buckets do not), anything else
    its threads (1; word_vectors: fasttext_workers). Stages run one after another (each waits
    for the previous one), so the build is their sum. A stage that took under `min_s` at the
    largest replicate is not measured cleanly: its hours are noise times the scale-up.
    Full size: `enwiki` sentences and pages; phrases = phrases per sentence of the smallest
    replicate (real text, not copies) * sentences, linear (an upper bound: distinct phrases grow
    sublinearly) unless `phrases` is given; word_vectors reads min(sentences,
    fasttext_max_sentences) * words per sentence, plus a hash-share scan of every sentence on
    each of its epochs + 1 passes. `buckets`: project with that many alias, phrase and negative
    buckets instead of the run's (the per-unit costs are the run's).
    """
    import copy

    enwiki = {**ENWIKI, **(enwiki or {})}
    runs = results["runs"]
    big, small = max(map(run_size, runs)), min(map(run_size, runs))
    base = next(r for r in runs if run_size(r) == small)["counts"]
    top = sorted((r for r in runs if run_size(r) == big), key=lambda r: r["workers"])
    pairs = [(next((s for s in runs if run_size(s) == small and s["workers"] == r["workers"]), None), r)
             for r in top]
    params = copy.deepcopy(top[0]["params"])
    if buckets is not None:
        params["alias_buckets"] = params["phrase_params"]["phrase_buckets"] = buckets
        params["positive_params"]["negatives"]["block_buckets"] = buckets
    S = enwiki["sentences"]
    phrases_per_sentence = base["phrases"] / base["sentences"]
    words_per_sentence = base["corpus_words"] / base["fasttext_sentences"]
    ft = params["positive_params"]["fasttext"]
    read_sentences = min(S, ft["max_sentences"]) if ft.get("max_sentences") else S
    full = {"sentences": S, "phrases": phrases if phrases is not None else phrases_per_sentence * S,
            "corpus_words": read_sentences * words_per_sentence}
    scan_s = max(r["counts"]["word_vectors_scan_s_per_sentence"] for r in top)
    scan_h = (ft["epochs"] + 1) * (S - read_sentences) * scan_s / 3600
    totals = {"pages": enwiki["pages"], "sentences": S, "phrases": full["phrases"]}
    out, memory = [], []
    for i, name in enumerate(s["stage"] for s in top[0]["stages"]):
        driver = DRIVERS[name]
        hours = {"rate": 0.0, "marginal": 0.0 if small < big else None}
        limited, flat = [], []
        for j, step in enumerate(top[0]["stages"][i]["steps"]):
            rate = max(_core_s(r["stages"][i]["steps"][j], "wall") / r["counts"][driver] for _, r in pairs)
            slopes = [(_core_s(b["stages"][i]["steps"][j], basis) - _core_s(a["stages"][i]["steps"][j], basis))
                      / (b["counts"][driver] - a["counts"][driver])
                      for a, b in pairs if a is not None and b["counts"][driver] > a["counts"][driver]]
            marginal = max(slopes) if slopes else None
            if marginal is not None and marginal <= 0:
                flat.append(step["step"])
                marginal = 0.0
            if name == "raw_pages" and step["task"] == "raw_pages_task" and raw_pages == "multistream":
                parallel = min(cores, math.ceil(enwiki["pages"] / params["pages_per_partition"]))
            elif step["kind"] == "map":
                tasks = _tasks_at_scale(step, params, totals)
                parallel = min(cores, tasks)
                if tasks < cores:
                    limited.append((step["tasks_rule"], tasks, full[driver] * (rate if marginal is None else marginal)))
            else:
                parallel = step.get("threads") or 1
            hours["rate"] += full[driver] * rate / parallel / 3600
            if hours["marginal"] is not None:
                hours["marginal"] = (None if marginal is None
                                     else hours["marginal"] + full[driver] * marginal / parallel / 3600)
        if name == "word_vectors" and read_sentences < S:
            hours = {k: (v + scan_h if v is not None else None) for k, v in hours.items()}
        headline = hours["rate"] if hours["marginal"] is None else hours["marginal"]
        hint = HINTS.get(name, "")
        if name == "raw_pages" and raw_pages != "multistream":
            hint = "a multistream dump with its index: read in parallel (here on one core)"
        if limited:
            now = ", ".join(sorted({f"{BUCKET_PARAMS[r]}={t}" for r, t, _ in limited}))
            gain = sum(core_s / t - core_s / cores for _, t, core_s in limited) / 3600
            hint = (f"{now} ({min(t for _, t, _ in limited)} of {cores} cores); {cores} buckets: -{gain:.2f} h"
                    + (f"; {hint}" if hint else ""))
        if name == "word_vectors":
            threads = ft["workers"]
            train = headline - (scan_h if read_sentences < S else 0)
            hint = (f"fasttext_workers={threads} trains on {threads} core(s); 16 threads: "
                    f"~{train * threads / 16 + headline - train:.2f} h if gensim scaled linearly (not measured); "
                    "or a lower fasttext_max_sentences")
        stage_top = [r["stages"][i] for r in top]
        longest = max(s["wall_s"] for s in stage_top)
        # bytes written: no timing noise, so the marginal is exact for what grows with the rows
        rows_driver = "phrases" if name == "phrases" else driver  # the reduce reads occurrences, writes phrases
        out_small, out_big = pairs[0][0], pairs[0][1]
        if out_small is not None and out_big["counts"][rows_driver] > out_small["counts"][rows_driver]:
            per_unit = ((out_big["stages"][i]["output_bytes"] - out_small["stages"][i]["output_bytes"])
                        / (out_big["counts"][rows_driver] - out_small["counts"][rows_driver]))
        else:
            per_unit = out_big["stages"][i]["output_bytes"] / out_big["counts"][rows_driver]
        out_gb = max(per_unit, 0) * full[rows_driver] / 1e9
        if name == "word_vectors":  # the n-gram table is sized by the sentences read, not the words
            from tasks.word_vectors import ngram_buckets

            out_gb = ngram_buckets(round(read_sentences), ft.get("bucket")) * ft["dim"] * 4 / 1e9
        if limited:
            tasks = min(t for _, t, _ in limited)
            peak = max(max(st["peak_rss_mb_per_worker"] or [0]) for st in stage_top)
            memory.append(f"{name}: {tasks} tasks, each {full[driver] / tasks / 1e6:,.1f}M {driver.replace('_', ' ')}' "
                          f"worth at full size ({out_big['counts'][driver]:,} in all here, peak RSS per worker "
                          f"{peak:,.0f} MB)")
        out.append({"stage": name, "unit": stage_top[0]["unit"], "driver": driver, "full_size": full[driver],
                    "rate_per_core": {str(r["workers"]): r["stages"][i]["units_per_s_per_core"] for r in top},
                    "hours_rate": hours["rate"], "hours_marginal": hours["marginal"], "flat_steps": flat,
                    "measured_s": longest, "clean": longest >= min_s, "output_gb": out_gb,
                    "what_moves_it": hint})

    def total(key: str) -> float | None:
        vals = [s[key] for s in out]
        return None if any(v is None for v in vals) else sum(vals)

    key = "hours_rate" if total("hours_marginal") is None else "hours_marginal"
    pages_ratio = top[0]["counts"]["pages"] / top[0]["counts"]["sentences"]
    by_pages = sum(s["hours_rate"] * enwiki["pages"] / (S * pages_ratio) for s in out
                   if s["stage"] in ("raw_pages", "pages"))
    unclean = [s for s in out if not s["clean"]]
    notes = [
        SOURCES_NOTE,
        f"measured: size {big} ({top[0]['counts']['pages']} pages, {top[0]['counts']['sentences']} sentences, "
        f"{top[0]['counts']['phrases']} phrases) with {', '.join(str(r['workers']) for r in top)} workers, the "
        f"slower per core; marginal: against size {small}, on {basis} time; ratios of size {small}: "
        f"{base['sentences'] / base['pages']:.1f} sentences per page, {phrases_per_sentence:.3f} phrases per "
        f"sentence, {words_per_sentence:.1f} words per sentence",
        f"raw_pages and pages scale with the sentences: by pages (23M) at the rate they would take {by_pages:.2f} h, "
        f"but the measured pages hold {1 / pages_ratio:.0f} sentences each, enwiki's {S / enwiki['pages']:.1f}",
        f"phrases: {full['phrases'] / 1e6:,.0f}M ({'given' if phrases is not None else 'linear in the sentences'}); "
        "the paper mined 3.8M; distinct phrases grow sublinearly, so the phrase stages are an upper bound",
        f"word_vectors: {read_sentences / 1e6:,.0f}M sentences read (fasttext_max_sentences) of {S / 1e6:,.0f}M; "
        f"each of its {ft['epochs'] + 1} passes hashes every sentence ({scan_s * 1e6:.2f} us each: {scan_h:.2f} h)",
        f"raw_pages read as a {raw_pages} dump" + (" (the sequential reader's per-core rate: the parallel reader cuts "
                                                   "and parses the same way)" if raw_pages == "multistream" else ""),
        "left out: Prefect's API overhead per task run, and model loading (load_s; once per worker)",
    ]
    if unclean:
        notes.append(f"not measured cleanly (under {min_s:g} s at size {big}; their hours are timer noise "
                     "times the scale-up, read them as 'small' or rerun on a larger input): "
                     + ", ".join(f"{s['stage']} ({s['measured_s']:.2f} s)" for s in unclean))
    if memory:
        notes.append("memory: buckets do not grow with the corpus, so what one task holds does (parts and chunks "
                     "keep their size); " + "; ".join(memory))
    if any(s["flat_steps"] for s in out):
        notes.append("steps whose time did not grow between the sizes (marginal 0): " + "; ".join(
            f"{s['stage']}: {', '.join(s['flat_steps'])}" for s in out if s["flat_steps"]))
    clean = [s for s in out if s["clean"]] or out
    return {"cores": cores, "basis": basis, "enwiki": {**enwiki, **full}, "replicates": [small, big], "stages": out,
            "total_hours_rate": total("hours_rate"), "total_hours_marginal": total("hours_marginal"),
            "total_hours_clean": sum(s[key] for s in clean), "headline": key,
            "bottleneck": max(clean, key=lambda s: s[key])["stage"], "notes": notes}


def projection_markdown(proj: dict) -> str:
    workers = sorted({w for s in proj["stages"] for w in s["rate_per_core"]}, key=int)
    rows = []
    for s in proj["stages"]:
        rate = " / ".join(_fmt(s["rate_per_core"].get(w)) for w in workers)
        name = f"**{s['stage']}**" if s["stage"] == proj["bottleneck"] else s["stage"]
        marginal = "-" if s["hours_marginal"] is None else f"{s['hours_marginal']:.2f}"
        rows.append([name, f"{rate} {s['unit']}/s", f"{s['full_size'] / 1e6:,.0f}M {s['driver'].replace('_', ' ')}",
                     f"{s['hours_rate']:.2f}", marginal, "yes" if s["clean"] else f"no ({s['measured_s']:.2f} s)",
                     _fmt(s["output_gb"]), s["what_moves_it"]])
    tm = proj["total_hours_marginal"]
    rows.append(["**total**", "", "", f"{proj['total_hours_rate']:.2f}", "-" if tm is None else f"**{tm:.2f}**", "",
                 _fmt(sum(s["output_gb"] for s in proj["stages"])), ""])
    table = markdown(rows, ["stage", f"per core ({' / '.join(workers)} workers)", "full enwiki",
                            f"h on {proj['cores']} cores (rate)", f"h (marginal, {proj['basis']} time)",
                            "measured cleanly", "output GB", "what moves it"])
    total = tm if proj["headline"] == "hours_marginal" else proj["total_hours_rate"]
    verdict = "under" if total < 4 else "over"
    return (f"{table}\n\nBottleneck ({proj['headline'].split('_')[1]}, among the stages measured cleanly): "
            f"{proj['bottleneck']}. Projected build {total:.1f} h on {proj['cores']} cores "
            f"({proj['total_hours_clean']:.1f} h in the stages measured cleanly): {verdict} the 4 h target.\n\n"
            + "\n".join(f"- {n}" for n in proj["notes"]))


# --- commands -------------------------------------------------------------------------------
def machine() -> dict:
    from machine_info import machine as described  # the one description of a machine, GPU box included

    return described()


def run_in_subprocess(inputs: list[str], workers: int, root: str, overrides: dict, interval: float,
                      timeout: float | None = None, out: Path | None = None) -> dict:
    """`run_once` in a fresh process: nothing one run loaded (spaCy in the flow process, caches)
    is in the next one's memory or time. It runs in a process group of its own, ended with its
    Dask workers when the run fails, times out or is interrupted."""
    import signal
    import subprocess

    out = out or Path(root + ".json")
    cmd = [sys.executable, str(Path(__file__).resolve()), "one", "--workers", str(workers), "--root", root,
           "--overrides", json.dumps(overrides), "--interval", str(interval), "--out", str(out)]
    for path in inputs:
        cmd += ["--input", path]
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        if proc.wait(timeout=timeout):
            raise subprocess.CalledProcessError(proc.returncode, cmd)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return json.loads(out.read_text())


@app.command(hidden=True)
def one(input: list[str] = typer.Option(...), workers: int = typer.Option(...), root: str = typer.Option(...),
        overrides: str = typer.Option("{}"), interval: float = typer.Option(0.05), out: Path = typer.Option(...)):
    """One (workers, input) run, for `run` (which starts each in its own process)."""
    out.write_text(json.dumps(run_once(input, workers, root, json.loads(overrides), interval), default=str))


@app.command()
def run(
    source: list[str] = typer.Option(["sample"], help="input(s), read in order: 'sample', a dump, JSON lines"),
    workers: str = typer.Option("1,2", help="comma-separated worker counts"),
    replicate: str = typer.Option("1,4", help="comma-separated copies of the input"),
    max_pages: str = typer.Option("100", help="pages taken from the input(s) before replicating; comma-separated: "
                                             "a run per count (distinct real pages as the larger size, where copies "
                                             "would pass every phrase of a copied page through min_freq)"),
    pages_per_partition: int = typer.Option(10, help="small parts, so that every worker has parts to extract"),
    sentences_per_chunk: int = typer.Option(500, help="small chunks, so that every worker has sentences to mine"),
    param: list[str] = typer.Option([], help="more build-corpus parameters, key=JSON (e.g. phrase_buckets=16)"),
    interval: float = typer.Option(0.05, help="seconds between RSS samples"),
    cores: int = typer.Option(64, help="cores of the projection printed at the end"),
    out: Path = typer.Option(Path("benchmarks/results/stage_rates.json")),
) -> None:
    """Measure every stage per (workers, replicate); print the tables and the projection."""
    import signal

    # A stopped run (kill, a session's end) must end its `one` process group too, which runs in a
    # session of its own: SIGTERM's default ends this process without run_in_subprocess's cleanup.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    overrides = {"pages_per_partition": pages_per_partition, "sentences_per_chunk": sentences_per_chunk,
                 **parse_overrides(param)}
    from storage.datasets import git_commit

    results = {"setup": {"method": METHOD, "machine": machine(), "source": source, "max_pages": max_pages,
                         "workers": workers,
                         "replicate": replicate, "overrides": overrides, "git_commit": git_commit(),
                         "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")},
               "runs": []}

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str))

    with tempfile.TemporaryDirectory(prefix="stage_rates_") as tmp:
        page_counts = [int(x) for x in max_pages.split(",")] if max_pages.lower() != "all" else [None]
        for m, n in [(m, n) for m in page_counts for n in [int(x) for x in replicate.split(",")]]:
            made = replicate_inputs(source, m, n, Path(tmp) / f"input-p{m}-r{n}")
            results["setup"].setdefault("inputs", {})[f"{m}x{n}" if len(page_counts) > 1 else str(n)] = made["pages"]
            for w in [int(x) for x in workers.split(",")]:
                typer.echo(f"\n## workers={w} max_pages={m} replicate={n}: "
                           f"{sum(x['pages_written'] for x in made['pages'])} pages")
                one = {"workers": w, "replicate": n, **({"max_pages": m} if len(page_counts) > 1 else {}),
                       **run_in_subprocess(made["paths"], w, f"{tmp}/store-w{w}-p{m}-r{n}", overrides, interval)}
                results["runs"].append(one)
                save()  # each run kept as it ends: an hour's work
                typer.echo(run_table(one))
                typer.echo(f"run wall {one['wall_s']} s; counts: {json.dumps(one['counts'])}")
    results["setup"]["machine"]["load_avg_end"] = os.getloadavg()
    typer.echo("\n## scaling (largest replicate against smallest)\n" + scaling_table(results["runs"]))
    if results["runs"]:
        proj = project_stages(results, cores)
        results["projection"] = proj
        typer.echo(f"\n## projection: full English Wikipedia on {cores} cores\n" + projection_markdown(proj))
    save()
    typer.echo(f"wrote {out}")


STORAGES = ("disk", "s3")


def storage_comparison(runs: list[dict]) -> dict:
    """Per stage, the fastest of each storage's runs (wall seconds) and their ratio; the totals."""
    best = {kind: {} for kind in STORAGES}
    for r in runs:
        for st in r["stages"]:
            kept = best[r["storage"]].get(st["stage"])
            best[r["storage"]][st["stage"]] = st["wall_s"] if kept is None else min(kept, st["wall_s"])
    stages = [{"stage": name, "disk_s": disk, "s3_s": best["s3"][name],
               "s3_over_disk": round(best["s3"][name] / disk, 2) if disk else None}
              for name, disk in best["disk"].items()]
    total = {k: round(sum(s[f"{k}_s"] for s in stages), 2) for k in STORAGES}
    return {"stages": stages, "total": {**{f"{k}_s": v for k, v in total.items()},
                                        "s3_over_disk": round(total["s3"] / total["disk"], 2)}}


@app.command()
def storage(
    source: list[str] = typer.Option(["sample"], help="input(s), read in order"),
    max_pages: int = typer.Option(40, help="pages of the input: the real-cluster test's slice"),
    workers: int = typer.Option(2),
    pages_per_partition: int = typer.Option(20),
    repeat: int = typer.Option(1, help="runs per storage, alternated; a stage's fastest is kept"),
    interval: float = typer.Option(0.05),
    out: Path = typer.Option(Path("benchmarks/results/stage_rates_storage.json")),
) -> None:
    """The same build, stage by stage, on local disk and on an S3-compatible server on loopback
    (moto's server, as the tests run it: tests/s3_stack.py; endpoint and keys only in the
    environment, which the run's processes inherit): what the object store's requests cost before
    any network does."""
    import signal

    from storage.contents import dataset_contents
    from storage.datasets import git_commit
    from tests.s3_stack import S3Server

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    overrides = {"pages_per_partition": pages_per_partition}
    results = {"setup": {"method": METHOD + "; the same run with its storage root on local disk and in a bucket of "
                         "moto's S3 server on 127.0.0.1 (python -m moto.server), alternated",
                         "machine": machine(), "source": source, "max_pages": max_pages, "workers": workers,
                         "repeat": repeat, "overrides": overrides, "git_commit": git_commit(),
                         "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")},
               "runs": []}
    with tempfile.TemporaryDirectory(prefix="stage_rates_storage_") as tmp:
        made = replicate_inputs(source, max_pages, 1, Path(tmp) / "input")
        server = S3Server(Path(tmp))
        os.environ.update(server.env())
        server.start()
        try:
            for k in range(repeat):
                for kind in STORAGES:
                    root = f"{tmp}/store-{k}" if kind == "disk" else f"s3://{server.bucket()}/pearl"
                    typer.echo(f"\n## {kind}, run {k + 1}: {root}")
                    one = {"storage": kind, "workers": workers,
                           **run_in_subprocess(made["paths"], workers, root, overrides, interval,
                                               out=Path(tmp) / f"{kind}-{k}.json")}
                    one["contents"] = dataset_contents(root, one["versions"])
                    results["runs"].append(one)
                    typer.echo(run_table(one))
        finally:
            left = server.stop()
    if left:
        raise RuntimeError(f"moto server left running: {left}")
    results["setup"]["machine"]["load_avg_end"] = os.getloadavg()
    results["comparison"] = storage_comparison(results["runs"])
    # the same datasets, row for row, wherever they were stored (storage.contents' digests)
    results["comparison"]["same_contents"] = all(r["contents"] == results["runs"][0]["contents"]
                                                 for r in results["runs"])
    rows = [[s["stage"], _fmt(s["disk_s"], 2), _fmt(s["s3_s"], 2), _fmt(s["s3_over_disk"], 2)]
            for s in results["comparison"]["stages"]]
    t = results["comparison"]["total"]
    rows.append(["**total**", _fmt(t["disk_s"], 2), _fmt(t["s3_s"], 2), _fmt(t["s3_over_disk"], 2)])
    typer.echo("\n" + markdown(rows, ["stage", "local disk s", "S3 (loopback) s", "S3 / disk"]))
    typer.echo(f"same contents on disk and on S3: {results['comparison']['same_contents']}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    typer.echo(f"wrote {out}")


@app.command()
def project(
    results: Path = typer.Argument(..., help="a JSON written by `run`"),
    cores: int = typer.Option(64),
    sentences: float = typer.Option(ENWIKI["sentences"], help="sentences of full enwiki"),
    pages: float = typer.Option(ENWIKI["pages"], help="pages of a full pages-articles dump, redirects included"),
    phrases: Optional[float] = typer.Option(None, help="phrases at full size (default: linear in sentences)"),
    raw_pages: str = typer.Option("multistream", help="multistream (parallel read) or sequential"),
    basis: str = typer.Option("cpu", help="marginal cost on cpu (CPU seconds) or wall (wall * cores) time"),
    min_s: float = typer.Option(2.0, help="a stage shorter than this at the largest replicate is flagged"),
    buckets: Optional[int] = typer.Option(None, help="alias, phrase and negative buckets at full size"),
    save: Optional[Path] = typer.Option(None, help="also write the projection as JSON here"),
) -> None:
    """Print the projection table (markdown) from a `run` result (docs/research/speed-stage-rates.md)."""
    data = json.loads(results.read_text())
    proj = project_stages(data, cores, {"sentences": sentences, "pages": pages}, phrases, raw_pages, basis, min_s,
                          buckets)
    typer.echo(projection_markdown(proj))
    if save:
        save.write_text(json.dumps(proj, indent=2))


if __name__ == "__main__":
    app()
