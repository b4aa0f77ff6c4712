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
