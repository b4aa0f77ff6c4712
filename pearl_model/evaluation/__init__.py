"""The PEARL phrase benchmark: 9 datasets, any object with `encode()` (and a `name`).

    rows = run_benchmark(encoder, "../shared/benchmarks/pearl")

Rows are {model, task, dataset, metric, value (x100), std, n, paper_value, draws, items,
item_targets} (`common.py`); for each dataset the first row is its primary metric. Missing
datasets are skipped with a message.

The stable protocol: a dataset whose score depends on a random draw is scored over several
(PPDB and PPDB-filtered over the probe `seeds`, at the protocol's patience and at one long enough
that the probe converges; CoNLL-2003 and BC5CDR over `draws` KMeans random states), `value` the
mean and `paper_value` the paper protocol's single draw; every string is encoded once per call,
whatever the datasets and draws that read it. Two models' rows are compared by `stable.py`.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from .analogy import evaluate_analogy
from .autofj import evaluate_autofj
from .classification import evaluate_classification
from .clustering import DRAWS, entity_names, evaluate_clustering
from .common import CachedEncoder
from .data import DatasetMissing, default_benchmark_dir
from .paraphrase import SEEDS, evaluate_ppdb
from .retrieval import evaluate_retrieval
from .similarity import evaluate_bird, evaluate_turney

log = logging.getLogger(__name__)

DATASETS = ["ppdb", "ppdb_filtered", "turney", "bird", "yago-10kdict", "umls-10kdict",
            "conll2003", "bc5cdr", "autofj"]
# Scored when asked for (datasets=[..., "analogy"]), not part of the paper's table: ULR's word analogies;
# short-text classification probes over whatever datasets are put in <benchmark_dir>/classification/.
EXTRA_DATASETS = ["analogy", "classification"]
_ALIASES = {"yago": "yago-10kdict", "umls": "umls-10kdict"}

# The PEARL paper's Table 1 (x100), printed beside our rows and marked as the paper's.
# Its YAGO/UMLS used the full 572K/750K-name dictionaries: not comparable with -10kdict.
PAPER_ROWS = {
    "PEARL-small": dict(zip(DATASETS, [97.2, 69.2, 56.1, 69.7, 48.1, 43.4, 48.7, 61.0, 74.6])),
    "E5-small": dict(zip(DATASETS, [96.0, 56.8, 55.9, 63.1, 43.3, 42.0, 27.6, 53.7, 74.8])),
}


def _runners(seeds, batch_size, draws):
    return {
        "ppdb": lambda m, d: evaluate_ppdb(m, d, filtered=False, seeds=seeds, batch_size=batch_size),
        "ppdb_filtered": lambda m, d: evaluate_ppdb(m, d, filtered=True, seeds=seeds, batch_size=batch_size),
        "turney": lambda m, d: evaluate_turney(m, d, batch_size=batch_size),
        "bird": lambda m, d: evaluate_bird(m, d, batch_size=batch_size),
        "yago-10kdict": lambda m, d: evaluate_retrieval(m, d, "yago", batch_size=batch_size),
        "umls-10kdict": lambda m, d: evaluate_retrieval(m, d, "umls", batch_size=batch_size),
        "conll2003": lambda m, d: evaluate_clustering(m, d, "conll2003", batch_size=batch_size, draws=draws),
        "bc5cdr": lambda m, d: evaluate_clustering(m, d, "bc5cdr", batch_size=batch_size, draws=draws),
        "autofj": lambda m, d: evaluate_autofj(m, d, batch_size=batch_size),
        "analogy": lambda m, d: evaluate_analogy(m, batch_size=batch_size),  # gensim's file, not benchmark_dir
        "classification": lambda m, d: evaluate_classification(m, d, batch_size=batch_size),
    }


# Datasets scored over random draws, and what draws them.
PROBE_DATASETS = ("ppdb", "ppdb_filtered")
CLUSTERING_DATASETS = ("conll2003", "bc5cdr")


def check_draws(datasets, seeds, draws: int) -> None:
    """Refuse fewer than 2 draws for a dataset scored over random draws: one draw has no spread,
    and two models' difference on it no interval."""
    probes = [d for d in datasets if d in PROBE_DATASETS]
    if probes and len(set(seeds)) < 2:
        raise ValueError(f"{', '.join(probes)} score a random probe: give at least 2 distinct probe seeds for a mean "
                         f"and a standard deviation, got {list(seeds)}")
    clusterings = [d for d in datasets if d in CLUSTERING_DATASETS]
    if clusterings and draws < 2:
        raise ValueError(f"{', '.join(clusterings)} score a random KMeans draw: give at least 2 draws (10 is the "
                         f"protocol's), got {draws}")


