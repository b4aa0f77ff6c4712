"""Trained models against each other on dev data: each signal's paired difference with its 95% interval.

    python benchmarks/dev_compare.py run /work/corpus46/models/<A> /work/corpus46/models/<B> \\
        --names default,pmi_examples --out benchmarks/results/dev_compare_corpus_settings_cpu_sample_ovos.json
    python benchmarks/dev_compare.py report benchmarks/results/dev_compare_corpus_settings_cpu_sample_ovos.json

The question it answers: is model B (another corpus setting, another recipe) worse than model A
anywhere a dev signal can see? Every model and the backbone of the first are scored in one process
with the stable protocol (`pearl_model.training.selection.dev_rows`): CoNLL-2003 and BC5CDR `dev`
clustered over KMeans' random states, the PPDB-filtered probe's validation accuracy over
``--probe-seeds`` at the converged patience, the held-out aliases (alias -> title retrieval; only
when all the models' training sets held out the same aliases, else left out and said so), and
WordNet synonym retrieval with the strings of every model's training set left out (the same
queries for all, none of them taught to any). Each model after the first is compared with the
first, and each model with the backbone, as paired differences (`pearl_model.evaluation.stable`).
A model ``passes`` against the first when no signal's difference is negative with an interval
that excludes 0. The test splits are never read.
"""
from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

app = typer.Typer(add_completion=False)

BACKBONE = "backbone"


def training_set_of(model: Path):
    """The `training_set` Dataset a `train` export was trained on (its metadata names the version;
    the storage root is the one the model directory is under)."""
    from pearl_model.inference.network import read_config
    from storage.datasets import Dataset
    from storage.schemas import TRAINING_SET

    version = ((read_config(model) or {}).get("metadata") or {}).get("training_set")
    if not version:
        raise typer.BadParameter(f"{model}: no training_set in its metadata (not a `train` flow export?)")
    root = model.resolve().parent.parent
    ts = Dataset(str(root), "training_set", version, TRAINING_SET)
    if not ts.is_complete():
        raise typer.BadParameter(f"{model}: its training set {version} is not under {root}")
    return ts


def shared_heldout(training_sets: list) -> tuple[str | None, str]:
    """The held-out aliases version all training sets share, or (None, why not)."""
    versions = {ts.manifest()["inputs"].get("heldout_aliases") for ts in training_sets}
    if len(versions) == 1 and None not in versions:
        return versions.pop(), ""
    return None, f"the training sets hold out different aliases ({sorted(map(str, versions))}): not scored"


def compare(rows: dict[str, dict], base: dict[str, dict]) -> dict[str, dict]:
    """Each criterion both have: ``rows`` minus ``base`` (paired), its interval and verdict."""
    from pearl_model.evaluation.stable import paired_difference
    from pearl_model.training.selection import criteria

    out = {}
    for k in criteria(rows):
        if k in base:
            d = paired_difference(rows[k], base[k])
            out[k] = d.as_dict() | {"verdict": d.verdict}
    return out


def worse(diffs: dict[str, dict]) -> list[str]:
    """The signals on which a model is worse beyond its interval."""
    return sorted(k for k, d in diffs.items() if d["verdict"] == "worse")


def differences(rows: dict[str, dict[str, dict]], labels: list[str]) -> dict:
    """Each model against the backbone and against the first model, and whether it passes: worse
    than the first on no signal beyond its interval."""
    first = labels[0]
    vs_first = {label: compare(rows[label], rows[first]) for label in labels[1:]}
    return {"vs_backbone": {label: compare(rows[label], rows[BACKBONE]) for label in labels},
            "vs_first": vs_first,
            "decision": {label: {"worse_than": first, "worse_on": worse(d), "passes": not worse(d)}
                         for label, d in vs_first.items()}}


