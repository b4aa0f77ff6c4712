"""Hard-negative mining: time and memory against the number of phrases, and blocking recall.

    python benchmarks/negative_mining.py --sizes 10000,100000 --workers 1,2

Phrases: the corpus's mined phrases, topped up with distinct word n-grams (1-4 words) of
the corpus sentences where the corpus has too few (the gensim sample gives ~18k phrases).
The corpus (sentences, then phrases) is built first from `--source`, untimed.

Timed per size and worker count, on a Dask LocalCluster: the stages after embedding
(q-gram counts, blocking, candidate verification, selection), i.e. what grows with the
pairs. Embedding is linear in the phrases and measured by encode_throughput.py (E5 on
this CPU ~200 phrases/s, on an H100 ~16,000/s): here the vectors are random unit vectors
so that the pair work is what is timed. Peak RSS per Dask worker is sampled every 100 ms.

Recall: blocked candidates (with the block cap) against brute force on `--recall-n` phrases.
"""
from __future__ import annotations

import json
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from phrase_mining import PeakPerProcess  # noqa: E402  (benchmarks/ is on sys.path)

app = typer.Typer(add_completion=False)


def corpus_phrases(source: str, root: str, want: int) -> list[str]:
    """Mined phrases of the corpus (min_freq 2), then distinct corpus n-grams, up to `want`."""
    from phrase_mining import build_sentences, params as mining_params  # benchmarks/ is on sys.path

    from tasks import phrase_occurrences as occ
    from tasks import phrases as ph
    from tasks.word_vectors import word_tokens

    sentences = build_sentences(source, root, 500, None)
    p = mining_params(2000)
    mined = occ.plan_outputs(sentences, p)
    for chunk in occ.plan_chunks(sentences, p["sentences_per_chunk"]):
        occ.write_chunk(sentences, chunk, mined, p)
    occ.commit_outputs(mined, sentences, p)
    rp = {"min_freq": 2, "examples_per_phrase": 1}
    phrases = ph.plan_phrases(mined.occurrences, rp)
    stats = [ph.write_bucket(mined.occurrences, b, phrases, rp) for b in range(p["phrase_buckets"])]
    ph.commit_phrases(phrases, mined.occurrences, rp, stats)
    out = list(dict.fromkeys(phrases.read(columns=["phrase"])["phrase"].to_pylist()))
    seen = {x.casefold() for x in out}
    for batch in sentences.iter_batches(columns=["text"]):
        for text in batch.column(0).to_pylist():
            words = text.rstrip(".").split()
            for n in (2, 3, 1, 4):
                for i in range(len(words) - n + 1):
                    g = " ".join(words[i:i + n])
                    if len(word_tokens(g)) == n and g.casefold() not in seen:
                        seen.add(g.casefold())
                        out.append(g)
            if len(out) >= want:
                return out[:want]
    return out


