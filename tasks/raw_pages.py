"""Stage 1: stream an input dump into `raw_pages` partitions of N pages.

Inputs: a MediaWiki XML export (``.xml``, ``.xml.bz2``, ``.xml.gz``; local path or any
fsspec URL) or JSON lines of ``{"title", "text"}`` records; or several of them (a dump
split in many files, or a dump plus JSON lines), read in the given order into one
dataset. Reading is sequential (a bz2 stream cannot be split), so this stage only cuts
the input into partitions; the CPU-heavy cleaning runs on those partitions in parallel.
A multistream dump with its index is the exception: tasks/multistream.py reads its
streams in parallel with the same cutting and parsing code as here.

mwxml parses each page, but the stream is cut into ``<page>`` blocks here first, by
their tags (not by line, so any layout of a well-formed export reads): mwxml's
whole-stream iterparse cannot go on after one bad byte or one broken tag, and a user
with a 20 GB dump wants that page quarantined and the other millions kept. Nothing is
skipped: what lies outside any page is quarantined too, and an input that ended early
is marked so (``check_input_complete`` then fails the run unless that is allowed).
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import logging
import lzma
import re
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator, Sequence, Union

import fsspec
import mwxml
import pyarrow as pa
from mwxml.element_iterator import ElementIterator

from storage.datasets import Dataset
from storage.schemas import RAW_PAGES

CODE_VERSION = "raw_pages-3"  # 3: pages cut by tag, not by line
log = logging.getLogger(__name__)

# JSON lines longer than this are read in pieces so that one giant line cannot take all memory.
_LINE_LIMIT = 1 << 20
# Reading stops at these: a truncated (EOFError) or corrupt (OSError, zlib.error, LZMAError)
# compressed stream, or an I/O error; what was read before is kept.
_READ_ERRORS = (EOFError, OSError, lzma.LZMAError, zlib.error)
_COMPRESSED_RE = re.compile(r"\.(bz2|gz|xz)$")
_TITLE_RE = re.compile(rb"<title>(.*?)</title>", re.S)
_ID_RE = re.compile(rb"<id>(\d+)</id>")
# With several sources, a JSON record without an id gets page_id = (i + 1) * this + its
# line number in source i, clear of real page ids (enwiki's are < 10^8) and of the other
# sources' (sentence ids, page_id * 10^6 + index, stay within int64 up to ~9000 sources).
SYNTHETIC_ID_BASE = 10**9

Source = Union[str, Sequence[str]]  # one input, or several read in order


class SourceError(ValueError):
    """The input cannot be read at all; raised before any work is done."""


class InputIncomplete(RuntimeError):
    """The input ended early or was corrupt: the pages before that point are committed."""


@dataclass
class ReadStats:
    pages_read: int = 0
    input_complete: bool = True
    input_error: str | None = None
    input_offset: int = 0  # bytes of the (decompressed) input read
    errors: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "pages_read": self.pages_read,
            "input_complete": self.input_complete,
            "input_error": self.input_error,
            "unreadable_by_reason": dict(sorted(self.errors.items())),
        }


# --- opening and checking the input ----------------------------------------------------
def detect_format(source: str, input_format: str = "auto") -> str:
    if input_format != "auto":
        if input_format not in ("mediawiki-xml", "jsonl"):
            raise SourceError(f"unknown input_format {input_format!r}: use auto, mediawiki-xml or jsonl")
        return input_format
    stem = _COMPRESSED_RE.sub("", source.lower())
    if stem.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    return "mediawiki-xml"


def _decompressor(source: str, raw: BinaryIO) -> BinaryIO:
    lower = source.lower()
    if lower.endswith(".bz2"):
        return bz2.BZ2File(raw)
    if lower.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)
    if lower.endswith(".xz"):
        return lzma.LZMAFile(raw)
    return raw


def source_fingerprint(source: str) -> dict:
    """Identity of the input for versioning: size and modification time (or ETag)."""
    try:
        fs, path = fsspec.core.url_to_fs(source)
        info = fs.info(path)
    except FileNotFoundError:
        raise SourceError(f"input not found: {source}") from None
    except Exception as exc:  # network filesystems raise their own types
        raise SourceError(f"cannot stat input {source}: {exc}") from exc
    if info.get("type") == "directory":
        raise SourceError(f"input is a directory, expected a dump file: {source}")
    stamp = info.get("mtime") or info.get("LastModified") or info.get("ETag") or info.get("created")
    return {"url": source, "size": info.get("size"), "stamp": str(stamp)}


def check_source(source: str, input_format: str = "auto") -> dict:
    """Fail fast with a clear message if the input is missing, unreadable or not a dump."""
    fingerprint = source_fingerprint(source)
    kind = detect_format(source, input_format)
    if fingerprint["size"] == 0:  # before decompressing: an empty .bz2 is empty, not corrupt
        raise SourceError(f"input is empty (0 bytes): {source}")
    try:
        with fsspec.open(source, "rb") as raw:
            head = _decompressor(source, raw).read(1 << 16)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise SourceError(f"cannot read {source}: {exc} (corrupt or not the compression its name says)") from exc
    if not head.strip():
        raise SourceError(f"input is empty: {source}")
    if kind == "mediawiki-xml" and b"<mediawiki" not in head:
        raise SourceError(f"{source} is not a MediaWiki XML export (no <mediawiki> element at its start)")
    if kind == "jsonl" and not head.lstrip().startswith(b"{"):
        raise SourceError(f"{source} is not JSON lines (first line does not start with '{{')")
    return {**fingerprint, "format": kind}


# --- MediaWiki XML ---------------------------------------------------------------------
def _namespace_map(header: bytes) -> dict:
    doc = header + b"</mediawiki>"
    try:
        dump = mwxml.Dump.from_file(io.BytesIO(doc))
    except Exception as exc:
        raise SourceError(f"cannot parse the dump's <siteinfo> header: {exc}") from exc
    return {ns.name: ns for ns in (dump.site_info.namespaces or [])}


def _unreadable(seq: int, block: bytes, reason: str, detail: str) -> dict:
    title = _TITLE_RE.search(block)
    pid = _ID_RE.search(block)
    return {
        "seq": seq,
        "page_id": int(pid.group(1)) if pid else None,
        "title": title.group(1).decode("utf-8", "replace") if title else None,
        "namespace": None,
        "redirect_target": None,
        "text_format": "wikitext",
        "text": None,
        "raw": block,
        "error": reason,
        "error_detail": detail[:500],
    }


def _parse_page(seq: int, block: bytes, namespaces: dict, max_page_bytes: int, size: int) -> dict:
    if size > max_page_bytes:
        return _unreadable(seq, block, "too_large", f"page is {size} bytes, over max_page_bytes={max_page_bytes}; raw keeps its first {len(block)} bytes")
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _unreadable(seq, block, "invalid_utf8", str(exc))
    try:
        page = mwxml.Page.from_element(ElementIterator.from_string(text), namespaces)
        revisions = list(page)
    except Exception as exc:  # ParseError, MalformedXML, KeyError on missing fields
        return _unreadable(seq, block, "malformed_xml", f"{type(exc).__name__}: {exc}")
    if page.id is None or page.title is None:
        return _unreadable(seq, block, "malformed_xml", "page without <id> or <title>")
    wikitext = revisions[-1].text if revisions else None
    if not wikitext or not wikitext.strip():
        row = _unreadable(seq, block, "empty_page", "page has no revision text")
        row.update(page_id=page.id, title=page.title, namespace=page.namespace)
        return row
    return {
        "seq": seq,
        "page_id": page.id,
        "title": page.title,
        "namespace": page.namespace,
        "redirect_target": page.redirect,
        "text_format": "wikitext",
        "text": wikitext,
        "raw": None,
        "error": None,
        "error_detail": None,
    }


# <page> and </page> wherever they are: one page per line, several on a line or any
# indentation all read the same (in well-formed XML the text escapes '<', so a tag is a tag).
_TAG_RE = re.compile(rb"<(/?)page>")
_CHUNK = 1 << 20
_HEADER_LIMIT = 1 << 24
_END_TAG = b"</mediawiki>"


@dataclass
class _Reached:
    """How far the stream was read, and the error that stopped it."""
    offset: int = 0
    error: BaseException | None = None


def _cut_pages(stream: BinaryIO, keep: int, reached: _Reached, header: bool = True) -> Iterator[tuple[str, bytes, int]]:
    """Cut a byte stream at its ``<page>`` and ``</page>`` tags, not by line.

    Yields ``(kind, kept bytes, size)`` per segment; a segment keeps at most ``keep`` bytes
    (the first one, which holds the header, 16 MB), so a giant page or a run of junk cannot
    take all memory. Kinds: "page" (``<page>...</page>``), "unclosed" (``<page>...`` cut at
    the next ``<page>``), "orphan" (``...</page>`` with no ``<page>``: a page whose opening
    tag is damaged), "between" (bytes up to a ``<page>``: the header, or what lies between
    two pages), "end" (bytes after the last tag), "truncated" (the page the input ended in).
    ``header=False``: the stream starts after the dump's header (a stream of a multistream
    dump), so its first segment is kept like any other.
    """
    read = getattr(stream, "read1", stream.read)  # read1: no bytes before an error are lost
    buf, pos, eof, inside, first = b"", 0, False, False, header
    seg, size = bytearray(), 0

    def take(end: int) -> None:
        nonlocal pos, size
        room = (_HEADER_LIMIT if first else keep) - len(seg)
        if room > 0:
            seg.extend(buf[pos:min(end, pos + room)])
        size += end - pos
        pos = end
        if first and size > _HEADER_LIMIT:
            raise SourceError("no <page> within the first 16 MB: not a MediaWiki pages dump")

    def emit(kind: str) -> tuple[str, bytes, int]:
        nonlocal seg, size, first
        out = (kind, bytes(seg), size)
        seg, size, first = bytearray(), 0, False
        return out

    while True:
        m = _TAG_RE.search(buf, pos)
        if m is None:
            if eof:
                take(len(buf))
                yield emit("truncated" if inside else "end")
                return
            take(max(pos, len(buf) - len(b"</page")))  # a tag may straddle two reads
            try:
                chunk = read(_CHUNK)
            except _READ_ERRORS as exc:
                reached.error, chunk = exc, b""
            reached.offset += len(chunk)
            buf, pos, eof = buf[pos:] + chunk, 0, not chunk
        elif m.group(1):  # </page>
            take(m.end())
            yield emit("page" if inside else "orphan")
            inside = False
        else:  # <page>
            take(m.start())
            yield emit("unclosed" if inside else "between")
            take(m.end())
            inside = True


def _split_header(first: bytes) -> tuple[bytes, bytes]:
    """The dump's header (``<mediawiki>`` and ``<siteinfo>``) and what follows it."""
    end = first.find(b"</siteinfo>")
    if end >= 0:
        end += len(b"</siteinfo>")
    else:
        start = first.find(b"<mediawiki")
        end = first.find(b">", start) + 1 if start >= 0 else 0
    return first[:end], first[end:]


