"""The filesystem of a storage root, as every part of storage opens it.

fsspec keeps each object store's directory listings per process (its listings cache) and answers
``exists``, ``info`` and ``ls`` from them: a process that listed a version's records would not see
a part another process (a Dask worker) wrote after, and its commit would leave that part out. A
storage root's object store is therefore opened with the cache off: every listing and every look-up
asks the store (one request; the data is never cached). A local root has no such cache."""
from __future__ import annotations

from pathlib import Path

import fsspec
from fsspec.core import split_protocol


def is_local_root(url: str) -> bool:
    """Whether a storage root (or a path under it) is on this machine's disk: a path, or a file:// URL."""
    return (split_protocol(url)[0] or "file") in ("file", "local")


def machine_dir(root: str, name: str, cache: Path) -> Path:
    """Where a root keeps what only this machine reads back (checkpoints, scored rows): ``name``
    beside the datasets of a local root (a path or a file:// URL), in ``cache`` (this machine's
    cache directory) for an object store's."""
    if is_local_root(root):
        return Path(fsspec.core.url_to_fs(root)[1]) / name
    return cache / name


def store(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path) of a storage root or a path under it, the store's listings never cached."""
    if is_local_root(url):
        return fsspec.core.url_to_fs(url)
    return fsspec.core.url_to_fs(url, use_listings_cache=False)
