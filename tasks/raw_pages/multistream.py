"""Stage 1, in parallel: a multistream dump read into `raw_pages` by runs of bz2 streams.

Wikipedia's ``*-pages-articles-multistream.xml.bz2`` is a concatenation of independent bz2
streams: the first holds the XML header (``<mediawiki>`` and ``<siteinfo>``), each next one
100 ``<page>`` elements, the last ``</mediawiki>``. Its ``*-multistream-index.txt.bz2`` has
one line ``offset:page_id:title`` per page, ``offset`` being where the page's stream starts.
So the dump can be cut without reading it: a partition is a run of consecutive streams,
read by seeking to its first byte. Each stream is decompressed on its own and cut and
parsed by the shared code of xml_dump.py, so a partitioned reading gives
the same rows, ``seq`` numbers (from the index: a stream's first page comes after every
page listed before it) and counts as a sequential one. (One difference: a damaged segment
over ``max_page_bytes`` at a stream's start keeps its first bytes from the stream's start,
where the sequential reading starts at the previous page's end, a newline earlier.) A stream
that cannot be decompressed loses only its own pages: one ``bad_stream`` row per page
the index lists for it.
"""
from __future__ import annotations

import bz2
import io
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Callable, Iterable

import fsspec
import pyarrow as pa

from storage.datasets import Dataset
from pearl_redact import redact
from storage.schemas import RAW_PAGES
from tasks.raw_pages.xml_dump import (
    CODE_VERSION, READ_ERRORS, ReadStats, Reached, Source, SourceError, check_source, cut_pages, decompressor,
    ended_early, namespace_map, resolve_source, retry_unless_source_error, segment_row, source_fingerprint,
    source_list, split_header, unreadable,
)

MULTISTREAM_CODE_VERSION = f"{CODE_VERSION}+multistream-1"
# enwiki-...-multistream.xml.bz2 and, split, enwiki-...-multistream1.xml-p1p41242.bz2;
# their indexes: ...-multistream-index.txt.bz2, ...-multistream-index1.txt-p1p41242.bz2.
_DUMP_NAME = re.compile(r"^(.*-multistream)(\d*)\.xml(-p\d+p\d+)?\.bz2$")
_INDEX_LINE = re.compile(rb"(\d+):(\d+):([^\r\n]+)\r?\n?")


@dataclass(frozen=True)
class Stream:
    """The bytes [start, end) of the dump from one index offset to the next: its bz2 stream
    (the last one also holds the footer's), with ``pages`` pages from seq ``first_seq``."""
    start: int
    end: int
    first_seq: int
    pages: int


@dataclass(frozen=True)
class Partition:
    number: int  # its raw_pages part
    streams: tuple[Stream, ...]
    dump_ends: bool  # its last stream is the dump's last: </mediawiki> must be there


@dataclass(frozen=True)
class Multistream:
    """What every partition needs: the dump, its index, the namespaces of its header (read once)."""
    source: str
    index: str
    namespaces: dict


# --- the index -----------------------------------------------------------------------------------
def find_index(source: str) -> str | None:
    """The index beside a multistream dump (same name with ``-index`` and ``.txt``), if it exists."""
    m = _DUMP_NAME.match(source)
    if m is None:
        return None
    index = f"{m.group(1)}-index{m.group(2)}.txt{m.group(3) or ''}.bz2"
    try:
        fs, path = fsspec.core.url_to_fs(index)
        return index if fs.isfile(path) else None
    except Exception:  # an unreachable file system: no index to use, the sequential reading says why
        return None


def index_for(source: Source, index: str | None = "auto") -> str | None:
    """The index to read ``source`` in parallel with, or None for the sequential reading.

    ``index``: "auto" (the index beside a single multistream source, if there is one), an
    explicit index path or URL, or None (always sequential).
    """
    sources = source_list(source)
    if index is None:
        return None
    if index != "auto":
        if len(sources) != 1:
            raise SourceError(f"a multistream index reads one dump, not {len(sources)} sources")
        return index
    return find_index(resolve_source(sources[0])) if len(sources) == 1 else None


