"""tasks.pages: raw records -> pages, sentences, alias mentions, quarantine."""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from storage.datasets import Dataset
from storage.schemas import ALIAS_MENTIONS, PAGES, QUARANTINE, RAW_PAGES, SENTENCES
from tasks.pages import (
    SENTENCE_ID_STRIDE,
    alias_bucket,
    commit_page_outputs,
    extract_page_rows,
    extract_part,
    find_duplicate_pages,
    plan_page_outputs,
    split_sentences,
    wikitext,
)
from tests.conftest import part_file


def raw(seq, page_id, title, text, *, ns=0, redirect=None, fmt="wikitext", error=None, raw_bytes=None):
    return {
        "seq": seq, "page_id": page_id, "title": title, "namespace": ns, "redirect_target": redirect,
        "text_format": fmt, "text": text, "raw": raw_bytes, "error": error,
        "error_detail": f"{error} detail" if error else None,
    }


ADA = (
    "{{Infobox person|name=Ada}}\n"
    "Dr. Smith went to [[Washington, D.C.|Washington]]. He arrived at 3 p.m. on Monday.<ref>Diary.</ref>\n"
    "Yes.\n"
    "[[File:Ada.jpg|thumb|A caption.]]\n"
    "A line without a full stop\n"
    "== Work ==\n"
    "Is it true? Yes, it is!\n"
    "== References ==\n"
    "This reference sentence is not prose.\n"
)


def corpus() -> list[dict]:
    return [
        raw(0, 1, "Ada Lovelace", ADA),
        raw(1, 2, "Ada", "#REDIRECT [[Ada Lovelace]]", redirect="Ada Lovelace"),
        raw(2, 3, "Lovelace", "#REDIRECT [[ada_lovelace#Life]]"),  # redirect known from the text only
        raw(3, 4, "ADA LOVELACE", "#REDIRECT [[Ada Lovelace]]", redirect="Ada Lovelace"),  # same name
        raw(4, 5, "Talk:Ada Lovelace", "Talk page. It has sentences in it.", ns=1),
        raw(5, 6, "Mercury", "'''Mercury''' may refer to a planet.\n* [[Mercury (planet)|the planet]]\n{{disambiguation}}"),
        raw(6, 7, "List of mathematicians", "This is a list of famous mathematicians. [[Euler|Leonhard]] is one."),
        raw(7, 8, "Stub", "{{stub}}\n[[Category:Stubs]]"),
        raw(8, None, None, None, error="malformed_xml", raw_bytes=b"<page><title>Broken</titel>"),
        raw(9, 10, "Bad bytes", None, error="invalid_utf8", raw_bytes=b"<page>caf\xe9</page>"),
        raw(10, 11, "Plain record", "Plain text records are read too. They have two sentences here.\n* a list line.",
            fmt="plain"),
        raw(11, 12, "Washington", "The [[Washington, D.C.|capital]] is a city. The [[Washington, D.C.|capital]] is "
            "big. Also [[George Washington|the general]] lived nearby."),
    ]


def test_every_record_lands_in_pages_or_quarantine_exactly_once():
    records = corpus()
    pages, sentences, mentions, quarantine, stats = extract_page_rows(records)
    readable = [r for r in records if not r["error"]]
    assert len(pages) + len(quarantine) == len(records)
    assert sorted(p["page_id"] for p in pages) == sorted(r["page_id"] for r in readable)
    assert sorted(q["seq"] for q in quarantine) == [r["seq"] for r in records if r["error"]]
    kept = [p for p in pages if p["status"] == "kept"]
    filtered = [p for p in pages if p["status"] == "filtered"]
    assert len(kept) + len(filtered) + len(quarantine) == len(records)
    assert all(p["filter_reason"] is None for p in kept) and all(p["filter_reason"] for p in filtered)
    # every row fits its schema
    for rows, schema in ((pages, PAGES), (sentences, SENTENCES), (quarantine, QUARANTINE)):
        pa.Table.from_pylist(rows, schema=schema)


