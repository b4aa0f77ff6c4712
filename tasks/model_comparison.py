"""A trained model against its backbone on the benchmark: per dataset, both scores and the paired
difference with its 95% interval.

Reads the `eval_results` rows the evaluate flow wrote (both models in one run, the same draws
and items); the primary metric of each dataset as in the score table. A difference whose
interval holds 0 is "no difference" (`pearl_model.evaluation.stable`).
"""
from __future__ import annotations

from pearl_model.evaluation.scores import compare as paired_lines
from storage.datasets import Dataset


def compare(rows: list[dict], model: str, baseline: str) -> list[dict]:
    """One line per dataset both were scored on, then the average over those datasets (x100,
    one decimal)."""
    return [{"dataset": x["dataset"], "metric": x["metric"], "backbone": round(x["baseline"], 1),
             "trained": round(x["model"], 1), "change": round(x["change"], 1),
             "low": x["low"] if x["low"] is None else round(x["low"], 1),
             "high": x["high"] if x["high"] is None else round(x["high"], 1), "verdict": x["verdict"]}
            for x in paired_lines(rows, model, baseline)]


def comparison_markdown(lines: list[dict], model: str, baseline: str) -> str:
    out = ["# Trained model vs its backbone", "", f"trained: `{model}`", f"backbone: `{baseline}`", "",
           "| dataset | metric | backbone | trained | change | 95% interval | verdict |", "|---|---|---|---|---|---|---|"]
    out += [f"| {x['dataset']} | {x['metric']} | {x['backbone']:.1f} | {x['trained']:.1f} | {x['change']:+.1f} | "
            + ("" if x["low"] is None else f"[{x['low']:+.1f}, {x['high']:+.1f}]") + f" | {x['verdict']} |"
            for x in lines]
    by = {v: [x["dataset"] for x in lines[:-1] if x["verdict"] == v] for v in ("better", "worse", "no difference")}
    out += ["", f"Better on: {', '.join(by['better']) or 'none'}. Worse on: {', '.join(by['worse']) or 'none'}. "
                f"No difference on: {', '.join(by['no difference']) or 'none'}.",
            "Scores x100. A change is paired (the same KMeans random states and probe seeds, or the same "
            "items resampled) and its interval is 95%; where the interval holds 0 the run cannot tell the two "
            "models apart: no difference. Retrieval columns use the 10k-name dictionaries (see the benchmark report)."]
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
    create_table_artifact(lines, key="model-vs-backbone", description=f"{model} vs {baseline}, x100, 95% intervals")
    create_markdown_artifact(comparison_markdown(lines, model, baseline), key="model-vs-backbone-report",
                             description="which datasets the training improved, and where it cannot tell")
    return lines
