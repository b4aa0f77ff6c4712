"""Short-text classification: a logistic-regression probe on frozen phrase vectors (PEARL's extra task).

The probe reads any dataset put in the common shape:

    <dir>/train.jsonl, <dir>/test.jsonl      one {"text": ..., "label": ...} object a line

(`.csv` with a `text,label` header is read the same way). Every text is encoded once as a
phrase (unit vectors), scikit-learn's `LogisticRegression` (lbfgs, multinomial) is fitted on
train and scored on test: accuracy (primary) and macro-F1. The encoder is frozen: the probe
measures what the vectors already separate. `run_benchmark(..., datasets=["classification"])`
scores every dataset folder under the classification root: `$PEARL_CLASSIFICATION`, else
`<benchmark_dir>/classification/`, else `$PEARL_CACHE/classification/`, where
`scripts/setup.sh` builds three sets from offline packages (`scripts/classification_data.py`:
VADER's rated tweets, gensim's Pang & Lee sentences, the ovos articles' descriptions by topic).
A line without text or label is an error naming file:line, never a silent drop.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from .common import encode_unique, row
from .data import DatasetMissing

# scikit-learn is imported where a score is computed: the package is imported for its dataset
# names and scores by light code (stage reports, the model card).

TASK = "text_classification"
DATASET = "classification"


def read_split(path: str | Path) -> tuple[list[str], list[str]]:
    """(texts, labels) of one JSONL or CSV file; a record without both is an error naming it."""
    path = Path(path)
    if path.suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as f:
            records = [(n, r) for n, r in enumerate(csv.DictReader(f), 2)]
    else:
        records = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    records.append((n, json.loads(line)))
                except (ValueError, RecursionError) as e:  # also an over-long integer, deep nesting
                    raise ValueError(f"{path}:{n}: not a JSON object ({getattr(e, 'msg', e)})") from None
    texts, labels = [], []
    for n, r in records:
        text, label = (r.get("text"), r.get("label")) if isinstance(r, dict) else (None, None)
        if not isinstance(text, str) or not text.strip() or label in (None, ""):
            raise ValueError(f"{path}:{n}: expected a non-empty 'text' and a 'label', got {r!r}")
        texts.append(text)
        labels.append(str(label))
    if not texts:
        raise ValueError(f"{path}: no records")
    return texts, labels


def split_file(folder: str | Path, split: str) -> Path:
    """`<folder>/<split>.jsonl`, else `<split>.csv`; neither: DatasetMissing."""
    folder = Path(folder)
    for suffix in (".jsonl", ".csv"):
        if (folder / f"{split}{suffix}").is_file():
            return folder / f"{split}{suffix}"
    raise DatasetMissing(f"no {split}.jsonl or {split}.csv in {folder}")


def probe_predictions(x_train: np.ndarray, y_train: list[str], x_test: np.ndarray, y_test: list[str],
                      c: float = 1.0) -> np.ndarray:
    """The test labels a logistic regression fitted on train predicts (deterministic: lbfgs)."""
    from sklearn.linear_model import LogisticRegression

    unseen = sorted(set(y_test) - set(y_train))
    if unseen:
        raise ValueError(f"test labels never seen in train: {unseen[:5]}")
    return LogisticRegression(C=c, max_iter=2000).fit(x_train, y_train).predict(x_test)


def evaluate_folder(encoder, folder: str | Path, batch_size: int | None = None) -> list[dict]:
    """Rows for one dataset folder (train + test files), named after the folder."""
    folder = Path(folder)
    train_texts, y_train = read_split(split_file(folder, "train"))
    test_texts, y_test = read_split(split_file(folder, "test"))
    from sklearn.metrics import f1_score

    vectors = encode_unique(encoder, train_texts + test_texts, normalize=True, batch_size=batch_size)
    predicted = probe_predictions(vectors[:len(train_texts)], y_train, vectors[len(train_texts):], y_test)
    correct = (predicted == np.asarray(y_test)).astype(np.float64)  # per item: two models pair on them
    name = f"{DATASET}:{folder.name}"
    return [row(encoder, TASK, name, "accuracy", 100 * correct.mean(), items=correct),
            row(encoder, TASK, name, "macro_f1", 100 * f1_score(y_test, predicted, average="macro"))]


def built_root() -> Path:
    """Where `scripts/classification_data.py` builds the offline sets: `$PEARL_CACHE/classification`."""
    return Path(os.environ.get("PEARL_CACHE", Path.home() / ".cache" / "pearl_model")).expanduser() / "classification"


def classification_root(benchmark_dir) -> Path:
    """$PEARL_CLASSIFICATION, else `<benchmark_dir>/classification`, else the built sets; none: DatasetMissing."""
    if os.environ.get("PEARL_CLASSIFICATION"):
        candidates = [Path(os.environ["PEARL_CLASSIFICATION"])]
    else:
        candidates = [Path(benchmark_dir or ".") / "classification", built_root()]
    for root in candidates:
        if root.is_dir():
            return root
    raise DatasetMissing(f"no classification datasets: {' nor '.join(map(str, candidates))} exists (put "
                         "<name>/train.jsonl and <name>/test.jsonl there, set $PEARL_CLASSIFICATION, or run "
                         "scripts/classification_data.py)")


def evaluate_classification(encoder, benchmark_dir=None, batch_size: int | None = None) -> list[dict]:
    """Rows for every dataset folder under the classification root, in name order."""
    root = classification_root(benchmark_dir)
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))  # not a build's temporaries
    if not folders:
        raise DatasetMissing(f"no dataset folders in {root}")
    return [r for folder in folders for r in evaluate_folder(encoder, folder, batch_size)]
