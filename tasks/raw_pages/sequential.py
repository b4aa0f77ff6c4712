"""Stage 1: stream an input dump into `raw_pages` partitions of N pages.

Inputs: a MediaWiki XML export (``.xml``, ``.xml.bz2``, ``.xml.gz``; local path or any
fsspec URL) or JSON lines of ``{"title", "text"}`` records; or several of them (a dump
split in many files, or a dump plus JSON lines), read in the given order into one
dataset. Reading is sequential (a bz2 stream cannot be split), so this stage only cuts
the input into partitions; the CPU-heavy cleaning runs on those partitions in parallel.
A multistream dump with its index is the exception: multistream.py reads its
streams in parallel with the same cutting and parsing code (xml_dump.py).
"""
from __future__ import annotations

import json
import logging
from typing import BinaryIO, Callable, Iterator

import fsspec
import pyarrow as pa

from storage.datasets import Dataset
from pearl_redact import redact
from storage.schemas import RAW_PAGES
from tasks.raw_pages.xml_dump import (
    CODE_VERSION, COMPRESSED_RE, READ_ERRORS, SYNTHETIC_ID_START, ReadStats, Reached, Source, SourceError,
    check_source, cut_pages, decompressor, ended_early, namespace_map, page_id_problem, resolve_source,
    retry_unless_source_error, segment_row, source_list, split_header,
)

log = logging.getLogger(__name__)

# JSON lines longer than this are read in pieces so that one giant line cannot take all memory.
_LINE_LIMIT = 1 << 20
# A JSON record nested deeper than this (the record itself is depth 1) is quarantined as too_deep;
# the read setting max_json_depth changes it (json.loads itself stops near 1000 levels).
MAX_JSON_DEPTH = 64


class InputIncomplete(RuntimeError):
    """The input ended early or was corrupt: the pages before that point are committed."""


# --- MediaWiki XML ---------------------------------------------------------------------
def iter_xml_pages(stream: BinaryIO, max_page_bytes: int, stats: ReadStats) -> Iterator[dict]:
    """One row per ``<page>`` of a MediaWiki export, in any line layout.

    Nothing between the header and ``</mediawiki>`` is skipped: a damaged page, or text that
    is not whitespace between two pages, is a quarantine row with its bytes (``stray_text``,
    ``malformed_xml``, ``too_large``, ``truncated_input``).
    """
    reached = Reached()
    namespaces: dict | None = None
    seq = 0
    for kind, data, size in cut_pages(stream, max_page_bytes, reached):
        if namespaces is None:
            header, data = split_header(data)
            if kind == "end" and reached.error is None:
                raise SourceError("the dump holds no <page>")
            namespaces = namespace_map(header)
            size -= len(header)
        row = segment_row(seq, kind, data, size, namespaces, max_page_bytes, stats, reached)
        if row is None:
            continue
        yield row
        seq += 1
    if reached.error is not None and stats.input_complete:  # e.g. after </mediawiki>
        ended_early(stats, reached, "")
    stats.input_offset = reached.offset


# --- JSON lines ------------------------------------------------------------------------
_INT64 = range(-(2**63), 2**63)


def iter_jsonl_pages(stream: BinaryIO, max_page_bytes: int, stats: ReadStats, first_seq: int = 0,
                     max_json_depth: int = MAX_JSON_DEPTH) -> Iterator[dict]:
    """Records of a JSON-lines input whose first row is the build's ``first_seq``; a record without
    an id (or with ``"id": null``) gets page_id ``SYNTHETIC_ID_START + its seq in the build``.

    A blank line is no record; any other line is one row, and a line that is not a usable
    record is a quarantine row whose ``error_detail`` starts with its line number (1-based,
    in this source, decompressed), so one bad record never fails the read. Its limits:
    ``max_page_bytes`` a line (``too_large``), ``max_json_depth`` of nesting (``too_deep``).
    """
    seq = 0
    line_no = 0
    try:
        while True:
            line = stream.readline(max_page_bytes + 1)
            if not line:
                break
            line_no += 1
            stats.input_offset += len(line)
            if len(line) > max_page_bytes and not line.endswith(b"\n"):
                total = len(line)
                while (more := stream.readline(_LINE_LIMIT)):
                    total += len(more)
                    stats.input_offset += len(more)
                    if more.endswith(b"\n"):
                        break
                detail = f"record is {total} bytes, over max_page_bytes={max_page_bytes}; raw keeps its first {len(line)} bytes"
                yield _json_unreadable(seq, line, "too_large", f"line {line_no}: {detail}")
                seq += 1
                continue
            if not line.strip():
                continue
            row = _json_record(seq, line, SYNTHETIC_ID_START + first_seq + seq, max_json_depth)
            if row["error"]:
                row["error_detail"] = f"line {line_no}: {row['error_detail']}"[:500]
            yield row
            seq += 1
    except READ_ERRORS as exc:
        stats.input_complete = False
        stats.input_error = f"{type(exc).__name__}: {exc}"


def _json_unreadable(seq: int, line: bytes, reason: str, detail: str) -> dict:
    return {
        "seq": seq, "page_id": None, "title": None, "namespace": None, "redirect_target": None,
        "text_format": "plain", "text": None, "raw": line, "error": reason, "error_detail": detail[:500],
    }


