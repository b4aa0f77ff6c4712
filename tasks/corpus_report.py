"""Counts of an extraction run, read back from the datasets it wrote.

Computed from the datasets rather than from task return values so that a rerun which
reused every part reports the same numbers. Reads only small columns, part by part.
"""
from __future__ import annotations

from collections import Counter

from storage.datasets import Dataset, as_location, resolve_root
from pearl_redact import redact


class CountsDoNotReconcile(AssertionError):
    """pages read != kept + filtered + quarantined: a page was lost or counted twice."""


class NoSentences(ValueError):
    """Every page was filtered or quarantined: nothing downstream (phrases, a training set) can be built."""


def _count(ds: Dataset, column: str) -> Counter:
    counts: Counter = Counter()
    for batch in ds.iter_batches(columns=[column]):
        counts.update(batch.column(0).to_pylist())
    return counts


def corpus_counts(raw: Dataset, pages: Dataset, sentences: Dataset, quarantine: Dataset, aliases: Dataset) -> dict:
    status = Counter()
    filtered = Counter()
    for batch in pages.iter_batches(columns=["status", "filter_reason"]):
        for s, reason in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            status[s] += 1
            if s == "filtered":
                filtered[reason] += 1
    quarantined = _count(quarantine, "reason")
    alias_sources = _count(aliases, "source")
    counts = {
        "pages_read": raw.manifest()["rows"],
        "kept": status["kept"],
        "filtered": dict(sorted(filtered.items())),
        "quarantined": dict(sorted(quarantined.items())),
        "sentences": sentences.manifest()["rows"],
        "aliases": dict(sorted(alias_sources.items())),
    }
    total = counts["kept"] + sum(filtered.values()) + sum(quarantined.values())
    if total != counts["pages_read"]:
        raise CountsDoNotReconcile(
            f"pages read {counts['pages_read']} != kept {counts['kept']} + filtered {sum(filtered.values())}"
            f" + quarantined {sum(quarantined.values())}"
        )
    return counts


def require_sentences(counts: dict) -> None:
    """Raise NoSentences, saying where the pages went, when the corpus has no sentence."""
    if counts["sentences"]:
        return

    def by_reason(c: dict) -> str:
        return f" ({', '.join(f'{k} {v}' for k, v in c.items())})" if c else ""

    raise NoSentences(
        f"no sentence was kept: {counts['pages_read']} pages read, {counts['kept']} kept, "
        f"{sum(counts['filtered'].values())} filtered{by_reason(counts['filtered'])}, "
        f"{sum(counts['quarantined'].values())} quarantined{by_reason(counts['quarantined'])}; "
        "phrases and a training set need sentences; see the corpus-counts artifact")


_LENGTH_BINS = [1, 6, 11, 16, 21, 31, 41, 61, 101]


def sentence_length_table(sentences: Dataset) -> list[dict]:
    """Histogram of sentence length in words, for a table artifact."""
    import numpy as np
    import pyarrow.compute as pc

    counts = np.zeros(len(_LENGTH_BINS), dtype=np.int64)
    for batch in sentences.iter_batches(columns=["text"]):
        words = pc.add(pc.count_substring(batch.column(0), " "), 1).to_numpy(zero_copy_only=False)
        counts += np.bincount(np.searchsorted(_LENGTH_BINS, words, side="right") - 1, minlength=len(_LENGTH_BINS))
    total = int(counts.sum()) or 1
    rows = []
    for i, lo in enumerate(_LENGTH_BINS):
        label = f"{lo}-{_LENGTH_BINS[i + 1] - 1}" if i + 1 < len(_LENGTH_BINS) else f"{lo}+"
        rows.append({"words": label, "sentences": int(counts[i]), "share": f"{100 * counts[i] / total:.1f}%",
                     "bar": "#" * int(round(40 * counts[i] / total))})
    return rows


def counts_table(counts: dict) -> list[dict]:
    """Rows for a Prefect table artifact: one line per count, grouped."""
    rows = [{"group": "pages", "what": "read", "count": counts["pages_read"]},
            {"group": "pages", "what": "kept (articles with sentences)", "count": counts["kept"]}]
    rows += [{"group": "filtered", "what": k, "count": v} for k, v in counts["filtered"].items()]
    rows += [{"group": "quarantined", "what": k, "count": v} for k, v in counts["quarantined"].items()]
    rows += [{"group": "sentences", "what": "kept", "count": counts["sentences"]}]
    rows += [{"group": "aliases", "what": k, "count": v} for k, v in counts["aliases"].items()]
    return rows


