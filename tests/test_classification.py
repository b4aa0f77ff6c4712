"""pearl_model.evaluation.classification: the frozen-encoder probe on synthetic separable data,
its file formats and its refusals, and run_benchmark's `classification` entry."""
from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

pytest.importorskip("sklearn")

from pearl_model.evaluation import DatasetMissing, run_benchmark  # noqa: E402
from pearl_model.evaluation.classification import (  # noqa: E402
    evaluate_classification, evaluate_folder, probe_predictions, read_split,
)

TOPICS = {"sport": 0, "finance": 1, "weather": 2}


class TopicEncoder:
    """A text's vector points along its topic's axis (the word before the first space) plus noise;
    `signal` 0 leaves noise alone."""
    name = "toy"

    def __init__(self, signal: float = 3.0):
        self.signal = signal

    def encode(self, texts, normalize=True, batch_size=None):
        out = []
        for t in texts:
            rng = np.random.default_rng(zlib.crc32(t.encode()))
            v = rng.normal(size=8)
            v[TOPICS[t.split()[0]]] += self.signal
            out.append(v / np.linalg.norm(v) if normalize else v)
        return np.asarray(out, dtype=np.float32)


def write(folder, split, n, start=0, csv=False):
    folder.mkdir(parents=True, exist_ok=True)
    records = [{"text": f"{topic} item {i}", "label": topic} for i in range(start, start + n) for topic in TOPICS]
    if csv:
        lines = ["text,label"] + [f"{r['text']},{r['label']}" for r in records]
        (folder / f"{split}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_separable_topics_are_classified_and_noise_is_near_chance(tmp_path):
    write(tmp_path / "topics", "train", 60)
    write(tmp_path / "topics", "test", 30, start=1000)
    rows = {r["metric"]: r["value"] for r in evaluate_folder(TopicEncoder(), tmp_path / "topics")}
    assert rows["accuracy"] > 95 and rows["macro_f1"] > 95
    noise = {r["metric"]: r["value"] for r in evaluate_folder(TopicEncoder(signal=0.0), tmp_path / "topics")}
    assert noise["accuracy"] < 60  # three balanced classes: chance is 33


def test_the_accuracy_row_pairs_two_models_on_its_test_items(tmp_path):
    from pearl_model.evaluation.stable import paired_difference

    write(tmp_path / "topics", "train", 60)
    write(tmp_path / "topics", "test", 30, start=1000)
    good = next(r for r in evaluate_folder(TopicEncoder(), tmp_path / "topics") if r["metric"] == "accuracy")
    noise = next(r for r in evaluate_folder(TopicEncoder(signal=0.0), tmp_path / "topics") if r["metric"] == "accuracy")
    assert len(good["items"]) == 90 and 100 * np.mean(good["items"]) == pytest.approx(good["value"])
    assert paired_difference(good, noise).verdict == "better"
    itself = paired_difference(good, good)
    assert itself.low <= 0 <= itself.high and itself.verdict == "no difference"


def test_probe_predictions_known_answers():
    x = np.array([[1.0, 0], [0.9, 0.1], [0, 1.0], [0.1, 0.9]])
    assert list(probe_predictions(x, ["a", "a", "b", "b"], x[[0, 2]], ["a", "b"], c=100)) == ["a", "b"]
    with pytest.raises(ValueError, match="never seen in train"):
        probe_predictions(x, ["a", "a", "b", "b"], x[[0]], ["c"])


def test_csv_and_jsonl_read_alike_and_bad_records_are_named(tmp_path):
    write(tmp_path / "j", "train", 3)
    write(tmp_path / "c", "train", 3, csv=True)
    assert read_split(tmp_path / "j" / "train.jsonl") == read_split(tmp_path / "c" / "train.csv")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok", "label": 1}\n{"text": "", "label": 2}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        read_split(bad)
    for line in ("not json", "[" * 100_000, '{"text": "x", "label": ' + "1" * 5000 + "}"):  # nesting, digit limit
        bad.write_text('{"text": "ok", "label": 1}\n' + line + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=r"bad.jsonl:2: not a JSON object"):
            read_split(bad)


def test_run_benchmark_scores_every_folder_and_skips_when_there_is_none(tmp_path, monkeypatch):
    monkeypatch.delenv("PEARL_CLASSIFICATION", raising=False)
    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "cache"))  # no built sets
    for name in ("b_topics", "a_topics"):
        write(tmp_path / "classification" / name, "train", 20)
        write(tmp_path / "classification" / name, "test", 10, start=500)
    rows = run_benchmark(TopicEncoder(), str(tmp_path), datasets=["classification"])
    assert [r["dataset"] for r in rows if r["metric"] == "accuracy"] == \
        ["classification:a_topics", "classification:b_topics"]
    assert run_benchmark(TopicEncoder(), str(tmp_path / "elsewhere"), datasets=["classification"]) == []
    with pytest.raises(DatasetMissing, match="PEARL_CLASSIFICATION"):
        evaluate_classification(TopicEncoder(), tmp_path / "elsewhere")
    monkeypatch.setenv("PEARL_CLASSIFICATION", str(tmp_path / "classification"))
    assert len(evaluate_classification(TopicEncoder(), None)) == 4


def test_the_sets_built_under_pearl_cache_are_the_fallback(tmp_path, monkeypatch):
    monkeypatch.delenv("PEARL_CLASSIFICATION", raising=False)
    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "cache"))
    write(tmp_path / "cache" / "classification" / "built", "train", 20)
    write(tmp_path / "cache" / "classification" / "built", "test", 10, start=500)
    (tmp_path / "cache" / "classification" / ".built-tmp123").mkdir()  # a build under way is no dataset
    write(tmp_path / "bench" / "classification" / "given", "train", 20)
    write(tmp_path / "bench" / "classification" / "given", "test", 10, start=500)
    # the benchmark folder's own sets win; without them, the built ones are scored
    assert {r["dataset"] for r in evaluate_classification(TopicEncoder(), tmp_path / "bench")} == {"classification:given"}
    assert {r["dataset"] for r in evaluate_classification(TopicEncoder(), tmp_path / "none")} == {"classification:built"}
