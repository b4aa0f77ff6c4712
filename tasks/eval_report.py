"""What an evaluation run shows a person: the score table, a report, an entity map.

The table is models x datasets (+ average) with the paper's rows beside them, marked as
the paper's; the 10k-dictionary retrieval columns are never averaged with or set beside
the paper's full-dictionary figures. A dataset scored over random draws shows mean ± std of the
stable protocol, and beside it a column of the paper protocol's single draw, the one the
paper's figures compare with. The map is a t-SNE of CoNLL-2003 entity names
coloured by type, like the paper's Figure 4.
"""
from __future__ import annotations

import statistics

from pearl_model.evaluation.scores import in_table_order, primary_rows
from storage.datasets import Dataset

NOT_COMPARABLE_TO_PAPER = {"yago-10kdict", "umls-10kdict"}
PAPER_DRAW = "{} (paper draw)"  # the column of a random dataset's single paper-protocol draw


def score_table(rows: list[dict], paper_rows: dict[str, dict[str, float]] | None = None) -> list[dict]:
    """One line per model: a column per dataset (and its paper draw where it has draws) and the
    average of the datasets' stable scores over the datasets it has."""
    scores = primary_rows(rows)
    models = list(dict.fromkeys(r["model"] for r in rows))
    datasets = in_table_order({d for _, d in scores})
    drawn = {d for (_, d), r in scores.items() if r["n"] > 1}
    table = []
    for m in models:
        line: dict = {"model": m}
        vals = []
        for d in datasets:
            r = scores.get((m, d))
            line[d] = "" if r is None else f"{r['value']:.1f}" + (f" ± {r['std']:.1f}" if r["n"] > 1 else "")
            if d in drawn:
                line[PAPER_DRAW.format(d)] = "" if r is None or r["paper_value"] is None else f"{r['paper_value']:.1f}"
            if r is not None:
                vals.append(r["value"])
        line["average"] = f"{statistics.fmean(vals):.1f}" if len(vals) == len(datasets) else ""
        table.append(line)
    for name, ref in (paper_rows or {}).items():
        line = {"model": f"{name} (paper)"}
        for d in datasets:
            # The paper's YAGO/UMLS used 572K/750K-name dictionaries: not comparable; its figures are
            # single draws, set beside the paper draw where a dataset has draws.
            figure = "" if d in NOT_COMPARABLE_TO_PAPER or d not in ref else f"{ref[d]:.1f}"
            line[d] = "" if d in drawn else figure
            if d in drawn:
                line[PAPER_DRAW.format(d)] = figure
        line["average"] = ""
        table.append(line)
    return table


def report_markdown(table: list[dict], manifest: dict, map_png: bytes | None) -> str:
    cols = [c for c in table[0] if c != "model"] if table else []
    lines = ["# PEARL benchmark", "",
             f"Results dataset `eval_results` version `{manifest['version']}` ({manifest['rows']} scores).", "",
             "| model | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    lines += ["| " + " | ".join([t["model"]] + [str(t.get(c, "")) for c in cols]) + " |" for t in table]
    lines += ["",
              "Scores x100. Columns with ± : mean ± standard deviation over random draws (PPDB: the probe "
              "seeds; CoNLL-2003, BC5CDR: KMeans random states); the paper draw beside them is the paper "
              "protocol's single draw (probe seed 0, random state 0), the one to set beside the paper's rows. "
              "`yago-10kdict` and "
              "`umls-10kdict` retrieve among the 10,000 test names only (the paper's dictionaries are "
              "not available): easier than the paper's setting, so the paper's rows are left blank there. "
              "`char3gram` is scored on AutoFJ only, as in the paper. Rows marked (paper) are the "
              "figures printed in the PEARL paper's Table 1, not reproduced here."]
    if map_png:
        from runs.figures import markdown_image

        lines += ["", "## Entity map (t-SNE of CoNLL-2003 entity names)", "", markdown_image(map_png, "entity map")]
    return "\n".join(lines)


def entity_map_png(encoder, names: list[str], labels: list[str], title: str, seed: int = 0) -> bytes:
    """t-SNE of the names' embeddings, a colour per entity type, as PNG bytes."""
    import numpy as np
    from sklearn.manifold import TSNE

    from runs.figures import png_bytes, pyplot

    vectors = encoder.encode(names, normalize=True)
    xy = TSNE(n_components=2, metric="cosine", init="pca", random_state=seed,
              perplexity=min(30, max(5, len(names) // 4))).fit_transform(vectors)
    fig, ax = pyplot().subplots(figsize=(7, 6), dpi=110)
    for label in sorted(set(labels)):
        idx = np.array([lab == label for lab in labels])
        ax.scatter(xy[idx, 0], xy[idx, 1], s=9, alpha=0.7, label=f"{label} ({idx.sum()})")
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(markerscale=2, frameon=False)
    return png_bytes(fig)


def entity_map(benchmark_dir: str, map_model: str, cache_dir: str | None, threads: int | None = None) -> bytes:
    """The entity map of ``map_model`` (t-SNE of up to 1,500 CoNLL-2003 names) as PNG bytes, on ``threads``
    CPU threads (None: the process's setting)."""
    from pearl_model.evaluation import entity_names
    from pearl_model.evaluation.common import cpu_threads
    from pearl_model.inference.loading import load_encoder
    from storage.registry import loadable_spec

    names, labels = entity_names(benchmark_dir, "conll2003", limit=1500)
    with cpu_threads(threads):
        return entity_map_png(load_encoder(loadable_spec(map_model), cache_dir), names, labels,
                              f"CoNLL-2003 entities, {map_model}")


from prefect import task  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402


@task(name="entity-map", cache_policy=NONE)
def entity_map_task(benchmark_dir: str, map_model: str, cache_dir: str | None, side_by_side: int | None = None) -> bytes:
    from pearl_model.evaluation.common import cores_shared_by

    return entity_map(benchmark_dir, map_model, cache_dir, cores_shared_by(side_by_side))


@task(name="evaluation-report", cache_policy=NONE)
def eval_report_task(results: Dataset, map_png: bytes | None = None) -> dict:
    """The score table and report of ``results``, with the entity map ``map_png`` (kept beside them)."""
    from pearl_model.evaluation import PAPER_ROWS

    table = score_table(results.read().to_pylist(), PAPER_ROWS)
    if map_png:
        with results.fs.open(f"{results.path}/entity_map.png", "wb") as fh:
            fh.write(map_png)
    create_table_artifact(table, key="benchmark-scores", description="PEARL benchmark, x100 (paper rows marked)")
    create_markdown_artifact(report_markdown(table, results.manifest(), map_png), key="benchmark-report",
                             description="PEARL benchmark report with the entity map")
    return {"version": results.version, "table": table, "url": results.url}
