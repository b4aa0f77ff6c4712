"""Extraction throughput and peak memory, with 1 and 2 Dask workers.

    python benchmarks/extraction.py                       # the gensim sample dump
    python benchmarks/extraction.py --source data/inputs/ovos_summaries.jsonl

Two measurements per worker count, each on fresh storage:
- stages: the read stage (sequential) then the pages stage mapped over parts on a
  Dask LocalCluster, timed without Prefect in between: the throughput of the work.
- flow: the whole `build-corpus` flow (ephemeral Prefect API, same cluster size):
  what a user waits for, orchestration included.
Peak memory is the largest sum of RSS over this process and all its children
(Dask nanny and worker processes), sampled every 50 ms.
"""
from __future__ import annotations

import json
import os
import platform
import tempfile
import threading
import time
from pathlib import Path

import psutil
import typer
from prefect_api import prefect_api  # benchmarks/, the script's folder

app = typer.Typer(add_completion=False)


class PeakRSS:
    """Samples the RSS of this process tree in a thread."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()

    def _sample(self) -> int:
        me = psutil.Process()
        total = me.memory_info().rss
        for child in me.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total

    def __enter__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join()
        self.peak = max(self.peak, self._sample())


def bench_stages(source: str, root: str, workers: int, pages_per_part: int) -> dict:
    from distributed import Client, LocalCluster

    from storage.datasets import Dataset
    from storage.schemas import RAW_PAGES
    from tasks.pages import extract_part, find_duplicate_pages, plan_page_outputs
    from tasks.raw_pages.sequential import write_raw_pages
    from tasks.raw_pages.xml_dump import resolve_source

    raw = Dataset(root, "raw_pages", "bench", RAW_PAGES)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, PeakRSS() as mem:
        t0 = time.perf_counter()
        read = write_raw_pages(resolve_source(source), raw, pages_per_part=pages_per_part)
        raw.commit(code_version="bench", params={}, inputs={})
        t1 = time.perf_counter()
        outs = plan_page_outputs(raw, {"bench": True})
        duplicates = find_duplicate_pages(raw)
        futures = client.map(lambda i, d: extract_part(raw, i, outs, d), range(read["parts"]), duplicates, pure=False)
        stats = client.gather(futures)
        t2 = time.perf_counter()
    sentences = sum(s.get("sentences_kept", 0) for s in stats)
    pages = read["pages_read"]
    return {
        "pages": pages, "parts": read["parts"], "sentences": sentences,
        "read_s": round(t1 - t0, 3), "extract_s": round(t2 - t1, 3),
        "extract_pages_per_s": round(pages / (t2 - t1), 1),
        "extract_sentences_per_s": round(sentences / (t2 - t1), 1),
        "end_to_end_pages_per_s": round(pages / (t2 - t0), 1),
        "peak_rss_mb": round(mem.peak / 2**20, 1),
    }


def bench_flow(source: str, root: str, workers: int, pages_per_part: int) -> dict:
    from flows.build_corpus import build_corpus

    with PeakRSS() as mem:
        t0 = time.perf_counter()
        result = build_corpus(source=source, storage_root=root, read={"pages_per_partition": pages_per_part},
                              dask_workers=workers)
        wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), "pages": result["pages_read"], "sentences": result["sentences"],
            "pages_per_s": round(result["pages_read"] / wall, 1),
            "sentences_per_s": round(result["sentences"] / wall, 1),
            "peak_rss_mb": round(mem.peak / 2**20, 1)}


@app.command()
def main(
    source: str = typer.Option("sample", help="dump path/URL, or 'sample' for the gensim enwiki excerpt"),
    pages_per_part: int = typer.Option(25, help="small parts so that 2 workers have work to share"),
    workers: str = typer.Option("1,2", help="comma-separated worker counts"),
    flow: bool = typer.Option(True, help="also time the whole build-corpus flow"),
    out: Path = typer.Option(Path("benchmarks/results/extraction.json")),
) -> None:
    results = {"source": source, "pages_per_part": pages_per_part, "machine": {
        "cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(), "platform": platform.platform()}, "runs": []}
    for n in [int(w) for w in workers.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            run = {"workers": n, "stages": bench_stages(source, f"{tmp}/stages", n, pages_per_part)}
            if flow:
                with prefect_api():  # one API for this process and the flow's Dask workers
                    run["flow"] = bench_flow(source, f"{tmp}/flow", n, pages_per_part)
        results["runs"].append(run)
        typer.echo(json.dumps(run))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    typer.echo(f"wrote {out}")


if __name__ == "__main__":
    app()
