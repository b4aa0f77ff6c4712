"""Stable hashing of keys: which bucket (reducer, part) a key goes to, and hash-chosen shares.

crc32 of the UTF-8 text, not ``hash()``: the same in every process, machine and Python
version, so a rerun or another worker puts a key in the same bucket and picks the same share.
"""
from __future__ import annotations

import zlib


def stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def bucket_of(key: str, n_buckets: int) -> int:
    return stable_hash(key) % n_buckets


def in_share(key: str, fraction: float) -> bool:
    """Whether ``key`` falls in the hash-chosen ``fraction`` of all keys (to 1/10,000)."""
    return stable_hash(key) % 10_000 < fraction * 10_000


# Schema metadata naming a map output's bucket column: Dataset.write_part sorts such parts by it
# (stably) and writes one row group per bucket, so a reducer's `Dataset.read_bucket(b)` decodes
# only its own row groups (Parquet row-group statistics) instead of every row of every part.
BUCKET_COLUMN = b"pearl.bucket_column"


def bucketed(schema, column: str):
    """``schema`` marked as bucketed by ``column`` (an integer field of it)."""
    if column not in schema.names:
        raise ValueError(f"no column {column!r} in {schema.names}")
    return schema.with_metadata({**(schema.metadata or {}), BUCKET_COLUMN: column.encode()})


def bucket_column(schema) -> str | None:
    raw = (schema.metadata or {}).get(BUCKET_COLUMN)
    return raw.decode() if raw else None


# Reducers hold their bucket in memory (the phrase reducer ~1.7 KB per occurrence row at its peak,
# benchmarks/reduce_memory.py), so the bucket count follows the input: about this many map rows per
# bucket (~1.7 GB for the phrase reducer), never fewer buckets than MIN_BUCKETS.
ROWS_PER_BUCKET = 1_000_000
MIN_BUCKETS = 8


def buckets_for(units: int, rows_per_unit: float, rows_per_bucket: int = ROWS_PER_BUCKET,
                minimum: int = MIN_BUCKETS) -> int:
    """Buckets for ``units`` inputs (pages, sentences, phrases) expected to give ``rows_per_unit``
    map rows each: enough that a bucket holds about ``rows_per_bucket`` rows."""
    if units < 0 or rows_per_unit <= 0 or rows_per_bucket <= 0:
        raise ValueError(f"buckets_for needs units >= 0 and positive rates: {units}, {rows_per_unit}, "
                         f"{rows_per_bucket}")
    return max(minimum, -(-int(units * rows_per_unit) // rows_per_bucket))
