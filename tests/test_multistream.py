"""tasks.raw_pages.multistream: a multistream dump read in partitions of bz2 streams, as the sequential
reader would."""
from __future__ import annotations

import bz2
import html
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from storage.datasets import Dataset, latest_version
from storage.schemas import RAW_PAGES
from tasks.raw_pages.multistream import (
    Stream, decompress_streams, index_for, plan_multistream, plan_partitions, read_index, write_multistream,
)
from tasks.raw_pages.sequential import write_raw_pages
from tasks.raw_pages.xml_dump import SourceError, sample_dump
from tests.conftest import part_file  # noqa: E402


# --- a real multistream dump, built the way Wikimedia builds them -----------------------------------
def split_dump(xml: bytes) -> tuple[bytes, list[bytes], bytes]:
    """A pages-articles export cut into its header, its pages (each from the start of its
    ``<page>`` line to the next one's) and its footer (from the ``</mediawiki>`` line)."""
    starts = [m.start() for m in re.finditer(rb"[ \t]*<page>", xml)]
    cuts = [*starts, [m.start() for m in re.finditer(rb"[ \t]*</mediawiki>", xml)][-1]]
    return xml[:starts[0]], [xml[a:b] for a, b in zip(cuts, cuts[1:])], xml[cuts[-1]:]


def make_multistream(header: bytes, pages: list[bytes], footer: bytes, dump: Path, index: Path,
                     pages_per_stream: int = 100) -> list[tuple[int, int, str]]:
    """Write ``dump`` + ``index`` in the layout of ``enwiki-*-pages-articles-multistream.xml.bz2``.

    One bz2 stream with the header (``<mediawiki>`` and ``<siteinfo>``), then one stream per
    ``pages_per_stream`` pages (100 in the real dumps), then one with ``</mediawiki>``, all
    concatenated into one file; the index, bz2-compressed, has a line ``offset:page_id:title``
    per page, offset being where its stream starts. Returns the index entries.
    """
    entries = []
    with open(dump, "wb") as out:
        out.write(bz2.compress(header))
        for i in range(0, len(pages), pages_per_stream):
            for page in pages[i:i + pages_per_stream]:  # id and title as the page has them, even a damaged one
                title = html.unescape(re.search(rb"<title>(.*?)</", page, re.S).group(1).decode())
                entries.append((out.tell(), int(re.search(rb"<id>(\d+)</id>", page).group(1)), title))
            out.write(bz2.compress(b"".join(pages[i:i + pages_per_stream])))
        out.write(bz2.compress(footer))
    index.write_bytes(bz2.compress("".join(f"{o}:{i}:{t}\n" for o, i, t in entries).encode()))
    return entries


SAMPLE_XML = bz2.open(sample_dump()).read()  # the enwiki excerpt shipped in gensim: 206 pages
SAMPLE = split_dump(SAMPLE_XML)


def _damaged_pages(pages: list[bytes]) -> list[bytes]:
    """The sample's pages with one of each kind the reader quarantines; pages 10 to 19 make stream 2."""
    pages = list(pages)
    pages[3] = pages[3].replace(b"</title>", b"</titel>", 1)  # malformed_xml
    # a stream's first page loses its opening tag, and is too large: its raw keeps max_page_bytes
    pages[10] = pages[10].replace(b"<page>", b"<pag>", 1).replace(b"</text>", b" padding" * 25_000 + b"</text>", 1)
    pages[19] = pages[19].replace(b"</page>", b"</pag>", 1)  # a stream's last page loses its closing tag
    pages[33] = pages[33].replace(b"</text>", b" caf\xe9</text>", 1)  # invalid_utf8
    return pages


def _pages(xml: bytes) -> list[bytes]:
    return re.findall(rb"<page>.*?</page>", xml, re.S)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict:
    """Multistream dumps of 10 pages a stream (21 page streams), with their index entries."""
    header, pages, footer = SAMPLE
    made = {}
    for name, kept in (("sample", pages), ("damaged", _damaged_pages(pages))):
        base = tmp_path_factory.mktemp(name)
        dump, index = base / "enwiki-multistream.xml.bz2", base / "enwiki-multistream-index.txt.bz2"
        made[name] = (str(dump), str(index), make_multistream(header, kept, footer, dump, index, pages_per_stream=10))
    return made


def _read(source: str, root: str, version: str, index: str | None = None, **kw) -> tuple[dict, list[dict], Dataset]:
    out = Dataset(root, "raw_pages", version, RAW_PAGES)
    stats = write_multistream(source, index, out, **kw) if index else write_raw_pages(source, out, **kw)
    out.commit(code_version="t", params={}, inputs={}, stats=stats)
    return stats, sorted(out.read().to_pylist(), key=lambda r: r["seq"]), out