def _kept(size: int, data: bytes, raw: bytes) -> str:
    """Says so when a segment was cut to its first bytes (``data``), kept as ``raw``."""
    return "" if size <= len(data) else f"; raw keeps {len(raw)} of its {size} bytes"


def _ended_early(stats: ReadStats, reached: _Reached, otherwise: str) -> str:
    """Mark the input incomplete; the reason is the read error, if one stopped it."""
    stats.input_complete = False
    stats.input_error = f"{type(reached.error).__name__}: {reached.error}" if reached.error else otherwise
    return stats.input_error


def iter_xml_pages(stream: BinaryIO, max_page_bytes: int, stats: ReadStats) -> Iterator[dict]:
    """One row per ``<page>`` of a MediaWiki export, in any line layout.

    Nothing between the header and ``</mediawiki>`` is skipped: a damaged page, or text that
    is not whitespace between two pages, is a quarantine row with its bytes (``stray_text``,
    ``malformed_xml``, ``too_large``, ``truncated_input``).
    """
    reached = _Reached()
    namespaces: dict | None = None
    seq = 0
    for kind, data, size in _cut_pages(stream, max_page_bytes, reached):
        if namespaces is None:
            header, data = _split_header(data)
            if kind == "end" and reached.error is None:
                raise SourceError("the dump holds no <page>")
            namespaces = _namespace_map(header)
            size -= len(header)
        row = _segment_row(seq, kind, data, size, namespaces, max_page_bytes, stats, reached)
        if row is None:
            continue
        yield row
        seq += 1
    if reached.error is not None and stats.input_complete:  # e.g. after </mediawiki>
        _ended_early(stats, reached, "")
    stats.input_offset = reached.offset


