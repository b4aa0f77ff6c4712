"""Stage: `training_set` (+ `char_encoder`) -> `models/<version>`: PEARL trained, averaged, exported.

The model version is a hash of the training-set and character-encoder versions and every
training parameter, so re-running `train` with nothing changed trains nothing, and a run
that was interrupted resumes from its last checkpoint (checkpoints live under
`<storage_root>/checkpoints/<model version>/` for a local root, else in the local cache).
The exported directory (a transformers backbone + the character branch and head +
a sentence-transformers configuration; see `pearl_model.inference.export`) is uploaded as a FileSet,
with the training log beside the weights.

The corpus's own validation signal: the training set's `heldout_aliases` (aliases of articles
kept out of training) are scored as alias -> title retrieval among the held-out titles and
hash-chosen distractor titles, before training, after each epoch and on the exported
(averaged) model; the scores go in the summary, the training log and `training-curves`.

The backbone's dev scores (the bar a checkpoint is chosen against) are kept under
`<storage_root>/dev_baselines/<SHA-256 of their key>/rows.json` (`selection.baseline_key`: backbone
files, dev files, held-out aliases, WordNet tasks, engine, scoring code), written with its writer's
record and read back only through the verified reader: a later run with the same key reads them
instead of encoding the dev data with the backbone again; a damaged entry is computed again, and said.
"""
from __future__ import annotations

import fcntl
import hashlib
import heapq
import json
import logging
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from storage.buckets import stable_hash
from storage.datasets import Dataset, check_version, latest_version, resolve_root
from storage.files import FileSet, plan_fileset
from storage.schemas import ALIASES, HELDOUT_ALIASES, TRAINING_SET
from storage.verified import RECORDS, read_recorded, write_recorded

# -2: held-out alias retrieval, positive_kinds; -3: the change_case positive kind; -4: checkpoint chosen on dev;
# -5: char_scale at export (and in the dev selection); -6: the settings hashed are TrainConfig.version_params();
# -7: anchors, positives and negatives run as separate padded groups (same model up to float rounding);
# -8: the dev selection's PPDB probe waits 20 epochs (evaluation.dev.DEV_PROBE_PATIENCE);
# -9: the WordNet groups of names are dev signals of their own (selection.synonym_signal)
CODE_VERSION = "train-9"
HISTORY_FILE = "training_log.json"
LOCK = ".lock"  # a run's checkpoint directory is its own while a live process holds this file's lock
BASELINES, BASELINE_ROWS = "dev_baselines", "rows.json"  # the backbone's dev rows, kept by their key
log = logging.getLogger(__name__)

def check_train_config(cfg) -> None:
    """What a TrainConfig's own bounds cannot see: a warning for candidates the user listed that nothing
    chooses among (the recipe's own list, left as it is, is no mistake: the export takes its first)."""
    for name, values in (("char_scale", cfg.char_scales), ("average_weight", cfg.average_weights)):
        if len(values) > 1 and not cfg.select_every and name in cfg.model_fields_set:
            log.warning("%s lists %d candidates but select_every is 0: nothing chooses among them, the export "
                        "uses the first (%s)", name, len(values), values[0])


