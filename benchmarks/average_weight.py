"""How far a trained model's backbone should move from the original: its dev signals per averaging weight.

    python benchmarks/average_weight.py /work/corpus14/models/<version> \\
        --training-set /work/corpus14/training_set/<version> --weights 0.25,0.375,0.5,0.625 \\
        --out benchmarks/results/average_weight_cpu_sample_ovos.json

An export holds ``w0 * fine-tuned + (1 - w0) * original`` (``average_weight`` w0 in its
pearl_model.json), so the backbone at any other weight w is ``original + (w / w0) * (export -
original)``: exact, no checkpoint needed, and w above w0 (towards the fine-tuned weights) is the
same line extended. Each weight is scored on the dev signals a run's checks read (CoNLL-2003 and
BC5CDR dev, PPDB-filtered validation, the held-out aliases, WordNet synonyms) and on the WordNet
synonyms per group of names (``pearl_model.evaluation.synonym_retrieval.GROUPS``) over several
draws, since the clinical-name group is where UMLS-10k's loss shows. The original backbone is
scored the same way, in the same run; every change is paired (the same pairs, the same probes).
Dev data only: the test splits are never read.
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


def scores(encoder, bench, retrieval, synonym_draws, lexnames) -> dict[str, float]:
    from pearl_model.evaluation.synonym_retrieval import group_tasks
    from pearl_model.selection import dev_scores
    from pearl_model.training import alias_retrieval

    out = dev_scores(encoder, bench, retrieval, synonyms=synonym_draws[0])
    for group in group_tasks(synonym_draws[0], lexnames):
        out[f"wordnet[{group}]_top1"] = statistics.mean(
            100 * alias_retrieval(encoder.encode, group_tasks(task, lexnames)[group])["alias_top1"]
            for task in synonym_draws)
    out["wordnet_draws_top1"] = statistics.mean(100 * alias_retrieval(encoder.encode, t)["alias_top1"]
                                                for t in synonym_draws)
    return out


@app.command()
def main(model: Path, training_set: Path = typer.Option(..., help="the model's training_set version directory"),
         weights: str = "0.25,0.375,0.5,0.625", pairs: int = 10000, draws: str = "0,1,2",
         out: Path = typer.Option(None)):
    from pearl_model.encoder import PhraseEncoder
    from pearl_model.evaluation.data import default_benchmark_dir
    from pearl_model.evaluation.synonym_retrieval import lexname_of, wordnet_synonym_task
    from pearl_model.export import PearlEncoder, load_pearl
    from pearl_model.network import read_config
    from pearl_model.loading import load_encoder
    from pearl_model.synonyms import wordnet_reader
    from storage.datasets import Dataset
    from storage.schemas import TRAINING_SET
    from tasks.training import heldout_retrieval, load_examples

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from synonym_retrieval import training_strings

    config = read_config(model)
    w0, spec = config.get("average_weight"), config["metadata"]["backbone"]
    if w0 is None:
        raise typer.BadParameter(f"{model} was exported without averaging: nothing to move along")
    ws = [float(w) for w in weights.split(",")]
    if any(w < 0 for w in ws):
        raise typer.BadParameter(f"weights must be >= 0, got {ws}")
    bench = default_benchmark_dir()
    ts = Dataset(str(training_set.parent.parent), "training_set", training_set.name, TRAINING_SET)
    retrieval = heldout_retrieval(ts)
    seen = training_strings(training_set)
    wordnet = wordnet_reader()
    lexnames = lexname_of(wordnet)
    synonym_draws = [wordnet_synonym_task(pairs, exclude=seen, seed=int(s), wordnet=wordnet) for s in draws.split(",")]

    rows = {}
    t0 = time.perf_counter()
    rows["backbone"] = scores(load_encoder(spec, backend="torch", device="cpu"), bench, retrieval, synonym_draws,
                              lexnames)
    print(f"backbone: {time.perf_counter() - t0:.0f} s {rows['backbone']}", flush=True)
    pearl = load_pearl(model, device="cpu", backend="torch")
    exported = {k: v.detach().clone() for k, v in pearl.backbone.state_dict().items()}
    original = {k: v.detach().cpu() for k, v in PhraseEncoder.from_backbone(spec, device="cpu").model.state_dict().items()}
    if set(original) != set(exported):
        raise SystemExit(f"{spec}'s weights do not match {model}'s backbone: "
                         f"{sorted(set(original) ^ set(exported))[:5]}")
    for w in ws:
        t0 = time.perf_counter()
        pearl.backbone.load_state_dict(backbone_at(exported, original, w0, w))
        rows[str(w)] = scores(PearlEncoder(pearl, name=f"w={w}"), bench, retrieval, synonym_draws, lexnames)
        print(f"w={w}: {time.perf_counter() - t0:.0f} s {rows[str(w)]}", flush=True)

    base = rows["backbone"]
    keys = [k for k in base if "/" not in k and not k.endswith("_mrr")]
    table = {w: {k: round(r[k] - base[k], 2) for k in keys} for w, r in rows.items() if w != "backbone"}
    for w, change in table.items():
        print(w, change)
    if out:
        out.write_text(json.dumps({
            "command": " ".join(sys.argv), "machine": platform.processor() or platform.machine(),
            "model": str(model), "export_average_weight": w0, "pairs": pairs, "draws": draws,
            "scores": rows, "change_vs_backbone": table}, indent=1) + "\n")


if __name__ == "__main__":
    app()
