"""What both readers of stage 1 share: opening and checking an input, and cutting and parsing
the pages of a MediaWiki XML dump (sequential.py reads a whole input in order, multistream.py
a multistream dump's bz2 streams in parallel).

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
import lzma
import re
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator, Sequence, Union

import fsspec
import mwxml
from mwxml.element_iterator import ElementIterator

from pearl_redact import redact

# raw_pages' version for the sequential reading, here since the multistream reading's extends it:
# a change to this module or to sequential.py bumps it.
# 3: pages cut by tag, not by line; 4: one id rule (ASCII digits), a JSON depth limit; 5: a malformed
# JSON id is quarantined, a record without one gets an id from the reserved block below
CODE_VERSION = "raw_pages-5"

# Reading stops at these: a truncated (EOFError) or corrupt (OSError, zlib.error, LZMAError)
# compressed stream, or an I/O error; what was read before is kept.
READ_ERRORS = (EOFError, OSError, lzma.LZMAError, zlib.error)
COMPRESSED_RE = re.compile(r"\.(bz2|gz|xz)$")
_TITLE_RE = re.compile(rb"<title>(.*?)</title>", re.S)
_ID_RE = re.compile(rb"<id>(\d+)</id>")

# Page ids from SYNTHETIC_ID_START up are given to records that carry none (a JSON line without an
# "id"): SYNTHETIC_ID_START + the record's seq, unique in the build. Both readers refuse a given id
# there or below 0, so a given id never collides with a synthetic one. The block ends where
# page_id * 10^6 (the pages stage's sentence ids) leaves int64: 2.2 * 10^11 records, enwiki has 6 * 10^7.
SYNTHETIC_ID_START = 9 * 10**12


def page_id_problem(page_id: int) -> str | None:
    """Why a page id given by an input cannot be one (a one-line detail), or None for a good id."""
    if page_id < 0:
        return f"page id {page_id} is negative"
    if page_id >= SYNTHETIC_ID_START:
        return f"page id {page_id} is not below {SYNTHETIC_ID_START}, the first id given to records without one"
    return None

Source = Union[str, Sequence[str]]  # one input, or several read in order


class SourceError(ValueError):
    """The input cannot be read at all; raised before any work is done. Its message names the
    source with any credentials in its URL redacted (it reaches logs and the UI)."""

    def __init__(self, message: str):
        super().__init__(redact(message))


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
    stem = COMPRESSED_RE.sub("", source.lower())
    if stem.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    return "mediawiki-xml"


def decompressor(source: str, raw: BinaryIO) -> BinaryIO:
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
    from storage.datasets import file_fingerprint

    return file_fingerprint(source, SourceError, "a dump file")


def check_source(source: str, input_format: str = "auto") -> dict:
    """Fail fast with a clear message if the input is missing, unreadable or not a dump."""
    fingerprint = source_fingerprint(source)
    kind = detect_format(source, input_format)
    if fingerprint["size"] == 0:  # before decompressing: an empty .bz2 is empty, not corrupt
        raise SourceError(f"input is empty (0 bytes): {source}")
    try:
        with fsspec.open(source, "rb") as raw:
            head = decompressor(source, raw).read(1 << 16)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        # the store's error may repeat the URL's userinfo: redacted, and not chained (tracebacks print it)
        raise SourceError(redact(f"cannot read {source}: {exc} (corrupt or not the compression its name says)",
                                 source)) from None
    if not head.strip():
        raise SourceError(f"input is empty: {source}")
    if kind == "mediawiki-xml" and b"<mediawiki" not in head:
        raise SourceError(f"{source} is not a MediaWiki XML export (no <mediawiki> element at its start)")
    if kind == "jsonl" and not head.lstrip().startswith(b"{"):
        raise SourceError(f"{source} is not JSON lines (first line does not start with '{{')")
    return {**fingerprint, "format": kind}


def sample_dump() -> str:
    """The real enwiki excerpt shipped in the gensim 4.4.0 wheel (206 pages)."""
    from pearl_model.packages import installed_dir

    base = installed_dir("gensim", SourceError, "source='sample' needs gensim==4.4.0 installed (it ships the sample dump)")
    return f"{base}/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def resolve_source(source: str) -> str:
    return sample_dump() if source == "sample" else source


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


# --- MediaWiki XML ---------------------------------------------------------------------
def namespace_map(header: bytes) -> dict:
    doc = header + b"</mediawiki>"
    try:
        dump = mwxml.Dump.from_file(io.BytesIO(doc))
    except Exception as exc:
        raise SourceError(f"cannot parse the dump's <siteinfo> header: {exc}") from exc
    return {ns.name: ns for ns in (dump.site_info.namespaces or [])}


def unreadable(seq: int, block: bytes, reason: str, detail: str) -> dict:
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
        return unreadable(seq, block, "too_large", f"page is {size} bytes, over max_page_bytes={max_page_bytes}; raw keeps its first {len(block)} bytes")
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as exc:
        return unreadable(seq, block, "invalid_utf8", str(exc))
    try:
        page = mwxml.Page.from_element(ElementIterator.from_string(text), namespaces)
        revisions = list(page)
    except Exception as exc:  # ParseError, MalformedXML, KeyError on missing fields
        return unreadable(seq, block, "malformed_xml", f"{type(exc).__name__}: {exc}")
    if page.id is None or page.title is None:
        return unreadable(seq, block, "malformed_xml", "page without <id> or <title>")
    if (problem := page_id_problem(page.id)) is not None:
        return {**unreadable(seq, block, "page_id_out_of_range", problem), "page_id": None}
    wikitext = revisions[-1].text if revisions else None
    if not wikitext or not wikitext.strip():
        row = unreadable(seq, block, "empty_page", "page has no revision text")
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
class Reached:
    """How far the stream was read, and the error that stopped it."""
    offset: int = 0
    error: BaseException | None = None


def cut_pages(stream: BinaryIO, keep: int, reached: Reached, header: bool = True) -> Iterator[tuple[str, bytes, int]]:
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
            except READ_ERRORS as exc:
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


def split_header(first: bytes) -> tuple[bytes, bytes]:
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


def ended_early(stats: ReadStats, reached: Reached, otherwise: str) -> str:
    """Mark the input incomplete; the reason is the read error, if one stopped it."""
    stats.input_complete = False
    stats.input_error = f"{type(reached.error).__name__}: {reached.error}" if reached.error else otherwise
    return stats.input_error


def segment_row(seq: int, kind: str, data: bytes, size: int, namespaces: dict, max_page_bytes: int,
                stats: ReadStats, reached: Reached, dump_ends: bool = True) -> dict | None:
    """The row for one segment of `cut_pages` (None: only whitespace between two pages).

    ``dump_ends=False`` for a stream of a multistream dump other than the last: it holds whole
    pages and no ``</mediawiki>``, so its end is not the end of the input.
    """
    if kind == "page":
        return _parse_page(seq, data, namespaces, max_page_bytes, size)
    # cut at the next <page>, or at the end of a stream that is not the dump's last
    if kind == "unclosed" or (kind == "truncated" and not dump_ends):
        raw = data.rstrip()
        return unreadable(seq, raw, "malformed_xml", "<page> without </page>" + _kept(size, data, raw))
    if kind == "orphan":
        raw = data.lstrip()
        return unreadable(seq, raw, "malformed_xml", "</page> without <page>" + _kept(size, data, raw))
    if kind == "truncated":
        ended = data.rfind(_END_TAG) if reached.error is None else -1
        if ended >= 0:  # the dump did end: its last page lost its </page>
            return unreadable(seq, data[:ended].rstrip(), "malformed_xml", "<page> without </page>")
        return unreadable(seq, data, "truncated_input", ended_early(stats, reached, "input ended inside a <page>"))
    # between two pages, or after the last one
    rest, reason, detail = data, "stray_text", f"{size} bytes of text outside any <page>"
    if kind == "end" and dump_ends:
        ended = data.rfind(_END_TAG)
        if ended >= 0:
            rest = data[:ended] + data[ended + len(_END_TAG):]
        else:  # whatever is here is the start of what the input lost
            reason = "truncated_input"
            detail = ended_early(stats, reached, "input ended before </mediawiki>")
    if not rest.strip() and size <= len(data):
        return None
    raw = data.strip()
    return unreadable(seq, raw, reason, detail + _kept(size, data, raw))


# --- retrying a reader's Prefect task --------------------------------------------------
def retry_unless_source_error(task, task_run, state) -> bool:
    """A failed read (a network file system) is worth one retry; an input that cannot be read is not."""
    return not isinstance(state.result(raise_on_failure=False), SourceError)
