"""pearl_model.inference.export / st_module: weight averaging, export -> load round trip, sentence-transformers."""
from __future__ import annotations

import copy
import json
import shutil
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pearl_model.inference.backbones import BackboneInfo  # noqa: E402
from pearl_model.training.char_encoder import CharEncoder, CharVocab  # noqa: E402
from pearl_model.inference.encoder import PhraseEncoder  # noqa: E402
from pearl_model.inference.export import (PearlEncoder, PearlExportError, average_state_dicts,  # noqa: E402
                                          export_pearl, is_pearl_export, load_pearl)
from pearl_model.inference.model import PearlModel  # noqa: E402
from pearl_model.phrases.labels import LABELS  # noqa: E402

torch.set_num_threads(1)

WORDS = ["the", "new", "york", "times", "post", "review", "bank", "river", "of", "a", "city", "red", "car"]
HIDDEN, CHAR_OUT, PROJ, MAX_CHARS = 32, 12, 8, 12
PHRASES = ["the new york times", "Bank of the River", "car", "a red car review", "york city post", "riverbank"]


def _bert(seed: int):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=HIDDEN, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    return transformers.BertModel(cfg, add_pooling_layer=False).eval()


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocab")
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS))
    return transformers.BertTokenizerFast(str(d / "vocab.txt"))


@pytest.fixture(scope="module")
def original():
    """The 'original' backbone (before fine-tuning)."""
    return _bert(0)


@pytest.fixture(scope="module")
def model(tok, original):
    """A 'fine-tuned' PEARL model: the original backbone with different weights, random char branch."""
    tuned = _bert(0)
    with torch.no_grad():
        for p in tuned.parameters():
            p.add_(0.05 * torch.randn_like(p))
    vocab = CharVocab.build(WORDS)
    torch.manual_seed(2)
    char = CharEncoder(len(vocab), CHAR_OUT, char_dim=8, kernel_sizes=(2, 3), n_filters=8, hidden=16,
                       max_len=MAX_CHARS).eval()
    enc = PhraseEncoder(tuned, tok, BackboneInfo("tiny", "tiny", "local", query_prefix="query: ", max_length=16,
                                                 dim=HIDDEN))
    return PearlModel.from_parts(enc, char, char_proj_dim=PROJ, char_vocab=vocab, max_words=5).eval()


@pytest.fixture()
def no_unpickling(monkeypatch):
    """Loading must read safetensors and JSON only: any torch.load / pickle load fails the test."""
    import pickle

    def refuse(*a, **k):
        raise AssertionError("something was unpickled")
    for mod, name in [(torch, "load"), (pickle, "load"), (pickle, "loads")]:
        monkeypatch.setattr(mod, name, refuse)


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    return export_pearl(model, tmp_path_factory.mktemp("exports") / "plain", metadata={"training_set": "v1"})


# --- averaging ---------------------------------------------------------------------------

def test_average_state_dicts_is_exact():
    f64 = torch.float64
    ft = {"w": torch.tensor([1.0, 2.0, -3.0]), "pos": torch.arange(3), "h": torch.tensor([0.5], dtype=f64)}
    orig = {"w": torch.tensor([3.0, 0.0, 1.0]), "pos": torch.tensor([7, 7, 7]), "h": torch.tensor([1.5], dtype=f64)}
    assert torch.equal(average_state_dicts(ft, orig, 1.0)["w"], ft["w"])
    assert torch.equal(average_state_dicts(ft, orig, 0.0)["w"], orig["w"])
    half = average_state_dicts(ft, orig)  # default weight 0.5
    assert torch.equal(half["w"], torch.tensor([2.0, 1.0, -1.0]))
    assert half["h"].dtype == torch.float64 and half["h"].item() == 1.0
    assert torch.equal(half["pos"], ft["pos"])  # non-float: taken from the fine-tuned side
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    assert torch.equal(average_state_dicts({"x": a}, {"x": b}, 0.3)["x"], 0.3 * a + 0.7 * b)
    assert torch.equal(ft["w"], torch.tensor([1.0, 2.0, -3.0]))  # inputs untouched


def test_average_state_dicts_rejects_mismatches():
    with pytest.raises(ValueError, match="keys.*extra"):
        average_state_dicts({"a": torch.zeros(2)}, {"a": torch.zeros(2), "extra": torch.zeros(1)})
    with pytest.raises(ValueError, match="keys.*b"):
        average_state_dicts({"a": torch.zeros(2), "b": torch.zeros(2)}, {"a": torch.zeros(2)})
    with pytest.raises(ValueError, match="a: shape"):
        average_state_dicts({"a": torch.zeros(2)}, {"a": torch.zeros(3)})
    with pytest.raises(ValueError, match="weight"):
        average_state_dicts({"a": torch.zeros(2)}, {"a": torch.zeros(2)}, 1.5)


