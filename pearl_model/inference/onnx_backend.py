"""ONNX Runtime inference for the phrase encoders: a graph built once per model, cached.

``encode(..., backend=)`` picks the engine that runs the model's forward pass:

    torch       PyTorch eager (the reference; the only one on a model being trained)
    onnx        ONNX Runtime fp32 with full graph optimisation (fused attention, layer norm,
                GELU): the same vectors as torch (cosine >= 0.9999) several times faster on CPU
    onnx-int8   the fp32 graph with int8 dynamic quantisation of its MatMuls (VNNI on this
                CPU): faster again, mean cosine to fp32 about 0.99, so never the default
    openvino    the same fp32 graph compiled by OpenVINO at f32 precision
    openvino-bf16  OpenVINO at bf16 inference precision (its own default on CPUs with
                AVX512-BF16 or AMX, as this one): faster, its loss in docs/research/eval-engines-quality.md
    openvino-int8  the graph quantised statically by NNCF (int8 weights and activations,
                SmoothQuant at alpha 0.75, ranges calibrated on phrases drawn from the model's own
                vocabulary; the parts left in float at bf16 where the CPU runs it natively), run by
                OpenVINO: closer to fp32 than onnx-int8's dynamic quantisation (docs/research/speed-encoding.md,
                docs/research/speed-quantisation.md)
    auto        on CPU: openvino-bf16 where the CPU runs bf16 natively (OpenVINO reports BF16:
                AVX512-BF16 or AMX), else onnx, else torch; on CUDA torch (bf16 autocast there
                is already faster than ONNX Runtime's CUDA provider)

Measured in ``benchmarks/encode_throughput.py``; why ONNX Runtime and not a hand-written path:
it is a well-kept engine whose CPU kernels and graph fusions we could not match by hand.

The graph holds the whole forward pass up to the unnormalised embedding (mean pooling and, for
a PEARL model, the character branch and the concatenation), so the engine returns exactly what
``encode(normalize=False)`` returns. A graph the model directory ships (``<model dir>/onnx/``: the
export builds the fp32 one) is read from there; every other graph (int8, OpenVINO IR, or one
rebuilt because the shipped one is for other weights) is built under
``$PEARL_CACHE/onnx/<fingerprint>/``, one file per engine (``model.onnx``, ``model_int8.onnx``,
``model_int8_<recipe>_ov.xml``), never in the model directory: encoding leaves a committed model's files
as its checksums list them. ``graph.json`` records the fingerprint of the weights a directory's
graphs were exported from: a missing or stale graph is rebuilt (seconds), a corrupt one is an
error naming the file.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import itertools
import json
import os
import random
import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .backbones import cache_root

# torch (and the network built on it), onnxruntime, openvino and nncf are imported where a graph is
# built or run: the CLI imports this module at start for BACKENDS and resolve_backend.

__all__ = ["BACKENDS", "OnnxGraphError", "OnnxRunner", "resolve_backend", "fingerprint", "graph_dir_for"]

BACKENDS = ("auto", "torch", "onnx", "onnx-int8", "openvino", "openvino-bf16", "openvino-int8")
GRAPH_FORMAT = 1  # bump when the exported graph's inputs or outputs change
OPSET = 17
_FILES = {"onnx": "model.onnx", "onnx-int8": "model_int8.onnx", "openvino": "model.onnx",
          "openvino-bf16": "model.onnx",  # OpenVINO compiles the fp32 ONNX graph itself
          "openvino-int8": None}  # an OpenVINO IR named by its recipe (below, after Int8Recipe), weights in .bin
_DERIVED = "model_int8*"  # the quantised graphs: made from one set of weights
CALIBRATION_PHRASES, CALIBRATION_BATCH = 512, 32
_PINS = {"onnxruntime": "onnxruntime==1.31.1", "openvino": "openvino==2026.4.1", "nncf": "nncf==3.4.0"}


def _engine(backend: str) -> str:
    return "openvino" if backend.startswith("openvino") else "onnxruntime"


def backend_packages(backend: str) -> tuple[str, ...]:
    """The packages an exported-graph backend needs installed."""
    return (_engine(backend),) + (("nncf",) if backend == "openvino-int8" else ())


def calibration_phrases(tokenizer, n: int = CALIBRATION_PHRASES, seed: int = 0) -> list[str]:
    """``n`` phrases of 1-4 alphabetic vocabulary entries drawn (seeded) from the tokenizer's vocabulary.

    Why not corpus or benchmark text: a model is quantised wherever it is first used, with no
    corpus at hand, and never on evaluation data; its own vocabulary is always there, and
    activation ranges need typical token statistics, not meaning. In a subword vocabulary most
    entries are pieces of words ("vori juta ETS dham"); whole words alone calibrated worse
    (docs/research/speed-quantisation.md)."""
    words = sorted(w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) >= 3)
    if not words:
        raise ValueError("the tokenizer's vocabulary has no alphabetic entries to calibrate with")
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def feature_batches(featurize, phrases: list[str], inputs, size: int = CALIBRATION_BATCH) -> list[dict]:
    """``phrases`` featurized in batches of ``size``, as numpy arrays, only the graph's ``inputs``:
    the items of an NNCF calibration (or validation) dataset."""
    batches = []
    for start in range(0, len(phrases), size):
        f = featurize(phrases[start:start + size])
        batches.append({k: (v.numpy() if hasattr(v, "numpy") else np.asarray(v)) for k, v in f.items()
                        if k in inputs})
    return batches


# Parts of a transformer graph an int8 recipe may leave in float, as regular expressions on its
# operations' names (the exporter keeps the PyTorch module paths: .../encoder/layer.3/attention/...).
KEEP_FLOAT = {
    "attention": (r".*/layer\.\d+/attention/.*",),  # Q, K, V, their two activation MatMuls, the output projection
    # Q x K^T (NNCF's transformer type leaves the other activation x activation MatMul, the
    # attention probabilities x V, in float itself)
    "scores": (r".*/layer\.\d+/attention/self/MatMul(_\d+)?$",),
    "ffn_down": (r".*/layer\.\d+/output/dense/.*",),  # the FFN's second MatMul (its input: GELU's output)
    "ends": (),  # the first and the last transformer layer: their names come from the graph
}
_LAYER = re.compile(r"/layer\.(\d+)/")
_PART = re.compile(r"(?P<part>[a-z_]+)(@(?P<first>\d+)-(?P<last>\d+))?")  # a keep_float entry


@dataclass(frozen=True)
class Int8Recipe:
    """An NNCF static post-training quantisation recipe (int8 weights and activations).

    ``keep_float``: :data:`KEEP_FLOAT` parts left unquantised (run at the engine's float precision),
    each in every layer or, written ``<part>@<first>-<last>``, in those layers only (``ffn_down@9-11``);
    ``smooth_quant``: SmoothQuant's alpha on MatMuls (NNCF's transformer default 0.95; negative: off);
    ``preset``: NNCF's "mixed" (symmetric weights, asymmetric activations; its transformer default)
    or "performance" (symmetric both)."""

    keep_float: tuple[str, ...] = ()
    smooth_quant: float = 0.95
    preset: str = "mixed"

    def __post_init__(self):
        unknown = sorted(p for p in self.keep_float if not (m := _PART.fullmatch(p)) or m["part"] not in KEEP_FLOAT
                         or (m["first"] is not None and (m["part"] == "ends" or int(m["first"]) > int(m["last"]))))
        if unknown:
            raise ValueError(f"unknown keep_float parts {unknown}; known: {sorted(KEEP_FLOAT)}")
        if self.preset not in ("mixed", "performance"):
            raise ValueError(f"preset must be 'mixed' or 'performance', got {self.preset!r}")

    def key(self, calibration: int) -> str:
        """A short name of this recipe with the version of its ``calibration`` phrases."""
        text = f"{sorted(self.keep_float)}:{self.smooth_quant}:{self.preset}:{calibration}"
        return hashlib.blake2b(text.encode(), digest_size=4).hexdigest()

    def ignored_patterns(self, op_names) -> list[str]:
        """The regular expressions of the operations this recipe leaves in float, for a graph whose
        operations are ``op_names``."""
        patterns = []
        for m in map(_PART.fullmatch, self.keep_float):
            layers = m["first"] and "|".join(map(str, range(int(m["first"]), int(m["last"]) + 1)))
            patterns += [p.replace(r"layer\.\d+", f"layer\\.({layers})") if layers else p for p in KEEP_FLOAT[m["part"]]]
        if "ends" in self.keep_float:
            layers = {int(m.group(1)) for n in op_names if (m := _LAYER.search(n))}
            if not layers:
                raise ValueError("keep_float 'ends': the graph names no transformer layers (/layer.N/)")
            patterns += [rf".*/layer\.{i}/.*" for i in sorted({min(layers), max(layers)})]
        return patterns


# openvino-int8's recipe: NNCF's transformer defaults but SmoothQuant at alpha 0.75, not 0.95: the
# fastest recipe within the bar on dev data (CoNLL's dev clustering moved -0.63 beyond its interval
# at 0.95), as fast (benchmarks/quantization_recipes.py, results/engines_dev_cpu.json)
OPENVINO_INT8 = Int8Recipe(smooth_quant=0.75)
CALIBRATION_VERSION = 1  # bump when calibration_phrases changes: it is part of the graph's name
# The graph's file name carries its recipe and calibration: a graph of another recipe is never served.
_FILES["openvino-int8"] = f"model_int8_{OPENVINO_INT8.key(CALIBRATION_VERSION)}_ov.xml"


def quantize_int8(model, batches: list[dict], recipe: Int8Recipe):
    """``model`` (an OpenVINO model) quantised by NNCF as ``recipe`` says, its activation ranges
    calibrated on ``batches`` (:func:`feature_batches`); the transformer model type keeps the
    attention softmax and layer norms in float."""
    import nncf

    patterns = recipe.ignored_patterns([op.get_friendly_name() for op in model.get_ops()])
    return nncf.quantize(
        model, nncf.Dataset(batches), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(batches),
        preset=nncf.QuantizationPreset.MIXED if recipe.preset == "mixed" else nncf.QuantizationPreset.PERFORMANCE,
        ignored_scope=nncf.IgnoredScope(patterns=patterns, validate=False) if patterns else None,
        advanced_parameters=nncf.AdvancedQuantizationParameters(
            smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(matmul=recipe.smooth_quant)))


def intra_op_threads() -> int:
    """The threads one ONNX session may use: torch's count (OMP_NUM_THREADS when set, else the cores)."""
    import torch

    return max(1, torch.get_num_threads())


