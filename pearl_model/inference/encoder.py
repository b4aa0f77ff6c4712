"""`PhraseEncoder.encode()`: phrases in, embeddings out, like sentence-transformers.

Every evaluator and pipeline stage calls this one method. Inputs are sorted by length so
that each batch pads to similar lengths, then put back in the caller's order.
"""
from __future__ import annotations

import contextlib
import os
import threading
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from .backbones import DEFAULT_BACKBONE, BackboneInfo, load_backbone
from .network import check_phrases as _check_phrases, fast_tokenizer, mean_pool  # noqa: F401  (re-exported)
from .onnx_backend import OnnxRunner, resolve_backend

PROGRESS_THRESHOLD = 5000  # show a progress bar by default for inputs longer than this


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    return a @ b.T


GPU_BATCH_SIZE = 1024  # phrases are short: a GPU needs large batches to amortise each forward's launches
CPU_BATCH_SIZE = 128
GPU_FLUSH_BATCHES = 32  # results wait on the GPU this many batches: one host sync per flush, bounded memory


def default_batch_size(device) -> int:
    return GPU_BATCH_SIZE if getattr(device, "type", str(device)).startswith("cuda") else CPU_BATCH_SIZE


def torch_runner(model, device, pool: bool) -> Callable:
    """``features -> (B, dim)`` unnormalised, by PyTorch: float32 numpy on the CPU, a bf16-computed
    float32 CUDA tensor on a GPU (:class:`CudaRunner`).

    ``pool``: ``model`` is a transformer (mean-pool its last hidden state); else it returns
    ``(embedding, ...)`` as :class:`~pearl_model.inference.model.PearlModel` does.
    """
    if device.type == "cuda":
        return CudaRunner(model, device, pool)

    def run(features) -> np.ndarray:
        with torch.inference_mode():
            if pool:
                return mean_pool(model(**features).last_hidden_state, features["attention_mask"]).numpy()
            return model(**features)[0].float().numpy()

    return run


def bucket(n: int) -> int:
    """``n`` rounded up so that padded batches share a few shapes (one CUDA graph each): to a
    multiple of 8 up to 64, then in four steps per doubling (at most 1/4 padding)."""
    step = max(8, 1 << max(n.bit_length() - 3, 0))
    return -(-n // step) * step


def pad_to_bucket(features: dict, pad_id: int, max_length: int) -> tuple[dict, int]:
    """``(features padded to (bucket(rows), bucket(length)), rows)``: padded tokens are masked
    out (attention and mean pooling), padded rows are dropped after the forward."""
    rows, length = features["input_ids"].shape
    extra = (0, min(bucket(length), max(max_length, length)) - length, 0, bucket(rows) - rows)
    out = {k: torch.nn.functional.pad(v, extra, value=pad_id if k == "input_ids" else 0)
           for k, v in features.items()}
    out["attention_mask"][rows:, 0] = 1  # a padding row attends to one token: no fully masked softmax
    return out, rows


class KeptForward:
    """A transformer's bf16 weights and its CUDA graphs (one per padded batch shape), kept with the
    model across ``encode()`` calls: a graph bakes in its tensors' addresses, so the weights are
    refreshed in place each call (a model being trained changes) and captured shapes replay."""

    _kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, weights: dict, dtype):
        self.device = next(iter(weights.values())).device
        self.params = {k: (v.to(dtype) if v.is_floating_point() else v.clone()) for k, v in weights.items()}
        self.graphs: dict = {}  # (rows, length) -> (graph, static inputs, static output)
        self.pool = None
        self.failed: str | None = None  # why capture failed: this model then runs without graphs
        self.lock = threading.Lock()  # one replay at a time: static inputs and outputs are shared

    @classmethod
    def of(cls, model, dtype) -> KeptForward:
        weights = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        kept = cls._kept.get(model)
        if kept is None or [(k, v.shape, v.device) for k, v in kept.params.items()] != \
                [(k, v.shape, v.device) for k, v in weights.items()]:
            kept = cls._kept[model] = cls(weights, dtype)
        else:
            with torch.no_grad():
                for k, v in weights.items():
                    kept.params[k].copy_(v)
        return kept

    @classmethod
    def release(cls, model) -> KeptForward | None:
        """Drop what is kept for ``model`` (its next ``encode()`` captures again); returns it, or None."""
        return cls._kept.pop(model, None)

    def replay(self, features: dict, forward: Callable):
        """``forward(features)`` by the graph of this shape (captured on first use): a copy of its
        output; None where capture failed."""
        with self.lock:
            entry = self.graphs.get(tuple(features["input_ids"].shape))
            if entry is None and self.failed is None:
                entry = self._capture(features, forward)
            if entry is None:
                return None
            graph, static, out = entry
            for k, v in features.items():
                static[k].copy_(v, non_blocking=True)
            graph.replay()
            return out.clone()  # the next replay overwrites ``out``

    def _capture(self, features: dict, forward: Callable):
        static = {k: v.to(self.device) for k, v in features.items()}
        try:
            side = torch.cuda.Stream(self.device)  # warm-up off the capture, as torch.cuda.graph asks
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                forward(static)
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.pool = self.pool or torch.cuda.graph_pool_handle()  # the shapes share one memory pool
            graph = torch.cuda.CUDAGraph()
            # thread_local: the tokenising thread pins memory meanwhile, which a global capture forbids
            with mask_read_skipped(), torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                out = forward(static)
        except RuntimeError as e:
            self.failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            warnings.warn(f"CUDA graph capture failed, encoding without graphs: {self.failed}", stacklevel=2)
            return None
        self.graphs[tuple(features["input_ids"].shape)] = entry = (graph, static, out)
        return entry