def _segment_row(seq: int, kind: str, data: bytes, size: int, namespaces: dict, max_page_bytes: int,
                 stats: ReadStats, reached: _Reached, dump_ends: bool = True) -> dict | None:
    """The row for one segment of `_cut_pages` (None: only whitespace between two pages).

    ``dump_ends=False`` for a stream of a multistream dump other than the last: it holds whole
    pages and no ``</mediawiki>``, so its end is not the end of the input.
    """
    if kind == "page":
        return _parse_page(seq, data, namespaces, max_page_bytes, size)
    # cut at the next <page>, or at the end of a stream that is not the dump's last
    if kind == "unclosed" or (kind == "truncated" and not dump_ends):
        raw = data.rstrip()
        return _unreadable(seq, raw, "malformed_xml", "<page> without </page>" + _kept(size, data, raw))
    if kind == "orphan":
        raw = data.lstrip()
        return _unreadable(seq, raw, "malformed_xml", "</page> without <page>" + _kept(size, data, raw))
    if kind == "truncated":
        ended = data.rfind(_END_TAG) if reached.error is None else -1
        if ended >= 0:  # the dump did end: its last page lost its </page>
            return _unreadable(seq, data[:ended].rstrip(), "malformed_xml", "<page> without </page>")
        return _unreadable(seq, data, "truncated_input", _ended_early(stats, reached, "input ended inside a <page>"))
    # between two pages, or after the last one
    rest, reason, detail = data, "stray_text", f"{size} bytes of text outside any <page>"
    if kind == "end" and dump_ends:
        ended = data.rfind(_END_TAG)
        if ended >= 0:
            rest = data[:ended] + data[ended + len(_END_TAG):]
        else:  # whatever is here is the start of what the input lost
            reason = "truncated_input"
            detail = _ended_early(stats, reached, "input ended before </mediawiki>")
    if not rest.strip() and size <= len(data):
        return None
    raw = data.strip()
    return _unreadable(seq, raw, reason, detail + _kept(size, data, raw))


