"""A trained model against its backbone on the benchmark: per dataset, both scores and the change.

Reads the `eval_results` rows the evaluate flow wrote; the primary metric of each dataset
(mean over seeds where there are several) as in the score table.
"""
from __future__ import annotations

import statistics

from storage.datasets import Dataset
from pearl_model.evaluation.scores import in_table_order, primary_scores


def compare(rows: list[dict], model: str, baseline: str) -> list[dict]:
    """One line per dataset both were scored on, then the average over those datasets."""
    scores = primary_scores(rows)
    datasets = in_table_order({d for m, d in scores if m == model} & {d for m, d in scores if m == baseline})
    lines, deltas = [], []
    for d in datasets:
        ours, base = scores[(model, d)][0], scores[(baseline, d)][0]
        deltas.append(ours - base)
        lines.append({"dataset": d, "metric": scores[(model, d)][2], "backbone": round(base, 1),
                      "trained": round(ours, 1), "change": round(ours - base, 1)})
    if lines:
        lines.append({"dataset": "average", "metric": "",
                      "backbone": round(statistics.fmean(x["backbone"] for x in lines), 1),
                      "trained": round(statistics.fmean(x["trained"] for x in lines), 1),
                      "change": round(statistics.fmean(deltas), 1)})
    return lines


def comparison_markdown(lines: list[dict], model: str, baseline: str) -> str:
    out = [f"# Trained model vs its backbone", "", f"trained: `{model}`", f"backbone: `{baseline}`", "",
           "| dataset | metric | backbone | trained | change |", "|---|---|---|---|---|"]
    out += [f"| {x['dataset']} | {x['metric']} | {x['backbone']:.1f} | {x['trained']:.1f} | {x['change']:+.1f} |"
            for x in lines]
    better = [x["dataset"] for x in lines[:-1] if x["change"] > 0]
    worse = [x["dataset"] for x in lines[:-1] if x["change"] < 0]
    out += ["", f"Better on: {', '.join(better) or 'none'}. Worse on: {', '.join(worse) or 'none'}.",
            "Scores x100; retrieval columns use the 10k-name dictionaries (see the benchmark report)."]
    return "\n".join(out)


from prefect import task  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402


@task(name="compare-with-backbone", cache_policy=NONE)
def comparison_task(results: dict, model: str, baseline: str, storage_root: str) -> list[dict]:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from storage.datasets import resolve_root
    from storage.schemas import EVAL_RESULTS

    rows = Dataset(resolve_root(storage_root), "eval_results", results["version"], EVAL_RESULTS).read().to_pylist()
    lines = compare(rows, model, baseline)
    create_table_artifact(lines, key="model-vs-backbone", description=f"{model} vs {baseline}, x100")
    create_markdown_artifact(comparison_markdown(lines, model, baseline), key="model-vs-backbone-report",
                             description="which datasets the training improved")
    return lines
