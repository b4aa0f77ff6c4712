"""tasks.word_vectors: fastText trained on the corpus sentences, stored as Parquet + an .npy of n-gram vectors."""
from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pyarrow as pa
import pytest

from storage.datasets import MANIFEST, Dataset
from storage.schemas import SENTENCES, WORD_VECTORS_NGRAMS
from storage.verified import RECORDS
from tasks.word_vectors import (
    SentenceCorpus, build_word_vectors, ngram_buckets, plan_word_vectors, read_vectors, word_tokens,
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
    from pearl_model.pairs.synonyms import train_fasttext

    model = train_fasttext(SentenceCorpus(sentences), vector_size=16, window=3, min_count=2, epochs=5, seed=0,
                           bucket=2**16)  # the table sized to 80 sentences: the smallest
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
    assert names == sorted([MANIFEST, RECORDS, WORD_VECTORS_NGRAMS] + [p["file"] for p in man["parts"]])  # no temp file
    recorded = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{out.path}/{RECORDS}", detail=False))
    assert recorded == sorted(f"{n}.json" for n in [WORD_VECTORS_NGRAMS] + [p["file"] for p in man["parts"]])
    [entry] = man["extra"]["files"]
    data = fs.cat_file(f"{out.path}/{WORD_VECTORS_NGRAMS}")
    assert entry == {"file": WORD_VECTORS_NGRAMS, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert data.startswith(b"\x93NUMPY")
    for p in fs.find(out.path):  # no pickle (protocol 2+ starts with its PROTO opcode)
        assert fs.cat_file(p, start=0, end=1) != b"\x80", p


def test_an_interrupted_array_write_leaves_no_file(any_root, monkeypatch):
    from tasks import word_vectors as wv

    out = Dataset(any_root, "word_vectors", "w1", wv.WORD_VECTORS)

    def half_then_fail(fh, array, allow_pickle):
        fh.write(b"\x93NUMPY half")
        raise OSError("disk full")

    monkeypatch.setattr(wv.np, "save", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        out.write_array(WORD_VECTORS_NGRAMS, np.zeros((4, 2), np.float32))
    assert out.fs.ls(out.path, detail=False) == []


def test_the_model_of_a_small_corpus_is_small_and_the_directory_reads_as_parquet(root):
    import pyarrow.parquet as pq

    sentences = corpus(root)
    out = plan_word_vectors(sentences, PARAMS)
    man = build_word_vectors(sentences, out, PARAMS)
    assert man["stats"]["ngram_buckets"] == 2**16 and man["stats"]["ngram_bytes"] == 2**16 * 16 * 4  # 4 MB, not 128
    assert pq.read_table(out.path).num_rows == man["stats"]["vocabulary"]  # the .npy is skipped by name
    # sized to the corpus: a power of two, 4 per sentence, between 2^16 and gensim's 2M
    assert [ngram_buckets(n) for n in (0, 80, 16_384, 16_385, 10**9)] == [2**16, 2**16, 2**16, 2**17, 2_000_000]
    assert ngram_buckets(10**9, 1000) == 1000
    with pytest.raises(ValueError, match="bucket"):
        ngram_buckets(10, 0)


def test_above_max_sentences_a_fixed_hash_chosen_share_is_read(root):
    sentences = corpus(root)
    params = {**PARAMS, "max_sentences": 40}
    out = plan_word_vectors(sentences, params)
    man = build_word_vectors(sentences, out, params)
    assert man["stats"]["sentences_in_dataset"] == 80 and man["stats"]["sentence_share"] == 0.5
    assert 25 <= man["stats"]["corpus_sentences"] <= 55
    assert list(SentenceCorpus(sentences, 0.5)) == list(SentenceCorpus(sentences, 0.5))  # the same every pass
    assert out.version != plan_word_vectors(sentences, PARAMS).version
    with pytest.raises(ValueError, match="max_sentences"):
        build_word_vectors(sentences, plan_word_vectors(sentences, {**PARAMS, "max_sentences": 0}),
                           {**PARAMS, "max_sentences": 0})
