"""How far a trained model's backbone should move from the original: its dev signals per averaging weight.

    python benchmarks/average_weight.py /work/corpus14/models/<version> \\
        --training-set /work/corpus14/training_set/<version> --weights 0.5,0.375,0.25 \\
        --out benchmarks/results/average_weight_cpu_sample_ovos.json

An export holds ``w0 * fine-tuned + (1 - w0) * original`` (``average_weight`` w0 in its
pearl_model.json), so the backbone at any other weight w is ``original + (w / w0) * (export -
original)``: the fine-tuned weights are recovered once (w = 1) and every weight is then averaged
as the export does (`pearl_model.inference.export.average_state_dicts`), exact, no checkpoint needed. Each weight is scored on the dev signals a run's checks read (CoNLL-2003 and
BC5CDR dev, PPDB-filtered validation, the held-out aliases, WordNet synonyms: all of them and per
group of names, `pearl_model.training.selection.synonym_signal`), plus each WordNet signal's mean over
more draws (``<name>/draws``; one draw moves a group's change by a few tenths). The original
backbone is scored the same way, in the same run; every change is paired (the same pairs, the
same probes). The last line says which weight the `train` flow's rule would export, the
``--weights`` being its candidates in that order (`pearl_model.training.selection.choose_average_weight`).
Dev data only: the test splits are never read.

``--export-weight W --export-to DIR`` also writes the model with its backbone at weight W (the
same fine-tuned weights, the same character scale; ``average_weight`` W in its config, the weight
and this command in its metadata), to be scored on the test sets once the weight is chosen.
"""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

app = typer.Typer(add_completion=False)


def backbone_at(export_state: dict, original: dict, w0: float, w: float) -> dict:
    """The backbone state at averaging weight ``w`` from one exported at ``w0`` (integer buffers: the export's)."""
    import torch

    if not 0 < w0 <= 1:
        raise ValueError(f"the export's average_weight must be in (0, 1], got {w0!r}")
    out = {}
    for key, exp in export_state.items():
        if not exp.is_floating_point():
            out[key] = exp.clone()
            continue
        orig = original[key].to(torch.float32)
        out[key] = (orig + (w / w0) * (exp.to(torch.float32) - orig)).to(exp.dtype)
    return out


def export_at(pearl, fine_tuned: dict, original: dict, weight: float, config: dict, source: Path, path: Path) -> None:
    """Write ``pearl`` with ``fine_tuned`` averaged at ``weight`` and the export's character scale."""
    import torch

    from pearl_model.inference.export import export_pearl

    scale = float(config.get("char_scale", 1.0))
    with torch.no_grad():  # the loaded head holds the scaled character part: undo it, export_pearl redoes it
        pearl.char_proj.weight /= scale
        pearl.char_proj.bias /= scale
        pearl.type_head.weight[:, pearl.backbone_dim:] *= scale
    pearl.backbone.load_state_dict(fine_tuned)
    meta = dict(config["metadata"]) | {"average_weight_from": {"model": str(source), "weight": weight,
                                                                "command": " ".join(sys.argv)}}
    export_pearl(pearl, path, original_backbone_state=original, average_weight=weight, metadata=meta,
                 char_scale=scale)
    with torch.no_grad():
        pearl.char_proj.weight *= scale
        pearl.char_proj.bias *= scale
        pearl.type_head.weight[:, pearl.backbone_dim:] /= scale


def scores(encoder, bench, retrieval, signals: dict, more_draws: list) -> tuple[dict[str, float], dict[str, dict]]:
    """The `train` flow's dev scores (``signals``: its WordNet draw and groups), and each WordNet
    signal's mean over that draw and ``more_draws`` as ``<name>/draws`` (outside the criteria);
    and the dev rows, which pair a change against the backbone's."""
    from pearl_model.training.selection import ScaledVectors, dev_rows, dev_scores

    encoder = ScaledVectors(encoder, None, encoder.name)  # each string encoded once: the groups share candidates
    rows = dev_rows(encoder, bench, retrieval, synonyms=signals)
    out = {k: r["value"] for k, r in rows.items()}
    extra = [dev_scores(encoder, bench, None, datasets=(), synonyms=d) for d in more_draws]
    for name in signals:
        out[f"{name}/draws"] = statistics.mean([out[f"{name}_top1"]] + [e[f"{name}_top1"] for e in extra])
    return out, rows