def _sequential_keys(stats: dict) -> dict:
    """The statistics without what only a multistream reading adds (its index and streams)."""
    source = {k: v for k, v in stats["sources"][0].items() if k not in ("index", "streams", "bad_streams")}
    return {**stats, "sources": [source]}


def test_the_fixture_is_a_multistream_dump(dumps):
    dump, index, entries = dumps["sample"]
    data = Path(dump).read_bytes()
    assert bz2.decompress(data) == SAMPLE_XML  # the streams together are the dump
    offsets = sorted({o for o, _, _ in entries})
    assert len(entries) == 206 and len(offsets) == 21
    first_line = bz2.decompress(Path(index).read_bytes()).decode().splitlines()[0]
    assert first_line == f"{offsets[0]}:{entries[0][1]}:{entries[0][2]}"
    header = bz2.BZ2Decompressor()  # the first stream: the header alone
    assert header.decompress(data).rstrip().endswith(b"</siteinfo>")
    assert len(data) - len(header.unused_data) == offsets[0]
    for start in offsets:  # each offset starts a stream holding exactly the pages listed there
        dec = bz2.BZ2Decompressor()
        pages = _pages(dec.decompress(data[start:]))
        assert dec.eof and [int(re.search(rb"<id>(\d+)</id>", p).group(1)) for p in pages] == [
            i for o, i, _ in entries if o == start]
    assert dec.unused_data and bz2.decompress(dec.unused_data).strip() == b"</mediawiki>"  # the footer's stream


