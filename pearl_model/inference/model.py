"""PEARL's model: backbone phrase vector ++ projected character vector, plus a type head.

The phrase embedding is the concatenation of

* the backbone's mean-pooled token states (over the attention mask), dim ``backbone_dim``;
* ``Linear(char_dim, char_proj_dim)`` of the character branch's phrase vector: the mean of
  the L2-normalised :class:`~pearl_model.training.char_encoder.CharEncoder` outputs of the phrase's
  lowercased whitespace words (the same vector as ``char_encoder.phrase_vectors``);

and a linear head over that concatenation predicts the 95 phrase types of
:mod:`pearl_model.phrases.labels`. Every op is per phrase (masked means, fixed-width word
rows), so a phrase's outputs do not depend on what else is in the batch.

Tokenisation happens outside the training step: :func:`collate` / :class:`Batcher` turn
phrases into ``input_ids, attention_mask, char_ids, word_mask`` (usable as a DataLoader
``collate_fn``); :meth:`PearlModel.forward` takes those tensors.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from pearl_model.inference.encoder import default_batch_size, encode_batches, torch_runner
from pearl_model.inference.network import (TYPE_INPUTS, Batcher, CharEncoder, CharVocab, PearlNetwork,  # noqa: F401
                                           _check_phrases, collate, mean_pool)
from pearl_model.inference.onnx_backend import OnnxRunner, resolve_backend
from pearl_model.phrases.labels import LABELS

__all__ = ["mean_pool", "collate", "Batcher", "PearlModel", "TYPE_INPUTS"]


class PearlModel(PearlNetwork):
    """Backbone (mean pooling) ++ Linear(char phrase vector), and a linear 95-way type head; ``encode()``."""

    def __init__(self, backbone: nn.Module, char_encoder: CharEncoder, char_proj_dim: int = 96,
                 n_labels: int = len(LABELS), batcher: Batcher | None = None, type_input: str = "raw"):
        super().__init__(backbone, char_encoder, char_proj_dim, n_labels, batcher, type_input)
        self.backend = "torch"  # encode()'s engine; load_pearl sets "auto" (a model being trained stays torch)

    @classmethod
    def from_parts(cls, backbone_model, char_encoder: CharEncoder, char_proj_dim: int = 96,
                   n_labels: int = len(LABELS), *, tokenizer=None, char_vocab: CharVocab | None = None,
                   prefix: str | None = None, max_length: int | None = None,
                   max_words: int = 16, type_input: str = "raw") -> "PearlModel":
        """Build from a backbone (an ``AutoModel`` or a ``PhraseEncoder``) and a char encoder.

        A ``PhraseEncoder`` also supplies the tokenizer, query prefix and max length.
        With a tokenizer and a ``char_vocab`` the model can :meth:`encode` text.
        """
        if hasattr(backbone_model, "tokenizer") and hasattr(backbone_model, "info"):
            tokenizer = tokenizer if tokenizer is not None else backbone_model.tokenizer
            prefix = backbone_model.info.query_prefix if prefix is None else prefix
            max_length = backbone_model.info.max_length if max_length is None else max_length
            backbone_model = backbone_model.model
        batcher = None
        if tokenizer is not None and char_vocab is not None:
            batcher = Batcher(tokenizer, char_vocab, prefix or "", max_length or 512, max_words,
                              char_encoder.max_len)
        return cls(backbone_model, char_encoder, char_proj_dim, n_labels, batcher, type_input)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def encode(self, phrases: Sequence[str], batch_size: int | None = None, normalize: bool = True,
               show_progress: bool | None = None, backend: str | None = None) -> np.ndarray:
        """float32 embeddings (n, dim) of ``phrases`` in input order, L2-normalised unless
        ``normalize=False``. A blank phrase is encoded as the prefix alone (no char words).
        ``backend``: the engine (:mod:`pearl_model.inference.onnx_backend`); default: ``self.backend``,
        "torch" for a model being trained, "auto" for one loaded by ``load_pearl``."""
        if self.batcher is None:
            raise RuntimeError("encode() needs a tokenizer and a char vocabulary: "
                               "PearlModel.from_parts(..., tokenizer=..., char_vocab=...)")
        items = _check_phrases(phrases, allow_blank=True)
        if batch_size is None:
            batch_size = default_batch_size(self.device)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        featurize = lambda batch: self.batcher(batch, allow_blank=True)  # noqa: E731
        was_training = self.training
        self.eval()
        try:
            return encode_batches(items, batch_size, self.dim, featurize, self._runner(backend, featurize),
                                  normalize, show_progress, "encode (pearl)", self.batcher.lengths)
        finally:
            self.train(was_training)

    def _runner(self, backend: str | None, featurize):
        engine = resolve_backend(backend or self.backend, self.device.type)
        if engine == "torch":  # never cached: the weights may change between calls (training)
            return torch_runner(self, self.device, pool=False)
        runners = self.__dict__.setdefault("_onnx_runners", {})
        if engine not in runners:
            runners[engine] = self.exported_graph(engine)
        return runners[engine]

    def exported_graph(self, engine: str = "onnx", graph_dir=None) -> OnnxRunner:
        """This model's graph for an ONNX engine: the one its directory ships, else one built in the
        cache (or in ``graph_dir``: the export, shipping it)."""
        featurize = lambda batch: self.batcher(batch, allow_blank=True)  # noqa: E731
        return OnnxRunner(self, featurize(["a phrase", "another one"]), engine, getattr(self, "name", None),
                          featurize=featurize, tokenizer=self.batcher.tokenizer if self.batcher else None,
                          graph_dir=graph_dir)
