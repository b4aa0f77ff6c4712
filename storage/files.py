"""Versioned directories of arbitrary files (trained models) on any fsspec filesystem.

The file-set twin of :mod:`storage.datasets`: a version lives at ``<root>/<name>/<version>/``
beside the Parquet datasets, with the same rules. ``_manifest.json`` (files with sizes and
sha256, parameters, inputs, code version, git commit, stats) marks a version complete: a
directory without one is never read. ``<root>/<name>/_latest.json`` names the version
written last. The version is the same content address as a dataset's
(:func:`storage.datasets.dataset_version`).

Unlike a dataset's parts, two uploads of one version need not hold the same bytes (two runs
trained it, on different devices), so an upload is staged apart and committed whole in one
atomic step: on a local root a directory rename, on an object store the manifest's
create-if-absent write, the manifest naming the staged directory (``_runs/<random>/``).
The first upload to commit wins; the others return its manifest.

Re-uploading a version that is already complete is a no-op: the stored files and the
manifest are kept as they are and the existing manifest is returned (the version is a
content address, and rewriting files under a finished manifest would change them under
readers' feet).
"""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from fsspec.implementations.local import LocalFileSystem

from storage.atomic import TMP, check_exclusive, fsync_path, is_local, write_exclusive
from storage.datasets import MANIFEST, ManifestError, Versioned, dataset_version, new_manifest, publish_latest
from storage.verified import Damaged, sha256_of, verified_bytes, verified_copy, verified_in_place
from pearl_redact import redact

__all__ = ["FileSet", "plan_fileset", "default_cache"]

RUNS = "_runs"  # an object store's staged uploads, inside the version directory
log = logging.getLogger(__name__)


def default_cache() -> Path:
    """Where remote file sets are copied: ``$PEARL_CACHE/storage`` (the cache root the library uses too)."""
    return Path(os.environ.get("PEARL_CACHE", "~/.cache/pearl_model")).expanduser() / "storage"


def _relative_file(name: object, fileset: "FileSet") -> str:
    """A manifest's file name, refused when it would land outside the version directory
    (the check is Versioned.file_path's, shared with datasets)."""
    fileset.file_path(name)
    return name


