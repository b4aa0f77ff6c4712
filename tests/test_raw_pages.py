"""tasks.raw_pages: cutting MediaWiki XML / JSON lines into raw_pages parts."""
from __future__ import annotations

import bz2
import gzip
import html
import json
import os
import random
import re

import fsspec
import pyarrow.parquet as pq
import pytest

from storage.datasets import Dataset, dataset_version
from storage.schemas import RAW_PAGES
from tasks.raw_pages import sequential, xml_dump
from tasks.raw_pages.sequential import InputIncomplete, check_input_complete, plan_raw_pages, write_raw_pages
from tasks.raw_pages.xml_dump import (
    CODE_VERSION, SYNTHETIC_ID_START, SourceError, check_source, detect_format, sample_dump,
)
from tests.conftest import BAD_JSONL, FOOTER, HEADER, bad_jsonl, mediawiki_dump, page_xml, part_file


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _run(source: str, root: str, version: str = "v1", **kw) -> tuple[dict, list[dict], Dataset]:
    out = Dataset(root, "raw_pages", version, RAW_PAGES)
    stats = write_raw_pages(source, out, **kw)
    out.commit(code_version="t", params={}, inputs={}, stats=stats)
    return stats, out.read().to_pylist(), out


def _compress(name: str, data: bytes) -> bytes:
    if name.endswith(".bz2"):
        return bz2.compress(data)
    if name.endswith(".gz"):
        return gzip.compress(data)
    return data


def _words(rnd: random.Random, n: int) -> str:
    return " ".join(rnd.choice(["alpha", "beta", "gamma", "delta"]) + str(rnd.randint(0, 10**6)) for _ in range(n))


# --- normal pages --------------------------------------------------------------------------
ODD_TEXT = "Tom & Jerry <b>bold</b> \"quoted\" 'apos' caf\u00e9 \u4e2d\u6587\nsecond line with [[link|anchor]] and {{tpl}}"


@pytest.mark.parametrize("name", ["dump.xml", "dump.xml.bz2", "dump.xml.gz"])
def test_pages_and_redirects(tmp_path, root, name):
    dump = mediawiki_dump(
        page_xml(10, "Alpha", ODD_TEXT),
        page_xml(12, "Beta", "#REDIRECT [[Alpha]]", redirect="Alpha"),
        page_xml(13, "Talk:Gamma", "Talk page text", ns=1),
        page_xml(15, "AT&T", "Text of AT&T.", redirect=None),
    )
    stats, rows, out = _run(_write(tmp_path, name, _compress(name, dump)), root)
    assert stats["pages_read"] == 4 and stats["input_complete"] and stats["input_error"] is None
    assert stats["unreadable_by_reason"] == {} and stats["parts"] == 1 and stats["format"] == "mediawiki-xml"
    assert [r["seq"] for r in rows] == [0, 1, 2, 3]
    assert [r["page_id"] for r in rows] == [10, 12, 13, 15]
    assert [r["title"] for r in rows] == ["Alpha", "Beta", "Talk:Gamma", "AT&T"]
    assert [r["namespace"] for r in rows] == [0, 0, 1, 0]
    assert [r["redirect_target"] for r in rows] == [None, "Alpha", None, None]
    assert rows[0]["text"] == ODD_TEXT  # XML escapes undone, newlines kept
    assert rows[1]["text"] == "#REDIRECT [[Alpha]]"
    assert all(r["text_format"] == "wikitext" and r["error"] is None and r["raw"] is None for r in rows)


def test_partitioning_into_parts_of_n_pages(tmp_path, root):
    dump = mediawiki_dump(*(page_xml(i, f"Page {i}", f"Text {i}.") for i in range(1, 24)))
    stats, rows, out = _run(_write(tmp_path, "d.xml", dump), root, pages_per_part=5)
    assert stats["parts"] == 5 and stats["pages_read"] == 23
    assert [pq.ParquetFile(part_file(out, i)).metadata.num_rows for i in range(5)] == [5, 5, 5, 5, 3]
    assert not out.has_part(5)
    assert [p["rows"] for p in out.manifest()["parts"]] == [5, 5, 5, 5, 3]
    assert [r["seq"] for r in rows] == list(range(23))
    assert [r["page_id"] for r in rows] == list(range(1, 24))
    assert out.read_part(2).column("page_id").to_pylist() == [11, 12, 13, 14, 15]


def test_exact_multiple_gives_no_empty_part(tmp_path, root):
    dump = mediawiki_dump(*(page_xml(i, f"Page {i}", "x") for i in range(1, 7)))
    stats, rows, out = _run(_write(tmp_path, "d.xml", dump), root, pages_per_part=3)
    assert stats["parts"] == 2
    assert [p["rows"] for p in out.manifest()["parts"]] == [3, 3]


def test_max_pages(tmp_path, root):
    dump = mediawiki_dump(*(page_xml(i, f"Page {i}", f"Text {i}.") for i in range(1, 21)))
    stats, rows, out = _run(_write(tmp_path, "d.xml", dump), root, pages_per_part=5, max_pages=7)
    assert stats["pages_read"] == 7 and stats["parts"] == 2
    assert [r["page_id"] for r in rows] == list(range(1, 8))
    assert [p["rows"] for p in out.manifest()["parts"]] == [5, 2]


def test_pages_per_part_must_be_positive(tmp_path, root):
    src = _write(tmp_path, "d.xml", mediawiki_dump(page_xml(1, "A", "a")))
    with pytest.raises(ValueError):
        write_raw_pages(src, Dataset(root, "raw_pages", "v", RAW_PAGES), pages_per_part=0)


