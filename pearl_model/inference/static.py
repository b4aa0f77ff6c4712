"""Static phrase encoders: a model2vec distillation of any backbone or trained PEARL model.

``distill_static(spec, out)`` (:mod:`pearl_model.inference.distill`) runs every token of the model's
vocabulary through its transformer once (model2vec's ``distill_from_model``: mean pooling, PCA, SIF
weighting) and saves a :class:`model2vec.StaticModel`: a phrase vector is then the mean of its
tokens' stored vectors, no transformer at all, tens of thousands of phrases a second on one CPU
core. The directory loads with ``StaticModel.from_pretrained(out)`` and with
``SentenceTransformer(out)`` (model2vec writes the ``modules.json`` of a StaticEmbedding + Normalize
pipeline).

What a static model loses: word order and context, and, for a PEARL teacher, the character
branch (it reads spelling, which a token table cannot); the backbone half is what is distilled.
Its benchmark row sits beside its teacher's in the evaluate flow (``models=[teacher, static]``).

:class:`StaticEncoder` gives it the ``encode``/``similarity`` interface of the other encoders.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from .encoder import _check_phrases, cosine_matrix

# model2vec is imported where a static model is made or loaded: an optional extra (M2V_PIP)

__all__ = ["is_static_model", "StaticEncoder"]
M2V_PIP = "pip install 'model2vec[distill]==0.9.0'"


def is_static_model(path: str | os.PathLike) -> bool:
    """A directory written by model2vec (its config.json says ``model_type: model2vec``)."""
    config = Path(path) / "config.json"
    try:
        return config.is_file() and json.loads(config.read_text()).get("model_type") == "model2vec"
    except (OSError, ValueError):
        return False


class StaticEncoder:
    """A model2vec StaticModel with the ``PhraseEncoder`` interface (``name``, ``dim``, ``encode``)."""

    def __init__(self, model, name: str):
        self.model, self.name = model, name

    @classmethod
    def load(cls, path: str | os.PathLike) -> "StaticEncoder":
        from model2vec import StaticModel

        if not is_static_model(path):
            raise ValueError(f"{path} is not a model2vec directory (no config.json with model_type model2vec)")
        return cls(StaticModel.from_pretrained(str(path), normalize=False), str(path))

    @property
    def dim(self) -> int:
        return int(self.model.dim)

    def encode(self, phrases: Sequence[str], batch_size: int = 1024, normalize: bool = True,
               show_progress: bool | None = None, backend: str | None = None) -> np.ndarray:
        """float32 (n, dim) in input order; ``backend`` is accepted for the common interface (numpy only)."""
        items = _check_phrases(phrases)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        v = np.asarray(self.model.encode([p.strip() for p in items], batch_size=batch_size,
                                         show_progress_bar=bool(show_progress)), dtype=np.float32)
        if normalize:
            v = v / np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None)
        return v

    def similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        return cosine_matrix(self.encode(a), self.encode(b))
