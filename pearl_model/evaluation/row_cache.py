"""Scores of a model that has not changed, kept on disk and read back.

Scoring the same weights on the same data with the same code gives the same rows, yet a scheduled
`evaluate` run scores the backbone and the baselines again beside each new model, and a dev
comparison scores the backbone and the earlier models again beside each new one. A row set is
kept under a key of everything it depends on:

- the model: a directory's resolved path and each file's name, size and modification time (a
  model written again is a new model); otherwise its spec;
- the engine that encodes it (the scores of bf16 and fp32 differ in their last digits);
- what is scored and how (the caller's settings: dataset, probe seeds, KMeans draws, the
  benchmark files' identity);
- the code: the sources of ``pearl_model/evaluation`` and ``pearl_model/inference`` (and any the
  caller adds) and the versions of the numeric packages under them.

Change any of them and the rows are computed again. A file is written whole (a temporary name,
then a rename), so a killed run leaves nothing half written to be read back. It holds its key and
a SHA-256 of the key and the rows (canonical JSON) beside the rows: a file that is truncated,
edited, of another layout or copied under another key's name is scored afresh, warned about and
counted (``RowCache.counts``), never served. The digest finds an edit; it does not stop a writer
of the directory who computes it again (the storage root is trusted that far, as its datasets are).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parents[1]
# The kept file's layout, part of every key: a file of another layout is never looked up.
FORMAT = 2
PACKAGES = ("numpy", "scikit-learn", "scipy", "torch", "transformers", "onnxruntime", "openvino", "faiss-cpu")


def write_json_atomic(path: Path, obj: Any) -> None:
    """``obj`` as JSON at ``path``, all or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def code_identity(extra: Sequence[Path] = ()) -> str:
    """The scoring and encoding code's sources (and ``extra`` files), with the numeric packages' versions."""
    h = hashlib.sha256()
    for f in sorted((_ROOT / "evaluation").glob("*.py")) + sorted((_ROOT / "inference").glob("*.py")) + list(extra):
        h.update(f"{f.name}\0".encode() + Path(f).read_bytes())
    h.update(json.dumps({p: _version(p) for p in PACKAGES}, sort_keys=True).encode())
    return h.hexdigest()


def model_identity(spec: str, model: Any = None) -> dict:
    """What a model's scores depend on: a directory's files or the spec, and the engine of ``model``
    (the loaded encoder) where it has one."""
    path = Path(spec)
    out: dict = ({"path": str(path.resolve()), "files": [(f.name, f.stat().st_size, f.stat().st_mtime_ns)
                                                         for f in sorted(path.rglob("*")) if f.is_file()]}
                 if path.is_dir() else {"spec": spec})
    # a PhraseEncoder holds its engine setting, a PearlEncoder's model does; static models have none
    backend = getattr(model, "backend", None) or getattr(getattr(model, "model", None), "backend", None)
    if backend is not None and hasattr(model, "device"):
        from pearl_model.inference.onnx_backend import resolve_backend

        out["engine"] = resolve_backend(backend, model.device.type)
    return out


def rows_digest(key: str, rows: Any) -> str:
    """SHA-256 of ``key`` and ``rows`` as canonical JSON (sorted keys, no spaces): the same for
    rows written and read back, another for any edit of a value or a type."""
    text = json.dumps(rows, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{key}\0{text}".encode()).hexdigest()


class RowCache:
    """One model's row sets under ``directory``, one JSON file per (name, settings). ``counts``:
    row sets read back, scored, and kept files rejected (not as written)."""

    def __init__(self, directory: str | os.PathLike, model: dict, settings: dict,
                 extra_code: Sequence[Path] = ()):
        self.directory = Path(directory)
        self._base = json.dumps({"format": FORMAT, "model": model, "settings": settings,
                                 "code": code_identity(extra_code)}, sort_keys=True, default=str)
        self.counts: Counter = Counter(read_back=0, scored=0, rejected=0)

    def key(self, name: str) -> str:
        return hashlib.sha256(f"{self._base}\0{name}".encode()).hexdigest()

    def path(self, name: str) -> Path:
        return self.directory / f"{name}-{self.key(name)[:32]}.json"

    def get(self, name: str) -> Any:
        """The kept rows of ``name`` when its file is as written; None when there is none or it is not."""
        path, key = self.path(name), self.key(name)
        if not path.exists():
            return None
        try:
            kept = json.loads(path.read_bytes())
            rows = kept["rows"]
            ok = kept["key"] == key and kept["sha256"] == rows_digest(key, rows)
        except (OSError, ValueError, TypeError, KeyError, RecursionError):  # unreadable, not JSON, not the layout
            ok = False
        if not ok:
            self.counts["rejected"] += 1
            log.warning("%s: kept rows %s are not as written (edited, truncated or unreadable): scored afresh",
                        name, path)
            return None
        self.counts["read_back"] += 1
        log.info("%s: rows read back from %s", name, path)
        return rows

    def put(self, name: str, rows: Any) -> None:
        key = self.key(name)
        write_json_atomic(self.path(name), {"key": key, "sha256": rows_digest(key, rows), "rows": rows})

    def rows(self, name: str, compute: Callable[[], Any]) -> Any:
        """The kept rows of ``name``, else ``compute()``'s, kept."""
        found = self.get(name)
        if found is None:
            found = compute()
            self.counts["scored"] += 1
            self.put(name, found)
        return found
