"""Save a trained PEARL model as one directory that transformers, sentence-transformers and we load.

After training, the paper averages the fine-tuned backbone with the original one (weight
0.5, against forgetting): :func:`average_state_dicts`. Only the backbone has an "original";
the character encoder, its projection and the type head are written as trained.

:func:`export_pearl` writes (atomically: a temporary directory beside ``path``, renamed)::

    path/
      config.json, model.safetensors     the (averaged) backbone: AutoModel.from_pretrained(path)
      tokenizer.json, tokenizer_config.json, ...   the backbone's tokenizer
      pearl_backbone.json                pooling/prefix, so `--backbone path` alone is the backbone
      char_encoder/config.json, char_encoder/model.safetensors   (pearl_model.inference.network.save_char_encoder)
      pearl_head.safetensors             char_proj.{weight,bias}, type_head.{weight,bias}
      pearl_model.json                   format tag, dims, labels, prefix, limits, averaging, metadata, and
                                         "checksums": "checksums.sha256" (so that its loss is seen)
      modules.json, config_sentence_transformers.json, sentence_bert_config.json
                                         sentence-transformers: PearlSTModule (whole model) -> Normalize
      network.py, st_module.py           the code those need, so that no pearl_model is needed to load
      README.md                          the model card (pearl_model.inference.model_card)
      onnx/                              the ONNX Runtime graph (pearl_model.inference.onnx_backend), when installed
      checksums.sha256                   every file's sha256 (sha256sum format; written last, checked on load:
                                         pearl_model.inference.checksums, `pearl verify DIR`)

The directory is code as well as weights: sentence-transformers imports its ``st_module.py`` (for a
local directory even without ``trust_remote_code``), so load only directories you trust, and check
a copy with ``pearl verify DIR`` (or ``sha256sum -c checksums.sha256`` inside it).

:func:`load_pearl` is the inverse (a :class:`~pearl_model.inference.model.PearlModel` with its batcher);
:class:`PearlEncoder` gives it the ``encode(..., normalize=)``/``similarity`` interface of
:class:`~pearl_model.inference.encoder.PhraseEncoder` that the evaluators and the CLI use. Weights are
safetensors and everything else JSON: nothing is unpickled when loading.

With sentence-transformers (>= 5; ``pearl_model`` need not be installed)::

    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("path/to/export", device="cpu", trust_remote_code=True)
    vectors = model.encode(["heart attack", "myocardial infarction"])  # == load_pearl(path).encode(...)
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors.torch import save_file

from pearl_model.inference.checksums import CHECKSUMS, no_checksums, verify_checksums, write_checksums
from pearl_model.inference.encoder import _check_phrases, cosine_matrix
from pearl_model.inference.model import PearlModel
from pearl_model.inference.model_card import model_card
from pearl_model.inference.network import (CHAR_DIR, CONFIG_FILE, FORMAT, HEAD_FILE, PearlExportError, load_network,
                                           read_config, save_char_encoder, ships_checksums)
from pearl_model.inference.onnx_backend import onnxruntime_available
from pearl_model.phrases.labels import LABELS

__all__ = ["FORMAT", "PearlExportError", "average_state_dicts", "export_pearl", "load_pearl",
           "is_pearl_export", "PearlEncoder", "ST_MODULE_CLASS"]

ST_MODULE_CLASS = "st_module.PearlSTModule"  # the copy in the export root, see st_module.py
SHIPPED_CODE = ("network.py", "st_module.py")  # what the export needs to load without pearl_model
ST_NORMALIZE_CLASS = "sentence_transformers.sentence_transformer.modules.normalize.Normalize"


def average_state_dicts(fine_tuned: dict, original: dict, weight: float = 0.5) -> dict:
    """``weight * fine_tuned + (1 - weight) * original``, tensor by tensor.

    Both dicts must have the same keys and shapes. Floating-point tensors are averaged in
    (at least) float32 and returned in the fine-tuned tensor's dtype and device; other
    tensors (integer buffers such as ``position_ids``) are copied from ``fine_tuned``.
    """
    weight = float(weight)
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must be in [0, 1], got {weight!r}")
    missing, extra = sorted(set(fine_tuned) - set(original)), sorted(set(original) - set(fine_tuned))
    if missing or extra:
        raise ValueError(f"state dicts differ in keys: only in fine_tuned {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}, only in original {extra[:5]}"
                         f"{' ...' if len(extra) > 5 else ''}")
    out = {}
    for key, ft in fine_tuned.items():
        orig = original[key]
        if tuple(ft.shape) != tuple(orig.shape):
            raise ValueError(f"{key}: shape {tuple(ft.shape)} (fine_tuned) != {tuple(orig.shape)} (original)")
        ft = ft.detach()
        if not ft.is_floating_point():
            out[key] = ft.clone()
            continue
        acc = torch.promote_types(ft.dtype, torch.float32)
        mixed = ft.to(acc) * weight + orig.detach().to(ft.device, acc) * (1.0 - weight)
        out[key] = mixed.to(ft.dtype)
    return out


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def _pearl_config(model: PearlModel, averaged_with: float | None, metadata: dict) -> dict:
    b = model.batcher
    n_labels = int(model.type_head.out_features)
    return {
        "format": FORMAT,
        "backbone_dim": model.backbone_dim, "char_dim": model.char_dim,
        "char_proj_dim": model.dim - model.backbone_dim, "dim": model.dim,
        "n_labels": n_labels, "type_input": model.type_input,
        "labels": list(LABELS) if n_labels == len(LABELS) else None,
        "pooling": "mean", "query_prefix": b.prefix, "max_length": int(b.max_length),
        "max_words": int(b.max_words), "max_chars": int(b.max_chars),
        "add_pooling_layer": _has_pooler(model.backbone),
        "average_weight": averaged_with, "metadata": metadata,
    }


def _has_pooler(backbone) -> bool | None:
    # BERT-like models: record whether a pooler exists, so loading builds the same modules.
    return None if not hasattr(backbone, "pooler") else backbone.pooler is not None


def head_state(model: PearlModel, char_scale: float = 1.0) -> dict[str, torch.Tensor]:
    """The type head's and character projection's tensors as exported, the character part of the
    vector scaled by ``char_scale`` (its projection's weight and bias multiplied, the type head's
    columns reading it divided, so type logits stay as trained).

    Why: KMeans reads the raw concatenated vector, and the character part's variance (spelling:
    abbreviations and codes against words) outweighed the backbone's in BC5CDR's two clusters;
    at half scale the backbone part's chemical/disease split decides
    (docs/research/recipe-anchors-and-char-scale.md)."""
    if not char_scale > 0:
        raise ValueError(f"char_scale must be > 0, got {char_scale!r}")
    head = {"type_head.weight": model.type_head.weight.detach().clone(),
            "type_head.bias": model.type_head.bias.detach().clone()}
    if model.char_proj is not None:
        head |= {"char_proj.weight": model.char_proj.weight.detach() * char_scale,
                 "char_proj.bias": model.char_proj.bias.detach() * char_scale}
        head["type_head.weight"][:, model.backbone_dim:] /= char_scale
    return head


def write_files(model: PearlModel, out: Path, *, backbone_state: dict | None = None,
                averaged_with: float | None = None, metadata: dict | None = None, char_scale: float = 1.0,
                checksummed: bool = False) -> None:
    """Write every file of an export into the existing directory ``out`` (not atomic: see export_pearl).
    ``checksummed``: ``pearl_model.json`` says that a ``checksums.sha256`` comes with it (the caller
    writes it last), so that the door refuses the directory once that file is gone."""
    if model.batcher is None:
        raise ValueError("export needs the model's tokenizer and char vocabulary: "
                         "PearlModel.from_parts(..., tokenizer=..., char_vocab=...)")
    metadata = dict(metadata or {})
    config = _pearl_config(model, averaged_with, metadata) | {"char_scale": float(char_scale)}
    if checksummed:
        config["checksums"] = CHECKSUMS
    text = json.dumps(config, ensure_ascii=False, indent=2)  # fails early on unserialisable metadata
    state = backbone_state if backbone_state is not None else model.backbone.state_dict()
    state = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    model.backbone.save_pretrained(out, state_dict=state, safe_serialization=True)
    model.batcher.tokenizer.save_pretrained(out)
    save_char_encoder(model.char_encoder, model.batcher.char_vocab, out / CHAR_DIR)
    head = head_state(model, char_scale)
    save_file({k: v.detach().float().cpu().contiguous() for k, v in head.items()}, str(out / HEAD_FILE),
              metadata={"format": FORMAT})
    _write_json(out / "pearl_backbone.json", {"pooling": "mean", "query_prefix": config["query_prefix"],
                                               "add_pooling_layer": config["add_pooling_layer"],
                                               "source": "pearl_model.inference.export"})
    # sentence-transformers: our module reads the whole directory (it is saved in the root),
    # then the library's own Normalize; prompts stay empty: the query prefix is built in.
    _write_json(out / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": ST_MODULE_CLASS},
        {"idx": 1, "name": "1", "path": "1_Normalize", "type": ST_NORMALIZE_CLASS}])
    (out / "1_Normalize").mkdir(exist_ok=True)
    _write_json(out / "config_sentence_transformers.json", {
        "model_type": "SentenceTransformer",
        "__version__": {k: v for k, v in [("sentence_transformers", _version("sentence-transformers")),
                                          ("transformers", _version("transformers")),
                                          ("pytorch", torch.__version__)] if v},
        "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"})
    _write_json(out / "sentence_bert_config.json", {"max_seq_length": config["max_length"],
                                                    "do_lower_case": False})
    for name in SHIPPED_CODE:
        shutil.copyfile(Path(__file__).with_name(name), out / name)
    (out / "README.md").write_text(model_card(config), encoding="utf-8")
    (out / CONFIG_FILE).write_text(text + "\n", encoding="utf-8")  # last: marks the export complete


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def export_pearl(model: PearlModel, path: str | os.PathLike, *, original_backbone_state: dict | None = None,
                 average_weight: float = 0.5, metadata: dict | None = None, overwrite: bool = False,
                 fast_backend: bool = True, char_scale: float = 1.0,
                 extra_files: dict[str, str] | None = None) -> Path:
    """Write ``model`` as a PEARL export directory at ``path`` and return the path.

    With ``original_backbone_state`` (the backbone's ``state_dict()`` before fine-tuning),
    the saved backbone is ``average_weight * fine-tuned + (1 - average_weight) * original``;
    the in-memory model is left unchanged. ``char_scale``: the character part of the vector
    multiplied by it (:func:`head_state`). ``metadata`` (JSON-serialisable: training-set
    version, backbone spec, ...) goes into ``pearl_model.json``. The directory appears
    complete or not at all; an existing ``path`` is an error unless ``overwrite``.
    ``fast_backend``: also build the ONNX graph (``onnx/``, :mod:`pearl_model.inference.onnx_backend`)
    where onnxruntime is installed, so the model's first encode on CPU need not.
    ``extra_files`` (file name -> text: a training log) are written beside the model's files.
    ``checksums.sha256``, listing every file, is written last.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    state, averaged_with = None, None
    if original_backbone_state is not None:
        state = average_state_dicts(model.backbone.state_dict(), original_backbone_state, average_weight)
        averaged_with = float(average_weight)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        write_files(model, tmp, backbone_state=state, averaged_with=averaged_with, metadata=metadata,
                    char_scale=char_scale, checksummed=True)
        for name, text in (extra_files or {}).items():
            if "/" in name or name in ("", ".", "..") or (tmp / name).exists():
                raise ValueError(f"extra file {name!r}: not a new file name in the export's top directory")
            (tmp / name).write_text(text, encoding="utf-8")
        if fast_backend and onnxruntime_available():  # the ONNX graph travels with the model
            # the files just written, before their checksums.sha256 (which load_pearl would require)
            load_network(tmp, device="cpu", cls=PearlModel).exported_graph("onnx", graph_dir=tmp / "onnx")
        write_checksums(tmp)
        if path.exists():  # overwrite: move the old one aside first, drop it after the rename
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            os.replace(path, old / "x")
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def is_pearl_export(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory with a ``pearl_model.json`` of this format (files not checked)."""
    try:
        p = Path(path).expanduser()
        return p.is_dir() and read_config(p) is not None
    except (OSError, TypeError, ValueError):
        return False


def load_pearl(path: str | os.PathLike, device: str | torch.device | None = None,
               backend: str = "auto") -> PearlModel:
    """The :class:`PearlModel` saved at ``path``, in eval mode, with its batcher and ``.name`` set.

    ``device``: default CUDA when available, else CPU. Reads safetensors and JSON only, after
    checking them against the export's ``checksums.sha256``
    (:func:`~pearl_model.inference.checksums.verify_checksums`: a :class:`ChecksumError` names the file),
    which is required where its ``pearl_model.json`` names it (every export's does).
    """
    if Path(path).is_dir() and verify_checksums(path) is None and ships_checksums(read_config(Path(path))):
        raise no_checksums(Path(path))
    model = load_network(path, device, cls=PearlModel)
    model.name = str(path)
    model.backend = backend
    return model


class PearlEncoder:
    """A loaded :class:`PearlModel` with the ``PhraseEncoder`` interface (``name``, ``encode``, ``similarity``)."""

    def __init__(self, model: PearlModel, name: str | None = None):
        if model.batcher is None:
            raise ValueError("PearlEncoder needs a model with a batcher (tokenizer + char vocabulary)")
        self.model = model
        self.name = name or getattr(model, "name", None) or "pearl"

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | None = None, backend: str = "auto") -> "PearlEncoder":
        return cls(load_pearl(path, device, backend))

    @property
    def dim(self) -> int:
        return self.model.dim

    @property
    def device(self) -> torch.device:
        return self.model.device

    def encode(self, phrases: Sequence[str], batch_size: int | None = None, normalize: bool = True,
               show_progress: bool | None = None, backend: str | None = None) -> np.ndarray:
        """float32 (n, dim) in input order; ``normalize=False``: the raw concatenated vectors."""
        items = _check_phrases(phrases)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.model.encode(items, batch_size=batch_size, normalize=normalize, show_progress=show_progress,
                                 backend=backend)

    def similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        return cosine_matrix(self.encode(a), self.encode(b))
