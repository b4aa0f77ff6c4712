"""The one way back to a file the project wrote: the writer's record, then containment, size and
digest checked before a parser sees a byte.

A writer records a file's size and SHA-256 when it writes it (:func:`record_written`, inside the
``atomic_path`` block, so the record exists before the file has its name: an uncommitted attempt
and a resumed run are covered, and a file without a record is never used). A commit copies the
records into its manifest; a reader checks the file against the manifest (committed) or the record
(uncommitted), through :func:`verified_bytes` (the checked bytes, for a parser) or
:func:`verified_once` (the checked file, open, for a parser that reads only some row groups of it:
hashed once per process, the verdict kept while the file's size and modification stamp stay the
same; on an object store that first read is one fetch, hashed and parsed from memory). Only these
open a stored file for reading, with :func:`verified_copy` (a checked local copy, for a loader that
takes a directory: a stored model on a remote root); no path to one leaves ``storage/`` except a
local root's model directory, checked by :func:`verified_in_place` first.

Containment: a name is a relative path inside its version (no "..", no absolute path, no scheme)
and, on a local root, no component under the version directory is a symbolic link, wherever it
points: the project never writes one. Records and manifests are the root of this trust and are
checked for form only: whoever can write the storage root can replace them (docs/operating.md,
threat model)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections import OrderedDict

import fsspec
import pyarrow as pa

from .atomic import atomic_write_text, is_local

RECORDS = "_written"  # a version's writers' records: <version>/_written/<file>.json
_SHA256 = re.compile(r"[0-9a-f]{64}")
_VERDICTS: OrderedDict[tuple, bool] = OrderedDict()  # files verified in this process (verified_once)
_VERDICTS_KEPT = 4096


class ManifestError(ValueError):
    """A manifest or ``_latest.json`` pointer that is not what this code writes (not a JSON object,
    a field of the wrong type, part counts that do not add up): the message names the file."""


class UnsafeManifest(ManifestError):
    """A manifest names a file outside its version directory (an absolute path, "..", a scheme), or
    a symbolic link is in the way."""


class Damaged(ManifestError):
    """A stored file is not what its writer recorded: missing, another size or digest, or never
    recorded. The message names the file and says what differs, in one line."""


def contained(fs: fsspec.AbstractFileSystem, base: str, name: object, where: str) -> str:
    """The path of file ``name`` of the version at ``base``, or UnsafeManifest (``where``: the version
    in messages): a relative path of plain segments, and on a local root no symbolic link from the
    version directory down (not followed, wherever it points)."""
    parts = name.split("/") if isinstance(name, str) else []
    if not parts or any(p in ("", ".", "..") or "\\" in p or ":" in p or not p.isprintable() for p in parts):
        raise UnsafeManifest(f"{where}: manifest file name {name!r} is not a relative path inside the version")
    path = f"{base}/{name}"
    if is_local(fs):
        here = base
        for p in parts:
            here = f"{here}/{p}"
            try:
                if stat.S_ISLNK(os.lstat(here).st_mode):
                    raise UnsafeManifest(f"{where}: {name} is a symbolic link (never followed: the project writes none)")
            except FileNotFoundError:
                break  # missing: the reader's own error says so
    return path


def sha256_of(fs: fsspec.AbstractFileSystem, path: str) -> tuple[int, str]:
    """(size, SHA-256) of a file, read in blocks."""
    digest, size = hashlib.sha256(), 0
    with fs.open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def record_written(fs: fsspec.AbstractFileSystem, base: str, name: str, tmp: str,
                   digest: tuple[int, str] | None = None, **fields) -> dict:
    """The writer's record of file ``name`` of the version at ``base``, whose bytes are at ``tmp``
    (not yet renamed): its size and SHA-256 (and ``fields``), written atomically before the rename.
    ``digest``: (size, SHA-256) of the bytes the writer sent, where it held them whole (an object
    store's file is then not fetched back to be hashed)."""
    size, sha = digest or sha256_of(fs, tmp)
    record = {"file": name, "bytes": size, "sha256": sha, **fields}
    atomic_write_text(fs, f"{base}/{RECORDS}/{name}.json", json.dumps(record, sort_keys=True), base.rsplit("/", 1)[0])
    return record


def checked_entry(entry: object, where: str) -> dict:
    """A record or manifest entry of the form a writer makes ({file, bytes, sha256, ...}), else Damaged."""
    if not (isinstance(entry, dict) and isinstance(entry.get("file"), str) and type(entry.get("bytes")) is int
            and entry["bytes"] >= 0 and isinstance(entry.get("sha256"), str) and _SHA256.fullmatch(entry["sha256"])):
        raise Damaged(f"{where}: no writer's record of the form {{file, bytes, sha256}}: {str(entry)[:120]}")
    return entry


def read_record(fs: fsspec.AbstractFileSystem, base: str, name: str, where: str) -> dict:
    """The writer's record of file ``name`` of the version at ``base`` (Damaged: none, or not one)."""
    path = contained(fs, base, f"{RECORDS}/{name}.json", where)
    try:
        with fs.open(path, "rb") as fh:
            record = json.loads(fh.read(1 << 16))
    except FileNotFoundError:
        raise Damaged(f"{where}/{name}: no writer's record (a file no writer recorded is never used)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise Damaged(f"{where}/{RECORDS}/{name}.json is not a record ({e})") from None
    entry = checked_entry(record, f"{where}/{RECORDS}/{name}.json")
    if entry["file"] != name:
        raise Damaged(f"{where}/{RECORDS}/{name}.json records another file ({entry['file']!r})")
    return entry


def recorded_names(fs: fsspec.AbstractFileSystem, base: str) -> list[str]:
    """The names of the files with a writer's record in the version at ``base``."""
    try:
        found = fs.ls(f"{base}/{RECORDS}", detail=False)
    except FileNotFoundError:
        return []
    return sorted(n[:-5] for n in (p.rstrip("/").rsplit("/", 1)[-1] for p in found) if n.endswith(".json"))


def file_stamp(fs: fsspec.AbstractFileSystem, path: str) -> tuple:
    """What changes when a file is written again: its size and modification stamp (ETag on a store);
    ``(size, "")`` where the store tells none, which no cache of a verdict may trust."""
    if is_local(fs):
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns, st.st_ino
    info = fs.info(path)
    return info.get("size"), str(info.get("ETag") or info.get("mtime") or info.get("LastModified")
                                 or info.get("created") or "")


def _located(fs: fsspec.AbstractFileSystem, base: str, entry: object, where: str) -> tuple[dict, str]:
    """(the entry, checked for form; the contained path of the file it names)."""
    entry = checked_entry(entry, where)
    return entry, contained(fs, base, entry["file"], where)


def _missing(entry: dict, where: str) -> Damaged:
    return Damaged(f"{where}/{entry['file']} is missing (its writer recorded it)")


def _check(entry: dict, where: str, size: int, sha: str) -> None:
    if size != entry["bytes"] or sha != entry["sha256"]:
        raise Damaged(f"{where}/{entry['file']}: {size} bytes, sha256 {sha[:16]}; its writer recorded "
                      f"{entry['bytes']} bytes, sha256 {entry['sha256'][:16]}")


def verified_bytes(fs: fsspec.AbstractFileSystem, base: str, entry: dict, where: str) -> bytes:
    """The bytes of the file ``entry`` names (a writer's record or a manifest's entry of it), read
    once and checked against it (Damaged, UnsafeManifest): what a parser is handed."""
    entry, path = _located(fs, base, entry, where)
    try:
        if entry["bytes"] == 0:  # an empty object has no byte range: its size says it all
            data = b"" if fs.size(path) == 0 else fs.cat_file(path, start=0, end=1)
        else:
            data = fs.cat_file(path, start=0, end=entry["bytes"] + 1)  # one request on an object store
    except FileNotFoundError:
        raise _missing(entry, where) from None
    except IsADirectoryError:
        raise Damaged(f"{where}/{entry['file']} is a directory, not the file its writer recorded") from None
    _check(entry, where, len(data), hashlib.sha256(data).hexdigest())
    return data


def verified_once(fs: fsspec.AbstractFileSystem, base: str, entry: dict, where: str, whole: bool = False):
    """The file ``entry`` names, checked as :func:`verified_bytes` checks it, open for reading (close
    it: a context manager), for a parser that reads only part of it (a reducer's row groups): hashed
    in full the first time this process reads it, then only while its size and modification stamp
    are those it was checked with. The only place a stored file is opened for a parser.

    On an object store the first read is one fetch, hashed and parsed from memory, and so is every
    read of a parser that reads the file ``whole`` (ranged reads of it would fetch more than the file)."""
    entry, path = _located(fs, base, entry, where)
    try:
        key = (fs.protocol, path, entry["bytes"], entry["sha256"], file_stamp(fs, path))
    except FileNotFoundError:
        raise _missing(entry, where) from None
    if key in _VERDICTS and (is_local(fs) or not whole):
        return _opened(fs, path)
    if is_local(fs):
        _check(entry, where, *sha256_of(fs, path))
        opened = _opened(fs, path)
    else:  # an object store: the bytes hashed are the bytes parsed, fetched once (not hashed, then read)
        opened = pa.BufferReader(verified_bytes(fs, base, entry, where))
    if key[-1][-1] == "":
        return opened  # a store that tells no stamp: checked every time
    _VERDICTS[key] = True
    while len(_VERDICTS) > _VERDICTS_KEPT:
        _VERDICTS.popitem(last=False)
    return opened


def _opened(fs: fsspec.AbstractFileSystem, path: str):
    """``path`` open for a parser: on a local root an Arrow file, not a Python one. Arrow's I/O threads
    read a Python file through the interpreter, and one still alive at exit aborts the process
    ("terminate called without an active exception", apache/arrow#34314) after its work is done."""
    return pa.OSFile(path, "rb") if is_local(fs) else fs.open(path, "rb")


def verified_copy(fs: fsspec.AbstractFileSystem, base: str, entry: dict, where: str, dest: str) -> None:
    """The file ``entry`` names, copied to the local path ``dest`` (a temporary name of the caller's:
    it renames it once this returns) and checked as it is copied, as :func:`verified_bytes` checks it:
    for a loader that takes a directory (a stored model's local copy), never holding it whole."""
    entry, path = _located(fs, base, entry, where)
    digest, size = hashlib.sha256(), 0
    try:
        with fs.open(path, "rb") as src, open(dest, "wb") as out:
            for block in iter(lambda: src.read(1 << 22), b""):
                digest.update(block)
                size += len(block)
                if size > entry["bytes"]:
                    break  # longer than recorded: refused below without copying the rest
                out.write(block)
    except FileNotFoundError:
        raise _missing(entry, where) from None
    _check(entry, where, size, digest.hexdigest())


def verified_in_place(fs: fsspec.AbstractFileSystem, base: str, entry: dict, where: str) -> str:
    """The local path of the file ``entry`` names, checked as :func:`verified_once` checks it (hashed
    once per process while its size and modification stamp stay the same), for a loader that takes a
    directory on a local root (a stored model, loaded in place: the model door checks its
    ``checksums.sha256`` again when it loads it)."""
    with verified_once(fs, base, entry, where):
        pass
    return contained(fs, base, entry["file"], where)


def write_recorded(fs: fsspec.AbstractFileSystem, base: str, name: str, data) -> dict:
    """``data`` (bytes, or a buffer: not copied) as file ``name`` of the directory at ``base``, written
    whole under a temporary name with its writer's record, then renamed: for the files a stage keeps
    beside its datasets (a link run's vectors and index shards)."""
    from .atomic import atomic_path

    final = contained(fs, base, name, base)
    view = memoryview(data).cast("B")
    with atomic_path(fs, final) as tmp:
        with fs.open(tmp, "wb") as fh:
            fh.write(view)
        digest = None if is_local(fs) else (view.nbytes, hashlib.sha256(view).hexdigest())
        return record_written(fs, base, name, tmp, digest)


def read_recorded(fs: fsspec.AbstractFileSystem, base: str, name: str, where: str) -> bytes:
    """The bytes of file ``name`` of the directory at ``base`` as its writer recorded them
    (:func:`write_recorded`), or Damaged / UnsafeManifest in one line."""
    return verified_bytes(fs, base, read_record(fs, base, name, where), where)


def remove_recorded(fs: fsspec.AbstractFileSystem, base: str, name: str) -> None:
    """Remove file ``name`` of the directory at ``base`` and its writer's record (the record first:
    a file without one is never read)."""
    for path in (f"{base}/{RECORDS}/{name}.json", contained(fs, base, name, base)):
        try:
            fs.rm(path)
        except FileNotFoundError:
            pass
