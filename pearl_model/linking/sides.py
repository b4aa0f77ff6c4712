"""One side of a link: the names of a column of a CSV or Parquet table (any fsspec URL).

Null, empty and whitespace-only names are skipped and counted; the names kept carry their row in
the table (0-based), so matches point back at the input. Bad input is a :class:`LinkInputError`
whose message names the file: a missing column (with the columns that exist), an empty table, a
CSV that is not UTF-8, an unsupported suffix.
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

SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


class LinkInputError(ValueError):
    """An input table that cannot be linked as asked; the message names the file."""


@dataclass
class Side:
    """The non-blank names of one column, with their rows in the table."""

    source: str
    column: str
    names: list[str]
    rows: np.ndarray  # int64, ascending: each name's 0-based row in the table
    total: int  # rows in the table (or partition), blank ones included

    @property
    def skipped(self) -> int:
        """Null, empty or whitespace-only names."""
        return self.total - len(self.names)


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
    except (OSError, pa.ArrowException, UnicodeDecodeError, ValueError) as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "utf8" in message.lower().replace("-", ""):
            message = f"not UTF-8 text ({message})"
        raise LinkInputError(f"cannot read {url}: {message}") from e


def read_columns(url: str, columns: list[str]) -> pa.Table:
    """``columns`` of the table at ``url`` (CSV or Parquet by suffix, any fsspec URL), as strings."""
    kind = table_format(url)
    with _reading(url):
        fs, path = fsspec.core.url_to_fs(url)
        with fs.open(path, "rb") as f:
            if kind == "parquet":
                import pyarrow.parquet as pq

                pf = pq.ParquetFile(f)
                _check_columns(url, columns, pf.schema_arrow.names)
                table = pf.read(columns=columns)
            else:
                import pyarrow.csv as pacsv

                names = pacsv.open_csv(f).schema.names  # the header, before reading the rest
                _check_columns(url, columns, names)
                f.seek(0)
                table = pacsv.read_csv(f, convert_options=pacsv.ConvertOptions(
                    include_columns=columns, column_types={c: pa.string() for c in columns}))
    if table.num_rows == 0:
        raise LinkInputError(f"{url} has no rows")
    return _as_text(url, table, columns)


def _as_text(url: str, table: pa.Table, columns: list[str]) -> pa.Table:
    try:
        return table.cast(pa.schema([pa.field(c, pa.string()) for c in columns]))
    except pa.ArrowException as e:
        raise LinkInputError(f"{url}: the columns {columns} are not text: {e}") from e


def iter_column(url: str, column: str, rows: int) -> Iterator[pa.Array]:
    """``column`` of the table at ``url`` as strings, ``rows`` at a time (the last chunk shorter),
    read as a stream: one chunk and one read block in memory whatever the table's size. The errors
    of :func:`read_columns`, a table without rows included (raised at its end)."""
    if rows < 1:
        raise ValueError("rows must be >= 1")
    kind = table_format(url)
    pending: list[pa.Array] = []
    held = total = 0
    with _reading(url):
        fs, path = fsspec.core.url_to_fs(url)
        with fs.open(path, "rb") as f:
            if kind == "parquet":
                import pyarrow.parquet as pq

                pf = pq.ParquetFile(f)
                _check_columns(url, [column], pf.schema_arrow.names)
                batches = pf.iter_batches(batch_size=rows, columns=[column])
            else:
                import pyarrow.csv as pacsv

                _check_columns(url, [column], pacsv.open_csv(f).schema.names)  # the header first
                f.seek(0)
                batches = pacsv.open_csv(f, convert_options=pacsv.ConvertOptions(
                    include_columns=[column], column_types={column: pa.string()}))
            for batch in batches:
                pending.append(_as_text(url, pa.table(batch), [column]).column(column).combine_chunks())
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
    missing = [c for c in wanted if c not in present]
    if missing:
        raise LinkInputError(f"{url} has no column {', '.join(map(repr, missing))}; "
                             f"its columns: {', '.join(map(repr, present)) or 'none'}")


def side_from_array(names: pa.Array | pa.ChunkedArray, source: str, column: str, first_row: int = 0) -> Side:
    """A side from a column already read; ``first_row``: the row of its first element in the whole
    table (a partition's offset), so that rows stay the table's."""
    names = pc.cast(names, pa.string())
    keep = pc.fill_null(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(names)), 0), False)
    rows = np.flatnonzero(keep.to_numpy(zero_copy_only=False)).astype(np.int64) + first_row
    return Side(source, column, pc.filter(names, keep).to_pylist(), rows, len(names))


def concat_sides(parts: list[Side]) -> Side:
    """One side of consecutive partitions of a table (their rows already the table's)."""
    return Side(parts[0].source, parts[0].column, [n for p in parts for n in p.names],
                np.concatenate([p.rows for p in parts]), sum(p.total for p in parts))


def read_side(url: str, column: str = "title") -> Side:
    """The names in ``column`` of the table at ``url``; a side with no name at all is an error."""
    side = side_from_array(read_columns(url, [column]).column(column), url, column)
    if not side.names:
        raise LinkInputError(f"{url}: all {side.total} names in column {column!r} are null or empty")
    return side