def check_holdout(alias_holdout_pairs: int, alias_holdout_titles: int) -> None:
    for name, value in (("alias_holdout_pairs", alias_holdout_pairs), ("alias_holdout_titles", alias_holdout_titles)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")


class TrainingSetMissing(FileNotFoundError):
    """No published training set: build-corpus has not run on this storage root."""


def resolve_training_set(storage_root: str, version: str | None = None) -> Dataset:
    root = resolve_root(storage_root)
    version = check_version("training_set_version", version) if version else latest_version(root, "training_set")
    if version is None:
        raise TrainingSetMissing(f"no training_set under {root}: run `prefect deployment run build-corpus/wiki` "
                                 "first, or pass training_set_version")
    ds = Dataset(root, "training_set", version, TRAINING_SET)
    ds.manifest()  # an unfinished version is never read: DatasetIncomplete names it
    return ds


def word_vectors_of(training_set: Dataset) -> Dataset:
    """The fastText vectors the training set's positives were mined with (via its manifests)."""
    from storage.schemas import WORD_VECTORS

    aug = Dataset(training_set.root, "augmentations", training_set.manifest()["inputs"]["augmentations"], None)
    return Dataset(training_set.root, "word_vectors", aug.manifest()["inputs"]["word_vectors"], WORD_VECTORS)


def load_examples(training_set: Dataset, senses: bool = False):
    """(train examples, validation examples, counts of what was read and dropped); ``senses``:
    each OTHER noun phrase labelled with its head's WordNet supersense (for the sense head)."""
    from collections import Counter

    from pearl_model.training.loop import examples_from_rows

    sense_of = None
    if senses:
        from pearl_model.phrases.senses import phrase_sense
        from pearl_model.pairs.synonyms import WordNetSynonyms

        lexicon = WordNetSynonyms()  # a missing WordNet is a clear error here, before any weight is loaded
        sense_of = lambda phrase, label: phrase_sense(phrase, label, lexicon)  # noqa: E731
    table = training_set.read(columns=["phrase", "label_id", "positives", "negatives", "split"])
    rows = table.to_pylist()
    counts: Counter = Counter()
    train = examples_from_rows((r for r in rows if r["split"] == "train"), counts, sense_of)
    val = examples_from_rows((r for r in rows if r["split"] == "validation"), counts, sense_of)  # "heldout": neither
    return train, val, dict(counts)


def heldout_of(training_set: Dataset) -> Dataset | None:
    """The held-out aliases the training set was built without (None for a training set from before them)."""
    version = training_set.manifest()["inputs"].get("heldout_aliases")
    return Dataset(training_set.root, "heldout_aliases", version, HELDOUT_ALIASES) if version else None


def distractor_titles(aliases: Dataset, exclude: set[str], k: int) -> list[str]:
    """The ``k`` titles with the smallest crc32 (stable as the corpus grows), read batch by batch."""
    best: set[tuple[int, str]] = set()
    for batch in aliases.iter_batches(columns=["title"]):
        titles = {t for t in batch.column(0).to_pylist() if t not in exclude}
        best = set(heapq.nsmallest(k, best | {(stable_hash(t), t) for t in titles}))
    return [t for _, t in sorted(best)]


HOLDOUT_PAIRS, HOLDOUT_TITLES = 2000, 10_000  # the `train` flow's alias_holdout_pairs / _titles defaults


def heldout_retrieval(training_set: Dataset, max_pairs: int = HOLDOUT_PAIRS, max_titles: int = HOLDOUT_TITLES):
    """The training set's held-out aliases as the retrieval task training scores (None: none to score)."""
    heldout = heldout_of(training_set)
    return retrieval_task(heldout, max_pairs, max_titles) if heldout is not None and max_pairs else None


def retrieval_task(heldout: Dataset, max_pairs: int, max_titles: int):
    """An AliasRetrieval of at most ``max_pairs`` held-out pairs (hash-chosen) among at most
    ``max_titles`` candidate titles: theirs, then distractors. An alias whose text is another
    candidate's title cannot be scored fairly and is left out. None when nothing is left."""
    from pearl_model.phrases.mining import phrase_key
    from pearl_model.evaluation.alias_retrieval import AliasRetrieval

    t = heldout.read(columns=["alias", "title"])
    pairs = sorted(zip(t["alias"].to_pylist(), t["title"].to_pylist()), key=lambda p: (stable_hash(f"{p[0]}\t{p[1]}"), p))
    chosen, titles = [], {}
    for alias, title in pairs:
        if len(chosen) >= max_pairs or (title not in titles and len(titles) >= max_titles):
            continue
        titles.setdefault(title, len(titles))
        chosen.append((alias, title))
    if not chosen:
        return None
    aliases = Dataset(heldout.root, "aliases", heldout.manifest()["inputs"]["aliases"], ALIASES)
    candidates = list(titles) + distractor_titles(aliases, set(titles), max_titles - len(titles))
    index = {title: i for i, title in enumerate(candidates)}
    keys = {phrase_key(title): title for title in candidates}
    kept = [(a, ti) for a, ti in chosen if keys.get(phrase_key(a), ti) == ti]
    return AliasRetrieval(tuple(a for a, _ in kept), tuple(candidates), tuple(index[ti] for _, ti in kept)) \
        if kept else None


def model_params(backbone: str, cfg) -> dict:
    """What a model version hashes beside its inputs: the backbone and the training settings."""
    return {"backbone": backbone, **cfg.version_params()}


def plan_model(training_set: Dataset, char_encoder: FileSet, backbone: str, cfg) -> FileSet:
    params = model_params(backbone, cfg)
    inputs = {"training_set": training_set.version, "char_encoder": char_encoder.version}
    return plan_fileset(training_set.root, "models", CODE_VERSION, params, inputs)


def checkpoint_dir(out: FileSet) -> Path:
    """Where the runs of model version ``out`` keep their checkpoints, one directory each."""
    from pearl_model.inference.backbones import cache_root
    from storage.stores import machine_dir

    return machine_dir(out.root, "checkpoints", cache_root()) / out.version


def _lock(directory: Path) -> int | None:
    """An open descriptor holding ``directory``'s lock, or None when a live process holds it.
    The kernel drops the lock when its process dies, however it dies."""
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextmanager
def run_checkpoints(out: FileSet) -> Iterator[Path]:
    """This run's own checkpoint directory, ``checkpoint_dir(out)/<random>/``, locked while the run
    lives: two runs of one version (train/pearl and train/pearl-gpu) never write, resume from or
    prune each other's checkpoints. A directory nobody holds is an interrupted run's: the next run
    of the version adopts the one that got furthest, and resumes from it."""
    base = checkpoint_dir(out)

    def furthest(d: Path) -> int:
        return max((int(p.name[5:]) for p in d.rglob("step-*") if p.name[5:].isdigit()), default=-1)

    try:
        runs = [d for d in base.iterdir() if not d.name.startswith(".") and (d / LOCK).is_file()]
    except FileNotFoundError:
        runs = []
    for directory in sorted(runs, key=furthest, reverse=True):
        fd = _lock(directory)
        if fd is not None:
            log.info("resuming from the checkpoints of an interrupted run of model %s: %s", out.version, directory)
            break
    else:
        # locked under a hidden name first: no other run can adopt it between mkdir and lock
        hidden = base / f".new-{uuid.uuid4().hex}"
        hidden.mkdir(parents=True)
        fd = _lock(hidden)
        directory = hidden.rename(base / hidden.name.removeprefix(".new-"))
    try:
        yield directory
    finally:
        os.close(fd)


class KeptBaselines:
    """The ``keep`` of ``selection.dev_selection`` on a storage root: the backbone's dev rows of a key
    read from ``dev_baselines/<sha256 of the key>/`` through the verified reader when a run kept them
    there (and they hold that very key), else computed and kept. ``outcome`` says which: ``kept``,
    ``computed``, ``recomputed`` (the entry was damaged: the log says how) or ``not kept`` (no key)."""

    def __init__(self, root: str):
        self.root, self.outcome = root, None

    def __call__(self, key: dict | None, compute) -> dict:
        from storage.stores import store

        if key is None:
            log.info("the backbone has no local files to key its dev scores by: computed, not kept")
            self.outcome = "not kept"
            return compute()
        canonical = json.dumps(key, sort_keys=True, separators=(",", ":"))
        fs, path = store(self.root)  # an object store's listing uncached: another run's entry is seen
        base = f"{path.rstrip('/')}/{BASELINES}/{hashlib.sha256(canonical.encode()).hexdigest()}"
        where, damaged = f"{BASELINES}/{base.rsplit('/', 1)[1]}", None
        if fs.exists(f"{base}/{RECORDS}/{BASELINE_ROWS}.json") or fs.exists(f"{base}/{BASELINE_ROWS}"):
            try:
                kept = json.loads(read_recorded(fs, base, BASELINE_ROWS, where))
                if not (isinstance(kept, dict) and kept.get("key") == json.loads(canonical)
                        and isinstance(kept.get("rows"), dict)):
                    raise ValueError(f"{where}/{BASELINE_ROWS} holds no rows of this key")
                log.info("dev scores of the backbone kept by an earlier run (%s): not computed again", where)
                self.outcome = "kept"
                return kept["rows"]
            except (ValueError, OSError) as e:  # Damaged, UnsafeManifest, bad JSON, unreadable: never served
                damaged = e
                log.warning("the kept dev scores of the backbone are damaged, computed again: %s", e)
        log.info("dev scores of the backbone: computing them on the dev data (kept for the next run with the same "
                 "dev data, backbone and engine)")
        rows = compute()
        write_recorded(fs, base, BASELINE_ROWS, json.dumps({"key": key, "rows": rows}).encode())
        self.outcome = "recomputed" if damaged is not None else "computed"
        log.info("dev scores of the backbone %s and kept for the next run: %s", self.outcome, where)
        return rows


def restart_dir(run_dir: Path, i: int) -> Path:
    """Checkpoints of restart ``i`` (0: the run's own directory, as without restarts)."""
    return run_dir if i == 0 else run_dir / f"restart{i}"


def train_model(training_set: Dataset, char_encoder: FileSet, out: FileSet, backbone: str, cfg, *,
                cache_dir: str | None = None, benchmark_dir: str | None = None,
                alias_holdout_pairs: int = HOLDOUT_PAIRS, alias_holdout_titles: int = HOLDOUT_TITLES,
                on_log=None) -> dict:
    """Train (``cfg``: a :class:`pearl_model.training.config.TrainConfig`), average with the original
    backbone, export and upload; returns the manifest. The keywords change what is measured or where
    things are cached, not the weights: they are not part of the model version."""
    if out.is_complete():
        log.info("model %s already trained: reusing it", out.version)
        return out.reuse()
    import torch

    from pearl_model.inference.export import export_pearl
    from pearl_model.inference.model_dirs import open_model
    from pearl_model.training.selection import choose_average_weight, dev_selection, seen_names
    from pearl_model.training.selection import rank as selection_rank
    from pearl_model.evaluation.alias_retrieval import alias_retrieval
    from pearl_model.training.loop import backbone_state, build_model, resolve_device, train

    check_train_config(cfg)
    check_holdout(alias_holdout_pairs, alias_holdout_titles)
    train_ex, val_ex, read_counts = load_examples(training_set, senses=cfg.sense_loss_weight > 0)
    if len(train_ex) < 2:
        raise ValueError(f"training_set {training_set.version} has {len(train_ex)} training phrases: too few to train")
    retrieval = heldout_retrieval(training_set, alias_holdout_pairs, alias_holdout_titles)
    if retrieval is None:
        log.warning("no held-out aliases to score (training set %s): no alias retrieval signal", training_set.version)
    device = resolve_device(cfg.device)
    char_dir = char_encoder.local_copy()

    def build(seed: int):
        return build_model(backbone, char_dir, char_proj_dim=cfg.char_proj_dim, seed=seed, device=str(device),
                           cache_dir=cache_dir, type_input=cfg.type_input)

    model = build(cfg.seed)
    original = backbone_state(model)
    kept_baseline = KeptBaselines(training_set.root)
    select, baseline = dev_selection(backbone, cfg, original, retrieval, str(device), benchmark_dir, cache_dir,
                                     seen=seen_names(train_ex + val_ex), keep=kept_baseline)
    # Restarts: along a CPU run BC5CDR's clustering sits on one of two near-tied KMeans layouts, and
    # which one depends on the seed (docs/research/recipe-seeds.md); another seed is tried only while no kept
    # checkpoint is at or above the backbone on every dev signal, and the best kept one is exported.
    with run_checkpoints(out) as run_dir:
        best, tried = None, []
        for i in range(cfg.restarts):
            if i:
                model = build(cfg.seed + i)
            res = train(model, train_ex, cfg.updated(seed=cfg.seed + i), validation=val_ex, retrieval=retrieval,
                        checkpoint_dir=restart_dir(run_dir, i), on_log=on_log, reference=original, select=select)
            kept = res.kept  # the exported checkpoint's
            if kept and len(cfg.average_weights) > 1:
                kept = choose_average_weight(model, select, kept, cfg.average_weights, cfg.select_rule)
            rank = selection_rank(kept, cfg.select_rule) if kept else (-1,)  # below any scored run
            tried.append({"seed": cfg.seed + i, "selected_step": res.selected_step,
                          "average_weight": kept.get("average_weight"), "select_worst": kept.get("select_worst"),
                          "select_mean": kept.get("select_mean"), "seconds": round(res.seconds, 1)})
            if best is None or rank > best[0]:
                best = (rank, model, res, kept, cfg.seed + i)
            if kept.get("select_worst", -1.0) >= 0:
                break
        _, model, res, kept, seed = best
        first = res.validation[0] if res.validation and res.validation[0]["step"] == 0 else {}
        summary = {"steps": res.steps, "train_phrases": len(train_ex), "validation_phrases": len(val_ex),
                   "seconds": round(res.seconds, 1), "anchors_per_s": round(res.anchors_per_s, 1),
                   "peak_gpu_memory_mb": res.peak_memory_mb and round(res.peak_memory_mb, 1),
                   "device": str(device), "resumed_from_step": res.resumed_from,
                   "positives_drawn": res.positive_kinds, **read_counts,
                   **({"backbone_dev_scores": kept_baseline.outcome} if kept_baseline.outcome else {}),
                   **({"selected_step": res.selected_step,
                       **{k: v for k, v in kept.items() if k.startswith(("select_", "dev_"))}} if res.selection else {}),
                   **({"gpu": torch.cuda.get_device_name(device)} if device.type == "cuda" else {}),
                   **(res.validation[-1] if res.validation else {}),
                   **{f"{k}_before": v for k, v in first.items() if k.startswith("val_alias_")},
                   **({"alias_holdout_pairs": len(retrieval.aliases), "alias_holdout_titles": len(retrieval.titles)}
                      if retrieval else {}),
                   **({"restarts_tried": len(tried), "selected_seed": seed,
                       "seconds": round(sum(t["seconds"] for t in tried), 1)} if len(tried) > 1 else {})}
        params = model_params(backbone, cfg)
        meta = {"training_set": training_set.version, "char_encoder": char_encoder.version, "backbone": backbone,
                "params": params, "summary": summary}
        scale = summary["char_scale"] = kept.get("char_scale", cfg.char_scales[0])
        weight = summary["average_weight"] = kept.get("average_weight", cfg.average_weights[0])
        if "average_weights_tried" in kept:
            summary["average_weights_tried"] = kept["average_weights_tried"]
        history = json.dumps({"history": res.history, "validation": res.validation, "selection": res.selection,
                              "selection_baseline": baseline, "restarts": tried})
        with tempfile.TemporaryDirectory(prefix="pearl-export-") as tmp:
            path = export_pearl(model, Path(tmp) / "model", original_backbone_state=original,
                                average_weight=weight, metadata=meta, char_scale=scale,
                                extra_files={HISTORY_FILE: history})  # in the export's checksums
            if retrieval is not None:  # what is promoted is the averaged model: score it too
                exported = open_model(path, device=str(device)).model
                summary |= {f"{k}_exported": v for k, v in alias_retrieval(exported.encode, retrieval).items()}
                del exported
            manifest = out.upload(path, code_version=CODE_VERSION, params=params,
                                  inputs={"training_set": training_set.version, "char_encoder": char_encoder.version},
                                  stats=summary)
        # The model is stored: its checkpoints (weights + Adam state, ~3x the model) have no further use.
        shutil.rmtree(run_dir, ignore_errors=True)
        with suppress(OSError):  # the version's directory, unless another run of it has one there
            run_dir.parent.rmdir()
    return manifest


def training_log(out: FileSet) -> dict:
    return json.loads(out.read_bytes(HISTORY_FILE))


CURVE_SIZE = (8, 3.4)  # inches at 100 dpi: about the width of the UI's artifact page, shown unscaled


def curve_pngs(history: list[dict], validation: list[dict]) -> list[tuple[str, bytes]]:
    """The training curves, one figure each (title, PNG): four plots in one strip shrank to
    unreadable labels at the UI's width."""
    from runs.figures import png_bytes, pyplot

    plt = pyplot()
    steps = [r["step"] for r in history]

    def figure(title: str, ylabel: str, draw) -> tuple[str, bytes]:
        fig, ax = plt.subplots(figsize=CURVE_SIZE)
        draw(ax)
        ax.set(xlabel="step", ylabel=ylabel, title=title)
        if ax.get_legend_handles_labels()[0]:  # beside the plot: inside, it hid points
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
        return title, png_bytes(fig)

    def losses(ax):
        for key, style in (("loss", "-"), ("infonce", "--"), ("type_ce", ":")):
            ax.plot(steps, [r[key] for r in history], style, label=key)
        for key, mark in (("val_loss", "o"), ("val_infonce", "s"), ("val_type_ce", "^")):
            pts = [(v["step"], v[key]) for v in validation if key in v]
            if pts:
                ax.plot(*zip(*pts), mark, label=key)

    out = [figure("training loss", "loss", losses),
           figure("learning rate", "learning rate", lambda ax: ax.plot(steps, [r["lr"] for r in history])),
           figure("throughput", "anchors / s", lambda ax: ax.plot(steps, [r["anchors_per_s"] for r in history]))]
    aliases = [(v["step"], v["val_alias_top1"], v["val_alias_mrr"]) for v in validation if "val_alias_top1" in v]
    if aliases:  # beside the validation loss: the corpus's own signal, independent of the benchmark
        def alias_scores(ax):
            steps_a, top1, mrr = zip(*aliases)
            ax.plot(steps_a, top1, "o-", label="top-1")
            ax.plot(steps_a, mrr, "s--", label="MRR")
        out.insert(1, figure("held-out aliases -> titles", "score", alias_scores))
    return out


def curves_markdown(history: list[dict], validation: list[dict]) -> str:
    """The `training-curves` figures, each under its own heading at the page's width."""
    from runs.figures import markdown_image

    return "\n\n".join(f"## {title}\n\n{markdown_image(png, title)}" for title, png in curve_pngs(history, validation))


def alias_lines(validation: list[dict], stats: dict) -> str:
    """The held-out alias retrieval scores as a markdown table (empty without any)."""
    rows = [(f"step {v['step']}" + (" (before training)" if v["step"] == 0 else ""), v["val_alias_top1"],
             v["val_alias_mrr"]) for v in validation if "val_alias_top1" in v]
    if "alias_top1_exported" in stats:
        rows.append(("exported (averaged)", stats["alias_top1_exported"], stats["alias_mrr_exported"]))
    if not rows:
        return ""
    head = (f"\n\n## Held-out aliases -> titles ({stats.get('alias_holdout_pairs')} aliases among "
            f"{stats.get('alias_holdout_titles')} titles)\n\n| when | top-1 | MRR |\n|---|---|---|\n")
    return head + "\n".join(f"| {w} | {t:.3f} | {m:.3f} |" for w, t, m in rows)


def selection_lines(selection: list[dict], stats: dict, baseline: dict | None = None) -> str:
    """The dev checks of a selecting run as a markdown table, the kept checkpoint marked, the
    backbone's scores (``baseline``) as its first row (empty without any check). The changes each
    check's intervals can see are a list below it: a column of them cut the table at the page's edge."""
    if not selection:
        return ""
    from pearl_model.training.selection import changes_text, criteria

    cols = [f"dev_{k}" for k in criteria({k[4:]: v for k, v in selection[0].items() if k.startswith("dev_")})]
    scaled = any("char_scale" in r for r in selection)
    head = ["step", *(["char scale"] if scaled else []), *(c[4:] for c in cols), "worst change", "mean change",
            "kept"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    if baseline:
        lines.append("| " + " | ".join(["backbone", *([""] if scaled else []),
                                         *(f"{baseline[c[4:]]:.1f}" if c[4:] in baseline else "" for c in cols),
                                         "", "", ""]) + " |")
    for r in selection:
        cells = [str(r["step"]), *([f"{r['char_scale']:g}"] if scaled else []), *(f"{r[c]:.1f}" for c in cols),
                 f"{r['select_worst']:+.1f}", f"{r['select_mean']:+.1f}",
                 "**kept**" if r["step"] == stats.get("selected_step") else ""]
        lines.append("| " + " | ".join(cells) + " |")
    seen = [f"- step {r['step']}: {changes_text(r['select_changes'])}" for r in selection if "select_changes" in r]
    if seen:
        lines += ["", "Changes against the backbone that the 95% intervals can see:", "", *seen]
    return ("\n\n## Checkpoints scored on dev data (as exported; changes against the backbone, x100)\n\n"
            + "\n".join(lines))


# --- Prefect wrappers --------------------------------------------------------------------
from prefect import task  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402


@task(name="resolve-training-set", cache_policy=NONE)
def resolve_training_set_task(storage_root: str, version: str | None) -> Dataset:
    return resolve_training_set(storage_root, version)


@task(name="word-vectors-of-training-set", cache_policy=NONE)
def word_vectors_of_task(training_set: Dataset) -> Dataset:
    return word_vectors_of(training_set)


@task(name="plan-model", cache_policy=NONE)
def plan_model_task(training_set: Dataset, char_encoder: FileSet, backbone: str, cfg) -> FileSet:
    return plan_model(training_set, char_encoder, backbone, cfg)


@task(name="train-pearl", cache_policy=NONE)
def train_model_task(training_set: Dataset, char_encoder: FileSet, out: FileSet, backbone: str, cfg,
                     **options) -> dict:
    from prefect.artifacts import create_progress_artifact, update_progress_artifact
    from prefect.logging import get_run_logger

    from runs.progress import logs_in_run

    logger = get_run_logger()
    progress = create_progress_artifact(0.0, key="training-progress", description=f"training model {out.version}")

    def on_log(rec: dict) -> None:
        if "select_worst" in rec:
            from pearl_model.training.selection import changes_text

            logger.info("dev selection at step %d: worst change against the backbone %+.2f, mean %+.2f; %s",
                        rec["step"], rec["select_worst"], rec["select_mean"],
                        changes_text(rec["select_changes"]) if "select_changes" in rec else "")
            return
        logger.info("step %d/%d  loss %.4f (InfoNCE %.4f, type %.4f, type acc %.2f)  lr %.2e  %.0f anchors/s",
                    rec["step"], rec["total_steps"], rec["loss"], rec["infonce"], rec["type_ce"], rec["type_acc"],
                    rec["lr"], rec["anchors_per_s"])
        update_progress_artifact(progress, 100.0 * rec["step"] / max(rec["total_steps"], 1))

    # the plain function's own lines (dev scores kept or computed, a resumed run, the checkpoint kept)
    with logs_in_run(__name__, "pearl_model.training.selection"):
        manifest = train_model(training_set, char_encoder, out, backbone, cfg, on_log=on_log, **options)
    update_progress_artifact(progress, 100.0)
    for v in training_log(out)["validation"]:  # validation loss and held-out alias retrieval, side by side
        logger.info("validation at step %d: %s", v["step"],
                    ", ".join(f"{k} {x:.4f}" for k, x in v.items() if k.startswith("val_")))
    if "alias_top1_exported" in manifest["stats"]:
        logger.info("held-out aliases, exported model: top-1 %.4f, MRR %.4f",
                    manifest["stats"]["alias_top1_exported"], manifest["stats"]["alias_mrr_exported"])
    return manifest


def stored_model(storage_root: str, version: str) -> FileSet:
    return FileSet(resolve_root(storage_root), "models", check_version("model version", version))


@task(name="model-directory", cache_policy=NONE)
def model_directory_task(out: FileSet | str, version: str | None = None) -> str:
    """The stored model's location (`storage.registry.model_location`: its directory on a local root, its
    URL in an object store, which each evaluation worker copies for itself): what evaluate loads.
    ``out``: the model's FileSet, or a storage root with the model's ``version``."""
    from storage.registry import model_location

    return model_location(stored_model(out, version) if isinstance(out, str) else out)


def model_commands(out: FileSet) -> list[str]:
    """The commands that use a stored model: encode with it (a local root's directory loads as it is),
    make it the registry's `current`."""
    from shlex import quote

    from storage.datasets import as_location
    from storage.stores import is_local_root

    local = is_local_root(out.root)
    return ([f"pearl encode 'a phrase' --model {quote(as_location(out.url))}"] if local else []) + [
        f"pearl models promote {out.version} --storage-root {quote(as_location(out.root))}"]


def summary_lines(out: FileSet, stats: dict) -> list[str]:
    """The end of a training in the run's log: where the model is, its steps and validation, the dev
    scores of the checkpoint kept, and the commands that use it."""
    from storage.datasets import as_location

    lines = [f"directory: {as_location(out.url)}",
             f"steps: {stats.get('steps')}" + (f", validation loss {stats['val_loss']:.4f}" if "val_loss" in stats else "")]
    if "alias_top1_exported" in stats:
        lines.append(f"held-out aliases -> titles: top-1 {stats['alias_top1_exported']:.3f}, "
                     f"MRR {stats['alias_mrr_exported']:.3f}")
    dev = {k[4:]: v for k, v in stats.items() if k.startswith("dev_") and isinstance(v, (int, float))}
    if dev:
        lines.append(f"dev scores (step {stats.get('selected_step')} kept, x100): "
                     + ", ".join(f"{k} {v:.1f}" for k, v in dev.items()))
    return lines + [f"use it: {c}" for c in model_commands(out)]


@task(name="training-report", cache_policy=NONE)
def training_report_task(out: FileSet) -> dict:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from runs.artifacts import publish_location
    from runs.progress import log_summary

    man = out.manifest()
    logs = training_log(out)
    stats = man["stats"]
    create_table_artifact(key="training-summary", table=[{"metric": k, "value": v} for k, v in stats.items()],
                          description=f"model {out.version}: steps, throughput, memory, validation loss")
    if logs["history"]:
        create_markdown_artifact(
            key="training-curves",
            markdown="# Training curves\n\n" + curves_markdown(logs["history"], logs["validation"])
            + alias_lines(logs["validation"], stats) + selection_lines(logs.get("selection", []), stats,
                                                                        logs.get("selection_baseline")),
            description=f"model {out.version}")
    publish_location(out.url, key="model", title=f"models {out.version}", commands=model_commands(out),
                     description=f"PEARL model trained on training_set {man['inputs']['training_set']}")
    log_summary(f"train exported model {out.version}", summary_lines(out, stats))
    return {"version": out.version, "url": out.url, "summary": stats}


@task(name="train-on-deployment", cache_policy=NONE)
def train_on_deployment_task(deployment: str, parameters: dict, timeout_s: float | None) -> dict:
    """Run the `train` flow through a deployment (on the GPU work pool) and return what it returned.

    The child run is linked to this one in the UI. Its return value is read from Prefect's result
    storage (the train flow persists it): workers on other machines need shared result storage."""
    from prefect.deployments import run_deployment
    from prefect.logging import get_run_logger

    logger = get_run_logger()
    logger.info("training through deployment %s (its work pool's worker runs it)", deployment)
    run = run_deployment(deployment, parameters=parameters, timeout=timeout_s, as_subflow=True)
    state = run.state
    if state is None or not state.is_final():
        raise TimeoutError(f"training run {run.name} on {deployment} not finished after {timeout_s} s "
                           f"(state {state and state.type.value}): is a worker polling that deployment's work pool?")
    if not state.is_completed():
        raise RuntimeError(f"training run {run.name} on {deployment} ended {state.type.value}: {state.message}")
    return json_result(state)


class UnsafeResult(ValueError):
    """A run's stored result is not plain JSON (a pickle, or a record naming its own decoder)."""


def json_result(state) -> dict:
    """A finished run's result, read from Prefect's result storage as plain JSON.

    ``state.result()`` would decode the stored bytes with whatever serializer the stored record (or
    the API) names: a pickle, or a JSON decoder given by import path, either of which runs code
    chosen by whoever can write the result storage. The train flow persists its result as JSON,
    so it is read with ``json.loads`` and nothing else."""
    import json
    from pathlib import Path

    from prefect._internal.compatibility.blocks import call_explicitly_sync_block_method
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultRecordMetadata, get_default_result_storage, resolve_result_storage

    meta = state.data
    if not isinstance(meta, ResultRecordMetadata) or meta.storage_key is None:
        raise UnsafeResult(f"run result not persisted as a stored record: {type(meta).__name__}")
    if meta.serializer.type != "json":
        raise UnsafeResult(f"run result stored with the {meta.serializer.type!r} serializer, not json: not read")
    if meta.storage_block_id is not None:
        storage = resolve_result_storage(meta.storage_block_id, _sync=True)
    elif Path(meta.storage_key).is_absolute():
        storage = LocalFileSystem(basepath=str(Path(meta.storage_key).parent))
    else:
        storage = get_default_result_storage(_sync=True)
    raw = call_explicitly_sync_block_method(storage, "read_path", (meta.storage_key,), {})
    try:
        result = json.loads(raw)
    except ValueError as e:
        raise UnsafeResult(f"run result {meta.storage_key} is not JSON: {e}") from None
    if not isinstance(result, dict) or "model" not in result:  # a stored record, not the flow's return value
        raise UnsafeResult(f"run result {meta.storage_key} is not a train flow's result (keys {sorted(result)[:5]})"
                           if isinstance(result, dict) else f"run result {meta.storage_key} is not a JSON object")
    return result
