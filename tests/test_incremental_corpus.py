"""Incremental corpus builds (issue 57): a build of dump N+1 that starts from dump N's outputs
gives the same rows as a build of N+1 from scratch, reusing the per-page and per-sentence work of
what did not change, with counts that add up; a changed code version recomputes its stage; a
build killed midway and rerun gives the same datasets.

The stages run as the flow wires them (raw_pages_stage, pages_stage, occurrences_stage,
phrases_stage, phrase_types_stage), their Prefect task bodies called in this process."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from prefect import unmapped
from prefect.logging import disable_run_logger

from flows.corpus_config import PagesConfig, PhrasesConfig, ReadConfig
from runs.steps import Steps
from storage.datasets import Dataset, latest_version
from storage.schemas import REUSE_ENTRIES
from tests.conftest import mediawiki_dump, page_xml
from storage.contents import dataset_contents

# Each article has sentences of its own and some shared with another, so phrases repeat across pages.
SHARED = "The river flows through the old town near the bridge."
TEXTS = {
    "Alpha": f"'''Alpha''' is a town in the north of the country. {SHARED} The town has a large market square.",
    "Beta": "Beta is a village by the lake. The village has an old church. The lake is deep and cold.",
    "Gamma": f"Gamma is a small island in the sea. {SHARED} The island has a lighthouse on the hill.",
    "Delta": "Delta is a river port. The port ships grain to the south. The old town near the bridge is quiet.",
    "Epsilon": "Epsilon is a mountain in the range. The mountain has snow in winter. Climbers reach the top in summer.",
    "Eta": "Eta is a city on the coast. The city has a large market square. The coast is rocky and steep.",
    "Theta": "Theta is a castle on the hill. The castle has a lighthouse on the hill. It was built long ago.",
}
EDITED_BETA = "Beta is a village by the lake. The village has a new school. The lake is deep and cold."
ZETA = "Zeta is a forest in the valley. The forest has old oak trees. Deer live in the forest."
IOTA = f"Iota is a bay on the coast. {SHARED} The bay has a large market square."

# (page id, title, text, redirect target)
DUMP_N = [(1, "Alpha", TEXTS["Alpha"], None), (2, "Beta", TEXTS["Beta"], None), (3, "Gamma", TEXTS["Gamma"], None),
          (4, "Delta", TEXTS["Delta"], None), (5, "Epsilon", TEXTS["Epsilon"], None), (6, "Al", "#REDIRECT [[Alpha]]",
                                                                                       "Alpha"),
          (7, "Eta", TEXTS["Eta"], None), (8, "Theta", TEXTS["Theta"], None)]
DUMP_N1 = [(1, "Alpha", TEXTS["Alpha"], None),  # unchanged
           (2, "Beta", EDITED_BETA, None),  # edited
           # 3 Gamma removed
           (40, "Delta", TEXTS["Delta"], None),  # moved to another id
           (5, "Zeta", ZETA, None),  # the id reused for other text
           (6, "Al", "#REDIRECT [[Alpha]]", "Alpha"),  # unchanged
           (7, "Eta", TEXTS["Eta"], None), (7, "Eta", TEXTS["Eta"], None),  # present twice
           (8, "Theta", TEXTS["Theta"], None),  # unchanged
           (9, "Iota", IOTA, None)]  # new
# what page_extracts counts for N+1 after N (the second Eta is quarantined as a repeated id, not keyed)
PAGE_COUNTS = {"keyed": 8, "unchanged": 4, "moved": 1, "edited": 2, "new": 1, "not_keyed": 1,
               "store_entries": 8, "still_read": 6, "moved_away": 1, "removed": 1, "reused": 5, "computed": 3,
               "refused": 0}
PAGE_DATASETS = ("pages", "sentences", "alias_mentions", "quarantine")
PHRASE_DATASETS = ("phrase_occurrences", "phrase_mining_stats", "pmi_word_counts", "untyped_phrases", "phrases")


class InProcess(Steps):
    """The wiring's steps with each Prefect task's body called here, in order (no run, no API)."""

    def call(self, task, *args):
        with disable_run_logger():
            return task.fn(*args)

    submit = call

    def map(self, task, *args) -> list:
        n = next(len(list(a)) for a in args if not isinstance(a, unmapped))
        items = [a.value if isinstance(a, unmapped) else list(a) for a in args]
        return [self.call(task, *(v if isinstance(a, unmapped) else v[i] for a, v in zip(args, items)))
                for i in range(n)]


STEPS = InProcess()


def write_dump(path: Path, pages) -> str:
    path.write_bytes(mediawiki_dump(*(page_xml(i, t, x, redirect=r) for i, t, x, r in pages)))
    return str(path)


def build(source: str, root: str) -> dict:
    """raw_pages -> pages -> phrase_occurrences -> phrases (typed from examples), as corpus_wiring
    runs them, with small parts and chunks so that pages and sentences move between them."""
    from tasks.pages import pages_stage
    from tasks.phrase_occurrences import occurrences_stage
    from tasks.phrase_types import phrase_types_stage
    from tasks.phrases import phrases_stage
    from tasks.raw_pages import raw_pages_stage

    read, phrases = ReadConfig(pages_per_partition=3, multistream_index=None), PhrasesConfig(
        sentences_per_chunk=4, phrase_buckets=2)
    raw, _ = raw_pages_stage(source, root, read.params(), None, steps=STEPS)
    text, _ = pages_stage(raw, PagesConfig().params(2), steps=STEPS)
    mined = occurrences_stage(text.sentences, phrases.mining_params(2), steps=STEPS)
    untyped, _ = phrases_stage(mined.occurrences, mined.word_counts, phrases.reduce_params(), 2, steps=STEPS)
    typed, _ = phrase_types_stage(untyped, text.sentences, phrases.mining_params(2), 2, steps=STEPS)
    versions = {d.name: d.version for d in (*text.all(), *mined.datasets(), untyped, typed)}
    return {"versions": versions, "page_store": text.reuse, "sentence_store": mined.reuse}


def contents(root: str, built: dict) -> dict:
    return dataset_contents(Path(root), built["versions"])


def store_stats(store) -> dict:
    return store.entries.manifest()["stats"]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    d = tmp_path_factory.mktemp("dumps")
    return write_dump(d / "n.xml", DUMP_N), write_dump(d / "n1.xml", DUMP_N1)


@pytest.fixture(scope="module")
def scratch(dumps, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("scratch") / "store")
    built = build(dumps[1], root)
    return root, built, contents(root, built)


@pytest.fixture(scope="module")
def incremental(dumps, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("incremental") / "store")
    first = build(dumps[0], root)
    second = build(dumps[1], root)
    return root, first, second


def test_an_incremental_build_has_the_rows_of_a_build_from_scratch(scratch, incremental):
    _, _, from_scratch = scratch
    root, _, second = incremental
    assert set(from_scratch) == set(PAGE_DATASETS + PHRASE_DATASETS)
    assert contents(root, second) == from_scratch
    assert from_scratch["phrases"]["rows"] > 0 and from_scratch["quarantine"]["rows"] == 1  # the repeated id


def test_the_page_reuse_counts_say_what_changed_and_add_up(incremental):
    _, first, second = incremental
    assert store_stats(first["page_store"])["new"] == store_stats(first["page_store"])["keyed"] == len(DUMP_N)
    stats = store_stats(second["page_store"])
    assert {k: stats[k] for k in PAGE_COUNTS} == PAGE_COUNTS
    assert stats["previous"] == first["page_store"].entries.version and stats["previous_refused"] is None
    assert stats["keyed"] + stats["not_keyed"] == len(DUMP_N1)
    # removed pages drop out: the store N+1 wrote holds what N+1 read, Gamma's entry no more
    assert second["page_store"].entries.manifest()["rows"] == stats["keyed"]


def test_the_sentence_reuse_counts_add_up_and_reuse_the_unchanged(incremental, scratch):
    _, first, second = incremental
    stats = store_stats(second["sentence_store"])
    sentences = scratch[2]["sentences"]["rows"]
    assert stats["keyed"] == sentences
    assert stats["unchanged"] + stats["moved"] + stats["edited"] + stats["new"] == stats["keyed"]
    assert stats["still_read"] + stats["moved_away"] + stats["removed"] == stats["store_entries"] == \
        store_stats(first["sentence_store"])["keyed"]
    assert stats["reused"] + stats["computed"] == stats["keyed"] and stats["refused"] == 0
    assert stats["reused"] == stats["unchanged"] + stats["moved"]
    # three sentences each: Alpha, Eta, Theta unchanged, Beta two of three (one edited); Delta's moved
    # (sentence ids are page_id * 10^6 + i), and Iota's shared sentence is Alpha's: moved, reused;
    # Zeta's three are edits of Epsilon's ids; Iota's other two are new
    assert {k: stats[k] for k in ("unchanged", "moved", "edited", "new")} == \
        {"unchanged": 3 + 2 + 3 + 3, "moved": 3 + 1, "edited": 1 + 3, "new": 2}


def test_a_changed_code_version_recomputes_its_stage_and_the_rows_stay(dumps, scratch, tmp_path, monkeypatch):
    import tasks.pages as pages_stage
    import tasks.phrase_occurrences as occ_stage

    root = str(tmp_path / "store")
    build(dumps[0], root)
    monkeypatch.setattr(pages_stage, "CODE_VERSION", "pages-next")
    monkeypatch.setattr(occ_stage, "CODE_VERSION", "phrase-occurrences-next")
    second = build(dumps[1], root)
    for store in (second["page_store"], second["sentence_store"]):
        stats = store_stats(store)
        assert stats["reused"] == 0 and stats["computed"] == stats["keyed"] > 0
        assert stats["previous"] is None and "another code version" in stats["previous_refused"]
    assert contents(root, second) == scratch[2]
    assert second["versions"] != scratch[1]["versions"]  # other code, other versions


def test_a_build_killed_midway_and_rerun_has_the_same_rows(dumps, scratch, tmp_path, monkeypatch):
    import tasks.pages as pages_stage
    import tasks.phrase_occurrences as occ_stage

    root = str(tmp_path / "store")
    build(dumps[0], root)
    real_page, real_mine = pages_stage.extract_page, occ_stage.mine_sentences

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(pages_stage, "extract_page", lambda r, *a: killed() if r["title"] == "Iota" else
                        real_page(r, *a))
    with pytest.raises(KeyboardInterrupt):
        build(dumps[1], root)
    monkeypatch.setattr(pages_stage, "extract_page", real_page)
    monkeypatch.setattr(occ_stage, "mine_sentences", lambda texts, *a, **k: killed() if any(
        "forest" in t for t in texts) else real_mine(texts, *a, **k))
    with pytest.raises(KeyboardInterrupt):
        build(dumps[1], root)
    monkeypatch.setattr(occ_stage, "mine_sentences", real_mine)
    second = build(dumps[1], root)
    assert contents(root, second) == scratch[2]
    assert second["page_store"] is None  # the pages were committed by the second attempt
    stats = Dataset(root, "page_extracts", latest_version(root, "page_extracts"), REUSE_ENTRIES).manifest()["stats"]
    assert {k: stats[k] for k in ("keyed", "unchanged", "moved", "edited", "new")} == \
        {k: PAGE_COUNTS[k] for k in ("keyed", "unchanged", "moved", "edited", "new")}
    assert stats["reused"] + stats["computed"] == stats["keyed"]


def test_a_rebuild_of_the_same_dump_reuses_the_committed_versions(dumps, incremental):
    root, _, second = incremental
    mtimes = {p: p.stat().st_mtime_ns for p in Path(root).rglob("part-*.parquet")}
    again = build(dumps[1], root)
    assert again["versions"] == second["versions"]
    assert again["page_store"] is None and again["sentence_store"] is None  # nothing to do
    assert {p: p.stat().st_mtime_ns for p in Path(root).rglob("part-*.parquet")} == mtimes


def test_an_older_dump_after_a_newer_one_reuses_by_content_too(dumps, scratch, tmp_path):
    """A dump older than the store it finds: content keys have no direction, so N after N+1 reuses
    what the two share and gives N's rows from scratch."""
    root, older = str(tmp_path / "store"), str(tmp_path / "scratch-n")
    build(dumps[1], root)
    back = build(dumps[0], root)
    assert contents(root, back) == contents(older, build(dumps[0], older))
    stats = store_stats(back["page_store"])
    assert stats["unchanged"] + stats["moved"] == stats["reused"] > 0


