"""tasks.word_vectors: fastText trained on the corpus sentences, stored as Parquet + the gensim model."""
from __future__ import annotations

import itertools
import tempfile

import numpy as np
import pyarrow as pa
import pytest

from storage.datasets import Dataset
from storage.schemas import SENTENCES
from tasks.word_vectors import (
    SentenceCorpus, build_word_vectors, model_path, plan_word_vectors, read_vectors, word_tokens,
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
    with tempfile.TemporaryDirectory() as tmp:
        from pearl_model.synonyms import load_fasttext

        model = load_fasttext(model_path(out, tmp))
        np.testing.assert_allclose(model.wv[words[3]], vectors[3], rtol=1e-6)
        assert model.wv.get_vecattr("car", "count") == 16
    # Same inputs and parameters: same version, nothing retrained (the manifest is kept).
    again = plan_word_vectors(sentences, PARAMS)
    assert again.version == out.version
    assert build_word_vectors(sentences, again, PARAMS)["created_at"] == man["created_at"]
    # Retrained from scratch with the same seed and one worker: identical vectors.
    other = Dataset(root, "word_vectors", "retrained", out.schema)
    build_word_vectors(sentences, other, PARAMS)
    np.testing.assert_array_equal(read_vectors(other)[1], vectors)
    assert plan_word_vectors(sentences, {**PARAMS, "dim": 8}).version != out.version
