"""`pearl link` and its library core (pearl_model.linking) on a tiny random-weight model.

Expectations hold for any weights: a name always matches itself (score ~1), identical names tie
exactly (each distinct name is encoded once), and orders are checked against numpy on the same
vectors."""
from __future__ import annotations

import string

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from typer.testing import CliRunner  # noqa: E402

from pearl_cli.main import app  # noqa: E402
from pearl_model.linking import clusters, index, matches, sides, thresholds  # noqa: E402
from storage.schemas import DEDUPED_MATCHES, MATCHES  # noqa: E402
from tests.conftest import tiny_model_dir  # noqa: E402

LETTERS = list(string.ascii_lowercase)
FRUIT = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape", "kiwi", "lemon", "mango", "pear", "plum"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # every lowercase word tokenises, letter by letter: distinct names get distinct vectors
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-link-model"), LETTERS + [f"##{c}" for c in LETTERS])


@pytest.fixture(scope="module")
def encoder(model_dir):
    from pearl_model.inference.loading import load_encoder

    return load_encoder(str(model_dir), backend="torch")


def side(names, source="t") -> sides.Side:
    return sides.side_from_array(pa.array(names, pa.string()), source, "title")


def link(encoder, left_names, right_names, k=1, **kw):
    left, right = matches.encode_side(encoder, side(left_names)), matches.encode_side(encoder, side(right_names))
    return matches.top_k(left, right, matches.build_index(right, **kw), k)


# --- the core: top-k, ties, threshold, counts ------------------------------------------------------
def test_exact_top1_finds_each_name_in_the_other_table(encoder):
    right = FRUIT
    left = ["plum", "apple", "kiwi", "cherry", "mango"]
    m = link(encoder, left, right).to_pylist()
    assert [r["left_row"] for r in m] == [0, 1, 2, 3, 4]
    assert [r["right_row"] for r in m] == [right.index(n) for n in left]
    assert all(r["left"] == r["right"] and r["rank"] == 1 and r["score"] == pytest.approx(1, abs=1e-5) for r in m)


def test_top_k_follows_the_cosine_order(encoder):
    k = 4
    m = link(encoder, ["grape", "lemon"], FRUIT, k=k)
    vectors = encoder.encode(FRUIT)
    for i, name in enumerate(["grape", "lemon"]):
        mine = m.filter(pa.compute.equal(m["left_row"], i)).to_pylist()
        cosine = vectors @ encoder.encode([name])[0]
        expected = np.argsort(-cosine, kind="stable")[:k]
        assert [r["right_row"] for r in mine] == expected.tolist()
        assert [r["rank"] for r in mine] == [1, 2, 3, 4]
        np.testing.assert_allclose([r["score"] for r in mine], cosine[expected], atol=1e-5)


def test_ties_are_ranked_by_right_row(encoder):
    right = ["kiwi", "pear", "plum", "pear", "fig", "pear", None, "pear"]
    m = link(encoder, ["pear", "fig"], right, k=3).to_pylist()
    pear = [r for r in m if r["left"] == "pear"]
    assert [r["right_row"] for r in pear] == [1, 3, 5]  # four rows tie at 1; the first three by row
    assert len({r["score"] for r in pear}) == 1
    two = link(encoder, ["pear"], right, k=5).to_pylist()
    assert [r["right_row"] for r in two][:4] == [1, 3, 5, 7] and two[4]["right"] != "pear"


def test_an_approximate_index_gives_the_same_top1_here(encoder):
    exact = link(encoder, FRUIT[::-1], FRUIT, kind="exact")
    assert link(encoder, FRUIT[::-1], FRUIT, kind="hnsw").to_pylist() == exact.to_pylist()


def test_the_threshold_drops_rows_below_it_and_the_counts_add_up(encoder):
    left = side(["plum", None, "kiwi", "   ", "zebra", "apple", ""])
    right = side(FRUIT)
    el, er = matches.encode_side(encoder, left), matches.encode_side(encoder, right)
    candidates = matches.top_k(el, er, matches.build_index(er), k=2)
    kept, below = matches.above_threshold(candidates, 0.9999)  # only a name itself scores ~1
    assert kept["left"].to_pylist() == kept["right"].to_pylist() == ["plum", "kiwi", "apple"]
    assert kept["left_row"].to_pylist() == [0, 2, 5]  # the input's rows, blank ones counted
    assert below == candidates.num_rows - 3 == 5
    n = matches.count(left, candidates, kept)
    assert (n.rows, n.skipped, n.matched, n.below_threshold, n.no_candidate) == (7, 3, 3, 1, 0)
    assert n.rows == n.skipped + n.matched + n.below_threshold + n.no_candidate
    assert (n.candidate_pairs, n.pairs, n.pairs_below_threshold) == (8, 3, 5)
    assert matches.above_threshold(candidates, None) == (candidates, 0)