def test_kinds_status_and_reasons():
    pages, *_ = extract_page_rows(corpus())
    by_id = {p["page_id"]: p for p in pages}
    expect = {
        1: ("article", "kept", None),
        2: ("redirect", "filtered", "redirect"),
        3: ("redirect", "filtered", "redirect"),
        4: ("redirect", "filtered", "redirect"),
        5: ("other_namespace", "filtered", "namespace"),
        6: ("disambiguation", "filtered", "disambiguation"),
        7: ("list", "filtered", "list"),
        8: ("article", "filtered", "no_sentences"),
        11: ("article", "kept", None),
        12: ("article", "kept", None),
    }
    assert {k: (p["kind"], p["status"], p["filter_reason"]) for k, p in by_id.items()} == expect
    assert [by_id[i]["is_redirect"] for i in (2, 3, 4)] == [True, True, True]
    assert (by_id[2]["redirect_target"], by_id[3]["redirect_target"]) == ("Ada Lovelace", "Ada lovelace")
    assert not by_id[1]["is_redirect"] and by_id[1]["redirect_target"] is None


def test_quarantine_keeps_reason_and_raw_bytes():
    _, _, _, quarantine, _ = extract_page_rows(corpus())
    assert [(q["seq"], q["reason"], q["raw"]) for q in quarantine] == [
        (8, "malformed_xml", b"<page><title>Broken</titel>"),
        (9, "invalid_utf8", b"<page>caf\xe9</page>"),
    ]
    assert quarantine[1]["page_id"] == 10 and quarantine[1]["title"] == "Bad bytes"
    assert quarantine[0]["detail"] == "malformed_xml detail"


def test_sentences_are_split_filtered_and_numbered():
    pages, sentences, _, _, stats = extract_page_rows(corpus())
    ada = [s["text"] for s in sentences if s["page_id"] == 1]
    # Abbreviations and times do not end a sentence; the short line, the caption-like line
    # without a full stop and the references section do not give sentences.
    assert ada == ["Dr. Smith went to Washington.", "He arrived at 3 p.m. on Monday.", "Is it true?", "Yes, it is!"]
    assert [s["text"] for s in sentences if s["page_id"] == 11] == [
        "Plain text records are read too.", "They have two sentences here."]
    by_id = {p["page_id"]: p for p in pages}
    per_page = Counter(s["page_id"] for s in sentences)
    assert {p["page_id"]: p["n_sentences"] for p in pages if p["n_sentences"]} == dict(per_page)
    assert all(p["n_sentences"] == 0 for p in pages if p["status"] == "filtered")
    assert by_id[1]["text"].split("\n")[0] == "Dr. Smith went to Washington. He arrived at 3 p.m. on Monday."
    # ids: unique, page_id * stride + index, index counting from 0 within each page
    ids = [s["sentence_id"] for s in sentences]
    assert len(ids) == len(set(ids))
    for s in sentences:
        assert s["sentence_id"] == s["page_id"] * SENTENCE_ID_STRIDE + s["index"]
    for pid, n in per_page.items():
        assert [s["index"] for s in sentences if s["page_id"] == pid] == list(range(n))
    assert stats["sentences_kept"] == len(sentences)
    assert stats["sentences_filtered"] == 2  # "Yes." and the line without a full stop


def test_disambiguation_and_list_pages_give_no_sentences_and_no_anchors():
    _, sentences, mentions, _, _ = extract_page_rows(corpus())
    assert not any(s["page_id"] in (6, 7) for s in sentences)
    assert ("the planet", "Mercury (planet)", "anchor") not in mentions
    assert ("Leonhard", "Euler", "anchor") not in mentions


def test_redirect_and_anchor_mentions():
    _, _, mentions, _, stats = extract_page_rows(corpus())
    assert mentions == Counter({
        ("Ada", "Ada Lovelace", "redirect"): 1,
        ("Lovelace", "Ada lovelace", "redirect"): 1,
        ("Washington", "Washington, D.C.", "anchor"): 1,
        ("capital", "Washington, D.C.", "anchor"): 2,
        ("the general", "George Washington", "anchor"): 1,
    })
    assert stats["anchors"] == 4


@pytest.mark.parametrize(
    "paragraph, expected",
    [
        ("Dr. Smith went to Washington. He arrived at 3 p.m. on Monday.",
         ["Dr. Smith went to Washington.", "He arrived at 3 p.m. on Monday."]),
        ("The U.S. economy grew by 2.5% in 2010. Mr. Jones disagreed.",
         ["The U.S. economy grew by 2.5% in 2010.", "Mr. Jones disagreed."]),
        ("Born c. 1815 in London, she died in 1852. Her notes (e.g. Note G) survive.",
         ["Born c. 1815 in London, she died in 1852.", "Her notes (e.g. Note G) survive."]),
        ('He said "stop." Then she left.', ['He said "stop."', "Then she left."]),
        ("Is it true? Yes, it is!", ["Is it true?", "Yes, it is!"]),
        ("", []),
    ],
)
def test_split_sentences(paragraph, expected):
    assert split_sentences(paragraph) == expected