def test_a_store_whose_manifest_is_not_this_identity_is_refused_and_counted(dumps, scratch, tmp_path):
    root = str(tmp_path / "store")
    first = build(dumps[0], root)
    store = first["page_store"].entries
    manifest = json.loads(store.fs.cat(f"{store.path}/_manifest.json"))
    manifest["params"]["min_sentence_words"] = 1  # a store of other parameters under this name
    store.fs.pipe(f"{store.path}/_manifest.json", json.dumps(manifest).encode())
    second = build(dumps[1], root)
    stats = store_stats(second["page_store"])
    assert stats["reused"] == 0 and "another code version or other parameters" in stats["previous_refused"]
    assert contents(root, second) == scratch[2]
    assert latest_version(root, "page_extracts") == second["page_store"].entries.version
    assert Dataset(root, "page_extracts", second["page_store"].entries.version, REUSE_ENTRIES).read().num_rows == 8


class _PastMining(Exception):
    pass


def test_the_flow_on_dask_reuses_across_workers(dumps, scratch, tmp_path, monkeypatch):
    """build_corpus itself (Prefect, a local Dask cluster of two worker processes) on dump N, then
    N+1, stopped after phrase_occurrences: the workers read and write the stores, the rows are
    those of the build from scratch, and each run says what its stages reused (artifacts)."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort
    from prefect.testing.utilities import prefect_test_harness

    import flows.build_corpus as build

    def stop(*args, **kwargs):
        raise _PastMining

    monkeypatch.setattr(build, "phrases_stage", stop)
    root = str(tmp_path / "store")
    settings = dict(storage_root=root, read={"pages_per_partition": 3}, pages={"alias_buckets": 2},
                    phrases={"sentences_per_chunk": 4, "phrase_buckets": 2}, dask_workers=2)
    async def reuse_artifacts():
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["page-reuse", "sentence-reuse"])), sort=ArtifactSort.CREATED_DESC)

    with prefect_test_harness(server_startup_timeout=120):
        for dump in dumps:
            with pytest.raises(_PastMining):
                build.build_corpus(source=dump, **settings)
        artifacts = asyncio.run(reuse_artifacts())
    names = [*PAGE_DATASETS, "phrase_occurrences", "phrase_mining_stats", "pmi_word_counts"]
    versions = {name: latest_version(root, name) for name in names}
    assert versions == {name: scratch[1]["versions"][name] for name in names}  # the same settings and input
    assert dataset_contents(Path(root), versions) == {name: scratch[2][name] for name in names}
    stats = Dataset(root, "page_extracts", latest_version(root, "page_extracts"), REUSE_ENTRIES).manifest()["stats"]
    assert {k: stats[k] for k in PAGE_COUNTS} == PAGE_COUNTS
    mining = Dataset(root, "sentence_mining", latest_version(root, "sentence_mining"), REUSE_ENTRIES).manifest()["stats"]
    assert mining["reused"] == mining["unchanged"] + mining["moved"] > 0
    newest = {}
    for a in artifacts:  # newest first: the build of N+1
        newest.setdefault(a.key, a)
    for key, expected in (("page-reuse", stats), ("sentence-reuse", mining)):
        rows = json.loads(newest[key].data) if isinstance(newest[key].data, str) else newest[key].data
        shown = {r["count"]: r["value"] for r in rows}
        assert {k: shown[k] for k in ("unchanged", "moved", "edited", "new", "removed", "reused", "computed")} == \
            {k: expected[k] for k in ("unchanged", "moved", "edited", "new", "removed", "reused", "computed")}
