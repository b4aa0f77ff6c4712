"""Analogies (a : b :: c : ?) by 3CosAdd over a model's phrase vectors, per section.

ULR's evaluation; the data is the word2vec analogy set that gensim ships offline
(``gensim/test/test_data/questions-words.txt``: 14 sections, 19,544 questions, e.g.
``Athens Greece Baghdad Iraq``; the semantic sections are names of capitals, countries,
currencies, US cities and states, family words). Every distinct item is encoded once as a
phrase; the answer is the candidate (all items of the file, the three question items
excluded, as word2vec's evaluation does) whose unit vector has the largest cosine with
``b - a + c`` of the unit vectors (3CosAdd). Ties count as in :mod:`.common` (g/k).
An item the model cannot encode (a zero vector: a static model's unknown word) skips its
questions, counted as ``skipped``, never dropped silently.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import TIE_TOLERANCE, encode_unique, row

# gensim (its shipped questions-words file) is imported where a score is computed: the package
# is imported for its dataset names and scores by light code (stage reports, the model card).

TASK = "analogy"
DATASET = "analogy"  # rows name it as run_benchmark's datasets= does


def default_analogy_file() -> Path:
    import gensim

    return Path(gensim.__file__).parent / "test" / "test_data" / "questions-words.txt"


def read_analogies(path: str | Path) -> dict[str, list[tuple[str, str, str, str]]]:
    """Sections (``: name`` lines) of four-item questions; a malformed line is an error naming it."""
    sections: dict[str, list[tuple[str, str, str, str]]] = {}
    current = None
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith(":"):
            current = line[1:].strip()
            sections.setdefault(current, [])
            continue
        items = line.split()
        if current is None or len(items) != 4:
            raise ValueError(f"{path}:{n}: expected ': section' or four items, got {line!r}")
        sections[current].append((items[0], items[1], items[2], items[3]))
    return sections


def analogy_accuracy(vectors: np.ndarray, vocab: list[str], questions: list[tuple[str, str, str, str]],
                     batch: int = 1024) -> tuple[float, int, int]:
    """(3CosAdd accuracy 0..1 over the answerable questions, answered, skipped)."""
    index = {w: i for i, w in enumerate(vocab)}
    norms = np.linalg.norm(vectors, axis=1)
    unit = vectors / np.clip(norms, 1e-12, None)[:, None]
    ok = [q for q in questions if all(norms[index[w]] > 0 for w in q)]
    if not ok:
        return 0.0, 0, len(questions)
    ids = np.array([[index[w] for w in q] for q in ok])
    score = 0.0
    for start in range(0, len(ids), batch):
        a, b, c, d = ids[start:start + batch].T
        sims = (unit[b] - unit[a] + unit[c]) @ unit.T
        rows = np.arange(len(a))
        for excluded in (a, b, c):
            sims[rows, excluded] = -np.inf
        top = sims.max(axis=1, keepdims=True)
        tied = sims >= top - TIE_TOLERANCE
        score += float((tied[rows, d] / tied.sum(axis=1)).sum())
    return score / len(ok), len(ok), len(questions) - len(ok)


def evaluate_analogy(encoder, path: str | Path | None = None, batch_size: int | None = None) -> list[dict]:
    """Rows: accuracy (x100) over all sections first (the primary metric), then per section,
    and the answered/skipped counts."""
    sections = read_analogies(path or default_analogy_file())
    vocab = sorted({w for qs in sections.values() for q in qs for w in q})
    vectors = encode_unique(encoder, vocab, normalize=False, batch_size=batch_size)
    rows, total, answered_all, skipped_all = [], 0.0, 0, 0
    per_section = []
    for name, qs in sections.items():
        acc, answered, skipped = analogy_accuracy(vectors, vocab, qs)
        total += acc * answered
        answered_all += answered
        skipped_all += skipped
        per_section.append(row(encoder, TASK, DATASET, f"accuracy/{name}", 100 * acc))
    rows.append(row(encoder, TASK, DATASET, "accuracy", 100 * total / max(answered_all, 1)))
    rows += per_section
    rows += [row(encoder, TASK, DATASET, "answered", answered_all), row(encoder, TASK, DATASET, "skipped", skipped_all)]
    return rows