def _remove(fs, path: str) -> None:
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


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
        """Copy every file under ``local_dir`` (recursively, keeping relative paths) into a staging
        area of this upload's own, then commit it whole in one atomic step, and publish ``_latest.json``.

        Two uploads of one version at once (two runs that trained it) never mix their files: the
        first to commit wins, and the other discards its staged copy and returns the winner's
        manifest, as does an upload of a version that is already complete."""
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
        # the writer's record of each file, made as it is written (the upload commits whole, so no
        # attempt of it is ever read: the manifest holds the records)
        entries = [{"file": rel, "bytes": size, "sha256": sha}
                   for rel, (size, sha) in ((rel, sha256_of(LocalFileSystem(), str(src))) for rel, src in files)]
        body = {"kind": "files", "files": entries, "bytes": sum(e["bytes"] for e in entries)}
        commit = self._commit_renamed if is_local(self.fs) else self._commit_named
        manifest = new_manifest(self.name, self.version, body, code_version=code_version, params=params,
                                inputs=inputs, stats=stats, extra=extra)
        manifest = commit(files, manifest)
        if manifest is None:
            log.info("%s %s version %s was committed by another upload first: keeping that one",
                     self.kind, self.name, self.version)
            return self.reuse()
        publish_latest(self.fs, self.path, self.version, manifest["created_at"])
        return manifest

    def _stage(self, staging: str, files: list[tuple[str, Path]]) -> None:
        fs = self.fs
        for rel, src in files:
            dest = f"{staging}/{rel}"
            fs.makedirs(dest.rsplit("/", 1)[0], exist_ok=True)
            fs.put_file(str(src), dest)
            if fs.size(dest) != src.stat().st_size:
                raise OSError(f"{redact(dest)}: stored {fs.size(dest)} bytes, expected {src.stat().st_size}")

    def _commit_renamed(self, files: list[tuple[str, Path]], manifest: dict) -> dict | None:
        """A local root: staged beside the versions as ``<name>/.tmp-<random>/`` (manifest included),
        fsync'ed, then renamed to ``<name>/<version>``. A directory rename is atomic and fails onto a
        non-empty directory, so exactly one upload's directory becomes the version. None: another won."""
        parent = self.path.rsplit("/", 1)[0]
        staging = f"{parent}/{TMP}{uuid.uuid4().hex}"
        try:
            self._stage(staging, files)
            Path(staging, MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
            for p in Path(staging).rglob("*"):
                fsync_path(str(p), directory=p.is_dir())
            for _ in range(3):
                try:
                    os.rename(staging, self.path)
                    fsync_path(parent, directory=True)
                    return manifest
                except OSError as e:
                    if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                if self.is_complete():
                    return None
                self._set_aside_leftovers(parent)
            raise OSError(f"{self.url}: could not commit the upload (the directory kept changing)")
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _set_aside_leftovers(self, parent: str) -> None:
        """Remove files an interrupted upload of older code wrote straight into the version directory
        (moved aside first: a version committed meanwhile is put back, never deleted)."""
        aside = f"{parent}/{TMP}{uuid.uuid4().hex}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        if Path(aside, MANIFEST).exists():  # committed between the check and the move
            try:
                os.rename(aside, self.path)
                return
            except OSError:  # another commit took the name: that one stands
                pass
        shutil.rmtree(aside, ignore_errors=True)

    def _commit_named(self, files: list[tuple[str, Path]], manifest: dict) -> dict | None:
        """An object store, where nothing renames a directory in one step: staged under
        ``<version>/_runs/<random>/``; the commit is the manifest, created only if absent (the store's
        conditional write), naming that directory. None: another upload's manifest came first."""
        check_exclusive(self.fs, f"{self.path}/{MANIFEST}")  # the store probed before copying gigabytes
        manifest = {**manifest, "dir": f"{RUNS}/{uuid.uuid4().hex}"}
        staging = f"{self.path}/{manifest['dir']}"
        fs = self.fs
        try:
            self._stage(staging, files)
            won = write_exclusive(fs, f"{self.path}/{MANIFEST}", json.dumps(manifest, indent=2, default=str))
        except BaseException:
            _remove(fs, staging)
            if self.is_complete():  # the winner cleared this staging under it: lost, not failed
                return None
            raise
        if not won:
            _remove(fs, staging)
            return None
        # What is not the committed version is garbage now: an interrupted upload's files (older
        # code wrote them in place; now a killed run's staging). A live loser's staging too: it
        # cannot commit any more, and ends as a loss.
        for p in fs.ls(self.path, detail=False):
            if p.rstrip("/").rsplit("/", 1)[-1] not in (MANIFEST, RUNS):
                _remove(fs, p)
        for p in fs.ls(f"{self.path}/{RUNS}", detail=False):
            if p.rstrip("/").rsplit("/", 1)[-1] != staging.rsplit("/", 1)[-1]:
                _remove(fs, p)
        return manifest

    def entries(self, manifest: dict | None = None) -> list[tuple[str, dict]]:
        """(name, entry) of each file the manifest lists: the file set's door from a manifest's names
        to paths (tests/test_import_rules.py finds a second one). Every name checked by file_path and
        every size a count (ManifestError, UnsafeManifest), before any file is read."""
        listed = (manifest or self.manifest()).get("files")
        if not isinstance(listed, list) or not all(isinstance(e, dict) for e in listed):
            raise ManifestError(f"{self.url}/{MANIFEST}: 'files' is not a list of objects")
        for e in listed:
            self.file_path(e.get("file"))
            if type(e.get("bytes")) is not int or e["bytes"] < 0:
                raise ManifestError(f"{self.url}/{MANIFEST}: file {e['file']} has bytes {e.get('bytes')!r}, not a size")
        return [(e["file"], e) for e in listed]

    def stored_path(self, rel: str, manifest: dict | None = None) -> str:
        """Where file ``rel`` of the committed version is stored (an object store's version keeps its
        files in the directory its manifest names)."""
        _relative_file(rel, self)
        return f"{self._base(manifest or self.manifest())}/{rel}"

    def _base(self, manifest: dict) -> str:
        return self.file_path(manifest["dir"]) if manifest.get("dir") else self.path

    def read_bytes(self, rel: str) -> bytes:
        """File ``rel`` of the committed version, read through the verified reader (its size and
        sha256 as the manifest lists them; Damaged, UnsafeManifest, in one line)."""
        manifest = self.manifest()
        entry = dict(self.entries(manifest)).get(rel)
        if entry is None:
            raise ManifestError(f"{self.url}/{MANIFEST}: lists no file {rel!r}")
        return verified_bytes(self.fs, self._base(manifest), entry, self.url)

    # --- local access ----------------------------------------------------------------
    def local_copy(self, cache_dir: str | os.PathLike | None = None) -> Path:
        """A local directory holding the files, for a loader that takes a directory: the version
        directory itself on a local root, otherwise a copy downloaded once into ``cache_dir`` (default
        ``$PEARL_CACHE/storage/<name>/<version>``, ``~/.cache/pearl_model`` by default). Raises
        DatasetIncomplete for a version without manifest.

        Every file is checked against the manifest's size and sha256 by the verified reader
        (storage.verified: in place on a local root, as it is copied otherwise): a file changed after
        commit is an OSError naming it (a changed download is downloaded again). A directory verified as
        it is now (each file's size and mtime) leaves a marker under
        ``$PEARL_CACHE/storage/_verified/``, so a second call only stats the files."""
        manifest = self.manifest()
        entries = self.entries(manifest)
        base, local_fs = self._base(manifest), LocalFileSystem()

        def changed(rel: str, e: Damaged) -> OSError:
            return OSError(f"{self.url}: {rel} does not match its manifest (size or sha256): changed after commit ({e})")

        def verified(target: Path) -> Path:
            key = hashlib.sha256(f"{target.resolve()}\0{self.version}\0{manifest['created_at']}".encode())
            for rel, _ in entries:
                st = (target / rel).stat()
                key.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
            marker = default_cache() / "_verified" / key.hexdigest()
            if not marker.exists():
                for rel, entry in entries:
                    try:
                        verified_in_place(local_fs, str(target), entry, self.url)
                    except Damaged as e:
                        raise changed(rel, e) from None
                try:
                    marker.parent.mkdir(parents=True, exist_ok=True)
                    marker.touch()
                except OSError:  # a read-only cache: checked again next time
                    pass
            return target

        if isinstance(self.fs, LocalFileSystem):
            missing = [rel for rel, _ in entries if not Path(base, rel).is_file()]
            if missing:
                raise OSError(f"{self.url}: {missing[0]} is listed in the manifest but missing")
            return verified(Path(base))
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
        for rel, entry in entries:
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f"{TMP}{uuid.uuid4().hex}-{dest.name}")
            try:
                try:
                    verified_copy(self.fs, base, entry, self.url, str(tmp))
                except Damaged as e:
                    raise changed(rel, e) from None
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)
        listed = {rel for rel, _ in entries}
        for path in [p for p in target.rglob("*") if p.is_file()]:
            rel = path.relative_to(target).as_posix()
            if rel not in listed and rel != MANIFEST and not path.name.startswith(TMP):
                path.unlink(missing_ok=True)  # an earlier copy's file, not this upload's: a loader would read it
        tmp_marker = marker.with_name(f"{TMP}{uuid.uuid4().hex}-{MANIFEST}")
        tmp_marker.write_text(json.dumps(manifest, indent=2, default=str))
        os.replace(tmp_marker, marker)  # written last: a cache without it is downloaded again
        return verified(target)


def plan_fileset(root: str, name: str, code_version: str, params: dict, inputs: dict[str, str]) -> FileSet:
    """The FileSet a stage with this code, these parameters and inputs writes."""
    return FileSet(root, name, dataset_version(name, code_version, params, inputs))