def run_benchmark(model, benchmark_dir=None, datasets=None, seeds=SEEDS, batch_size=None,
                  draws: int = DRAWS, rows_dir=None, spec: str | None = None) -> list[dict]:
    """Score `model` on the chosen datasets (default: all 9); a model without `encode()`
    (a similarity-only baseline) is scored on AutoFJ only. ``seeds``: the PPDB probes' seeds;
    ``draws``: the clusterings' KMeans random states (0..draws-1). ``rows_dir``: keep each of the
    nine datasets' rows there and read them back while the model ``spec`` (its directory or name),
    the data, the settings and the code are unchanged (``row_cache.py``)."""
    benchmark_dir = benchmark_dir or default_benchmark_dir()
    wanted = [_ALIASES.get(d, d) for d in (datasets or DATASETS)]
    unknown = [d for d in wanted if d not in DATASETS + EXTRA_DATASETS]
    if unknown:
        raise ValueError(f"unknown datasets {unknown}; known: {DATASETS + EXTRA_DATASETS} (and yago, umls)")
    if not hasattr(model, "encode"):
        wanted = [d for d in wanted if d == "autofj"]
    check_draws(wanted, seeds, draws)
    if hasattr(model, "encode"):
        model = CachedEncoder(model)
    runners = _runners(tuple(seeds), batch_size, draws)
    cache = _row_cache(rows_dir, spec, model, benchmark_dir, wanted, seeds, batch_size, draws)
    rows: list[dict] = []
    for name in wanted:
        t0 = time.perf_counter()
        try:
            if cache is not None and name in DATASETS:  # the extras read files outside benchmark_dir
                rows += cache.rows(name, lambda: runners[name](model, benchmark_dir))
            else:
                rows += runners[name](model, benchmark_dir)
        except DatasetMissing as e:
            log.warning("skipping %s: %s", name, e)
            continue
        log.info("%s on %s: %.1f s", getattr(model, "name", model), name, time.perf_counter() - t0)
    if cache is not None:
        log.info("kept rows of %s: %s", getattr(model, "name", model), dict(cache.counts))
    return rows


def _row_cache(rows_dir, spec, model, benchmark_dir, wanted, seeds, batch_size, draws):
    if rows_dir is None:
        return None
    if spec is None:
        raise ValueError("rows_dir needs the model's spec (its directory or name) to key its rows by")
    from .data import autofj_package_dir, files_fingerprint
    from .row_cache import RowCache, model_identity

    settings = {"benchmark": [str(Path(benchmark_dir).resolve()), files_fingerprint(benchmark_dir)],
                # the exact seed list: draws are kept in its order, and paired by position
                "seeds": list(seeds), "draws": draws, "batch_size": batch_size, "name": getattr(model, "name", None)}
    if "autofj" in wanted:
        try:
            settings["autofj"] = files_fingerprint(autofj_package_dir())
        except DatasetMissing:
            pass  # scored as missing, and nothing is kept
    return RowCache(rows_dir, model_identity(spec, getattr(model, "base", model)), settings)


__all__ = ["run_benchmark", "check_draws", "PAPER_ROWS", "DATASETS", "EXTRA_DATASETS", "DatasetMissing", "entity_names",
           "default_benchmark_dir"]