def _index_lines(index: str) -> Iterable[tuple[int, bytes]]:
    """(line number, line) of the index; a missing or unreadable index is a SourceError."""
    try:
        with fsspec.open(index, "rb") as raw:
            for n, line in enumerate(decompressor(index, raw), 1):
                yield n, line
    except FileNotFoundError:
        raise SourceError(f"multistream index not found: {index}") from None
    except READ_ERRORS as exc:
        raise SourceError(redact(f"cannot read the multistream index {index}: {type(exc).__name__}: {exc}",
                                 index)) from None  # the store's error may repeat the userinfo: not chained


def read_index(index: str, dump_size: int) -> list[Stream]:
    """The dump's page streams from its index: distinct offsets in order, each ending where the
    next starts (the last at the end of the file), with the pages the index lists there."""
    starts: list[int] = []
    counts: list[int] = []
    for n, line in _index_lines(index):
        if not line.strip():
            continue
        m = _INDEX_LINE.fullmatch(line)  # the title may hold ':' (Talk:..., Wikipedia:...)
        if m is None:
            raise SourceError(f"{index} line {n} is not 'offset:page_id:title': {line[:100]!r}")
        offset = int(m.group(1))
        if starts and offset == starts[-1]:
            counts[-1] += 1
            continue
        if starts and offset < starts[-1]:
            raise SourceError(f"{index} line {n}: offset {offset} comes after {starts[-1]}: offsets must increase")
        starts.append(offset)
        counts.append(1)
    if not starts:
        raise SourceError(f"the multistream index {index} lists no page")
    if starts[0] == 0:
        raise SourceError(f"{index}: the first page stream starts at byte 0, leaving no stream for the dump's header")
    if starts[-1] >= dump_size:
        raise SourceError(f"{index}: offset {starts[-1]} is beyond the dump's {dump_size} bytes: "
                          "not this dump's index, or the dump is cut short")
    firsts = [0, *accumulate(counts)]
    return [Stream(s, e, f, c) for s, e, f, c in zip(starts, starts[1:] + [dump_size], firsts, counts)]


def index_entries(index: str, offsets: set[int]) -> dict[int, list[tuple[int, str]]]:
    """(page_id, title) of the pages the index lists at each of ``offsets`` (for lost streams)."""
    found: dict[int, list[tuple[int, str]]] = {o: [] for o in offsets}
    last = max(offsets, default=-1)
    for _, line in _index_lines(index):
        m = _INDEX_LINE.fullmatch(line)
        if m is None:
            continue
        offset = int(m.group(1))
        if offset > last:  # the index is in offset order
            break
        if offset in found:
            found[offset].append((int(m.group(2)), m.group(3).decode("utf-8", "replace")))
    return found


def plan_partitions(streams: list[Stream], pages_per_partition: int, max_pages: int | None = None) -> list[Partition]:
    """Runs of consecutive streams of at least ``pages_per_partition`` pages (the last may have
    fewer); with ``max_pages``, only the streams that hold the first ``max_pages`` pages."""
    if pages_per_partition < 1:
        raise ValueError("pages_per_partition must be >= 1")
    total = streams[-1].first_seq + streams[-1].pages if streams else 0
    # The sequential reading stops at max_pages, before any </mediawiki>: so do these.
    dump_ends = max_pages is None or max_pages > total
    if max_pages is not None:
        streams = [s for s in streams if s.first_seq < max_pages]
    runs: list[list[Stream]] = []
    pages = 0
    for stream in streams:
        if not runs or pages >= pages_per_partition:
            runs.append([])
            pages = 0
        runs[-1].append(stream)
        pages += stream.pages
    return [Partition(i, tuple(run), dump_ends and i == len(runs) - 1) for i, run in enumerate(runs)]