@app.command()
def main(model: Path, training_set: Path = typer.Option(..., help="the model's training_set version directory"),
         weights: str = "0.5,0.375,0.25", pairs: int = 10000, draws: str = "0,1,2",
         out: Path = typer.Option(None), export_weight: float = typer.Option(None),
         export_to: Path = typer.Option(None), rule: str = "mean"):
    from pearl_model.evaluation.data import default_benchmark_dir
    from pearl_model.inference.export import PearlEncoder, average_state_dicts
    from pearl_model.inference.model_dirs import open_model
    from pearl_model.inference.network import read_config
    from pearl_model.inference.loading import load_encoder
    from pearl_model.training.selection import (changes_text, choose_average_weight, dev_changes, selection_score,
                                                synonym_signal)
    from storage.datasets import Dataset
    from storage.schemas import TRAINING_SET
    from tasks.training import heldout_retrieval

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from synonym_retrieval import training_strings

    config = read_config(model)
    w0, spec = config.get("average_weight"), config["metadata"]["backbone"]
    if w0 is None:
        raise typer.BadParameter(f"{model} was exported without averaging: nothing to move along")
    ws = [float(w) for w in weights.split(",")] if weights else []
    if (export_weight is None) != (export_to is None):
        raise typer.BadParameter("--export-weight and --export-to go together")
    if export_weight is not None and not 0 <= export_weight <= 1:
        raise typer.BadParameter(f"--export-weight must be in [0, 1], got {export_weight}")
    if any(not 0 <= w <= 1 for w in ws):
        raise typer.BadParameter(f"weights must be in [0, 1], got {ws}")
    bench = default_benchmark_dir()
    ts = Dataset(str(training_set.parent.parent), "training_set", training_set.name, TRAINING_SET)
    retrieval = heldout_retrieval(ts)
    seen = training_strings(training_set)
    signals = synonym_signal(pairs, seen)  # the flow's: seed 0
    more_draws = [synonym_signal(pairs, seen, seed=int(s)) for s in draws.split(",") if int(s) != 0]

    pearl = open_model(model, device="cpu", backend="torch").model
    exported = {k: v.detach().clone() for k, v in pearl.backbone.state_dict().items()}
    original = {k: v.detach().cpu() for k, v in open_model(spec, backbone=True, device="cpu").model.state_dict().items()}
    if set(original) != set(exported):
        raise SystemExit(f"{spec}'s weights do not match {model}'s backbone: "
                         f"{sorted(set(original) ^ set(exported))[:5]}")
    fine_tuned = backbone_at(exported, original, w0, 1.0)  # once; every weight is then the export's own average
    if export_weight is not None:
        export_at(pearl, fine_tuned, original, export_weight, config, model, export_to)
        print(f"exported at weight {export_weight}: {export_to}", flush=True)
    if not ws:
        return
    rows, paired = {}, {}
    t0 = time.perf_counter()
    rows["backbone"], paired["backbone"] = scores(load_encoder(spec, backend="torch", device="cpu"), bench, retrieval,
                                                  signals, more_draws)
    print(f"backbone: {time.perf_counter() - t0:.0f} s {rows['backbone']}", flush=True)
    for w in ws:
        t0 = time.perf_counter()
        pearl.backbone.load_state_dict(average_state_dicts(fine_tuned, original, w))
        rows[str(w)], paired[str(w)] = scores(PearlEncoder(pearl, name=f"w={w}"), bench, retrieval, signals,
                                              more_draws)
        print(f"w={w}: {time.perf_counter() - t0:.0f} s {rows[str(w)]}", flush=True)

    base = rows["backbone"]
    # each criterion's change [change, low, high] (95%, paired over draws or items); the /draws means as points
    table = {w: dev_changes(paired[w], paired["backbone"])
             | {k: round(r[k] - base[k], 2) for k in r if k.endswith("/draws")} for w, r in rows.items() if w != "backbone"}
    records = {w: dict(zip(("select_worst", "select_mean"), selection_score(rows[str(w)], base)), average_weight=w)
               for w in ws}
    chosen = choose_average_weight(None, lambda _, w: records[w], records[ws[0]], ws, rule)
    for w, change in table.items():
        print(w, changes_text({k: v for k, v in change.items() if isinstance(v, list)}), records[float(w)])
    print(f"the train flow's rule ({rule}) over {ws} in this order keeps {chosen['average_weight']}")
    if out:
        out.write_text(json.dumps({
            "command": " ".join(sys.argv), "machine": platform.processor() or platform.machine(),
            "model": str(model), "export_average_weight": w0, "pairs": pairs, "draws": draws,
            "scores": rows, "change_vs_backbone": table, "selection": {str(w): r for w, r in records.items()},
            "rule": rule, "chosen": chosen["average_weight"]}, indent=1) + "\n")


if __name__ == "__main__":
    app()
