"""Precision of the cached positives per kind, on a hand-labelled sample, and each kind's share of training draws.

    # 1. draw 100 random positives per kind (seeded) from an augmentations version, to label
    #    (--training-set V: also 100 per on-the-fly kind, char, swap_tokens, change_case)
    python benchmarks/positives_precision.py sample /work/corpus14 <augmentations version> \\
        benchmarks/labels/positives_after.tsv [--prefill benchmarks/labels/positives_before.tsv]
    # 2. label: fill the `label` column with 1 (same meaning) or 0; the rule is at the top of the file
    # 3. precision per kind + share of draws, before and after, into one JSON
    python benchmarks/positives_precision.py report /work/corpus14 \\
        --before benchmarks/labels/positives_before.tsv --after benchmarks/labels/positives_after.tsv \\
        --out benchmarks/results/positives_precision.json

Share of draws: the training loop draws, per anchor and step, one kind uniformly among the
kinds that apply to the phrase (`pearl_model.training.loop.positive_kinds`: char, swap_tokens, change_case and
the cached kinds it has), so a kind's expected share is the mean over the training phrases
(split == train of the training set) of 1/|kinds| where it applies. The cached kinds come
from the augmentations version the labels were drawn from (its manifest names it), so a
version not yet joined into a training set can be scored.
"""
from __future__ import annotations

import csv
import json
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.compute as pc
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pearl_model.linking.thresholds import wilson  # noqa: E402
from pearl_model.training.loop import Example, positive_kinds  # noqa: E402
from storage.datasets import Dataset, latest_version  # noqa: E402
from storage.schemas import AUGMENTATIONS, TRAINING_SET  # noqa: E402

app = typer.Typer(add_completion=False)

RULE = """\
# Labelling rule: label 1 when the positive means the same thing as the phrase in a plausible
# reading of both (a synonym, another name of the same thing, the same phrase with a word
# swapped for one that means the same here; an inflection or spelling variant counts); 0 when
# it names or says something else (a look-alike word, a related but different thing, a part
# or a broader/narrower thing, a wrong sense of the word). One annotator (the author), by hand.
"""
COLUMNS = ["kind", "source", "phrase", "positive", "label"]


def read_labels(path: str) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader((line for line in fh if not line.startswith("#")), delimiter="\t"))
    for r in rows:
        if r["label"] not in ("0", "1", ""):
            raise ValueError(f"{path}: label {r['label']!r} of {r['phrase']!r} -> {r['positive']!r} is not 0 or 1")
    return rows


def draw_sample(aug: Dataset, n: int, seed: int) -> list[dict]:
    """n random positives per kind (all when fewer), in a seeded order."""
    t = aug.read(columns=["kind", "source", "phrase", "positive"])
    by_kind = defaultdict(list)
    for row in t.to_pylist():
        by_kind[row["kind"]].append(row)
    rng = random.Random(seed)
    out = []
    for kind in sorted(by_kind):
        rows = sorted(by_kind[kind], key=lambda r: (r["phrase"], r["positive"]))
        out += rng.sample(rows, min(n, len(rows)))
    return out


def draw_on_the_fly(phrases: list[str], n: int, seed: int) -> list[dict]:
    """n positives per on-the-fly kind (char, swap_tokens, change_case) as the training loop
    makes them, of random phrases it applies to."""
    from pearl_model.training.loop import ON_THE_FLY_KINDS, Example, draw_positive

    rng, out = random.Random(seed), []
    for kind in ON_THE_FLY_KINDS:
        for phrase in rng.sample(phrases, len(phrases)):
            drawn, text = draw_positive(Example(phrase, 0), rng, (kind,))
            if drawn == kind:
                out.append({"kind": kind, "source": "on the fly", "phrase": phrase, "positive": text})
            if sum(r["kind"] == kind for r in out) == n:
                break
    return out


@app.command()
def sample(root: str, version: str, out: str, n: int = 100, seed: int = 0,
           prefill: list[str] = typer.Option([], help="labels files whose labels are copied to the same pairs"),
           training_set: str = typer.Option(None, help="also draw n on-the-fly positives per kind (char, "
                                                       "swap_tokens, change_case) of this training set's train phrases")):
    aug = Dataset(root, "augmentations", version, AUGMENTATIONS)
    known = {(r["kind"], r["phrase"], r["positive"]): r["label"] for p in prefill for r in read_labels(p)}
    rows = draw_sample(aug, n, seed)
    if training_set:
        ts = Dataset(root, "training_set", training_set, TRAINING_SET)
        phrases = sorted(ts.read(columns=["phrase"], filter=pc.field("split") == "train")["phrase"].to_pylist())
        rows += draw_on_the_fly(phrases, n, seed)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8", newline="") as fh:
        fh.write(RULE + f"# augmentations {version} on {root}, {n} per kind, seed {seed}\n")
        w = csv.DictWriter(fh, COLUMNS, delimiter="\t", lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "label": known.get((r["kind"], r["phrase"], r["positive"]), "")})
    print(f"wrote {len(rows)} rows to {out} ({sum(1 for r in rows if (r['kind'], r['phrase'], r['positive']) in known)}"
          " labelled from --prefill)")


