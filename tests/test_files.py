"""storage.files: versioned directories of files (models), manifest last, on local and fsspec roots."""
from __future__ import annotations

import json
import os
import pickle
import threading
import time
from pathlib import Path

import pytest

from storage.datasets import DatasetIncomplete, dataset_version, latest_version
from storage.files import FileSet, plan_fileset

PARAMS = {"epochs": 3, "dim": 8}
INPUTS = {"word_vectors": "abc123"}


def model_dir(tmp_path: Path, weights: bytes = b"\x00\x01weights" * 100) -> Path:
    d = tmp_path / "model"
    (d / "sub" / "deeper").mkdir(parents=True)
    (d / "model.bin").write_bytes(weights)
    (d / "config.json").write_text('{"dim": 8}')
    (d / "sub" / "deeper" / "vocab.txt").write_text("a\nb\nc\n")
    return d


def upload(fs_: FileSet, src: Path) -> dict:
    return fs_.upload(src, code_version="t-1", params=PARAMS, inputs=INPUTS, stats={"loss": 0.5},
                      extra={"note": "x"})


@pytest.fixture(params=["local", "memory"])
def any_root(request, root, memory_root):
    return root if request.param == "local" else memory_root


def test_plan_uses_the_dataset_content_address(root):
    f = plan_fileset(root, "char_encoder", "t-1", PARAMS, INPUTS)
    assert f == FileSet(root, "char_encoder", dataset_version("char_encoder", "t-1", PARAMS, INPUTS))
    assert f.url == f"{root}/char_encoder/{f.version}"
    assert plan_fileset(root, "char_encoder", "t-2", PARAMS, INPUTS).version != f.version
    assert pickle.loads(pickle.dumps(f)) == f


def test_upload_manifest_and_local_copy_round_trip(any_root, tmp_path):
    src = model_dir(tmp_path)
    f = plan_fileset(any_root, "char_encoder", "t-1", PARAMS, INPUTS)
    assert not f.is_complete()
    man = upload(f, src)
    assert f.is_complete() and f.manifest() == man
    assert [e["file"] for e in man["files"]] == ["config.json", "model.bin", "sub/deeper/vocab.txt"]
    assert man["bytes"] == sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    assert {e["file"]: e["bytes"] for e in man["files"]}["model.bin"] == (src / "model.bin").stat().st_size
    assert man["params"] == PARAMS and man["inputs"] == INPUTS and man["code_version"] == "t-1"
    assert man["stats"] == {"loss": 0.5} and man["extra"] == {"note": "x"} and "created_at" in man
    assert "git_commit" in man
    assert latest_version(any_root, "char_encoder") == f.version
    # No temp files left behind.
    assert not [p for p in f.fs.find(f.path) if "/.tmp-" in p]

    cache = tmp_path / "cache"
    local = f.local_copy(cache_dir=cache)
    for rel in ("config.json", "model.bin", "sub/deeper/vocab.txt"):
        assert (local / rel).read_bytes() == (src / rel).read_bytes()
    if any_root.startswith("memory://"):
        assert local == cache
        # Downloaded once: a second call reuses the copy; a copy edited since is downloaded again.
        (local / "config.json").write_text("edited")
        assert f.local_copy(cache_dir=cache) == cache and (cache / "config.json").read_text() == '{"dim": 8}'
    else:
        assert local == Path(f.path)  # a local root is read in place


def test_incomplete_version_is_never_read(any_root, tmp_path):
    f = plan_fileset(any_root, "char_encoder", "t-1", PARAMS, INPUTS)
    f.fs.makedirs(f.path, exist_ok=True)
    with f.fs.open(f"{f.path}/model.bin", "wb") as fh:
        fh.write(b"half")
    assert not f.is_complete()
    with pytest.raises(DatasetIncomplete, match="no manifest"):
        f.manifest()
    with pytest.raises(DatasetIncomplete):
        f.local_copy(cache_dir=tmp_path / "cache")
    # Finishing it replaces the leftovers; a stale file the new upload lacks is removed.
    with f.fs.open(f"{f.path}/stale.bin", "wb") as fh:
        fh.write(b"old")
    upload(f, model_dir(tmp_path))
    local = f.local_copy(cache_dir=tmp_path / "cache")
    assert (local / "model.bin").read_bytes() == (tmp_path / "model" / "model.bin").read_bytes()
    assert not f.fs.exists(f"{f.path}/stale.bin") and not f.fs.exists(f.stored_path("stale.bin"))