@app.command()
def run(models: list[Path], names: str = typer.Option("", help="comma-separated names (default: directory names)"),
        probe_seeds: str = typer.Option("0,1,2,3,4", help="PPDB probe seeds (at least 2: the interval needs them)"),
        datasets: str = typer.Option("conll2003,bc5cdr,ppdb_filtered", help="dev datasets (ppdb's is ~10x slower)"),
        synonym_pairs: int = typer.Option(10000, help="WordNet synonym pairs (0: not scored)"),
        benchmark_dir: str = typer.Option(None, help="default ../shared/benchmarks/pearl or $PEARL_BENCHMARKS"),
        leave_out: list[Path] = typer.Option([], help="training_set version directories whose strings the WordNet "
                                                      "signal also leaves out (a model to be compared later)"),
        cache: Path = typer.Option(None, help="each model's dev rows, reused when nothing they depend on changed "
                                              "(default $PEARL_CACHE/dev_compare)"),
        out: Path = typer.Option(...)) -> None:
    """Score the models and the first one's backbone on dev data; write their differences to ``out``."""
    import torch

    from pearl_model.evaluation.clustering import DRAWS
    from pearl_model.evaluation.common import CachedEncoder
    from pearl_model.evaluation.data import default_benchmark_dir
    from pearl_model.evaluation.row_cache import RowCache, model_identity
    from pearl_model.inference.backbones import cache_root
    from pearl_model.inference.loading import load_encoder
    from pearl_model.inference.network import read_config
    from pearl_model.inference.onnx_backend import resolve_backend
    from pearl_model.training import selection
    from pearl_model.training.selection import dev_rows, synonym_signal
    from storage.datasets import Dataset
    from storage.schemas import HELDOUT_ALIASES
    from tasks.training import HOLDOUT_PAIRS, HOLDOUT_TITLES, retrieval_task

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from synonym_retrieval import (
        training_strings,  # what the `train` flow's dev checks leave out
    )

    labels = names.split(",") if names else [m.name for m in models]
    if not models or len(labels) != len(models) or len(set(labels)) != len(labels) or BACKBONE in labels:
        raise typer.BadParameter(f"give models and as many distinct names (not {BACKBONE!r}): "
                                 f"{len(models)} models, names {labels}")
    seeds = tuple(int(s) for s in probe_seeds.split(","))
    if len(set(seeds)) < 2:
        raise typer.BadParameter(f"--probe-seeds: at least 2 distinct seeds for an interval, got {seeds}")
    bench = benchmark_dir or str(default_benchmark_dir())
    training_sets = [training_set_of(m) for m in models]
    heldout, why_not = shared_heldout(training_sets)
    retrieval = None
    if heldout:
        ts = training_sets[0]
        retrieval = retrieval_task(Dataset(ts.root, "heldout_aliases", heldout, HELDOUT_ALIASES),
                                   HOLDOUT_PAIRS, HOLDOUT_TITLES)
    seen: set[str] = set()
    for path in [Path(ts.root) / "training_set" / ts.version for ts in training_sets] + list(leave_out):
        seen |= training_strings(path)
    synonyms = synonym_signal(synonym_pairs, seen)
    backbone = read_config(models[0])["metadata"]["backbone"]
    settings = {"datasets": datasets, "seeds": seeds, "benchmark_dir": str(Path(bench).resolve()), "heldout": heldout,
                "synonym_pairs": synonym_pairs, "left_out": hashlib.sha256("\n".join(sorted(seen)).encode()).hexdigest()}
    cache = cache or cache_root() / "dev_compare"

    rows, seconds = {}, {}
    for label, spec in [(BACKBONE, backbone)] + list(zip(labels, map(str, models))):
        # the engine "auto" picks on this CPU, without loading a model whose rows are kept
        kept = RowCache(cache, model_identity(spec) | {"engine": resolve_backend("auto", "cpu")}, settings,
                        extra_code=[Path(selection.__file__)])
        if (found := kept.get("dev")) is not None:
            rows[label], seconds[label] = found, None
            typer.echo(f"{label}: dev rows from {kept.path('dev')}", err=True)
            continue
        t0 = time.perf_counter()
        encoder = CachedEncoder(load_encoder(spec, device="cpu"), label)  # each string encoded once across draws
        rows[label] = dev_rows(encoder, bench, retrieval, datasets.split(","), seeds, synonyms)
        seconds[label] = round(time.perf_counter() - t0, 1)
        kept.put("dev", rows[label])
        typer.echo(f"{label}: scored in {seconds[label]} s", err=True)

    result = {
        "what": "trained models compared on dev data, paired differences with 95% intervals (x100)",
        "command": "python benchmarks/dev_compare.py run " + " ".join(sys.argv[2:]),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "setup": {"models": {label: {"path": str(m), "training_set": ts.version, "training_set_rows": ts.manifest()["rows"],
                                     "training_set_inputs": ts.manifest()["inputs"]}
                             for label, m, ts in zip(labels, models, training_sets)},
                  "backbone": backbone, "datasets": datasets.split(","), "probe_seeds": list(seeds), "draws": DRAWS,
                  "heldout_aliases": heldout, "heldout_note": why_not, "synonym_pairs": synonym_pairs,
                  "strings_left_out": len(seen), "seconds": seconds},
        "scores": {label: {k: round(r["value"], 2) for k, r in rs.items()} for label, rs in rows.items()},
        "std": {label: {k: round(r.get("std") or 0.0, 2) for k, r in rs.items()} for label, rs in rows.items()},
    } | differences(rows, labels)
    result["table"] = [{"signal": k, **{m: result["scores"][m][k] for m in [BACKBONE] + labels},
                        **{f"{m}_vs_{labels[0]}": d[k] for m, d in result["vs_first"].items() if k in d}}
                       for k in result["vs_backbone"][labels[0]]]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    typer.echo(markdown(result))


def markdown(result: dict) -> str:
    """The scores and each model's difference against the first, one row per signal."""
    labels = list(result["setup"]["models"])
    first, signals = labels[0], list(result["vs_backbone"][labels[0]])
    head = ["signal", BACKBONE] + labels + [f"{m} - {first}" for m in labels[1:]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in signals:
        cells = [k] + [f"{result['scores'][m][k]:.1f}" for m in [BACKBONE] + labels]
        for m in labels[1:]:
            d = result["vs_first"][m].get(k)
            cells.append("" if d is None else f"{d['change']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] {d['verdict']}")
        lines.append("| " + " | ".join(cells) + " |")
    for m, dec in result["decision"].items():
        lines.append(f"\n{m}: " + (f"no signal worse than {first} beyond its interval" if dec["passes"]
                                    else f"worse than {first} on {', '.join(dec['worse_on'])}"))
    if result["setup"].get("heldout_note"):
        lines.append(f"\nheld-out aliases: {result['setup']['heldout_note']}")
    return "\n".join(lines)


@app.command()
def report(results: Path) -> None:
    """Print a result's table."""
    typer.echo(markdown(json.loads(results.read_text())))


if __name__ == "__main__":
    app()
