"""Stage 6: `sentences` -> `word_vectors`, a fastText model trained on the corpus.

One task (gensim trains with its own threads, not per partition: `workers`; one worker is
reproducible, more are faster and not). The corpus is streamed from the sentences parts on
every pass gensim makes, so it is never held in memory; above `max_sentences` a hash-chosen
share of the sentences is what it reads (the same share on every pass and every rerun).
The n-gram table is sized to the corpus (`bucket`; none: 4 buckets per sentence read, as a
power of two between 2^16 and gensim's 2M): the 2M default made the model 778 MB for the
206-page sample.
Tokens are lowercased words (letters, digits, inner hyphens and apostrophes): the same
tokenisation `word_tokens` gives everything that later looks words up.

What is kept of the model is what its readers need, with no pickle (a pickle in a shared
storage root would run code on whoever loads it): the words' vectors in the Parquet parts,
and the n-gram buckets' vectors (out-of-vocabulary words) as one .npy beside them
(``Dataset.write_array``: written under a temporary name and renamed like the parts, listed
in the manifest with its sha256, which ``Dataset.read_array`` checks), with the n-gram lengths
(``extra``: ``files``, ``fasttext``).
"""
from __future__ import annotations

import re
import time

import numpy as np
import pyarrow as pa

from storage.buckets import in_share
from storage.datasets import Dataset, dataset_version
from storage.schemas import WORD_VECTORS, WORD_VECTORS_NGRAMS

# -2: n-gram vectors as .npy instead of gensim's pickled model; -3: buckets sized to the corpus, sampling
CODE_VERSION = "word-vectors-3"
MIN_BUCKETS, MAX_BUCKETS = 2**16, 2_000_000
_WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")
_ROWS_PER_PART = 50_000


def word_tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class SentenceCorpus:
    """Restartable iterable of tokenised sentences, read part by part (gensim passes several times).

    ``share`` < 1: only the sentences whose id falls in that hash-chosen share."""

    def __init__(self, sentences: Dataset, share: float = 1.0):
        self.sentences, self.share = sentences, share

    def __iter__(self):
        for batch in self.sentences.iter_batches(columns=["sentence_id", "text"], batch_size=8192):
            ids, texts = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            for sid, text in zip(ids, texts):
                if self.share < 1.0 and not in_share(f"sentence:{sid}", self.share):
                    continue
                tokens = word_tokens(text)
                if tokens:
                    yield tokens


def sentence_count(sentences: Dataset) -> int:
    return sum(p.rows for p in sentences.parts())


def ngram_buckets(n_sentences: int, bucket: int | None = None) -> int:
    """``bucket`` when given, else 4 per sentence as a power of two in [2^16, 2M]."""
    if bucket is not None:
        if bucket < 1:
            raise ValueError(f"fastText bucket must be >= 1, got {bucket!r}")
        return int(bucket)
    return int(min(MAX_BUCKETS, max(MIN_BUCKETS, 1 << max(0, 4 * n_sentences - 1).bit_length())))


def train_word_vectors(sentences: Dataset, out: Dataset, params: dict) -> tuple[dict, dict]:
    """Train, write the parts and the n-gram vectors; (stats, manifest extra)."""
    from pearl_model.pairs.synonyms import train_fasttext

    t0 = time.perf_counter()
    total = sentence_count(sentences)
    cap = params.get("max_sentences")
    if cap is not None and cap < 1:
        raise ValueError(f"fastText max_sentences must be >= 1 or None, got {cap!r}")
    share = min(1.0, cap / total) if cap and total else 1.0
    bucket = ngram_buckets(round(total * share), params.get("bucket"))
    model = train_fasttext(SentenceCorpus(sentences, share), vector_size=params["dim"], window=params["window"],
                           min_count=params["min_count"], epochs=params["epochs"], seed=params["seed"],
                           workers=params["workers"], bucket=bucket)
    seconds = time.perf_counter() - t0
    wv = model.wv
    words = list(wv.index_to_key)
    counts = [int(wv.get_vecattr(w, "count")) for w in words]
    vectors = np.asarray(wv.vectors, dtype=np.float32)
    for part, start in enumerate(range(0, len(words), _ROWS_PER_PART)):
        end = start + _ROWS_PER_PART
        out.write_part(part, pa.table({
            "word": words[start:end], "count": counts[start:end],
            "vector": pa.array(list(vectors[start:end]), type=pa.list_(pa.float32()))}, schema=WORD_VECTORS))
    ngrams = out.write_array(WORD_VECTORS_NGRAMS, np.asarray(wv.vectors_ngrams, dtype=np.float32))
    stats = {"vocabulary": len(words), "corpus_words": int(model.corpus_total_words),
             "corpus_sentences": int(model.corpus_count), "sentences_in_dataset": total,
             "sentence_share": round(share, 6), "train_seconds": round(seconds, 1), "ngram_buckets": int(wv.bucket),
             "ngram_bytes": int(wv.vectors_ngrams.nbytes), "workers": params["workers"]}
    return stats, {"files": [ngrams], "fasttext": {"min_n": wv.min_n, "max_n": wv.max_n, "bucket": int(wv.bucket),
                                                   "dim": int(wv.vector_size)}}


def plan_word_vectors(sentences: Dataset, params: dict) -> Dataset:
    version = dataset_version("word_vectors", CODE_VERSION, params, {"sentences": sentences.version})
    return Dataset(sentences.root, "word_vectors", version, WORD_VECTORS)


def build_word_vectors(sentences: Dataset, out: Dataset, params: dict) -> dict:
    if out.is_complete():
        return out.reuse()
    stats, extra = train_word_vectors(sentences, out, params)
    return out.commit(code_version=CODE_VERSION, params=params, inputs={"sentences": sentences.version}, stats=stats,
                      extra=extra)


def read_vectors(vectors: Dataset) -> tuple[list[str], np.ndarray]:
    words, rows = [], []
    for part in vectors.parts():
        t = vectors.read_part(part.index)
        words += t["word"].to_pylist()
        rows.append(np.stack(t["vector"].to_numpy(zero_copy_only=False)) if t.num_rows else np.zeros((0, 0)))
    return words, (np.concatenate([r for r in rows if r.size]) if words else np.zeros((0, 0), np.float32))


from prefect import task  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402


@task(name="word-vectors", cache_policy=NONE)
def word_vectors_task(sentences: Dataset, params: dict) -> Dataset:
    out = plan_word_vectors(sentences, params)
    build_word_vectors(sentences, out, params)
    return out