@contextlib.contextmanager
def mask_read_skipped():
    """Skip the host read by which transformers drops an all-ones attention mask: the mask is then
    always applied (the same attention; padded tokens are masked either way). A CUDA graph capture
    forbids the read, and in training it would stall the GPU at every forward. 4.x reads it unless
    it believes it is tracing; 5.x counts a capture as tracing, and outside one asks
    ``masking_utils._ignore_bidirectional_mask_sdpa``, told here to keep the mask."""
    patches = []
    try:
        import transformers.modeling_attn_mask_utils as mask_utils
        if hasattr(mask_utils, "is_torchdynamo_compiling"):
            patches.append((mask_utils, "is_torchdynamo_compiling", lambda: True))
    except ImportError:
        pass
    try:
        import transformers.masking_utils as masking
        if hasattr(masking, "_ignore_bidirectional_mask_sdpa"):
            patches.append((masking, "_ignore_bidirectional_mask_sdpa", lambda *args, **kwargs: False))
    except ImportError:
        pass
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    for module, name, value in patches:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


class CudaRunner:
    """The GPU path of ``encode()``: bf16 weights, inputs pinned in the tokenising threads and
    copied without blocking, results left on the GPU (``encode_batches`` syncs once per
    ``GPU_FLUSH_BATCHES``), so the host queues the next batch while the GPU runs this one.

    ``forward`` (a transformer with bf16 weights; else "eager"): "graphs", the default, pads each
    batch to a (:func:`bucket` rows, :func:`bucket` tokens) shape and replays one CUDA graph per
    shape: the forward of short phrases is a few hundred small kernels, bound by their launches
    (docs/research/speed-gpu.md). :class:`KeptForward` keeps the bf16 weights and the graphs'
    memory with the model, refreshing the weights each ``encode()`` call (a model being trained
    changes); on a CPU "graphs" pads without capturing. "buckets" pads without graphs; "eager"
    runs each batch as it comes, with a bf16 copy of the weights made per call.

    ``cast``: "autocast" casts per op instead, as training does; "fp32" runs the weights as they
    are (the reference the benchmark compares with); both run "eager"."""

    cast = "weights"  # "weights" | "autocast" | "fp32": benchmarks/encode_throughput.py --device cuda
    forward = "graphs"  # "graphs" | "buckets" | "eager": benchmarks/encode_throughput.py --device cuda
    workers = 1  # tokenising threads: the Rust tokenizer parallelises each batch itself; more measured slower

    def __init__(self, model, device, pool: bool):
        self.model, self.device, self.pool = model, device, pool
        self.dtype = torch.float16 if device.type == "cuda" and not torch.cuda.is_bf16_supported() else torch.bfloat16
        self.params, self.kept = None, None
        self.mode = self.forward if pool and self.cast == "weights" else "eager"
        if self.mode != "eager":
            self.kept = KeptForward.of(model, self.dtype)
            self.params = self.kept.params
        elif self.cast == "weights":
            # A PEARL model's character branch and heads stay float32: they are tiny, and its
            # forward concatenates their output with the pooled backbone vector in float32.
            cast = "" if pool else "backbone."
            self.params = {k: (v.to(self.dtype) if v.is_floating_point() and k.startswith(cast) else v)
                           for k, v in {**dict(model.named_parameters()), **dict(model.named_buffers())}.items()}

    def prepare(self, features: dict):
        """Runs in a tokenising thread: padding to a bucket; page-locked host memory makes the copy to
        the GPU asynchronous."""
        rows = None
        if self.mode != "eager":
            config = self.model.config
            features, rows = pad_to_bucket(features, getattr(config, "pad_token_id", None) or 0,
                                           getattr(config, "max_position_embeddings", 512))
        if self.device.type == "cuda":  # the tests run this runner on a CPU
            features = {k: v.pin_memory() for k, v in features.items()}
        return features if rows is None else (features, rows)

    def run_forward(self, feats: dict):
        """The unnormalised float32 vectors of ``feats`` (on the device)."""
        if self.params is not None:
            out = torch.func.functional_call(self.model, self.params, args=(), kwargs=feats)
        else:
            with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.cast == "autocast"):
                out = self.model(**feats)
        if self.pool:
            return mean_pool(out.last_hidden_state.float(), feats["attention_mask"])
        return out[0].float()

    def __call__(self, features):
        with torch.inference_mode():
            features, rows = features if self.mode != "eager" else (features, None)
            out = None
            if self.mode == "graphs" and self.device.type == "cuda":
                out = self.kept.replay(features, self.run_forward)
            if out is None:
                out = self.run_forward({k: v.to(self.device, non_blocking=True) for k, v in features.items()})
            return out[:rows]  # a bucket's padding rows dropped


