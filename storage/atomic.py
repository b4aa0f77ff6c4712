"""Writes that a crash, a power cut or a concurrent writer cannot leave half done.

Every file is written under a temporary name (``.tmp-<random><suffix>`` beside the final name) and
renamed into place. On a local root the temporary file is fsync'ed before the rename and the
directory after it, so a power cut leaves the old file or the new one, never an empty one.
Temporary files of a killed run are removed by :func:`clean_leftovers` once they are older than
a grace period (a live writer's are fresh: its file is renamed as soon as it is closed).

:func:`write_exclusive` creates a file only if it does not exist, as one atomic step (the
registry's compare-and-swap): a hard link on a local root, otherwise the store's conditional
write as fsspec exposes it (``pipe_file(..., mode="create")``): S3 (s3fs, ``If-None-Match``),
Google Cloud Storage (gcsfs, ``ifGenerationMatch=0``) and Azure Blob (adlfs, ``overwrite=False``),
and the in-process memory filesystem. Any other store is refused (ExclusiveWriteUnsupported):
fsspec's generic ``mode="create"`` checks and then writes, which two writers can both pass.
"""
from __future__ import annotations

import os
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

TMP = ".tmp-"
LEFTOVER_GRACE_S = 6 * 3600  # far longer than a part or a model file takes from open to rename
# fsspec protocols whose pipe_file(mode="create") is one conditional request (see the module doc)
EXCLUSIVE_PROTOCOLS = frozenset({"memory", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})


class ExclusiveWriteUnsupported(RuntimeError):
    """The store offers no atomic create-if-absent through fsspec."""


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def fsync_path(path: str, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tmp_beside(final: str) -> str:
    # Not the final name with a prefix: nothing that lists parts by name may ever match it.
    parent, base = final.rsplit("/", 1)
    return f"{parent}/{TMP}{uuid.uuid4().hex}{Path(base).suffix}"


@contextmanager
def atomic_path(fs: fsspec.AbstractFileSystem, final: str) -> Iterator[str]:
    """A temporary name beside ``final`` to write to; renamed to ``final`` when the block
    ends, so a file that exists is whole. A failed write leaves no temporary file behind
    (a killed process still can: ``.tmp-`` files are never listed or read, and
    :func:`clean_leftovers` removes them later)."""
    parent = final.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    tmp = _tmp_beside(final)
    try:
        yield tmp
        if is_local(fs):
            fsync_path(tmp)  # the data is on disk before the name points at it
        fs.mv(tmp, final)
        if is_local(fs):
            fsync_path(parent, directory=True)  # and the rename itself
    except BaseException:
        try:
            fs.rm(tmp)
        except Exception:
            pass
        raise


def atomic_write_text(fs: fsspec.AbstractFileSystem, path: str, text: str) -> None:
    with atomic_path(fs, path) as tmp:
        with fs.open(tmp, "w") as fh:
            fh.write(text)


def check_exclusive(fs: fsspec.AbstractFileSystem) -> None:
    """Raise ExclusiveWriteUnsupported unless :func:`write_exclusive` is atomic on ``fs`` (checked
    before long work whose commit needs it)."""
    if is_local(fs):
        return
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    if not protocols & EXCLUSIVE_PROTOCOLS:
        raise ExclusiveWriteUnsupported(
            f"{'/'.join(sorted(protocols))}:// offers no conditional write through fsspec, so two writers could "
            f"both succeed; use a local root or one of {', '.join(sorted(EXCLUSIVE_PROTOCOLS - {'memory'}))}")


def write_exclusive(fs: fsspec.AbstractFileSystem, path: str, text: str) -> bool:
    """Create ``path`` holding ``text`` unless it exists, atomically: True when this call created
    it, False when it existed (another writer came first). Readers see the whole file or none."""
    parent = path.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    if is_local(fs):
        tmp = _tmp_beside(path)
        try:
            with open(tmp, "w") as fh:
                fh.write(text)
            fsync_path(tmp)
            os.link(tmp, path)  # fails when the name exists: the one atomic create-if-absent with content
        except FileExistsError:
            return False
        finally:
            Path(tmp).unlink(missing_ok=True)
        fsync_path(parent, directory=True)
        return True
    check_exclusive(fs)
    try:
        fs.pipe_file(path, text.encode(), mode="create")
    except FileExistsError:
        return False
    return True


def clean_leftovers(fs: fsspec.AbstractFileSystem, directory: str, *, recursive: bool = False,
                    grace_s: float = LEFTOVER_GRACE_S) -> list[str]:
    """Remove the temporary files of killed writers in ``directory``: names with ``.tmp-`` last
    modified more than ``grace_s`` ago (a live writer's temporary file is younger), a staging
    directory with all it holds. Files whose age the store cannot tell are kept. Returns what
    was removed."""
    try:
        paths = fs.find(directory) if recursive else fs.ls(directory, detail=False)
    except (FileNotFoundError, NotADirectoryError):
        return []
    now, removed = time.time(), []
    for p in paths:
        if TMP not in p.rsplit("/", 1)[-1]:
            continue
        try:
            if now - fs.modified(p).timestamp() <= grace_s:
                continue
            fs.rm(p, recursive=True)
        except (NotImplementedError, FileNotFoundError):  # undatable, or its writer just renamed it
            continue
        removed.append(p)
    return removed
