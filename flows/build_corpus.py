"""`build-corpus`: input dump -> raw_pages -> pages, sentences, aliases (+ quarantine).

Later stages (parsing, NER, augmentation, negatives) chain onto `extract-corpus`'s
outputs. The outer flow exists so that the Dask cluster is a parameter of the run.
"""
from __future__ import annotations

from typing import Literal, Optional

from prefect import flow, unmapped

from flows.dask_runner import dask_task_runner
from tasks.aliases import alias_bucket_task, commit_aliases_task, plan_aliases_task
from tasks.corpus_report import corpus_report_task
from tasks.pages import commit_page_outputs_task, extract_part_task, plan_page_outputs_task
from tasks.raw_pages import plan_raw_pages_task, raw_pages_task


@flow(name="extract-corpus")
def extract_corpus(
    source: str,
    storage_root: str,
    input_format: str,
    pages_per_partition: int,
    max_page_bytes: int,
    max_pages: Optional[int],
    alias_buckets: int,
    min_sentence_words: int,
    max_sentence_chars: int,
) -> dict:
    read_params = {"input_format": input_format, "pages_per_part": pages_per_partition,
                   "max_page_bytes": max_page_bytes, "max_pages": max_pages}
    raw = plan_raw_pages_task(source, storage_root, read_params)
    raw_manifest = raw_pages_task.submit(source, raw, read_params).result()

    page_params = {"alias_buckets": alias_buckets, "min_sentence_words": min_sentence_words,
                   "max_sentence_chars": max_sentence_chars}
    pages = plan_page_outputs_task(raw, page_params)
    parts = range(len(raw_manifest["parts"]))
    part_stats = extract_part_task.map(unmapped(raw), parts, unmapped(pages), unmapped(page_params)).result()
    commit_page_outputs_task(pages, raw, page_params, part_stats)

    alias_params = {"alias_buckets": alias_buckets}
    aliases = plan_aliases_task(pages.alias_mentions, alias_params)
    alias_bucket_task.map(unmapped(pages.alias_mentions), range(alias_buckets), unmapped(aliases)).result()
    commit_aliases_task(aliases, pages.alias_mentions, alias_params)

    return corpus_report_task(raw, pages.pages, pages.sentences, pages.quarantine, pages.alias_mentions, aliases)


@flow(name="build-corpus")
def build_corpus(
    source: str = "sample",
    storage_root: str = "data",
    input_format: Literal["auto", "mediawiki-xml", "jsonl"] = "auto",
    pages_per_partition: int = 500,
    max_page_bytes: int = 4 * 1024 * 1024,
    max_pages: Optional[int] = None,
    alias_buckets: int = 8,
    min_sentence_words: int = 3,
    max_sentence_chars: int = 1000,
    dask_address: Optional[str] = None,
    dask_workers: int = 2,
) -> dict:
    """Build the corpus datasets from a Wikipedia dump.

    Args:
        source: dump location (local path or fsspec URL; `.xml`, `.xml.bz2`, `.jsonl`), or
            "sample" for the enwiki excerpt shipped with gensim 4.4.0.
        storage_root: where datasets are written (local path or fsspec URL).
        input_format: "auto" guesses from the file name.
        pages_per_partition: pages per Parquet part and per Dask task.
        max_page_bytes: larger pages are quarantined as too_large.
        max_pages: stop after this many pages (a slice for trying things out).
        alias_buckets: reducers for the alias map-reduce.
        min_sentence_words: shorter sentences are dropped.
        max_sentence_chars: longer sentences are dropped.
        dask_address: an existing Dask scheduler (tcp://host:8786); none starts a local cluster.
        dask_workers: worker processes of the local cluster.
    """
    run = extract_corpus.with_options(task_runner=dask_task_runner(dask_address, dask_workers))
    return run(source, storage_root, input_format, pages_per_partition, max_page_bytes, max_pages,
               alias_buckets, min_sentence_words, max_sentence_chars)


if __name__ == "__main__":
    build_corpus()