def encode_batches(items: Sequence[str], batch_size: int, dim: int, featurize: Callable, run: Callable,
                   normalize: bool, show_progress: bool | None, desc: str,
                   lengths: Callable[[list[str]], Sequence[int]] | None = None,
                   canonical: bool = False) -> np.ndarray:
    """The encode loop every encoder shares: length-sorted batches -> ``run(featurize(batch))``,
    L2-normalised unless ``normalize=False``, put back in the caller's order.

    ``lengths``: each item's length in tokens, what a batch pads to (default: characters, which
    leave a third of a batch's tokens padding on short phrases: a padded token costs the
    transformer what a real one does).

    ``run`` may offer ``prepare`` (applied to each batch's features in the tokenising thread),
    ``workers`` (tokenising threads, default 1) and ``submit`` (start a batch, return a result
    with ``get()``: engines that run batches side by side), and may return CUDA tensors: those
    are gathered on the GPU; both kinds are collected once per ``GPU_FLUSH_BATCHES`` batches.

    ``canonical``: each item's vector is a function of the item alone, whatever it is encoded with.
    A batch then holds items of one length (no padding tokens: padding moves the attention's sums)
    and is filled up to ``batch_size`` rows with copies of its first item (fp32 engines pick their
    matrix kernels by row count; openvino-bf16 does not, but one rule serves every engine). Costs at
    most ``batch_size - 1`` rows per distinct length: for stores that hand a vector computed in one
    build to another (a reused vector must be the one a build from scratch computes)."""
    if canonical and lengths is None:
        raise ValueError("canonical batches need the items' lengths in tokens")
    size = np.asarray(lengths(list(items)) if lengths is not None else [len(p) for p in items])
    order = np.argsort(-size, kind="stable")
    out = np.empty((len(items), dim), dtype=np.float32)
    if canonical:  # batches never straddle two lengths
        groups = np.split(order, np.flatnonzero(np.diff(size[order])) + 1)
        batches = [g[start:start + batch_size] for g in groups for start in range(0, len(g), batch_size)]
    else:
        batches = [order[start:start + batch_size] for start in range(0, len(items), batch_size)]
    prepare = getattr(run, "prepare", None)
    submit = getattr(run, "submit", None)
    workers = getattr(run, "workers", 1)

    def features(b: int):
        batch = [items[i] for i in batches[b]]
        f = featurize(batch + batch[:1] * (batch_size - len(batch)) if canonical else batch)
        return prepare(f) if prepare is not None else f

    pending: list = []  # (indices, CUDA tensor or the engine's pending result) not yet on the host

    def store(idx, emb: np.ndarray) -> None:
        emb = emb[:len(idx)]  # a canonical batch's filler rows dropped
        if normalize:
            emb = emb / np.clip(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12, None)
        out[idx] = emb

    def flush() -> None:
        if pending and hasattr(pending[0][1], "get"):  # OnnxRunner.submit's
            for idx, emb in pending:
                store(idx, emb.get())
        elif pending:
            emb = torch.cat([e[:len(i)] for i, e in pending])
            if normalize:
                emb = torch.nn.functional.normalize(emb, dim=1)
            out[np.concatenate([i for i, _ in pending])] = emb.cpu().numpy()
        pending.clear()

    steps = range(len(batches))
    if show_progress or (show_progress is None and len(items) > PROGRESS_THRESHOLD):
        steps = tqdm(steps, desc=desc, unit="batch")
    if not batches:
        return out
    # Batches are tokenised in threads ahead of the one running: fast tokenizers, ONNX Runtime and
    # CUDA all release the GIL, so the engine does not wait on the tokenizer. The first batch is
    # tokenised here: it fixes the tokenizer's padding/truncation state before threads share it.
    first = features(0)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        ahead = {b: pool.submit(features, b) for b in range(1, min(len(batches), 2 * workers))}
        for b in steps:
            f = first if b == 0 else ahead.pop(b).result()
            nxt = b + 2 * workers
            if nxt < len(batches):
                ahead[nxt] = pool.submit(features, nxt)
            emb = submit(f) if submit is not None else run(f)
            if isinstance(emb, np.ndarray):
                store(batches[b], emb)
                continue
            pending.append((batches[b], emb))
            if len(pending) >= GPU_FLUSH_BATCHES:
                flush()
    flush()
    return out


