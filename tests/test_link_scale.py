"""benchmarks/link_scale.py's pure parts: the character edits keep the ground truth, and the projection's
arithmetic on made-up runs checked by hand."""
from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import numpy as np
import pytest
from rapidfuzz.distance import DamerauLevenshtein

spec = importlib.util.spec_from_file_location(
    "link_scale", Path(__file__).resolve().parents[1] / "benchmarks" / "link_scale.py")
ls = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ls)


@pytest.mark.parametrize("name", ["", "a", "ab", "Alabama", "social inequality"])
def test_an_edited_name_is_within_its_edits(name):
    rng = random.Random(1)
    for edits in (1, 2, 3):
        for _ in range(200):
            assert DamerauLevenshtein.distance(name, ls.edit_name(name, rng, edits)) <= edits


def test_the_left_copies_are_within_their_edits_of_their_source():
    base = ["Alabama", "Alberta", "social inequality", "a point", "selenium", "World War"]
    made = ls.make_names(base, 20, match_fraction=0.25, max_edits=2, seed=3)
    assert len(made["right"]) == len(made["left"]) == 20
    assert made["right"][:6] != base and sorted(made["right"][:6]) == sorted(base)  # shuffled, then variants
    copies = [j for j, s in enumerate(made["source"]) if s is not None]
    assert len(copies) == 5
    for j in copies:
        assert DamerauLevenshtein.distance(made["left"][j], made["right"][made["source"][j]]) <= made["edits"][j]
    assert ls.make_names(base, 20, 0.25, 2, seed=3) == made  # seeded


def test_task_run_names_give_their_stage():
    assert [ls.stage_of(n) for n in ("query-left-12", "index-right-0", "split-left", "split-right", "plan-link-ad8",
                                     "write-matches-354", "encode-left-3", "encode-right-10")] == \
        ["query-left", "index-right", "split-side", "split-side", "plan-link", "write-matches", "encode-left",
         "encode-right"]


def run(rows, parts, encode, index, query, split, write, peaks, p=1000, index_rows=None):
    return {"left_rows": rows, "right_rows": rows, "partition_rows": p, "left_parts": parts, "right_parts": parts,
            "index": "exact", "load_s": 10.0, "peak_rss_mb_per_worker": peaks, "index_rows": index_rows or p,
            "stages": {"encode-right": {"task_s": encode / 2}, "encode-left": {"task_s": encode / 2},
                       "index-right": {"task_s": index}, "query-left": {"task_s": query},
                       "split-side": {"task_s": split}, "write-matches": {"task_s": write}}}


def test_the_projection_splits_encoding_indexing_and_search_per_shard():
    # 0.002 s per name encoded (plus a fixed 1 s that drops out), 0.0005 s per right name indexed,
    # 0.0001 s per (left name, shard): shards of 2000 rows, so 1 shard at 2000 rows and 2 at 4000
    a = run(2000, 2, 0.002 * 4000 + 1, 0.0004 * 2000, 0.0001 * 2000 * 1, 0.0001 * 4000 + 0.1, 0.00005 * 2000 + 0.1,
            [1000, 1100], index_rows=2000)
    b = run(4000, 4, 0.002 * 8000 + 1, 0.0005 * 4000, 0.0001 * 4000 * 2, 0.0001 * 8000 + 0.1, 0.00005 * 4000 + 0.1,
            [1050, 1150], index_rows=2000)
    proj = ls.project_link([b, a], cores=100, left=1e6, right=1e6)
    assert proj["per_name_s"] == pytest.approx(0.002) and proj["build_per_name_s"] == pytest.approx(0.0005)
    assert proj["search_per_query_shard_s"] == pytest.approx(0.0001)
    assert (proj["left_parts"], proj["shards"], proj["measured_shards"]) == (1000, 500, 2)
    # encode: 4000 s over 100 cores; index: 500 s over 100 shards' tasks; query: 0.0001 s x 1e6 x 500
    # shards over 100 cores; split 100 s; write 50 s
    assert proj["hours"] == pytest.approx({"encode": 40 / 3600, "index": 5 / 3600, "query": 500 / 3600,
                                           "split": 100 / 3600, "write": 50 / 3600})
    assert proj["total_hours"] == pytest.approx(695 / 3600)
    assert proj["memory"] == [{"partition_rows": 1000, "index_rows": 2000, "rows": [2000, 4000], "peak_mb": [1100, 1150],
                               "ratio": pytest.approx(1150 / 1100, abs=1e-3), "flat": True}]
    grows = run(4000, 4, 9, 18, 0.9, 0.3, 0.2, [2000, 1500], index_rows=2000)
    assert ls.memory_flat([a, grows])[0]["flat"] is False
    # a smaller run whose right side does not fill a shard is no test of flatness
    small = run(1000, 1, 3, 1, 1, 0.2, 0.1, [500, 500], index_rows=2000)
    assert ls.memory_flat([small, grows])[0]["flat"] is None


def test_the_projection_refuses_runs_before_the_encode_tasks():
    a, b = (run(n, n // 1000, 5, 8, 3, 0.5, 0.2, [1000]) for n in (2000, 4000))
    for r in (a, b):
        del r["stages"]["encode-right"]
    with pytest.raises(ValueError, match="encode tasks"):
        ls.project_link([a, b], cores=10)


def test_the_projection_needs_two_sizes():
    with pytest.raises(ValueError, match="two runs"):
        ls.project_link([run(2000, 2, 5, 8, 3, 0.5, 0.2, [1000])], cores=10)


def test_search_costs_measure_recall_against_exact():
    rng = np.random.default_rng(0)
    base = rng.standard_normal((2000, 16)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    queries = base[:200] + 0.01 * rng.standard_normal((200, 16)).astype(np.float32)
    exact, low, high = ls.search_costs(base, queries, k=5, efs=[1, 256])
    assert exact["index"] == "exact" and exact["recall_at_k"] == 1.0 and exact["base"] == 2000
    assert (low["ef_search"], high["ef_search"]) == (1, 256)
    assert high["recall_at_1"] >= 0.99 and high["recall_at_k"] >= 0.95  # a near copy of a base row is found
    assert low["recall_at_k"] < high["recall_at_k"]  # a one-candidate search misses some of the exact top 5


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_the_search_study_reads_the_flow_s_index_shards_as_vectors(tmp_path, kind):
    import faiss

    from pearl_model.linking import index as vector_index

    base = np.random.default_rng(1).standard_normal((300, 16)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    faiss.write_index(vector_index.build_index(base, kind), str(tmp_path / "part-00000.faiss"))
    np.save(tmp_path / "part-00000.npy", base)
    np.testing.assert_array_equal(ls.load_vectors(tmp_path / "part-00000.faiss"), base)
    np.testing.assert_array_equal(ls.load_vectors(tmp_path / "part-00000.npy"), base)
