"""tasks.word_vectors: fastText trained on the corpus sentences, stored as Parquet + an .npy of n-gram vectors."""
from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pyarrow as pa
import pytest

from storage.datasets import MANIFEST, Dataset
from storage.schemas import SENTENCES, WORD_VECTORS_NGRAMS
from tasks.word_vectors import (
    SentenceCorpus, build_word_vectors, plan_word_vectors, read_vectors, word_tokens,
)

PARAMS = {"dim": 16, "window": 3, "min_count": 2, "epochs": 5, "seed": 0, "workers": 1}


def corpus(root: str) -> Dataset:
    subjects = ["The car", "The automobile", "A city", "The town", "The river"]
    verbs = ["was parked near", "drove past", "stood beside", "flooded"]
    objects = ["the old bridge.", "the market square.", "the station.", "Ada's house."]
    texts = [f"{s} {v} {o}" for s, v, o in itertools.product(subjects, verbs, objects)]
    d = Dataset(root, "sentences", "s1", SENTENCES)
    for part in range(2):
        rows = [{"sentence_id": i, "page_id": part, "index": i, "text": t}
                for i, t in enumerate(texts) if i % 2 == part]
        d.write_part(part, pa.Table.from_pylist(rows, schema=SENTENCES))
    d.commit(code_version="t", params={}, inputs={})
    return d


def test_word_tokens():
    assert word_tokens("The New-York Times' editor's cat, 1997!") == ["the", "new-york", "times", "editor's", "cat", "1997"]
    assert word_tokens("...") == []


def test_corpus_is_restartable_and_streams_every_sentence(root):
    c = SentenceCorpus(corpus(root))
    first, second = list(c), list(c)
    assert first == second and len(first) == 80
    assert first[0][:2] == ["the", "car"]


def test_vectors_match_the_model_and_are_reproducible(root):
    sentences = corpus(root)
    out = plan_word_vectors(sentences, PARAMS)
    man = build_word_vectors(sentences, out, PARAMS)
    words, vectors = read_vectors(out)
    assert man["rows"] == len(words) == man["stats"]["vocabulary"]
    assert "automobile" in words and "ada's" in words and "market" in words
    assert vectors.shape == (len(words), 16)
    from pearl_model.synonyms import train_fasttext

    model = train_fasttext(SentenceCorpus(sentences), vector_size=16, window=3, min_count=2, epochs=5, seed=0)
    assert words == model.wv.index_to_key
    np.testing.assert_array_equal(model.wv.vectors, vectors)
    assert model.wv.get_vecattr("car", "count") == 16
    ngrams = np.load(f"{out.path}/{WORD_VECTORS_NGRAMS}", allow_pickle=False)
    np.testing.assert_array_equal(ngrams, model.wv.vectors_ngrams)
    assert man["extra"]["fasttext"] == {"min_n": model.wv.min_n, "max_n": model.wv.max_n,
                                        "bucket": model.wv.bucket, "dim": 16}
    # Same inputs and parameters: same version, nothing retrained (the manifest is kept).
    again = plan_word_vectors(sentences, PARAMS)
    assert again.version == out.version
    assert build_word_vectors(sentences, again, PARAMS)["created_at"] == man["created_at"]
    # Retrained from scratch with the same seed and one worker: identical vectors.
    other = Dataset(root, "word_vectors", "retrained", out.schema)
    build_word_vectors(sentences, other, PARAMS)
    np.testing.assert_array_equal(read_vectors(other)[1], vectors)
    assert plan_word_vectors(sentences, {**PARAMS, "dim": 8}).version != out.version


@pytest.fixture(params=["local", "memory"])
def any_root(request, root, memory_root):
    return root if request.param == "local" else memory_root


def test_stored_files_are_listed_whole_and_hold_no_pickle(any_root):
    """Issue 13 item 7: no gensim pickle beside the parts; the n-gram vectors are one .npy,
    written under a temporary name and renamed, and listed in the manifest (bytes, sha256)."""
    sentences = corpus(any_root)
    out = plan_word_vectors(sentences, PARAMS)
    man = build_word_vectors(sentences, out, PARAMS)
    fs = out.fs
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(out.path, detail=False))
    assert names == sorted([MANIFEST, WORD_VECTORS_NGRAMS] + [p["file"] for p in man["parts"]])  # no temp file left
    [entry] = man["extra"]["files"]
    data = fs.cat_file(f"{out.path}/{WORD_VECTORS_NGRAMS}")
    assert entry == {"file": WORD_VECTORS_NGRAMS, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert data.startswith(b"\x93NUMPY")
    for p in fs.ls(out.path, detail=False):  # no pickle (protocol 2+ starts with its PROTO opcode)
        assert fs.cat_file(p, start=0, end=1) != b"\x80", p


def test_an_interrupted_array_write_leaves_no_file(any_root, monkeypatch):
    from tasks import word_vectors as wv

    out = Dataset(any_root, "word_vectors", "w1", wv.WORD_VECTORS)

    def half_then_fail(fh, array, allow_pickle):
        fh.write(b"\x93NUMPY half")
        raise OSError("disk full")

    monkeypatch.setattr(wv.np, "save", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        wv.write_array(out, WORD_VECTORS_NGRAMS, np.zeros((4, 2), np.float32))
    assert out.fs.ls(out.path, detail=False) == []