def precision(rows: list[dict]) -> dict:
    out = {}
    for kind in sorted({r["kind"] for r in rows}):
        labels = [int(r["label"]) for r in rows if r["kind"] == kind and r["label"] != ""]
        k, n = sum(labels), len(labels)
        out[kind] = {"labelled": n, "correct": k, "precision": round(k / n, 3) if n else None, "wilson95": tuple(round(b, 3) for b in wilson(k, n))}
    return out


def draw_shares(phrases: list[str], cached_kinds: list[set[str]]) -> dict:
    """Expected share of training draws per kind: mean over phrases of 1/|kinds| where a kind applies."""
    share, applies = Counter(), Counter()
    for phrase, cached in zip(phrases, cached_kinds):
        kinds = positive_kinds(Example(phrase, 0, {k: ("x",) for k in cached}))
        for k in kinds or ["identity"]:
            share[k] += 1 / max(len(kinds), 1)
            applies[k] += 1
    n = len(phrases)
    return {k: {"share_of_draws": round(share[k] / n, 4), "phrases_it_applies_to": applies[k]}
            for k in sorted(share, key=lambda k: -share[k])}


def shares_for(root: str, aug_version: str, training_version: str, kinds: list[str] | None) -> dict:
    aug = Dataset(root, "augmentations", aug_version, AUGMENTATIONS)
    ts = Dataset(root, "training_set", training_version, TRAINING_SET)
    train = ts.read(columns=["phrase", "phrase_key"], filter=pc.field("split") == "train")
    a = aug.read(columns=["phrase_key", "kind"])
    has = defaultdict(set)
    for key, kind in zip(a["phrase_key"].to_pylist(), a["kind"].to_pylist()):
        if kinds is None or kind in kinds:
            has[key].add(kind)
    keys = train["phrase_key"].to_pylist()
    return {"augmentations": aug_version, "training_set": training_version, "train_phrases": len(keys),
            "cached_kinds": sorted(kinds) if kinds is not None else "all",
            "positives": dict(Counter(k for k in a["kind"].to_pylist() if kinds is None or k in kinds)),
            "kinds": draw_shares(train["phrase"].to_pylist(), [has.get(k, set()) for k in keys])}


def _version_of(path: str) -> str:
    for line in open(path, encoding="utf-8"):
        if line.startswith("# augmentations "):
            return line.split()[2]
    raise ValueError(f"{path} does not say which augmentations version it was drawn from")


@app.command()
def report(root: str, before: str = typer.Option(...), after: str = typer.Option(None),
           training_set: str = typer.Option(None, help="default: the latest training_set version on the root"),
           after_kinds: str = typer.Option(None, help="comma-separated cached kinds the default trains on "
                                                      "(when a labelled kind is left out of the default)"),
           on_the_fly: str = typer.Option(None, help="labels of on-the-fly positives (sample --training-set)"),
           extra: list[str] = typer.Option([], help="NAME=PATH: another labelled sample, e.g. an intermediate "
                                                    "round of filters"),
           out: str = "benchmarks/results/positives_precision.json"):
    training_set = training_set or latest_version(root, "training_set")
    result = {"rule": RULE.replace("# ", "").replace("\n", " ").strip(), "root": root}
    for name, path, kinds in (("before", before, None),
                              ("after", after, after_kinds.split(",") if after_kinds else None),
                              *((*e.split("=", 1), None) for e in extra)):
        if path is None:
            continue
        rows = read_labels(path)
        missing = sum(1 for r in rows if r["label"] == "")
        if missing:
            raise typer.BadParameter(f"{path}: {missing} rows are not labelled yet")
        prec, draws = precision(rows), shares_for(root, _version_of(path), training_set, kinds)
        on_the_fly_prec = precision(read_labels(on_the_fly)) if on_the_fly else {}
        known = {**on_the_fly_prec, **prec}
        result[name] = {"labels": path, "precision": prec, "draws": draws,
                        "params": Dataset(root, "augmentations", _version_of(path), AUGMENTATIONS).manifest()["params"],
                        # expected share of all training draws whose positive is wrong, over the labelled kinds
                        "wrong_share_of_draws": round(sum(v["share_of_draws"] * (1 - known[k]["precision"])
                                                          for k, v in draws["kinds"].items() if k in known), 4)}
    if on_the_fly:
        result["on_the_fly"] = {"labels": on_the_fly, "precision": precision(read_labels(on_the_fly)),
                                "note": "the same before and after: made by the training loop, not cached"}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: {kind: v["precision"] for kind, v in result[k]["precision"].items()}
                      for k in result if isinstance(result[k], dict) and "draws" in result[k]}, indent=1))


if __name__ == "__main__":
    app()
