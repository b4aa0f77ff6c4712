"""Counts and distributions of a phrase-mining run, read back from its datasets.

Artifacts: `phrase-counts` (sentences in = parsed + filtered + failed; occurrences found =
kept + filtered; phrases distinct = kept + filtered by reason: below min_freq, and with
`parser: pmi` below the NPMI threshold), `phrase-lexical-types` (ours
beside the paper's mix), `phrase-entity-types`, and `phrase-datasets` (markdown with the
versions and a bar chart inline).
"""
from __future__ import annotations

from collections import Counter

from pearl_model.phrases.labels import ENTITY_TYPES, LEXICAL_TYPES, PAPER_LEXICAL_SHARE
from pearl_model.phrases.mining import by_reason, check_stats
from runs.figures import markdown_image, png_bytes, pyplot
from storage.datasets import Dataset


class PhraseCountsDoNotReconcile(AssertionError):
    pass


# Counters a mining run has even when no chunk was mined (a run over no sentences sums to {}).
_MINING_COUNTERS = ("sentences_in", "sentences_parsed", "sentences_failed", "occurrences_found", "occurrences_kept")


def phrase_counts(stats: Dataset, phrases: Dataset) -> dict:
    mining = {**dict.fromkeys(_MINING_COUNTERS, 0), **stats.manifest()["stats"]}
    check_stats(mining)
    reduce = phrases.manifest()["stats"]
    rows = phrases.manifest()["rows"]
    dropped = sum(by_reason(reduce, "phrases_filtered_").values())
    if reduce["phrases_kept"] != rows or reduce["distinct_phrases"] != rows + dropped:
        raise PhraseCountsDoNotReconcile(f"phrases: {rows} rows written, reduce stats say {reduce}")
    if reduce["occurrences_in"] != mining["occurrences_kept"]:
        raise PhraseCountsDoNotReconcile(
            f"the reducers saw {reduce['occurrences_in']} occurrences, the mappers kept {mining['occurrences_kept']}")
    return {"mining": mining, "phrases": reduce}


def counts_table(counts: dict) -> list[dict]:
    m, p = counts["mining"], counts["phrases"]
    rows = [{"group": "sentences", "what": "in", "count": m["sentences_in"]},
            {"group": "sentences", "what": "parsed", "count": m["sentences_parsed"]},
            {"group": "sentences", "what": "parse failed", "count": m["sentences_failed"]}]
    rows += [{"group": "sentences filtered", "what": k, "count": v}
             for k, v in by_reason(m, "sentences_filtered_").items()]
    rows += [{"group": "occurrences", "what": "found", "count": m["occurrences_found"]},
             {"group": "occurrences", "what": "kept", "count": m["occurrences_kept"]}]
    rows += [{"group": "occurrences filtered", "what": k, "count": v}
             for k, v in by_reason(m, "occurrences_filtered_").items()]
    rows += [{"group": "phrases", "what": "distinct", "count": p["distinct_phrases"]},
             {"group": "phrases", "what": "kept (frequency >= min_freq)", "count": p["phrases_kept"]}]
    rows += [{"group": "phrases filtered", "what": k, "count": v}
             for k, v in by_reason(p, "phrases_filtered_").items()]
    if "phrases_typed_by_examples" in p:  # ner_scope "examples" (tasks/phrase_types.py)
        rows += [{"group": "entity types", "what": what, "count": p[k]} for what, k in (
            ("example sentences parsed with NER", "example_sentences"),
            ("example requests matched", "requests_matched"), ("example requests unmatched", "requests_unmatched"),
            ("phrases typed by example votes", "phrases_typed_by_examples"),
            ("phrases without a vote (OTHER)", "phrases_without_example_vote"))]
    return rows


def type_distributions(phrases: Dataset) -> tuple[Counter, Counter]:
    lexical, entity = Counter(), Counter()
    for batch in phrases.iter_batches(columns=["lexical_type", "entity_type"]):
        lexical.update(batch.column(0).to_pylist())
        entity.update(batch.column(1).to_pylist())
    return lexical, entity


