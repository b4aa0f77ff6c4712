"""Phrase-mining throughput, scaling and the resulting type distributions.

    python benchmarks/phrase_mining.py                                  # the gensim sample dump
    python benchmarks/phrase_mining.py --source data/inputs/ovos_summaries.jsonl --out ...

1. per core: spaCy's `nlp.pipe` (parse + NER, one process) at several batch sizes, and
   the whole `mine()` (screening + parse + NER + constituent rules + typing) at the
   stage's default batch size: sentences/s on one core.
2. scaling: the map stage (`mine-phrases` chunks) on a Dask LocalCluster of 1 and 2
   workers, then the reduce; sentences/s, and peak RSS of each worker process
   (sampled every 100 ms).
3. distributions: lexical and entity types of the phrases kept at min_freq=2, beside the
   paper's lexical mix, and how many distinct phrases survive min_freq.
The corpus (raw_pages -> sentences) is built first with the extraction stages, untimed.
"""
from __future__ import annotations

import json
import os
import platform
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import typer

app = typer.Typer(add_completion=False)


class PeakPerProcess:
    """Peak RSS of every process in this tree, sampled in a thread."""

    def __init__(self, interval: float = 0.1):
        self.interval, self.peaks, self._stop = interval, Counter(), threading.Event()

    def _run(self):
        me = psutil.Process()
        while not self._stop.is_set():
            for p in [me, *me.children(recursive=True)]:
                try:
                    self.peaks[p.pid] = max(self.peaks[p.pid], p.memory_info().rss)
                except psutil.Error:
                    pass
            time.sleep(self.interval)

    def __enter__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join()


def build_sentences(source: str, root: str, pages_per_part: int, max_pages: int | None):
    from storage.datasets import Dataset
    from storage.schemas import RAW_PAGES
    from tasks.pages import commit_page_outputs, extract_part, find_duplicate_pages, plan_page_outputs
    from tasks.raw_pages.sequential import write_raw_pages
    from tasks.raw_pages.xml_dump import resolve_source

    raw = Dataset(root, "raw_pages", "bench", RAW_PAGES)
    read = write_raw_pages(resolve_source(source), raw, pages_per_part=pages_per_part, max_pages=max_pages)
    raw.commit(code_version="bench", params={}, inputs={})
    outs = plan_page_outputs(raw, {"bench": True})
    duplicates = find_duplicate_pages(raw)
    for i in range(read["parts"]):
        extract_part(raw, i, outs, duplicates[i])
    commit_page_outputs(outs, raw, {"bench": True})
    return outs.sentences


def bench_per_core(texts: list[str], batch_sizes: list[int]) -> dict:
    from pearl_model.phrases.mining import make_ner, make_parser, mine

    parser = make_parser("spacy")
    parser.nlp.pipe(texts[:200])  # warm-up
    pipe = {}
    for bs in batch_sizes:
        t0 = time.perf_counter()
        for _ in parser.nlp.pipe(texts, batch_size=bs):
            pass
        pipe[bs] = round(len(texts) / (time.perf_counter() - t0), 1)
    t0 = time.perf_counter()
    occ, stats = mine(texts, parser, make_ner("spacy"))
    wall = time.perf_counter() - t0
    return {"sentences": len(texts), "nlp_pipe_sentences_per_s_by_batch_size": pipe,
            "mine_sentences_per_s": round(len(texts) / wall, 1), "mine_batch_size": parser.batch_size,
            "occurrences_per_sentence": round(stats["occurrences_found"] / max(stats["sentences_parsed"], 1), 2)}


def params(chunk: int) -> dict:
    return {"parser": "spacy", "parser_options": {}, "ner": "spacy", "ner_options": {}, "language": "en",
            "max_sentence_chars": 600, "min_words": 1, "max_words": 8, "phrase_buckets": 8,
            "examples_per_phrase": 3, "sentences_per_chunk": chunk}


def bench_dask(sentences, workers: int, chunk: int, min_freq: int) -> tuple[dict, object, object]:
    from distributed import Client, LocalCluster

    from tasks import phrase_occurrences as occ
    from tasks import phrases as ph

    p = params(chunk)
    p["bench_workers"] = workers  # a fresh version per run, so nothing is reused
    out = occ.plan_outputs(sentences, p)
    chunks = occ.plan_chunks(sentences, chunk)
    rp = {"min_freq": min_freq, "examples_per_phrase": 3}
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, PeakPerProcess() as mem:
        # Load spaCy in every worker first: a one-off cost, not throughput.
        client.run(lambda: occ.backends(p) and None)
        t0 = time.perf_counter()
        client.gather(client.map(lambda c: occ.write_chunk(sentences, c, out, p), chunks, pure=False))
        t1 = time.perf_counter()
        occ.commit_outputs(out, sentences, p)
        phrases = ph.plan_phrases(out.occurrences, rp)
        stats = client.gather(client.map(lambda b: ph.write_bucket(out.occurrences, b, phrases, rp),
                                         range(p["phrase_buckets"]), pure=False))
        ph.commit_phrases(phrases, out.occurrences, rp, stats)
        t2 = time.perf_counter()
        worker_pids = set(client.run(os.getpid).values())
    n = sentences.manifest()["rows"]
    peaks = [round(rss / 2**20, 1) for pid, rss in mem.peaks.items() if pid in worker_pids]
    return ({"workers": workers, "chunks": len(chunks), "sentences": n, "map_s": round(t1 - t0, 2),
             "map_sentences_per_s": round(n / (t1 - t0), 1), "reduce_s": round(t2 - t1, 2),
             "peak_rss_mb_per_worker": sorted(peaks)}, out, phrases)


def distributions(out, phrases) -> dict:
    from pearl_model.phrases.labels import PAPER_LEXICAL_SHARE
    from tasks.phrase_report import phrase_counts, type_distributions

    counts = phrase_counts(out.stats, phrases)
    lexical, entity = type_distributions(phrases)
    total = sum(lexical.values()) or 1
    return {"counts": counts,
            "lexical_share_pct": {t: round(100 * lexical.get(t, 0) / total, 1) for t in PAPER_LEXICAL_SHARE},
            "paper_lexical_share_pct": PAPER_LEXICAL_SHARE,
            "entity_types": dict(entity.most_common())}


@app.command()
def main(
    source: str = typer.Option("sample", help="dump path/URL or JSONL, or 'sample' for the gensim enwiki excerpt"),
    pages_per_part: int = typer.Option(500),
    chunk: int = typer.Option(1000, help="sentences per mining task"),
    workers: str = typer.Option("1,2"),
    per_core_sentences: int = typer.Option(3000, help="sentences for the one-core measurement"),
    min_freq: int = typer.Option(2),
    max_pages: int = typer.Option(None, help="a slice of the input, for a quick try"),
    out: Path = typer.Option(Path("benchmarks/results/phrase_mining.json")),
) -> None:
    results = {"source": source, "machine": {
        "cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(), "platform": platform.platform()}, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        sentences = build_sentences(source, tmp, pages_per_part, max_pages)
        texts = sentences.read(columns=["text"])["text"].to_pylist()[:per_core_sentences]
        results["per_core"] = bench_per_core(texts, [64, 256, 1000])
        typer.echo(json.dumps(results["per_core"]))
        for n in [int(w) for w in workers.split(",")]:
            run, occ_out, phrases = bench_dask(sentences, n, chunk, min_freq)
            results["runs"].append(run)
            typer.echo(json.dumps(run))
        results["distributions"] = distributions(occ_out, phrases)
        typer.echo(json.dumps(results["distributions"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    typer.echo(f"wrote {out}")


if __name__ == "__main__":
    app()