def write_phrases(root: str, phrases: list[str], buckets: int):
    from pearl_model.phrases.mining import phrase_key
    from storage.datasets import Dataset
    from storage.schemas import PHRASE_EMBEDDINGS, PHRASES
    from tasks.phrase_occurrences import phrase_bucket

    d = Dataset(root, "phrases", f"bench-{len(phrases)}", PHRASES)
    parts = [[] for _ in range(buckets)]
    for p in phrases:
        parts[phrase_bucket(phrase_key(p), buckets)].append(p)
    emb = Dataset(root, "phrase_embeddings", f"bench-{len(phrases)}", PHRASE_EMBEDDINGS)
    rng = np.random.default_rng(0)
    for i, texts in enumerate(parts):
        keys = [phrase_key(t) for t in texts]
        d.write_part(i, pa.Table.from_pylist(
            [{"phrase": t, "phrase_key": k, "lexical_type": "NP", "entity_type": "OTHER", "label": "NP-OTHER",
              "label_id": 18, "frequency": 2, "example_sentence_ids": []} for t, k in zip(texts, keys)], schema=PHRASES))
        v = rng.standard_normal((len(texts), 384)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        emb.write_part(i, pa.table({"phrase_key": keys, "vector": pa.array(list(v), pa.list_(pa.float32()))},
                                   schema=PHRASE_EMBEDDINGS))
    d.commit(code_version="bench", params={}, inputs={})
    emb.commit(code_version="bench", params={}, inputs={})
    return d, emb


def run(phrases, embeddings, workers: int, params: dict) -> dict:
    from dataclasses import replace

    from distributed import Client, LocalCluster

    from pearl_model.pairs import negatives as neg
    from tasks import negatives as stage

    outs = replace(stage.plan_negatives(phrases, params), embeddings=embeddings)
    for d in (outs.blocks, outs.candidates, outs.negatives):  # nothing reused from the previous run
        if d.fs.exists(d.path):
            d.fs.rm(d.path, recursive=True)
    parts = range(params["phrase_buckets"])
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, PeakPerProcess() as mem:
        times = {}
        t = time.perf_counter()
        counts = client.gather(client.map(lambda i: stage.part_gram_counts(phrases, i, params), parts, pure=False))
        merged = neg.merge_gram_counts(counts)
        client.gather(client.map(lambda i: stage.block_part(phrases, i, merged, outs.blocks, params), parts, pure=False))
        stage.commit_step(outs.blocks, phrases, params)
        times["grams_and_blocks_s"] = time.perf_counter() - t
        t = time.perf_counter()
        work = client.gather(client.map(lambda b: stage.candidates_bucket(outs.blocks, b, outs.candidates, params),
                                        range(params["block_buckets"]), pure=False))
        stage.commit_step(outs.candidates, phrases, params, stage.candidate_work(work))
        times["candidates_s"] = time.perf_counter() - t
        t = time.perf_counter()
        client.gather(client.map(lambda i: stage.select_bucket(phrases, i, outs.candidates, embeddings,
                                                               outs.negatives, params), parts, pure=False))
        man = stage.commit_negatives(outs, phrases, params)
        times["select_s"] = time.perf_counter() - t
        pids = set(client.run(os.getpid).values())
    return {"phrases": phrases.manifest()["rows"], "workers": workers, **{k: round(v, 1) for k, v in times.items()},
            "total_s": round(sum(times.values()), 1), "peak_rss_mb_per_worker":
                sorted(round(r / 2**20) for p, r in mem.peaks.items() if p in pids),
            "blocking_keys": outs.blocks.manifest()["rows"], **man["stats"]}


def recall(phrases: list[str], threshold: float, max_block: int) -> dict:
    from pearl_model.pairs import negatives as neg

    t = time.perf_counter()
    exact = {(a, b) for a, b, _ in neg.brute_force_candidates(phrases, threshold)}
    brute_s = time.perf_counter() - t
    t = time.perf_counter()
    pairs, stats = neg.blocked_candidates(phrases, threshold, max_block=max_block)
    blocked_s = time.perf_counter() - t
    found = {(a, b) for a, b, _ in pairs}
    return {"phrases": len(phrases), "max_block": max_block, "brute_force_pairs": len(exact),
            "blocked_pairs": len(found), "recall": round(len(found & exact) / max(len(exact), 1), 4),
            "false_pairs": len(found - exact), "pairs_compared": stats.pairs_compared,
            "all_pairs": len(phrases) * (len(phrases) - 1) // 2, "brute_force_s": round(brute_s, 1),
            "blocked_s": round(blocked_s, 1)}


@app.command()
def main(source: str = typer.Option("sample"), sizes: str = typer.Option("10000,100000"),
         workers: str = typer.Option("1,2"), recall_n: int = typer.Option(20000),
         max_block: int = typer.Option(256), out: Path = typer.Option(Path("benchmarks/results/negative_mining.json"))):
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    sizes_ = [int(s) for s in sizes.split(",")]
    params = {"threshold": 0.7, "block_buckets": 8, "max_block": max_block, "phrase_buckets": 8,
              "backbone": "random-unit-vectors", "max_candidates": 50, "margin": 0.3, "k": 2}
    results = {"machine": {"cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
                           "python": platform.python_version()}, "source": source, "params": params, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        pool = corpus_phrases(source, f"{tmp}/corpus", max(sizes_ + [recall_n]))
        results["phrases_available"] = len(pool)
        random.Random(0).shuffle(pool)
        results["recall"] = recall(pool[:recall_n], 0.7, max_block)
        typer.echo(json.dumps(results["recall"]))
        for n in sizes_:
            if n > len(pool):
                typer.echo(f"only {len(pool)} phrases: skipping {n}")
                continue
            phrases, emb = write_phrases(f"{tmp}/n{n}", pool[:n], params["phrase_buckets"])
            for w in [int(x) for x in workers.split(",")]:
                r = run(phrases, emb, w, params)
                results["runs"].append(r)
                typer.echo(json.dumps(r))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    typer.echo(f"wrote {out}")


if __name__ == "__main__":
    app()
