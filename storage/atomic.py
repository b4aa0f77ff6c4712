"""Writes that a crash, a power cut or a concurrent writer cannot leave half done.

Every file is written under a temporary name (``.tmp-<pid>-<host>-<random><suffix>``: the
writer's process id and a hash of its host name) beside the final name, or in a staging
directory on the same store, and renamed into place. On a local root the temporary file is
fsync'ed before the rename and the directory after it, so a power cut leaves the old file or the
new one, never an empty one. Temporary files of a killed run are removed by :func:`clean_leftovers`
once they are older than a grace period (a live writer's are fresh: its file is renamed as soon as
it is closed), or, where asked, as soon as their writer is known to be gone (a process of this host
that no longer runs).

:func:`write_exclusive` creates a file only if it does not exist, as one atomic step (the
registry's compare-and-swap): a hard link on a local root, otherwise the store's conditional
write as fsspec exposes it (``pipe_file(..., mode="create")``): S3 (s3fs, ``If-None-Match``),
Google Cloud Storage (gcsfs, ``ifGenerationMatch=0``) and Azure Blob (adlfs, ``overwrite=False``),
and the in-process memory filesystem. Any other store is refused (ExclusiveWriteUnsupported):
fsspec's generic ``mode="create"`` checks and then writes, which two writers can both pass. The
protocol's name is not trusted alone: an S3-compatible server may ignore ``If-None-Match``, so the
first exclusive write to a bucket in a process probes it (a scratch key created twice: the second
must fail) and refuses a store that lets it through.

On S3 a file bigger than one block (5 MiB) is uploaded in parts: a writer killed midway leaves no
object, but an incomplete multipart upload the store keeps (and bills) unseen. :func:`clean_leftovers`
aborts those of a temporary name by the same rules as a temporary file (the upload's start is its age).
"""
from __future__ import annotations

import hashlib
import os
import re
import socket
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


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


# what _tmp_beside names: the writer's pid and host, then a random part and the final name's suffix
_OWN_TMP = re.compile(rf"{re.escape(TMP)}(\d+)-([0-9a-f]{{8}})-[0-9a-f]{{32}}(\.[A-Za-z0-9]+)?")


def _tmp_beside(final: str, staging: str | None = None) -> str:
    # Not the final name with a prefix: nothing that lists parts by name may ever match it.
    parent, base = final.rsplit("/", 1)
    return f"{staging or parent}/{TMP}{os.getpid()}-{_host()}-{uuid.uuid4().hex}{Path(base).suffix}"


@contextmanager
def atomic_path(fs: fsspec.AbstractFileSystem, final: str, staging: str | None = None) -> Iterator[str]:
    """A temporary name beside ``final`` (or in ``staging``, a directory of the same store) to
    write to; renamed to ``final`` when the block ends, so a file that exists is whole. A failed
    write leaves no temporary file behind (a killed process still can: ``.tmp-`` files are never
    listed or read, and :func:`clean_leftovers` removes them later, where it looks: a dataset's
    parts are staged in the dataset's directory, never inside a version that gets committed)."""
    parent = final.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    if staging is not None:
        fs.makedirs(staging, exist_ok=True)
    tmp = _tmp_beside(final, staging)
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


def atomic_write_text(fs: fsspec.AbstractFileSystem, path: str, text: str, staging: str | None = None) -> None:
    with atomic_path(fs, path, staging) as tmp:
        with fs.open(tmp, "w") as fh:
            fh.write(text)


def check_exclusive(fs: fsspec.AbstractFileSystem, path: str | None = None) -> None:
    """Raise ExclusiveWriteUnsupported unless :func:`write_exclusive` is atomic on ``fs`` (checked
    before long work whose commit needs it); ``path``: the store there probed too (:func:`_probe`)."""
    if is_local(fs):
        return
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    if not protocols & EXCLUSIVE_PROTOCOLS:
        raise ExclusiveWriteUnsupported(
            f"{'/'.join(sorted(protocols))}:// offers no conditional write through fsspec, so two writers could "
            f"both succeed; use a local root or one of {', '.join(sorted(EXCLUSIVE_PROTOCOLS - {'memory'}))}")
    if path is not None:
        _probe(fs, path)


_PROBED: dict[tuple[int, str], fsspec.AbstractFileSystem] = {}  # (filesystem, bucket) probed: kept, so ids stay unique