def test_decompress_streams():
    first, second = bz2.compress(b"first "), bz2.compress(b"second")
    assert decompress_streams(first + second) == (b"first second", None)
    text, error = decompress_streams(first + second[:len(second) // 2])  # cut short
    assert text == b"first " and isinstance(error, EOFError)
    text, error = decompress_streams(first + b"not bz2")  # anything else after a stream
    assert text == b"first " and isinstance(error, OSError)


def test_index_and_partitions(dumps):
    dump, index, entries = dumps["sample"]
    streams = read_index(index, os.path.getsize(dump))
    offsets = sorted({o for o, _, _ in entries})
    assert [s.start for s in streams] == offsets
    assert [s.end for s in streams] == offsets[1:] + [os.path.getsize(dump)]
    assert [s.pages for s in streams] == [10] * 20 + [6]
    assert [s.first_seq for s in streams] == list(range(0, 210, 10))
    parts = plan_partitions(streams, 50)
    assert [[s.start for s in p.streams] for p in parts] == [offsets[i:i + 5] for i in range(0, 21, 5)]
    assert [p.dump_ends for p in parts] == [False] * 4 + [True]
    assert [len(p.streams) for p in plan_partitions(streams, 1)] == [1] * 21
    assert [len(p.streams) for p in plan_partitions(streams, 25)] == [3] * 7  # whole streams, 30 pages
    sliced = plan_partitions(streams, 50, max_pages=61)
    assert [len(p.streams) for p in sliced] == [5, 2] and not sliced[-1].dump_ends


def test_titles_with_colons_in_the_index(tmp_path):
    index = tmp_path / "i.txt.bz2"
    index.write_bytes(bz2.compress(b"600:10:Talk:Foo: bar\n600:12:A\n900:13:Wikipedia:B:C\n"))
    assert read_index(str(index), 1000) == [Stream(600, 900, 0, 2), Stream(900, 1000, 2, 1)]


@pytest.mark.parametrize("name", ["sample", "damaged"])
def test_parallel_reading_gives_the_sequential_rows_and_counts(dumps, root, name):
    dump, index, _ = dumps[name]
    max_page_bytes = 160_000  # pages over it are quarantined as too_large
    sequential, expected, seq_out = _read(dump, root, "seq", pages_per_part=50, max_page_bytes=max_page_bytes)
    with ThreadPoolExecutor(2) as pool:
        parallel, rows, out = _read(dump, root, "par", index, pages_per_part=50, max_page_bytes=max_page_bytes,
                                    mapper=pool.map)
    assert len(rows) == 206 and [r["seq"] for r in rows] == list(range(206))
    if name == "damaged":
        # The one difference: an oversized segment at a stream's start keeps max_page_bytes from the
        # stream's first byte, the sequential reading from the previous page's end (its "\n" before).
        got, want = rows[10], expected[10]
        assert got["raw"].startswith(b"<pag>") and got["raw"][:len(want["raw"])] == want["raw"]
        assert len(want["raw"]) < len(got["raw"]) <= max_page_bytes
        # "<pag>" is a byte short of "<page>", and the segment ends at "</page>", before the chunk's "\n"
        size = len(SAMPLE[1][10]) - 2 + len(b" padding" * 25_000)
        assert got["error_detail"] == f"</page> without <page>; raw keeps {len(got['raw'])} of its {size} bytes"
        for row in (got, want):
            row["raw"] = row["error_detail"] = None
    assert rows == expected  # every column of every row
    assert _sequential_keys(parallel) == sequential
    assert [p["rows"] for p in out.manifest()["parts"]] == [p["rows"] for p in seq_out.manifest()["parts"]]
    assert parallel["sources"][0]["streams"] == 21 and parallel["sources"][0]["bad_streams"] == []
    reasons = {"too_large": 7}
    if name == "damaged":
        reasons = {"too_large": 7, "malformed_xml": 3, "invalid_utf8": 1}
        assert [(r["seq"], r["error_detail"]) for r in rows if r["error"] == "malformed_xml"] == [
            (3, rows[3]["error_detail"]), (10, None), (19, "<page> without </page>")]
        assert rows[3]["error_detail"].startswith("ParseError")
    assert sequential["unreadable_by_reason"] == dict(sorted(reasons.items()))


def test_max_pages_reads_the_same_slice(dumps, root):
    dump, index, _ = dumps["sample"]
    sequential, expected, _ = _read(dump, root, "seq", pages_per_part=20, max_pages=37)
    parallel, rows, _ = _read(dump, root, "par", index, pages_per_part=20, max_pages=37)
    assert len(rows) == 37 and rows == expected and _sequential_keys(parallel) == sequential


def _damage(dump: str, start: int, end: int, tmp_path: Path) -> str:
    data = bytearray(Path(dump).read_bytes())
    middle = (start + end) // 2
    data[middle:middle + 16] = b"\x00" * 16
    with pytest.raises(OSError):  # independently: that stream no longer decompresses
        bz2.BZ2Decompressor().decompress(bytes(data[start:end]))
    damaged = tmp_path / "enwiki-multistream.xml.bz2"
    damaged.write_bytes(bytes(data))
    return str(damaged)


@pytest.mark.parametrize("stream", [7, 20])  # one in the middle, the last (it holds the footer too)
def test_a_damaged_stream_is_quarantined_and_the_others_read(dumps, root, tmp_path, stream):
    dump, index, entries = dumps["sample"]
    _, expected, _ = _read(dump, root, "whole", pages_per_part=50)
    bad = read_index(index, os.path.getsize(dump))[stream]
    damaged = _damage(dump, bad.start, bad.end, tmp_path)

    stats, rows, _ = _read(damaged, root, "par", index, pages_per_part=50)
    lost = range(bad.first_seq, bad.first_seq + bad.pages)
    assert [r["seq"] for r in rows] == list(range(206))
    assert [r for r in rows if r["seq"] not in lost] == [r for r in expected if r["seq"] not in lost]
    assert stats["pages_read"] == 206 and stats["input_complete"]
    assert stats["unreadable_by_reason"] == {"bad_stream": bad.pages}
    quarantined = [r for r in rows if r["seq"] in lost]
    assert [(r["page_id"], r["title"]) for r in quarantined] == [(i, t) for o, i, t in entries if o == bad.start]
    assert [(r["page_id"], r["title"]) for r in quarantined] == [
        (r["page_id"], r["title"]) for r in expected if r["seq"] in lost]
    assert all(r["error"] == "bad_stream" and r["text"] is None for r in quarantined)
    assert quarantined[0]["error_detail"].startswith(
        f"the bz2 stream at bytes [{bad.start}, {bad.end}) cannot be decompressed (OSError: ")
    [corrupt] = stats["sources"][0]["bad_streams"]
    assert (corrupt["start"], corrupt["end"], corrupt["pages"]) == (bad.start, bad.end, bad.pages)
    # The sequential reading of the same file stops at the damage.
    sequential, _, _ = _read(damaged, root, "seq", pages_per_part=50)
    assert not sequential["input_complete"] and sequential["pages_read"] <= bad.first_seq + 1


def test_a_dump_cut_after_its_last_page_is_incomplete(dumps, root, tmp_path):
    dump, index, _ = dumps["sample"]
    data = Path(dump).read_bytes()
    last = read_index(index, len(data))[-1]
    pages = bz2.BZ2Decompressor().decompress(data[last.start:])  # the last page stream alone: no footer
    cut = tmp_path / "enwiki-multistream.xml.bz2"
    cut.write_bytes(data[:last.start] + bz2.compress(pages))
    sequential, expected, _ = _read(str(cut), root, "seq", pages_per_part=50)
    parallel, rows, _ = _read(str(cut), root, "par", index, pages_per_part=50)
    assert rows == expected and len(rows) == 206
    assert not parallel["input_complete"] and not sequential["input_complete"]
    assert parallel["input_error"] == (f"{cut}: input ended before </mediawiki>, "
                                       f"in the bz2 stream at bytes [{last.start}, {cut.stat().st_size})")


def test_a_dump_cut_inside_its_last_stream_reads_as_the_sequential_reading(root, tmp_path):
    dump, index = tmp_path / "enwiki-multistream.xml.bz2", tmp_path / "enwiki-multistream-index.txt.bz2"
    make_multistream(*SAMPLE, dump, index, pages_per_stream=103)  # 2 streams of several bz2 blocks
    last = read_index(str(index), dump.stat().st_size)[-1]
    cut = dump.read_bytes()[:(last.start + last.end) // 2]  # a download that stopped
    dump.write_bytes(cut)
    sequential, expected, _ = _read(str(dump), root, "seq", pages_per_part=50)
    parallel, rows, _ = _read(str(dump), root, "par", str(index), pages_per_part=50)
    assert rows == expected and 103 < len(rows) < 206
    assert rows[-1]["error"] == "truncated_input" and all(r["error"] is None for r in rows[:-1])
    assert parallel["unreadable_by_reason"] == sequential["unreadable_by_reason"] == {"truncated_input": 1}
    assert not parallel["input_complete"] and parallel["sources"][0]["bad_streams"] == []
    assert parallel["input_error"] == (f"{dump}: EOFError: Compressed file ended before the end-of-stream marker "
                                       f"was reached, in the bz2 stream at bytes [{last.start}, {len(cut)})")


def _index(tmp_path: Path, text: bytes, compress: bool = True) -> str:
    path = tmp_path / "index.txt.bz2"
    path.write_bytes(bz2.compress(text) if compress else text)
    return str(path)


def test_a_bad_or_missing_index_is_a_source_error(dumps, root, tmp_path):
    dump, index, entries = dumps["sample"]
    lines = bz2.decompress(Path(index).read_bytes()).splitlines(keepends=True)
    size = os.path.getsize(dump)
    bad = {
        str(tmp_path / "missing-index.txt.bz2"): "multistream index not found",
        _index(tmp_path, b"".join(lines), compress=False): "cannot read the multistream index",
        _index(tmp_path, b""): "lists no page",
        _index(tmp_path, b"".join(lines[:2]) + b"not an index line\n"): r"line 3 is not 'offset:page_id:title'",
        _index(tmp_path, b"".join(lines[12:14] + lines[:2])): "offsets must increase",
        _index(tmp_path, b"".join(lines) + f"{size}:1:Past the end\n".encode()): "not this dump's index",
        _index(tmp_path, b"0:1:A\n"): "no stream for the dump's header",
        _index(tmp_path, b"".join(re.sub(rb"^(\d+)", lambda m: b"%d" % (int(m.group(1)) + 1), ln)
                                  for ln in lines)): "the index does not match the dump",
    }
    other = tmp_path / "other"
    other.mkdir()
    make_multistream(*SAMPLE, other / "d.xml.bz2", other / "i.txt.bz2", pages_per_stream=7)
    bad[str(other / "i.txt.bz2")] = "the index does not match the dump"  # another dump's index
    for i, (path, message) in enumerate(bad.items()):
        moved = tmp_path / f"index-{i}.txt.bz2"
        if os.path.exists(path):
            os.replace(path, moved)
            path = str(moved)
        out = Dataset(root, "raw_pages", f"v{i}", RAW_PAGES)
        with pytest.raises(SourceError, match=message):
            write_multistream(dump, path, out, pages_per_part=50)
        assert not os.path.exists(out.path)  # failed before any work


def test_a_stream_with_more_records_than_its_index_lists_is_a_source_error(dumps, root, tmp_path):
    header, pages, footer = SAMPLE
    pages = pages[:14] + [pages[14] + b"  words outside any page\n"] + pages[15:]
    dump, index = tmp_path / "enwiki-multistream.xml.bz2", tmp_path / "enwiki-multistream-index.txt.bz2"
    make_multistream(header, pages, footer, dump, index, pages_per_stream=10)
    with pytest.raises(SourceError, match=r"holds 11 records, its index lists 10: the index does not match"):
        write_multistream(str(dump), str(index), Dataset(root, "raw_pages", "v", RAW_PAGES), pages_per_part=50)


def test_a_rerun_reuses_the_partitions_written(dumps, root):
    dump, index, _ = dumps["sample"]
    out = Dataset(root, "raw_pages", "v", RAW_PAGES)
    first = write_multistream(dump, index, out, pages_per_part=50)
    before = {i: os.stat(part_file(out, i)) for i in (0, 3)}
    os.remove(part_file(out, 1))  # as if the run had died before partition 1 was written
    assert write_multistream(dump, index, out, pages_per_part=50) == first  # counts read back from the parts
    for i in (0, 3):
        assert os.stat(part_file(out, i)).st_mtime_ns == before[i].st_mtime_ns
    assert out.has_part(1)


def test_which_sources_are_read_in_parallel(dumps, tmp_path):
    dump, index, _ = dumps["sample"]
    assert index_for(dump) == index  # X-multistream.xml.bz2 with X-multistream-index.txt.bz2 beside it
    assert index_for([dump]) == index
    assert index_for(dump, None) is None  # switched off
    assert index_for(dump, "/elsewhere/index.txt.bz2") == "/elsewhere/index.txt.bz2"
    assert index_for([dump, dump]) is None  # several sources: sequential
    with pytest.raises(SourceError, match="reads one dump"):
        index_for([dump, dump], index)
    alone = tmp_path / "enwiki-20240601-pages-articles-multistream.xml.bz2"
    alone.write_bytes(Path(dump).read_bytes())
    assert index_for(str(alone)) is None  # no index beside it
    split = tmp_path / "enwiki-20240601-pages-articles-multistream3.xml-p151574p311329.bz2"
    split.write_bytes(b"")
    (tmp_path / "enwiki-20240601-pages-articles-multistream-index3.txt-p151574p311329.bz2").write_bytes(b"")
    assert index_for(str(split)).endswith("multistream-index3.txt-p151574p311329.bz2")
    assert index_for(sample_dump()) is None and index_for("sample") is None
    plain = tmp_path / "enwiki-latest-pages-articles.xml.bz2"
    plain.write_bytes(Path(sample_dump()).read_bytes())
    assert index_for(str(plain)) is None  # a plain dump: read sequentially, as before


def test_the_version_follows_the_index(dumps, root, tmp_path):
    dump, index, _ = dumps["sample"]
    params = {"input_format": "auto", "pages_per_part": 50, "max_page_bytes": 1 << 22, "max_pages": None}
    out, plan, parts = plan_multistream(dump, index, root, params)
    assert plan is not None and len(parts) == 5
    copy = tmp_path / "index-copy.txt.bz2"
    copy.write_bytes(Path(index).read_bytes())
    assert plan_multistream(dump, str(copy), root, params)[0].version != out.version
    with pytest.raises(SourceError, match="multistream index: input not found"):
        plan_multistream(dump, str(tmp_path / "nope.txt.bz2"), root, params)


# --- the build-corpus flow ---------------------------------------------------------------------------
class _PastExtraction(Exception):
    """Raised by the first step after raw_pages."""


def test_build_corpus_reads_a_multistream_dump_in_parallel(dumps, root, monkeypatch):
    from prefect.testing.utilities import prefect_test_harness

    import flows.build_corpus as build

    dump, index, _ = dumps["sample"]
    _, expected, _ = _read(dump, root, "seq", pages_per_part=50)

    def stop(*args, **kwargs):
        raise _PastExtraction

    monkeypatch.setattr(build, "pages_stage", stop)
    params = dict(source=dump, storage_root=root, read={"pages_per_partition": 50}, dask_workers=2)
    with prefect_test_harness():
        with pytest.raises(_PastExtraction):
            build.build_corpus(**params)
        raw = Dataset(root, "raw_pages", latest_version(root, "raw_pages"), RAW_PAGES)
        manifest = raw.manifest()
        assert manifest["inputs"] == {"source": dump, "index": index}
        assert [p["rows"] for p in manifest["parts"]] == [50, 50, 50, 50, 6]
        assert manifest["stats"]["sources"][0]["streams"] == 21 and manifest["stats"]["pages_read"] == 206
        assert sorted(raw.read().to_pylist(), key=lambda r: r["seq"]) == expected
        with pytest.raises(_PastExtraction):
            build.build_corpus(**params)  # a rerun reuses that version
        assert raw.manifest()["created_at"] == manifest["created_at"]
