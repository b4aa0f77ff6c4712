"""pearl_model.evaluation.analogy: 3CosAdd on hand-checkable vectors, the shipped file's format."""
from __future__ import annotations

import numpy as np
import pytest

from pearl_model.evaluation.analogy import analogy_accuracy, default_analogy_file, evaluate_analogy, read_analogies

# man -> woman is +y, king = man + x: so king - man + woman lands on queen.
TOY = {"man": [1, 0, 0], "woman": [1, 1, 0], "king": [1, 0, 1], "queen": [1, 1, 1], "apple": [0, 0, -1],
       "unknown": [0, 0, 0]}


class Toy:
    name = "toy"

    def encode(self, phrases, normalize=True, batch_size=None):
        v = np.array([TOY[p] for p in phrases], dtype=np.float32)
        return v / np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None) if normalize else v


def test_3cosadd_finds_the_planted_answer_and_excludes_the_question_items():
    vocab = list(TOY)
    v = np.array([TOY[w] for w in vocab], dtype=np.float32)
    acc, answered, skipped = analogy_accuracy(v, vocab, [("man", "woman", "king", "queen")])
    assert (acc, answered, skipped) == (1.0, 1, 0)
    acc, _, _ = analogy_accuracy(v, vocab, [("man", "woman", "king", "apple")])
    assert acc == 0.0  # queen wins, not apple
    # an item that cannot be encoded (zero vector) is skipped and counted, not scored as wrong
    assert analogy_accuracy(v, vocab, [("man", "woman", "unknown", "queen")]) == (0.0, 0, 1)


def test_ties_score_the_expected_accuracy_of_a_random_pick():
    vocab = ["a", "b", "c", "d1", "d2"]
    v = np.array([[1, 0], [1, 1], [1, 0], [0, 1], [0, 1]], dtype=np.float32)  # d1 and d2 identical
    acc, _, _ = analogy_accuracy(v, vocab, [("a", "b", "c", "d1")])
    assert acc == pytest.approx(0.5)


def test_evaluate_reports_overall_then_sections_and_counts(tmp_path):
    f = tmp_path / "q.txt"
    f.write_text(": royal\nman woman king queen\nman woman king apple\n: broken\nman woman unknown queen\n")
    rows = {r["metric"]: r["value"] for r in evaluate_analogy(Toy(), f)}
    assert {r["dataset"] for r in evaluate_analogy(Toy(), f)} == {"analogy"}
    assert list(rows)[0] == "accuracy" and rows["accuracy"] == pytest.approx(50.0)
    assert rows["accuracy/royal"] == pytest.approx(50.0) and rows["skipped"] == 1 and rows["answered"] == 2
    bad = tmp_path / "bad.txt"
    bad.write_text(": s\nman woman king\n")
    with pytest.raises(ValueError, match=r"bad\.txt:2: expected"):
        read_analogies(bad)


def test_the_shipped_analogy_file_reads():
    path = default_analogy_file()
    if not path.is_file():
        pytest.skip("gensim's test data is not installed")
    sections = read_analogies(path)
    assert len(sections) == 14 and sum(map(len, sections.values())) == 19544
    assert ("Athens", "Greece", "Baghdad", "Iraq") in sections["capital-common-countries"]


def test_run_benchmark_scores_analogies_only_when_asked(monkeypatch, tmp_path):
    import pearl_model.evaluation.analogy as analogy
    from pearl_model.evaluation import run_benchmark

    f = tmp_path / "q.txt"
    f.write_text(": royal\nman woman king queen\n")
    monkeypatch.setattr(analogy, "default_analogy_file", lambda: f)
    rows = run_benchmark(Toy(), str(tmp_path), datasets=["analogy"])
    assert rows[0]["dataset"] == "analogy" and rows[0]["value"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="unknown datasets"):
        run_benchmark(Toy(), str(tmp_path), datasets=["analogies"])
