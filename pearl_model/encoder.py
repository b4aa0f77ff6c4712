"""`PhraseEncoder.encode()`: phrases in, embeddings out, like sentence-transformers.

Every evaluator and pipeline stage calls this one method. Inputs are sorted by length so
that each batch pads to similar lengths, then put back in the caller's order.
"""
from __future__ import annotations

import os

import numpy as np

from .backbones import DEFAULT_BACKBONE, BackboneInfo, load_backbone

PROGRESS_THRESHOLD = 5000  # show a progress bar by default for inputs longer than this


def mean_pool(hidden, mask):
    """Mean of ``hidden`` (B, T, D) over the positions where ``mask`` (B, T) is nonzero."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1)


def _check_phrases(phrases) -> list[str]:
    if isinstance(phrases, (str, bytes)):
        raise TypeError("encode() takes a list of phrases, not a single string: encode([phrase])")
    try:
        items = list(phrases)
    except TypeError:
        raise TypeError(f"encode() takes a list of strings, got {type(phrases).__name__}") from None
    for i, p in enumerate(items):
        if not isinstance(p, str):
            raise TypeError(f"phrase {i} is {type(p).__name__}, not str: {p!r:.60}")
    return items


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    return a @ b.T


class PhraseEncoder:
    """A transformer backbone with mean pooling (and the backbone's query prefix)."""

    def __init__(self, model, tokenizer, info: BackboneInfo):
        self.model, self.tokenizer, self.info = model, tokenizer, info

    @classmethod
    def from_backbone(cls, spec: str = DEFAULT_BACKBONE, cache_dir: str | os.PathLike | None = None,
                      device: str | None = None) -> "PhraseEncoder":
        import torch

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        return cls(*load_backbone(spec, cache_dir, device))

    @property
    def name(self) -> str:
        return self.info.spec

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    @property
    def device(self):
        return next(self.model.parameters()).device

    def encode(self, phrases: list[str], batch_size: int = 128, normalize: bool = True,
               show_progress: bool | None = None) -> np.ndarray:
        """Embeddings of ``phrases`` as float32 (n, dim), in input order.

        Phrases are truncated at the backbone's max length in tokens. An empty or
        whitespace-only phrase is encoded as the query prefix alone (for E5, "query: "),
        so it gets a defined vector rather than an error.
        """
        import torch

        items = _check_phrases(phrases)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = [self.info.query_prefix + p.strip() for p in items]
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if show_progress is None:
            show_progress = len(texts) > PROGRESS_THRESHOLD
        starts = range(0, len(texts), batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc=f"encode ({self.name})", unit="batch")
        device = self.device
        autocast = None
        if device.type == "cuda":
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            autocast = torch.autocast("cuda", dtype=dtype)
        with torch.inference_mode():
            for start in starts:
                idx = order[start:start + batch_size]
                batch = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                       max_length=self.info.max_length, return_tensors="pt").to(device)
                if autocast is not None:
                    with autocast:
                        hidden = self.model(**batch).last_hidden_state
                else:
                    hidden = self.model(**batch).last_hidden_state
                pooled = mean_pool(hidden, batch["attention_mask"])
                pooled = pooled.float()
                if normalize:
                    pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[idx] = pooled.cpu().numpy()
        return out

    def similarity(self, a: list[str], b: list[str]) -> np.ndarray:
        return cosine_matrix(self.encode(a), self.encode(b))