# --- JSON lines ------------------------------------------------------------------------
def iter_jsonl_pages(stream: BinaryIO, max_page_bytes: int, stats: ReadStats, id_base: int = 0) -> Iterator[dict]:
    """Records of a JSON-lines input; one without an id gets page_id ``id_base + seq + 1``."""
    seq = 0
    try:
        while True:
            line = stream.readline(max_page_bytes + 1)
            if not line:
                break
            stats.input_offset += len(line)
            if len(line) > max_page_bytes and not line.endswith(b"\n"):
                total = len(line)
                while (more := stream.readline(_LINE_LIMIT)):
                    total += len(more)
                    stats.input_offset += len(more)
                    if more.endswith(b"\n"):
                        break
                detail = f"record is {total} bytes, over max_page_bytes={max_page_bytes}; raw keeps its first {len(line)} bytes"
                yield _json_unreadable(seq, line, "too_large", detail)
                seq += 1
                continue
            if not line.strip():
                continue
            yield _json_record(seq, line, id_base)
            seq += 1
    except _READ_ERRORS as exc:
        stats.input_complete = False
        stats.input_error = f"{type(exc).__name__}: {exc}"


def _json_unreadable(seq: int, line: bytes, reason: str, detail: str) -> dict:
    return {
        "seq": seq, "page_id": None, "title": None, "namespace": None, "redirect_target": None,
        "text_format": "plain", "text": None, "raw": line, "error": reason, "error_detail": detail[:500],
    }