# --- reading bytes -------------------------------------------------------------------------------
def _read_range(source: str, start: int, end: int) -> bytes:
    with fsspec.open(source, "rb") as fh:
        fh.seek(start)
        return fh.read(end - start)


def decompress_streams(data: bytes) -> tuple[bytes, BaseException | None]:
    """The bz2 stream(s) in ``data`` decompressed one after another, and the error that stopped
    that (None: all read). Of a damaged stream (OSError) nothing is kept; of one cut short
    (EOFError), the bytes before the cut (whole bz2 blocks, checked by their CRC) are."""
    out = []
    try:
        while data:
            dec = bz2.BZ2Decompressor()  # one per stream: a decompressor stops at its stream's end
            out.append(dec.decompress(data))
            if not dec.eof:
                raise EOFError("Compressed file ended before the end-of-stream marker was reached")
            data = dec.unused_data
    except READ_ERRORS as exc:
        return b"".join(out), exc
    return b"".join(out), None


def read_header(source: str, end: int) -> dict:
    """The namespaces of the dump's header: the stream(s) before the first page stream."""
    text, error = decompress_streams(_read_range(source, 0, end))
    if error is not None:
        raise SourceError(f"{source}: bytes [0, {end}) before the index's first offset are not the header's bz2 "
                          f"stream ({type(error).__name__}: {error}): the index does not match the dump") from error
    header, rest = split_header(text)
    if b"<mediawiki" not in header or b"</siteinfo>" not in header or rest.strip():
        raise SourceError(f"{source}: the first bz2 stream does not hold just the dump's <mediawiki> <siteinfo> "
                          "header: not a multistream dump, or not this index")
    return namespace_map(header)


def plan_reading(source: str, index: str, pages_per_partition: int,
                 max_pages: int | None = None) -> tuple[Multistream, list[Partition]]:
    """Check the dump and its index (fail before any work) and cut the dump into partitions."""
    source = resolve_source(source)
    info = check_source(source, "mediawiki-xml")
    streams = read_index(index, info["size"])
    namespaces = read_header(source, streams[0].start)
    last = streams[-1].start
    if _read_range(source, last, last + 3) != b"BZh":
        raise SourceError(f"{source}: no bz2 stream starts at byte {last}, the index's last offset: "
                          "the index does not match the dump")
    return Multistream(source, index, namespaces), plan_partitions(streams, pages_per_partition, max_pages)


# --- reading one partition -----------------------------------------------------------------------
def _stream_rows(text: bytes, stream: Stream, dump: Multistream, max_page_bytes: int, stats: ReadStats,
                 dump_ends: bool, reached: Reached) -> list[dict]:
    """The rows of one decompressed stream, cut and parsed as the sequential reader does
    (``reached.error``: the error that cut the stream short)."""
    rows: list[dict] = []
    for kind, data, size in cut_pages(io.BytesIO(text), max_page_bytes, reached, header=False):
        row = segment_row(stream.first_seq + len(rows), kind, data, size, dump.namespaces, max_page_bytes,
                          stats, reached, dump_ends)
        if row is not None:
            rows.append(row)
    if reached.error is not None and stats.input_complete:  # cut after </mediawiki>
        ended_early(stats, reached, "")
    # More rows than listed would take the seq numbers of the next stream's pages.
    if len(rows) > stream.pages:
        raise SourceError(f"{dump.source}: the bz2 stream at bytes [{stream.start}, {stream.end}) holds {len(rows)} "
                          f"records, its index lists {stream.pages}: the index does not match the dump; "
                          "read it sequentially (multistream_index=null)")
    return rows


def _lost_rows(stream: Stream, error: BaseException, entries: list[tuple[int, str]] | None) -> list[dict]:
    """One ``bad_stream`` row per page the index lists in a stream that cannot be read."""
    detail = (f"the bz2 stream at bytes [{stream.start}, {stream.end}) cannot be decompressed "
              f"({type(error).__name__}: {error}); its {stream.pages} pages are lost")
    if not entries or len(entries) != stream.pages:
        entries = [(None, None)] * stream.pages
    rows = []
    for k, (page_id, title) in enumerate(entries):
        row = unreadable(stream.first_seq + k, b"", "bad_stream", detail)
        row.update(page_id=page_id, title=title, raw=None)
        rows.append(row)
    return rows


