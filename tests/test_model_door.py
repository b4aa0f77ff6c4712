"""One door for model directories (issue 54, item 1): every model directory is resolved, verified and
loaded by pearl_model.inference.model_dirs; a tampered or half export is refused with one line by
every way in (load_encoder, the CLI, `pearl verify`, sentence-transformers), and no code outside
the door calls the low-level loaders."""
from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from pearl_cli.main import app  # noqa: E402
from pearl_model.inference.export import PearlExportError, export_pearl  # noqa: E402
from tests.test_export import PHRASES, model, original, tok  # noqa: E402,F401  (fixtures)
from tests.test_model_integrity import cache, flip_byte  # noqa: E402,F401  (cache: autouse, PEARL_CACHE per test)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shipped(model, tmp_path_factory):
    return export_pearl(model, tmp_path_factory.mktemp("door") / "m", fast_backend=False)


def _copy(shipped: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(shipped, copy)
    return copy


def _metadata_gone(copy: Path) -> None:
    (copy / "pearl_model.json").unlink()


def _metadata_of_another_format(copy: Path) -> None:
    config = json.loads((copy / "pearl_model.json").read_text())
    (copy / "pearl_model.json").write_text(json.dumps(config | {"format": "pearl-model/0"}))


def _one_line_refusal(result, *needles: str) -> None:
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert all(n in result.output for n in needles), result.output


@pytest.mark.parametrize("edit", [_metadata_gone, _metadata_of_another_format])
def test_a_tampered_export_without_its_metadata_is_refused_by_every_way_in(shipped, tmp_path, edit):
    from pearl_model.inference.loading import load_encoder

    copy = _copy(shipped, tmp_path)
    flip_byte(copy / "model.safetensors")
    edit(copy)
    with pytest.raises(PearlExportError, match=r"model\.safetensors: sha256 differs"):
        load_encoder(str(copy))
    r = CliRunner().invoke(app, ["encode", "a red car", "--model", str(copy)])
    _one_line_refusal(r, "model.safetensors: sha256 differs")
    r = CliRunner().invoke(app, ["similar", "a red car", "car", "--model", str(copy)])
    _one_line_refusal(r, "model.safetensors: sha256 differs")
    r = CliRunner().invoke(app, ["verify", str(copy)])
    _one_line_refusal(r, "model.safetensors: sha256 differs", "pearl_model.json")


def test_a_half_export_without_checksums_is_refused_with_one_line(shipped, tmp_path):
    from pearl_model.inference.loading import load_encoder

    copy = _copy(shipped, tmp_path)
    flip_byte(copy / "model.safetensors")
    (copy / "checksums.sha256").unlink()
    (copy / "pearl_model.json").unlink()  # what is left still loads as a plain backbone
    with pytest.raises(PearlExportError, match=r"half a PEARL export.*pearl_model\.json"):
        load_encoder(str(copy))
    _one_line_refusal(CliRunner().invoke(app, ["encode", "a red car", "--model", str(copy)]), "half a PEARL export")
    _one_line_refusal(CliRunner().invoke(app, ["verify", str(copy)]), "half a PEARL export")


def test_an_export_is_not_fine_tuned_or_distilled_unverified(shipped, tmp_path):
    """The backbone half of an export (the start of a new training run, a static distillation's
    teacher) comes through the door too: a checksum mismatch stops it."""
    from pearl_model.inference.encoder import PhraseEncoder
    from pearl_model.inference.model_dirs import open_model

    copy = _copy(shipped, tmp_path)
    flip_byte(copy / "model.safetensors")
    with pytest.raises(PearlExportError, match=r"model\.safetensors: sha256 differs"):
        open_model(str(copy), backbone=True, device="cpu")
    assert not hasattr(PhraseEncoder, "from_backbone")  # its public name loaded a tampered export's half unchecked
    enc = open_model(str(shipped), backbone=True, device="cpu")  # the untampered one: its backbone
    assert enc.dim == 32 and enc.encode(PHRASES[:2]).shape == (2, 32)


def test_sentence_transformers_loads_only_a_verified_export(shipped, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    copy = _copy(shipped, tmp_path)
    flip_byte(copy / "model.safetensors")
    with pytest.raises(PearlExportError, match=r"model\.safetensors: sha256 differs"):
        st.SentenceTransformer(str(copy), device="cpu", trust_remote_code=True)


def test_sentence_transformers_without_pearl_model_checks_the_exports_checksums(shipped, tmp_path, monkeypatch):
    """Where this project is not installed, the export's own code checks its checksums.sha256 (issue 64, 6)."""
    import sys

    st = pytest.importorskip("sentence_transformers")
    monkeypatch.setitem(sys.modules, "pearl_model.inference.model_dirs", None)  # `import` raises ImportError
    copy = _copy(shipped, tmp_path)
    flip_byte(copy / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors: sha256 differs"):
        st.SentenceTransformer(str(copy), device="cpu", trust_remote_code=True)
    shutil.copyfile(shipped / "model.safetensors", copy / "model.safetensors")
    (copy / "checksums.sha256").unlink()
    with pytest.raises(ValueError, match=r"without its checksums\.sha256"):
        st.SentenceTransformer(str(copy), device="cpu", trust_remote_code=True)


def _plain_modules(copy: Path) -> None:  # what sentence-transformers writes for a plain backbone
    (copy / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (copy / "1_Pooling").mkdir()
    (copy / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                "pooling_mode_mean_tokens": True}))


@pytest.mark.parametrize("edit", [lambda copy: (copy / "modules.json").unlink(), _plain_modules],
                         ids=["modules.json deleted", "modules.json replaced"])
def test_sentence_transformers_without_the_exports_modules_json_runs_none_of_its_code(shipped, tmp_path, edit):
    """The limit docs/using-the-model.md states: without the export's modules.json, sentence-transformers
    builds a plain backbone (not the PEARL model) and runs nothing of the export, so nothing can
    refuse the damage there; every other way in, and `pearl verify`, names it (issue 64, 6)."""
    from pearl_model.inference.loading import load_encoder

    st = pytest.importorskip("sentence_transformers")
    copy = _copy(shipped, tmp_path)
    flip_byte(copy / "model.safetensors")
    edit(copy)
    plain = st.SentenceTransformer(str(copy), device="cpu", trust_remote_code=True)
    assert type(plain[0]).__name__ == "Transformer"  # not st_module.PearlSTModule: no check could run
    assert plain.get_embedding_dimension() != load_encoder(str(shipped), device="cpu").dim
    with pytest.raises(PearlExportError, match=r"modules\.json: (missing|sha256 differs)"):
        load_encoder(str(copy))
    _one_line_refusal(CliRunner().invoke(app, ["verify", str(copy)]), "model.safetensors: sha256 differs",
                      "modules.json")


def test_an_export_whose_checksums_were_deleted_is_refused_by_every_way_in(shipped, tmp_path):
    """Every export writes checksums.sha256: without it the directory is damaged, not old (issue 64, 7)."""
    from pearl_model.inference.export import load_pearl
    from pearl_model.inference.loading import load_encoder

    copy = _copy(shipped, tmp_path)
    (copy / "checksums.sha256").unlink()
    for load in (load_encoder, load_pearl):  # load_pearl: the explicit way docs/using-the-model.md names
        with pytest.raises(PearlExportError, match=r"without its checksums\.sha256"):
            load(str(copy))
    _one_line_refusal(CliRunner().invoke(app, ["encode", "a red car", "--model", str(copy)]),
                      "without its checksums.sha256")
    _one_line_refusal(CliRunner().invoke(app, ["verify", str(copy)]), "without its checksums.sha256")
    st = pytest.importorskip("sentence_transformers")
    with pytest.raises(PearlExportError, match=r"without its checksums\.sha256"):
        st.SentenceTransformer(str(copy), device="cpu", trust_remote_code=True)
    # An export from before checksums names none in its pearl_model.json: it loads, and verify says so.
    config = json.loads((copy / "pearl_model.json").read_text())
    assert config.pop("checksums") == "checksums.sha256"
    (copy / "pearl_model.json").write_text(json.dumps(config))
    assert load_encoder(str(copy), device="cpu").encode(PHRASES[:1]).shape[0] == 1
    r = CliRunner().invoke(app, ["verify", str(copy)])
    assert r.exit_code == 2 and "no checksums.sha256" in r.output, r.output


def test_a_file_name_that_is_not_utf8_is_answered_in_one_line(shipped, tmp_path):
    """A name the file system gives as bytes that are not UTF-8 (issue 64, 8): named, escaped, in one line."""
    import os

    from pearl_model.inference.loading import load_encoder

    copy = _copy(shipped, tmp_path)
    try:
        (copy / os.fsdecode(b"notes-\xff.txt")).write_bytes(b"x")
    except (OSError, UnicodeError):
        pytest.skip("the file system takes UTF-8 names only")
    with pytest.raises(PearlExportError, match=r"notes-\\udcff\.txt: not listed"):
        load_encoder(str(copy))
    for args in (["encode", "a red car", "--model", str(copy)], ["similar", "a", "b", "--model", str(copy)],
                 ["verify", str(copy)]):
        _one_line_refusal(CliRunner().invoke(app, args), "not listed")


def test_what_is_neither_an_export_nor_a_model_is_refused(shipped, tmp_path):
    from pearl_model.inference.loading import load_encoder

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PearlExportError, match="not a model directory"):
        load_encoder(str(empty))
    half = tmp_path / "half"
    shutil.copytree(shipped / "char_encoder", half / "char_encoder")
    (half / "config.json").write_text("{}")
    with pytest.raises(PearlExportError, match="half a PEARL export"):
        load_encoder(str(half))


def test_a_link_out_of_the_directory_is_refused_before_anything_is_read(shipped, tmp_path):
    from pearl_model.inference.loading import load_encoder

    copy = _copy(shipped, tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text((copy / "tokenizer_config.json").read_text())
    (copy / "tokenizer_config.json").unlink()
    (copy / "tokenizer_config.json").symlink_to(outside)
    (copy / "checksums.sha256").unlink()  # no listing to catch it: the link itself must
    with pytest.raises(PearlExportError, match=r"tokenizer_config\.json.*links outside"):
        load_encoder(str(copy))
    _one_line_refusal(CliRunner().invoke(app, ["verify", str(copy)]), "links outside")


# --- no second door ------------------------------------------------------------------------

# The loaders below the door, and the modules allowed to call each (where it is defined or the
# door itself; st_module loads after asking the door, or where pearl_model is not installed).
DOOR = "pearl_model/inference/model_dirs.py"
LOW_LEVEL = {"load_pearl": {"pearl_model/inference/export.py"},
             "load_network": {"pearl_model/inference/export.py", "pearl_model/inference/st_module.py"},
             "load_backbone": {"pearl_model/inference/encoder.py"},
             "load_unchecked": set(),
             "PearlEncoder.load": set(), "StaticEncoder.load": set()}
SCANNED = ("pearl_model", "pearl_cli", "tasks", "flows", "runs", "storage", "benchmarks", "scripts")


def _called(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        owner = f.value.id if isinstance(f.value, ast.Name) else None
        if f.attr == "load":
            return f"{owner}.load" if owner in ("PearlEncoder", "StaticEncoder") else None
        return f.attr
    return None


def second_doors(root: Path = ROOT) -> list[str]:
    bad = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == DOOR or ".venv" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                name = _called(node) if isinstance(node, ast.Call) else None
                if name in LOW_LEVEL and rel not in LOW_LEVEL[name]:
                    bad.append(f"{rel}:{node.lineno} calls {name}")
    return bad


def test_no_model_directory_is_opened_beside_the_door():
    bad = second_doors()
    assert not bad, ("open model directories with pearl_model.inference.model_dirs.open_model, not:\n"
                     + "\n".join(bad))


@pytest.mark.parametrize("where, source, reported", [
    ("tasks/bad.py", "from pearl_model.inference.export import load_pearl\nm = load_pearl(p)\n",
     "tasks/bad.py:2 calls load_pearl"),
    ("flows/bad.py", "def f(p):\n    return PearlEncoder.load(p)\n", "flows/bad.py:2 calls PearlEncoder.load"),
    ("pearl_cli/bad.py", "enc = x.PhraseEncoder.load_unchecked(spec)\n", "pearl_cli/bad.py:1 calls load_unchecked"),
    ("benchmarks/bad.py", "s = StaticEncoder.load(d)\n", "benchmarks/bad.py:1 calls StaticEncoder.load"),
    ("pearl_model/inference/static.py", "m = load_pearl(d)\n", "pearl_model/inference/static.py:1 calls load_pearl"),
])
def test_a_second_door_is_reported(tmp_path, where, source, reported):
    for top in SCANNED:
        (tmp_path / top).mkdir()
    (tmp_path / "pearl_model" / "inference").mkdir()
    (tmp_path / DOOR).write_text("def open_model(p):\n    return load_pearl(p)\n")  # the door may
    (tmp_path / "tasks" / "ok.py").write_text("enc = open_model(p)\nx = json.load(f)\n")
    (tmp_path / where).write_text(source)
    assert second_doors(tmp_path) == [reported]