def _json_record(seq: int, line: bytes, synthetic_id: int, max_json_depth: int = MAX_JSON_DEPTH) -> dict:
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return _json_unreadable(seq, line, "invalid_utf8", str(exc))
    # JSONDecodeError; ValueError: an integer of over 4300 digits; RecursionError: deep nesting
    except (ValueError, RecursionError) as exc:
        return _json_unreadable(seq, line, "malformed_json", f"{type(exc).__name__}: {exc}")
    if _deeper_than(record, max_json_depth):
        return _json_unreadable(seq, line, "too_deep", f"nested deeper than max_json_depth={max_json_depth}")
    if not isinstance(record, dict) or not isinstance(record.get("title"), str):
        return _json_unreadable(seq, line, "malformed_record", "expected an object with a string 'title'")
    text = record.get("text", record.get("extract"))
    title = record["title"]

    def bad(reason: str, detail: str) -> dict:
        return {**_json_unreadable(seq, line, reason, detail), "title": title if _encodable(title) else None}

    if not isinstance(text, str) or not text.strip():
        return bad("empty_page", "record has no text")
    if not (_encodable(title) and _encodable(text)):  # a lone surrogate escape such as "\\ud800"
        return bad("malformed_record", "'title' or 'text' holds a lone surrogate, which is not text")
    page_id = record.get("id")
    # One rule: an id is a JSON integer or a string of ASCII digits ("٣" and "²" are refused: Python
    # reads some numerals of other scripts as numbers and not others), from 0 up to the ids kept for
    # records without one. Anything else given as an id is quarantined, never replaced: a made-up id
    # would hide the record's own and could take a real page's.
    if page_id is None:  # no id, or null: one of its own, which no given id can be
        page_id = synthetic_id
    else:
        if isinstance(page_id, str) and page_id.isascii() and page_id.isdigit():
            try:
                page_id = int(page_id)
            except ValueError:  # over int()'s 4300 digits
                return bad("page_id_out_of_range", f"'id' of {len(page_id)} digits does not fit a 64-bit page id")
        elif isinstance(page_id, bool) or not isinstance(page_id, int):  # JSON true is a Python int
            shown = repr(page_id[:50]) if isinstance(page_id, str) else json.dumps(page_id)[:50]
            return bad("malformed_record", f"'id' {shown} is not an integer in ASCII digits 0-9")
        if (problem := page_id_problem(page_id)) is not None:
            return bad("page_id_out_of_range", f"'id': {problem}")
    return {
        "seq": seq,
        "page_id": page_id,
        "title": title.strip(),
        "namespace": 0,
        "redirect_target": None,
        "text_format": "plain",
        "text": text,
        "raw": None,
        "error": None,
        "error_detail": None,
    }


def _deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` nests lists or objects more than ``limit`` deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (v.values() if isinstance(v, dict) else v))
    return False


def _encodable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- the stage ---------------------------------------------------------------------------
ProgressFn = Callable[[int, int, int | None], None]  # pages read, input bytes read, input size


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
    if COMPRESSED_RE.search(info["url"].lower()):
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
    max_json_depth: int = MAX_JSON_DEPTH,
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
            stream = decompressor(info["url"], raw)
            if info["format"] == "mediawiki-xml":
                rows = iter_xml_pages(stream, max_page_bytes, src)
            else:
                rows = iter_jsonl_pages(stream, max_page_bytes, src, stats.pages_read, max_json_depth)
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

from runs.artifacts import publish  # noqa: E402


@task(name="plan-raw-pages", cache_policy=NONE)
def plan_raw_pages_task(source: Source, storage_root: str, params: dict) -> Dataset:
    return plan_raw_pages(source, storage_root, params)


@task(name="raw-pages", cache_policy=NONE, retries=1, retry_condition_fn=retry_unless_source_error)
def raw_pages_task(source: Source, out: Dataset, params: dict) -> dict:
    logger = get_run_logger()
    if out.is_complete():
        logger.info("raw_pages %s is complete: reusing it", out.version)
        return out.reuse()
    sources = [resolve_source(s) for s in source_list(source)]
    artifact = publish(create_progress_artifact, 0.0, description=f"Reading {', '.join(redact(sources))}")

    def progress(pages: int, done: int, total: int | None) -> None:
        pct = 100.0 * done / total if total else 0.0
        publish(update_progress_artifact, artifact, min(pct, 100.0))
        logger.info("read %d pages (%.1f%% of input)", pages, pct)

    stats = write_raw_pages(
        sources, out, input_format=params["input_format"], pages_per_part=params["pages_per_part"],
        max_page_bytes=params["max_page_bytes"], max_pages=params["max_pages"], progress=progress,
        max_json_depth=params.get("max_json_depth", MAX_JSON_DEPTH),
    )
    publish(update_progress_artifact, artifact, 100.0)
    if not stats["input_complete"]:
        logger.warning("input ended early (%s): the pages before that point are kept", stats["input_error"])
    if len(sources) > 1:
        logger.info("pages per source: %s", ", ".join(f"{redact(s['source'])}: {s['pages_read']}" for s in stats["sources"]))
    inputs = {"source": sources[0]} if len(sources) == 1 else {"sources": sources}
    return out.commit(code_version=CODE_VERSION, params=params, inputs=inputs, stats=stats)


@task(name="check-input-complete", cache_policy=NONE)
def check_input_complete_task(raw_manifest: dict, allow_incomplete_input: bool) -> None:
    warning = check_input_complete(raw_manifest, allow_incomplete_input)
    if warning:
        get_run_logger().warning(warning)
