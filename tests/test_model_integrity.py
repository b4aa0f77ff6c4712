"""A model's files as committed: checksums shipped and checked on load, `pearl verify`, and
encoding (every engine) never writing into a model directory."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from pearl_cli.main import app  # noqa: E402
from pearl_model.inference.export import PearlExportError, export_pearl, load_pearl  # noqa: E402
from pearl_model.inference.onnx_backend import BACKENDS, engine_available, backend_packages  # noqa: E402
from tests.test_encoder import WORDS, tiny  # noqa: E402,F401  (fixture)
from tests.test_export import PHRASES, model, original, tok  # noqa: E402,F401  (fixtures)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def shipped(model, tmp_path_factory):
    return export_pearl(model, tmp_path_factory.mktemp("integrity") / "m")


def tree(root: Path) -> dict[str, str]:
    """Every file and directory under root with its bytes' sha256: what 'unchanged' means."""
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


def flip_byte(path: Path, at: int = -100) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF  # same size: a size check alone misses it
    path.write_bytes(bytes(data))


def test_the_export_lists_every_file_in_sha256sum_format(shipped):
    lines = (shipped / "checksums.sha256").read_text().splitlines()
    listed = {line.split("  ", 1)[1]: line.split("  ", 1)[0] for line in lines}
    files = {p.relative_to(shipped).as_posix() for p in shipped.rglob("*") if p.is_file()} - {"checksums.sha256"}
    assert set(listed) == files and {"model.safetensors", "st_module.py", "onnx/model.onnx"} <= files
    assert all(hashlib.sha256((shipped / f).read_bytes()).hexdigest() == h for f, h in listed.items())


def test_pearl_verify_exit_codes(shipped, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(shipped, copy)
    r = CliRunner().invoke(app, ["verify", str(copy)])
    assert r.exit_code == 0 and len(r.output.strip().splitlines()) == 1 and "match" in r.output, r.output
    flip_byte(copy / "model.safetensors")
    r = CliRunner().invoke(app, ["verify", str(copy)])
    assert r.exit_code == 1 and "model.safetensors: sha256 differs" in r.output and "Traceback" not in r.output
    shutil.copyfile(shipped / "model.safetensors", copy / "model.safetensors")
    (copy / "adapter_config.json").write_text("{}")  # a file the export never had is read by loaders too
    r = CliRunner().invoke(app, ["verify", str(copy)])
    assert r.exit_code == 1 and "adapter_config.json: not listed" in r.output
    (copy / "adapter_config.json").unlink()
    (copy / "st_module.py").unlink()
    r = CliRunner().invoke(app, ["verify", str(copy)])
    assert r.exit_code == 1 and "st_module.py: missing" in r.output
    (copy / "checksums.sha256").unlink()  # every export writes one: its absence is damage
    r = CliRunner().invoke(app, ["verify", str(copy)])
    assert r.exit_code == 1 and "without its checksums.sha256" in r.output
    r = CliRunner().invoke(app, ["verify", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "not a directory" in r.output


def test_a_tampered_weight_file_is_refused_on_load(shipped, tmp_path, cache):
    from pearl_model.inference.loading import load_encoder

    copy = tmp_path / "copy"
    shutil.copytree(shipped, copy)
    load_pearl(copy, device="cpu")  # verified: leaves a marker
    assert list((cache / "verified").iterdir())
    flip_byte(copy / "model.safetensors")  # a new mtime: the marker no longer applies
    with pytest.raises(PearlExportError, match=r"copy.*model\.safetensors: sha256 differs"):
        load_pearl(copy, device="cpu")
    with pytest.raises(PearlExportError, match=r"model\.safetensors: sha256 differs"):
        load_encoder(str(copy))
    r = CliRunner().invoke(app, ["encode", "a car", "--model", str(copy)])
    assert r.exit_code == 2 and "model.safetensors: sha256 differs" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_a_second_load_only_stats_the_files(shipped, tmp_path, monkeypatch):
    from pearl_model.inference import network

    copy = tmp_path / "copy"
    shutil.copytree(shipped, copy)
    load_pearl(copy, device="cpu")

    def no_hashing(path):
        raise AssertionError(f"hashed {path} again")
    monkeypatch.setattr(network, "sha256_file", no_hashing)  # where checksums.py's comparison hashes
    load_pearl(copy, device="cpu")  # the marker: (path, size, mtime) unchanged
    flip_byte(copy / "pearl_head.safetensors", at=-4)  # a new mtime: hashed again, so seen
    with pytest.raises(AssertionError, match="hashed"):
        load_pearl(copy, device="cpu")


def test_local_copy_checks_the_manifests_sha256(root, memory_root, tmp_path, monkeypatch):
    from storage.files import plan_fileset

    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "pc"))
    src = tmp_path / "model"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"\x01" * 1000)
    (src / "config.json").write_text("{}")
    for r in (root, memory_root):
        f = plan_fileset(r, "model", "t-1", {}, {})
        f.upload(src, code_version="t-1", params={}, inputs={})
        local = f.local_copy(cache_dir=tmp_path / "dl")
        assert (local / "model.safetensors").read_bytes() == b"\x01" * 1000
    committed = Path(plan_fileset(root, "model", "t-1", {}, {}).path) / "model.safetensors"
    flip_byte(committed, at=10)  # on the local root the version directory is what is loaded
    with pytest.raises(OSError, match=r"model\.safetensors does not match its manifest"):
        plan_fileset(root, "model", "t-1", {}, {}).local_copy()
    flip_byte(tmp_path / "dl" / "model.safetensors", at=10)  # a changed download: fetched again
    f = plan_fileset(memory_root, "model", "t-1", {}, {})
    assert (f.local_copy(cache_dir=tmp_path / "dl") / "model.safetensors").read_bytes() == b"\x01" * 1000
    f.fs.pipe_file(f.stored_path("model.safetensors"), b"\x02" * 1000)  # changed in the store itself
    shutil.rmtree(tmp_path / "dl")
    with pytest.raises(OSError, match=r"model\.safetensors does not match its manifest"):
        f.local_copy(cache_dir=tmp_path / "dl")


