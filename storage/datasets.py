"""Versioned Parquet datasets on any fsspec filesystem.

A dataset version lives at ``<root>/<name>/<version>/`` as ``part-NNNNN.parquet``
files plus ``_manifest.json``. Parts are written under a temporary name and renamed,
so a part that exists is whole. The manifest is written last: a directory without
one is incomplete and is never read, only finished (its existing parts are reused).
The version is a hash of the producing stage's code version, parameters and input
versions, so an unchanged stage maps to a version that already exists.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import logging
import re
import subprocess
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import fsspec
import fsspec.implementations.local
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .atomic import atomic_path, atomic_write_text, clean_leftovers, is_local
from .buckets import bucket_column
from .stores import store
from .verified import (RECORDS, Damaged, ManifestError, UnsafeManifest, checked_entry, contained,  # noqa: F401
                       file_stamp, read_record, record_written, recorded_names, verified_bytes, verified_once)
from pearl_redact import redact

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"
DAMAGED = "_damaged"  # notes of the damaged parts of an attempt, recomputed: <version>/_damaged/<file>.json
PART_NAME = re.compile(r"part-(\d{5,})\.parquet")
LATEST = "_latest.json"
# What a version may be: one path segment that no filesystem or fsspec URL reads as more
# ("..", "/", "~", "*", "?", a scheme). dataset_version makes 16 hex digits; short names
# ("m1", "bench-100") are versions too. Also a JSON-schema pattern (flow parameters).
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_VERSION = re.compile(VERSION_PATTERN)
# the parts of committed versions this process has read, by their manifest's path and stamp (a commit
# never changes a manifest; one deleted and written again has another stamp, so it is read again)
_LISTED: OrderedDict[tuple, dict[str, "Part"]] = OrderedDict()
_LISTED_KEPT = 256


class DatasetIncomplete(FileNotFoundError):
    """The dataset version has no manifest: it was never finished."""


@dataclass(frozen=True)
class Part:
    """One part a dataset's manifest lists: its name, row count and what its writer recorded
    (bytes, sha256). Read it through its Dataset (:meth:`Dataset.read_part`): no path leaves storage."""

    file: str
    rows: int
    bytes: int
    sha256: str

    @property
    def index(self) -> int:
        return part_index(self.file)


class SchemaMismatch(ValueError):
    """A table does not match the schema declared for its dataset."""


def part_index(name: str) -> int:
    return int(PART_NAME.fullmatch(name)[1])


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def dataset_version(name: str, code_version: str, params: dict, inputs: dict[str, str]) -> str:
    """Content address of a stage output: same code, parameters and inputs, same version. URLs count
    without their credentials (redact is the identity on URLs without them: those versions are unchanged)."""
    key = _canonical({"name": name, "code": code_version, "params": redact(params), "inputs": redact(inputs)})
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def check_version(what: str, version: object) -> str:
    """``version`` when it matches VERSION_PATTERN, else ValueError naming ``what``, the value and
    the expected form: a version from outside (a parameter, a pointer file) never becomes a path."""
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise ValueError(f"{what} {version!r} is not a version: expected 1 to 64 letters, digits, '-' or '_', "
                         "starting with a letter or digit (like 3f9c2a7b1d0e4c55), never a path")
    return version


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


class Versioned:
    """Where one version of a named output lives, and its manifest: shared by Dataset and FileSet."""

    root: str
    name: str
    version: str
    kind = "dataset"  # in messages

    def __post_init__(self) -> None:  # run by the dataclasses' __init__
        check_version(f"{self.kind} {self.name} version", self.version)

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        return store(self.root)[0]

    @property
    def path(self) -> str:
        base = store(self.root)[1].rstrip("/")
        return f"{base}/{self.name}/{self.version}"

    @property
    def staging(self) -> str:
        """Where the version's files are written before they are renamed into it: the directory of
        the name, whose leftovers each publish sweeps, never the version, which a commit closes."""
        return self.path.rsplit("/", 1)[0]

    @property
    def url(self) -> str:
        """Where the version lives, for messages, links and records (credentials in the root redacted)."""
        return redact(f"{self.root.rstrip('/')}/{self.name}/{self.version}")

    def is_complete(self) -> bool:
        return self.fs.exists(f"{self.path}/{MANIFEST}")

    def manifest(self) -> dict:
        try:
            with self.fs.open(f"{self.path}/{MANIFEST}", "r") as fh:
                manifest = json.load(fh)
        except FileNotFoundError:
            raise DatasetIncomplete(
                f"{self.kind} {self.name} version {self.version} at {self.url} has no manifest: "
                "it is incomplete and will be recomputed, never read"
            ) from None
        except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
            raise ManifestError(f"{self.url}/{MANIFEST} is not valid JSON ({e}): delete the version to rebuild it") from None
        if not isinstance(manifest, dict):
            raise ManifestError(f"{self.url}/{MANIFEST} is not a JSON object: delete the version to rebuild it")
        return manifest

    def reuse(self) -> dict:
        """The manifest of this complete version, published as ``<name>/_latest.json``: a run that
        reuses a version points readers at it, as the run that wrote it did."""
        manifest = self.manifest()
        publish_latest(self.fs, self.path, self.version, manifest["created_at"])
        return manifest

    def file_path(self, name: object) -> str:
        """The path of a file a manifest lists, refused (UnsafeManifest) when the name would land
        outside the version directory or a symbolic link is in its way (storage.verified.contained)."""
        return contained(self.fs, self.path, name, self.url)


@dataclass(frozen=True)
class Dataset(Versioned):
    """A handle on one version of one dataset; cheap and picklable (sent to Dask workers)."""

    root: str
    name: str
    version: str
    schema: pa.Schema

    @staticmethod
    def part_name(index: int) -> str:
        return f"part-{index:05d}.parquet"

    # --- writing ---------------------------------------------------------------------
    def has_part(self, index: int) -> bool:
        """Whether part ``index`` of this attempt is written and is what its writer recorded (a
        resumed run's work kept). A file without a writer's record, or one that is not what its record
        says, is damage to an uncommitted attempt: noted under ``_damaged/`` (the commit counts it),
        its record dropped, and False, so the part is computed again; never served."""
        name, fs = self.part_name(index), self.fs
        recorded = fs.exists(f"{self.path}/{RECORDS}/{name}.json")
        if not fs.exists(f"{self.path}/{name}"):
            return False  # not written, or killed between its record and its rename
        try:
            verified_once(fs, self.path, read_record(fs, self.path, name, self.url), self.url).close()
            return True
        except ManifestError as e:
            log.warning("%s: computed again: %s", self.url, e)
            atomic_write_text(fs, f"{self.path}/{DAMAGED}/{name}.json", json.dumps({"file": name, "why": str(e)}),
                              self.staging)
            if recorded:
                fs.rm(f"{self.path}/{RECORDS}/{name}.json")
            return False

    def write_part(self, index: int, table: pa.Table, metadata: dict | None = None) -> int:
        """Write one part atomically, with its writer's record (size, SHA-256, rows, ``metadata``)
        written before it gets its name; returns its row count.

        ``metadata`` (small, JSON) is kept with the part: e.g. the counts a resumed run reads back
        instead of recomputing (:meth:`part_metadata`)."""
        table = conform(table, self.schema)
        key = bucket_column(self.schema)
        name = self.part_name(index)
        with atomic_path(self.fs, f"{self.path}/{name}", self.staging) as tmp:
            digest = _write_parquet(table, key, tmp, self.fs)
            record_written(self.fs, self.path, name, tmp, digest, rows=table.num_rows, metadata=metadata)
        return table.num_rows

    def write_array(self, name: str, array: np.ndarray) -> dict:
        """``array`` as a .npy file beside the parts (no pickle), written as a part is, with its
        writer's record; its manifest entry (file, bytes, sha256), for the commit's ``extra`` ``files``,
        which :meth:`read_array` checks it against."""
        final = self.file_path(name)
        with atomic_path(self.fs, final, self.staging) as tmp:
            with self.fs.open(tmp, "wb") as fh:
                np.save(fh, np.ascontiguousarray(array), allow_pickle=False)
            record = record_written(self.fs, self.path, name, tmp)
        return {k: record[k] for k in ("file", "bytes", "sha256")}

    def read_array(self, name: str) -> np.ndarray:
        """The one door to an array beside the parts (:meth:`write_array`): listed in the manifest's
        ``extra`` ``files``, read through the verified reader (its bytes and sha256 as listed), a plain
        .npy (nothing unpickled); else ManifestError, one line."""
        listed = (self.manifest().get("extra") or {}).get("files")
        entry = next((f for f in listed if isinstance(f, dict) and f.get("file") == name), None) \
            if isinstance(listed, list) else None
        if entry is None:
            raise ManifestError(f"{self.url}/{MANIFEST}: lists no file {name!r} (written by an older code version? "
                                "rebuild it)")
        data = verified_bytes(self.fs, self.path, entry, self.url)
        try:
            return np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, EOFError, OSError) as e:  # an object array would need unpickling: refused
            raise ManifestError(f"{self.url}/{name} is not a plain .npy array ({e})") from None

    def written_parts(self) -> list[int]:
        """The parts of this attempt in place as their writers recorded them (their file there, of
        the recorded size), in order: what a commit lists. Uncommitted work only: read a committed
        version through :meth:`parts`."""
        return [part_index(e["file"]) for e in self._records()]

    def _records(self) -> list[dict]:
        out, fs = [], self.fs
        for name in recorded_names(fs, self.path):
            if PART_NAME.fullmatch(name) is None:
                continue
            record = read_record(fs, self.path, name, self.url)
            try:
                if fs.size(f"{self.path}/{name}") == record["bytes"]:
                    out.append(record)
            except FileNotFoundError:  # killed between its record and its rename: not written
                pass
        return out

    def part_metadata(self, index: int) -> dict | None:
        """The ``metadata`` part ``index`` was written with (None when it had none): its writer's record."""
        metadata = read_record(self.fs, self.path, self.part_name(index), self.url).get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise Damaged(f"{self.url}/{RECORDS}/{self.part_name(index)}.json: metadata is not an object")
        return metadata

    def metadata_totals(self) -> Counter:
        """The parts' ``metadata`` counts summed over the parts written (their records)."""
        totals: Counter = Counter()
        for record in self._records():
            totals.update(record.get("metadata") or {})
        return totals

    def commit(
        self,
        *,
        code_version: str,
        params: dict,
        inputs: dict[str, str],
        stats: dict | None = None,
        extra: dict | None = None,
    ) -> dict:
        """Write the manifest (last), listing every part its writer recorded, with the record's row
        count, size and SHA-256 (never what is found on disk: a file no writer recorded is not listed).

        ``extra`` holds small metadata that belongs with the data (e.g. a label vocabulary). Parts of
        this attempt found damaged and computed again are counted in ``stats`` (``parts_recomputed``)."""
        fs = self.fs
        fs.makedirs(self.path, exist_ok=True)
        parts = [{"file": r["file"], "rows": r["rows"], "bytes": r["bytes"], "sha256": r["sha256"]}
                 for r in self._records()]
        if not all(type(p["rows"]) is int and p["rows"] >= 0 for p in parts):
            raise Damaged(f"{self.url}: a writer's record holds no row count")
        try:
            damaged = len(fs.ls(f"{self.path}/{DAMAGED}", detail=False))
        except FileNotFoundError:
            damaged = 0
        body = {"rows": sum(p["rows"] for p in parts), "parts": parts, "part_records": RECORDS,
                "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in self.schema]}
        stats = {**(stats or {}), **({"parts_recomputed": damaged} if damaged else {})}
        return publish_manifest(fs, self.path, self.name, self.version, body, code_version=code_version,
                                params=params, inputs=inputs, stats=stats, extra=extra)

    # --- reading ---------------------------------------------------------------------
    def is_complete(self) -> bool:
        """Committed, by code that records what its writers wrote. A version committed before the
        writers' records has no digests to check its parts against: it counts as not done, so the
        stage writes it again (once; a warning says so)."""
        if not super().is_complete():
            return False
        try:
            manifest = self.manifest()
        except ManifestError:
            return True  # refused, in one line, by whoever reads it
        if manifest.get("part_records") == RECORDS:
            return True
        log.warning("%s was committed before parts had writers' records: written again", self.url)
        return False

    def parts(self, verify: bool = False) -> list[Part]:
        """The parts the manifest lists, in order: the one door from a manifest's part names to the
        data (tests/test_import_rules.py finds a second one). Every name is a part's and inside the
        version, every entry holds what its writer recorded (rows, bytes, sha256), and the counts add
        up to the manifest's rows, all checked before any part is read (ManifestError, UnsafeManifest).
        ``verify``: each part read back too, and its count checked against its Parquet footer, for a
        caller that plans work by the counts."""
        manifest = self.manifest()
        listed = manifest.get("parts")
        if not isinstance(listed, list) or not all(isinstance(p, dict) for p in listed):
            raise ManifestError(f"{self.url}/{MANIFEST}: 'parts' is not a list of objects")
        if manifest.get("part_records") != RECORDS:
            raise ManifestError(f"{self.url}/{MANIFEST}: committed before parts had writers' records, so its parts "
                                "cannot be checked: run the stage again to write it anew")
        parts = []
        for p in listed:
            self.file_path(p.get("file"))
            if PART_NAME.fullmatch(p["file"]) is None:
                raise UnsafeManifest(f"{self.url}/{MANIFEST}: {p['file']!r} is not a part's name")
            entry = checked_entry(p, f"{self.url}/{MANIFEST}")
            if not (type(p.get("rows")) is int and p["rows"] >= 0):
                raise ManifestError(f"{self.url}/{MANIFEST}: part {p['file']} has rows {p.get('rows')!r}, not a count")
            parts.append(Part(entry["file"], p["rows"], entry["bytes"], entry["sha256"]))
        total = manifest.get("rows")
        if total != sum(p.rows for p in parts) or type(total) is not int:
            raise ManifestError(f"{self.url}/{MANIFEST}: its parts hold {sum(p.rows for p in parts)} rows, "
                                f"its 'rows' says {total!r}")
        for p in parts if verify else ():
            stored = self.read_metadata(p.index, p).num_rows
            if stored != p.rows:
                raise ManifestError(f"{self.url}/{MANIFEST}: part {p.file} holds {stored} rows, the manifest says {p.rows}")
        return parts

    def _checked(self, index: int, part: Part | None = None, whole: bool = False):
        """Part ``index`` open for reading (a context manager), verified (storage.verified.verified_once)
        against the manifest of a committed version (``part``: its entry, when the caller holds it), or
        its writer's record in an attempt still being written; ``whole``: the caller reads all of it."""
        name = self.part_name(index)
        if part is None and super().is_complete():
            part = self._listed().get(name)
            if part is None:
                raise ManifestError(f"{self.url}/{MANIFEST}: lists no part {name}")
        if part is not None:
            entry = {"file": part.file, "bytes": part.bytes, "sha256": part.sha256}
        else:
            entry = read_record(self.fs, self.path, name, self.url)
        return verified_once(self.fs, self.path, entry, self.url, whole)

    def _listed(self) -> dict[str, Part]:
        """The committed version's parts by name (:meth:`parts`), read once per process while its
        manifest's stamp stays the same: a reader of parts by index does not parse it for each."""
        fs, path = self.fs, f"{self.path}/{MANIFEST}"
        try:
            stamp = file_stamp(fs, path)
            key = (fs.protocol, path, stamp) if stamp[-1] != "" else None  # no stamp: read every time
        except FileNotFoundError:
            key = None
        listed = _LISTED.get(key) if key else None
        if listed is None:
            listed = {p.file: p for p in self.parts()}
            if key:
                _LISTED[key] = listed
                while len(_LISTED) > _LISTED_KEPT:
                    _LISTED.popitem(last=False)
        return listed

    def read(self, columns: list[str] | None = None, filter=None) -> pa.Table:
        """The committed version's rows (``filter``: a pyarrow expression), part by part."""
        tables = [self._read(p.index, columns, filter, p) for p in self.parts()]
        if not tables:
            return self.schema.empty_table().select(columns) if columns else self.schema.empty_table()
        return pa.concat_tables(tables)

    def read_metadata(self, index: int, part: Part | None = None) -> pq.FileMetaData:
        """Part ``index``'s Parquet footer (row groups, statistics), verified as :meth:`read_part` is."""
        with self._checked(index, part) as fh:
            return pq.read_metadata(fh)

    def read_bucket(self, bucket: int, columns: list[str] | None = None) -> pa.Table:
        """The rows of one bucket of a bucketed dataset (a reducer's input), in part order.

        Part by part, only the row groups whose statistics can hold ``bucket`` (parts written
        before bucket-sorting are read whole and filtered). One footer is held at a time: a
        dataset scan of M parts keeps all M footers of R row groups each, which grew the
        reducer's memory with the corpus (benchmarks/reduce_memory.py). Each part is verified once
        per process (a reducer reads only its bucket's row groups of it)."""
        key = bucket_column(self.schema)
        if key is None:
            raise ValueError(f"{self.name} is not bucketed (its schema names no bucket column)")
        wanted = columns if columns is None or key in columns else [*columns, key]
        pieces = []
        for part in self.parts():
            with self._checked(part.index, part) as fh:
                f = pq.ParquetFile(fh)
                col = f.schema_arrow.get_field_index(key)
                groups = []
                for g in range(f.metadata.num_row_groups):
                    stats = f.metadata.row_group(g).column(col).statistics
                    if stats is None or not stats.has_min_max or stats.min <= bucket <= stats.max:
                        groups.append(g)
                if groups:
                    t = f.read_row_groups(groups, columns=wanted)
                    pieces.append(t.filter(pc.equal(t[key], bucket)))
        table = pa.concat_tables(pieces) if pieces else self.schema.empty_table().select(wanted or self.schema.names)
        return (table.select(columns) if columns is not None else table).cast(
            pa.schema([self.schema.field(n) for n in (columns or self.schema.names)]))

    def read_part(self, index: int, columns: list[str] | None = None, filter=None) -> pa.Table:
        """Read one part, verified against the manifest (committed) or its writer's record (an
        attempt in progress): Damaged or UnsafeManifest, one line, for anything else. Read against
        the dataset's schema: a nullable column added since the part was written reads as nulls."""
        return self._read(index, columns, filter)

    def _read(self, index: int, columns: list[str] | None, filter, part: Part | None = None) -> pa.Table:
        with self._checked(index, part, whole=True) as fh:
            return pq.read_table(fh, columns=columns, filters=filter, schema=self.schema)

    def iter_batches(self, columns: list[str] | None = None, batch_size: int = 65536) -> Iterator[pa.RecordBatch]:
        for part in self.parts():
            with self._checked(part.index, part, whole=True) as fh:
                yield from pq.ParquetFile(fh).iter_batches(batch_size=batch_size, columns=columns)


def _write_parquet(table: pa.Table, key: str | None, path: str, fs) -> tuple[int, str] | None:
    """``table`` as Parquet at ``path`` (``key``: its bucket column, :func:`write_by_bucket`). On a local
    root written there (None); on an object store made in memory and sent whole: its (size, SHA-256)
    returned, so its writer's record needs no fetch of it back."""
    local = is_local(fs)
    where = path if local else pa.BufferOutputStream()
    if key is None:
        pq.write_table(table, where, filesystem=fs if local else None, compression="zstd")
    else:
        write_by_bucket(table, key, where, fs if local else None)
    if local:
        return None
    data = memoryview(where.getvalue())
    with fs.open(path, "wb") as fh:
        fh.write(data)
    return data.nbytes, hashlib.sha256(data).hexdigest()


def write_by_bucket(table: pa.Table, key: str, path: str, fs) -> None:
    """``table`` sorted by ``key`` (stable: rows of a bucket keep their order) with one row group
    per bucket; statistics on ``key`` only (the string columns' min/max would only fatten the
    footer every reducer reads)."""
    table = table.take(pc.sort_indices(table[key]))  # Arrow's sort is stable
    values = table[key].to_numpy()
    starts = [0, *(np.flatnonzero(values[1:] != values[:-1]) + 1).tolist(), len(values)]
    with pq.ParquetWriter(path, table.schema, filesystem=fs, compression="zstd", write_statistics=[key]) as w:
        if table.num_rows == 0:
            w.write_table(table)
        for start, end in zip(starts[:-1], starts[1:]):
            if end > start:
                w.write_table(table.slice(start, end - start), row_group_size=end - start)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast a table to its dataset's schema, or say exactly which columns disagree."""
    names = table.schema.names
    if set(names) != set(schema.names):
        missing = sorted(set(schema.names) - set(names))
        extra = sorted(set(names) - set(schema.names))
        raise SchemaMismatch(f"columns differ from schema: missing {missing}, unexpected {extra}")
    table = table.select(schema.names)
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
        raise SchemaMismatch(f"cannot cast table to schema: {exc}") from exc


def latest_version(root: str, name: str) -> str | None:
    fs, base = store(root)
    path = f"{base.rstrip('/')}/{name}/{LATEST}"
    try:
        pointer = json.loads(fs.cat_file(path))  # one request: the pointer may be rewritten meanwhile
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise ManifestError(f"{redact(root)}/{name}/{LATEST} is not valid JSON ({e}): fix or delete it") from None
    if not isinstance(pointer, dict) or "version" not in pointer:
        raise ManifestError(f"{redact(root)}/{name}/{LATEST} is not a JSON object with a version: fix or delete it")
    try:
        return check_version(f"the version in {redact(root)}/{name}/{LATEST}", pointer["version"])
    except ValueError as e:  # an edited pointer leads nowhere else
        raise ManifestError(str(e)) from None


def new_manifest(name: str, version: str, body: dict, *, code_version: str, params: dict,
                 inputs: dict[str, str], stats: dict | None = None, extra: dict | None = None) -> dict:
    """A version's manifest: ``body`` (what it holds) + provenance, credentials redacted."""
    return redact({
        "name": name,
        "version": version,
        **body,
        "params": params,
        "inputs": inputs,
        "code_version": code_version,
        "git_commit": git_commit(),
        "stats": stats or {},
        **({"extra": extra} if extra else {}),
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
    })


def publish_manifest(fs: fsspec.AbstractFileSystem, path: str, name: str, version: str, body: dict, **provenance) -> dict:
    """Write ``path/_manifest.json`` (:func:`new_manifest`), then point ``<name>/_latest.json`` at it:
    a dataset's parts are all in place, so the manifest comes last."""
    manifest = new_manifest(name, version, body, **provenance)
    clean_leftovers(fs, path, recursive=True)  # a killed earlier attempt's temporary files
    atomic_write_text(fs, f"{path}/{MANIFEST}", json.dumps(manifest, indent=2, default=str), path.rsplit("/", 1)[0])
    publish_latest(fs, path, version, manifest["created_at"])
    return manifest


def publish_latest(fs: fsspec.AbstractFileSystem, path: str, version: str, created_at: str) -> None:
    """Point ``<name>/_latest.json`` at the version at ``path``."""
    parent = path.rsplit("/", 1)[0]
    clean_leftovers(fs, parent)
    atomic_write_text(fs, f"{parent}/{LATEST}", json.dumps({"version": version, "created_at": created_at}))


def table_from_rows(rows: Iterable[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=schema)


def as_location(location: str) -> str:
    """A location as a user copies it into a shell or a browser's address bar: an fsspec URL as it is,
    a local path absolute (a relative one would be read from wherever it is pasted), as resolve_root
    makes a root."""
    return location if "://" in location else resolve_root(location)


def file_fingerprint(url: str, error: type[Exception] | None = None, expected: str = "a file") -> dict:
    """Identity of an input file for versioning (a stage's inputs): its URL, size and modification
    time (or ETag). FileNotFoundError for a missing file, IsADirectoryError for a directory, OSError
    for any other failure (a network filesystem's own, its text kept). With ``error``, each of these
    is that stage's error instead. The message names the input (``expected``: what it should have
    been), credentials redacted, and chains nothing: the store's own error may repeat them."""
    try:
        fs, path = fsspec.core.url_to_fs(url)
        info = fs.info(path)
    except FileNotFoundError:
        kind, message = FileNotFoundError, f"input not found: {url}"
    except Exception as e:  # network filesystems raise their own types
        kind, message = OSError, f"cannot stat input {url}: {e}"
    else:
        kind, message = None, ""
        if info.get("type") == "directory":
            kind, message = IsADirectoryError, f"input is a directory, expected {expected}: {url}"
    if kind is not None:
        raise (error or kind)(redact(message, url))
    stamp = info.get("mtime") or info.get("LastModified") or info.get("ETag") or info.get("created")
    return {"url": url, "size": info.get("size"), "stamp": str(stamp)}


def resolve_root(root: str) -> str:
    """Local roots become absolute, so Dask workers in other directories agree on them."""
    import os

    if "://" in root:
        return root.rstrip("/")
    return os.path.abspath(os.path.expanduser(root))