class OnnxGraphError(RuntimeError):
    """An exported graph that exists but cannot be read or run; the message names the file."""


def engine_available(engine: str) -> bool:
    return importlib.util.find_spec(engine) is not None


def onnxruntime_available() -> bool:
    return engine_available("onnxruntime")


@functools.cache
def cpu_runs_bf16() -> bool:
    """OpenVINO is installed and this CPU has native bf16 (where openvino-bf16 pays: well ahead of
    onnx, every benchmark dataset within 0.5 of fp32 but the PPDB probes' seed noise;
    docs/research/speed-encoding.md, docs/research/eval-engines-quality.md)."""
    if not engine_available("openvino"):
        return False
    import openvino as ov

    try:
        return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except RuntimeError:  # no CPU plugin: nothing to compile with
        return False


def resolve_backend(backend: str | None, device_type: str) -> str:
    """The concrete engine for ``backend`` (None or "auto": the fastest default) on a device."""
    backend = backend or "auto"
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto" and device_type == "cpu" and os.environ.get("PEARL_BACKEND"):
        backend = os.environ["PEARL_BACKEND"]  # an operator's pin: one CPU engine on every machine
        if backend not in BACKENDS:
            raise ValueError(f"PEARL_BACKEND must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        if device_type != "cpu":
            return "torch"
        if cpu_runs_bf16():
            return "openvino-bf16"
        return "onnx" if onnxruntime_available() else "torch"
    if backend != "torch":
        if device_type != "cpu":
            raise ValueError(f"backend {backend!r} runs on CPU; this model is on {device_type} (use 'torch')")
        for package in backend_packages(backend):
            if not engine_available(package):
                raise ImportError(f"backend {backend!r} needs {package}: pip install {_PINS[package]}")
        if backend == "openvino-bf16" and not cpu_runs_bf16():
            # Without the instructions OpenVINO emulates bf16: slower than fp32 for nothing.
            warnings.warn("openvino-bf16 needs a CPU that runs bf16 natively (AVX512-BF16 or AMX); "
                          "this one does not: using openvino (fp32)", RuntimeWarning, stacklevel=2)
            return "openvino"
    return backend


def fingerprint(module) -> str:
    """Hash of a module's parameters and buffers (names, shapes, dtypes, values) and the graph format."""
    import torch

    h = hashlib.blake2b(f"pearl-onnx:{GRAPH_FORMAT}".encode(), digest_size=16)
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        if t.numel():
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _graph_current(directory: Path, backend: str, fp: str, inputs: list[str]) -> bool:
    """Whether ``directory`` holds ``backend``'s graph exported from the weights ``fp`` with ``inputs``."""
    try:
        info = json.loads((directory / "graph.json").read_text())
    except (OSError, ValueError):
        return False
    return info.get("fingerprint") == fp and info.get("inputs") == inputs and (directory / _FILES[backend]).is_file()


def graph_dir_for(model_dir: str | os.PathLike | None, fp: str, backend: str = "onnx",
                  inputs: list[str] | None = None) -> Path:
    """``<model_dir>/onnx`` when it ships ``backend``'s current graph (read only), else the
    per-fingerprint cache directory, where missing graphs are built."""
    if model_dir is not None and inputs is not None:
        shipped = Path(model_dir) / "onnx"
        if _graph_current(shipped, backend, fp, inputs):
            return shipped
    return cache_root() / "onnx" / fp[:16]


def _embedding_only(model):
    """``model`` wrapped so that its one output is the unnormalised embedding (what the graph holds)."""
    import torch

    from .network import PearlNetwork, mean_pool

    class Embedding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            if isinstance(self.model, PearlNetwork):  # PearlModel among them
                return self.model(*inputs)[0]  # the type logits are training's business
            ids, mask = inputs
            return mean_pool(self.model(input_ids=ids, attention_mask=mask).last_hidden_state, mask).float()

    return Embedding().eval()


def _export(model, example: dict, path: Path) -> None:
    import torch

    names = list(example)
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
            "char_ids": {0: "batch", 1: "words"}, "word_mask": {0: "batch", 1: "words"},
            "embedding": {0: "batch"}}
    # TorchScript exporter (dynamo=False): one self-contained file, exported in ~1 s where the
    # dynamo exporter takes ~40 s and writes the weights as external data.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shape checks traced as constants: intended
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter: chosen, see above
        torch.onnx.export(_embedding_only(model), tuple(example[n] for n in names), str(path),
                          input_names=names, output_names=["embedding"],
                          dynamic_axes={k: v for k, v in axes.items() if k in names or k == "embedding"},
                          opset_version=OPSET, dynamo=False)


