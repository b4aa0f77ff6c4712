"""The corpus-reuse report (tasks/reuse_report.py): what an incremental build reused, read back from
the stores it wrote, and the time saved priced at the stage's measured cost per computed item."""
from __future__ import annotations

import pytest

from tasks.reuse_report import page_changes, reuse_markdown, stage_rows
from tests.test_incremental_corpus import DUMP_N, DUMP_N1, PAGE_COUNTS, build, write_dump


def stores_of(built: dict) -> dict:
    return {stage: [built[key].entries.name, built[key].entries.version]
            for stage, key in (("pages", "page_store"), ("phrase_occurrences", "sentence_store"))}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    d = tmp_path_factory.mktemp("reuse-report")
    root = str(d / "store")
    first = build(write_dump(d / "n.xml", DUMP_N), root)
    second = build(write_dump(d / "n1.xml", DUMP_N1), root)
    # the same pages as N+1 under another file: a new input whose every page and sentence is reused
    third = build(write_dump(d / "n1-again.xml", DUMP_N1), root)
    return root, first, second, third


def test_the_report_counts_the_pages_and_prices_the_reuse_at_the_larger_measurement(builds):
    """The second build computed fewer items than the first: the first's cost per item prices the reuse."""
    root, first, second, _ = builds
    stores = stores_of(second)
    assert page_changes(root, stores) == {k: PAGE_COUNTS[k] for k in ("new", "edited", "unchanged", "moved", "removed")}
    rows = {r["stage"]: r for r in stage_rows(root, stores)}
    for stage, key in (("pages", "page_store"), ("phrase_occurrences", "sentence_store")):
        r, stats = rows[stage], second[key].entries.manifest()["stats"]
        before = first[key].entries.manifest()["stats"]
        assert r["reused"] == stats["reused"] > 0 and r["computed"] == stats["computed"] > 0
        assert r["reused"] + r["computed"] == r["items"] == stats["keyed"]
        assert r["compute_s"] > 0 and before["computed"] > r["computed"]
        assert r["cost_from"] == f"the previous build ({first[key].entries.version}), {before['computed']} items computed"
        assert r["saved_s"] == pytest.approx(r["reused"] * before["compute_s"] / before["computed"])
        assert r["previous"] == first[key].entries.version
    md = reuse_markdown(list(rows.values()), page_changes(root, stores))
    assert f"| edited | {PAGE_COUNTS['edited']} |" in md and f"| removed | {PAGE_COUNTS['removed']} |" in md
    assert f"| pages | {PAGE_COUNTS['keyed']} | {PAGE_COUNTS['reused']} | {PAGE_COUNTS['computed']} | 0 |" in md


def test_a_build_that_computed_nothing_prices_it_at_the_previous_builds_cost(builds):
    """(Had this run computed more items than the previous build, its own cost would be taken.)"""
    root, _, second, third = builds
    rows = {r["stage"]: r for r in stage_rows(root, stores_of(third))}
    for stage, key in (("pages", "page_store"), ("phrase_occurrences", "sentence_store")):
        r, before = rows[stage], second[key].entries.manifest()["stats"]  # its own measurement
        assert r["computed"] == 0 and r["reused"] == r["items"] > 0
        assert r["cost_from"] == f"the previous build ({stores_of(second)[stage][1]}), {before['computed']} items computed"
        assert r["saved_s"] == pytest.approx(r["reused"] * before["compute_s"] / before["computed"])
    assert page_changes(root, stores_of(third))["unchanged"] == PAGE_COUNTS["keyed"]


def test_the_cost_per_item_comes_from_whichever_computed_more():
    from tasks.reuse_report import cost_per_item

    this, before = {"computed": 100, "compute_s": 5.0}, {"computed": 10, "compute_s": 2.0}
    assert cost_per_item(this, before, "v1") == (0.05, "this run, 100 items computed")
    assert cost_per_item(before, this, "v1") == (0.05, "the previous build (v1), 100 items computed")
    assert cost_per_item({"computed": 3, "compute_s": 0.3}, {"computed": 9}, "v0") == \
        (pytest.approx(0.1), "this run, 3 items computed")  # a store of older code measured no time
    assert cost_per_item({"computed": 0, "compute_s": 0}, None, None) == (None, "not measured")


def test_nothing_recomputed_says_so():
    assert "nothing was recomputed" in reuse_markdown([], None)
