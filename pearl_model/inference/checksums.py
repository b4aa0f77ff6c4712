"""An export's ``checksums.sha256``: written last by the export, checked before a model is loaded.

The file is in ``sha256sum`` format (``<hex>  <relative path>`` a line), so a copy can be checked
with ``sha256sum -c checksums.sha256`` inside the directory as well as with ``pearl verify DIR``.
It lists every file of the export; a file missing, changed or not listed is an error naming it.

Loading a model verifies it (:func:`verify_checksums`) because a model directory is code as well
as weights: sentence-transformers imports the export's ``st_module.py``. Hashing a model takes
about a second per GB, so a verified directory leaves a marker in ``$PEARL_CACHE/verified/``
keyed by its path and every file's size and mtime: a second load only stats the files. (A file
rewritten with the same size and its mtime set back passes the marker; ``pearl verify`` and
``use_marker=False`` hash every file.) A directory without the file (a backbone, a static model)
loads unchecked; which directories load at all is :mod:`pearl_model.inference.model_dirs`' rule
(a half export does not, nor an export whose ``pearl_model.json`` names a ``checksums.sha256``
that is gone: :func:`~.network.ships_checksums`).

The parsing and comparing live in :mod:`.network` (re-exported here): an export's own copy of it
checks the export where this project is not installed (``st_module.py``).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .backbones import cache_root
from .network import (CHECKSUMS, NOT_LISTED, ChecksumError, check_listed, listed_files, no_checksums,  # noqa: F401
                      read_checksums, sha256_file, shown)

__all__ = ["CHECKSUMS", "ChecksumError", "sha256_file", "directory_digest", "write_checksums", "verify_checksums",
           "shown", "no_checksums"]


def directory_digest(root: str | os.PathLike) -> str:
    """SHA-256 over every file under ``root``, its relative path and its SHA-256: what an output
    computed with the model there is a function of (the reuse stores key on it)."""
    root, h = Path(root), hashlib.sha256()
    for rel in sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()):
        h.update(f"{rel}\0{sha256_file(root / rel)}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def write_checksums(root: str | os.PathLike) -> Path:
    """Write ``root/checksums.sha256`` listing every file under ``root`` (call it last)."""
    root = Path(root)
    lines = [f"{sha256_file(root / rel)}  {rel}\n" for rel in listed_files(root)]
    out = root / CHECKSUMS
    out.write_text("".join(lines), encoding="utf-8")
    return out


def _marker(root: Path, present: list[str]) -> Path:
    """The marker file for the directory as it is now: its path, and every file's name, size and mtime."""
    # surrogateescape: a file name that is not UTF-8 (os gives its bytes as surrogates) keys the marker too
    h = hashlib.sha256(str(root.resolve()).encode("utf-8", "surrogateescape"))
    for rel in present + [CHECKSUMS]:
        st = (root / rel).stat()
        h.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode("utf-8", "surrogateescape"))
    return cache_root() / "verified" / h.hexdigest()


def verify_checksums(root: str | os.PathLike, *, use_marker: bool = True) -> int | None:
    """Check every file of ``root`` against its ``checksums.sha256``: the number of files checked,
    None when the directory has no such file. Raises :class:`ChecksumError` naming the files
    that are missing, changed or not listed."""
    root = Path(root)
    listed = read_checksums(root)
    if listed is None:
        return None
    present = listed_files(root)
    marker = _marker(root, present) if use_marker else None
    if marker is not None and marker.exists():
        return len(listed)
    check_listed(root, listed, present)
    if marker is not None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:  # a read-only cache: verified again next time
            pass
    return len(listed)
