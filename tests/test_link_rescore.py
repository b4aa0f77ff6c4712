"""pearl_model.linking.rescore: embedding candidates scored again with rapidfuzz and ranked again.

No model: the candidates come from `matches.top_k` on hand-made unit vectors, so that the cosine
order is known and a rescoring that changes it shows."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from rapidfuzz import fuzz, utils

from pearl_model.linking import matches, rescore, sides

REFERENCE = ["Manchester United F.C.", "Manchester City F.C.", "1998 FIFA World Cup", "2002 FIFA World Cup"]
QUERIES = ["manchester united", "FIFA World Cup 2002"]


def encoded(names: list[str], vectors: list[list[float]]) -> matches.Encoded:
    side = sides.side_from_array(pa.array(names), "test", "title")
    v = np.asarray(vectors, np.float32)
    return matches.Encoded(side, list(names), v / np.linalg.norm(v, axis=1, keepdims=True), np.arange(len(names)))


@pytest.fixture
def candidates() -> pa.Table:
    # by cosine the wrong club and the wrong year come first: what an embedding that blurs
    # names and numbers does
    reference = encoded(REFERENCE, [[1, 0.1, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0.05]])
    queries = encoded(QUERIES, [[1, 0, 0], [0, 1, 0]])
    return matches.top_k(queries, reference, matches.build_index(reference, "exact"), k=4)


def test_cosine_order_is_the_fixture_s(candidates):
    first = candidates.filter(pa.compute.equal(candidates["rank"], 1))
    assert first["right"].to_pylist() == ["Manchester City F.C.", "1998 FIFA World Cup"]


def test_string_scores_are_rapidfuzz_s_on_processed_names():
    got = rescore.string_similarity(["Foo-Bar", "abc"], ["foo bar", "xyz"], "ratio")
    want = [fuzz.ratio(utils.default_process(a), utils.default_process(b)) / 100
            for a, b in [("Foo-Bar", "foo bar"), ("abc", "xyz")]]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got[0] == pytest.approx(1.0)


def test_with_features_adds_each_column_once(candidates):
    table = rescore.with_features(candidates)
    assert table.column_names[-4:] == list(rescore.FEATURES)
    np.testing.assert_array_equal(table["cosine"].to_numpy(), candidates["score"].to_numpy())
    left, right = table["left"].to_pylist(), table["right"].to_pylist()
    np.testing.assert_allclose(table["token_set_ratio"].to_numpy(),
                               [fuzz.token_set_ratio(a, b, processor=utils.default_process) / 100
                                for a, b in zip(left, right)], rtol=1e-6)
    again = rescore.with_features(table)  # columns there are kept, not scored again
    assert again.column_names == table.column_names


def test_rescore_fixes_the_order_cosine_got_wrong(candidates):
    best = rescore.rescore(candidates, k=1)
    assert best["right"].to_pylist() == ["Manchester United F.C.", "2002 FIFA World Cup"]
    assert best["rank"].to_pylist() == [1, 1]
    # the score is the combination; the embedding's cosine is kept beside it
    want = rescore.combined(rescore.with_features(best), rescore.WEIGHTS)
    np.testing.assert_allclose(best["score"].to_numpy(), want, rtol=1e-6)
    assert "cosine" in best.column_names


def test_rescore_keeps_k_ranked_best_first(candidates):
    ranked = rescore.rescore(candidates, k=3)
    for left_row in (0, 1):
        one = ranked.filter(pa.compute.equal(ranked["left_row"], left_row))
        assert one["rank"].to_pylist() == [1, 2, 3]
        assert list(one["score"].to_numpy()) == sorted(one["score"].to_numpy(), reverse=True)


def test_cosine_alone_keeps_the_embedding_order(candidates):
    ranked = rescore.rescore(candidates, k=4, weights={"cosine": 1.0})
    assert ranked.select(["left_row", "right_row", "rank"]).equals(candidates.select(["left_row", "right_row", "rank"]))


def test_ties_are_ranked_by_right_row():
    reference = encoded(["b", "a", "c"], [[1, 0], [1, 0], [0, 1]])
    queries = encoded(["z"], [[0, 1]])
    found = matches.top_k(queries, reference, matches.build_index(reference, "exact"), k=3)
    # "z" is as far from every name as a string: only the right row orders the tie
    ranked = rescore.rescore(found, k=3, weights={"ratio": 1.0})
    assert ranked["right_row"].to_pylist() == [0, 1, 2]


def test_unknown_feature_is_an_error(candidates):
    with pytest.raises(ValueError, match="unknown features"):
        rescore.rescore(candidates, weights={"jaro": 1.0})


def test_the_default_score_stays_between_0_and_1(candidates):
    # a convex combination: a threshold on it reads as one on the cosine does
    assert sum(rescore.WEIGHTS.values()) == pytest.approx(1.0)
    scores = rescore.rescore(candidates, k=4)["score"].to_numpy()
    assert ((scores >= 0) & (scores <= 1 + 1e-6)).all()