def _runnable(engine: str) -> bool:
    return all(engine_available(p) for p in backend_packages(engine))


ENGINES = [b for b in BACKENDS if b != "auto"]


def test_encoding_with_every_engine_leaves_the_model_directory_unchanged(shipped, tmp_path, cache):
    copy = tmp_path / "copy"
    shutil.copytree(shipped, copy)
    before = tree(copy)
    engines = [e for e in ENGINES if e == "torch" or _runnable(e)]
    loaded = load_pearl(copy, device="cpu")
    ref = loaded.encode(PHRASES, backend="torch")
    for engine in engines:
        v = loaded.encode(PHRASES, backend=engine)
        assert (v * ref).sum(1).min() > 0.9, engine
    changed = load_pearl(copy, device="cpu")  # other weights than the shipped graph's: rebuilt, elsewhere
    with torch.no_grad():
        changed.char_proj.weight.mul_(2.0)
    for engine in engines:
        changed.encode(PHRASES, backend=engine)
    assert tree(copy) == before
    assert (cache / "onnx").is_dir()  # where the engines' graphs went
    assert CliRunner().invoke(app, ["verify", str(copy)]).exit_code == 0


def test_a_backbone_directory_is_not_written_by_its_engines(tiny, cache):
    before = tree(Path(tiny.info.source))
    for engine in [e for e in ENGINES if e != "torch" and _runnable(e)]:
        tiny._runners.pop(engine, None)
        tiny.encode(WORDS[:6], backend=engine)
        assert cache in tiny._runners[engine].dir.parents
    assert tree(Path(tiny.info.source)) == before


def test_a_graph_the_export_ships_is_read_from_it(shipped):
    runner = load_pearl(shipped, device="cpu").exported_graph("onnx")
    assert runner.dir == shipped / "onnx"


def test_files_the_trainer_adds_travel_inside_the_checksums(model, tmp_path):
    out = export_pearl(model, tmp_path / "m", fast_backend=False, extra_files={"training_log.json": "{}"})
    assert "  training_log.json" in (out / "checksums.sha256").read_text()
    assert CliRunner().invoke(app, ["verify", str(out)]).exit_code == 0
    with pytest.raises(ValueError, match="not a new file name"):
        export_pearl(model, tmp_path / "n", fast_backend=False, extra_files={"config.json": "{}"})
    assert not (tmp_path / "n").exists()