def _json_record(seq: int, line: bytes, id_base: int = 0) -> dict:
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return _json_unreadable(seq, line, "invalid_utf8", str(exc))
    except json.JSONDecodeError as exc:
        return _json_unreadable(seq, line, "malformed_json", str(exc))
    if not isinstance(record, dict) or not isinstance(record.get("title"), str):
        return _json_unreadable(seq, line, "malformed_record", "expected an object with a string 'title'")
    text = record.get("text", record.get("extract"))
    if not isinstance(text, str) or not text.strip():
        row = _json_unreadable(seq, line, "empty_page", "record has no text")
        row["title"] = record["title"]
        return row
    page_id = record.get("id")
    return {
        "seq": seq,
        "page_id": int(page_id) if isinstance(page_id, int) or (isinstance(page_id, str) and page_id.isdigit()) else id_base + seq + 1,
        "title": record["title"].strip(),
        "namespace": 0,
        "redirect_target": None,
        "text_format": "plain",
        "text": text,
        "raw": None,
        "error": None,
        "error_detail": None,
    }


# --- the stage ---------------------------------------------------------------------------
ProgressFn = Callable[[int, int, int | None], None]  # pages read, input bytes read, input size


def source_list(source: Source) -> list[str]:
    """One source or several, as a list (in reading order)."""
    if isinstance(source, str):
        return [source]
    sources = list(source)
    if not sources:
        raise SourceError("no input source given")
    bad = [s for s in sources if not isinstance(s, str) or not s]
    if bad:
        raise SourceError(f"every source must be a non-empty string (path, URL or 'sample'), got {bad[0]!r}")
    return sources


def check_sources(source: Source, input_format: str = "auto") -> list[dict]:
    """Check every source (``sample`` resolved) before any work; the error names the failing one."""
    sources = source_list(source)
    infos = []
    for i, name in enumerate(sources):
        try:
            infos.append(check_source(resolve_source(name), input_format))
        except SourceError as exc:
            if len(sources) == 1:
                raise
            raise SourceError(f"{_label(i, sources)}: {exc}") from exc
    return infos


def _label(i: int, sources: list[str]) -> str:
    return f"source {i + 1} of {len(sources)} ({sources[i]})" if len(sources) > 1 else sources[i]


def _where(src: ReadStats, info: dict, compressed_at: int, last_title: str | None) -> str:
    """Where a source broke: the byte offset read, and the last page read whole."""
    at = f"byte {src.input_offset}"
    if _COMPRESSED_RE.search(info["url"].lower()):
        at += f" of the decompressed input (about byte {compressed_at} of {info['size']} compressed)"
    return f"at {at}, last complete page {last_title!r}" if last_title else f"at {at}, before any complete page"


