"""tasks.corpus_report: counts read back from the datasets of a small corpus run."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from storage.datasets import Dataset
from storage.schemas import PAGES, RAW_PAGES, SENTENCES
from tasks.aliases import plan_aliases, write_alias_bucket
from tasks.corpus_report import (
    CountsDoNotReconcile,
    corpus_counts,
    counts_table,
    datasets_markdown,
    sentence_length_table,
)
from tasks.pages import commit_page_outputs, extract_part, find_duplicate_pages, plan_page_outputs
from tasks.raw_pages.sequential import write_raw_pages
from tests.conftest import BAD_JSONL, bad_jsonl, mediawiki_dump, page_xml

PARAMS = {"alias_buckets": 3, "min_sentence_words": 3, "max_sentence_chars": 1000}


def build_corpus(tmp_path, root: str) -> dict:
    """Run the extraction stages' plain functions on a nine-page dump."""
    malformed = page_xml(7, "Broken", "text").replace(b"<title>Broken</title>", b"<title>Broken</tite>")
    dump = mediawiki_dump(
        page_xml(1, "Alpha", "'''Alpha''' is the first letter. It comes before [[Beta|the second letter]]."),
        page_xml(2, "Beta", "Beta is the second letter of the alphabet."),
        page_xml(3, "Alef", "#REDIRECT [[Alpha]]", redirect="Alpha"),
        page_xml(4, "Talk:Alpha", "This talk page has a sentence.", ns=1),
        page_xml(5, "Alpha (disambiguation)", "Alpha may refer to a letter."),
        page_xml(6, "Stub", "{{stub}}"),
        malformed,
        page_xml(8, "Empty", None),
        page_xml(9, "List of letters", "This list has letters in it."),
    )
    src = tmp_path / "dump.xml"
    src.write_bytes(dump)
    raw = Dataset(root, "raw_pages", "raw1", RAW_PAGES)
    stats = write_raw_pages(str(src), raw, pages_per_part=4)
    raw.commit(code_version="t", params={}, inputs={}, stats=stats)
    assert stats["parts"] == 3

    out = plan_page_outputs(raw, PARAMS)
    for i, duplicates in enumerate(find_duplicate_pages(raw)):
        extract_part(raw, i, out, duplicates, n_buckets=3)
    commit_page_outputs(out, raw, PARAMS)

    aliases = plan_aliases(out.alias_mentions, PARAMS)
    for b in range(3):
        write_alias_bucket(out.alias_mentions, b, aliases)
    aliases.commit(code_version="t", params=PARAMS, inputs={"alias_mentions": out.alias_mentions.version})
    return {"raw": raw, "pages": out.pages, "sentences": out.sentences, "quarantine": out.quarantine,
            "alias_mentions": out.alias_mentions, "aliases": aliases}


def test_corpus_counts_reconcile(tmp_path, root):
    ds = build_corpus(tmp_path, root)
    counts = corpus_counts(ds["raw"], ds["pages"], ds["sentences"], ds["quarantine"], ds["aliases"])
    assert counts == {
        "pages_read": 9,
        "kept": 2,
        "filtered": {"disambiguation": 1, "list": 1, "namespace": 1, "no_sentences": 1, "redirect": 1},
        "quarantined": {"empty_page": 1, "malformed_xml": 1},
        "sentences": 3,
        "aliases": {"anchor": 1, "redirect": 1},
    }
    assert sorted(ds["aliases"].read().to_pylist(), key=lambda r: r["source"]) == [
        {"alias": "the second letter", "title": "Beta", "source": "anchor", "count": 1},
        {"alias": "Alef", "title": "Alpha", "source": "redirect", "count": 1},
    ]

    rows = counts_table(counts)
    assert {"group": "pages", "what": "read", "count": 9} in rows
    assert sum(r["count"] for r in rows if r["group"] in ("filtered", "quarantined")) == 7
    md = datasets_markdown(list(ds.values()), counts)
    for d in ds.values():
        assert f"`{d.version}`" in md
    assert "Pages read **9** = kept **2** + filtered **5** + quarantined **2**" in md


