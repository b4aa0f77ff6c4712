"""pearl_model.cli through typer's runner, on a tiny saved model directory."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from typer.testing import CliRunner  # noqa: E402

from pearl_model.cli import app  # noqa: E402

WORDS = ["the", "new", "york", "times", "post", "nytimes", "banana"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-model")
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS))
    transformers.BertTokenizerFast(str(d / "vocab.txt")).save_pretrained(d)
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    transformers.BertModel(cfg, add_pooling_layer=False).save_pretrained(d)
    (d / "pearl_backbone.json").write_text(json.dumps({"pooling": "mean", "query_prefix": "",
                                                       "add_pooling_layer": False}))
    return d


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
    import pearl_model.cli as cli

    seen = []
    monkeypatch.setattr(cli, "DEFAULT_BACKBONE", "the-default")

    class Stop(Exception):
        pass

    def fake_from_backbone(spec, **kw):  # only records which backbone the CLI falls back to
        seen.append(spec)
        raise Stop

    monkeypatch.setattr("pearl_model.encoder.PhraseEncoder.from_backbone", fake_from_backbone)
    r = CliRunner().invoke(app, ["encode", "banana", "--storage-root", str(tmp_path / "empty")])
    assert isinstance(r.exception, Stop) and seen == ["the-default"]
    assert "nothing has been promoted yet" in r.output and "using the backbone the-default" in r.output
