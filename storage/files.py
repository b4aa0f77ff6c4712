"""Versioned directories of arbitrary files (trained models) on any fsspec filesystem.

The file-set twin of :mod:`storage.datasets`: a version lives at ``<root>/<name>/<version>/``
beside the Parquet datasets, with the same rules. Every file is copied under a temporary
name and then moved, so a file that exists is whole. ``_manifest.json`` (files with sizes
and sha256, parameters, inputs, code version, git commit, stats) is written last: a
directory without one is incomplete and is never read. ``<root>/<name>/_latest.json``
names the version written last. The version is the same content address as a dataset's
(:func:`storage.datasets.dataset_version`).

Re-uploading a version that is already complete is a no-op: the stored files and the
manifest are kept as they are and the existing manifest is returned (the version is a
content address, and rewriting files under a finished manifest would change them under
readers' feet).
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

from storage.atomic import TMP as _TMP
from storage.datasets import MANIFEST, Versioned, atomic_path, dataset_version, publish_manifest

__all__ = ["FileSet", "plan_fileset", "default_cache"]


def default_cache() -> Path:
    """Where remote file sets are copied: ``$PEARL_CACHE/storage`` (the cache root the library uses too)."""
    return Path(os.environ.get("PEARL_CACHE", "~/.cache/pearl_model")).expanduser() / "storage"


def _relative_file(name: object, fileset: "FileSet") -> str:
    """A manifest's file name, refused when it would land outside the version directory
    (the check is Versioned.file_path's, shared with datasets)."""
    fileset.file_path(name)
    return name


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _local_files(local_dir: Path) -> list[tuple[str, Path]]:
    """(relative posix path, absolute path) of every regular file under local_dir, sorted."""
    out = []
    for p in sorted(local_dir.rglob("*")):
        if p.is_file():
            out.append((p.relative_to(local_dir).as_posix(), p))
    return out


@dataclass(frozen=True)
class FileSet(Versioned):
    """A handle on one version of one set of files; cheap and picklable (sent to Dask workers)."""

    root: str
    name: str
    version: str
    kind = "file set"

    # --- writing ---------------------------------------------------------------------
    def upload(
        self,
        local_dir: str | os.PathLike,
        *,
        code_version: str,
        params: dict,
        inputs: dict[str, str],
        stats: dict | None = None,
        extra: dict | None = None,
    ) -> dict:
        """Copy every file under ``local_dir`` (recursively, keeping relative paths), then
        write the manifest and ``_latest.json``. A complete version is left untouched, published
        as ``_latest.json`` and its manifest returned. Files of an earlier, interrupted upload that the new one does
        not contain are removed before the manifest is written."""
        if self.is_complete():
            return self.reuse()
        local_dir = Path(local_dir)
        if not local_dir.is_dir():
            raise ValueError(f"{local_dir} is not a directory")
        files = _local_files(local_dir)
        if not files:
            raise ValueError(f"{local_dir} holds no files to upload")
        if any(rel == MANIFEST for rel, _ in files):
            raise ValueError(f"{local_dir} must not contain a top-level {MANIFEST}: the name is reserved")
        fs = self.fs
        fs.makedirs(self.path, exist_ok=True)
        entries = []
        for rel, src in files:
            final = f"{self.path}/{rel}"
            with atomic_path(fs, final) as tmp:
                fs.put_file(str(src), tmp)
            size = src.stat().st_size
            if fs.size(final) != size:
                raise OSError(f"{final}: stored {fs.size(final)} bytes, expected {size}")
            entries.append({"file": rel, "bytes": size, "sha256": _sha256(src)})
        self._prune({e["file"] for e in entries})
        body = {"kind": "files", "files": entries, "bytes": sum(e["bytes"] for e in entries)}
        return publish_manifest(fs, self.path, self.name, self.version, body, code_version=code_version,
                                params=params, inputs=inputs, stats=stats, extra=extra)

    def _prune(self, keep: set[str]) -> None:
        """Remove leftovers of an earlier attempt (not temp files: a concurrent upload may own them)."""
        fs, base = self.fs, self.path.strip("/") + "/"
        for p in fs.find(self.path):
            rel = p.lstrip("/")
            if not rel.startswith(base):
                continue
            rel = rel[len(base):]
            if rel not in keep and not rel.rsplit("/", 1)[-1].startswith(_TMP):
                fs.rm(p)

    # --- local access ----------------------------------------------------------------
    def local_copy(self, cache_dir: str | os.PathLike | None = None) -> Path:
        """A local directory holding the files: the version directory itself on a local root,
        otherwise a copy downloaded once into ``cache_dir`` (default
        ``$PEARL_CACHE/storage/<name>/<version>``, ``~/.cache/pearl_model`` by default). Raises DatasetIncomplete for a
        version without manifest.

        Every file is checked against the manifest's size and sha256: a file changed after commit
        is an OSError naming it (a changed download is downloaded again). A directory verified as
        it is now (each file's size and mtime) leaves a marker under
        ``$PEARL_CACHE/storage/_verified/``, so a second call only stats the files."""
        manifest = self.manifest()
        entries = [(_relative_file(e["file"], self), e) for e in manifest["files"]]

        def check(rel: str, path: Path, entry: dict) -> None:
            if path.stat().st_size != entry["bytes"] or ("sha256" in entry and _sha256(path) != entry["sha256"]):
                raise OSError(f"{self.url}: {rel} does not match its manifest (size or sha256): "
                              "changed after commit")

        def verified(target: Path) -> Path:
            key = hashlib.sha256(f"{target.resolve()}\0{self.version}\0{manifest['created_at']}".encode())
            for rel, _ in entries:
                st = (target / rel).stat()
                key.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
            marker = default_cache() / "_verified" / key.hexdigest()
            if not marker.exists():
                for rel, entry in entries:
                    check(rel, target / rel, entry)
                try:
                    marker.parent.mkdir(parents=True, exist_ok=True)
                    marker.touch()
                except OSError:  # a read-only cache: checked again next time
                    pass
            return target

        if isinstance(self.fs, LocalFileSystem):
            missing = [rel for rel, _ in entries if not (Path(self.path) / rel).is_file()]
            if missing:
                raise OSError(f"{self.url}: {missing[0]} is listed in the manifest but missing")
            return verified(Path(self.path))
        target = Path(cache_dir) if cache_dir else default_cache() / self.name / self.version
        marker = target / MANIFEST
        if marker.exists():
            try:
                cached = json.loads(marker.read_text())
            except (OSError, ValueError):
                cached = {}
            if cached.get("version") == self.version and cached.get("created_at") == manifest["created_at"] \
                    and all((target / rel).is_file() for rel, _ in entries):
                try:
                    return verified(target)
                except OSError:  # the copy changed since it was downloaded: download it again
                    pass
            marker.unlink()  # or a different upload of this version
        fs = self.fs
        for rel, entry in entries:
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f"{_TMP}{uuid.uuid4().hex}-{dest.name}")
            try:
                fs.get_file(f"{self.path}/{entry['file']}", str(tmp))
                check(rel, tmp, entry)
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)
        tmp_marker = marker.with_name(f"{_TMP}{uuid.uuid4().hex}-{MANIFEST}")
        tmp_marker.write_text(json.dumps(manifest, indent=2, default=str))
        os.replace(tmp_marker, marker)  # written last: a cache without it is downloaded again
        return verified(target)


def plan_fileset(root: str, name: str, code_version: str, params: dict, inputs: dict[str, str]) -> FileSet:
    """The FileSet a stage with this code, these parameters and inputs writes."""
    return FileSet(root, name, dataset_version(name, code_version, params, inputs))