class OnnxRunner:
    """One model's exported graph in its engine (ONNX Runtime or OpenVINO):
    ``runner(features) -> (B, dim) float32`` unnormalised.

    ``example``: a batch of features (torch tensors by input name) to trace the graph with;
    ``featurize`` and ``tokenizer`` (phrases -> features, and the vocabulary to draw from):
    what ``openvino-int8`` calibrates its activation ranges with. ``model_dir``: the model's
    directory, whose shipped graph is read (never written); ``graph_dir``: build the graph there
    instead of the cache (the export, shipping its graph).
    """

    def __init__(self, model, example: dict, backend: str, model_dir: str | os.PathLike | None = None,
                 threads: int | None = None, featurize=None, tokenizer=None,
                 graph_dir: str | os.PathLike | None = None):
        if backend not in _FILES:
            raise ValueError(f"not an ONNX backend: {backend!r}")
        self.backend, self.engine = backend, _engine(backend)
        self.fingerprint = fingerprint(model)
        self.input_names = list(example)
        self.dir = Path(graph_dir) if graph_dir is not None else \
            graph_dir_for(model_dir, self.fingerprint, backend, self.input_names)
        self.path = self.dir / _FILES[backend]
        self.featurize, self.tokenizer = featurize, tokenizer
        if not self._current():
            self._build(model, example)
        if self.engine == "openvino":
            self.session = self._open_openvino(threads)
            self.feed_names = self.session.feed_names
        else:
            self.session = self._open(threads)
            # the exporter drops inputs the graph never reads (no character branch: char_ids, word_mask)
            self.feed_names = {i.name for i in self.session.get_inputs()}

    def _current(self) -> bool:
        return _graph_current(self.dir, self.backend, self.fingerprint, self.input_names)

    def _build(self, model, example: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            previous = json.loads((self.dir / "graph.json").read_text()).get("fingerprint")
        except (OSError, ValueError):
            previous = None
        fp32 = self.dir / _FILES["onnx"]
        with tempfile.TemporaryDirectory(dir=self.dir) as tmp:  # never a half-written graph in place
            tmp_fp32 = Path(tmp) / _FILES["onnx"]
            _export(model, example, tmp_fp32)
            if previous not in (None, self.fingerprint):  # a directory per fingerprint: only a prefix clash
                for path in self.dir.glob(_DERIVED):  # quantised from other weights
                    path.unlink(missing_ok=True)
            if self.backend == "onnx-int8":
                from onnxruntime.quantization import QuantType, quantize_dynamic

                tmp_int8 = Path(tmp) / _FILES["onnx-int8"]
                quantize_dynamic(str(tmp_fp32), str(tmp_int8), weight_type=QuantType.QInt8)
                os.replace(tmp_int8, self.path)
            if self.backend == "openvino-int8":
                tmp_xml = self._quantize_openvino(tmp_fp32, Path(tmp))
                os.replace(tmp_xml.with_suffix(".bin"), self.path.with_suffix(".bin"))  # weights before the graph
                os.replace(tmp_xml, self.path)
            os.replace(tmp_fp32, fp32)
        meta = {"fingerprint": self.fingerprint, "inputs": self.input_names, "format": GRAPH_FORMAT,
                "opset": OPSET, "files": sorted(p.name for p in self.dir.glob("*.onnx"))}
        tmp_meta = self.dir / f".graph.json.{os.getpid()}"
        tmp_meta.write_text(json.dumps(meta, indent=1) + "\n")
        os.replace(tmp_meta, self.dir / "graph.json")  # concurrent builders (Dask workers) never see half a file

    def _quantize_openvino(self, fp32: Path, tmp: Path) -> Path:
        """NNCF post-training quantisation of the fp32 graph by :data:`OPENVINO_INT8`, calibrated
        on :func:`calibration_phrases`."""
        import openvino as ov

        if self.featurize is None or self.tokenizer is None:
            raise ValueError("openvino-int8 calibrates on phrases: OnnxRunner(..., featurize=, tokenizer=)")
        batches = feature_batches(self.featurize, calibration_phrases(self.tokenizer), self.input_names)
        quantized = quantize_int8(ov.Core().read_model(str(fp32)), batches, OPENVINO_INT8)
        out = tmp / _FILES["openvino-int8"]
        ov.save_model(quantized, str(out), compress_to_fp16=False)
        return out

    def _open(self, threads: int | None):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # ORT's own default is one thread per physical core, whatever OMP_NUM_THREADS says; torch's
        # count follows it, and Dask's worker processes set it to their share (1): without this, n
        # workers each ran a pool of every core.
        opts.intra_op_num_threads = threads or intra_op_threads()
        try:
            return ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT raises its own Fail/InvalidProtobuf/... types
            raise OnnxGraphError(f"{self.path} is not a usable ONNX graph ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0][:200]}); delete it and it is rebuilt") from e

    def _open_openvino(self, threads: int | None) -> "OpenVinoRequests":
        # openvino-int8's float parts (the operations its recipe leaves unquantised) at bf16 where the
        # CPU runs it natively, as its recipe was chosen (benchmarks/quantization_recipes.py)
        precision = "bf16" if self.backend == "openvino-bf16" or (self.backend == "openvino-int8" and cpu_runs_bf16()) \
            else "f32"
        try:
            return OpenVinoRequests(self.path, precision, threads)
        except Exception as e:  # OpenVINO raises RuntimeError subclasses of its own
            raise OnnxGraphError(f"{self.path} is not a usable graph for OpenVINO ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0][:200]}); delete it and it is rebuilt") from e

    def submit(self, features: dict) -> "Pending | np.ndarray":
        """Start ``features`` on the engine and return at once where it runs requests side by side
        (OpenVINO): ``.get()`` of the result waits for it. Else the same as calling the runner."""
        if self.engine != "openvino":
            return self(features)
        return self.session.submit(self._feeds(features))

    def _feeds(self, features: dict) -> dict:
        return {n: (v.numpy() if hasattr(v, "numpy") else np.asarray(v)) for n, v in features.items()
                if n in self.feed_names}

    def __call__(self, features: dict) -> np.ndarray:
        if self.engine == "openvino":
            return self.submit(features).get()
        return self.session.run(["embedding"], self._feeds(features))[0].astype(np.float32, copy=False)


class OpenVinoRequests:
    """A graph (a path, or an OpenVINO model) compiled by OpenVINO for the CPU at ``precision``
    ("bf16" or "f32"), run as the OpenVINO engines run it: :meth:`submit` starts a batch and
    returns at once, ``.get()`` of its result waits for it. ``config``: more CPU plugin properties."""

    def __init__(self, graph, precision: str, threads: int | None = None, config: dict | None = None):
        import openvino as ov

        threads = threads or intra_op_threads()
        # Two streams of half the threads each, fed two batches at once: short phrases leave a
        # single request's threads waiting on each other; measured +10-16% here.
        hint = {"PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": 2} if threads >= 2 else {"PERFORMANCE_HINT": "LATENCY"}
        # No pinning: OpenVINO pins its inference threads to the lowest cores, so n Dask worker
        # processes of one thread each all ran on core 0 (two processes: 5 s of CPU each, 9.9 s wall).
        compiled = ov.Core().compile_model(graph if isinstance(graph, ov.Model) else str(graph), "CPU", {
            "INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads, "ENABLE_CPU_PINNING": False,
            **hint, **(config or {})})
        output = compiled.output(0)  # the graph's one output (OpenVINO may rename it)
        self.queue = ov.AsyncInferQueue(compiled, max(1, compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
        self._done: dict[int, np.ndarray] = {}
        self._keys = itertools.count()  # next() is atomic: threads sharing the runner get distinct keys

        def finished(request, key: int) -> None:  # in OpenVINO's thread: the request's buffer is reused
            self._done[key] = np.array(request.get_tensor(output).data, dtype=np.float32)

        self.queue.set_callback(finished)
        # an input may carry several names (word_mask also answers to its Cast's output): all count
        self.feed_names = {n for i in compiled.inputs for n in i.get_names()}

    def submit(self, feeds: dict) -> "Pending":
        """Start ``feeds`` (numpy arrays by input name); waits only while every request is busy."""
        key = next(self._keys)
        self.queue.start_async(feeds, key)
        return Pending(self, key)

    def __call__(self, feeds: dict) -> np.ndarray:
        return self.submit(feeds).get()


class Pending:
    """A batch started by :meth:`OpenVinoRequests.submit`; ``get()`` waits for its embeddings."""

    def __init__(self, requests: OpenVinoRequests, key: int):
        self.requests, self.key = requests, key

    def get(self) -> np.ndarray:
        if self.key not in self.requests._done:
            self.requests.queue.wait_all()
        return self.requests._done.pop(self.key)