def test_dedupe_skips_self_pairs_and_keeps_identical_rows(encoder):
    table = side(["pear", "fig", "pear", "kiwi", "pear"])
    e = matches.encode_side(encoder, table)
    m = matches.top_k(e, e, matches.build_index(e), k=2, exclude_self=True)
    assert all(r["left_row"] != r["right_row"] for r in m.to_pylist())
    pear = m.filter(pa.compute.equal(m["left_row"], 2)).to_pylist()
    assert [r["right_row"] for r in pear] == [0, 4]
    kept, _ = matches.above_threshold(m, 0.9999)
    clustered = clusters.with_clusters(kept, table.rows)
    assert set(zip(clustered["left_row"].to_pylist(), clustered["cluster"].to_pylist())) == {(0, 0), (2, 0), (4, 0)}
    lone = matches.encode_side(encoder, side(["fig", "fig"]))  # one distinct name: still its other row
    pairs = matches.top_k(lone, lone, matches.build_index(lone), k=3, exclude_self=True)
    assert pairs["right_row"].to_pylist() == [1, 0]


def test_clusters_are_connected_components_named_by_their_smallest_row():
    rows = np.array([2, 5, 7, 9, 11, 12])
    ids = clusters.cluster_ids(rows, np.array([7, 5, 12]), np.array([5, 2, 11]))  # a chain 2~5~7, and 11~12
    assert ids.tolist() == [2, 2, 2, 9, 11, 11]
    assert clusters.cluster_ids(rows, np.array([], np.int64), np.array([], np.int64)).tolist() == rows.tolist()


# --- the threshold for a target precision ---------------------------------------------------------
SCORES = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
CORRECT = np.array([True, True, False, True, False])  # precision at >= each: 1, 1, 2/3, 3/4, 3/5


@pytest.mark.parametrize("target, chosen, precision, recall", [
    (0.75, 0.6, 0.75, 0.75), (0.7, 0.6, 0.75, 0.75), (0.9, 0.8, 1.0, 0.5), (1.0, 0.8, 1.0, 0.5), (0.6, 0.5, 0.6, 0.75),
])
def test_the_smallest_threshold_that_reaches_the_precision(target, chosen, precision, recall):
    c = thresholds.threshold_for_precision(SCORES, CORRECT, target, labelled=4)  # one labelled pair never found
    assert (c.threshold, c.precision, c.recall) == (pytest.approx(chosen), pytest.approx(precision),
                                                    pytest.approx(recall))
    assert c.curve["threshold"].to_pylist() == pytest.approx([0.5, 0.6, 0.7, 0.8, 0.9])
    assert c.curve["precision"].to_pylist() == pytest.approx([0.6, 0.75, 2 / 3, 1, 1])


def test_without_labels_or_out_of_reach_no_threshold_is_chosen():
    none = thresholds.threshold_for_precision(np.array([]), np.array([], bool), 0.9)
    assert none.threshold is None and none.note == thresholds.NO_LABELS
    wrong = thresholds.threshold_for_precision(np.array([0.9, 0.5]), np.array([False, False]), 0.9)
    assert wrong.threshold is None and "none is chosen" in wrong.note
    low = thresholds.threshold_for_precision(np.array([0.9, 0.5]), np.array([False, True]), 0.9)
    assert low.threshold is None and low.precision == pytest.approx(0.5)


def test_labelled_best_matches_judge_the_rank1_match():
    m = pa.table({"left": ["a", "a", "b", "c", "d"], "right": ["x", "y", "z", "w", "v"],
                  "score": pa.array([0.9, 0.8, 0.7, 0.6, 0.5], pa.float32()), "rank": [1, 2, 1, 1, 1]})
    labels = thresholds.label_pairs(pa.table({"left": ["a", "b", "c", "d", "e"], "right": ["x", "q", "w", "", None]}),
                                    "labels.csv")  # d and e have no partner; e no candidate either
    judged = thresholds.labelled_best_matches(m, labels)
    assert judged.scores.tolist() == pytest.approx([0.9, 0.7, 0.6, 0.5])
    assert judged.correct.tolist() == [True, False, True, False]  # d's match is wrong: d has no partner
    assert (judged.with_partner, judged.without_partner) == (3, 1)