def read_partition(dump: Multistream, part: Partition, *, max_page_bytes: int,
                   max_pages: int | None = None) -> tuple[list[dict], dict]:
    """The rows of one partition, in seq order, and its counts (as ``ReadStats.as_dict``, plus
    ``streams`` and ``bad_streams``)."""
    start = part.streams[0].start
    data = _read_range(dump.source, start, part.streams[-1].end)
    stats = ReadStats()
    found: list[list[dict] | BaseException] = []
    for stream in part.streams:
        text, error = decompress_streams(data[stream.start - start:stream.end - start])
        dump_ends = part.dump_ends and stream is part.streams[-1]
        # A dump cut short (a download that stopped) ends inside its last stream: what came
        # before the cut is read, as the sequential reading does. Any other error is damage.
        if error is not None and not (dump_ends and isinstance(error, EOFError)):
            found.append(error)
            continue
        found.append(_stream_rows(text, stream, dump, max_page_bytes, stats, dump_ends, Reached(error=error)))
        if dump_ends and not stats.input_complete:  # only the dump's last stream can end it early
            stats.input_error += f", in the bz2 stream at bytes [{stream.start}, {stream.end})"
    lost = {s.start: e for s, e in zip(part.streams, found) if isinstance(e, BaseException)}
    entries = index_entries(dump.index, set(lost)) if lost else {}
    rows = []
    for stream, got in zip(part.streams, found):
        rows += _lost_rows(stream, got, entries.get(stream.start)) if isinstance(got, BaseException) else got
    if max_pages is not None:
        rows = [r for r in rows if r["seq"] < max_pages]
    stats.pages_read = len(rows)
    for r in rows:
        if r["error"]:
            stats.errors[r["error"]] = stats.errors.get(r["error"], 0) + 1
    corrupt = [{"start": s.start, "end": s.end, "pages": s.pages, "error": f"{type(e).__name__}: {e}"}
               for s in part.streams if (e := lost.get(s.start)) is not None]
    return rows, {**stats.as_dict(), "streams": len(part.streams), "bad_streams": corrupt}


def write_partition(dump: Multistream, part: Partition, out: Dataset, *, max_page_bytes: int,
                    max_pages: int | None = None) -> dict:
    """Read one partition into raw_pages part ``part.number``; returns its counts, which the part
    keeps in its footer, so a resumed run reuses a part without reading its streams again."""
    if out.has_part(part.number):
        stats = out.part_metadata(part.number)
        if stats is not None:
            return stats
    rows, stats = read_partition(dump, part, max_page_bytes=max_page_bytes, max_pages=max_pages)
    out.write_part(part.number, pa.Table.from_pylist(rows, schema=RAW_PAGES), metadata=stats)
    return stats


def multistream_stats(dump: Multistream, part_stats: list[dict]) -> dict:
    """The partitions' counts summed into the statistics the sequential reading gives."""
    src = ReadStats()
    corrupt: list[dict] = []
    for st in part_stats:
        src.pages_read += st["pages_read"]
        for reason, n in st["unreadable_by_reason"].items():
            src.errors[reason] = src.errors.get(reason, 0) + n
        if not st["input_complete"] and src.input_complete:
            src.input_complete, src.input_error = False, st["input_error"]
        corrupt += st["bad_streams"]
    total = ReadStats(src.pages_read, src.input_complete, src.input_error and f"{dump.source}: {src.input_error}",
                      errors=dict(src.errors))
    source = {"source": dump.source, "format": "mediawiki-xml", "first_seq": 0, **src.as_dict(),
              "index": dump.index, "streams": sum(st["streams"] for st in part_stats), "bad_streams": corrupt}
    return {**total.as_dict(), "parts": len(part_stats), "format": "mediawiki-xml", "sources": [source]}