def share_rows(counts: Counter, order: tuple[str, ...], paper: dict[str, float] | None = None) -> list[dict]:
    total = sum(counts.values()) or 1
    rows = []
    for t in order:
        row = {"type": t, "phrases": counts.get(t, 0), "share %": round(100 * counts.get(t, 0) / total, 1)}
        if paper is not None:
            row["paper share %"] = paper[t]
        rows.append(row)
    return rows


def distribution_png(lexical_rows: list[dict], entity_rows: list[dict]) -> bytes:
    import numpy as np

    fig, (left, right) = pyplot().subplots(1, 2, figsize=(11, 3.8), dpi=100, gridspec_kw={"width_ratios": [1, 2]})
    x = np.arange(len(lexical_rows))
    left.bar(x - 0.2, [r["share %"] for r in lexical_rows], 0.4, label="this corpus", color="#4c72b0")
    left.bar(x + 0.2, [r["paper share %"] for r in lexical_rows], 0.4, label="paper (3.8M phrases)", color="#dd8452")
    left.set_xticks(x, [r["type"] for r in lexical_rows])
    left.set_ylabel("% of phrases")
    left.set_title("lexical types")
    left.legend()
    shown = [r for r in entity_rows if r["phrases"]]
    right.bar([r["type"] for r in shown], [r["phrases"] for r in shown], color="#55a868")
    right.set_yscale("log")
    right.set_title("entity types (phrases, log scale)")
    right.tick_params(axis="x", rotation=60)
    return png_bytes(fig)


def datasets_markdown(datasets: list[Dataset], counts: dict, png: bytes | None, examples: list[dict]) -> str:
    m, p = counts["mining"], counts["phrases"]
    lines = ["# Phrase datasets written by this run", "", "| dataset | version | rows | location |", "|---|---|---|---|"]
    lines += [f"| {d.name} | `{d.version}` | {d.manifest()['rows']} | `{d.url}` |" for d in datasets]
    filtered = sum(by_reason(m, "sentences_filtered_").values())
    dropped = by_reason(p, "phrases_filtered_")
    lines += ["", f"Sentences in **{m['sentences_in']}** = parsed **{m['sentences_parsed']}** + filtered "
              f"**{filtered}** + failed **{m['sentences_failed']}**; phrases seen "
              f"**{p['distinct_phrases']}** = kept **{p['phrases_kept']}** + filtered "
              f"**{sum(dropped.values())}** ({', '.join(f'{k} {v}' for k, v in dropped.items())})."]
    if examples:
        lines += ["", "Most frequent phrases:", "", "| phrase | label | frequency |", "|---|---|---|"]
        lines += [f"| {r['phrase']} | {r['label']} | {r['frequency']} |" for r in examples]
    if png:
        lines += ["", markdown_image(png, "phrase types")]
    return "\n".join(lines)


def top_phrases(phrases: Dataset, n: int = 15) -> list[dict]:
    t = phrases.read(columns=["phrase", "label", "frequency"])
    return t.sort_by([("frequency", "descending"), ("phrase", "ascending")]).slice(0, n).to_pylist()


from prefect import task  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402

from runs.artifacts import publish  # noqa: E402


@task(name="phrase-report", cache_policy=NONE)
def phrase_report_task(occurrences: Dataset, stats: Dataset, phrases: Dataset) -> dict:
    counts = phrase_counts(stats, phrases)
    publish(create_table_artifact, counts_table(counts), key="phrase-counts",
            description="Sentences, occurrences and phrases: in = kept + filtered, by reason")
    lexical, entity = type_distributions(phrases)
    lex_rows = share_rows(lexical, LEXICAL_TYPES, PAPER_LEXICAL_SHARE)
    ent_rows = share_rows(entity, ENTITY_TYPES)
    publish(create_table_artifact, lex_rows, key="phrase-lexical-types",
            description="Lexical types, beside the paper's mix")
    publish(create_table_artifact, ent_rows, key="phrase-entity-types",
            description="OntoNotes entity types of the phrases")
    png = distribution_png(lex_rows, ent_rows)
    publish(create_markdown_artifact, datasets_markdown([occurrences, stats, phrases], counts, png, top_phrases(phrases)),
            key="phrase-datasets", description="Phrase dataset versions written by this run")
    return {**counts, "lexical_types": dict(lexical), "entity_types": dict(entity),
            "versions": {d.name: d.version for d in (occurrences, stats, phrases)}}