def whole_table():
    """A left table's best matches (score, right or wrong) and which rows have a partner: 80 with one,
    76 of them found at 0.80-0.99 and 4 matched wrongly at 0.50-0.53; 20 without one, each matched to
    something at 0.83-0.90 (the commonest error of record linkage)."""
    scores = np.r_[np.linspace(0.80, 0.99, 76), np.linspace(0.50, 0.53, 4), np.linspace(0.83, 0.90, 20)]
    right = np.r_[np.ones(76, bool), np.zeros(24, bool)]
    partner = np.r_[np.ones(80, bool), np.zeros(20, bool)]
    return scores, right, partner


def delivered(scores, right, threshold):
    return right[scores >= threshold].mean()


def test_a_no_match_label_keeps_the_precision_the_threshold_promises():
    scores, right, partner = whole_table()
    rows = np.arange(len(scores))
    sample = rows % 2 == 0  # the labels: every other left row, a sample of the table
    names = [f"n{i}" for i in rows]
    m = pa.table({"left": names, "right": [f"r{i}" if ok else "wrong" for i, ok in enumerate(right)],
                  "score": pa.array(scores, pa.float32()), "rank": np.ones(len(rows), np.int64)})
    labels = thresholds.label_pairs(pa.table({
        "left": [names[i] for i in rows[sample]],
        "right": [f"r{i}" if partner[i] else "" for i in rows[sample]]}), "labels.csv")
    # the old labels: only the names with a partner; the threshold passes 0.9 on them and delivers less
    old = thresholds.labelled_best_matches(m, labels.filter(pa.compute.is_valid(labels["right"])))
    before = thresholds.threshold_for_precision(old.scores, old.correct, 0.9, old.with_partner)
    assert before.precision >= 0.9 and delivered(scores, right, before.threshold) < 0.8
    assert before.warning == thresholds.UPPER_BOUND
    judged = thresholds.labelled_best_matches(m, labels)
    assert (judged.with_partner, judged.without_partner) == (40, 10)
    after = thresholds.threshold_for_precision(judged.scores, judged.correct, 0.9, judged.with_partner,
                                               judged.without_partner)
    lo, hi = after.precision_interval
    assert after.warning is None and after.precision >= 0.9
    assert delivered(scores, right, after.threshold) >= 0.88 and lo <= delivered(scores, right, after.threshold) <= hi
    # the counts behind the interval: the labelled matches kept and the right ones among them
    kept = judged.scores >= after.threshold
    assert (after.kept, after.right) == (kept.sum(), judged.correct[kept].sum())
    assert after.precision == pytest.approx(after.right / after.kept)
    assert after.recall_interval == pytest.approx(thresholds.wilson(after.right, 40))


def test_the_interval_covers_the_precision_of_generated_scores():
    """Matches right with probability 0.9 whatever their score: the precision over any threshold is
    0.9, and its 95% interval on a sample of 100 labelled matches should hold it ~95% of the time."""
    rng = np.random.default_rng(7)
    covered = []
    for _ in range(400):
        scores, right = rng.random(100), rng.random(100) < 0.9
        c = thresholds.threshold_for_precision(scores, right, 0.5)
        lo, hi = c.precision_interval
        covered.append(lo <= 0.9 <= hi)
    assert 0.92 <= np.mean(covered) <= 0.98
    (lo0, hi0), (lo1, hi1) = thresholds.wilson(0, 10), thresholds.wilson(9, 10)
    assert lo0 == 0 and 0 < hi0 < 0.35 and lo1 < 0.9 < hi1 and thresholds.wilson(0, 0) == (0, 1)


def test_labels_saying_two_things_of_one_name_are_refused():
    with pytest.raises(sides.LinkInputError, match="the left name 'a' has a partner .'x'. and an empty right cell"):
        thresholds.label_pairs(pa.table({"left": ["a", "b", "a"], "right": ["x", None, " "]}), "labels.csv")
    kept = thresholds.label_pairs(pa.table({"left": ["a", " ", "b", "a"], "right": ["x", "y", "", "z"]}), "l.csv")
    assert kept.to_pylist() == [{"left": "a", "right": "x"}, {"left": "b", "right": None}, {"left": "a", "right": "z"}]


