"""Training checkpoints and the dev selection's kept weights: safetensors + JSON, never pickle.

A checkpoint holds the model's weights, Adam's state (tensors flattened into safetensors, the
rest in JSON), the RNG states and the run's history, written to a temporary directory and
renamed, so an interrupted run resumes from the last whole one. The selection's best weights
(``selected.safetensors``) and its records (``selection.json``) sit beside them.

Each file's size and SHA-256 are recorded by its writer (a checkpoint's in its ``state.json``, the kept
weights' in ``selected.json``) and checked before safetensors sees a byte (it is handed the checked
bytes): a checkpoint is a cache of the run, so one that is damaged, or written before the records,
is warned about and trained again (:class:`DamagedCheckpoint`), never loaded. The library imports no
``storage``, so this is the checkpoints' own check, of the same rule (docs/operating.md, threat model).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import uuid
from pathlib import Path

import torch
from safetensors.torch import load, save_file

from pearl_model.evaluation.row_cache import write_json_atomic
from pearl_model.training.config import TrainConfig

log = logging.getLogger(__name__)
CHECKPOINT_FORMAT = "pearl-checkpoint/2"  # 2: each file's size and sha256 in state.json
WEIGHT_FILES = ("model.safetensors", "optimizer.safetensors", "rng.safetensors")


class DamagedCheckpoint(ValueError):
    """A checkpoint or the kept weights are not what their writer recorded (or have no record): trained
    again, never loaded. The message names the file."""


def _digest(data: bytes) -> dict:
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _record(path: Path) -> dict:
    return _digest(path.read_bytes())


def _checked(path: Path, record: object) -> bytes:
    """The bytes of ``path`` when they are what ``record`` says, else DamagedCheckpoint."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DamagedCheckpoint(f"{path}: cannot be read ({e.strerror or e})") from None
    if not isinstance(record, dict) or _digest(data) != {"bytes": record.get("bytes"), "sha256": record.get("sha256")}:
        raise DamagedCheckpoint(f"{path}: not what its writer recorded (size or sha256), or no record")
    return data


def _flatten_optimizer(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = opt.state_dict()
    tensors = {f"state.{idx}.{name}": t.detach().cpu().contiguous().reshape(t.shape)
               for idx, st in sd["state"].items() for name, t in st.items() if torch.is_tensor(t)}
    scalars = {f"{idx}.{name}": v for idx, st in sd["state"].items() for name, v in st.items() if not torch.is_tensor(v)}
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict] = {}
    for key, t in tensors.items():
        _, idx, name = key.split(".", 2)
        state.setdefault(int(idx), {})[name] = t
    for key, v in meta["scalars"].items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = v
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(directory: str | Path, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int,
                    history: list[dict], cfg: TrainConfig, keep: int = 2, validation: list[dict] = ()) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step:07d}"
    tmp = directory / f".tmp-{uuid.uuid4().hex}"
    tmp.mkdir()
    # Tied or shared tensors would make safetensors refuse: save clones of the state dict.
    save_file({k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()},
              str(tmp / "model.safetensors"))
    opt_tensors, opt_meta = _flatten_optimizer(opt)
    save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng.update({f"cuda.{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
    save_file(rng, str(tmp / "rng.safetensors"))
    (tmp / "state.json").write_text(json.dumps({"format": CHECKPOINT_FORMAT, "step": step,
                                                "files": {n: _record(tmp / n) for n in WEIGHT_FILES},
                                                "config": cfg.model_dump(mode="json"), "optimizer": opt_meta,
                                                "history": history, "validation": list(validation)}))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_json_atomic(directory / "latest.json", {"step": step, "path": final.name})
    for old in sorted(p for p in directory.glob("step-*") if p.is_dir())[:-max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(directory: str | Path | None) -> Path | None:
    if directory is None:
        return None
    pointer = Path(directory) / "latest.json"
    if not pointer.is_file():
        return None
    try:
        name = json.loads(pointer.read_text())["path"]
    except (OSError, ValueError, TypeError, KeyError):
        name = None
    if not isinstance(name, str) or re.fullmatch(r"step-\d{7}", name) is None:  # a pointer leads nowhere else
        log.warning("%s is not a checkpoint pointer: training from the start", pointer)
        return None
    path = Path(directory) / name
    return path if (path / "state.json").is_file() else None


def load_checkpoint(path: str | Path, model: torch.nn.Module,
                    opt: torch.optim.Optimizer) -> tuple[int, list[dict], list[dict]]:
    """Restore model, optimiser and RNG states; returns (step, history, validation records so far).
    Every file is checked against its record before anything is restored: DamagedCheckpoint, and the
    model and optimiser untouched, when one is not what its writer recorded."""
    path = Path(path)
    try:
        state = json.loads((path / "state.json").read_text())
    except (OSError, ValueError) as e:
        raise DamagedCheckpoint(f"{path}/state.json cannot be read ({e})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or not isinstance(state.get("files"), dict):
        raise DamagedCheckpoint(f"{path} is not a {CHECKPOINT_FORMAT} checkpoint (its files' digests unrecorded)")
    weights, opt_tensors, rng = [load(_checked(path / n, state["files"].get(n))) for n in WEIGHT_FILES]
    device = next(model.parameters()).device
    model.load_state_dict({k: v.to(device) for k, v in weights.items()})
    opt.load_state_dict(_unflatten_optimizer(opt_tensors, state["optimizer"]))
    torch.set_rng_state(rng["torch"])
    cuda_states = [rng[k] for k in sorted(k for k in rng if k.startswith("cuda."))]
    if cuda_states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda_states[:torch.cuda.device_count()])
    return int(state["step"]), list(state["history"]), list(state.get("validation", []))


SELECTED_WEIGHTS, SELECTION_LOG, SELECTED_RECORD = "selected.safetensors", "selection.json", "selected.json"


def save_selection(directory: str | Path | None, state: dict | None, step: int | None,
                   records: list[dict] | None = None) -> None:
    """Persist the selection's best weights (``state``) or its records, atomically."""
    if directory is None:
        return
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if state is not None:
        tmp = directory / f".{SELECTED_WEIGHTS}.{uuid.uuid4().hex}"
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp), metadata={"step": str(step)})
        (directory / SELECTED_RECORD).unlink(missing_ok=True)  # weights without their record are never loaded
        record = _record(tmp)
        os.replace(tmp, directory / SELECTED_WEIGHTS)
        write_json_atomic(directory / SELECTED_RECORD, record)
    if records is not None:
        write_json_atomic(directory / SELECTION_LOG, {"records": records})


def load_selection(directory: str | Path | None) -> list[dict]:
    """The selection records of an interrupted run (none without its chosen weights as their writer
    recorded them: the selection then starts again)."""
    if directory is None or not (Path(directory) / SELECTED_WEIGHTS).is_file():
        return []
    try:
        load_selected_state(directory)
    except DamagedCheckpoint as e:
        log.warning("%s: the dev selection starts again", e)
        return []
    path = Path(directory) / SELECTION_LOG
    return json.loads(path.read_text())["records"] if path.is_file() else []


def load_selected_state(directory: str | Path | None) -> dict[str, torch.Tensor]:
    """The kept weights, checked against their record (DamagedCheckpoint)."""
    directory = Path(directory)
    try:
        record = json.loads((directory / SELECTED_RECORD).read_text())
    except (OSError, ValueError):
        record = None
    return load(_checked(directory / SELECTED_WEIGHTS, record))
