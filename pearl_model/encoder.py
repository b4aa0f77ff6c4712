"""`PhraseEncoder.encode()`: phrases in, embeddings out, like sentence-transformers.

Every evaluator and pipeline stage calls this one method. Inputs are sorted by length so
that each batch pads to similar lengths, then put back in the caller's order.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .backbones import DEFAULT_BACKBONE, BackboneInfo, load_backbone
from .network import check_phrases as _check_phrases, mean_pool  # noqa: F401  (re-exported)
from .onnx_backend import OnnxRunner, resolve_backend

PROGRESS_THRESHOLD = 5000  # show a progress bar by default for inputs longer than this


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    return a @ b.T


def torch_runner(model, device, pool: bool) -> Callable:
    """``features -> (B, dim)`` float32 numpy, unnormalised, by PyTorch (bf16 autocast on CUDA).

    ``pool``: ``model`` is a transformer (mean-pool its last hidden state); else it returns
    ``(embedding, ...)`` as :class:`~pearl_model.model.PearlModel` does.
    """
    import contextlib

    import torch

    autocast = contextlib.nullcontext
    if device.type == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        autocast = lambda: torch.autocast("cuda", dtype=dtype)  # noqa: E731

    def run(features) -> np.ndarray:
        with torch.inference_mode(), autocast():
            feats = {k: v.to(device) for k, v in features.items()}
            if pool:
                emb = mean_pool(model(**feats).last_hidden_state, feats["attention_mask"])
            else:
                emb = model(**feats)[0]
        return emb.float().cpu().numpy()

    return run


def encode_batches(items: Sequence[str], batch_size: int, dim: int, featurize: Callable, run: Callable,
                   normalize: bool, show_progress: bool | None, desc: str) -> np.ndarray:
    """The encode loop every encoder shares: length-sorted batches -> ``run(featurize(batch))``,
    L2-normalised unless ``normalize=False``, put back in the caller's order."""
    order = np.argsort([-len(p) for p in items], kind="stable")
    out = np.empty((len(items), dim), dtype=np.float32)
    batches = [order[start:start + batch_size] for start in range(0, len(items), batch_size)]
    steps = range(len(batches))
    if show_progress or (show_progress is None and len(items) > PROGRESS_THRESHOLD):
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc=desc, unit="batch")
    # The next batch is tokenised in a thread while this one runs: fast tokenizers, ONNX Runtime
    # and CUDA all release the GIL, so the accelerator does not wait on the tokenizer.
    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = pool.submit(featurize, [items[i] for i in batches[0]]) if batches else None
        for b in steps:
            idx = batches[b]
            features = ahead.result()
            if b + 1 < len(batches):
                ahead = pool.submit(featurize, [items[i] for i in batches[b + 1]])
            emb = run(features)
            if normalize:
                emb = emb / np.clip(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12, None)
            out[idx] = emb
    return out


class PhraseEncoder:
    """A transformer backbone with mean pooling (and the backbone's query prefix)."""

    def __init__(self, model, tokenizer, info: BackboneInfo, backend: str = "auto"):
        self.model, self.tokenizer, self.info = model, tokenizer, info
        self.backend = backend  # the engine encode() uses unless told otherwise
        self._runners: dict = {}

    @classmethod
    def from_backbone(cls, spec: str = DEFAULT_BACKBONE, cache_dir: str | os.PathLike | None = None,
                      device: str | None = None, backend: str = "auto") -> "PhraseEncoder":
        import torch

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        return cls(*load_backbone(spec, cache_dir, device), backend=backend)

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
               show_progress: bool | None = None, backend: str | None = None) -> np.ndarray:
        """Embeddings of ``phrases`` as float32 (n, dim), in input order.

        Phrases are truncated at the backbone's max length in tokens. An empty or
        whitespace-only phrase is encoded as the query prefix alone (for E5, "query: "),
        so it gets a defined vector rather than an error. ``backend``: the engine
        (:mod:`pearl_model.onnx_backend`; default: this encoder's ``backend``, "auto").
        """
        items = _check_phrases(phrases)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)

        def featurize(batch: list[str]):
            return self.tokenizer([self.info.query_prefix + p.strip() for p in batch], padding=True,
                                  truncation=True, max_length=self.info.max_length, return_tensors="pt")

        return encode_batches(items, batch_size, self.dim, featurize, self._runner(backend, featurize),
                              normalize, show_progress, f"encode ({self.name})")

    def _runner(self, backend: str | None, featurize):
        """``features -> (B, dim)`` unnormalised, on the chosen engine (built once per engine)."""
        engine = resolve_backend(backend or self.backend, self.device.type)
        if engine not in self._runners:
            if engine == "torch":
                self._runners[engine] = torch_runner(self.model, self.device, pool=True)
            else:
                example = {k: v for k, v in featurize(["a phrase", "another"]).items()
                           if k in ("input_ids", "attention_mask")}
                local = Path(self.info.source) if self.info.kind != "hub" else None
                self._runners[engine] = OnnxRunner(self.model, example, engine, local, featurize=featurize,
                                                   tokenizer=self.tokenizer)
        return self._runners[engine]

    def similarity(self, a: list[str], b: list[str]) -> np.ndarray:
        return cosine_matrix(self.encode(a), self.encode(b))