def test_reupload_of_a_complete_version_is_a_no_op(any_root, tmp_path):
    f = plan_fileset(any_root, "char_encoder", "t-1", PARAMS, INPUTS)
    first = upload(f, model_dir(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.bin").write_bytes(b"different")
    again = upload(f, other)
    assert again == first  # the existing manifest, untouched
    assert f.read_bytes("model.bin") == (tmp_path / "model" / "model.bin").read_bytes()
    assert not f.fs.exists(f.stored_path("other"))


def test_upload_rejects_bad_inputs(root, tmp_path):
    f = plan_fileset(root, "m", "t-1", PARAMS, INPUTS)
    with pytest.raises(ValueError, match="not a directory"):
        upload(f, tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no files"):
        upload(f, tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "_manifest.json").write_text("{}")
    with pytest.raises(ValueError, match="reserved"):
        upload(f, bad)
    assert not f.is_complete()


@pytest.mark.parametrize("bad", ["../../other/m/v1", "..", "v1/../../../x", "~", ""])
def test_a_file_set_version_never_reaches_outside_its_root(root, tmp_path, bad):
    upload(FileSet(str(tmp_path / "other"), "m", "v1"), model_dir(tmp_path))  # root is tmp/store
    with pytest.raises(ValueError, match=rf"file set m version {bad!r} is not a version"):
        FileSet(root, "m", bad)  # "../../other/m/v1" used to hand out other's files


def test_local_copy_downloads_again_for_a_stale_cache(memory_root, tmp_path):
    f = plan_fileset(memory_root, "m", "t-1", PARAMS, INPUTS)
    upload(f, model_dir(tmp_path))
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "_manifest.json").write_text(json.dumps({"version": f.version, "created_at": "long ago"}))
    (cache / "model.bin").write_bytes(b"stale")
    (cache / "sub").mkdir()
    (cache / "sub" / "pearl_model.json").write_text("{}")  # another upload's file: the loader would read it
    local = f.local_copy(cache_dir=cache)
    assert (local / "model.bin").read_bytes() == (tmp_path / "model" / "model.bin").read_bytes()
    assert not (local / "sub" / "pearl_model.json").exists()
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()) == sorted(
        [e["file"] for e in f.manifest()["files"]] + ["_manifest.json"])
    assert json.loads((local / "_manifest.json").read_text())["created_at"] == f.manifest()["created_at"]


def test_default_cache_dir(memory_root, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PEARL_CACHE", raising=False)
    f = plan_fileset(memory_root, "m", "t-1", PARAMS, INPUTS)
    upload(f, model_dir(tmp_path))
    local = f.local_copy()
    assert local == tmp_path / "home" / ".cache" / "pearl_model" / "storage" / "m" / f.version
    assert (local / "config.json").read_text() == '{"dim": 8}'
    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "pc"))  # the cache root the library uses, honoured here too
    assert f.local_copy() == tmp_path / "pc" / "storage" / "m" / f.version