def write_multistream(
    source: str,
    index: str,
    out: Dataset,
    *,
    pages_per_part: int = 500,
    max_page_bytes: int = 4 << 20,
    max_pages: int | None = None,
    mapper: Callable = map,
) -> dict:
    """`write_raw_pages` for a multistream dump: parts of whole streams (at least ``pages_per_part``
    pages each), read by ``mapper`` (e.g. an executor's map); returns the same statistics."""
    dump, partitions = plan_reading(source, index, pages_per_part, max_pages)

    def write(part: Partition) -> dict:
        return write_partition(dump, part, out, max_page_bytes=max_page_bytes, max_pages=max_pages)

    return multistream_stats(dump, list(mapper(write, partitions)))


def plan_multistream(source: Source, index: str, storage_root: str,
                     params: dict) -> tuple[Dataset, Multistream | None, list[Partition]]:
    """The raw_pages version a multistream reading produces, and its plan (None when that
    version is complete already: then nothing is read)."""
    from storage.datasets import dataset_version, resolve_root

    sources = source_list(source)
    if len(sources) != 1:
        raise SourceError(f"a multistream index reads one dump, not {len(sources)} sources")
    source = resolve_source(sources[0])
    if params.get("input_format", "auto") == "jsonl":
        raise SourceError("a multistream index reads a MediaWiki XML dump, not JSON lines")
    prints = {}
    for key, url in (("source", source), ("index", index)):
        try:
            info = source_fingerprint(url)
        except SourceError as exc:
            raise SourceError(f"multistream index: {exc}" if key == "index" else str(exc)) from exc
        prints[key] = f"{info['url']}@{info['size']}@{info['stamp']}"
    version = dataset_version("raw_pages", MULTISTREAM_CODE_VERSION, params, prints)
    out = Dataset(resolve_root(storage_root), "raw_pages", version, RAW_PAGES)
    if out.is_complete():
        return out, None, []
    dump, partitions = plan_reading(source, index, params["pages_per_part"], params.get("max_pages"))
    return out, dump, partitions


# --- Prefect wrappers ----------------------------------------------------------------------------
from prefect import task  # noqa: E402  (wrappers below; the functions above need no Prefect)
from prefect.cache_policies import NONE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402


@task(name="plan-multistream", cache_policy=NONE)
def plan_multistream_task(source: Source, index: str, storage_root: str,
                          params: dict) -> tuple[Dataset, Multistream | None, list[Partition]]:
    out, dump, partitions = plan_multistream(source, index, storage_root, params)
    logger = get_run_logger()
    if dump is None:
        logger.info("raw_pages %s is complete: reusing it", out.version)
    else:
        logger.info("reading %s in %d partitions of bz2 streams (index %s)", redact(dump.source), len(partitions), redact(index))
    return out, dump, partitions


@task(name="raw-pages-partition", cache_policy=NONE, retries=1, retry_condition_fn=retry_unless_source_error)
def raw_partition_task(dump: Multistream, part: Partition, out: Dataset, params: dict) -> dict:
    return write_partition(dump, part, out, max_page_bytes=params["max_page_bytes"], max_pages=params["max_pages"])


@task(name="commit-raw-pages", cache_policy=NONE)
def commit_multistream_task(out: Dataset, dump: Multistream, part_stats: list[dict], params: dict) -> dict:
    stats = multistream_stats(dump, part_stats)
    logger = get_run_logger()
    for bad in stats["sources"][0]["bad_streams"]:
        logger.warning("bz2 stream at bytes [%d, %d) is damaged (%s): its %d pages are quarantined as bad_stream",
                       bad["start"], bad["end"], bad["error"], bad["pages"])
    return out.commit(code_version=MULTISTREAM_CODE_VERSION, params=params,
                      inputs={"source": dump.source, "index": dump.index}, stats=stats)
