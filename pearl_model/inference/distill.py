"""``distill_static(spec, out)``: a static model2vec model (:mod:`pearl_model.inference.static`) distilled
from a backbone or a trained PEARL export, whose files are checked like any model's on the way in
(:mod:`pearl_model.inference.model_dirs`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from .export import PearlEncoder
from .model_dirs import open_model
from .static import M2V_PIP, StaticEncoder

__all__ = ["distill_static"]


def _teacher(spec: str, cache_dir=None):
    """(transformer, tokenizer, what the static model covers) of a backbone spec or PEARL export."""
    enc = open_model(spec, cache_dir=cache_dir, device="cpu", backend="torch")
    if isinstance(enc, StaticEncoder):
        raise ValueError(f"{spec} is a static model already: distil its teacher instead")
    if isinstance(enc, PearlEncoder):
        model = enc.model
        part = "the backbone half (the character branch is not distilled)" if model.char_proj is not None \
            else "the whole model (no character branch)"
        return model.backbone, model.batcher.tokenizer, part
    return enc.model, enc.tokenizer, "the whole model"


def distill_static(spec: str, out: str | os.PathLike, pca_dims: int | None = 256,
                   vocabulary: Sequence[str] | None = None, cache_dir=None) -> Path:
    """Distil ``spec`` (a backbone spec or a PEARL export directory) into a StaticModel at ``out``.

    ``pca_dims``: the static vectors' dimension (None: the teacher's, PCA-rotated);
    ``vocabulary``: extra words to add as whole tokens (e.g. a corpus's frequent words).
    """
    try:
        from model2vec.distill import distill_from_model
    except ImportError as e:
        raise ImportError(f"static distillation needs model2vec with its distill extra: {M2V_PIP}") from e
    model, tokenizer, part = _teacher(spec, cache_dir)
    static = distill_from_model(model, tokenizer, vocabulary=list(vocabulary or []) or None, device="cpu",
                                pca_dims=pca_dims)
    static.config["pearl_teacher"] = str(spec)
    static.config["pearl_distilled"] = part
    out = Path(out)
    static.save_pretrained(out)
    return out