def distribution_png(counts: dict, length_rows: list[dict]) -> bytes:
    """Where the pages went and how long the sentences are, as one PNG."""
    from runs.figures import png_bytes, pyplot

    fig, (left, right) = pyplot().subplots(1, 2, figsize=(10, 3.6), dpi=100)
    outcome = {"kept": counts["kept"], **{f"filtered: {k}": v for k, v in counts["filtered"].items()},
               **{f"quarantined: {k}": v for k, v in counts["quarantined"].items()}}
    left.barh(list(outcome)[::-1], list(outcome.values())[::-1], color="#4c72b0")
    left.set_title(f"{counts['pages_read']} pages read")
    right.bar([r["words"] for r in length_rows], [r["sentences"] for r in length_rows], color="#55a868")
    right.set_title(f"{counts['sentences']} sentences, by length in words")
    right.tick_params(axis="x", rotation=45)
    return png_bytes(fig)


def datasets_markdown(datasets: list, counts: dict, png: bytes | None = None) -> str:
    lines = ["# Corpus datasets written by this run", "",
             "| dataset | version | rows | location |", "|---|---|---|---|"]
    for d in datasets:
        lines.append(f"| {d.name} | `{d.version}` | {d.manifest()['rows']} | `{d.url}` |")
    lines += ["", f"Pages read **{counts['pages_read']}** = kept **{counts['kept']}** + filtered "
              f"**{sum(counts['filtered'].values())}** + quarantined **{sum(counts['quarantined'].values())}**.",
              "", "A directory without `_manifest.json` is incomplete and is never read."]
    if png:
        from runs.figures import markdown_image

        lines += ["", markdown_image(png, "pages and sentence lengths")]
    return "\n".join(lines)


def summary_markdown(storage_root: str, versions: dict[str, str], stages_run_id: str, stages_url: str) -> str:
    """The build-corpus run's own summary: every dataset the run ended with (name, version, rows, where,
    as a path to copy: the UI may not link to a file), the command that trains on its training set, and
    the link to its `corpus-stages` run, which holds the stages' artifacts. No code span in the link's
    text: the UI shows its backticks."""
    from runs.artifacts import train_command
    from storage.datasets import as_location

    lines = ["# Corpus built by this run", "",
             f"The stages ran in the child run [corpus-stages {stages_run_id}]({stages_url}): its Artifacts tab "
             "holds each stage's report (counts, phrases, positives, negatives, the training set).", "",
             "| dataset | version | rows | location |", "|---|---|---|---|"]
    for name, version in versions.items():
        ds = Dataset(storage_root, name, version, None)
        lines.append(f"| {name} | `{version}` | {ds.manifest().get('rows', '')} | `{as_location(ds.url)}` |")
    if "training_set" in versions:
        lines += ["", "Train a model on its training set:", "", "```bash",
                  train_command(storage_root, versions["training_set"]), "```"]
    return "\n".join(lines)


def summary_lines(storage_root: str, versions: dict[str, str]) -> list[str]:
    """The end of a build in the run's log: each dataset's name, version and rows."""
    width = max(map(len, versions), default=0)
    return [f"{name:{width}}  {version}  {Dataset(storage_root, name, version, None).manifest().get('rows', 0):>12,} rows"
            for name, version in versions.items()]


from prefect import task  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402

from runs.artifacts import publish  # noqa: E402
from runs.progress import log_summary  # noqa: E402


@task(name="corpus-report", cache_policy=NONE)
def corpus_report_task(raw: Dataset, pages: Dataset, sentences: Dataset, quarantine: Dataset,
                       alias_mentions: Dataset, aliases: Dataset) -> dict:
    counts = corpus_counts(raw, pages, sentences, quarantine, aliases)
    publish(create_table_artifact, counts_table(counts), key="corpus-counts",
            description="Pages read = kept + filtered + quarantined, by reason")
    lengths = sentence_length_table(sentences)
    publish(create_table_artifact, lengths, key="sentence-lengths", description="Sentences by length in words")
    png = distribution_png(counts, lengths)
    publish(create_markdown_artifact,
            datasets_markdown([raw, pages, sentences, quarantine, alias_mentions, aliases], counts, png),
            key="corpus-datasets", description="Dataset versions written by this run")
    require_sentences(counts)  # after the artifacts, which show where the pages went
    return {**counts, "versions": {d.name: d.version for d in (raw, pages, sentences, quarantine, alias_mentions, aliases)},
            "storage_root": redact(raw.root)}


@task(name="corpus-summary", cache_policy=NONE)
def corpus_summary_task(built: dict, stages_run_id, storage_root: str) -> str:
    """The summary artifact on the build-corpus run itself (its stages' artifacts are on the child run);
    `storage_root` as the flow was given it (the report's own is redacted)."""
    from prefect.utilities.urls import url_for

    # a relative link still opens in the UI that shows the artifact, when no PREFECT_UI_URL is set
    url = url_for("flow-run", obj_id=stages_run_id) or f"/runs/flow-run/{stages_run_id}"
    md = summary_markdown(storage_root, built["versions"], str(stages_run_id), url)
    publish(create_markdown_artifact, md, key="corpus-summary",
            description="Dataset versions and rows of this run; the stages' reports are on its corpus-stages run")
    log_summary(f"build-corpus built {len(built['versions'])} datasets under {as_location(resolve_root(storage_root))}",
                summary_lines(storage_root, built["versions"]))
    return md

