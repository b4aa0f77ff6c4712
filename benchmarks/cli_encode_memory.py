"""Peak RSS of `pearl encode --file` by input size and output format: does memory stay flat?

    python benchmarks/cli_encode_memory.py                               # 10k and 1M phrases, npy/jsonl/tsv
    python benchmarks/cli_encode_memory.py --sizes 10000 --code /tmp/old  # another checkout's `pearl` (a before)

Each run is a fresh `python -m pearl_cli encode --file PHRASES --out /dev/null --format F` process
(its own peak RSS from wait4, so runs do not mask each other). The model is a random-weight BERT
with one layer and --dim hidden units (384 by default: the E5 backbone's vector size), so that its
own memory is small and what grows with the input shows; a 1-phrase run gives the floor (Python,
torch, the model). /dev/null keeps the disk out of it: what is written to a real --out goes
through the page cache, not the process's memory. Results: benchmarks/results/cli_encode_memory_cpu.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tiny_model(path: Path, dim: int, vocab: list[str]) -> Path:
    import torch
    import transformers

    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *vocab]))
    transformers.BertTokenizerFast(str(path / "vocab.txt")).save_pretrained(path)
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(vocab) + 5, hidden_size=dim, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    transformers.BertModel(cfg, add_pooling_layer=False).save_pretrained(path)
    (path / "pearl_backbone.json").write_text(json.dumps({"pooling": "mean", "query_prefix": "",
                                                         "add_pooling_layer": False}))
    return path


def phrases_file(path: Path, n: int, vocab: list[str]) -> Path:
    rng = random.Random(n)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(" ".join(rng.choices(vocab, k=rng.randint(1, 4))) + "\n" for _ in range(n))
    return path


def run(code: Path, model: Path, phrases: Path, fmt: str, batch_size: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "PEARL_BACKEND": "torch"}
    cmd = [sys.executable, "-m", "pearl_cli", "encode", "--file", str(phrases), "--out", "/dev/null",
           "--format", fmt, "--backbone", str(model), "--backend", "torch", "--batch-size", str(batch_size)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=code)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    row = {"format": fmt, "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "seconds": round(seconds, 1), "rc": rc}
    if rc != 0:
        row["error"] = stderr.decode(errors="replace").strip().splitlines()[-1:]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--formats", nargs="+", default=["npy", "jsonl", "tsv"])
    ap.add_argument("--dim", type=int, default=384, help="the tiny model's vector size")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose pearl_cli runs (default: this one)")
    ap.add_argument("--label", default="streaming", help="the key of these runs in the results")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cli_encode_memory_cpu.json")
    args = ap.parse_args()

    vocab = [f"w{i}" for i in range(2000)]
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = tiny_model(tmp / "model", args.dim, vocab)
        rows = [{"phrases": 1, "dim": args.dim, **run(args.code, model, phrases_file(tmp / "p1.txt", 1, vocab), "npy", args.batch_size)}]
        print(rows[-1], flush=True)
        for n in args.sizes:
            src = phrases_file(tmp / f"p{n}.txt", n, vocab)
            for fmt in args.formats:
                rows.append({"phrases": n, "dim": args.dim, **run(args.code, model, src, fmt, args.batch_size)})
                print(rows[-1], flush=True)
            src.unlink()
    runs = results.setdefault("runs", {}).setdefault(args.label, [])  # runs at other sizes or dims are kept
    new = {(r["phrases"], r["dim"], r["format"]) for r in rows}
    runs[:] = sorted([r for r in runs if (r["phrases"], r["dim"], r["format"]) not in new] + rows,
                     key=lambda r: (-r["dim"], r["phrases"], args.formats.index(r["format"])
                                    if r["format"] in args.formats else 99))
    results["setup"] = {"model": "random-weight BERT, 1 layer, `dim` hidden units (vectors: dim x float32)",
                        "backend": "torch", "batch_size": args.batch_size, "out": "/dev/null",
                        "phrases": "1-4 words of a 2000-word vocabulary, one a line",
                        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), {platform.system()}",
                        "python": platform.python_version(),
                        "seconds": "wall time on a machine shared with other jobs: not comparable between runs"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
