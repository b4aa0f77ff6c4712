"""PEARL's model: backbone phrase vector ++ projected character vector, plus a type head.

The phrase embedding is the concatenation of

* the backbone's mean-pooled token states (over the attention mask), dim ``backbone_dim``;
* ``Linear(char_dim, char_proj_dim)`` of the character branch's phrase vector: the mean of
  the L2-normalised :class:`~pearl_model.char_encoder.CharEncoder` outputs of the phrase's
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
import torch.nn.functional as F
from torch import nn

from pearl_model.char_encoder import PAD, CharEncoder, CharVocab
from pearl_model.encoder import _check_phrases as check_phrase_list, encode_batches, mean_pool, torch_runner
from pearl_model.onnx_backend import OnnxRunner, resolve_backend
from pearl_model.phrases.labels import LABELS

__all__ = ["mean_pool", "collate", "Batcher", "PearlModel", "TYPE_INPUTS"]
TYPE_INPUTS = ("raw", "unit")


def _check_phrases(phrases, allow_blank: bool = False) -> list[str]:
    # encode()'s type checks, plus: training phrases may not be empty.
    items = check_phrase_list(phrases)
    if not items:
        raise ValueError("no phrases given (empty input)")
    if not allow_blank:
        for i, p in enumerate(items):
            if not p.strip():
                raise ValueError(f"phrase {i} is empty or whitespace-only")
    return items


def collate(phrases: Sequence[str], tokenizer, char_vocab: CharVocab, prefix: str = "",
            max_length: int = 512, max_words: int = 16, max_chars: int = 20,
            allow_blank: bool = False, padding: bool | str = True) -> dict[str, torch.Tensor]:
    """Tensors for :meth:`PearlModel.forward`.

    ``input_ids``/``attention_mask``: ``prefix + phrase`` tokenised, padded to the longest
    in the batch, truncated at ``max_length`` tokens. ``char_ids`` (B, W, max_chars) and
    ``word_mask`` (B, W): the first ``max_words`` lowercased whitespace words of each
    phrase, W the most words of any phrase in the batch (at most ``max_words``).
    ``padding``: the tokenizer's (``"max_length"`` pads every batch to ``max_length``).
    ``allow_blank``: a blank phrase is the prefix alone with no words (a zero char vector),
    as ``PhraseEncoder.encode`` treats it; training batches never allow it.
    """
    items = _check_phrases(phrases, allow_blank)
    if max_words < 1:
        raise ValueError(f"max_words must be >= 1, got {max_words!r}")
    tok = tokenizer([prefix + p.strip() for p in items], padding=padding, truncation=True,
                    max_length=max_length, return_tensors="pt")
    words = [p.lower().split()[:max_words] for p in items]
    width = max(1, max(len(w) for w in words))
    char_ids = torch.full((len(items), width, max_chars), PAD, dtype=torch.long)
    word_mask = torch.zeros((len(items), width), dtype=torch.bool)
    for r, ws in enumerate(words):
        char_ids[r, :len(ws)] = char_vocab.encode(ws, max_chars)
        word_mask[r, :len(ws)] = True
    return {"input_ids": tok["input_ids"], "attention_mask": tok["attention_mask"],
            "char_ids": char_ids, "word_mask": word_mask}


class Batcher:
    """:func:`collate` with its settings bound; ``batcher(phrases)`` -> dict of tensors."""

    def __init__(self, tokenizer, char_vocab: CharVocab, prefix: str = "", max_length: int = 512,
                 max_words: int = 16, max_chars: int = 20):
        self.tokenizer, self.char_vocab, self.prefix = tokenizer, char_vocab, prefix
        self.max_length, self.max_words, self.max_chars = max_length, max_words, max_chars

    def __call__(self, phrases: Sequence[str], allow_blank: bool = False) -> dict[str, torch.Tensor]:
        return collate(phrases, self.tokenizer, self.char_vocab, self.prefix, self.max_length,
                       self.max_words, self.max_chars, allow_blank)


class PearlModel(nn.Module):
    """Backbone (mean pooling) ++ Linear(char phrase vector), and a linear 95-way type head."""

    def __init__(self, backbone: nn.Module, char_encoder: CharEncoder, char_proj_dim: int = 96,
                 n_labels: int = len(LABELS), batcher: Batcher | None = None, type_input: str = "raw"):
        super().__init__()
        if type_input not in TYPE_INPUTS:
            raise ValueError(f"type_input must be one of {TYPE_INPUTS}, got {type_input!r}")
        # "unit": the head reads the unit vector, so the type loss cannot grow or shrink the raw
        # vectors' norms (which KMeans and linear probes on raw vectors see); "raw": as the paper.
        self.type_input = type_input
        if char_proj_dim < 0 or n_labels < 1:
            raise ValueError("char_proj_dim must be >= 0 (0: no character branch) and n_labels >= 1")
        self.backbone, self.char_encoder = backbone, char_encoder
        self.backbone_dim = int(backbone.config.hidden_size)
        self.char_dim = int(char_encoder.config["out_dim"])
        # char_proj_dim 0 switches the character branch off: the vector is the backbone's alone.
        self.char_proj = nn.Linear(self.char_dim, char_proj_dim) if char_proj_dim else None
        self.dim = self.backbone_dim + char_proj_dim
        self.type_head = nn.Linear(self.dim, n_labels)
        self.batcher = batcher
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

    def char_vectors(self, char_ids: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
        """(B, char_dim): per phrase, the mean of its words' unit CharEncoder vectors."""
        if char_ids.dim() != 3 or word_mask.shape != char_ids.shape[:2]:
            raise ValueError(f"char_ids must be (batch, words, chars) and word_mask (batch, words), "
                             f"got {tuple(char_ids.shape)} and {tuple(word_mask.shape)}")
        mask = word_mask.bool()
        words = F.normalize(self.char_encoder(char_ids[mask]), dim=-1)  # only the real words
        per_word = words.new_zeros((*mask.shape, words.shape[-1]))
        per_word[mask] = words
        return mean_pool(per_word, mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, char_ids: torch.Tensor,
                word_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeddings (B, backbone_dim + char_proj_dim), type_logits (B, n_labels)), unnormalised."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        sem = mean_pool(hidden, attention_mask).float()
        emb = sem if self.char_proj is None else \
            torch.cat([sem, self.char_proj(self.char_vectors(char_ids, word_mask).float())], dim=-1)
        return emb, self.type_head(F.normalize(emb, dim=-1) if self.type_input == "unit" else emb)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def encode(self, phrases: Sequence[str], batch_size: int = 128, normalize: bool = True,
               show_progress: bool | None = None, backend: str | None = None) -> np.ndarray:
        """float32 embeddings (n, dim) of ``phrases`` in input order, L2-normalised unless
        ``normalize=False``. A blank phrase is encoded as the prefix alone (no char words).
        ``backend``: the engine (:mod:`pearl_model.onnx_backend`); default: ``self.backend``,
        "torch" for a model being trained, "auto" for one loaded by ``load_pearl``."""
        if self.batcher is None:
            raise RuntimeError("encode() needs a tokenizer and a char vocabulary: "
                               "PearlModel.from_parts(..., tokenizer=..., char_vocab=...)")
        items = _check_phrases(phrases, allow_blank=True)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        featurize = lambda batch: self.batcher(batch, allow_blank=True)  # noqa: E731
        was_training = self.training
        self.eval()
        try:
            return encode_batches(items, batch_size, self.dim, featurize, self._runner(backend, featurize),
                                  normalize, show_progress, "encode (pearl)")
        finally:
            self.train(was_training)

    def _runner(self, backend: str | None, featurize):
        engine = resolve_backend(backend or self.backend, self.device.type)
        if engine == "torch":  # never cached: the weights may change between calls (training)
            return torch_runner(self, self.device, pool=False)
        runners = self.__dict__.setdefault("_onnx_runners", {})
        if engine not in runners:
            runners[engine] = OnnxRunner(self, featurize(["a phrase", "another one"]), engine,
                                         getattr(self, "name", None))
        return runners[engine]