# --- the approximate index against exact ----------------------------------------------------------
def test_hnsw_recall_against_exact_on_a_fixture():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(3000, 32)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    queries = base[:300] + 0.3 * rng.normal(size=(300, 32)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    approx = index.build_index(base, "hnsw")
    recall = index.recall_against_exact(base, queries, 10, approx)
    assert 0.9 <= recall <= 1.0
    assert index.recall_against_exact(base, queries, 10, index.build_index(base, "exact")) == 1.0
    assert index.choose_kind(10, exact_limit=10) == "exact" and index.choose_kind(11, exact_limit=10) == "hnsw"
    with pytest.raises(ValueError, match="ivf"):
        index.choose_kind(10, "ivf")


def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_an_index_gives_back_its_vectors_after_a_round_trip(kind):
    import faiss

    base, queries = unit_vectors(300, 32, 1), unit_vectors(50, 32, 2)
    saved = faiss.deserialize_index(faiss.serialize_index(index.build_index(base, kind)))
    np.testing.assert_array_equal(index.stored_vectors(saved), base)
    # the recall check needs no vectors beside the index: the same as from the vectors themselves
    assert index.recall_against_exact(None, queries, 5, saved) == index.recall_against_exact(base, queries, 5, saved)


def test_ef_search_tuning_picks_more_candidates_for_a_higher_target():
    # a few hundred random unit vectors: hard for a graph index at a small efSearch
    base, queries = unit_vectors(400, 64, 3), unit_vectors(200, 64, 4)
    hnsw = index.build_index(base, "hnsw")
    steps = (1, 2, 4, 8, 16, 32, 64, 128)
    low = index.tune_ef_search(hnsw, queries, 1, 0.6, steps)
    high = index.tune_ef_search(hnsw, queries, 1, 0.99, steps)
    assert low[0][1] < 0.99  # efSearch 1 misses: the targets part
    (ef_low, r_low, met_low), (ef_high, r_high, met_high) = (index.chosen_ef_search(t, t_) for t, t_ in
                                                             ((low, 0.6), (high, 0.99)))
    assert met_low and met_high and ef_low < ef_high and r_low >= 0.6 and r_high >= 0.99
    assert [ef for ef, _ in high] == [ef for ef in steps if ef <= ef_high]  # stops at the first that reaches it
    assert hnsw.hnsw.efSearch == ef_high  # left at the last tried
    # each step's recall is the recall the index gives there
    _, exact = index.search(index.build_index(base, "exact"), queries, 1)
    for ef, r in high:
        index.set_ef_search(hnsw, ef)
        assert r == index.recall(exact, index.search(hnsw, queries, 1)[1])
    # no efSearch below the hits a query asks for (FAISS would return fewer): 20 candidates start at 32
    assert [ef for ef, _ in index.tune_ef_search(hnsw, queries, 1, 1.01, steps, candidates=20)] == [32, 64, 128]
    assert [ef for ef, _ in index.tune_ef_search(hnsw, queries, 1, 1.01, (1, 2), candidates=20)] == [2]


def test_dedupe_tuning_reaches_the_target_recall_of_the_nearest_other_item():
    """Issue 64 item 12: a query that is in the index finds itself at any efSearch, so counting it the
    tuning stopped at the first step while the nearest *other* items were still missed."""
    n, target = 4000, 0.95
    base = unit_vectors(n, 384, 5)
    own = np.random.default_rng(6).choice(n, 300, replace=False)
    queries = base[own]
    hnsw = index.build_index(base, "hnsw")
    others = base @ queries.T
    others[own, np.arange(len(own))] = -np.inf
    nearest_other = others.argmax(axis=0)  # by brute force, not through the index module

    def recall_of_others(ef: int) -> float:
        index.set_ef_search(hnsw, ef)
        _, ids = index.search(hnsw, queries, 2)
        return float(np.mean(np.where(ids[:, 0] == own, ids[:, 1], ids[:, 0]) == nearest_other))

    assert recall_of_others(16) < target  # the lowest efSearch misses others: the test can tell
    assert index.tune_ef_search(hnsw, queries, 1, target) == [(16, 1.0)]  # counting itself: stopped there
    tried = index.tune_ef_search(hnsw, queries, 1, target, self_ids=own)
    ef, measured, met = index.chosen_ef_search(tried, target)
    assert met and ef > 16 and recall_of_others(ef) >= target
    assert [r for _, r in tried] == [recall_of_others(e) for e, _ in tried]  # each step measured as it is
    assert index.recall_against_exact(base, queries, 1, hnsw, self_ids=own) == recall_of_others(ef)
    # a query not in the index (-1) keeps all its neighbours
    outside = unit_vectors(50, 384, 7)
    index.set_ef_search(hnsw, 1024)
    assert index.recall_against_exact(base, outside, 3, hnsw, self_ids=np.full(50, -1)) == \
        index.recall_against_exact(base, outside, 3, hnsw)


def test_an_unreachable_recall_target_gives_the_cap_and_says_so():
    base, queries = unit_vectors(400, 64, 3), unit_vectors(200, 64, 4)
    hnsw = index.build_index(base, "hnsw")
    tried = index.tune_ef_search(hnsw, queries, 1, 1.01, (1, 2, 4))  # more than any recall
    assert [ef for ef, _ in tried] == [1, 2, 4]
    assert index.chosen_ef_search(tried, 1.01) == (4, tried[-1][1], False)
    index.set_ef_search(index.build_index(base, "exact"), 8)  # an exact index has none: nothing to set


def test_a_right_side_without_vectors_gives_the_same_top_k(encoder):
    left = matches.encode_side(encoder, sides.side_from_array(pa.array(["aple", "plum", "kiwi"]), "l", "t"), 1)
    right = matches.encode_side(encoder, sides.side_from_array(pa.array(FRUIT + ["plum"]), "r", "t"), 1)
    idx = matches.build_index(right, "exact")
    names_only = matches.encoded_from_vectors(right.side, None, idx.ntotal)
    assert names_only.vectors is None
    assert matches.top_k(left, names_only, idx, 3).equals(matches.top_k(left, right, idx, 3))
    with pytest.raises(ValueError, match="12 vectors for 12 distinct names|13 vectors for 12 distinct names"):
        matches.encoded_from_vectors(right.side, None, idx.ntotal + 1)


# --- reading a side: bad input ---------------------------------------------------------------------
def test_csv_and_parquet_sides_skip_and_count_blank_names(tmp_path):
    names = ["plum", None, "  ", "kiwi", ""]
    pq.write_table(pa.table({"id": [1, 2, 3, 4, 5], "name": names}), tmp_path / "t.parquet")
    (tmp_path / "t.csv").write_text('id,name\n1,plum\n2,\n3,"  "\n4,kiwi\n5,""\n', encoding="utf-8")
    for path in (tmp_path / "t.parquet", tmp_path / "t.csv"):
        s = sides.read_side(str(path), "name")
        assert (s.names, s.rows.tolist(), s.total, s.skipped) == (["plum", "kiwi"], [0, 3], 5, 3)


def test_consecutive_partitions_concatenate_into_the_table_s_side():
    table = ["plum", None, "kiwi", "  ", "plum", "fig", ""]
    cuts = [(0, 3), (3, 4), (4, 7)]  # one partition of blanks only
    parts = [sides.side_from_array(pa.array(table[a:b], pa.string()), "t", "title", first_row=a) for a, b in cuts]
    joined, expected = sides.concat_sides(parts), side(table)
    assert (joined.names, joined.rows.tolist(), joined.total, joined.skipped) == \
        (expected.names, expected.rows.tolist(), expected.total, expected.skipped) == \
        (["plum", "kiwi", "plum", "fig"], [0, 2, 4, 5], 7, 3)
    assert matches.distinct_names(joined)[0] == ["plum", "kiwi", "fig"]  # a name in two partitions once


def test_a_side_reads_from_any_fsspec_url(memory_root):
    import fsspec

    with fsspec.open(f"{memory_root}/t.csv", "w") as f:
        f.write("title\nplum\nkiwi\n")
    assert sides.read_side(f"{memory_root}/t.csv").names == ["plum", "kiwi"]


@pytest.mark.parametrize("name, content, message", [
    ("t.csv", b"id,name\n1,plum\n", "has no column 'title'; its columns: 'id', 'name'"),
    ("t.csv", b"title\n", "has no rows"),
    ("t.csv", b"", "cannot read"),
    ("t.csv", b"title\ncaf\xe9\n", "not UTF-8"),
    ("t.csv", b"title\n\n\"\"\n\" \"\n", "all 2 names in column 'title' are null or empty"),
    ("t.txt", b"title\nplum\n", "the suffix must be one of"),
    ("missing.csv", None, "No such file"),
    ("t.parquet", b"PAR1 not parquet", "cannot read"),
])
def test_bad_sides_are_clear_errors_naming_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(sides.LinkInputError, match=message) as e:
        sides.read_side(str(path))
    assert str(path) in str(e.value)


def test_an_empty_parquet_table_and_a_missing_parquet_column(tmp_path):
    pq.write_table(pa.table({"title": pa.array([], pa.string())}), tmp_path / "e.parquet")
    with pytest.raises(sides.LinkInputError, match="has no rows"):
        sides.read_side(str(tmp_path / "e.parquet"))
    pq.write_table(pa.table({"name": ["x"], "id": [1]}), tmp_path / "c.parquet")
    with pytest.raises(sides.LinkInputError, match="no column 'title'; its columns: 'name', 'id'"):
        sides.read_side(str(tmp_path / "c.parquet"))


# --- the command -----------------------------------------------------------------------------------
def write_csv(path, column, names):
    pacsv.write_csv(pa.table({"id": list(range(len(names))), column: pa.array(names, pa.string())}), path)
    return str(path)


def run(*args):
    return CliRunner().invoke(app, ["link", *map(str, args)])


def test_link_two_tables_end_to_end(model_dir, tmp_path):
    left = write_csv(tmp_path / "left.csv", "name", ["plum", None, "kiwi", "zebra", "apple"])
    right = tmp_path / "right.parquet"
    pq.write_table(pa.table({"title": FRUIT}), right)
    out = tmp_path / "m.parquet"
    r = run(left, right, "--left-column", "name", "--out", out, "--model", model_dir, "--backend", "torch",
            "--threshold", "0.9999", "--top-k", "2")
    assert r.exit_code == 0, r.output
    t = pq.read_table(out)
    assert t.schema == MATCHES
    assert t.select(["left_row", "right_row", "left", "right", "rank"]).to_pylist() == [
        {"left_row": 0, "right_row": 11, "left": "plum", "right": "plum", "rank": 1},
        {"left_row": 2, "right_row": 7, "left": "kiwi", "right": "kiwi", "rank": 1},
        {"left_row": 4, "right_row": 0, "left": "apple", "right": "apple", "rank": 1}]
    assert "left: 5 rows = 3 matched + 1 below the threshold + 1 null or empty (skipped)" in r.stderr
    assert "right: 12 rows, 0 null or empty" in r.stderr
    assert "wrote 3 matches" in r.stderr and "5 of 8 candidates below the threshold" in r.stderr
    csv_out = tmp_path / "m.csv"
    r = run(left, right, "--left-column", "name", "--out", csv_out, "--model", model_dir, "--backend", "torch")
    assert r.exit_code == 0, r.output
    assert "no threshold is chosen" in r.stderr
    assert f"wrote 4 matches to {csv_out}\n" in r.stderr  # no threshold: no count of candidates below one
    rows = pacsv.read_csv(csv_out).to_pylist()
    assert [(x["left"], x["right"]) for x in rows if x["left"] != "zebra"] == [("plum", "plum"), ("kiwi", "kiwi"),
                                                                               ("apple", "apple")]
    assert list(rows[0]) == MATCHES.names


def test_link_writes_to_an_fsspec_url(model_dir, tmp_path, memory_root):
    left = write_csv(tmp_path / "l.csv", "title", ["plum", "kiwi"])
    r = run(left, left, "--out", f"{memory_root}/out/m.parquet", "--model", model_dir, "--backend", "torch")
    assert r.exit_code == 0, r.output
    import fsspec

    with fsspec.open(f"{memory_root}/out/m.parquet", "rb") as f:
        assert pq.read_table(f)["right_row"].to_pylist() == [0, 1]


def test_dedupe_adds_clusters(model_dir, tmp_path):
    table = write_csv(tmp_path / "t.csv", "title", ["pear", "fig", "pear", "kiwi", None, "fig", "pear"])
    out = tmp_path / "d.parquet"
    r = run(table, "--dedupe", "--threshold", "0.9999", "--out", out, "--model", model_dir, "--backend", "torch")
    assert r.exit_code == 0, r.output
    t = pq.read_table(out)
    assert t.schema == DEDUPED_MATCHES
    assert dict(zip(t["left_row"].to_pylist(), t["cluster"].to_pylist())) == {0: 0, 2: 0, 6: 0, 1: 1, 5: 1}
    assert all(a != b for a, b in zip(t["left_row"].to_pylist(), t["right_row"].to_pylist()))
    assert "table: 7 rows = 5 matched + 1 below the threshold + 0 with no other row + 1 null or empty" in r.stderr
    assert "2 clusters" in r.stderr


def test_labels_choose_the_threshold(model_dir, tmp_path):
    left = write_csv(tmp_path / "l.csv", "title", ["plum", "kiwi", "zebra", "apple"])
    right = write_csv(tmp_path / "r.csv", "title", FRUIT)
    labels = tmp_path / "labels.csv"
    labels.write_text("left,right\nplum,plum\nkiwi,kiwi\nzebra,\napple,apple\n", encoding="utf-8")  # zebra: none
    out = tmp_path / "m.parquet"
    r = run(left, right, "--labels", labels, "--precision", "1", "--out", out, "--model", model_dir,
            "--backend", "torch")
    assert r.exit_code == 0, r.output
    # the three names found score ~1; zebra, labelled without a partner, best matches some fruit scoring
    # less: a wrong match that precision 1 puts below the threshold
    kept = pq.read_table(out)
    assert kept["left"].to_pylist() == ["plum", "kiwi", "apple"] and kept["rank"].to_pylist() == [1, 1, 1]
    assert ("precision 1.000 (95% 0.439-1.000, 3 right of 3 labelled matches kept), recall 1.000 (95% 0.439-1.000) "
            "on 3 left names labelled with a partner and 1 without") in r.stderr
    assert "warning" not in r.stderr
    labels.write_text("left,right\nplum,kiwi\n", encoding="utf-8")  # plum's match is plum: no threshold is 1 precise
    r = run(left, right, "--labels", labels, "--precision", "1", "--out", tmp_path / "none.parquet",
            "--model", model_dir, "--backend", "torch")
    assert "no labelled match is found" in one_line_error(r) and not (tmp_path / "none.parquet").exists()


def test_labels_without_a_no_match_name_warn_that_precision_is_an_upper_bound(model_dir, tmp_path):
    left = write_csv(tmp_path / "l.csv", "title", ["plum", "kiwi", "zebra", "apple"])
    right = write_csv(tmp_path / "r.csv", "title", FRUIT)
    labels = tmp_path / "labels.csv"
    labels.write_text("left,right\nplum,plum\nkiwi,kiwi\n", encoding="utf-8")
    r = run(left, right, "--labels", labels, "--precision", "0.9", "--out", tmp_path / "m.parquet",
            "--model", model_dir, "--backend", "torch")
    assert r.exit_code == 0, r.output
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: {thresholds.UPPER_BOUND}"]


@pytest.mark.parametrize("labels, message", [
    ("left,right\nplum,plum\nplum,\n", "the left name 'plum' has a partner ('plum') and an empty right cell"),
    ("left,right\nplum,plum\npulm,plum\n", "the left name 'pulm' is not in"),
    ("left,right\nplum,plum\nkiwi,kiwi fruit\n", "the right name 'kiwi fruit' is not in"),
])
def test_labels_that_cannot_be_judged_are_refused_in_one_line(tmp_path, no_model, labels, message):
    left = write_csv(tmp_path / "l.csv", "title", ["plum", "kiwi"])
    right = write_csv(tmp_path / "r.csv", "title", FRUIT)
    (tmp_path / "labels.csv").write_text(labels, encoding="utf-8")
    r = run(left, right, "--labels", tmp_path / "labels.csv", "--out", tmp_path / "m.parquet", "--model", "x")
    assert message in one_line_error(r) and "labels.csv" in r.stderr
    assert no_model == [] and not (tmp_path / "m.parquet").exists()


def one_line_error(r, code=2) -> str:
    assert r.exit_code == code and isinstance(r.exception, SystemExit), (r.exception, r.output)
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.output, r.output
    return r.stderr


@pytest.mark.parametrize("make, message", [
    (lambda tmp: write_csv(tmp / "l.csv", "name", ["a"]), "has no column 'title'; its columns: 'id', 'name'"),
    (lambda tmp: (tmp / "e.csv").write_text("title\n") and str(tmp / "e.csv"), "has no rows"),
    (lambda tmp: (tmp / "b.csv").write_bytes(b"title\ncaf\xe9\n") and str(tmp / "b.csv"), "not UTF-8"),
    (lambda tmp: write_csv(tmp / "n.csv", "title", [None, " "]), "are null or empty"),
    (lambda tmp: str(tmp / "missing.parquet"), "missing.parquet"),
])
def test_bad_input_fails_in_one_line_before_the_model_loads(tmp_path, no_model, make, message):
    good = write_csv(tmp_path / "good.csv", "title", ["plum"])
    bad = make(tmp_path)
    for args in ((bad, good), (good, bad)):
        r = run(*args, "--out", tmp_path / "m.parquet", "--model", "x")
        assert message in one_line_error(r) and bad in r.stderr
    assert no_model == [] and not (tmp_path / "m.parquet").exists()


@pytest.mark.parametrize("args, message", [
    (["a.csv", "--dedupe", "--out", "m.parquet"], "--dedupe needs --threshold or --labels"),
    (["a.csv", "b.csv", "--dedupe", "--threshold", "0.5", "--out", "m.parquet"], "one table, not two"),
    (["a.csv", "--out", "m.parquet"], "give LEFT and RIGHT"),
    (["a.csv", "b.csv", "--threshold", "0.5", "--labels", "p.csv", "--out", "m.parquet"], "not both"),
    (["a.csv", "b.csv", "--out", "m.npy"], "the suffix must be one of"),
    (["a.csv", "b.csv", "--out", "m.csv", "--top-k", "0"], "--top-k"),
])
def test_usage_errors_are_one_line(args, message, no_model):
    r = CliRunner().invoke(app, ["link", *args], prog_name="pearl")
    assert message in one_line_error(r) and no_model == []


def test_a_missing_model_is_one_line(tmp_path):
    good = write_csv(tmp_path / "good.csv", "title", ["plum"])
    r = run(good, good, "--out", tmp_path / "m.parquet", "--model", tmp_path / "no-model")
    assert "does not exist" in one_line_error(r) and not (tmp_path / "m.parquet").exists()


def test_a_failed_write_leaves_nothing_half_written(model_dir, tmp_path, monkeypatch):
    good = write_csv(tmp_path / "good.csv", "title", ["plum", "kiwi"])
    out = tmp_path / "out" / "m.parquet"
    out.parent.mkdir()
    out.write_bytes(b"old")

    def disk_full(table, where, **kw):
        with open(where, "wb") as f:
            f.write(b"PAR1 half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", disk_full)
    r = run(good, good, "--out", out, "--model", model_dir, "--backend", "torch")
    assert "cannot write" in one_line_error(r, 1) and "No space left" in r.stderr
    assert out.read_bytes() == b"old" and [p.name for p in out.parent.iterdir()] == ["m.parquet"]


def test_partitions_merge_into_the_whole_table_s_top_k(encoder):
    table = ["pear", "fig", "plum", "pear", "kiwi", "fig", "lemon", "pear", "apple"]
    k = 3
    whole = matches.encode_side(encoder, side(table))
    expected = matches.top_k(whole, whole, matches.build_index(whole), k, exclude_self=True)
    parts = []
    for start in (0, 4, 7):  # right partitions with the table's rows; the left side whole
        piece = table[start:{0: 4, 4: 7, 7: 9}[start]]
        right = matches.encode_side(encoder, sides.side_from_array(pa.array(piece), "t", "title", first_row=start))
        parts.append(matches.top_k(whole, right, matches.build_index(right), k, exclude_self=True))
    merged = matches.merge_top_k(parts, k)
    assert merged.select(["left_row", "right_row", "rank"]).to_pylist() == \
        expected.select(["left_row", "right_row", "rank"]).to_pylist()
    np.testing.assert_allclose(merged["score"].to_numpy(), expected["score"].to_numpy(), atol=1e-6)


def test_an_empty_partition_gives_no_matches(encoder):
    empty = matches.encode_side(encoder, side([None, "  "]))
    assert empty.vectors.shape[0] == 0
    right = matches.encode_side(encoder, side(FRUIT))
    assert matches.top_k(empty, right, matches.build_index(right), 2).num_rows == 0


def test_link_uses_the_current_model_as_encode_does(model_dir, tmp_path):
    from storage.registry import ModelRegistry
    from tests.test_cli import registered

    root = str(tmp_path / "store")
    registered(root, model_dir, "m1")
    ModelRegistry(root).promote("m1", "for the test")
    table = write_csv(tmp_path / "t.csv", "title", ["plum", "kiwi"])
    r = run(table, table, "--out", tmp_path / "m.parquet", "--storage-root", root, "--backend", "torch")
    assert r.exit_code == 0, r.output
    assert "model: current = m1" in r.stderr
    assert pq.read_table(tmp_path / "m.parquet")["right_row"].to_pylist() == [0, 1]


def test_the_default_score_adds_token_set_ratio_to_the_cosine_and_weight_1_is_the_cosine(model_dir, tmp_path):
    from rapidfuzz import fuzz, utils

    from pearl_model.linking import rescore

    left = write_csv(tmp_path / "left.csv", "title", ["red apple", "plum jam", "kiwi"])
    right = write_csv(tmp_path / "right.csv", "title", FRUIT)
    scored = {}
    for weight in (None, "1"):
        out = tmp_path / f"m{weight}.parquet"
        r = run(left, right, "--out", out, "--model", model_dir, "--backend", "torch", "--top-k", "3",
                *(["--cosine-weight", weight] if weight else []))
        assert r.exit_code == 0, r.output
        scored[weight] = {(x["left"], x["right"]): x["score"] for x in pq.read_table(out).to_pylist()}
    cosine = scored["1"]
    w = rescore.COSINE_WEIGHT
    for (a, b), score in scored[None].items():
        if (a, b) in cosine:  # a pair both keep: the combined score of its cosine and string score
            tsr = fuzz.token_set_ratio(a, b, processor=utils.default_process) / 100
            assert score == pytest.approx(w * cosine[a, b] + (1 - w) * tsr, abs=1e-5)
    assert scored[None] != cosine
    r = run(left, right, "--out", tmp_path / "x.parquet", "--model", model_dir, "--cosine-weight", "1.5")
    assert r.exit_code == 2 and "--cosine-weight" in r.stderr and len(r.stderr.splitlines()) == 1
