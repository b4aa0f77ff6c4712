"""pearl_model.inference.static: model2vec distillation of a backbone or a PEARL export, loadable in both libraries."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("model2vec")

from pearl_model.inference.export import export_pearl  # noqa: E402
from pearl_model.inference.distill import distill_static  # noqa: E402
from pearl_model.inference.static import StaticEncoder, is_static_model  # noqa: E402
from tests.test_cli import model_dir  # noqa: E402,F401  (fixture: a tiny saved backbone)
from tests.test_export import PHRASES, model, original, tok  # noqa: E402,F401  (fixtures)


def test_distilled_backbone_loads_in_model2vec_and_sentence_transformers(model_dir, tmp_path):
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    out = distill_static(str(model_dir), tmp_path / "static", pca_dims=8)
    assert is_static_model(out) and not is_static_model(model_dir)
    enc = StaticEncoder.load(out)
    phrases = ["the new york times", "banana", "new york post", "the times"]
    v = enc.encode(phrases)
    assert v.shape == (4, 8) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(v[0], v[1], atol=1e-3)
    for other in (StaticModel.from_pretrained(str(out)).encode(phrases),  # stored as float16
                  SentenceTransformer(str(out), device="cpu").encode(phrases)):
        other = np.asarray(other, dtype=np.float32)
        assert ((other * v).sum(1) / np.linalg.norm(other, axis=1) > 0.999).all()
    assert enc.encode([]).shape == (0, 8)


def test_a_pearl_export_distils_its_backbone_half(model, tmp_path):
    out = distill_static(str(export_pearl(model, tmp_path / "m")), tmp_path / "static", pca_dims=None)
    enc = StaticEncoder.load(out)
    assert enc.dim == model.backbone_dim  # the character branch has no static counterpart
    assert "character branch" in enc.model.config["pearl_distilled"]
    with pytest.raises(ValueError, match="not a model2vec directory"):
        StaticEncoder.load(tmp_path / "m")


def test_cli_distils_and_encodes_with_the_static_model(model_dir, tmp_path):
    from typer.testing import CliRunner

    from pearl_cli.main import app

    out = tmp_path / "static"
    r = CliRunner().invoke(app, ["distill", str(model_dir), "--out", str(out), "--pca-dims", "8"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["encode", "new york", "banana", "--model", str(out), "--out", str(tmp_path / "v.npy")])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), StaticEncoder.load(out).encode(["new york", "banana"]),
                               atol=1e-6)
