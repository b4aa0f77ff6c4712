"""Which checkpoint of a run is kept: the one whose exported (averaged) weights score best on dev data.

Along a CPU run the dev scores do not rise together: the PPDB probes gain steadily, while the
entity clusterings jump between two layouts from one checkpoint to the next
(docs/research/recipe-checkpoint-selection.md). The last checkpoint is therefore a poor default. A run with
``TrainConfig.select_every`` scores its checkpoints as they will be exported (backbone averaged
with the original) on the dev splits and its held-out aliases, and keeps the best by
:func:`rank`: with rule ``worst``, the checkpoint whose worst change against the backbone is the
largest (ties: the larger mean change); with rule ``mean``, among the checkpoints at or above the
backbone on every dev signal the one with the largest mean change (none such: as ``worst``).
Only dev splits, the corpus's own held-out aliases and WordNet's synonyms (name variants, which
no benchmark dev split has: :mod:`pearl_model.evaluation.synonym_retrieval`) are read; the test splits never are.

Each record also holds every criterion's change against the backbone with its 95% interval
(``select_changes``; :mod:`pearl_model.evaluation.stable`: the clusterings paired over KMeans random
states, the probe over its seeds, the retrieval signals by a paired bootstrap over their queries),
so that the log and the training report say where a change is "no difference". The rule ranks the
changes themselves.

The backbone's own rows (the bar) are the same on every run with the same inputs: :func:`baseline_key`
names all of them (the backbone's files, the dev files, the held-out aliases and WordNet tasks as
drawn, the engine and the scoring code), and :func:`dev_selection` hands it to its caller's ``keep``,
which may serve rows kept from an earlier run under exactly that key instead of computing them.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import statistics
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Sequence

import torch

from pearl_model.evaluation.alias_retrieval import AliasRetrieval, alias_rows
from pearl_model.evaluation.common import CachedEncoder, l2_normalize
from pearl_model.evaluation.data import PPDB_FILES, default_benchmark_dir, entities_file
from pearl_model.evaluation.dev import DEV_SPLITS, run_dev_benchmark
from pearl_model.evaluation.row_cache import code_identity
from pearl_model.evaluation.scores import primary_rows
from pearl_model.evaluation.stable import paired_difference
from pearl_model.evaluation.synonym_retrieval import group_tasks, lexname_of, wordnet_synonym_task
from pearl_model.inference.export import PearlEncoder, average_state_dicts, head_state
from pearl_model.inference.checksums import sha256_file
from pearl_model.inference.loading import load_encoder, model_digest
from pearl_model.pairs.synonyms import WordNetNotFoundError, wordnet_reader

log = logging.getLogger(__name__)

# PPDB's full probe is left out: it takes ~10x the others' time and it gains on every run measured.
SELECT_DATASETS = ("conll2003", "bc5cdr", "ppdb_filtered")
# Two probe seeds: the fewest that give the probe's change an interval (each costs a probe run per check).
SELECT_SEEDS = (0, 1)
RETRIEVAL_METRICS = ("top1", "mrr")


def dev_rows(encoder, benchmark_dir, retrieval=None, datasets=SELECT_DATASETS, seeds=SELECT_SEEDS,
             synonyms=None) -> dict[str, dict]:
    """Score name -> its benchmark row (the stable protocol's, x100): each dev dataset's primary
    metric, its unit-vector clustering as ``<dataset>/l2``, ``heldout_alias_top1``/``_mrr``
    (``retrieval``) and ``<name>_top1``/``_mrr`` of each WordNet task (``synonyms``:
    :func:`synonym_signal`'s name -> AliasRetrieval, or one AliasRetrieval, named ``wordnet_synonym``)."""
    rows = run_dev_benchmark(encoder, benchmark_dir, datasets=tuple(datasets), seeds=tuple(seeds)) \
        if datasets else []
    out = {dataset: r for (_, dataset), r in primary_rows(rows).items()}
    out |= {f"{r['dataset']}/l2": r for r in rows if r["metric"] == "nmi_l2norm"}
    if isinstance(synonyms, AliasRetrieval):
        synonyms = {"wordnet_synonym": synonyms}
    signals = ({"heldout_alias": retrieval} if retrieval is not None else {}) | dict(synonyms or {})
    for name, task in signals.items():
        out |= {f"{name}_{r['metric']}": r for r in alias_rows(encoder, name, task)}
    return out


def dev_scores(encoder, benchmark_dir, retrieval=None, datasets=SELECT_DATASETS, seeds=SELECT_SEEDS,
               synonyms=None) -> dict[str, float]:
    """:func:`dev_rows`' values."""
    return {k: r["value"] for k, r in dev_rows(encoder, benchmark_dir, retrieval, datasets, seeds, synonyms).items()}


def dev_changes(rows: dict[str, dict], baseline: dict[str, dict]) -> dict[str, list[float]]:
    """Each criterion's change against the baseline's rows as [change, low, high] (95%)."""
    out = {}
    for k in criteria(rows):
        if k in baseline:
            d = paired_difference(rows[k], baseline[k])
            out[k] = [round(d.change, 3), round(d.low, 3), round(d.high, 3)]
    return out


def changes_text(changes: dict[str, list[float]]) -> str:
    """The changes an interval can see, or "no difference" when it holds 0 for every criterion."""
    seen = [f"{k} {c:+.1f} [{lo:+.1f}, {hi:+.1f}]" for k, (c, lo, hi) in changes.items() if lo > 0 or hi < 0]
    return "; ".join(seen) or "no difference on any dev signal"


def criteria(scores: dict[str, float]) -> list[str]:
    """The scores a selection compares: primaries and retrieval top-1 (not the /l2 or MRR views)."""
    return [k for k in scores if "/" not in k and not k.endswith("_mrr")]


def selection_score(scores: dict[str, float], baseline: dict[str, float]) -> tuple[float, float]:
    """(worst, mean) change against ``baseline`` over the criteria both have; larger is better."""
    deltas = [scores[k] - baseline[k] for k in criteria(scores) if k in baseline]
    if not deltas:
        raise ValueError(f"no score in common with the baseline: {sorted(scores)} vs {sorted(baseline)}")
    return min(deltas), statistics.mean(deltas)


def rank(rec: dict, rule: str = "worst") -> tuple:
    """The sort key of a selection record under ``rule`` (larger is better; ties are the caller's
    to break). Rule ``mean`` mirrors a bar of "no dev signal lost, then the largest gain": a
    checkpoint losing nothing outranks every one that loses something."""
    worst, mean = rec["select_worst"], rec["select_mean"]
    if rule == "worst":
        return 0, worst, mean
    if rule == "mean":
        return (1, mean, worst) if worst >= 0 else (0, worst, mean)
    raise ValueError(f"select_rule must be 'worst' or 'mean', got {rule!r}")


@contextmanager
def exported_weights(model, original: dict[str, torch.Tensor], average_weight: float, char_scale: float = 1.0):
    """``model`` holding the weights its export will have (backbone averaged, character part
    scaled), restored afterwards."""
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


class ScaledVectors(CachedEncoder):
    """An encoder's raw vectors, computed once per phrase, with the character part scaled.

    Scaling the vectors is what exporting at another ``char_scale`` does to them (the character
    projection is linear), so the dev sets are encoded once and scored at every scale."""

    def __init__(self, base, backbone_dim: int | None, name: str = "scaled"):
        super().__init__(base, name)
        self.backbone_dim, self.scale = backbone_dim, 1.0

    def encode(self, phrases, normalize: bool = True, batch_size: int | None = None, **_):
        x = self.raw(phrases, batch_size or 128)  # a fresh array: scaled in place
        if self.backbone_dim is not None:
            x[:, self.backbone_dim:] *= self.scale
        return l2_normalize(x) if normalize else x


def dev_selector(benchmark_dir, original: dict[str, torch.Tensor], average_weight: float, baseline: dict,
                 retrieval=None, datasets=SELECT_DATASETS, char_scales: Sequence[float] = (1.0,), synonyms=None
                 ) -> Callable[[torch.nn.Module], dict]:
    """What ``train(select=...)`` calls at its selection points: the model's scores as exported,
    with ``select_worst``/``select_mean`` against ``baseline`` (the backbone's :func:`dev_rows`) and
    each criterion's change with its interval (``select_changes``).

    With several ``char_scales`` each checkpoint is scored at each (encoded once) and the record
    is that of its best scale, named in ``char_scale``; ``scores_by_scale`` keeps them all. Why: the
    character part's spread can move KMeans' boundary (BC5CDR's abbreviations against words), by
    an amount that differs from one checkpoint to the next (docs/research/recipe-seeds.md)."""
    values = {k: r["value"] for k, r in baseline.items()}
    scales = list(dict.fromkeys(float(s) for s in char_scales))
    if not scales or not all(s > 0 for s in scales):
        raise ValueError(f"char_scales must be one or more values > 0, got {list(char_scales)!r}")

    def select(model, weight: float = average_weight) -> dict:
        with exported_weights(model, original, weight):
            enc = ScaledVectors(PearlEncoder(model, name="selection"),
                                model.backbone_dim if model.char_proj is not None else None)
            rows_by_scale = {}
            for scale in scales:
                enc.scale = scale
                rows_by_scale[scale] = dev_rows(enc, benchmark_dir, retrieval, datasets, synonyms=synonyms)
        by_scale = {s: {k: r["value"] for k, r in rows.items()} for s, rows in rows_by_scale.items()}
        ranked = {s: selection_score(v, values) for s, v in by_scale.items()}
        best = max(scales, key=lambda s: ranked[s])  # ties: the first listed
        worst, mean = ranked[best]
        return {**{f"dev_{k}": v for k, v in by_scale[best].items()}, "select_worst": worst, "select_mean": mean,
                "select_changes": dev_changes(rows_by_scale[best], baseline),
                "char_scale": best, "average_weight": weight,
                **({"scores_by_scale": {str(s): v for s, v in by_scale.items()}} if len(scales) > 1 else {})}

    return select


def seen_names(examples) -> set[str]:
    """The strings a training set teaches (phrases, cached positives but context sentences, hard
    negatives): what the WordNet synonym signal leaves out."""
    seen = set()
    for ex in examples:
        seen.add(ex.phrase)
        seen.update(n for kind, texts in ex.cached.items() if kind != "context" for n in texts)
        seen.update(ex.negatives)
    return seen


def synonym_signal(pairs: int, seen: set[str], seed: int = 0) -> dict | None:
    """The WordNet synonym retrieval of ``pairs`` pairs none of whose names are in ``seen``, as
    ``wordnet_synonym`` and per group of names (``wordnet_<group>``: the same queries among the same
    candidates, split by kind; a model can gain on the mean and lose the clinical names UMLS-10k
    holds, docs/research/recipe-name-variants.md). None: ``pairs`` 0, or no WordNet here, with a warning."""
    if not pairs:
        return None
    try:
        wordnet = wordnet_reader()
        task = wordnet_synonym_task(pairs, exclude=seen, seed=seed, wordnet=wordnet)
    except WordNetNotFoundError as e:
        log.warning("no WordNet synonym dev signal: %s", e)
        return None
    if task is None:
        return None
    groups = {f"wordnet_{re.sub(r'[^a-z]+', '_', group).strip('_')}": t
              for group, t in group_tasks(task, lexname_of(wordnet)).items() if t.aliases}
    return {"wordnet_synonym": task, **groups}


def dev_files(datasets: Sequence[str]) -> dict[str, str]:
    """Dataset -> the benchmark file its dev split is read from (relative to the benchmark directory)."""
    return {d: PPDB_FILES[d == "ppdb_filtered"] if d.startswith("ppdb") else entities_file(d, DEV_SPLITS[d])
            for d in datasets}


def task_digest(task: AliasRetrieval | None) -> str | None:
    """SHA-256 of a retrieval task's queries, candidates and answers (None: no task)."""
    if task is None:
        return None
    return hashlib.sha256(json.dumps([task.aliases, task.titles, task.gold]).encode("utf-8", "surrogatepass")).hexdigest()


def scoring_code_digest() -> str:
    """The scoring and encoding code (pearl_model/evaluation, pearl_model/inference and this module)
    and the numeric packages' versions, as the kept evaluation rows key them."""
    return code_identity((Path(__file__),))


def baseline_key(backbone: str, cache_dir: str | None, device: str, benchmark_dir, datasets: Sequence[str],
                 retrieval: AliasRetrieval | None, synonyms: dict | None) -> dict | None:
    """Everything the backbone's :func:`dev_rows` are a function of, as JSON: the backbone's name and
    the SHA-256 of its files, each dev file's SHA-256, the datasets and probe seeds, the held-out aliases
    and each WordNet task as drawn (``seen``'s exclusion included), the engine (backend, device,
    dtype) and the scoring code with its libraries' versions. None where the backbone has no local
    files to digest (a hub name): such rows are never kept."""
    digest = model_digest(backbone, cache_dir)
    if digest is None:
        return None
    engine = {"backend": "torch", "device": device, "dtype": str(torch.get_default_dtype()),
              **({"gpu": torch.cuda.get_device_name(device)} if device.startswith("cuda") else {})}
    return {"backbone": backbone, "backbone_files": digest,
            "dev_files": {d: sha256_file(Path(benchmark_dir) / f) for d, f in dev_files(datasets).items()},
            "datasets": list(datasets), "seeds": list(SELECT_SEEDS), "metrics": list(RETRIEVAL_METRICS),
            "heldout_aliases": task_digest(retrieval),
            "synonyms": {name: task_digest(t) for name, t in sorted((synonyms or {}).items())},
            "engine": engine, "scoring_code": scoring_code_digest()}


def dev_selection(backbone: str, cfg, original: dict, retrieval, device: str, benchmark_dir: str | None = None,
                  cache_dir: str | None = None, seen: set[str] = frozenset(),
                  keep: Callable[[dict | None, Callable[[], dict]], dict] | None = None):
    """The `select` callable of a run with `select_every` > 0 (dev splits of the benchmark, the
    held-out aliases and WordNet synonyms none of whose names are in ``seen``, compared with the
    backbone's rows) and the backbone's scores. ``keep(key, compute)``: the rows of
    :func:`baseline_key`'s ``key``, kept from an earlier run or ``compute()``d (and kept); without it
    they are computed here."""
    if not cfg.select_every:
        return None, None
    bench = benchmark_dir or default_benchmark_dir()
    datasets = SELECT_DATASETS if bench is not None and Path(bench).is_dir() else ()
    synonyms = synonym_signal(cfg.select_synonym_pairs, seen)
    if not datasets:
        if retrieval is None and synonyms is None:
            raise ValueError("select_every > 0 needs dev data: the benchmark files (benchmark_dir or "
                             "$PEARL_BENCHMARKS), held-out aliases in the training set or WordNet; none is here")
        log.warning("no benchmark directory (%s): the checkpoint is chosen on the retrieval signals alone", bench)

    def compute() -> dict:
        # each string encoded once: the WordNet groups share the whole task's candidates
        reference = ScaledVectors(load_encoder(backbone, cache_dir=cache_dir, backend="torch", device=device), None,
                                  backbone)
        return dev_rows(reference, bench, retrieval, datasets, synonyms=synonyms)

    baseline = keep(baseline_key(backbone, cache_dir, device, bench, datasets, retrieval, synonyms), compute) \
        if keep is not None else compute()
    scores = {k: r["value"] for k, r in baseline.items()}
    log.info("dev scores of the backbone, the bar a checkpoint is chosen against: %s", scores)
    return dev_selector(bench, original, cfg.average_weights[0], baseline, retrieval, datasets,
                        cfg.char_scales, synonyms), scores


def choose_average_weight(model, select, kept: dict, weights: Sequence[float], rule: str) -> dict:
    """The record of the weight the export uses: ``kept`` (the kept checkpoint scored at
    ``weights[0]``) when it loses on no dev signal, else the first of the other ``weights`` that
    loses on none, scored in order at the same checkpoint; none such: the best by :func:`rank`
    (ties: the first listed). Why ordered, and why stop early: moving the backbone less keeps the
    name variants and gives up benchmark gains (docs/research/recipe-averaging.md), so the
    weights go from the most gain to the least, and each check costs minutes on a CPU."""
    records = [kept]
    for w in weights[1:]:
        if records[-1].get("select_worst", -1.0) >= 0:
            break
        records.append(select(model, w))
        log.info("kept checkpoint at average_weight %s: worst %+.2f, mean %+.2f", w, records[-1]["select_worst"],
                 records[-1]["select_mean"])
    best = max(range(len(records)), key=lambda i: (rank(records[i], rule), -i))
    return {**records[best], "average_weights_tried": {str(r["average_weight"]): [r["select_worst"], r["select_mean"]]
                                                       for r in records}}
