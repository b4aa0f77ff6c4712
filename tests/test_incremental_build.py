"""benchmarks/incremental_build.py: next month's dump is a seeded edit of the share asked for, and
the projection scales the stage rates' hours by the ratios measured (the builds themselves are the
flow's wiring, tested with the stages)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "incremental_build", Path(__file__).resolve().parents[1] / "benchmarks" / "incremental_build.py")
ib = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ib)


def json_pages(n: int, start: int = 0) -> list[dict]:
    return [{"source": 1, "kind": "json", "data": {"id": 100 + i, "title": f"P{i}",
                                                    "text": f"Page {i} has a first sentence here. It has another one too."}}
            for i in range(start, start + n)]


def xml_page(i: int, text: str, redirect: bool = False) -> dict:
    r = b'<redirect title="X" />' if redirect else b""
    return {"source": 0, "kind": "xml",
            "data": b"<page><title>T%d</title><id>%d</id>%s<revision><text bytes=\"1\">%s</text></revision></page>"
                    % (i, i, r, text.encode())}


@pytest.mark.parametrize("share", [0.02, 0.05, 0.2, 0.4])
def test_next_dump_changes_the_share_asked_for_and_is_seeded(share):
    pages = json_pages(150) + [xml_page(i, "Line one.\nLine two &amp; more.") for i in range(50)]
    extra = json_pages(80, start=150)
    n1, changes = ib.next_dump(pages, extra, share, seed=3)
    assert changes["changed"] == round(share * 200) == changes["edited"] + changes["removed"] + changes["added"]
    assert changes["pages_n1"] == len(n1) == 200 - changes["removed"] + changes["added"]
    assert ib.next_dump(pages, extra, share, seed=3)[0] == n1
    before = {json.dumps(p["data"], sort_keys=True) if p["kind"] == "json" else p["data"].decode() for p in pages}
    after = [json.dumps(p["data"], sort_keys=True) if p["kind"] == "json" else p["data"].decode() for p in n1]
    new_or_edited = [a for a in after if a not in before]
    assert len(new_or_edited) == changes["edited"] + changes["added"]
    assert len(set(after) & before) == 200 - changes["removed"] - changes["edited"]


def test_an_edit_inserts_one_sentence_and_keeps_the_rest():
    import random

    page = xml_page(7, "First line.\nSecond line.")
    edited = ib.edit_page(page, "A new <sentence> here.", random.Random(0))
    text = ib._TEXT.search(edited["data"]).group(2).decode()
    lines = text.split("\n")
    assert len(lines) == 3 and "A new &lt;sentence&gt; here." in lines
    assert [x for x in lines if "new" not in x] == ["First line.", "Second line."]
    plain = ib.edit_page(json_pages(1)[0], "Inserted words are here now.", random.Random(0))["data"]["text"]
    assert "Inserted words are here now." in plain and plain.count(".") == 3


def test_redirects_are_not_edited():
    pages = [xml_page(i, "#REDIRECT [[X]]", redirect=True) for i in range(40)] + json_pages(10)
    n1, changes = ib.next_dump(pages, json_pages(20, start=10), 0.4, seed=0)
    redirects = [p for p in n1 if p["kind"] == "xml"]
    assert all(p["data"] == pages[int(p["data"].split(b"<id>")[1].split(b"<")[0])]["data"] for p in redirects)
    assert changes["edited"] > 0


def test_the_projection_scales_each_stage_by_its_measured_ratio():
    rates = Path(__file__).resolve().parents[1] / ib.STAGE_RATES
    measured = {"shares": [{"share": 0.05, "stages": [
        {"stage": "phrase_occurrences", "full_cpu_s": 100.0, "cpu_ratio": 0.1},
        {"stage": "pages", "full_cpu_s": 1.0, "cpu_ratio": 0.2},  # under min_s: taken as 1
        {"stage": "word_vectors", "full_cpu_s": 50.0, "cpu_ratio": 0.8},  # no reuse: noise, taken as 1
    ], "reuse": {"stages": [{"stage": "pages"}, {"stage": "phrase_occurrences"}]}}]}
    proj = ib.projection(measured, rates, 64, min_s=2.0)
    full = {s["stage"]: s for s in proj["by_share"][0]["stages"]}
    assert full["phrase_occurrences"]["hours_incremental"] == pytest.approx(0.1 * full["phrase_occurrences"]["hours_full"])
    for stage in ("pages", "word_vectors"):
        assert full[stage]["cpu_ratio"] == 1.0 and not full[stage]["measured"]
    assert proj["by_share"][0]["hours_full"] == pytest.approx(proj["hours_full"]) == pytest.approx(
        sum(s["hours_full"] for s in full.values()))
    saved = full["phrase_occurrences"]["hours_full"] * 0.9
    assert proj["by_share"][0]["hours_incremental"] == pytest.approx(proj["hours_full"] - saved)