def write_raw_pages(
    source: Source,
    out: Dataset,
    *,
    input_format: str = "auto",
    pages_per_part: int = 500,
    max_page_bytes: int = 4 << 20,
    max_pages: int | None = None,
    progress: ProgressFn | None = None,
) -> dict:
    """Cut the input(s) into parts of ``pages_per_part`` records; returns read statistics.

    Several sources are read in the given order into one sequence: ``seq`` runs on across
    them and a part may hold the end of one source and the start of the next. Every source
    is checked before anything is written. ``max_pages`` counts over all sources. The
    statistics are totals plus one entry per source under ``sources``.

    Parts already on disk from an interrupted run of the same version are kept, not
    rewritten (the input is still read through, since compressed streams can't seek).
    """
    if pages_per_part < 1:
        raise ValueError("pages_per_part must be >= 1")
    infos = check_sources(source, input_format)
    several = len(infos) > 1
    sizes = [info["size"] for info in infos]
    total_size = sum(sizes) if all(isinstance(n, int) for n in sizes) else None
    stats = ReadStats()
    per_source: list[dict] = []
    buffer: list[dict] = []
    part = 0
    bytes_before = 0  # input bytes of the sources already read

    def flush() -> None:
        nonlocal part, buffer
        if buffer and not out.has_part(part):
            out.write_part(part, pa.Table.from_pylist(buffer, schema=RAW_PAGES))
        if buffer:
            part += 1
        buffer = []

    for i, info in enumerate(infos):
        if max_pages is not None and stats.pages_read >= max_pages:
            per_source.append({"source": info["url"], "format": info["format"], "first_seq": stats.pages_read,
                               **ReadStats().as_dict(), "skipped": "max_pages reached"})
            continue
        first_seq = stats.pages_read
        src = ReadStats()
        last_title = None  # of the last page read whole, to say where an input broke
        with fsspec.open(info["url"], "rb") as raw:
            stream = _decompressor(info["url"], raw)
            if info["format"] == "mediawiki-xml":
                rows = iter_xml_pages(stream, max_page_bytes, src)
            else:
                rows = iter_jsonl_pages(stream, max_page_bytes, src, (i + 1) * SYNTHETIC_ID_BASE if several else 0)
            try:
                for row in rows:
                    row["seq"] = stats.pages_read  # runs on across sources
                    buffer.append(row)
                    stats.pages_read += 1
                    src.pages_read += 1
                    if row["error"]:
                        stats.errors[row["error"]] = stats.errors.get(row["error"], 0) + 1
                        src.errors[row["error"]] = src.errors.get(row["error"], 0) + 1
                    if row["title"] and row["error"] != "truncated_input":
                        last_title = row["title"]
                    if len(buffer) >= pages_per_part:
                        flush()
                        if progress:
                            progress(stats.pages_read, bytes_before + raw.tell(), total_size)
                    if max_pages is not None and stats.pages_read >= max_pages:
                        break
            except SourceError as exc:  # found while reading, e.g. a dump without any <page>
                raise SourceError(f"{_label(i, [s['url'] for s in infos])}: {exc}") from exc
            if i == len(infos) - 1:
                flush()  # the last part; earlier sources' tails share a part with the next source
            if progress:
                progress(stats.pages_read, bytes_before + raw.tell(), total_size)
            compressed_at = raw.tell()
        bytes_before += info["size"] or 0
        if not src.input_complete:
            src.input_error = f"{src.input_error}, {_where(src, info, compressed_at, last_title)}"
            log.warning("input %s ended early: %s; pages before that point are kept", info["url"], src.input_error)
            stats.input_complete = False
            if stats.input_error is None:
                stats.input_error = f"{info['url']}: {src.input_error}"
        per_source.append({"source": info["url"], "format": info["format"], "first_seq": first_seq, **src.as_dict()})
    flush()  # when max_pages stopped reading before the last source
    formats = {info["format"] for info in infos}
    return {**stats.as_dict(), "parts": part, "format": formats.pop() if len(formats) == 1 else "mixed",
            "sources": per_source}


def check_input_complete(manifest: dict, allow_incomplete_input: bool = False) -> str | None:
    """Raise InputIncomplete if the raw_pages ``manifest`` says an input broke, unless allowed.

    Returns the warning to log when the user allowed it, None for a complete input.
    """
    stats = manifest["stats"]
    if stats["input_complete"]:
        return None
    broken = [f"{s['source']}: {s['input_error']}" for s in stats["sources"] if not s["input_complete"]]
    n = stats["pages_read"]
    said = f"input ended early after {n} pages: {'; '.join(broken)}"
    if allow_incomplete_input:
        return f"{said}; continuing with the pages read (allow_incomplete_input=true)"
    raise InputIncomplete(f"{said}; the {n} pages read are committed (raw_pages {manifest['version']}); "
                          "rerun with allow_incomplete_input=true to continue with them")


