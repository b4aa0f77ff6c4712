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