# --- export and load -------------------------------------------------------------------

def test_layout_and_round_trip(model, exported, no_unpickling):
    names = {p.relative_to(exported).as_posix() for p in exported.rglob("*") if p.is_file()}
    for f in ["config.json", "model.safetensors", "tokenizer.json", "pearl_head.safetensors", "pearl_model.json",
              "char_encoder/config.json", "char_encoder/model.safetensors", "modules.json",
              "config_sentence_transformers.json", "sentence_bert_config.json", "pearl_backbone.json"]:
        assert f in names, f
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)
    assert not list(exported.parent.glob(".*tmp*"))  # the temporary directory was renamed away
    cfg = json.loads((exported / "pearl_model.json").read_text())
    assert cfg["format"] == "pearl-model/1" and cfg["labels"] == list(LABELS) and cfg["n_labels"] == 95
    assert (cfg["dim"], cfg["char_proj_dim"], cfg["query_prefix"], cfg["max_length"], cfg["max_words"],
            cfg["max_chars"]) == (HIDDEN + PROJ, PROJ, "query: ", 16, 5, MAX_CHARS)
    assert cfg["average_weight"] is None and cfg["metadata"] == {"training_set": "v1"}
    assert is_pearl_export(exported) and not is_pearl_export(exported / "char_encoder")
    assert not is_pearl_export(exported / "missing")

    loaded = load_pearl(exported, device="cpu")
    assert loaded.name == str(exported) and not loaded.training
    np.testing.assert_array_equal(loaded.encode(PHRASES, backend="torch"), model.encode(PHRASES))  # same weights
    b = model.batcher(PHRASES)
    with torch.no_grad():
        np.testing.assert_array_equal(loaded(**b)[1].numpy(), model(**b)[1].numpy())  # type head too


def test_export_averages_the_backbone_only(model, original, tmp_path):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = export_pearl(model, tmp_path / "avg", original_backbone_state=original.state_dict(), average_weight=0.5)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # in-memory model unchanged
    by_hand = copy.deepcopy(model)
    ft, orig = model.backbone.state_dict(), original.state_dict()
    by_hand.backbone.load_state_dict({k: 0.5 * ft[k] + 0.5 * orig[k] if ft[k].is_floating_point() else ft[k]
                                      for k in ft})
    loaded = load_pearl(out, device="cpu")
    np.testing.assert_allclose(loaded.encode(PHRASES), by_hand.encode(PHRASES), atol=1e-6, rtol=0)
    assert not np.allclose(loaded.encode(PHRASES), model.encode(PHRASES), atol=1e-4)
    assert json.loads((out / "pearl_model.json").read_text())["average_weight"] == 0.5
    for k in ("char_encoder", "char_proj", "type_head"):
        for name, p in getattr(loaded, k).state_dict().items():
            assert torch.equal(p, getattr(model, k).state_dict()[name]), (k, name)


def test_char_scale_scales_the_character_part_only_and_keeps_the_type_logits(model, tmp_path):
    out = export_pearl(model, tmp_path / "half", char_scale=0.5)
    loaded = load_pearl(out, device="cpu")
    d = model.backbone_dim
    ref, half = model.encode(PHRASES, normalize=False), loaded.encode(PHRASES, normalize=False, backend="torch")
    np.testing.assert_allclose(half[:, :d], ref[:, :d], atol=1e-6, rtol=0)
    np.testing.assert_allclose(half[:, d:], 0.5 * ref[:, d:], atol=1e-6, rtol=0)
    assert np.abs(ref[:, d:]).max() > 1e-3  # there is a character part to scale
    b = model.batcher(PHRASES)
    with torch.no_grad():
        np.testing.assert_allclose(loaded(**b)[1].numpy(), model(**b)[1].numpy(), atol=1e-5, rtol=1e-5)
    assert json.loads((out / "pearl_model.json").read_text())["char_scale"] == 0.5
    with pytest.raises(ValueError, match="char_scale must be > 0"):
        export_pearl(model, tmp_path / "zero", char_scale=0.0)
    assert not (tmp_path / "zero").exists()


def test_selection_scores_the_model_as_exported_with_its_char_scale(model, original):
    from pearl_model.training.selection import exported_weights

    before = {k: v.clone() for k, v in model.state_dict().items()}
    d = model.backbone_dim
    ref = model.encode(PHRASES, normalize=False)
    with exported_weights(model, original.state_dict(), 1.0, char_scale=0.25) as inside:
        inner = inside.encode(PHRASES, normalize=False)
    np.testing.assert_allclose(inner[:, d:], 0.25 * ref[:, d:], atol=1e-6, rtol=0)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # restored