def _probe(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Once per filesystem instance and bucket in this process: create a scratch key beside ``path``
    twice, conditionally; ExclusiveWriteUnsupported when the second create succeeds too (a store
    that ignores the condition). The scratch key is a temporary name: a killed probe's is swept."""
    bucket = path.lstrip("/").split("/", 1)[0]
    if (id(fs), bucket) in _PROBED:
        return
    scratch = _tmp_beside(f"{path.rsplit('/', 1)[0]}/probe")
    try:
        fs.pipe_file(scratch, b"1", mode="create")
        try:
            fs.pipe_file(scratch, b"2", mode="create")
        except FileExistsError:
            pass
        else:
            protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
            raise ExclusiveWriteUnsupported(
                f"the store of {protocol}://{bucket} ignores conditional writes (a second create of one key "
                "succeeded), so two writers could both succeed: use a store that honours If-None-Match")
    finally:
        try:
            fs.rm(scratch)
        except FileNotFoundError:
            pass
    _PROBED[(id(fs), bucket)] = fs


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
    check_exclusive(fs, path)
    try:
        fs.pipe_file(path, text.encode(), mode="create")
    except FileExistsError:
        return False
    return True


def clean_leftovers(fs: fsspec.AbstractFileSystem, directory: str, *, recursive: bool = False,
                    grace_s: float = LEFTOVER_GRACE_S, dead_writers: bool = False) -> list[str]:
    """Remove the temporary files of killed writers in ``directory``: names with ``.tmp-`` last
    modified more than ``grace_s`` ago (a live writer's temporary file is younger), a staging
    directory with all it holds. Files whose age the store cannot tell are kept. Returns what
    was removed.

    ``dead_writers`` (a directory that is not the pipeline's, such as a user's output directory):
    only names :func:`atomic_path` gives are touched, and one is removed at once when its writer
    is known to be gone: a process of this host that no longer runs (or a later one that reuses
    its id). A writer on another host is only known gone by the age rule."""
    now, removed = time.time(), _abort_uploads(fs, directory, recursive, grace_s, dead_writers)
    try:
        paths = fs.find(directory) if recursive else fs.ls(directory, detail=False)
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for p in paths:
        name = p.rsplit("/", 1)[-1]
        if TMP not in name or (dead_writers and not _OWN_TMP.fullmatch(name)):
            continue
        try:
            modified = fs.modified(p).timestamp()
            if now - modified <= grace_s and not (dead_writers and _writer_gone(name, modified)):
                continue
            fs.rm(p, recursive=True)
        except (NotImplementedError, FileNotFoundError):  # undatable, or its writer just renamed it
            continue
        removed.append(p)
    return removed


def _abort_uploads(fs: fsspec.AbstractFileSystem, directory: str, recursive: bool, grace_s: float,
                   dead_writers: bool) -> list[str]:
    """On S3 (s3fs), abort the incomplete multipart uploads of temporary names in ``directory`` by
    :func:`clean_leftovers`' rules, the upload's start as its age; the keys aborted."""
    if not hasattr(fs, "call_s3"):
        return []
    bucket, _, prefix = directory.strip("/").partition("/")
    prefix = f"{prefix}/" if prefix else ""
    now, aborted, marker = time.time(), [], {}
    while True:
        page = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix, **marker)
        for upload in page.get("Uploads", []):
            rest = upload["Key"][len(prefix):]
            name = rest.rsplit("/", 1)[-1]
            if (not recursive and "/" in rest) or TMP not in name or (dead_writers and not _OWN_TMP.fullmatch(name)):
                continue
            started = upload["Initiated"].timestamp()
            if now - started <= grace_s and not (dead_writers and _writer_gone(name, started)):
                continue
            fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
            aborted.append(f"{bucket}/{upload['Key']}")
        if not page.get("IsTruncated"):
            return aborted
        marker = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}


def _writer_gone(name: str, modified: float) -> bool:
    """Whether the process that wrote the temporary file ``name`` (last modified at ``modified``)
    is known to have ended: one of this host whose pid runs no longer, or runs a process started
    after the file's last write (the pid reused). Unknown (another host, no access): False."""
    import psutil

    m = _OWN_TMP.fullmatch(name)
    if m is None or m[2] != _host():
        return False
    try:
        process = psutil.Process(int(m[1]))
        return process.status() == psutil.STATUS_ZOMBIE or process.create_time() > modified + 1.0
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False