def test_sentence_filters_follow_parameters():
    text = "One two three four. One two. " + "Long " * 40 + "sentence."
    records = [raw(0, 1, "A", text)]
    _, s3, *_ = extract_page_rows(records)
    assert [s["text"] for s in s3] == ["One two three four.", "Long " * 40 + "sentence."]
    _, s2, *_ = extract_page_rows(records, min_sentence_words=2, max_sentence_chars=100)
    assert [s["text"] for s in s2] == ["One two three four.", "One two."]


def test_article_with_only_short_lines_is_filtered_no_sentences():
    pages, sentences, *_ = extract_page_rows([raw(0, 1, "A", "Hi.\nNo stop here at all")])
    assert sentences == [] and pages[0]["filter_reason"] == "no_sentences" and pages[0]["text"]


def test_markup_that_breaks_the_parser_is_quarantined(monkeypatch):
    real_clean = wikitext.clean

    def fragile_clean(text, namespaces=frozenset()):
        if "BOOM" in text:
            raise RecursionError("maximum recursion depth exceeded")
        return real_clean(text, namespaces)

    monkeypatch.setattr(wikitext, "clean", fragile_clean)
    records = [raw(0, 1, "Good", "A good sentence is here."), raw(1, 2, "Bad", "BOOM {{{{{{ caf\u00e9"),
               raw(2, 3, "Good too", "Another good sentence here.")]
    pages, sentences, _, quarantine, _ = extract_page_rows(records)
    assert [p["page_id"] for p in pages] == [1, 3]
    assert len(quarantine) == 1
    q = quarantine[0]
    assert (q["seq"], q["page_id"], q["title"], q["reason"]) == (1, 2, "Bad", "malformed_markup")
    assert q["raw"] == "BOOM {{{{{{ caf\u00e9".encode("utf-8")
    assert q["detail"].startswith("RecursionError")
    assert [s["page_id"] for s in sentences] == [1, 3]


def test_plain_records_use_title_for_kind():
    records = [raw(0, 1, "List of rivers", "Rivers are listed here.", fmt="plain"),
               raw(1, 2, "Nile", "The Nile is a river. It is [[long]].", fmt="plain")]
    pages, sentences, mentions, _, _ = extract_page_rows(records)
    assert [p["kind"] for p in pages] == ["list", "article"]
    assert [s["text"] for s in sentences] == ["The Nile is a river.", "It is [[long]]."]  # plain text is not parsed
    assert mentions == Counter()


def test_alias_bucket_is_stable_and_in_range():
    aliases = [f"alias {i}" for i in range(200)] + ["caf\u00e9", ""]
    buckets = [alias_bucket(a, 8) for a in aliases]
    assert all(0 <= b < 8 for b in buckets)
    assert buckets == [alias_bucket(a, 8) for a in aliases]
    assert len(set(buckets)) == 8  # 200 aliases reach every bucket
    assert all(alias_bucket(a, 1) == 0 for a in aliases)


# --- extract_part over datasets ------------------------------------------------------------------
PARAMS = {"alias_buckets": 4, "min_sentence_words": 3, "max_sentence_chars": 1000}
NO_DUPLICATES = np.empty((0, 2), dtype=np.int64)


def _raw_dataset(root: str) -> Dataset:
    d = Dataset(root, "raw_pages", "raw1", RAW_PAGES)
    records = corpus()
    d.write_part(0, pa.Table.from_pylist(records[:6], schema=RAW_PAGES))
    d.write_part(1, pa.Table.from_pylist(records[6:], schema=RAW_PAGES))
    d.commit(code_version="t", params={}, inputs={})
    return d


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns


