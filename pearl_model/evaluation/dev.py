"""Dev data: what a recipe is chosen on. The test splits are scored once, for the final recipe.

CoNLL-2003 and BC5CDR ship a `dev.json` (clustered as the test files are); PPDB and
PPDB-filtered score the probe's validation split (the 15% its early stopping watches) instead
of its test split. The other five datasets have no dev split and are not used for choosing.

The dev probe waits longer than the test protocol's (patience `DEV_PROBE_PATIENCE` epochs, not
5): on PPDB-filtered the probe sits on a plateau near the majority rate for its first epochs, and
with patience 5 nine seeds of ten stop there on the backbone (54.8 against 61.8 at patience 20;
`benchmarks/probe_stability.py`), so one seed's score flips between two levels from check to
check and the selection's mean ranks that luck. The test splits keep the authors' protocol.

An inference engine's check (`benchmarks/benchmark_by_engine.py --dev`, the int8 recipes) clusters
`ENGINE_DRAWS` random halves of each dev set instead (`ENGINE_SUBSAMPLE`; `clustering` says why):
the ten random states of one whole set saw no change where the test set moved beyond the bar.

Scores are the stable protocol's (`common.draws_row`): the clusterings over KMeans random states,
the probe over its seeds, so that a checkpoint's change against the backbone has an interval.
"""
from __future__ import annotations

from .clustering import DRAWS, evaluate_clustering
from .paraphrase import CONVERGED_PATIENCE, evaluate_ppdb

DEV_SPLITS = {"ppdb": "validation", "ppdb_filtered": "validation", "conll2003": "dev", "bc5cdr": "dev"}
DEV_PROBE_PATIENCE = CONVERGED_PATIENCE
ENGINE_DRAWS, ENGINE_SUBSAMPLE = 40, 0.5


def run_dev_benchmark(encoder, benchmark_dir, datasets=tuple(DEV_SPLITS), seeds=(0, 1, 2),
                      batch_size: int | None = None, patience: int = DEV_PROBE_PATIENCE,
                      draws: int = DRAWS, subsample: float | None = None) -> list[dict]:
    """Rows as `run_benchmark`'s, each with its dataset named `<dataset>:<split>`: the probe over
    ``seeds`` at ``patience``, the clusterings over ``draws`` KMeans random states (each of a random
    ``subsample`` share of the occurrences, when given)."""
    unknown = sorted(set(datasets) - set(DEV_SPLITS))
    if unknown:
        raise ValueError(f"no dev split for {unknown}; datasets with one: {sorted(DEV_SPLITS)}")
    rows = []
    for name in datasets:
        split = DEV_SPLITS[name]
        if name.startswith("ppdb"):
            got = evaluate_ppdb(encoder, benchmark_dir, filtered=name == "ppdb_filtered", seeds=seeds,
                                batch_size=batch_size, split=split, patience=patience, converged_patience=None)
        else:
            got = evaluate_clustering(encoder, benchmark_dir, name, batch_size=batch_size, split=split, draws=draws,
                                      subsample=subsample)
        rows += [r | {"dataset": f"{name}:{split}"} for r in got]
    return rows