def test_dev_selector_scores_every_char_scale_on_one_encoding_and_keeps_the_best(model, original, monkeypatch):
    from pearl_model.training import selection as S

    with S.exported_weights(model, original.state_dict(), 0.5, char_scale=0.25) as inside:
        want = inside.encode(PHRASES, normalize=False)  # what the export at 0.25 gives
    seen, calls = {}, []
    real_encode = PearlEncoder.encode
    monkeypatch.setattr(PearlEncoder, "encode", lambda self, *a, **kw: calls.append(1) or real_encode(self, *a, **kw))

    def row(value):  # a stable-protocol row of two draws
        return {"dataset": "x:dev", "metric": "nmi", "value": value, "draws": [value - 1, value + 1]}

    def dev_rows(encoder, benchmark_dir, retrieval, datasets, **_):  # best when the vectors are the 0.25 export's
        seen[encoder.scale] = v = encoder.encode(PHRASES, normalize=False)
        return {"x:dev": row(-100 * float(np.abs(v - want).max()))}

    monkeypatch.setattr(S, "dev_rows", dev_rows)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rec = S.dev_selector("bench", original.state_dict(), 0.5, {"x:dev": row(0.0)}, char_scales=(1.0, 0.25, 0.5))(model)
    assert rec["char_scale"] == 0.25 and rec["select_worst"] > -1e-3
    assert rec["select_changes"]["x:dev"][0] == pytest.approx(rec["select_worst"], abs=1e-3)  # the paired change
    assert rec["dev_x:dev"] == rec["scores_by_scale"]["0.25"]["x:dev"] and set(rec["scores_by_scale"]) == {"1.0", "0.25",
                                                                                                     "0.5"}
    np.testing.assert_allclose(seen[0.25], want, atol=1e-5, rtol=0)
    d = model.backbone_dim
    np.testing.assert_allclose(seen[0.5][:, d:], 2 * seen[0.25][:, d:], atol=1e-5, rtol=0)
    np.testing.assert_allclose(seen[0.5][:, :d], seen[0.25][:, :d], atol=0, rtol=0)
    assert len(calls) == 1  # encoded once, scaled three times
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    one = S.dev_selector("bench", original.state_dict(), 0.5, {"x:dev": row(0.0)}, char_scales=(0.25,))(model)
    assert "scores_by_scale" not in one and one["char_scale"] == 0.25
    with pytest.raises(ValueError, match="char_scales must be"):
        S.dev_selector("bench", original.state_dict(), 0.5, {}, char_scales=(0.5, 0.0))


def test_backbone_loads_with_plain_transformers(exported, model):
    bert = transformers.AutoModel.from_pretrained(exported)
    tok = transformers.AutoTokenizer.from_pretrained(exported)
    batch = tok(["query: the new york times"], return_tensors="pt")
    with torch.no_grad():
        a = bert(**batch).last_hidden_state
        b = model.backbone(**batch).last_hidden_state
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_sentence_transformers_gives_the_same_vectors(exported, request):
    st = pytest.importorskip("sentence_transformers")
    request.getfixturevalue("no_unpickling")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no deprecated-trust path is taken
        m = st.SentenceTransformer(str(exported), device="cpu", trust_remote_code=True)
    ours = load_pearl(exported, device="cpu").encode(PHRASES)
    theirs = m.encode(PHRASES, batch_size=4)
    assert theirs.shape == ours.shape == (len(PHRASES), HIDDEN + PROJ)
    assert np.abs(theirs - ours).max() < 1e-5
    assert m.get_embedding_dimension() == HIDDEN + PROJ and m.max_seq_length == 16
    assert [type(x).__name__ for x in m] == ["PearlSTModule", "Normalize"]
    blank = ["car", " "]  # a blank phrase: the prefix alone, both ways
    assert np.abs(m.encode(blank) - load_pearl(exported, device="cpu").encode(blank)).max() < 1e-5
    # sentence-transformers' own save writes a directory we (and it) load again
    resaved = exported.parent / "resaved"
    m.save(str(resaved))
    assert np.abs(load_pearl(resaved, device="cpu").encode(PHRASES) - ours).max() < 1e-6
    assert "checksums" not in json.loads((resaved / "pearl_model.json").read_text())
    assert np.abs(st.SentenceTransformer(str(resaved), device="cpu", trust_remote_code=True).encode(PHRASES)
                  - ours).max() < 1e-5