def test_extract_part_writes_four_parts_then_reuses_them(root):
    raw_ds = _raw_dataset(root)
    out = plan_page_outputs(raw_ds, PARAMS)
    assert [d.name for d in out.all()] == ["pages", "sentences", "alias_mentions", "quarantine"]
    assert len({d.version for d in out.all()}) == 4

    results = [extract_part(raw_ds, i, out, NO_DUPLICATES, n_buckets=4) for i in (0, 1)]
    assert [r["reused"] for r in results] == [False, False]
    assert [r["records"] for r in results] == [6, 6]

    exp_pages, exp_sentences, exp_mentions, exp_quarantine, _ = extract_page_rows(corpus())
    pages = out.pages.read_part(0).to_pylist() + out.pages.read_part(1).to_pylist()
    sentences = out.sentences.read_part(0).to_pylist() + out.sentences.read_part(1).to_pylist()
    quarantine = out.quarantine.read_part(0).to_pylist() + out.quarantine.read_part(1).to_pylist()
    mentions = out.alias_mentions.read_part(0).to_pylist() + out.alias_mentions.read_part(1).to_pylist()
    assert pages == pa.Table.from_pylist(exp_pages, schema=PAGES).to_pylist()
    assert sentences == pa.Table.from_pylist(exp_sentences, schema=SENTENCES).to_pylist()
    assert quarantine == pa.Table.from_pylist(exp_quarantine, schema=QUARANTINE).to_pylist()
    summed = Counter()
    for m in mentions:
        assert m["bucket"] == alias_bucket(m["alias"], 4)
        summed[(m["alias"], m["target"], m["source"])] += m["count"]
    assert summed == exp_mentions
    assert out.quarantine.read_part(0).num_rows == 0  # a part with nothing to quarantine is still written

    stamps = {d.name: _stamp(part_file(d, 0)) for d in out.all()}
    assert extract_part(raw_ds, 0, out, NO_DUPLICATES, n_buckets=4) == {"part": 0, "reused": True}
    assert {d.name: _stamp(part_file(d, 0)) for d in out.all()} == stamps

    # A part with one of its four outputs missing is done again.
    os.remove(part_file(out.pages, 0))
    again = extract_part(raw_ds, 0, out, NO_DUPLICATES, n_buckets=4)
    assert again["reused"] is False
    assert out.pages.read_part(0).to_pylist() == pages[: out.pages.read_part(0).num_rows]

    manifests = commit_page_outputs(out, raw_ds, PARAMS)
    assert set(manifests) == {"pages", "sentences", "alias_mentions", "quarantine"}
    assert manifests["pages"]["rows"] + manifests["quarantine"]["rows"] == 12
    assert manifests["sentences"]["rows"] == len(exp_sentences)
    assert manifests["pages"]["inputs"] == {"raw_pages": "raw1"}
    assert manifests["pages"]["stats"]["records"] == 12
    assert "reused" not in manifests["pages"]["stats"] and "part" not in manifests["pages"]["stats"]


def test_plan_page_outputs_versions(root):
    raw_ds = _raw_dataset(root)
    a = plan_page_outputs(raw_ds, PARAMS)
    assert a == plan_page_outputs(raw_ds, dict(reversed(list(PARAMS.items()))))
    assert a.pages.version != plan_page_outputs(raw_ds, {**PARAMS, "min_sentence_words": 4}).pages.version
    other_raw = Dataset(raw_ds.root, "raw_pages", "raw2", RAW_PAGES)
    assert a.sentences.version != plan_page_outputs(other_raw, PARAMS).sentences.version
    assert all(d.root == raw_ds.root for d in a.all())
    assert a.alias_mentions.schema == ALIAS_MENTIONS


# --- issue 13: counts after a resume, duplicate page ids -----------------------------------------
def _extract_all(raw_ds: Dataset, out, parts=None) -> None:
    for i, duplicates in enumerate(find_duplicate_pages(raw_ds)):
        if parts is None or i in parts:
            extract_part(raw_ds, i, out, duplicates, n_buckets=4)


def test_a_resumed_run_counts_the_reused_parts(tmp_path):
    clean_raw = _raw_dataset(str(tmp_path / "clean"))
    clean = plan_page_outputs(clean_raw, PARAMS)
    _extract_all(clean_raw, clean)
    clean_stats = commit_page_outputs(clean, clean_raw, PARAMS)["pages"]["stats"]
    assert clean_stats["records"] == 12 and clean_stats["sentences_kept"] == 9

    # Killed during `pages`: part 0 done, part 1 only half written, nothing committed.
    raw_ds = _raw_dataset(str(tmp_path / "resumed"))
    out = plan_page_outputs(raw_ds, PARAMS)
    _extract_all(raw_ds, out, parts={0})
    extract_part(raw_ds, 1, out, NO_DUPLICATES, n_buckets=4)
    os.remove(part_file(out.pages, 1))
    _extract_all(raw_ds, out)  # the rerun: part 0 reused, part 1 redone
    manifests = commit_page_outputs(out, raw_ds, PARAMS)
    assert all(m["stats"] == clean_stats for m in manifests.values())