class PhraseEncoder:
    """A transformer backbone with mean pooling (and the backbone's query prefix)."""

    def __init__(self, model, tokenizer, info: BackboneInfo, backend: str = "auto"):
        self.model, self.tokenizer, self.info = model, tokenizer, info
        self.backend = backend  # the engine encode() uses unless told otherwise
        self._runners: dict = {}

    @classmethod
    def load_unchecked(cls, spec: str = DEFAULT_BACKBONE, cache_dir: str | os.PathLike | None = None,
                       device: str | None = None, backend: str = "auto") -> "PhraseEncoder":
        """Below the door, nothing checked: only :mod:`.model_dirs` calls this, after checking
        ``spec``. Open a backbone with ``open_model(spec, backbone=True)`` or ``load_encoder``."""
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

    def encode(self, phrases: list[str], batch_size: int | None = None, normalize: bool = True,
               show_progress: bool | None = None, backend: str | None = None, canonical: bool = False) -> np.ndarray:
        """Embeddings of ``phrases`` as float32 (n, dim), in input order.

        Phrases are truncated at the backbone's max length in tokens. An empty or
        whitespace-only phrase is encoded as the query prefix alone (for E5, "query: "),
        so it gets a defined vector rather than an error. ``backend``: the engine
        (:mod:`pearl_model.inference.onnx_backend`; default: this encoder's ``backend``, "auto").
        ``batch_size``: default 128 on a CPU, 1024 on a GPU. ``canonical``: a phrase's vector is the
        same bits whatever it is encoded with (:func:`encode_batches`), for vectors a later build reuses.
        """
        items = _check_phrases(phrases)
        if batch_size is None:
            batch_size = default_batch_size(self.device)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)

        return encode_batches(items, batch_size, self.dim, self.featurize, self._runner(backend),
                              normalize, show_progress, f"encode ({self.name})", self.token_lengths, canonical)

    def token_lengths(self, phrases: list[str]) -> np.ndarray:
        """Each phrase's length in tokens as :meth:`featurize` tokenises it."""
        return fast_tokenizer(self.tokenizer, self.info.max_length).lengths([self.info.query_prefix + p.strip()
                                                                           for p in phrases])

    def featurize(self, batch: list[str]) -> dict:
        """The backbone's inputs for ``batch``: query prefix, truncated at its max length, padded."""
        return fast_tokenizer(self.tokenizer, self.info.max_length)([self.info.query_prefix + p.strip() for p in batch])

    def _runner(self, backend: str | None):
        """``features -> (B, dim)`` unnormalised, on the chosen engine (an exported graph built once
        per engine; the PyTorch runner every call, since it holds a copy of the weights on a GPU)."""
        engine = resolve_backend(backend or self.backend, self.device.type)
        if engine == "torch":
            return torch_runner(self.model, self.device, pool=True)
        return self.exported_graph(engine)

    def exported_graph(self, engine: str = "onnx") -> OnnxRunner:
        """This model's graph exported for an ONNX engine (built on first use): its ``dir``, ``path``
        and ``input_names`` are what tools that re-quantise or re-compile it start from."""
        if engine not in self._runners:
            example = {k: v for k, v in self.featurize(["a phrase", "another"]).items()
                       if k in ("input_ids", "attention_mask")}
            local = Path(self.info.source) if self.info.kind != "hub" else None
            self._runners[engine] = OnnxRunner(self.model, example, engine, local, featurize=self.featurize,
                                               tokenizer=self.tokenizer)
        return self._runners[engine]

    def similarity(self, a: list[str], b: list[str]) -> np.ndarray:
        return cosine_matrix(self.encode(a), self.encode(b))