@pytest.mark.parametrize("bad", ["../../escaped.txt", "/tmp/abs.txt", "sub/../../x", "a//b", ""])
def test_local_copy_never_writes_outside_its_cache(memory_root, tmp_path, bad):
    f = plan_fileset(memory_root, "m", "t-1", PARAMS, INPUTS)
    upload(f, model_dir(tmp_path))
    manifest = f.manifest()
    manifest["files"][0]["file"] = bad  # a tampered manifest on a shared root
    f.fs.pipe_file(f"{f.path}/_manifest.json", json.dumps(manifest).encode())
    cache = tmp_path / "deep" / "cache"
    with pytest.raises(ValueError, match="is not a relative path inside the version"):
        f.local_copy(cache_dir=cache)
    assert not (tmp_path / "deep" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()


def test_a_reused_file_set_version_is_published_again(root, tmp_path):
    """A, then B, then A again: _latest.json names A."""
    src = model_dir(tmp_path)
    a, b = FileSet(root, "models", "aaaa"), FileSet(root, "models", "bbbb")
    upload(a, src)
    upload(b, src)
    assert latest_version(root, "models") == "bbbb"
    assert upload(a, src)["version"] == "aaaa"  # complete: reused, untouched
    assert latest_version(root, "models") == "aaaa"


def test_two_uploads_of_one_version_at_once_never_mix_their_files(any_root, tmp_path, monkeypatch):
    """Two runs that trained one version upload it at once, interleaved (A starts, B uploads whole,
    A goes on): exactly one upload's files are the version, all matching its manifest."""
    f = plan_fileset(any_root, "models", "t-1", PARAMS, INPUTS)
    a, b = model_dir(tmp_path / "a", b"A" * 1000), model_dir(tmp_path / "b", b"B" * 1000)
    (a / "config.json").write_text('{"dim": 9}')
    cls = type(f.fs)
    real, a_paused, b_done = cls.put_file, threading.Event(), threading.Event()

    def put_file(self, lpath, rpath, *args, **kwargs):
        out = real(self, lpath, rpath, *args, **kwargs)
        if threading.current_thread().name == "A" and not a_paused.is_set():
            a_paused.set()  # A has copied one file
            assert b_done.wait(30)
        return out

    monkeypatch.setattr(cls, "put_file", put_file)
    results: dict = {}

    def upload_a():
        try:
            results["A"] = upload(f, a)
        except BaseException as e:  # seen by the assertions below
            results["A"] = e

    thread = threading.Thread(target=upload_a, name="A")
    thread.start()
    assert a_paused.wait(30)
    try:
        results["B"] = upload(f, b)
    finally:
        b_done.set()
        thread.join(30)
    assert results["A"] == results["B"] == f.manifest()  # B committed first; A gives way
    local = f.local_copy(cache_dir=tmp_path / "cache")  # every file checked against the manifest
    assert (local / "model.bin").read_bytes() == b"B" * 1000
    assert (local / "config.json").read_text() == '{"dim": 8}'
    assert not [p for p in f.fs.find(f.path.rsplit("/", 1)[0]) if "/.tmp-" in p]  # no staging left behind


def test_a_killed_uploads_staging_is_removed_once_old(root, tmp_path):
    f = plan_fileset(root, "models", "t-1", PARAMS, INPUTS)
    dead = Path(f.path).parent / ".tmp-0123456789abcdef"  # a killed upload's staging directory
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "model.bin").write_bytes(b"half")
    fresh = Path(f.path).parent / ".tmp-fedcba9876543210"  # a live upload's: young
    fresh.mkdir()
    old = time.time() - 7 * 3600
    os.utime(dead, (old, old))
    upload(f, model_dir(tmp_path))
    assert not dead.exists() and fresh.is_dir()


def test_a_stored_file_replaced_by_a_link_is_refused_wherever_it_points(root, tmp_path):
    """A model version on a local root is loaded in place: a file of it replaced by a symbolic link,
    even to a copy of the very same bytes, is refused (the project writes none), and never followed."""
    from storage.verified import UnsafeManifest

    f = plan_fileset(root, "m", "t-1", PARAMS, INPUTS)
    upload(f, model_dir(tmp_path))
    stored = Path(f.path) / "model.bin"
    twin = tmp_path / "twin.bin"
    twin.write_bytes(stored.read_bytes())
    stored.unlink()
    stored.symlink_to(twin)
    with pytest.raises(UnsafeManifest, match="model.bin is a symbolic link"):
        f.local_copy()
