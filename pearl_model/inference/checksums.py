"""An export's ``checksums.sha256``: written last by the export, checked before a model is loaded.

The file is in ``sha256sum`` format (``<hex>  <relative path>`` a line), so a copy can be checked
with ``sha256sum -c checksums.sha256`` inside the directory as well as with ``pearl verify DIR``.
It lists every file of the export; a file missing, changed or not listed is an error naming it.

Loading a model verifies it (:func:`verify_checksums`) because a model directory is code as well
as weights: sentence-transformers imports the export's ``st_module.py``. Hashing a model takes
about a second per GB, so a verified directory leaves a marker in ``$PEARL_CACHE/verified/``
keyed by its path and every file's size and mtime: a second load only stats the files. (A file
rewritten with the same size and its mtime set back passes the marker; ``pearl verify`` and
``use_marker=False`` hash every file.) A directory without the file (an export from before it,
a backbone, a static model) loads unchecked; which directories load at all is
:mod:`pearl_model.inference.model_dirs`' rule (a half-export does not).
"""
from __future__ import annotations

import hashlib
import os
import string
from pathlib import Path

from .backbones import cache_root
from .network import PearlExportError

__all__ = ["CHECKSUMS", "ChecksumError", "sha256_file", "directory_digest", "write_checksums", "verify_checksums",
           "shown"]

CHECKSUMS = "checksums.sha256"
# A storage root keeps its own manifest beside a model version's files (storage.files.FileSet);
# it is not part of the export and carries its own sha256 list.
NOT_LISTED = frozenset({CHECKSUMS, "_manifest.json"})


class ChecksumError(PearlExportError):
    """A file of a model directory that does not match the directory's ``checksums.sha256``."""


def shown(name: str) -> str:
    """``name`` with control characters escaped: a file name cannot break an error's one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def directory_digest(root: str | os.PathLike) -> str:
    """SHA-256 over every file under ``root``, its relative path and its SHA-256: what an output
    computed with the model there is a function of (the reuse stores key on it)."""
    root, h = Path(root), hashlib.sha256()
    for rel in sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()):
        h.update(f"{rel}\0{sha256_file(root / rel)}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.relative_to(root).as_posix() not in NOT_LISTED)


def write_checksums(root: str | os.PathLike) -> Path:
    """Write ``root/checksums.sha256`` listing every file under ``root`` (call it last)."""
    root = Path(root)
    lines = [f"{sha256_file(root / rel)}  {rel}\n" for rel in _files(root)]
    out = root / CHECKSUMS
    out.write_text("".join(lines), encoding="utf-8")
    return out


def _read(root: Path) -> dict[str, str]:
    listed = {}
    try:
        text = (root / CHECKSUMS).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ChecksumError(f"{root / CHECKSUMS}: not UTF-8 text") from e
    for n, line in enumerate(text.splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        parts = rel.split("/")
        if (not sep or len(digest) != 64 or digest.strip(string.hexdigits)
                or any(p in ("", ".", "..") for p in parts)):
            raise ChecksumError(f"{root / CHECKSUMS}: line {n} is not '<sha256>  <relative path>'")
        if rel in listed:
            raise ChecksumError(f"{root / CHECKSUMS}: line {n} lists {shown(rel)} again")
        listed[rel] = digest.lower()
    return listed


def _marker(root: Path, present: list[str]) -> Path:
    """The marker file for the directory as it is now: its path, and every file's name, size and mtime."""
    h = hashlib.sha256(str(root.resolve()).encode())
    for rel in present + [CHECKSUMS]:
        st = (root / rel).stat()
        h.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return cache_root() / "verified" / h.hexdigest()


def verify_checksums(root: str | os.PathLike, *, use_marker: bool = True) -> int | None:
    """Check every file of ``root`` against its ``checksums.sha256``: the number of files checked,
    None when the directory has no such file. Raises :class:`ChecksumError` naming the files
    that are missing, changed or not listed."""
    root = Path(root)
    if not os.path.lexists(root / CHECKSUMS):
        return None
    if not (root / CHECKSUMS).is_file():  # a directory or a dangling link must not pass for "no checksums"
        raise ChecksumError(f"{root}/{CHECKSUMS} is not a file")
    listed, present = _read(root), _files(root)
    marker = _marker(root, present) if use_marker else None
    if marker is not None and marker.exists():
        return len(listed)
    problems = [f"{shown(rel)}: missing" for rel in listed if rel not in present]
    problems += [f"{shown(rel)}: not listed" for rel in present if rel not in listed]
    problems += [f"{shown(rel)}: sha256 differs" for rel in present
                 if rel in listed and sha256_file(root / rel) != listed[rel]]
    if problems:
        raise ChecksumError(f"{root}: does not match its {CHECKSUMS} (changed since export; load only "
                            f"directories you trust): " + "; ".join(problems))
    if marker is not None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:  # a read-only cache: verified again next time
            pass
    return len(listed)