def test_progress_reports(tmp_path, root):
    dump = mediawiki_dump(*(page_xml(i, f"Page {i}", "x") for i in range(1, 11)))
    src = _write(tmp_path, "d.xml", dump)
    calls = []
    write_raw_pages(src, Dataset(root, "raw_pages", "v", RAW_PAGES), pages_per_part=4,
                    progress=lambda pages, done, total: calls.append((pages, done, total)))
    assert [c[0] for c in calls] == [4, 8, 10]
    assert all(c[2] == len(dump) for c in calls)
    assert calls[-1][1] == len(dump)
    assert [c[1] for c in calls] == sorted(c[1] for c in calls)


# --- damaged input -------------------------------------------------------------------------
def test_truncated_bz2_keeps_pages_before_the_cut(tmp_path, root):
    rnd = random.Random(7)
    pages = [page_xml(i, f"Page {i}", _words(rnd, 300)) for i in range(1, 121)]
    dump = mediawiki_dump(*pages)
    compressed = bz2.compress(dump, 1)  # 100 kB blocks: several blocks, so a cut keeps some
    cut = compressed[: int(len(compressed) * 0.6)]
    # Independently: what a decompressor can recover from the cut file.
    recoverable = bz2.BZ2Decompressor().decompress(cut)
    complete = recoverable.count(b"</page>")
    assert 0 < complete < len(pages)
    assert recoverable.count(b"<page>") == complete + 1  # the cut falls inside a page

    stats, rows, out = _run(_write(tmp_path, "cut.xml.bz2", cut), root, pages_per_part=7)
    assert not stats["input_complete"]
    assert "EOFError" in stats["input_error"]
    assert stats["unreadable_by_reason"] == {"truncated_input": 1}
    assert len(rows) == complete + 1
    assert [r["page_id"] for r in rows[:complete]] == list(range(1, complete + 1))
    assert all(r["error"] is None and r["text"] for r in rows[:complete])
    last = rows[-1]
    assert last["error"] == "truncated_input" and last["seq"] == complete
    assert last["page_id"] == complete + 1 and last["title"] == f"Page {complete + 1}"
    assert last["raw"].startswith(b"<page>")
    assert pages[complete].lstrip().startswith(last["raw"])  # raw is the start of that page, as read


