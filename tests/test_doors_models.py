"""Property-based: model directories and checksum files with generated damage, through the one door
(pearl_model.inference.model_dirs) as `load_encoder` and `pearl verify` use it (issue 54).

One tiny random-weight export is written per module; each example copies it and damages the copy
(flipped bytes, files deleted or added, some under names that are not UTF-8, `pearl_model.json` gone
or edited, garbled `checksums.sha256` lines with `..` and absolute paths, links out of the directory,
an empty directory), starting from the export, from the export with its `checksums.sha256` deleted, or
from an export as made before checksums. Each example ends in a load of an undamaged directory with
the untouched vectors, or in one line of a documented error type; a directory that still holds its
`checksums.sha256` never loads damaged, an export whose `pearl_model.json` names a `checksums.sha256`
that is gone never loads (issue 64), and nothing outside the directory is opened."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import event, given, strategies as st  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from pearl_cli.main import app  # noqa: E402
from pearl_model.inference.backbones import BackboneError  # noqa: E402
from pearl_model.inference.checksums import CHECKSUMS  # noqa: E402
from pearl_model.inference.export import PearlExportError, export_pearl  # noqa: E402
from pearl_model.inference.loading import load_encoder  # noqa: E402
from pearl_model.inference.model_dirs import EXPORT_ONLY  # noqa: E402
from pearl_model.inference.network import read_config, ships_checksums  # noqa: E402
from tests.test_export import PHRASES, model, original, tok  # noqa: E402,F401  (fixtures)

DOCUMENTED = (PearlExportError, BackboneError)  # ChecksumError is a PearlExportError
CONTENT = ("flip", "delete", "extra", "metadata", "link_out", "empty")  # what changes the model's files

# Opens of paths under an example's "outside" directory (an audit hook cannot be removed: it only
# records while a list is set).
_watch: dict[str, list | str | None] = {"root": None, "opened": None}


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _watch["opened"] is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if path.startswith(_watch["root"]) and os.path.realpath(path).startswith(_watch["root"] + "/outside"):
            _watch["opened"].append(path)


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def shipped(model, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PEARL_CACHE", str(tmp_path_factory.mktemp("cache")))
        path = export_pearl(model, tmp_path_factory.mktemp("doors-models") / "m", fast_backend=False)
        reference = load_encoder(str(path), device="cpu", backend="torch").encode(PHRASES)
        yield path, reference


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("verified")
        mp.setenv("PEARL_CACHE", str(path))
        yield path


EXPORT_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                "pearl_model.json", "pearl_head.safetensors", "pearl_backbone.json", "char_encoder/config.json",
                "char_encoder/model.safetensors", "modules.json", "st_module.py", "network.py", "README.md"]
name = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=10)
extra_name = st.tuples(st.sampled_from(["", "char_encoder/", "1_Normalize/"]), name).map("".join).filter(
    lambda n: n.rsplit("/", 1)[-1] not in (".", "..") and len(n.encode()) < 200)
# a name the file system hands over as bytes that are not UTF-8 (os gives them as surrogates)
bytes_name = st.tuples(st.binary(max_size=8), st.binary(max_size=3)).map(
    lambda t: os.fsdecode(t[0].replace(b"/", b"_").replace(b"\0", b"_") + b"\xff" + t[1].replace(b"/", b"_")
                          .replace(b"\0", b"_")))  # \xff is never UTF-8
hex64 = st.text("0123456789abcdefABCDEF", min_size=64, max_size=64)
listed_path = st.one_of(st.sampled_from(EXPORT_FILES), extra_name,
                        st.sampled_from(["../outside/secret", "/outside/secret", "./config.json", "a//b",
                                         "char_encoder/../config.json", "OUTSIDE_ABS"]))
checksum_line = st.one_of(
    st.tuples(hex64, st.sampled_from(["  ", " ", "\t", "  *"]), listed_path).map("".join),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=90),
    st.tuples(st.text("0123456789abcdefxyz", max_size=70), st.just("  "), listed_path).map("".join))
mutation = st.one_of(
    st.tuples(st.just("flip"), st.sampled_from(EXPORT_FILES), st.integers(0, 1 << 30)),
    st.tuples(st.just("delete"), st.sampled_from(EXPORT_FILES + ["char_encoder"])),
    st.tuples(st.just("extra"), st.one_of(extra_name, bytes_name), st.binary(max_size=32)),
    st.tuples(st.just("metadata"), st.sampled_from(["gone", "format", "not json", "a list", "a directory"])),
    st.tuples(st.just("link_out"), st.sampled_from(EXPORT_FILES + ["char_encoder", CHECKSUMS])),
    st.tuples(st.just("empty")),
    st.tuples(st.just("checksums"), st.sampled_from(["gone", "append", "replace", "drop a line", "twice", "bytes"]),
              st.lists(checksum_line, max_size=4), st.binary(min_size=1, max_size=40)))


def _damage(copy: Path, outside: Path, step: tuple) -> None:
    kind, *arg = step
    if kind == "flip":
        path = copy / arg[0]
        if path.is_file() and not path.is_symlink() and path.stat().st_size:
            data = bytearray(path.read_bytes())
            data[arg[1] % len(data)] ^= 0xFF
            path.write_bytes(bytes(data))
    elif kind == "delete":
        path = copy / arg[0]
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
    elif kind == "extra":
        path = copy / arg[0]
        if path.parent.is_dir() and not os.path.lexists(path):
            path.write_bytes(arg[1])
    elif kind == "metadata":
        path = copy / "pearl_model.json"
        if not path.is_file() or path.is_symlink():
            return
        try:
            config = json.loads(path.read_text())
        except ValueError:  # damaged by an earlier step
            config = {}
        config = config if isinstance(config, dict) else {}
        path.unlink()
        if arg[0] == "format":
            path.write_text(json.dumps(config | {"format": "pearl-model/2"}))
        elif arg[0] == "not json":
            path.write_text("{format: pearl-model/1")
        elif arg[0] == "a list":
            path.write_text(json.dumps([config]))
        elif arg[0] == "a directory":
            path.mkdir()
    elif kind == "link_out":  # an identical copy outside: only the link itself can give it away
        path = copy / arg[0]
        if os.path.lexists(path) and not path.is_symlink():
            target = outside / arg[0].replace("/", "_")
            shutil.move(str(path), str(target))
            path.symlink_to(target, target_is_directory=target.is_dir())
    elif kind == "empty":
        for entry in list(copy.iterdir()):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    elif kind == "checksums":
        how, lines, raw = arg
        path = copy / CHECKSUMS
        if not path.is_file() or path.is_symlink():
            return
        lines = [line.replace("OUTSIDE_ABS", str(outside / "secret")) for line in lines]
        old = path.read_bytes().decode("utf-8", "replace").splitlines()
        new = {"gone": None, "append": old + lines, "replace": lines, "drop a line": old[1:],
               "twice": old + old[:1]}.get(how)
        if how == "bytes":
            path.write_bytes(b"\xff" + raw)
        elif new is None:
            path.unlink()
        else:
            path.write_text("".join(f"{line}\n" for line in new))


def _changed(copy: Path, shipped: Path) -> bool:
    """Whether any file differs from the export (content, presence, a link in place of a file)."""
    def files(root):
        return {p.relative_to(root).as_posix(): (p.is_symlink(), p.read_bytes() if p.is_file() else None)
                for p in root.rglob("*") if not p.is_dir() or p.is_symlink()}
    return files(copy) != files(shipped)


ORIGINS = ("export", "checksums deleted", "before checksums")


def _before_checksums(root: Path) -> None:
    """As an export from before checksums: no checksums.sha256, and a pearl_model.json that names none."""
    (root / CHECKSUMS).unlink()
    config = json.loads((root / "pearl_model.json").read_text())
    del config["checksums"]
    (root / "pearl_model.json").write_text(json.dumps(config))


@given(origin=st.sampled_from(ORIGINS), steps=st.lists(mutation, max_size=3))
def test_a_damaged_model_directory_never_loads_damaged(shipped, cache, origin, steps):
    export, reference = shipped
    base = Path(tempfile.mkdtemp(prefix="door-"))
    try:
        copy, outside = base / "model", base / "outside"
        shutil.copytree(export, copy)
        outside.mkdir()
        (outside / "secret").write_text("outside the model directory\n")
        if origin != "export":  # the loaders meet the damage themselves; the reference changed alike
            export = base / "shipped"
            shutil.copytree(shipped[0], export)
            for root in (copy, export):
                (root / CHECKSUMS).unlink() if origin == "checksums deleted" else _before_checksums(root)
        for step in steps:
            _damage(copy, outside, step)
        changed = _changed(copy, export)
        has_checksums = (copy / CHECKSUMS).is_file() and not (copy / CHECKSUMS).is_symlink()
        checksums_edited = (has_checksums
                            and (copy / CHECKSUMS).read_bytes() != (export / CHECKSUMS).read_bytes())
        links_out = any(p.is_symlink() for p in copy.rglob("*"))

        _watch.update(root=str(base), opened=[])
        try:
            loaded, error = load_encoder(str(copy), device="cpu", backend="torch"), None
        except DOCUMENTED as e:
            loaded, error = None, e
        finally:
            opened, _watch["opened"] = _watch["opened"], None
        verify = CliRunner().invoke(app, ["verify", str(copy)])
        event(f"{origin}: {type(error).__name__ if error else 'loaded'}")

        assert not opened, f"read outside the model directory: {opened}"
        assert "Traceback" not in verify.output and len(verify.output.strip().splitlines()) == 1, verify.output
        if error is not None:
            message = str(error)
            assert message and "\n" not in message and "\r" not in message, repr(message)
            assert verify.exit_code in (1, 2)
        metadata_ok = (copy / "pearl_model.json").is_file() and not (copy / "pearl_model.json").is_symlink()
        if ships_checksums(read_config(copy)) and not os.path.lexists(copy / CHECKSUMS):  # issue 64
            assert error is not None, f"an export without the {CHECKSUMS} it names loaded: {steps}"
            assert verify.exit_code == 1, verify.output
        if not changed and origin != "checksums deleted":
            assert loaded is not None and verify.exit_code == (0 if origin == "export" else 2), (error, verify.output)
            np.testing.assert_allclose(loaded.encode(PHRASES), reference, atol=1e-6)
            return
        if links_out:
            assert error is not None and "links outside" in str(error), error
        if has_checksums:  # whatever else changed, the listing sees it (or is itself unreadable)
            assert error is not None, f"loaded a changed directory that holds {CHECKSUMS}: {steps}"
            assert verify.exit_code == 1, verify.output
        pieces = [p for p in EXPORT_ONLY if os.path.lexists(copy / p)]
        if pieces and not metadata_ok:  # half an export
            assert error is not None, f"half an export loaded: {steps}"
        if checksums_edited:
            assert error is not None, f"loaded with an edited {CHECKSUMS}: {steps}"
        # Left: a changed directory without checksums.sha256 whose pearl_model.json names none (an
        # export from before checksums) loads unchecked, as a backbone does.
    finally:
        shutil.rmtree(base, ignore_errors=True)
