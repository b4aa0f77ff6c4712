"""The link stage (tasks/matches.py) as plain functions, wired as flows/link.py wires them, on a tiny
random-weight model: partitioned results equal the unpartitioned top k, the counts add up, bad input
fails before anything is written, and a run that fails commits nothing."""
from __future__ import annotations

import dataclasses
import json
import string

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pearl_model.linking import clusters, matches, rescore, sides  # noqa: E402
from pearl_model.linking import index as vector_index  # noqa: E402
from pearl_model.linking.sides import LinkInputError  # noqa: E402
from storage.datasets import latest_version  # noqa: E402
from storage.schemas import DEDUPED_MATCHES, MATCHES  # noqa: E402
from tasks import matches as stage  # noqa: E402
from tests.conftest import stored_parts, tiny_model_dir  # noqa: E402

LETTERS = list(string.ascii_lowercase)
# duplicates across partitions (apple, plum), blanks, and near misses
RIGHT = ["apple", "banana", None, "cherry", "plum", "apple", "  ", "grape", "kiwi", "plum", "lemon"]
LEFT = ["aple", "plum", "", "cherri", "kiwi", None, "banan", "lemon", "grap"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(tiny_model_dir(tmp_path_factory.mktemp("tiny-link-model"), LETTERS + [f"##{c}" for c in LETTERS]))


@pytest.fixture
def tables(tmp_path):
    pq.write_table(pa.table({"title": pa.array(RIGHT, pa.string())}), tmp_path / "right.parquet")
    pq.write_table(pa.table({"name": pa.array(LEFT, pa.string())}), tmp_path / "left.parquet")
    return str(tmp_path / "left.parquet"), str(tmp_path / "right.parquet")


def run(left, right, root, **settings):
    """The flow's wiring, task by task in this process."""
    settings = {"batch_size": 1, **settings}  # one name per pass: a name's vector never depends on its batch
    plan = stage.plan_link(left, right, root, **settings)
    stage.start_work(plan)
    lp = stage.split_side(plan, "left")
    rp = stage.split_side(plan, "right") if right is not None else lp
    stage.check_labels(plan, lp, rp)
    sample = stage.tuning_sample(plan, lp, rp)
    for side, parts in (("right", rp), ("left", lp)):
        for j in range(parts.parts):
            stage.encode_part(plan, side, j, rp)
    shards = [stage.index_right(plan, j, rp, sample) for j in range(plan.shards(rp.parts))]
    recall = [stage.query_left(plan, i, rp, shards) for i in range(lp.parts)]
    threshold = stage.choose_threshold(plan, lp.parts)
    search = stage.search_settings(plan, rp, shards)
    return plan, stage.write_matches(plan, lp, rp, threshold, {**stage.recall_summary(recall), **search})


def whole(model_dir, left_names, right_names, k, dedupe=False, cosine_weight=None):
    """The unpartitioned reference: matches.top_k on whole sides, rescored as `pearl link` does."""
    cosine_weight = rescore.COSINE_WEIGHT if cosine_weight is None else cosine_weight
    encoder = stage.load_model(model_dir)
    left = matches.encode_side(encoder, sides.side_from_array(pa.array(left_names, pa.string()), "l", "t"), 1)
    right = left if dedupe else matches.encode_side(
        encoder, sides.side_from_array(pa.array(right_names, pa.string()), "r", "t"), 1)
    found = matches.top_k(left, right, matches.build_index(right, "exact"),
                          rescore.candidate_count(k, cosine_weight), exclude_self=dedupe)
    return left, rescore.best(found, k, cosine_weight)


def rows_of(table, columns=("left_row", "right_row", "left", "right", "rank")):
    return table.select(list(columns)).to_pylist()


# index_rows: shards of 2, 3 or 4 right partitions, the last one smaller where they do not divide (11 rows)
@pytest.mark.parametrize("partition_rows,index_rows,cosine_weight", [
    (2, None, None), (3, None, None), (100, None, None), (2, None, 1.0),
    (2, 4, None), (2, 8, None), (3, 9, None), (2, 5, 1.0), (3, 6, 1.0), (2, 100, None)])
def test_partitioned_top_k_equals_the_unpartitioned(model_dir, tables, tmp_path, partition_rows, index_rows,
                                                    cosine_weight):
    left, right = tables
    plan, manifest = run(left, right, str(tmp_path / "store"), left_column="name", model=model_dir, top_k=3,
                         partition_rows=partition_rows, index_rows=index_rows, cosine_weight=cosine_weight)
    got = plan.out.read()
    _, expected = whole(model_dir, LEFT, RIGHT, 3, cosine_weight=cosine_weight)
    assert manifest["rows"] == got.num_rows == expected.num_rows > 0
    assert rows_of(got) == rows_of(expected)
    np.testing.assert_allclose(got["score"].to_numpy(), expected["score"].to_numpy(), atol=1e-5)
    assert len(manifest["parts"]) == -(-len(LEFT) // partition_rows)
    # a duplicated right name ties exactly, ranked by its row, across partitions too
    plum = got.filter(pa.compute.equal(got["left"], "plum")).to_pylist()
    assert [(r["right_row"], r["rank"]) for r in plum[:2]] == [(4, 1), (9, 2)]
    assert plum[0]["score"] == plum[1]["score"]


@pytest.mark.parametrize("index_rows", [None, 2, 6])  # None: the default, one shard here
def test_counts_add_up_and_match_the_unpartitioned_counts(model_dir, tables, tmp_path, index_rows):
    left, right = tables
    plan, manifest = run(left, right, str(tmp_path / "store"), left_column="name", model=model_dir, top_k=2,
                         threshold=0.9, partition_rows=2, index_rows=index_rows)
    c = manifest["stats"]["counts"]
    assert c["rows"] == len(LEFT) == c["skipped"] + c["matched"] + c["below_threshold"] + c["no_candidate"]
    assert c["skipped"] == 2 and c["candidate_pairs"] == c["pairs"] + c["pairs_below_threshold"]
    assert manifest["stats"]["right"] == {"rows": len(RIGHT), "skipped": 2, "parts": 6}
    left_side, candidates = whole(model_dir, LEFT, RIGHT, 2)
    kept, _ = matches.above_threshold(candidates, 0.9)
    assert c == dataclasses.asdict(matches.count(left_side.side, candidates, kept))
    assert manifest["rows"] == kept.num_rows == c["pairs"]
    assert plan.out.metadata_totals() == c  # each part's footer holds its own counts
    assert sum(manifest["stats"]["histogram"]["counts"]) == c["matched"] + c["below_threshold"]
    table = {r["count"]: r["value"] for r in stage.counts_table(manifest)}
    assert table["left: rows"] == sum(table[k] for k in table if k.startswith("left:") and k != "left: rows")
    # the working partitions are gone once committed
    assert not plan.out.fs.exists(plan.work_path)


# index_rows 6: apple's rows 0 and 5 in one shard of two partitions, where row 0 must skip itself
@pytest.mark.parametrize("index_rows,cosine_weight", [(None, None), (3, None), (6, None), (9, None), (6, 1.0)])
def test_dedupe_partitioned_equals_clusters_over_the_whole_table(model_dir, tables, tmp_path, index_rows,
                                                                 cosine_weight):
    _, right = tables
    plan, manifest = run(right, None, str(tmp_path / "store"), model=model_dir, top_k=2, threshold=0.95,
                         dedupe=True, partition_rows=3, index_rows=index_rows, cosine_weight=cosine_weight)
    got = plan.out.read()
    assert plan.out.name == "deduped_matches" and got.schema == DEDUPED_MATCHES
    encoded, candidates = whole(model_dir, RIGHT, None, 2, dedupe=True, cosine_weight=cosine_weight)
    side = encoded.side
    kept, _ = matches.above_threshold(candidates, 0.95)
    expected = clusters.with_clusters(kept, side.rows)
    assert rows_of(got, ("left_row", "right_row", "rank", "cluster")) == \
        rows_of(expected, ("left_row", "right_row", "rank", "cluster"))
    assert all(r["left_row"] != r["right_row"] for r in got.to_pylist())
    apple = {r["cluster"] for r in got.to_pylist() if r["left"] == "apple"}
    assert apple == {0}  # rows 0 and 5, in different partitions, one cluster named by its smallest row
    assert manifest["stats"]["clusters"] == len(np.unique(clusters.cluster_ids(side.rows, kept["left_row"].to_numpy(),
                                                                               kept["right_row"].to_numpy())))


@pytest.mark.parametrize("index_rows", [None, 6, 9])
def test_dedupe_encodes_each_distinct_name_once(model_dir, tables, tmp_path, monkeypatch, index_rows):
    """The left side's vectors are the right side's, bit for bit, gathered rather than encoded again."""
    encoded = []
    model = stage.load_model(model_dir)

    class Counting:
        def encode(self, names, **kw):
            encoded.extend(names)
            return model.encode(names, **kw)

    monkeypatch.setattr(stage, "load_model", lambda spec: Counting())
    _, right = tables
    plan = stage.plan_link(right, None, str(tmp_path / "store"), model=model_dir, top_k=2, threshold=0.5,
                           dedupe=True, partition_rows=3, index_rows=index_rows, batch_size=1)
    stage.start_work(plan)
    table = stage.split_side(plan, "left")
    for side in ("right", "left"):
        for j in range(table.parts):
            stage.encode_part(plan, side, j, table)
    shard_names = [n for shard in range(plan.shards(table.parts)) for _, new in stage._shard_new_names(plan, shard, table)
                   for n in new]
    assert sorted(encoded) == sorted(shard_names)  # the right side's encodes, and no left one
    for j in range(table.parts):
        names = matches.distinct_names(stage.read_side(plan, "left", j))[0]
        got = stage._vectors(plan, "left", j)
        alone = model.encode(names, batch_size=1, show_progress=False)
        assert got.shape == (len(names), alone.shape[1])
        np.testing.assert_allclose(got, alone, atol=1e-5)  # each row is its own name's vector


@pytest.mark.parametrize("index_rows,shards", [(None, 1), (4, 3), (8, 2)])  # None: the default, one shard here
def test_an_approximate_index_reports_its_recall(model_dir, tables, tmp_path, index_rows, shards):
    left, right = tables
    plan, manifest = run(left, right, str(tmp_path / "store"), left_column="name", model=model_dir, top_k=2,
                         partition_rows=4, index_rows=index_rows, exact_limit=3)  # auto: more names than exact_limit
    index = manifest["stats"]["index"]
    assert index["kind"] == "hnsw" and index["right_names"] == 9
    assert len(index["recall_per_part"]) == shards and 0.0 <= index["recall"] <= 1.0  # one per shard
    assert index["recall_queries"] == 3  # left partition 0's distinct names
    assert "Recall@2 against exact" in stage.index_markdown(manifest)
    exact = run(left, right, str(tmp_path / "exact"), left_column="name", model=model_dir, top_k=2,
                partition_rows=4)[1]["stats"]["index"]
    assert exact["kind"] == "exact" and exact["recall"] is None
    assert "nothing is missed" in stage.index_markdown({**manifest, "stats": {**manifest["stats"], "index": exact}})


def test_names_with_nul_bytes_are_stripped_and_counted_in_the_report(model_dir, tmp_path):
    pq.write_table(pa.table({"title": pa.array(["ap\x00ple", "plum", "\x00", "kiwi\x00"], pa.string())}),
                   tmp_path / "right.parquet")
    pq.write_table(pa.table({"title": pa.array(["apple", "p\x00lum"], pa.string())}), tmp_path / "left.parquet")
    plan, manifest = run(str(tmp_path / "left.parquet"), str(tmp_path / "right.parquet"), str(tmp_path / "store"),
                         model=model_dir, top_k=1, threshold=0.0)
    assert manifest["stats"]["nul_stripped"] == {"left": 1, "right": 3}
    assert manifest["stats"]["right"]["skipped"] == 1  # "\x00" alone is blank once stripped
    table = {r["count"]: r["value"] for r in stage.counts_table(manifest)}
    assert table["names with NUL bytes stripped (left)"] == 1 and table["names with NUL bytes stripped (right)"] == 3
    names = pq.read_table(stored_parts(plan.out)[0]).to_pydict()
    assert not any("\x00" in n for n in names["left"] + names["right"])
    assert set(names["left"]) == {"apple", "plum"}


def test_labels_choose_the_threshold_and_draw_the_curve(model_dir, tables, tmp_path):
    left, right = tables
    labels = tmp_path / "labels.csv"  # grap is labelled without a partner: its best match counts as wrong
    labels.write_text("left,right\naple,apple\nplum,plum\ncherri,cherry\nkiwi,kiwi\nbanan,banana\nlemon,lemon\n"
                      "grap,\n")
    plan, manifest = run(left, right, str(tmp_path / "store"), left_column="name", model=model_dir,
                         labels=str(labels), precision=0.5)
    t = manifest["stats"]["threshold"]
    assert t["source"] == "labels" and t["precision"] >= 0.5 and (t["labelled"], t["without_partner"]) == (6, 1)
    lo, hi = t["precision_interval"]
    assert lo <= t["precision"] <= hi and t["precision"] == pytest.approx(t["right"] / t["kept"])
    assert t["curve"]["threshold"] and min(r["score"] for r in plan.out.read().to_pylist()) >= t["value"]
    md = stage.threshold_markdown(manifest)
    assert "chosen for precision 0.5" in md and "data:image/png;base64," in md
    assert f"(95% {lo:.3f}-{hi:.3f}" in md and "6 left names labelled with a partner and 1 without" in md
    assert "Warning" not in md and t["warning"] is None
    assert "data:image/png;base64," in stage.histogram_markdown(manifest)


@pytest.mark.parametrize("labels, message", [
    ("left,right\nplum,plum\nplum,\n", "the left name 'plum' has a partner"),
    ("left,right\nplum,plum\npear,\n", "the left name 'pear' is not in"),
    ("left,right\nplum,plum\nkiwi,kiwis\n", "the right name 'kiwis' is not in"),
])
def test_labels_that_cannot_be_judged_fail_before_any_model_loads(tables, tmp_path, labels, message):
    left, right = tables
    (tmp_path / "labels.csv").write_text(labels)
    root = str(tmp_path / "store")
    plan = stage.plan_link(left, right, root, left_column="name", model="no-such-model", labels=str(tmp_path / "labels.csv"))
    stage.start_work(plan)
    lp, rp = stage.split_side(plan, "left"), stage.split_side(plan, "right")
    with pytest.raises(LinkInputError, match=message):
        stage.check_labels(plan, lp, rp)  # the model named does not exist: nothing has tried to load it
    assert stage.check_labels(dataclasses.replace(plan, labels=None), lp, rp) == 0


def test_without_labels_the_scores_are_reported_as_they_are(model_dir, tables, tmp_path):
    from pearl_model.linking.thresholds import NO_LABELS

    left, right = tables
    plan, manifest = run(left, right, str(tmp_path / "store"), left_column="name", model=model_dir)
    assert manifest["stats"]["threshold"]["value"] is None
    assert NO_LABELS in stage.threshold_markdown(manifest)
    c = manifest["stats"]["counts"]
    assert c["below_threshold"] == 0 and manifest["rows"] == c["matched"] == len(LEFT) - 2
    assert len(manifest["stats"]["examples"]) == min(2 * stage.EXAMPLES + 1, c["matched"])


def nothing_committed(root, name="matches"):
    from pathlib import Path

    assert latest_version(root, name) is None
    assert not list(Path(root).glob(f"{name}/*/_manifest.json"))


@pytest.mark.parametrize("make, column, message", [
    (lambda p: p.write_text("title\nAlpha\n"), "name", "has no column 'name'; its columns: 'title'"),
    (lambda p: p.write_text("title\n"), "title", "has no rows"),
    (lambda p: p.write_text("title\n\n \n\"\"\n"), "title", "all 2 names in column 'title' are null or empty"),
    (lambda p: p.write_bytes(b"title\ncaf\xe9\nt\xe9\n"), "title", "not UTF-8 text"),
])
def test_bad_input_fails_before_anything_is_committed(model_dir, tables, tmp_path, make, column, message):
    bad = tmp_path / "bad.csv"
    make(bad)
    root = str(tmp_path / "store")
    with pytest.raises(LinkInputError, match=message):
        run(str(bad), tables[1], root, left_column=column, model=model_dir)
    nothing_committed(root)


def test_missing_inputs_and_bad_parameters_fail_at_the_plan(model_dir, tables, tmp_path):
    left, right = tables
    root = str(tmp_path / "store")
    with pytest.raises(LinkInputError, match="input not found"):
        stage.plan_link(str(tmp_path / "nope.csv"), right, root, model=model_dir)
    with pytest.raises(LinkInputError, match="suffix"):
        stage.plan_link(str(tmp_path / "names.txt"), right, root, model=model_dir)
    with pytest.raises(ValueError, match="not both"):
        stage.plan_link(left, right, root, model=model_dir, threshold=0.5, labels=right)
    with pytest.raises(ValueError, match="dedupe needs threshold"):
        stage.plan_link(left, None, root, model=model_dir, dedupe=True)
    with pytest.raises(ValueError, match="give no right table"):
        stage.plan_link(left, right, root, model=model_dir, dedupe=True, threshold=0.5)
    with pytest.raises(ValueError, match="unknown index kind"):
        stage.plan_link(left, right, root, model=model_dir, index_kind="ivf")
    with pytest.raises(ValueError, match="^index_rows 2 is below partition_rows 3: an index holds whole right "
                                         "partitions$"):
        stage.plan_link(left, right, root, model=model_dir, partition_rows=3, index_rows=2)
    nothing_committed(root)


def test_a_model_that_cannot_be_found_commits_nothing(tables, tmp_path):
    root = str(tmp_path / "store")
    with pytest.raises(stage.LinkModelError, match="cannot load the model"):
        run(*tables, root, left_column="name", model=str(tmp_path / "no-such-model"))
    nothing_committed(root)


def test_a_failure_while_writing_commits_nothing_and_a_rerun_finishes(model_dir, tables, tmp_path, monkeypatch):
    left, right = tables
    root = str(tmp_path / "store")
    real = stage.Dataset.write_part

    def fail_on_part_2(self, index, table, metadata=None):
        if self.name == "matches" and index == 2:
            raise OSError("disk full")
        return real(self, index, table, metadata)

    monkeypatch.setattr(stage.Dataset, "write_part", fail_on_part_2)
    with pytest.raises(OSError, match="disk full"):
        run(left, right, root, left_column="name", model=model_dir, partition_rows=2)
    nothing_committed(root)
    monkeypatch.setattr(stage.Dataset, "write_part", real)
    plan, manifest = run(left, right, root, left_column="name", model=model_dir, partition_rows=2)
    assert latest_version(root, "matches") == plan.out.version and len(manifest["parts"]) == 5


def test_the_version_derives_from_inputs_parameters_and_model(model_dir, tables, tmp_path):
    import os

    left, right = tables
    root = str(tmp_path / "store")
    version = stage.plan_link(left, right, root, left_column="name", model=model_dir).out.version
    assert stage.plan_link(left, right, root, left_column="name", model=model_dir).out.version == version
    assert stage.plan_link(left, right, root, left_column="name", model=model_dir, top_k=2).out.version != version
    assert stage.plan_link(left, right, root, left_column="name", model="minilm").out.version != version
    # index_rows: its default given is the same version; one shard per partition (the run before shards:
    # no index_rows among its parameters) or another size is another version
    plain = stage.plan_link(left, right, root, left_column="name", model=model_dir, index_rows=stage.INDEX_ROWS)
    assert plain.out.version == version and plain.params["index_rows"] == stage.INDEX_ROWS
    per_partition = stage.plan_link(left, right, root, left_column="name", model=model_dir,
                                    index_rows=stage.PARTITION_ROWS)
    assert per_partition.out.version != version and "index_rows" not in per_partition.params
    sharded = stage.plan_link(left, right, root, left_column="name", model=model_dir,
                              index_rows=2 * stage.PARTITION_ROWS)
    assert sharded.out.version not in (version, per_partition.out.version)
    assert sharded.params["index_rows"] == 2 * stage.PARTITION_ROWS
    os.utime(left, (1, 1))  # the left table changed
    plan = stage.plan_link(left, right, root, left_column="name", model=model_dir)
    assert plan.out.version != version
    assert plan.inputs["left"].startswith(left) and json.dumps(plan.params)  # JSON, as manifests hold it


def test_current_falls_back_to_the_default_backbone_as_the_cli_does(tables, tmp_path):
    from pearl_model.inference.backbones import DEFAULT_BACKBONE

    plan = stage.plan_link(*tables, str(tmp_path / "empty"))
    assert plan.model == DEFAULT_BACKBONE and "nothing has been promoted yet" in plan.notes[0]
    assert plan.inputs["model"] == DEFAULT_BACKBONE


def test_the_working_names_schema_is_the_declared_one(model_dir, tables, tmp_path):
    plan = stage.plan_link(*tables, str(tmp_path / "store"), left_column="name", model=model_dir, partition_rows=4)
    parts = stage.split_side(plan, "left")
    assert (parts.parts, parts.rows, parts.skipped) == (3, len(LEFT), 2)
    t = plan.names("left").read_part(2)
    assert t.column("row").to_pylist() == [8] and t.schema.names == ["row", "name"]
    assert plan.names("left").part_metadata(1) == {"rows": 4, "skipped": 1}
    assert MATCHES.names == plan.candidates.schema.names


def test_an_index_shard_holds_its_partitions_distinct_names(model_dir, tables, tmp_path):
    import faiss

    plan = stage.plan_link(*tables, str(tmp_path / "store"), left_column="name", model=model_dir, partition_rows=2,
                           index_rows=5, batch_size=1)  # 3 partitions a shard: rows 0-5, then 6-10
    stage.start_work(plan)
    rp = stage.split_side(plan, "right")
    assert (rp.parts, plan.parts_per_shard, plan.shards(rp.parts)) == (6, 3, 2)
    assert [list(plan.shard_parts(s, rp.parts)) for s in range(2)] == [[0, 1, 2], [3, 4, 5]]
    # apple (rows 0 and 5) once in shard 0; plum (rows 4 and 9) once in each shard: each partition
    # encodes the names its shard has not seen before it
    assert [stage.encode_part(plan, "right", j, rp) for j in range(rp.parts)] == [2, 1, 1, 1, 2, 1]
    assert [stage.index_right(plan, s, rp)["names"] for s in range(2)] == [4, 4]
    shard, index = stage._right(plan, 1, rp)
    assert shard.distinct == ["grape", "kiwi", "plum", "lemon"] and index.ntotal == 4
    assert shard.side.rows.tolist() == [7, 8, 9, 10] and shard.side.total == 5
    # the index alone is kept: its vectors are in it, none beside it
    names = sorted(p.rsplit("/", 1)[-1] for p in plan.out.fs.ls(f"{plan.work_path}/index"))
    assert names == ["part-00000.faiss", "part-00001.faiss"]
    assert isinstance(index, faiss.IndexFlatIP) and shard.vectors is None
    assert not plan.out.fs.exists(f"{plan.work_path}/vectors/right") or not plan.out.fs.ls(f"{plan.work_path}/vectors/right")
    # the index's vectors are the shard's names encoded together, in the shard's order
    whole_shard = stage.load_model(model_dir).encode(shard.distinct, batch_size=1)
    np.testing.assert_allclose(vector_index.stored_vectors(index), whole_shard, atol=1e-5)


# --- efSearch: given, or tuned to a recall target --------------------------------------------------
def test_a_recall_target_tunes_efsearch_and_the_results_stay_the_unpartitioned_top_k(model_dir, tables, tmp_path):
    left, right = tables
    plan, manifest = run(left, right, str(tmp_path / "store"), left_column="name", model=model_dir, top_k=3,
                         partition_rows=2, index_rows=4, index_kind="hnsw", recall_target=0.95, recall_sample=5)
    index = manifest["stats"]["index"]
    assert index["kind"] == "hnsw" and index["recall_target"] == 0.95 and index["target_met"] is True
    assert [t["shard"] for t in index["tuning"]] == [0, 1, 2]  # every shard tuned
    assert all(t["recall"] >= 0.95 for t in index["tuning"])
    assert index["ef_search"] == max(t["ef_search"] for t in index["tuning"])
    assert manifest["params"]["recall_target"] == 0.95 and manifest["params"]["recall_sample"] == 5
    assert "chosen for recall@3 >= 0.95" in stage.index_markdown(manifest)
    # a few names a shard: HNSW finds them all, so the rows are the exact unpartitioned top k
    _, expected = whole(model_dir, LEFT, RIGHT, 3)
    assert rows_of(plan.out.read()) == rows_of(expected)


@pytest.mark.parametrize("index_rows", [None, 6])
def test_dedupe_tuning_and_recall_leave_out_each_names_own_entry(model_dir, tables, tmp_path, monkeypatch, index_rows):
    """Issue 64 item 12: in a dedupe run a name is in the index it queries; the tuning and the check
    are told its own id in each shard (-1 where the shard lacks it), so they measure the others."""
    from pearl_model.linking import index as vector_index

    seen = []
    for name in ("tune_ef_search", "recall_against_exact"):
        real = getattr(vector_index, name)

        def spy(*args, real=real, name=name, **kw):
            seen.append((name, args, kw.get("self_ids", args[6] if name == "tune_ef_search" and len(args) > 6
                                             else args[4] if name == "recall_against_exact" and len(args) > 4 else None)))
            return real(*args, **kw)
        monkeypatch.setattr(vector_index, name, spy)
    _, right = tables
    _, manifest = run(right, None, str(tmp_path / "store"), model=model_dir, top_k=1, threshold=0.95, dedupe=True,
                      partition_rows=3, index_rows=index_rows, index_kind="hnsw", recall_target=0.95, recall_sample=20)
    assert {name for name, _, _ in seen} == {"tune_ef_search", "recall_against_exact"}
    for name, args, self_ids in seen:
        index, queries = (args[0], args[1]) if name == "tune_ef_search" else (args[3], args[1])
        stored = vector_index.stored_vectors(index)
        best = (queries @ stored.T).max(axis=1)
        assert self_ids is not None and len(self_ids) == len(queries)
        for q, own, top in zip(queries, self_ids, best):
            if own >= 0:  # its own entry: the query's vector
                np.testing.assert_allclose(stored[own], q, atol=1e-5)
            else:  # not in this shard: no entry is it
                assert top < 1 - 1e-4
    assert manifest["stats"]["index"]["target_met"] is True


def test_an_unreachable_recall_target_searches_at_the_cap_and_reports_it(model_dir, tables, tmp_path, monkeypatch):
    from pearl_model.linking import index as vector_index

    steps = stage.EF_SEARCH_STEPS
    # every shard's tuning falls short: the recall it reaches at each efSearch tried
    monkeypatch.setattr(vector_index, "tune_ef_search",
                        lambda index, queries, k, target, steps=steps, candidates=None, self_ids=None:
                        [(ef, 0.5 + i / 100) for i, ef in enumerate(steps)])
    used = []
    real = vector_index.set_ef_search
    monkeypatch.setattr(vector_index, "set_ef_search", lambda index, ef: (used.append(ef), real(index, ef)))
    left, right = tables
    _, manifest = run(left, right, str(tmp_path / "store"), left_column="name", model=model_dir, top_k=1,
                      partition_rows=4, index_rows=4, index_kind="hnsw", recall_target=0.99)
    index = manifest["stats"]["index"]
    cap = steps[-1]
    assert index["target_met"] is False and index["ef_search"] == cap
    assert [t["ef_search"] for t in index["tuning"]] == [cap] * 3
    assert used[-9:] == [cap] * 9  # the queries (3 left partitions x 3 shards) searched at the cap
    md = stage.index_markdown(manifest)
    assert "Recall target 0.99 not reached" in md and f"at efSearch {cap}, the most tried" in md
    assert manifest["rows"] == len(LEFT) - 2  # the run still commits its matches


def test_ef_search_is_used_as_given_and_an_exact_index_ignores_it(model_dir, tables, tmp_path):
    left, right = tables
    _, manifest = run(left, right, str(tmp_path / "hnsw"), left_column="name", model=model_dir, partition_rows=4,
                      index_kind="hnsw", ef_search=40)
    index = manifest["stats"]["index"]
    assert index["ef_search"] == 40 and "tuning" not in index and "efSearch 40." in stage.index_markdown(manifest)
    _, manifest = run(left, right, str(tmp_path / "exact"), left_column="name", model=model_dir, partition_rows=4,
                      recall_target=0.99)  # auto: exact for these few names
    assert manifest["stats"]["index"]["ef_search"] is None and "tuning" not in manifest["stats"]["index"]


def test_efsearch_and_the_recall_target_version_the_output_only_when_they_can_change_it(model_dir, tables, tmp_path):
    left, right = tables
    root = str(tmp_path / "store")

    def version(**kw):
        plan = stage.plan_link(left, right, root, left_column="name", model=model_dir, **kw)
        return plan.out.version, plan.params

    base, params = version()  # the default: efSearch tuned to RECALL_TARGET on RECALL_SAMPLE names
    assert (params["recall_target"], params["recall_sample"]) == (stage.RECALL_TARGET, stage.RECALL_SAMPLE)
    assert "ef_search" not in params and version(recall_target=stage.RECALL_TARGET) == (base, params)
    fixed, p128 = version(ef_search=stage.HNSW_EF_SEARCH)  # a fixed efSearch: the run before recall targets
    assert fixed != base and "ef_search" not in p128 and "recall_target" not in p128
    v, p = version(ef_search=64)
    assert v not in (base, fixed) and p["ef_search"] == 64 and "recall_target" not in p
    v2, p2 = version(recall_target=0.9)
    assert v2 not in (base, fixed, v) and (p2["recall_target"], p2["recall_sample"]) == (0.9, stage.RECALL_SAMPLE)
    assert version(recall_sample=10)[0] != base  # the sample tunes it
    untuned, p0 = version(recall_sample=0)  # nothing to measure on: efSearch 128, as a fixed one
    assert (untuned, p0) == (fixed, p128)
    exact, _ = version(index_kind="exact")
    assert version(index_kind="exact", ef_search=64)[0] == exact == version(index_kind="exact", recall_target=0.9)[0]
    with pytest.raises(ValueError, match="give ef_search or recall_target, not both"):
        version(ef_search=64, recall_target=0.9)
    for bad in ({"recall_target": 0.0}, {"recall_target": 1.5}, {"recall_target": 0.9, "recall_sample": 0}):
        with pytest.raises(ValueError, match="recall_target .* needs to be in"):
            version(**bad)
    with pytest.raises(ValueError, match="ef_search 0 is below 1"):
        version(ef_search=0)


def test_the_tuning_sample_is_seeded_over_the_whole_left_side(model_dir, tables, tmp_path):
    left, right = tables
    plan = stage.plan_link(left, right, str(tmp_path / "store"), left_column="name", model=model_dir,
                           partition_rows=2, index_kind="hnsw", recall_target=0.9, recall_sample=6)
    stage.start_work(plan)
    lp, rp = stage.split_side(plan, "left"), stage.split_side(plan, "right")
    sample = stage.tuning_sample(plan, lp, rp)
    assert sample == stage.tuning_sample(plan, lp, rp)  # every index task tunes on the same names
    assert 0 < len(sample) <= 6 and len(set(sample)) == len(sample) and set(sample) <= set(LEFT) - {None, ""}
    everything = stage.tuning_sample(dataclasses.replace(plan, recall_sample=100), lp, rp)
    assert sorted(everything) == sorted(n for n in LEFT if n)  # every partition's names are drawn from
    assert stage.tuning_sample(dataclasses.replace(plan, recall_target=None), lp, rp) == []
    assert stage.tuning_sample(dataclasses.replace(plan, index_kind="exact"), lp, rp) == []


# --- what a link run keeps between its tasks is read back as written (issue 64, defect 5) ----------------
@pytest.mark.parametrize("damage", ["flip", "truncate", "swap", "unrecorded"])
def test_a_damaged_index_shard_or_vectors_file_is_refused_in_one_line(model_dir, tables, tmp_path, damage):
    """An index shard with a byte flipped or cut, or the other shard in its place, silently changed
    search results or raised faiss's C++ text (on the old main); each file a link run keeps between its
    tasks has its writer's record, and a read is checked against it."""
    from storage.verified import RECORDS, Damaged

    plan = stage.plan_link(*tables, str(tmp_path / "store"), left_column="name", model=model_dir, partition_rows=2,
                           index_rows=5, batch_size=1)
    stage.start_work(plan)
    rp = stage.split_side(plan, "right")
    stage.split_side(plan, "left")
    for j in range(rp.parts):
        stage.encode_part(plan, "right", j, rp)
    left_vectors = stage.encode_part(plan, "left", 0, rp)
    [stage.index_right(plan, s, rp) for s in range(2)]
    fs, shard = plan.out.fs, f"{plan.work_path}/{plan.index_name(0)}"
    data = fs.cat_file(shard)
    changed = {"flip": data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 4]) + data[len(data) // 2 + 1:],
               "truncate": data[:-16], "swap": fs.cat_file(f"{plan.work_path}/{plan.index_name(1)}"),
               "unrecorded": data}[damage]
    fs.pipe_file(shard, changed)
    if damage == "unrecorded":
        fs.rm(f"{plan.work_path}/{RECORDS}/{plan.index_name(0)}.json")
    with pytest.raises(Damaged, match=r"index/part-00000\.faiss") as e:
        stage._right(plan, 0, rp)
    assert "\n" not in str(e.value)
    if left_vectors:  # a vectors file the same way
        name = f"{plan.work_path}/{plan.vectors_name('left', 0)}"
        fs.pipe_file(name, fs.cat_file(name)[:-1])
        with pytest.raises(Damaged, match=r"vectors/left/part-00000\.npy"):
            stage._vectors(plan, "left", 0)
