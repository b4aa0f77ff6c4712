"""The whole pipeline with its storage root in a bucket of moto's S3 server (tests/s3_stack.py, issue 67
item 3): `retrain` builds the corpus (build-corpus, on a `dask scheduler` and a `dask worker` process
that reach the server as this process does: through the environment), trains a tiny random-weight
backbone two steps (the same backbone filters the positives and negatives: no E5 to load), evaluates it
and promotes it through the registry under the bucket; the `link` flow matches two s3:// tables with the
current model; the `pearl` commands a user points at the bucket list the model, encode with its export
and link s3:// tables; a rerun with nothing changed recomputes nothing; a build of the next month's dump
(test_incremental_corpus's DUMP_N1: pages edited, moved, removed, added) reuses on the bucket what the same
incremental build reuses on local disk, and writes the same datasets.

One server, one bucket, one Prefect test harness and one build for the module; the disk twin of the
incremental build runs in this process (the wiring with the task bodies: no Prefect, no cluster)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from storage.registry import ModelRegistry  # noqa: E402
from tasks.evaluation import default_benchmark_dir  # noqa: E402
from tests.s3_stack import subprocess_env  # noqa: E402
from tests.test_incremental_corpus import (  # noqa: E402
    DATE_N, DATE_N1, DUMP_N, DUMP_N1, PAGE_COUNTS, POSITIVES, WORD_VECTORS, InProcess, dump_name, write_dump,
)
from tests.test_train_flow import tiny_backbone, tiny_training  # noqa: E402,F401  (the module's tiny random BERT)

BENCH = default_benchmark_dir()
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600),
              pytest.mark.skipif(BENCH is None, reason="the gate needs the PEARL benchmark files")]

# one part, chunk and bucket per stage: the flow's wiring on S3 without the test paying per-task overheads
CORPUS = {"pages_per_partition": 16, "alias_buckets": 1, "sentences_per_chunk": 64, "phrase_buckets": 1,
          "negative_buckets": 1, **WORD_VECTORS, **POSITIVES}
LEFT = ["north lake", "old market", "red car", "the river bridge"]
RIGHT = ["North Lake", "the old market", "a red car", "river bridge", "blue sky"]


@pytest.fixture(scope="module")
def bucket(s3_server):
    return f"s3://{s3_server.bucket()}"


@pytest.fixture(scope="module")
def dask_address(s3_server, tmp_path_factory):
    """One `dask scheduler` and one `dask worker` process for every flow of the module (started and
    stopped by pid): the workers reach the S3 server through the environment, as this process does."""
    from tests.cluster_stack import DaskCluster

    tmp = tmp_path_factory.mktemp("dask")
    cluster = DaskCluster(tmp, tmp, subprocess_env(), n_workers=1)
    try:
        cluster.start()
        yield cluster.address
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def retrained(bucket, harness, dask_address, tiny_backbone, tmp_path_factory):  # noqa: F811  (the imported fixture)
    """The first retrain on the bucket's root: nothing is current, so its model is promoted."""
    from flows.retrain import retrain

    root = f"{bucket}/pearl"
    dump = write_dump(tmp_path_factory.mktemp("dump") / dump_name(DATE_N), DUMP_N)
    kw = dict(source=dump, storage_root=root, corpus={**CORPUS, "negative_backbone": tiny_backbone},
              training=tiny_training(tiny_backbone),
              benchmark_datasets=["turney"], benchmark_dir=str(BENCH), eval_seeds=[0, 1], dask_address=dask_address)
    assert ModelRegistry(root).current_version() is None
    return {"root": root, "kw": kw, "result": retrain(**kw)}


def test_retrain_on_s3_builds_trains_evaluates_and_promotes(retrained):
    root, result = retrained["root"], retrained["result"]
    assert result["outcome"] == "promoted" and result["current_before"] is None
    reg = ModelRegistry(root)
    assert reg.current_version() == result["model"]
    entry = reg.entry(result["model"])
    assert entry["training"]["steps"] == 2 and entry["decision"]["outcome"] == "promoted"
    assert set(entry["benchmark"]["scores"]) == {"turney"}


def manifests(root: str) -> dict[str, bytes]:
    """Every committed manifest under the root, by key: what a rerun that recomputes nothing leaves as it was."""
    from storage.stores import store

    fs, base = store(root)
    return {p: fs.cat_file(p) for p in fs.find(base) if p.endswith("/_manifest.json")}


@pytest.fixture(scope="module")
def rerun(retrained):
    """The retrain again on the same dump, and the root's manifests before and after it (a fixture, so that
    it runs before the changed dump's build, which commits new versions, whichever tests are selected)."""
    from flows.retrain import retrain

    before = manifests(retrained["root"])
    again = retrain(**retrained["kw"])
    return {"before": before, "result": again, "after": manifests(retrained["root"])}


def test_a_rerun_with_nothing_changed_recomputes_nothing(retrained, rerun):
    first, again = retrained["result"], rerun["result"]
    assert again["corpus"] == first["corpus"] and again["model"] == first["model"]
    assert again["outcome"] == "unchanged" and again["evaluation"] is None
    assert rerun["after"] == rerun["before"]  # no dataset, model or store committed again


def corpus_args(source: str, root: str, retrained: dict) -> dict:
    """What build_corpus hands corpus_wiring for retrain's corpus settings (benchmarks/stage_rates.py's binding)."""
    from benchmarks.stage_rates import wiring_args

    return wiring_args(source, root, 1, retrained["kw"]["corpus"])