# --- Prefect wrappers --------------------------------------------------------------------
def sample_dump() -> str:
    """The real enwiki excerpt shipped in the gensim 4.4.0 wheel (206 pages)."""
    import importlib.util

    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise SourceError("source='sample' needs gensim==4.4.0 installed (it ships the sample dump)")
    base = spec.submodule_search_locations[0]
    return f"{base}/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def resolve_source(source: str) -> str:
    return sample_dump() if source == "sample" else source


def source_inputs(infos: list[dict]) -> dict:
    """The version inputs: every source's fingerprint, in reading order.

    One source keeps the key it always had, so its versions (and stored data) stay valid;
    a list of one source is the same input as that source alone.
    """
    prints = [f"{i['url']}@{i['size']}@{i['stamp']}" for i in infos]
    return {"source": prints[0]} if len(prints) == 1 else {"sources": prints}


def plan_raw_pages(source: Source, storage_root: str, params: dict) -> Dataset:
    """Check every input (fail before any work) and name the version they will produce."""
    from storage.datasets import dataset_version, resolve_root

    infos = check_sources(source, params.get("input_format", "auto"))
    version = dataset_version("raw_pages", CODE_VERSION, params, source_inputs(infos))
    return Dataset(resolve_root(storage_root), "raw_pages", version, RAW_PAGES)


from prefect import task  # noqa: E402  (wrappers below; the stage above needs no Prefect)
from prefect.artifacts import create_progress_artifact, update_progress_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402


@task(name="plan-raw-pages", cache_policy=NONE)
def plan_raw_pages_task(source: Source, storage_root: str, params: dict) -> Dataset:
    return plan_raw_pages(source, storage_root, params)


def _retry_unless_source_error(task, task_run, state) -> bool:
    """A failed read (a network file system) is worth one retry; an input that cannot be read is not."""
    return not isinstance(state.result(raise_on_failure=False), SourceError)


@task(name="raw-pages", cache_policy=NONE, retries=1, retry_condition_fn=_retry_unless_source_error)
def raw_pages_task(source: Source, out: Dataset, params: dict) -> dict:
    logger = get_run_logger()
    if out.is_complete():
        logger.info("raw_pages %s is complete: reusing it", out.version)
        return out.manifest()
    sources = [resolve_source(s) for s in source_list(source)]
    artifact = create_progress_artifact(0.0, description=f"Reading {', '.join(sources)}")

    def progress(pages: int, done: int, total: int | None) -> None:
        pct = 100.0 * done / total if total else 0.0
        update_progress_artifact(artifact, min(pct, 100.0))
        logger.info("read %d pages (%.1f%% of input)", pages, pct)

    stats = write_raw_pages(
        sources, out, input_format=params["input_format"], pages_per_part=params["pages_per_part"],
        max_page_bytes=params["max_page_bytes"], max_pages=params["max_pages"], progress=progress,
    )
    update_progress_artifact(artifact, 100.0)
    if not stats["input_complete"]:
        logger.warning("input ended early (%s): the pages before that point are kept", stats["input_error"])
    if len(sources) > 1:
        logger.info("pages per source: %s", ", ".join(f"{s['source']}: {s['pages_read']}" for s in stats["sources"]))
    inputs = {"source": sources[0]} if len(sources) == 1 else {"sources": sources}
    return out.commit(code_version=CODE_VERSION, params=params, inputs=inputs, stats=stats)


@task(name="check-input-complete", cache_policy=NONE)
def check_input_complete_task(raw_manifest: dict, allow_incomplete_input: bool) -> None:
    warning = check_input_complete(raw_manifest, allow_incomplete_input)
    if warning:
        get_run_logger().warning(warning)