def test_missing_or_foreign_directories_fail_clearly(exported, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(exported, broken)
    (broken / "pearl_head.safetensors").unlink()
    with pytest.raises(PearlExportError, match=r"broken.*pearl_head\.safetensors"):
        load_pearl(broken)
    with pytest.raises(ValueError, match="not a PEARL export"):
        load_pearl(exported / "char_encoder")
    with pytest.raises(PearlExportError, match="no such directory"):
        load_pearl(tmp_path / "nothing")


def test_export_is_atomic_and_refuses_to_clobber(model, exported, tmp_path, monkeypatch):
    with pytest.raises(FileExistsError):
        export_pearl(model, exported)
    import pearl_model.inference.export as export_module

    def boom(*a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr(export_module, "save_char_encoder", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        export_pearl(model, tmp_path / "half")
    assert not (tmp_path / "half").exists() and not list(tmp_path.iterdir())
    monkeypatch.undo()
    out = export_pearl(model, exported.parent / "plain", overwrite=True, metadata={"training_set": "v2"})
    assert json.loads((out / "pearl_model.json").read_text())["metadata"] == {"training_set": "v2"}
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []


# --- where the pipeline and the CLI pick it up -------------------------------------------

def test_evaluation_and_cli_load_an_export(exported, model, tmp_path):
    from pearl_model.inference.loading import load_encoder

    enc = load_encoder(str(exported))  # what the evaluate flow, the report and the CLI call
    assert isinstance(enc, PearlEncoder) and enc.name == str(exported)
    np.testing.assert_allclose(enc.encode(PHRASES), model.encode(PHRASES), atol=1e-5)  # default engine: onnx
    raw = enc.encode(PHRASES, normalize=False, batch_size=2)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), model.encode(PHRASES), atol=1e-5)
    assert enc.encode([]).shape == (0, HIDDEN + PROJ)

    from typer.testing import CliRunner

    from pearl_cli.main import app

    out = tmp_path / "v.npy"
    r = CliRunner().invoke(app, ["encode", *PHRASES[:3], "--out", str(out), "--backbone", str(exported)])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(out), model.encode(PHRASES[:3]), atol=1e-5)
    r = CliRunner().invoke(app, ["similar", "car", "york city post", "car", "--backbone", str(exported)])
    assert r.exit_code == 0, r.output
    first = next(line for line in r.output.splitlines() if line.strip("│ ").startswith("1"))
    assert "car" in first and "1.0000" in first


def test_library_modules_import_no_pipeline_code():
    import ast
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, pearl_model.inference.export; bad = [m for m in sys.modules if "
            "m.split('.')[0] in ('prefect', 'tasks', 'flows', 'storage')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
    # st_module: its own imports (a subprocess importing sentence-transformers takes ~10 s)
    tree = ast.parse((Path(__file__).parents[1] / "pearl_model" / "inference" / "st_module.py").read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert not [m for m in names if m.split(".")[0] in ("prefect", "tasks", "flows", "storage")], names


def test_the_export_loads_where_pearl_model_cannot_be_imported(exported, tmp_path):
    """The portable path: a process in which every import of this project fails."""
    import os
    import subprocess
    import sys
    import textwrap

    out, resaved = tmp_path / "v.npy", tmp_path / "resaved"
    code = textwrap.dedent(f"""
        import sys
        for name in ("pearl_model", "tasks", "flows", "storage"):
            sys.modules[name] = None  # import pearl_model -> ImportError
        import numpy as np
        from sentence_transformers import SentenceTransformer
        m = SentenceTransformer({str(exported)!r}, device="cpu", trust_remote_code=True)
        np.save({str(out)!r}, m.encode({PHRASES!r}))
        m.save({str(resaved)!r})
        assert not [k for k in sys.modules if k.split(".")[0] == "pearl_model" and sys.modules[k] is not None]
    """)
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "hf_modules")}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, env=env, timeout=300)
    ours = load_pearl(exported, device="cpu").encode(PHRASES, backend="torch")
    assert np.abs(np.load(out) - ours).max() < 1e-5
    assert np.abs(load_pearl(resaved, device="cpu").encode(PHRASES, backend="torch") - ours).max() < 1e-6
    # a re-save lists no checksums (sentence-transformers writes files after the module): it says so, and loads
    from pearl_model.inference.loading import load_encoder

    assert "checksums" not in json.loads((resaved / "pearl_model.json").read_text())
    assert load_encoder(str(resaved), device="cpu").dim == ours.shape[1]


def test_the_export_carries_a_model_card_and_its_onnx_graph(exported):
    import re

    card = (exported / "README.md").read_text()
    assert re.search(r"\| training set \| v\d \|", card) and f"{HIDDEN + PROJ} floats = {HIDDEN} backbone + {PROJ} character" in card
    assert "AutoModel.from_pretrained(DIR)` loads the" in card and "without the character branch" in card
    assert "| PEARL-small (paper) | 97.2 | 69.2 |" in card
    assert "CC BY-SA 4.0" in card.split("## Licence")[1]  # the training data's licence travels with the model
    assert json.loads((exported / "onnx" / "graph.json").read_text())["inputs"] == \
        ["input_ids", "attention_mask", "char_ids", "word_mask"]