@pytest.fixture(scope="module")
def changed_dump(tmp_path_factory) -> str:
    """Next month's dump, as the incremental tests on disk change it."""
    return write_dump(tmp_path_factory.mktemp("dump-n1") / dump_name(DATE_N1), DUMP_N1)


@pytest.fixture(scope="module")
def incremental_on_s3(retrained, rerun, changed_dump, dask_address):
    """build-corpus of the changed dump on the bucket's root, after the module's build of dump N."""
    from flows.build_corpus import build_corpus

    return build_corpus(**corpus_args(changed_dump, retrained["root"], retrained), dask_address=dask_address)


@pytest.fixture(scope="module")
def incremental_on_disk(retrained, changed_dump, tmp_path_factory):
    """The same two builds (dump N, then the changed dump) on local disk, the wiring's task bodies in this process."""
    from flows.build_corpus import corpus_wiring

    root = str(tmp_path_factory.mktemp("disk") / "store")
    first = corpus_wiring(InProcess(), **corpus_args(retrained["kw"]["source"], root, retrained))
    assert first["versions"] == retrained["result"]["corpus"]  # the twin of the bucket's first build
    return root, corpus_wiring(InProcess(), **corpus_args(changed_dump, root, retrained))


def reuse_counts(root: str, stores: dict[str, list[str]]) -> dict[str, dict]:
    """Each reuse store's counts (what the corpus-reuse artifact reads), its measured CPU seconds left out."""
    from storage.reuse import PART_TIMES
    from tasks.reuse_report import store_stats

    return {stage: {k: v for k, v in store_stats(root, name, version).items() if k not in PART_TIMES}
            for stage, (name, version) in stores.items()}


def test_an_incremental_build_on_a_changed_dump_reuses_as_it_does_on_disk(retrained, incremental_on_s3,
                                                                            incremental_on_disk):
    from storage.contents import dataset_contents

    root, built = retrained["root"], incremental_on_s3
    disk_root, on_disk = incremental_on_disk
    assert set(built["reuse_stores"]) == {"pages", "phrase_occurrences", "phrase_types", "augmentations",
                                          "phrase_embeddings"}
    counts = reuse_counts(root, built["reuse_stores"])
    for stage, c in counts.items():  # reused what it could, from the module's first build
        assert c["reused"] > 0 and c["reused"] + c["computed"] == c["keyed"] and c["refused"] == 0, stage
        assert c["previous"] is not None and c["previous_refused"] is None, stage
    assert {k: counts["pages"][k] for k in PAGE_COUNTS} == PAGE_COUNTS  # the disk tests' page counts
    assert counts == reuse_counts(disk_root, on_disk["reuse_stores"])
    assert built["versions"] == on_disk["versions"] != retrained["result"]["corpus"]
    assert dataset_contents(root, built["versions"]) == dataset_contents(disk_root, on_disk["versions"])


@pytest.fixture(scope="module")
def tables(bucket):
    """Two small tables of names in the bucket, as a user hands them to `link`."""
    from storage.stores import store

    fs, _ = store(bucket)
    left, right = f"{bucket}/tables/left.parquet", f"{bucket}/tables/right.csv"
    with fs.open(left, "wb") as f:
        pq.write_table(pa.table({"title": LEFT}), f)
    fs.pipe(right, ("title\n" + "\n".join(RIGHT) + "\n").encode())
    return left, right


def test_the_link_flow_matches_s3_tables_with_the_current_model(retrained, tables, dask_address):
    from flows.link import link
    from storage.datasets import Dataset
    from storage.schemas import MATCHES

    root = retrained["root"]
    out = link(left=tables[0], right=tables[1], storage_root=root, model="current", dask_address=dask_address)
    matches = Dataset(root, "matches", out["version"], MATCHES).read()
    assert matches.num_rows == len(LEFT) and sorted(matches["left_row"].to_pylist()) == list(range(len(LEFT)))
    assert set(matches["right"].to_pylist()) <= set(RIGHT)


def test_the_pearl_commands_use_the_model_under_the_bucket(retrained, bucket, tables, tmp_path):
    from typer.testing import CliRunner

    from pearl_cli.main import app
    from storage.stores import store

    root, version = retrained["root"], retrained["result"]["model"]
    runner = CliRunner()
    listing = runner.invoke(app, ["models", "list", "--storage-root", root])
    assert listing.exit_code == 0, listing.output
    assert version in listing.output

    export = ModelRegistry(root).model(version).url  # the export as it lies in the bucket
    out = tmp_path / "v.npy"
    encoded = runner.invoke(app, ["encode", "red car", "north lake", "--model", export, "--out", str(out)])
    assert encoded.exit_code == 0, encoded.output
    v = np.load(out)
    assert v.shape[0] == 2 and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)

    matches = f"{bucket}/tables/matches.parquet"
    linked = runner.invoke(app, ["link", *tables, "--out", matches, "--storage-root", root])  # --model current
    assert linked.exit_code == 0, linked.output
    assert f"model: current = {version}" in linked.output
    fs, _ = store(bucket)
    with fs.open(matches, "rb") as f:
        table = pq.read_table(f)
    assert table.num_rows == len(LEFT) and set(table["right"].to_pylist()) <= set(RIGHT)
