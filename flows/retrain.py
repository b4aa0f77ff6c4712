"""`retrain`: build-corpus -> train -> evaluate against the current model -> promotion gate.

What the scheduled deployment `retrain/weekly` runs. Each step is versioned by its inputs, so
when the dump did not change the corpus stages all reuse their datasets and training reuses
its model; a new candidate is scored in the same `evaluate` run as the current model and
promoted only through the gate (`tasks.promotion`). A run that fails at any step leaves the
current model as it was, and its `promotion-decision` artifact names the step that failed.

Training runs in this flow run, or, with `train_deployment` (the scheduled deployment sets
`train/pearl-gpu`), as a run of that deployment on its own work pool: the GPU pool, while the
corpus and the evaluation stay on the CPU pool.
"""
from __future__ import annotations

import inspect
from typing import Annotated, Optional, Union

from pydantic import Field

from flows.build_corpus import build_corpus
from flows.corpus_config import STAGES, group_settings
from flows.evaluate import evaluate
from flows.parameters import Settings, Text, flow
from flows.train import train
from pearl_model.training.config import TrainConfig
from tasks.promotion import StageTracker, current_model_task, dataset_links_task, gate_task
from tasks.training import model_directory_task, train_on_deployment_task

# build-corpus / train parameters that retrain sets itself.
_OWN = {"source", "storage_root", "dask_address", "dask_workers", "training_set_version", "evaluate_model"}


def _nest(options: dict, fn, groups: dict, what: str) -> dict:
    """A flat dict of ``fn``'s parameters and its settings groups' fields (TrainConfig's, a stage's) ->
    ``fn``'s keyword arguments; each group's fields are checked by its model here, before any work."""
    grouped, rest = group_settings(options, groups)
    known = set(inspect.signature(fn.fn).parameters) - _OWN - set(groups)
    unknown = sorted(set(rest) - known)
    if unknown:
        raise ValueError(f"unknown {what} option(s) {unknown}; known: "
                         f"{sorted(known | {f for m in groups.values() for f in m.model_fields})}")
    return rest | {g: model.model_dump(mode="json", exclude_unset=True) for g, model in grouped.items()}


@flow(name="retrain")
def retrain(
    source: Union[Text, list[Text]] = "sample",
    storage_root: Text = "data",
    corpus: Optional[Settings] = None,
    training: Optional[Settings] = None,
    train_deployment: Optional[Text] = None,
    train_timeout_hours: float = 24.0,
    benchmark_datasets: Optional[list[Text]] = None,
    benchmark_dir: Optional[Text] = None,
    eval_seeds: list[int] = [0, 1, 2],
    average_tolerance: float = 0.5,
    dataset_tolerance: float = 3.0,
    alias_tolerance: Optional[Annotated[float, Field(ge=0)]] = None,
    dask_address: Optional[Text] = None,
    dask_workers: int = 2,
) -> dict:
    """Rebuild the corpus if its input changed, train, evaluate, and promote the new model only
    if it is at least as good as the current one.

    Args:
        source: the dump(s) build-corpus reads (see build-corpus).
        storage_root: datasets, models and the model registry (local path or fsspec URL).
        corpus: more build-corpus parameters and stage settings in one flat dict, e.g.
            {"max_pages": 100, "parser": "benepar"} (flows/corpus_config.py: which stage each is).
        training: train parameters and training settings (TrainConfig's fields) in one dict, e.g.
            {"epochs": 2, "batch_size": 512} or {"max_steps": 10, "char_epochs": 1}.
        train_deployment: train through this deployment (e.g. "train/pearl-gpu", on the GPU work
            pool) instead of in this run.
        train_timeout_hours: how long to wait for the training deployment's run.
        benchmark_datasets: the benchmark subset the gate compares on (none: all 9).
        benchmark_dir: the benchmark files (default ../shared/benchmarks/pearl or $PEARL_BENCHMARKS).
        eval_seeds: PPDB classifier seeds (at least 2: each change has an interval).
        average_tolerance: promote only if the 95% interval of the benchmark average change
            (paired, same run) lies above minus this many points (x100 scores): the run can see
            the candidate is at most this much worse.
        dataset_tolerance: ... and no dataset's interval lies wholly below minus this many points.
        alias_tolerance: an extra check when given: the candidate's top-1 on the corpus's held-out
            aliases must not drop in training (exported vs before) by more than this many points.
        dask_address: an existing Dask scheduler for the corpus and the evaluation; none starts
            a local cluster.
        dask_workers: workers of the local cluster.
    """
    # one flat dict each for the user: stage settings go in build-corpus's per-stage parameters, TrainConfig's
    # fields in train's `training`
    corpus = _nest(dict(corpus or {}), build_corpus, STAGES, "corpus")
    training = _nest(dict(training or {}), train, {"training": TrainConfig}, "training")
    current = current_model_task(storage_root)
    with StageTracker(current and current["version"]) as stage:
        stage.at("build-corpus")
        built = build_corpus(source=source, storage_root=storage_root, dask_address=dask_address,
                             dask_workers=dask_workers, **corpus)
        dataset_links_task(storage_root, built["versions"])

        stage.at("train")
        params = {"training_set_version": built["versions"]["training_set"], "storage_root": storage_root,
                  "evaluate_model": False, **training}
        if train_deployment:
            trained = train_on_deployment_task(train_deployment, params, train_timeout_hours * 3600)
        else:
            trained = train(**params)
        version = trained["model"]["version"]
        candidate = {"version": version,
                     "dir": model_directory_task(storage_root, version)}

        evaluation = None
        if current is None or current["version"] != version:
            stage.at("evaluate")
            models = [candidate["dir"]] + ([current["dir"]] if current else [])
            evaluation = evaluate(models=models, benchmark_dir=benchmark_dir, datasets=benchmark_datasets,
                                  seeds=eval_seeds, storage_root=storage_root, map_model=candidate["dir"],
                                  dask_address=dask_address, dask_workers=dask_workers)

        stage.at("promotion-gate")
        decision = gate_task(storage_root, candidate, current, evaluation, average_tolerance, dataset_tolerance,
                             alias_tolerance)
    return {"corpus": built["versions"], "model": version, "current_before": current and current["version"],
            "evaluation": evaluation and evaluation["version"], **decision}


if __name__ == "__main__":
    retrain()
