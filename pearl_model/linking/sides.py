"""One side of a link: the names of a column of a CSV or Parquet table (any fsspec URL).

Every table is read through :func:`read_batches`, with its limit stated (``max_row_bytes``).
Null, empty and whitespace-only names are skipped and counted, NUL bytes are stripped from names
and counted; the names kept carry their row in the table (0-based), so matches point back at the
input. Bad input is a one-line :class:`LinkInputError` whose message names the file: a missing
column (with the columns that exist), a column named twice, an empty table, a CSV that is not
UTF-8, a row over the limit, an unsupported suffix.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Iterator

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pearl_redact import redact

SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
# A CSV is read in blocks of FIRST_BLOCK bytes (pyarrow's default), grown for a longer row up to
# max_row_bytes, MAX_ROW_BYTES unless set: the memory one read may take, whatever the table's size.
FIRST_BLOCK = 1 << 20
MAX_ROW_BYTES = 64 << 20


class LinkInputError(ValueError):
    """An input table that cannot be linked as asked; the message names the file, credentials in
    its URL redacted (the message reaches the flow's state, logs and the CLI's output)."""

    def __init__(self, message: str):
        super().__init__(redact(message))


@dataclass
class Side:
    """The non-blank names of one column, with their rows in the table."""

    source: str
    column: str
    names: list[str]
    rows: np.ndarray  # int64, ascending: each name's 0-based row in the table
    total: int  # rows in the table (or partition), blank ones included
    nul_stripped: int = 0  # names that held NUL bytes (stripped; kept unless nothing else was left)

    @property
    def skipped(self) -> int:
        """Null, empty or whitespace-only names."""
        return self.total - len(self.names)

    def counts(self) -> dict[str, int]:
        """total = kept + skipped; nul_stripped counts names cleaned, kept or (when blank after) skipped."""
        return {"total": self.total, "kept": len(self.names), "skipped": self.skipped,
                "nul_stripped": self.nul_stripped}


def table_format(url: str) -> str:
    """csv or parquet, by the suffix of ``url``."""
    kind = SUFFIXES.get(PurePosixPath(url.split("?", 1)[0]).suffix.lower())
    if kind is None:
        raise LinkInputError(f"{url}: not a table this reads (the suffix must be one of {', '.join(SUFFIXES)})")
    return kind


@contextmanager
def _reading(url: str) -> Iterator[None]:
    """A read of ``url`` that fails as a LinkInputError naming it (a CSV that is not UTF-8 says so)."""
    try:
        yield
    except LinkInputError:
        raise
    except Exception as e:  # OSError, Arrow's, ImportError (no driver), a network store's own (botocore's)
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "utf8" in message.lower().replace("-", ""):
            message = f"not UTF-8 text ({message})"
        # the store's own error may repeat the URL's userinfo: its text is redacted here, and not chained
        raise LinkInputError(redact(f"cannot read {url}: {message}", url)) from None


def read_batches(url: str, columns: list[str], rows: int = 65_536,
                 max_row_bytes: int = MAX_ROW_BYTES) -> Iterator[pa.Table]:
    """The one door for a user table of a link: ``columns`` of the table at ``url`` (CSV or Parquet
    by suffix, any fsspec URL) as strings, in batches of at most ``rows`` rows, read as a stream.

    Each column must be named once in the table. A CSV is read in blocks that start at 1 MiB and
    grow, for a row that does not fit, up to ``max_row_bytes``; a row over that is a one-line error
    naming the limit. Errors are :class:`LinkInputError` naming the file; a table without rows is
    not one (the callers say what they need)."""
    kind = table_format(url)
    with _reading(url):
        fs, path = fsspec.core.url_to_fs(url)
        if kind == "parquet":
            import pyarrow.parquet as pq

            with _opened(fs, path) as f:
                pf = pq.ParquetFile(f)
                _check_columns(url, columns, pf.schema_arrow.names)
                for batch in pf.iter_batches(batch_size=rows, columns=columns):
                    yield _as_text(url, pa.table(batch), columns)
            return
        done, block = 0, min(FIRST_BLOCK, max_row_bytes)
        while True:  # a block too small for a row: read again with a bigger one, past the rows given
            try:
                with _opened(fs, path) as f:
                    for batch in _csv_batches(url, f, columns, block, skip=done):
                        for start in range(0, batch.num_rows, rows):
                            yield batch.slice(start, rows)
                        done += batch.num_rows
                return
            except pa.ArrowInvalid as e:
                if "straddl" not in str(e):
                    raise
                if block >= max_row_bytes:
                    raise LinkInputError(
                        f"{url}: a row is over max_row_bytes={max_row_bytes} (one cell may hold most of it); raise "
                        "the limit with --max-row-bytes (pearl link) or max_row_bytes (the link flow)") from None
                block = min(block * 4, max_row_bytes)


def _opened(fs: fsspec.AbstractFileSystem, path: str):
    """A local table as an Arrow file: Arrow's reader threads read a Python file through the
    interpreter, and one still alive at exit aborts the process after its work is done (apache/arrow#34314)."""
    from fsspec.implementations.local import LocalFileSystem

    return pa.OSFile(path, "rb") if isinstance(fs, LocalFileSystem) else fs.open(path, "rb")


def _csv_batches(url: str, f, columns: list[str], block: int, skip: int) -> Iterator[pa.Table]:
    """``columns`` of the CSV ``f`` in blocks of ``block`` bytes, its first ``skip`` rows left out."""
    import pyarrow.csv as pacsv

    read = pacsv.ReadOptions(block_size=block)
    parse = pacsv.ParseOptions(newlines_in_values=True)  # a quoted CR or LF is text, not a row's end
    _check_columns(url, columns, pacsv.open_csv(f, read_options=read, parse_options=parse).schema.names)
    f.seek(0)  # the header checked, the columns read
    reader = pacsv.open_csv(f, read_options=read, parse_options=parse, convert_options=pacsv.ConvertOptions(
        include_columns=columns, column_types={c: pa.string() for c in columns}))
    for batch in reader:
        table = pa.table(batch).slice(skip)
        skip = max(0, skip - batch.num_rows)
        if table.num_rows:
            yield _as_text(url, table, columns)


def read_columns(url: str, columns: list[str], max_row_bytes: int = MAX_ROW_BYTES) -> pa.Table:
    """``columns`` of the table at ``url`` as strings, whole (the errors of :func:`read_batches`)."""
    batches = list(read_batches(url, columns, max_row_bytes=max_row_bytes))
    if not batches or sum(b.num_rows for b in batches) == 0:
        raise LinkInputError(f"{url} has no rows")
    return pa.concat_tables(batches)


def _as_text(url: str, table: pa.Table, columns: list[str]) -> pa.Table:
    try:
        return table.cast(pa.schema([pa.field(c, pa.string()) for c in columns]))
    except pa.ArrowException as e:
        raise LinkInputError(f"{url}: the columns {columns} are not text: {e}") from e


def iter_column(url: str, column: str, rows: int, max_row_bytes: int = MAX_ROW_BYTES) -> Iterator[pa.Array]:
    """``column`` of the table at ``url`` as strings, ``rows`` at a time (the last chunk shorter),
    read as a stream: one chunk and one read block in memory whatever the table's size. The errors
    of :func:`read_batches`, a table without rows included (raised at its end)."""
    if rows < 1:
        raise ValueError("rows must be >= 1")
    pending: list[pa.Array] = []
    held = total = 0
    for batch in read_batches(url, [column], rows, max_row_bytes):
        pending.append(batch.column(column).combine_chunks())
        held += batch.num_rows
        while held >= rows:
            chunk = pa.concat_arrays(pending)
            yield chunk.slice(0, rows)
            total += rows
            pending, held = [chunk.slice(rows)], held - rows
    if held:
        yield pa.concat_arrays(pending)
        total += held
    if total == 0:
        raise LinkInputError(f"{url} has no rows")


def _check_columns(url: str, wanted: list[str], present: list[str]) -> None:
    if any("\x00" in c for c in wanted):  # pyarrow cuts such a name short at the NUL
        raise LinkInputError(f"{url}: a column name cannot hold a NUL byte: {', '.join(map(repr, wanted))}")
    missing = [c for c in wanted if c not in present]
    if missing:
        raise LinkInputError(f"{url} has no column {', '.join(map(repr, missing))}; "
                             f"its columns: {', '.join(map(repr, present)) or 'none'}")
    twice = [f"{c!r} {present.count(c)} times" for c in wanted if present.count(c) > 1]
    if twice:  # which of them is meant cannot be told
        raise LinkInputError(f"{url} names the column {', '.join(twice)}; rename all but one")


def side_from_array(names: pa.Array | pa.ChunkedArray, source: str, column: str, first_row: int = 0) -> Side:
    """A side from a column already read; ``first_row``: the row of its first element in the whole
    table (a partition's offset), so that rows stay the table's."""
    names = pc.cast(names, pa.string())
    nul = pc.match_substring(names, "\x00")
    nul_stripped = pc.sum(nul).as_py() or 0
    if nul_stripped:  # a NUL byte is no part of a name, and ends a string in much software downstream
        names = pc.replace_substring(names, "\x00", "")
    keep = pc.fill_null(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(names)), 0), False)
    rows = np.flatnonzero(keep.to_numpy(zero_copy_only=False)).astype(np.int64) + first_row
    return Side(source, column, pc.filter(names, keep).to_pylist(), rows, len(names), nul_stripped)


def concat_sides(parts: list[Side]) -> Side:
    """One side of consecutive partitions of a table (their rows already the table's)."""
    return Side(parts[0].source, parts[0].column, [n for p in parts for n in p.names],
                np.concatenate([p.rows for p in parts]), sum(p.total for p in parts),
                sum(p.nul_stripped for p in parts))


def read_side(url: str, column: str = "title", max_row_bytes: int = MAX_ROW_BYTES) -> Side:
    """The names in ``column`` of the table at ``url``; a side with no name at all is an error."""
    side = side_from_array(read_columns(url, [column], max_row_bytes).column(column), url, column)
    if not side.names:
        raise LinkInputError(f"{url}: all {side.total} names in column {column!r} are null or empty")
    return side