def test_find_duplicate_pages_names_later_records_and_the_first_seq(root):
    d = Dataset(root, "raw_pages", "dups", RAW_PAGES)
    parts = [[raw(0, 5, "A", "a"), raw(1, 7, "B", "b"), raw(2, 5, "A", "a"),
              raw(3, 9, "C", None, error="invalid_utf8")],
             [raw(4, 9, "C", "c"), raw(5, 7, "B", "b"), raw(6, 5, "A", "a"),
              raw(7, None, None, None, error="malformed_xml")],
             [raw(8, 1, "D", "d")]]
    for i, rows in enumerate(parts):
        d.write_part(i, pa.Table.from_pylist(rows, schema=RAW_PAGES))
    d.commit(code_version="t", params={}, inputs={})
    # Unreadable records are quarantined anyway: page 9 is first *read* at seq 4.
    assert [x.tolist() for x in find_duplicate_pages(d)] == [[[2, 0]], [[5, 1], [6, 0]], []]


def test_the_same_source_twice_or_a_repeated_id_gives_no_duplicate_sentence_ids(tmp_path, root):
    import json

    from tasks.raw_pages.sequential import write_raw_pages

    src = tmp_path / "pages.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in [
        {"id": 1, "title": "Alpha", "text": "Alpha is the first letter. It comes before beta."},
        {"id": 2, "title": "Beta", "text": "Beta is the second letter."},
        {"id": 1, "title": "Alpha copy", "text": "A repeated id with other text. It is not the first."},
    ]) + "\n")
    raw_ds = Dataset(root, "raw_pages", "twice", RAW_PAGES)
    raw_stats = write_raw_pages([str(src), str(src)], raw_ds, pages_per_part=2)
    raw_ds.commit(code_version="t", params={}, inputs={}, stats=raw_stats)
    out = plan_page_outputs(raw_ds, PARAMS)
    _extract_all(raw_ds, out)
    manifests = commit_page_outputs(out, raw_ds, PARAMS)

    sentences = out.sentences.read().to_pylist()
    ids = [s["sentence_id"] for s in sentences]
    assert len(ids) == len(set(ids)) == 3
    pages = out.pages.read().to_pylist()
    assert sorted(p["page_id"] for p in pages) == [1, 2]
    quarantine = out.quarantine.read().to_pylist()
    assert [(q["seq"], q["page_id"], q["reason"], q["detail"]) for q in quarantine] == [
        (2, 1, "duplicate_page_id", "page_id 1 was first read at seq 0"),
        (3, 1, "duplicate_page_id", "page_id 1 was first read at seq 0"),
        (4, 2, "duplicate_page_id", "page_id 2 was first read at seq 1"),
        (5, 1, "duplicate_page_id", "page_id 1 was first read at seq 0"),
    ]
    assert quarantine[0]["raw"] == b"A repeated id with other text. It is not the first."
    assert manifests["pages"]["rows"] + manifests["quarantine"]["rows"] == raw_ds.manifest()["rows"] == 6


def test_page_ids_and_sentence_counts_that_would_collide_are_quarantined(monkeypatch):
    too_big = 2**63 // SENTENCE_ID_STRIDE
    records = [raw(0, too_big, "Huge id", "A sentence is here."), raw(1, -too_big, "Lowest id", "A sentence is here."),
               raw(2, 3, "Long", "One sentence is here. Two sentences are here. Three sentences are here.")]
    pages, sentences, _, quarantine, _ = extract_page_rows(records)
    assert [(q["seq"], q["reason"]) for q in quarantine] == [(0, "page_id_out_of_range")]
    assert quarantine[0]["raw"] == b"A sentence is here."
    pa.Table.from_pylist(sentences, schema=SENTENCES)  # every id fits int64
    # A page with more sentences than the stride would run into the next page's ids.
    monkeypatch.setattr("tasks.pages.SENTENCE_ID_STRIDE", 2)
    pages, sentences, _, quarantine, _ = extract_page_rows(records[2:])
    assert (pages, sentences) == ([], [])
    assert [(q["seq"], q["reason"]) for q in quarantine] == [(2, "too_many_sentences")]
    assert quarantine[0]["detail"].startswith("3 sentences")
