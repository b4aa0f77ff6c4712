"""How far `ner_scope: examples` types phrases as `ner_scope: all` does, on two builds of one corpus.

    python benchmarks/entity_typing_scope.py --root /work/corpus14 --all <phrases version> \\
        --examples <phrases version> [--out benchmarks/results/entity_typing_scope.json]

Both phrases datasets come from the same sentences with the same parser; only the entity types
may differ (the examples run types each phrase from its examples_per_phrase example sentences).
Reports, over the phrases the two share: the share whose entity type agrees, by frequency band
(a phrase seen at most examples_per_phrase times is typed from all of its sentences), the share
typed non-OTHER in each, and the most frequent disagreements.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import typer

from storage.datasets import Dataset
from storage.schemas import PHRASES

BANDS = ((2, 3), (4, 9), (10, 99), (100, None))


def band_of(freq: int) -> str:
    for lo, hi in BANDS:
        if freq >= lo and (hi is None or freq <= hi):
            return f"{lo}-{hi}" if hi is not None else f"{lo}+"
    return f"<{BANDS[0][0]}"


def compare(all_rows: list[dict], ex_rows: list[dict]) -> dict:
    ex = {r["phrase_key"]: r for r in ex_rows}
    shared = [(r, ex[r["phrase_key"]]) for r in all_rows if r["phrase_key"] in ex]
    bands: dict[str, Counter] = {}
    pairs: Counter = Counter()
    for a, e in shared:
        b = bands.setdefault(band_of(a["frequency"]), Counter())
        b["phrases"] += 1
        b["agree"] += a["entity_type"] == e["entity_type"]
        b["typed_all"] += a["entity_type"] != "OTHER"
        b["typed_examples"] += e["entity_type"] != "OTHER"
        if a["entity_type"] != e["entity_type"]:
            pairs[f"{a['entity_type']} -> {e['entity_type']}"] += 1
    total = sum(bands.values(), Counter())

    def row(c: Counter) -> dict:
        n = c["phrases"] or 1
        return {"phrases": c["phrases"], "agreement": round(c["agree"] / n, 4),
                "typed_share_all": round(c["typed_all"] / n, 4), "typed_share_examples": round(c["typed_examples"] / n, 4)}

    order = [band_of(lo) for lo, _ in BANDS]
    return {"phrases_all": len(all_rows), "phrases_examples": len(ex_rows), "shared": len(shared),
            "overall": row(total), "by_frequency": {b: row(bands[b]) for b in order if b in bands},
            "disagreements": dict(pairs.most_common(12))}


def main(root: str = typer.Option(..., help="storage_root holding both phrases versions"),
         all_version: str = typer.Option(..., "--all", help="phrases built with ner_scope all"),
         examples_version: str = typer.Option(..., "--examples", help="phrases built with ner_scope examples"),
         out: Path = typer.Option(Path("benchmarks/results/entity_typing_scope.json"))) -> None:
    cols = ["phrase_key", "entity_type", "frequency"]
    a, e = (Dataset(root, "phrases", v, PHRASES) for v in (all_version, examples_version))
    result = compare(a.read(columns=cols).to_pylist(), e.read(columns=cols).to_pylist())
    result |= {"root": root, "all": all_version, "examples": examples_version,
               "examples_params": e.manifest()["params"], "examples_stats": e.manifest()["stats"]}
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("shared", "overall", "by_frequency", "disagreements")}, indent=2))


if __name__ == "__main__":
    typer.run(main)