def test_truncated_plain_xml_quarantines_the_partial_page(tmp_path, root):
    pages = [page_xml(i, f"Page {i}", f"Text of page {i}.") for i in range(1, 5)]
    dump = mediawiki_dump(*pages)
    cut_at = dump.index(pages[3]) + len(pages[3]) // 2
    src = _write(tmp_path, "cut.xml", dump[:cut_at])
    stats, rows, _ = _run(src, root)
    assert not stats["input_complete"]
    assert stats["input_error"] == f"{src}: input ended inside a <page>, at byte {cut_at}, last complete page 'Page 3'"
    assert [r["error"] for r in rows] == [None, None, None, "truncated_input"]
    assert rows[3]["raw"] == pages[3][: len(pages[3]) // 2].lstrip()
    assert rows[3]["page_id"] == 4


def test_malformed_page_is_quarantined_and_reading_goes_on(tmp_path, root):
    bad = page_xml(5, "Bad", "some text").replace(b"<title>Bad</title>", b"<title>Bad</titel>")
    dump = mediawiki_dump(page_xml(1, "A", "a"), bad, page_xml(6, "After", "after"), page_xml(7, "After2", "more"))
    stats, rows, _ = _run(_write(tmp_path, "m.xml", dump), root)
    assert stats["input_complete"] and stats["unreadable_by_reason"] == {"malformed_xml": 1}
    assert [(r["seq"], r["page_id"], r["error"]) for r in rows] == [
        (0, 1, None), (1, 5, "malformed_xml"), (2, 6, None), (3, 7, None)]
    assert rows[1]["raw"] == bad.strip()
    assert rows[1]["text"] is None and rows[1]["error_detail"]
    assert rows[2]["title"] == "After" and rows[2]["text"] == "after"


def test_page_without_closing_tag_does_not_swallow_the_next(tmp_path, root):
    unclosed = page_xml(5, "Unclosed", "text").replace(b"  </page>\n", b"")
    dump = mediawiki_dump(page_xml(1, "A", "a"), unclosed, page_xml(6, "After", "after"), page_xml(7, "After2", "x"))
    stats, rows, _ = _run(_write(tmp_path, "m.xml", dump), root)
    assert [(r["page_id"], r["error"]) for r in rows] == [(1, None), (5, "malformed_xml"), (6, None), (7, None)]
    assert rows[1]["raw"] == unclosed.strip()
    assert stats["input_complete"]


def test_page_missing_id_is_malformed(tmp_path, root):
    no_id = re.sub(rb"    <id>9</id>\n", b"", page_xml(9, "NoId", "text"), count=1)
    assert b"<id>9</id>" not in no_id
    stats, rows, _ = _run(_write(tmp_path, "m.xml", mediawiki_dump(no_id, page_xml(2, "B", "b"))), root)
    assert [r["error"] for r in rows] == ["malformed_xml", None]


def test_invalid_utf8_keeps_raw_bytes(tmp_path, root):
    bad = page_xml(5, "Bad", "caf\u00e9 au lait").replace("\u00e9".encode(), b"\xe9")  # latin-1 byte
    dump = mediawiki_dump(page_xml(1, "A", "a"), bad, page_xml(6, "After", "after"))
    stats, rows, _ = _run(_write(tmp_path, "u.xml.bz2", bz2.compress(dump)), root)
    assert stats["unreadable_by_reason"] == {"invalid_utf8": 1}
    assert [r["error"] for r in rows] == [None, "invalid_utf8", None]
    assert rows[1]["raw"] == bad.strip() and b"\xe9" in rows[1]["raw"]
    assert rows[1]["page_id"] == 5 and rows[1]["title"] == "Bad"
    assert rows[2]["text"] == "after"


def test_empty_pages(tmp_path, root):
    dump = mediawiki_dump(page_xml(1, "A", "a"), page_xml(5, "Empty", None), page_xml(7, "Blank", "  \n  "))
    stats, rows, _ = _run(_write(tmp_path, "e.xml", dump), root)
    assert stats["unreadable_by_reason"] == {"empty_page": 2}
    assert [(r["page_id"], r["title"], r["namespace"], r["error"]) for r in rows] == [
        (1, "A", 0, None), (5, "Empty", 0, "empty_page"), (7, "Blank", 0, "empty_page")]


def test_giant_page_is_too_large_and_memory_bounded(tmp_path, root):
    limit = 4096
    one_line = page_xml(5, "Huge", "word " * 10_000)  # the text on one 50 kB line
    many_lines = page_xml(6, "Long", "line of text\n" * 5_000)  # 65 kB over many lines
    fits = page_xml(7, "Fits", "x" * 1000)
    dump = mediawiki_dump(page_xml(1, "A", "a"), one_line, many_lines, fits, page_xml(8, "After", "after"))
    stats, rows, _ = _run(_write(tmp_path, "g.xml", dump), root, max_page_bytes=limit)
    assert [(r["page_id"], r["error"]) for r in rows] == [
        (1, None), (5, "too_large"), (6, "too_large"), (7, None), (8, None)]
    assert stats["unreadable_by_reason"] == {"too_large": 2}
    huge, long = rows[1], rows[2]
    assert f"page is {len(one_line.strip())} bytes" in huge["error_detail"]
    assert f"page is {len(many_lines.strip())} bytes" in long["error_detail"]
    assert one_line.lstrip().startswith(huge["raw"]) and many_lines.lstrip().startswith(long["raw"])
    assert len(huge["raw"]) == len(long["raw"]) == limit  # only the first bytes are kept
    assert huge["title"] == "Huge" and long["title"] == "Long"
    assert rows[3]["text"] == "x" * 1000


# --- any line layout; nothing between the header and </mediawiki> is skipped -------------------
def _one_line(page: bytes) -> bytes:
    """The page serialised on one line (valid XML): no whitespace between tags, newlines as &#10;."""
    return re.sub(rb">\s+<", b"><", page.strip()).replace(b"\n", b"&#10;")


def _fields(rows: list[dict]) -> list[tuple]:
    return [(r["page_id"], r["title"], r["namespace"], r["redirect_target"], r["text"], r["error"]) for r in rows]


def _relayout(xml: bytes, layout: str) -> bytes:
    header, pages = xml[: xml.index(b"<page>")], re.findall(rb"<page>.*?</page>", xml, re.S)
    if layout == "page per line":
        return header + b"\n".join(_one_line(p) for p in pages) + b"\n</mediawiki>\n"
    if layout == "all on one line":
        return header.rstrip() + b"".join(_one_line(p) for p in pages) + b"</mediawiki>"
    # two pages on each line, tab-indented
    return header + b"".join(p + (b"\t" if i % 2 == 0 else b"\n\t") for i, p in enumerate(pages)) + b"</mediawiki>"


@pytest.mark.parametrize("layout", ["page per line", "all on one line", "two per line"])
def test_any_line_layout_reads_the_same(tmp_path, root, layout):
    xml = bz2.open(sample_dump()).read()
    _, expected, _ = _run(sample_dump(), root, version="as-shipped")
    stats, rows, _ = _run(_write(tmp_path, "d.xml.bz2", bz2.compress(_relayout(xml, layout), 1)), root)
    assert stats["pages_read"] == 206 and stats["input_complete"] and stats["unreadable_by_reason"] == {}
    assert _fields(rows) == _fields(expected)


@pytest.mark.parametrize("chunk", [1, 5, 7, 64])
def test_tags_split_across_reads(tmp_path, root, monkeypatch, chunk):
    """A tag cut in two by the reader's chunks is still found."""
    pages = [page_xml(i, f"P{i}", f"Text {i}.") for i in range(1, 5)]
    dump = _relayout(mediawiki_dump(*pages), "two per line") + b"\n"
    _, expected, _ = _run(_write(tmp_path, "d.xml", dump), root, version="whole")
    monkeypatch.setattr(xml_dump, "_CHUNK", chunk)
    stats, rows, _ = _run(_write(tmp_path, "d.xml", dump), root)
    assert stats["pages_read"] == 4 and stats["input_complete"] and stats["unreadable_by_reason"] == {}
    assert _fields(rows) == _fields(expected) and [r["page_id"] for r in rows] == [1, 2, 3, 4]


@pytest.mark.parametrize("damaged", [0, 2, 4])  # the first page, one in the middle, the last
def test_a_page_with_a_broken_opening_tag_is_quarantined_not_lost(tmp_path, root, damaged):
    pages = [page_xml(i, f"Page {i}", f"Text of page {i}.") for i in range(1, 6)]
    pages[damaged] = pages[damaged].replace(b"<page>", b"<pag>")
    stats, rows, _ = _run(_write(tmp_path, "d.xml.bz2", bz2.compress(mediawiki_dump(*pages))), root)
    assert stats["pages_read"] == 5 and stats["input_complete"]
    assert stats["unreadable_by_reason"] == {"malformed_xml": 1}
    assert [(r["page_id"], r["error"]) for r in rows] == [
        (i, "malformed_xml" if i == damaged + 1 else None) for i in range(1, 6)]
    bad = rows[damaged]
    assert bad["raw"] == pages[damaged].strip() and bad["title"] == f"Page {damaged + 1}"
    assert bad["error_detail"] == "</page> without <page>"


def test_the_last_page_without_its_closing_tag(tmp_path, root):
    last = page_xml(2, "Last", "last").replace(b"</page>", b"</pag>")
    stats, rows, _ = _run(_write(tmp_path, "d.xml", mediawiki_dump(page_xml(1, "A", "a"), last)), root)
    assert stats["input_complete"]  # </mediawiki> is there: the dump ended, its last page is damaged
    assert [(r["page_id"], r["error"]) for r in rows] == [(1, None), (2, "malformed_xml")]
    assert rows[1]["raw"] == last.strip()


def test_text_between_pages_is_quarantined_as_stray_text(tmp_path, root):
    a, b, c = (page_xml(i, t, f"{t} text.") for i, t in ((1, "A"), (2, "B"), (3, "C")))
    dump = HEADER + a + b"  words that lost their page\n" + b + b"<junk/>" + c + b" tail \n</mediawiki>\n"
    stats, rows, _ = _run(_write(tmp_path, "d.xml", dump), root)
    assert stats["pages_read"] == 6 == len(rows) and stats["input_complete"]
    assert stats["unreadable_by_reason"] == {"stray_text": 3}
    assert [(r["title"], r["error"]) for r in rows] == [
        ("A", None), (None, "stray_text"), ("B", None), (None, "stray_text"), ("C", None), (None, "stray_text")]
    assert [r["raw"] for r in rows if r["error"]] == [b"words that lost their page", b"<junk/>", b"tail \n</mediawiki>"]
    between = b"\n  words that lost their page\n  "  # from A's </page> to B's <page>
    assert rows[1]["error_detail"] == f"{len(between)} bytes of text outside any <page>"


def test_giant_stray_text_keeps_only_its_first_bytes(tmp_path, root):
    junk = b"x" * 10_000
    dump = mediawiki_dump(page_xml(1, "A", "a"), junk, page_xml(2, "B", "b"))
    stats, rows, _ = _run(_write(tmp_path, "d.xml", dump), root, max_page_bytes=1000)
    assert [r["error"] for r in rows] == [None, "stray_text", None]
    assert junk.startswith(rows[1]["raw"]) and 990 < len(rows[1]["raw"]) <= 1000
    assert rows[1]["error_detail"].endswith(f"raw keeps {len(rows[1]['raw'])} of its 10003 bytes")


def test_plain_xml_cut_between_pages_is_incomplete(tmp_path, root):
    pages = [page_xml(i, f"Page {i}", f"Text {i}.") for i in range(1, 4)]
    cut = HEADER + b"".join(pages)  # no </mediawiki>: the input ended early
    src = _write(tmp_path, "cut.xml", cut)
    stats, rows, _ = _run(src, root)
    assert not stats["input_complete"] and stats["unreadable_by_reason"] == {}
    assert stats["input_error"] == f"{src}: input ended before </mediawiki>, at byte {len(cut)}, last complete page 'Page 3'"
    # cut inside the next <page> tag: its first bytes are the truncated page
    stats, rows, _ = _run(_write(tmp_path, "cut.xml", cut + b"  <pa"), root, version="v2")
    assert [r["error"] for r in rows] == [None, None, None, "truncated_input"] and rows[3]["raw"] == b"<pa"
    assert not stats["input_complete"]


def test_corrupt_bz2_keeps_pages_before_the_damage_and_says_where(tmp_path, root):
    rnd = random.Random(3)
    pages = [page_xml(i, f"Page {i}", _words(rnd, 300)) for i in range(1, 121)]
    dump = mediawiki_dump(*pages)
    compressed = bytearray(bz2.compress(dump, 1))
    compressed[len(compressed) // 2] ^= 0xFF  # one flipped byte in the middle
    src = _write(tmp_path, "flip.xml.bz2", bytes(compressed))
    stats, rows, _ = _run(src, root)
    assert not stats["input_complete"]
    assert stats["input_error"].startswith(f"{src}: OSError: Invalid data stream, at byte ")
    n = len(rows) - 1
    assert 0 < n < 120 and [r["page_id"] for r in rows[:n]] == list(range(1, n + 1))
    assert all(r["error"] is None for r in rows[:n]) and rows[-1]["error"] == "truncated_input"
    offset = int(re.search(r"at byte (\d+) of the decompressed input", stats["input_error"]).group(1))
    assert dump.index(pages[n - 1]) + len(pages[n - 1]) <= offset < len(dump)  # where reading stopped
    assert f"last complete page 'Page {n}'" in stats["input_error"]
    assert stats["sources"][0]["input_error"] == stats["input_error"].removeprefix(f"{src}: ")


# --- an input that ended early fails the run, unless allowed -----------------------------------
def test_check_input_complete(tmp_path, root):
    rnd = random.Random(7)
    compressed = bz2.compress(mediawiki_dump(*(page_xml(i, f"Page {i}", _words(rnd, 300)) for i in range(1, 121))), 1)
    src = _write(tmp_path, "cut.xml.bz2", compressed[: len(compressed) // 2])
    stats, _, out = _run(src, root)
    n = stats["pages_read"]
    with pytest.raises(InputIncomplete) as failed:
        check_input_complete(out.manifest())
    message = str(failed.value)
    assert message.startswith(f"input ended early after {n} pages: {src}: EOFError: Compressed file ended")
    assert f"(about byte {len(compressed) // 2} of {len(compressed) // 2} compressed), last complete page 'Page {n - 1}'" in message
    assert message.endswith(f"the {n} pages read are committed (raw_pages v1); "
                            "rerun with allow_incomplete_input=true to continue with them")
    warning = check_input_complete(out.manifest(), allow_incomplete_input=True)
    assert warning.startswith(f"input ended early after {n} pages") and "continuing" in warning
    _, _, whole = _run(_write(tmp_path, "whole.xml.bz2", compressed), root, version="v2")
    assert check_input_complete(whole.manifest()) is None


# --- inputs that are not dumps ----------------------------------------------------------------
NOT_DUMPS = {
    "empty.xml": b"",
    "blank.xml": b"  \n\n",
    "page.html": b"<html><body><p>Hello</p></body></html>\n",
    "corrupt.xml.bz2": b"BZh91AY&SY" + b"\x00garbage" * 50,
    "not-compressed.xml.bz2": mediawiki_dump(page_xml(1, "A", "a")),
    "no-pages.xml": HEADER + FOOTER,
    "not-json.jsonl": b"title,text\nA,b\n",
    "empty.jsonl.gz": gzip.compress(b""),
}


@pytest.mark.parametrize("name", sorted(NOT_DUMPS))
def test_unreadable_source_fails_before_any_part(tmp_path, root, name):
    src = _write(tmp_path, name, NOT_DUMPS[name])
    out = Dataset(root, "raw_pages", "v1", RAW_PAGES)
    with pytest.raises(SourceError):
        write_raw_pages(src, out, pages_per_part=1)
    assert not os.path.exists(out.path)


def test_an_empty_bz2_is_empty_not_corrupt(tmp_path, root):
    out = Dataset(root, "raw_pages", "v1", RAW_PAGES)
    for name, data in (("zero-bytes.xml.bz2", b""), ("empty-stream.xml.bz2", bz2.compress(b""))):
        src = _write(tmp_path, name, data)
        with pytest.raises(SourceError, match=r"input is empty.*: " + re.escape(src)):
            write_raw_pages(src, out)


def test_a_dump_without_pages_is_named(tmp_path, root):
    src = _write(tmp_path, "no-pages.xml", HEADER + FOOTER)
    with pytest.raises(SourceError, match=re.escape(src) + ": the dump holds no <page>"):
        write_raw_pages(src, Dataset(root, "raw_pages", "v1", RAW_PAGES))


def test_missing_file_and_directory(tmp_path, root):
    out = Dataset(root, "raw_pages", "v1", RAW_PAGES)
    with pytest.raises(SourceError, match="not found"):
        write_raw_pages(str(tmp_path / "nope.xml.bz2"), out)
    (tmp_path / "adir").mkdir()
    with pytest.raises(SourceError, match="directory"):
        write_raw_pages(str(tmp_path / "adir"), out)
    with pytest.raises(SourceError, match="directory"):
        plan_raw_pages(str(tmp_path / "adir"), root, {})
    assert not os.path.exists(out.path)


def test_detect_format():
    assert detect_format("x/enwiki.xml.bz2") == "mediawiki-xml"
    assert detect_format("s3://b/data.JSONL.gz") == "jsonl"
    assert detect_format("a.ndjson") == "jsonl"
    assert detect_format("a.txt", "jsonl") == "jsonl"
    with pytest.raises(SourceError):
        detect_format("a.xml", "csv")


def test_plan_version_follows_params_and_input(tmp_path, root):
    src = _write(tmp_path, "d.xml", mediawiki_dump(page_xml(1, "A", "a")))
    a = plan_raw_pages(src, root, {"pages_per_part": 5})
    assert a.version == plan_raw_pages(src, root, {"pages_per_part": 5}).version
    assert a.version != plan_raw_pages(src, root, {"pages_per_part": 6}).version
    _write(tmp_path, "d.xml", mediawiki_dump(page_xml(1, "A", "a"), page_xml(2, "B", "b")))  # the input changed
    assert plan_raw_pages(src, root, {"pages_per_part": 5}).version != a.version


# --- rerun reuses parts ---------------------------------------------------------------------------
def test_rerun_keeps_existing_parts(tmp_path, root):
    dump = mediawiki_dump(*(page_xml(i, f"Page {i}", f"Text {i}.") for i in range(1, 13)))
    src = _write(tmp_path, "d.xml", dump)
    out = Dataset(root, "raw_pages", "v1", RAW_PAGES)
    write_raw_pages(src, out, pages_per_part=4)
    first = [out.read_part(i).to_pylist() for i in range(3)]
    before = {i: os.stat(part_file(out, i)) for i in (0, 2)}
    os.remove(part_file(out, 1))  # as if the run had died after parts 0 and 2

    stats = write_raw_pages(src, out, pages_per_part=4)
    assert stats["parts"] == 3
    for i in (0, 2):
        after = os.stat(part_file(out, i))
        assert (after.st_ino, after.st_mtime_ns) == (before[i].st_ino, before[i].st_mtime_ns)
    assert [out.read_part(i).to_pylist() for i in range(3)] == first
    out.commit(code_version="t", params={}, inputs={})
    assert out.read().num_rows == 12


# --- any fsspec URL --------------------------------------------------------------------------------
def test_memory_source_and_storage(memory_root):
    fs = fsspec.filesystem("memory")
    src = f"{memory_root}/in/dump.xml.bz2"
    with fs.open(src.replace("memory://", "/"), "wb") as fh:
        fh.write(bz2.compress(mediawiki_dump(page_xml(1, "A", "a text"), page_xml(2, "B", "#REDIRECT [[A]]", redirect="A"))))
    info = check_source(src)
    assert info["format"] == "mediawiki-xml" and info["size"] > 0
    stats, rows, out = _run(src, f"{memory_root}/store")
    assert [(r["title"], r["redirect_target"]) for r in rows] == [("A", None), ("B", "A")]
    assert out.url.startswith("memory://")


# --- JSON lines -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["records.jsonl", "records.jsonl.bz2"])
def test_jsonl_records(tmp_path, root, name):
    limit = 1000
    good = json.dumps({"title": " Alpha ", "text": "Alpha is a letter."}).encode()
    broken = b'{"title": "B", "text": "unterminated'
    latin1 = json.dumps({"title": "Caf\u00e9", "text": "caf\u00e9"}, ensure_ascii=False).encode().replace("\u00e9".encode(), b"\xe9")
    no_text = json.dumps({"title": "D"}).encode()
    blank_text = json.dumps({"title": "D2", "text": "   "}).encode()
    giant = json.dumps({"title": "E", "text": "x" * 5000}).encode()
    with_id = json.dumps({"title": "F", "text": "F text.", "id": 42}).encode()
    str_id = json.dumps({"title": "G", "extract": "G text.", "id": "77"}).encode()
    not_object = json.dumps(["a", "list"]).encode()
    no_title = json.dumps({"text": "orphan"}).encode()
    lines = [good, broken, latin1, no_text, blank_text, giant, b"", with_id, str_id, not_object, no_title]
    data = b"\n".join(lines) + b"\n"
    stats, rows, _ = _run(_write(tmp_path, name, _compress(name, data)), root, max_page_bytes=limit)

    assert stats["format"] == "jsonl" and stats["input_complete"]
    assert len(rows) == 10  # the blank line is skipped, every other line is one record
    assert [r["seq"] for r in rows] == list(range(10))
    assert [r["error"] for r in rows] == [
        None, "malformed_json", "invalid_utf8", "empty_page", "empty_page", "too_large",
        None, None, "malformed_record", "malformed_record"]
    assert stats["unreadable_by_reason"] == {
        "empty_page": 2, "invalid_utf8": 1, "malformed_json": 1, "malformed_record": 2, "too_large": 1}
    assert all(r["text_format"] == "plain" for r in rows)
    a, f, g = rows[0], rows[6], rows[7]
    assert (a["title"], a["text"], a["namespace"], a["raw"]) == ("Alpha", "Alpha is a letter.", 0, None)
    assert (f["page_id"], f["text"]) == (42, "F text.")
    assert (g["page_id"], g["text"]) == (77, "G text.")
    # unreadable lines keep their bytes as they were
    assert rows[1]["raw"] == broken + b"\n"
    assert rows[2]["raw"] == latin1 + b"\n" and b"\xe9" in rows[2]["raw"]
    assert rows[3]["raw"] == no_text + b"\n" and rows[3]["title"] == "D"
    assert (giant + b"\n").startswith(rows[5]["raw"]) and len(rows[5]["raw"]) == limit + 1
    assert f"record is {len(giant) + 1} bytes" in rows[5]["error_detail"]
    assert all(r["text"] is None for r in rows if r["error"])


def test_jsonl_page_ids_are_present(tmp_path, root):
    data = b"".join(json.dumps({"title": f"T{i}", "text": "x."}).encode() + b"\n" for i in range(5))
    _, rows, _ = _run(_write(tmp_path, "r.jsonl", data), root)
    ids = [r["page_id"] for r in rows]
    assert None not in ids and len(set(ids)) == 5


def test_bad_jsonl_records_are_quarantined_with_their_line_and_the_read_goes_on(tmp_path, root):
    """Issue 45 item 8: deep nesting, an id past int64, "²" as id, a lone surrogate, a 5000-digit
    number each failed the whole read; now each is one row with its reason and line number."""
    stats, rows, _ = _run(_write(tmp_path, "bad.jsonl", bad_jsonl()), root, pages_per_part=3)
    expected = [(n, reason) for n, (_, reason) in enumerate(BAD_JSONL, 1) if reason != "skip"]
    assert stats["input_complete"] and stats["pages_read"] == len(rows) == len(expected) == 9
    assert [r["seq"] for r in rows] == list(range(9))
    assert [r["error"] for r in rows] == [reason for _, reason in expected]
    for (line, reason), r in zip(expected, rows):
        if reason:
            assert r["error_detail"].startswith(f"line {line}: "), r["error_detail"]
            assert r["raw"] == BAD_JSONL[line - 1][0] + b"\n" and r["text"] is None  # the line as it was
    assert stats["unreadable_by_reason"] == {"invalid_utf8": 1, "malformed_json": 2, "malformed_record": 3,
                                             "page_id_out_of_range": 1}
    kept = [r for r in rows if not r["error"]]
    assert [(r["page_id"], r["title"]) for r in kept] == [(SYNTHETIC_ID_START, "Alpha"), (7, "Beta")]
    by_line = {int(r["error_detail"].split(":")[0][5:]): r for r in rows if r["error"]}
    assert "RecursionError" in by_line[2]["error_detail"]
    assert "99999999999999999999" in by_line[3]["error_detail"]
    assert "'²'" in by_line[4]["error_detail"] and by_line[4]["title"] == "Squared"
    assert "surrogate" in by_line[8]["error_detail"]


# --- the real sample dump ----------------------------------------------------------------------------
def test_real_sample_dump(root):
    path = sample_dump()
    xml = bz2.open(path).read().decode("utf-8")
    # Independent counts from the raw XML.
    blocks = re.findall(r"<page>.*?</page>", xml, re.S)
    n_redirects = len(re.findall(r"<redirect title=", xml))
    assert len(blocks) == xml.count("<page>") == 206
    assert n_redirects == xml.count("<redirect") == 100
    titles = [html.unescape(re.search(r"<title>(.*?)</title>", b).group(1)) for b in blocks]
    ids = [int(re.search(r"</ns>\s*<id>(\d+)</id>", b).group(1)) for b in blocks]
    targets = [html.unescape(m.group(1)) if (m := re.search(r'<redirect title="(.*?)"', b)) else None for b in blocks]
    namespaces = [int(re.search(r"<ns>(-?\d+)</ns>", b).group(1)) for b in blocks]

    stats, rows, out = _run(path, root, pages_per_part=50)
    assert stats["pages_read"] == 206 and stats["input_complete"] and stats["unreadable_by_reason"] == {}
    assert stats["parts"] == 5 and out.manifest()["rows"] == 206
    assert [r["title"] for r in rows] == titles
    assert [r["page_id"] for r in rows] == ids
    assert [r["namespace"] for r in rows] == namespaces
    assert [r["redirect_target"] for r in rows] == targets
    assert sum(r["redirect_target"] is not None for r in rows) == 100
    assert all(r["error"] is None and r["text"].strip() for r in rows)


# --- several sources in one run ----------------------------------------------------------------------
def _two_sources(tmp_path) -> tuple[str, str]:
    xml = _write(tmp_path, "a.xml.bz2", bz2.compress(mediawiki_dump(
        page_xml(10, "Alpha", "Alpha text."), page_xml(12, "Beta", "#REDIRECT [[Alpha]]", redirect="Alpha"),
        page_xml(13, "Gamma", "Gamma text."))))
    records = [{"title": "Delta", "text": "Delta text."}, {"title": "Eps", "text": ""},
               {"title": "Zeta", "text": "Zeta text."}, {"title": "Eta", "text": "Eta text.", "id": 99}]
    jsonl = _write(tmp_path, "b.jsonl", b"".join(json.dumps(r).encode() + b"\n" for r in records))
    return xml, jsonl


def test_several_sources_make_one_dataset(tmp_path, root):
    xml, jsonl = _two_sources(tmp_path)
    stats, rows, out = _run([xml, jsonl], root, pages_per_part=2)
    assert [r["title"] for r in rows] == ["Alpha", "Beta", "Gamma", "Delta", "Eps", "Zeta", "Eta"]
    assert [r["seq"] for r in rows] == list(range(7))  # seq runs on across sources
    assert [r["text_format"] for r in rows] == ["wikitext"] * 3 + ["plain"] * 4
    assert stats["pages_read"] == 7 == out.manifest()["rows"] and stats["parts"] == 4
    assert [p["rows"] for p in out.manifest()["parts"]] == [2, 2, 2, 1]  # a part may span two sources
    assert stats["format"] == "mixed" and stats["input_complete"]
    assert stats["unreadable_by_reason"] == {"empty_page": 1}
    per = stats["sources"]
    assert [s["source"] for s in per] == [xml, jsonl]
    assert [(s["format"], s["first_seq"], s["pages_read"]) for s in per] == [("mediawiki-xml", 0, 3), ("jsonl", 3, 4)]
    assert sum(s["pages_read"] for s in per) == stats["pages_read"]
    assert per[1]["unreadable_by_reason"] == {"empty_page": 1} and per[0]["unreadable_by_reason"] == {}
    assert out.manifest()["stats"]["sources"] == per
    # Records without an id get ids from the block no given id can have, by their seq in the build.
    ids = [r["page_id"] for r in rows if r["error"] is None]
    assert len(set(ids)) == len(ids)
    assert ids[:3] == [10, 12, 13] and ids[-1] == 99
    assert [r["page_id"] for r in rows[3:6]] == [SYNTHETIC_ID_START + 3, None, SYNTHETIC_ID_START + 5]


def test_several_sources_with_the_sample_and_max_pages(tmp_path, root):
    _, jsonl = _two_sources(tmp_path)
    stats, rows, _ = _run([jsonl, "sample"], root, pages_per_part=3, max_pages=6)
    assert [r["seq"] for r in rows] == list(range(6))
    assert [s["pages_read"] for s in stats["sources"]] == [4, 2]
    assert stats["sources"][1]["source"] == sample_dump()
    assert [r["title"] for r in rows[:4]] == ["Delta", "Eps", "Zeta", "Eta"]
    stats, _, _ = _run([jsonl, "sample"], root, version="v2", max_pages=3)
    assert [s["pages_read"] for s in stats["sources"]] == [3, 0] and stats["sources"][1]["skipped"]


def test_a_bad_second_source_fails_before_anything_is_written(tmp_path, root):
    xml, _ = _two_sources(tmp_path)
    out = Dataset(root, "raw_pages", "v1", RAW_PAGES)
    missing = str(tmp_path / "missing.jsonl")
    with pytest.raises(SourceError, match=r"source 2 of 2 .*missing\.jsonl.*not found"):
        write_raw_pages([xml, missing], out, pages_per_part=1)
    with pytest.raises(SourceError, match="source 2 of 2"):
        plan_raw_pages([xml, missing], root, {})
    empty = _write(tmp_path, "empty.xml", b"")
    with pytest.raises(SourceError, match=r"source 2 of 3 .*empty"):
        write_raw_pages([xml, empty, missing], out, pages_per_part=1)
    xml, jsonl = _two_sources(tmp_path)
    with pytest.raises(SourceError, match=r"source 2 of 2 .*not a MediaWiki"):  # a forced format fits all
        write_raw_pages([xml, jsonl], out, input_format="mediawiki-xml")
    with pytest.raises(SourceError, match="no input"):
        write_raw_pages([], out)
    assert not os.path.exists(out.path)


def test_version_follows_every_source_and_their_order(tmp_path, root):
    xml, jsonl = _two_sources(tmp_path)
    params = {"pages_per_part": 5}
    one = plan_raw_pages(xml, root, params).version
    both = plan_raw_pages([xml, jsonl], root, params).version
    assert both == plan_raw_pages([xml, jsonl], root, params).version
    assert plan_raw_pages([jsonl, xml], root, params).version != both
    assert plan_raw_pages([xml], root, params).version == one != both  # a list of one is that source
    assert len({one, both, plan_raw_pages(jsonl, root, params).version}) == 3
    # A single source keeps the version it always had.
    info = check_source(xml)
    assert one == dataset_version("raw_pages", CODE_VERSION, params, {"source": f"{info['url']}@{info['size']}@{info['stamp']}"})
    _write(tmp_path, "b.jsonl", b'{"title": "Changed", "text": "x"}\n')  # the second input changed
    assert plan_raw_pages([xml, jsonl], root, params).version != both


def test_one_source_stats_are_unchanged_but_list_the_source(tmp_path, root):
    xml, _ = _two_sources(tmp_path)
    stats, rows, _ = _run(xml, root)
    assert stats["format"] == "mediawiki-xml" and stats["pages_read"] == 3
    assert stats["sources"] == [{"source": xml, "format": "mediawiki-xml", "first_seq": 0, "pages_read": 3,
                                 "input_complete": True, "input_error": None, "unreadable_by_reason": {}}]
    # a JSON-lines source alone: the same ids as when it is read after others, by seq
    _, jsonl = _two_sources(tmp_path)
    _, rows, _ = _run(jsonl, root, version="v2")
    assert [r["page_id"] for r in rows] == [SYNTHETIC_ID_START, None, SYNTHETIC_ID_START + 2, 99]


def test_progress_over_several_sources(tmp_path, root):
    xml, jsonl = _two_sources(tmp_path)
    calls = []
    write_raw_pages([xml, jsonl], Dataset(root, "raw_pages", "v", RAW_PAGES), pages_per_part=2,
                    progress=lambda pages, done, total: calls.append((pages, done, total)))
    total = os.path.getsize(xml) + os.path.getsize(jsonl)
    assert all(c[2] == total for c in calls)
    assert calls[-1][:2] == (7, total)
    assert [c[1] for c in calls] == sorted(c[1] for c in calls)


# --- the Prefect task and the build-corpus flow ---------------------------------------------------
@pytest.fixture(scope="module")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness():
        yield


def test_an_unreadable_input_is_not_retried(prefect_harness, tmp_path, root, monkeypatch):
    from prefect import flow

    calls = []
    real = sequential.write_raw_pages

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    @flow
    def read(source: str) -> dict:
        return sequential.raw_pages_task(source, Dataset(root, "raw_pages", "v1", RAW_PAGES), {
            "input_format": "auto", "pages_per_part": 10, "max_page_bytes": 1 << 20, "max_pages": None})

    monkeypatch.setattr(sequential, "write_raw_pages", counting)
    with pytest.raises(SourceError, match="not found"):
        read(str(tmp_path / "missing.xml.bz2"))
    assert len(calls) == 1

    def flaky(*args, **kwargs):  # e.g. a network file system that failed once
        calls.append(1)
        if len(calls) == 2:
            raise OSError("connection reset")
        return real(*args, **kwargs)

    monkeypatch.setattr(sequential, "write_raw_pages", flaky)
    assert read(_write(tmp_path, "d.xml", mediawiki_dump(page_xml(1, "A", "a."))))["rows"] == 1
    assert len(calls) == 3  # retried once


class _PastTheCheck(Exception):
    """Raised by the first step after extraction: the run went past the input check."""


def test_build_corpus_fails_on_an_input_that_ended_early(prefect_harness, tmp_path, root, monkeypatch):
    import flows.build_corpus as build

    xml = bz2.open(sample_dump()).read()
    first, second = xml.index(b"<page>"), xml.index(b"</page>") + len(b"</page>")
    # the first page's opening tag is broken, and stray text follows it
    damaged = xml[:first] + b"<pag>" + xml[first + len(b"<page>"):second] + b"stray words" + xml[second:]
    compressed = bz2.compress(damaged, 1)
    src = _write(tmp_path, "cut.xml.bz2", compressed[: len(compressed) // 6])
    params = dict(source=src, storage_root=root, read={"pages_per_partition": 40}, dask_workers=1)
    with pytest.raises(InputIncomplete, match=r"input ended early after \d+ pages: .*cut\.xml\.bz2: EOFError") as failed:
        build.build_corpus(**params)
    assert "rerun with allow_incomplete_input=true" in str(failed.value)

    # What was read is committed, under the version a run with the flag plans too, and
    # extraction's counts reconcile with the damaged page and the stray text quarantined.
    raw = plan_raw_pages(src, root, {"input_format": "auto", "pages_per_part": 40,
                                     "max_page_bytes": 4 * 1024 * 1024, "max_pages": None})
    manifest = raw.manifest()
    n = manifest["rows"]
    assert f"input ended early after {n} pages" in str(failed.value) and f"raw_pages {raw.version}" in str(failed.value)
    reasons = sorted(r["error"] for r in raw.read(columns=["error"]).to_pylist() if r["error"])
    assert reasons == ["malformed_xml", "stray_text", "truncated_input"]

    def stop(*args, **kwargs):
        raise _PastTheCheck

    monkeypatch.setattr(build, "occurrences_stage", stop)
    with pytest.raises(_PastTheCheck):
        build.build_corpus(**{**params, "read": {"pages_per_partition": 40, "allow_incomplete_input": True}})
    assert raw.manifest()["created_at"] == manifest["created_at"]  # reused, not read again
