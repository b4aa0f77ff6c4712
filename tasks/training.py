"""Stage: `training_set` (+ `char_encoder`) -> `models/<version>`: PEARL trained, averaged, exported.

The model version is a hash of the training-set and character-encoder versions and every
training parameter, so re-running `train` with nothing changed trains nothing, and a run
that was interrupted resumes from its last checkpoint (checkpoints live under
`<storage_root>/checkpoints/<model version>/` for a local root, else in the local cache).
The exported directory (a transformers backbone + the character branch and head +
a sentence-transformers configuration; see `pearl_model.export`) is uploaded as a FileSet,
with the training log beside the weights.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from storage.datasets import Dataset, check_version, latest_version, resolve_root
from storage.files import FileSet, plan_fileset
from storage.schemas import TRAINING_SET

CODE_VERSION = "train-1"
HISTORY_FILE = "training_log.json"
log = logging.getLogger(__name__)

# TrainConfig fields a deployment may set (the rest keep pearl_model.training's defaults).
TRAIN_FIELDS = ("batch_size", "hard_negatives", "epochs", "max_steps", "lr", "lr_decay", "lr_decay_every",
                "temperature", "type_loss_weight", "seed", "bf16", "checkpoint_every", "log_every", "max_length")


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


def load_examples(training_set: Dataset):
    """(train examples, validation examples, counts of what was read and dropped)."""
    from collections import Counter

    from pearl_model.training import examples_from_rows

    table = training_set.read(columns=["phrase", "label_id", "positives", "negatives", "split"])
    rows = table.to_pylist()
    counts: Counter = Counter()
    train = examples_from_rows((r for r in rows if r["split"] == "train"), counts)
    val = examples_from_rows((r for r in rows if r["split"] != "train"), counts)
    return train, val, dict(counts)


def plan_model(training_set: Dataset, char_encoder: FileSet, params: dict) -> FileSet:
    inputs = {"training_set": training_set.version, "char_encoder": char_encoder.version}
    return plan_fileset(training_set.root, "models", CODE_VERSION, params, inputs)


def checkpoint_dir(out: FileSet) -> Path:
    if "://" not in out.root:
        return Path(out.root) / "checkpoints" / out.version
    cache = Path(os.environ.get("PEARL_CACHE", Path.home() / ".cache" / "pearl_model"))
    return cache / "checkpoints" / out.version


def train_model(training_set: Dataset, char_encoder: FileSet, out: FileSet, params: dict, on_log=None) -> dict:
    """Train, average with the original backbone, export and upload; returns the manifest."""
    if out.is_complete():
        log.info("model %s already trained: reusing it", out.version)
        return out.manifest()
    import torch

    from pearl_model.export import export_pearl
    from pearl_model.training import TrainConfig, backbone_state, build_model, resolve_device, train

    train_ex, val_ex, read_counts = load_examples(training_set)
    if len(train_ex) < 2:
        raise ValueError(f"training_set {training_set.version} has {len(train_ex)} training phrases: too few to train")
    cfg = TrainConfig(device=params["device"], **{k: params[k] for k in TRAIN_FIELDS if k in params})
    device = resolve_device(cfg.device)
    model = build_model(params["backbone"], char_encoder.local_copy(), char_proj_dim=params["char_proj_dim"],
                        seed=cfg.seed, device=str(device), cache_dir=params.get("cache_dir"))
    original = backbone_state(model)
    res = train(model, train_ex, cfg, validation=val_ex, checkpoint_dir=checkpoint_dir(out), on_log=on_log)
    summary = {"steps": res.steps, "train_phrases": len(train_ex), "validation_phrases": len(val_ex),
               "seconds": round(res.seconds, 1), "anchors_per_s": round(res.anchors_per_s, 1),
               "peak_gpu_memory_mb": res.peak_memory_mb and round(res.peak_memory_mb, 1),
               "device": str(device), "resumed_from_step": res.resumed_from,
               "positives_drawn": res.positive_kinds, **read_counts,
               **({"gpu": torch.cuda.get_device_name(device)} if device.type == "cuda" else {}),
               **(res.validation[-1] if res.validation else {})}
    meta = {"training_set": training_set.version, "char_encoder": char_encoder.version, "backbone": params["backbone"],
            "params": params, "summary": summary}
    with tempfile.TemporaryDirectory(prefix="pearl-export-") as tmp:
        path = export_pearl(model, Path(tmp) / "model", original_backbone_state=original,
                            average_weight=params["average_weight"], metadata=meta)
        (path / HISTORY_FILE).write_text(json.dumps({"history": res.history, "validation": res.validation}))
        manifest = out.upload(path, code_version=CODE_VERSION, params=params,
                              inputs={"training_set": training_set.version, "char_encoder": char_encoder.version},
                              stats=summary)
    # The model is stored: its checkpoints (weights + Adam state, ~3x the model) have no further use.
    shutil.rmtree(checkpoint_dir(out), ignore_errors=True)
    return manifest


def training_log(out: FileSet) -> dict:
    with out.fs.open(f"{out.path}/{HISTORY_FILE}", "r") as fh:
        return json.load(fh)


def curves_png(history: list[dict], validation: list[dict]) -> bytes:
    from tasks.figures import png_bytes, pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    steps = [r["step"] for r in history]
    for key, style in (("loss", "-"), ("infonce", "--"), ("type_ce", ":")):
        axes[0].plot(steps, [r[key] for r in history], style, label=key)
    for key, mark in (("val_loss", "o"), ("val_infonce", "s"), ("val_type_ce", "^")):
        pts = [(v["step"], v[key]) for v in validation if key in v]
        if pts:
            axes[0].plot(*zip(*pts), mark, label=key)
    axes[0].set(xlabel="step", ylabel="loss", title="training loss")
    axes[0].legend(fontsize=7)
    axes[1].plot(steps, [r["lr"] for r in history])
    axes[1].set(xlabel="step", ylabel="learning rate", title="learning rate")
    axes[2].plot(steps, [r["anchors_per_s"] for r in history])
    axes[2].set(xlabel="step", ylabel="anchors / s", title="throughput")
    return png_bytes(fig)


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
def plan_model_task(training_set: Dataset, char_encoder: FileSet, params: dict) -> FileSet:
    return plan_model(training_set, char_encoder, params)


@task(name="train-pearl", cache_policy=NONE)
def train_model_task(training_set: Dataset, char_encoder: FileSet, out: FileSet, params: dict) -> dict:
    from prefect.artifacts import create_progress_artifact, update_progress_artifact
    from prefect.logging import get_run_logger

    logger = get_run_logger()
    progress = create_progress_artifact(0.0, key="training-progress", description=f"training model {out.version}")

    def on_log(rec: dict) -> None:
        logger.info("step %d/%d  loss %.4f (InfoNCE %.4f, type %.4f, type acc %.2f)  lr %.2e  %.0f anchors/s",
                    rec["step"], rec["total_steps"], rec["loss"], rec["infonce"], rec["type_ce"], rec["type_acc"],
                    rec["lr"], rec["anchors_per_s"])
        update_progress_artifact(progress, 100.0 * rec["step"] / max(rec["total_steps"], 1))

    manifest = train_model(training_set, char_encoder, out, params, on_log=on_log)
    update_progress_artifact(progress, 100.0)
    return manifest


@task(name="model-directory", cache_policy=NONE)
def model_directory_task(out: FileSet) -> str:
    """A local directory of the stored model (downloaded once for a remote root): what evaluate loads."""
    return str(out.local_copy())


@task(name="training-report", cache_policy=NONE)
def training_report_task(out: FileSet) -> dict:
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

    from tasks.figures import markdown_image

    man = out.manifest()
    logs = training_log(out)
    stats = man["stats"]
    create_table_artifact(key="training-summary", table=[{"metric": k, "value": v} for k, v in stats.items()],
                          description=f"model {out.version}: steps, throughput, memory, validation loss")
    if logs["history"]:
        create_markdown_artifact(
            key="training-curves",
            markdown="# Training curves\n\n" + markdown_image(curves_png(logs["history"], logs["validation"]),
                                                             "loss, learning rate and throughput"),
            description=f"model {out.version}")
    create_link_artifact(key="model", link=out.url, link_text=f"models {out.version}",
                         description=f"PEARL model trained on training_set {man['inputs']['training_set']}")
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
    return state.result()
