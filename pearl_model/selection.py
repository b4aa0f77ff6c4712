"""Which checkpoint of a run is kept: the one whose exported (averaged) weights score best on dev data.

Along a CPU run the dev scores do not rise together: the PPDB probes gain steadily, while the
entity clusterings jump between two layouts from one checkpoint to the next (README
"Training"). The last checkpoint is therefore a poor default. A run with
``TrainConfig.select_every`` scores its checkpoints as they will be exported (backbone averaged
with the original) on the dev splits and its held-out aliases, and keeps the checkpoint whose
worst change against the backbone is the largest (ties: the larger mean change). Only dev
splits and the corpus's own held-out aliases are read; the test splits never are.
"""
from __future__ import annotations

import logging
import statistics
from contextlib import contextmanager
from typing import Callable

import torch

from .evaluation.dev import run_dev_benchmark
from .evaluation.scores import primary_scores

log = logging.getLogger(__name__)

# PPDB's full probe is left out: it takes ~10x the others' time and it gains on every run measured.
SELECT_DATASETS = ("conll2003", "bc5cdr", "ppdb_filtered")


def dev_scores(encoder, benchmark_dir, retrieval=None, datasets=SELECT_DATASETS, seeds=(0,)) -> dict[str, float]:
    """x100 scores of ``encoder``: each dev dataset's primary metric (probe seeds averaged),
    its unit-vector clustering as ``<dataset>/l2``, and ``heldout_alias_top1``/``_mrr``."""
    from .training import alias_retrieval

    rows = run_dev_benchmark(encoder, benchmark_dir, datasets=tuple(datasets), seeds=tuple(seeds)) \
        if datasets else []
    out = {dataset: mean for (_, dataset), (mean, _, _) in primary_scores(rows).items()}
    out |= {f"{r['dataset']}/l2": r["value"] for r in rows if r["metric"] == "nmi_l2norm"}
    if retrieval is not None:
        out |= {f"heldout_{k}": 100 * v for k, v in alias_retrieval(encoder.encode, retrieval).items()}
    return out


def criteria(scores: dict[str, float]) -> list[str]:
    """The scores a selection compares: primaries and held-out top-1 (not the /l2 or MRR views)."""
    return [k for k in scores if "/" not in k and k != "heldout_alias_mrr"]


def selection_score(scores: dict[str, float], baseline: dict[str, float]) -> tuple[float, float]:
    """(worst, mean) change against ``baseline`` over the criteria both have; larger is better."""
    deltas = [scores[k] - baseline[k] for k in criteria(scores) if k in baseline]
    if not deltas:
        raise ValueError(f"no score in common with the baseline: {sorted(scores)} vs {sorted(baseline)}")
    return min(deltas), statistics.mean(deltas)


@contextmanager
def exported_weights(model, original: dict[str, torch.Tensor], average_weight: float, char_scale: float = 1.0):
    """``model`` holding the weights its export will have (backbone averaged, character part
    scaled), restored afterwards."""
    from .export import average_state_dicts, head_state

    trained = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.backbone.load_state_dict(average_state_dicts(model.backbone.state_dict(), original, average_weight))
    if char_scale != 1.0:
        with torch.no_grad():
            for name, value in head_state(model, char_scale).items():
                model.get_parameter(name).copy_(value)
    try:
        yield model
    finally:
        model.load_state_dict(trained)


def dev_selector(benchmark_dir, original: dict[str, torch.Tensor], average_weight: float, baseline: dict,
                 retrieval=None, datasets=SELECT_DATASETS, char_scale: float = 1.0
                 ) -> Callable[[torch.nn.Module], dict]:
    """What ``train(select=...)`` calls at its selection points: the model's scores as exported,
    with ``select_worst``/``select_mean`` against ``baseline`` (the backbone's :func:`dev_scores`)."""
    from .export import PearlEncoder

    def select(model) -> dict:
        with exported_weights(model, original, average_weight, char_scale):
            scores = dev_scores(PearlEncoder(model, name="selection"), benchmark_dir, retrieval, datasets)
        worst, mean = selection_score(scores, baseline)
        return {**{f"dev_{k}": v for k, v in scores.items()}, "select_worst": worst, "select_mean": mean}

    return select
