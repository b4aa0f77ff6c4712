"""How much of each clustering dev set the corpus covers: the domain question of issue 14.

    python benchmarks/domain_coverage.py /work/corpus14 --out benchmarks/results/domain_coverage_sample_ovos.json

For the distinct entity names of CoNLL-2003 and BC5CDR `dev.json`, per entity type: the share
that is a training phrase (the model saw it as an anchor), the share whose every word occurs
in the corpus sentences, the median corpus count of a name's rarest word, and the labels the
corpus gave the names it holds (the 95 types put chemicals and diseases in `*-OTHER`). Dev
splits only; no model is run.
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pearl_model.evaluation.data import load_entities  # noqa: E402
from storage.datasets import Dataset, latest_version  # noqa: E402
from storage.schemas import SENTENCES, TRAINING_SET  # noqa: E402

WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def coverage(names: list[str], types: list[str], phrase_labels: dict[str, str], counts: Counter) -> dict:
    """Per type (and `all`): distinct names, shares covered (x100), rarest-word median, labels held."""
    by_type: dict[str, set[str]] = defaultdict(set)
    for n, t in zip(names, types):
        by_type[t].add(n)
        by_type["all"].add(n)
    out = {}
    for t, group in sorted(by_type.items()):
        held = [phrase_labels[n.lower()] for n in group if n.lower() in phrase_labels]
        rarest = [min(counts[w] for w in ws) for ws in map(words, group) if ws]
        out[t] = {"names": len(group),
                  "training_phrase_pct": round(100 * len(held) / len(group), 1),
                  "all_words_in_corpus_pct": round(100 * sum(r > 0 for r in rarest) / len(group), 1),
                  "median_rarest_word_count": statistics.median(rarest) if rarest else 0,
                  "labels_of_held": dict(Counter(held).most_common(5))}
    return out


def main(storage_root: str, benchmark_dir: str = typer.Option("../shared/benchmarks/pearl"),
         datasets: str = typer.Option("conll2003,bc5cdr"), out: Path = typer.Option(None)) -> None:
    ts = Dataset(storage_root, "training_set", latest_version(storage_root, "training_set"), TRAINING_SET)
    rows = ts.read(columns=["phrase", "label", "split"]).to_pylist()
    phrase_labels = {r["phrase"].lower(): r["label"] for r in rows if r["split"] == "train"}
    sents = Dataset(storage_root, "sentences", latest_version(storage_root, "sentences"), SENTENCES)
    counts: Counter = Counter()
    n_sentences = 0
    for batch in sents.iter_batches(columns=["text"]):
        for text in batch.column(0).to_pylist():
            counts.update(words(text))
            n_sentences += 1
    result = {"storage_root": storage_root, "training_set": ts.version, "train_phrases": len(phrase_labels),
              "sentences": n_sentences, "tokens": sum(counts.values()), "split": "dev",
              "datasets": {name: coverage(*load_entities(benchmark_dir, name, "dev"), phrase_labels, counts)
                           for name in datasets.split(",")}}
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        out.write_text(text + "\n")


if __name__ == "__main__":
    typer.run(main)