def _pages_copy(pages: Dataset, rows: list[dict], version: str) -> Dataset:
    d = Dataset(pages.root, "pages", version, PAGES)
    d.write_part(0, pa.Table.from_pylist(rows, schema=PAGES))
    d.commit(code_version="t", params={}, inputs={})
    return d


def test_missing_or_double_counted_page_does_not_reconcile(tmp_path, root):
    ds = build_corpus(tmp_path, root)
    rows = ds["pages"].read().to_pylist()
    for version, broken in (("lost-one", rows[1:]), ("twice", rows + rows[:1])):
        pages = _pages_copy(ds["pages"], broken, version)
        with pytest.raises(CountsDoNotReconcile, match="pages read 9"):
            corpus_counts(ds["raw"], pages, ds["sentences"], ds["quarantine"], ds["aliases"])
    assert issubclass(CountsDoNotReconcile, AssertionError)


def test_sentence_length_histogram(root):
    texts = ["Yes.", "Go home now.", "One two three four five.", "One two three four five six.", " ".join(["w"] * 150)]
    d = Dataset(root, "sentences", "s1", SENTENCES)
    d.write_part(0, pa.Table.from_pylist(
        [{"sentence_id": i, "page_id": 1, "index": i, "text": t} for i, t in enumerate(texts)], schema=SENTENCES))
    d.commit(code_version="t", params={}, inputs={})
    table = {r["words"]: r for r in sentence_length_table(d)}
    assert table["1-5"]["sentences"] == 3  # a one-word sentence is counted, not an error
    assert table["6-10"]["sentences"] == 1
    assert table["101+"]["sentences"] == 1
    assert sum(r["sentences"] for r in table.values()) == len(texts)
    assert table["1-5"]["share"] == "60.0%"


def test_a_corpus_without_sentences_is_refused_saying_where_the_pages_went(tmp_path, root):
    from tasks.corpus_report import NoSentences, require_sentences

    dump = mediawiki_dump(
        page_xml(1, "Alef", "#REDIRECT [[Alpha]]", redirect="Alpha"),
        page_xml(2, "Talk:Alpha", "This talk page has a sentence.", ns=1),
        page_xml(3, "Stub", "{{stub}}"),
        page_xml(4, "Empty", None),
    )
    src = tmp_path / "dump.xml"
    src.write_bytes(dump)
    raw = Dataset(root, "raw_pages", "raw1", RAW_PAGES)
    raw.commit(code_version="t", params={}, inputs={}, stats=write_raw_pages(str(src), raw))
    out = plan_page_outputs(raw, PARAMS)
    extract_part(raw, 0, out, find_duplicate_pages(raw)[0], n_buckets=3)
    commit_page_outputs(out, raw, PARAMS)
    aliases = plan_aliases(out.alias_mentions, PARAMS)
    aliases.commit(code_version="t", params=PARAMS, inputs={})
    counts = corpus_counts(raw, out.pages, out.sentences, out.quarantine, aliases)
    with pytest.raises(NoSentences) as err:
        require_sentences(counts)
    assert str(err.value) == (
        "no sentence was kept: 4 pages read, 0 kept, 3 filtered (namespace 1, no_sentences 1, redirect 1), "
        "1 quarantined (empty_page 1); phrases and a training set need sentences; see the corpus-counts artifact")
    require_sentences({**counts, "sentences": 1})  # one sentence is a corpus


def test_the_flow_stops_at_the_corpus_report_when_no_sentence_is_kept(tmp_path, root):
    """The whole extraction on Dask (duplicate pages found, parts mapped), then a clear failure."""
    from prefect.testing.utilities import prefect_test_harness

    from flows.build_corpus import build_corpus
    from tasks.corpus_report import NoSentences
    from tests.test_retrain_flow import latest_artifact

    src = tmp_path / "dump.xml"
    src.write_bytes(mediawiki_dump(
        page_xml(1, "Alef", "#REDIRECT [[Alpha]]", redirect="Alpha"),
        page_xml(2, "Talk:Alpha", "This talk page has a sentence.", ns=1),
        page_xml(3, "Aleph", "#REDIRECT [[Alpha]]", redirect="Alpha"),
        page_xml(1, "Alef", "#REDIRECT [[Alpha]]", redirect="Alpha"),  # the same page again
    ))
    with prefect_test_harness():
        with pytest.raises(NoSentences, match=r"^no sentence was kept: 4 pages read, 0 kept, 3 filtered "
                                              r"\(namespace 1, redirect 2\), 1 quarantined \(duplicate_page_id 1\)"):
            build_corpus(source=str(src), storage_root=root, read={"pages_per_partition": 2}, dask_workers=1)
        art = latest_artifact("corpus-counts")
    rows = json.loads(art.data) if isinstance(art.data, str) else art.data
    assert {"group": "quarantined", "what": "duplicate_page_id", "count": 1} in rows
    assert not (tmp_path / "store" / "phrase_occurrences").exists()  # nothing after the report ran


def test_bad_jsonl_records_are_quarantined_and_the_counts_reconcile(tmp_path, root):
    """Issue 45 item 8: the bad records of a JSON-lines input reach the quarantine dataset with
    their reason and line number, the good ones are pages, and read = kept + filtered + quarantined."""
    src = tmp_path / "bad.jsonl"
    src.write_bytes(bad_jsonl())
    raw = Dataset(root, "raw_pages", "raw1", RAW_PAGES)
    raw.commit(code_version="t", params={}, inputs={}, stats=write_raw_pages(str(src), raw, pages_per_part=4))
    out = plan_page_outputs(raw, PARAMS)
    for i, duplicates in enumerate(find_duplicate_pages(raw)):
        extract_part(raw, i, out, duplicates, n_buckets=3)
    commit_page_outputs(out, raw, PARAMS)
    aliases = plan_aliases(out.alias_mentions, PARAMS)
    aliases.commit(code_version="t", params=PARAMS, inputs={})
    counts = corpus_counts(raw, out.pages, out.sentences, out.quarantine, aliases)
    assert (counts["pages_read"], counts["kept"], counts["filtered"]) == (9, 2, {})
    assert counts["quarantined"] == {"invalid_utf8": 1, "malformed_json": 2, "malformed_record": 3,
                                     "page_id_out_of_range": 1}
    assert counts["sentences"] == 3
    quarantine = out.quarantine.read().to_pylist()
    lines = [n for n, (_, reason) in enumerate(BAD_JSONL, 1) if reason not in (None, "skip")]
    assert [(q["reason"], q["detail"].split(":")[0]) for q in quarantine] == [
        (BAD_JSONL[n - 1][1], f"line {n}") for n in lines]
    assert [q["raw"] for q in quarantine] == [BAD_JSONL[n - 1][0] + b"\n" for n in lines]


def test_the_build_corpus_run_summary_names_every_dataset_and_links_the_stages_run(tmp_path, root):
    """The summary on the build-corpus run itself (its stage reports are on the corpus-stages child run):
    the child run's link with no code span in its text (the UI shows the backticks), each location as
    a path to copy, not a file:// link a browser refuses to open from the UI."""
    from pathlib import Path

    from tasks.corpus_report import summary_markdown

    built = build_corpus(tmp_path, root)
    versions = {d.name: d.version for d in built.values()}
    md = summary_markdown(root, versions, "0b1c", "http://127.0.0.1:4200/runs/flow-run/0b1c")
    assert "[corpus-stages 0b1c](http://127.0.0.1:4200/runs/flow-run/0b1c)" in md
    assert "file://" not in md and "](" not in md.replace("](http://127.0.0.1:4200/runs/flow-run/0b1c)", "")
    for d in built.values():
        rows = d.manifest()["rows"]
        assert Path(d.url).is_absolute() and f"| {d.name} | `{d.version}` | {rows} | `{d.url}` |" in md
