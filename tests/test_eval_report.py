"""tasks.eval_report: the score table and report built from result rows."""
from __future__ import annotations

import base64

import pytest

from pearl_model.evaluation.common import draws_row, row
from pearl_model.evaluation.scores import primary_scores
from tasks.eval_report import report_markdown, score_table


def rows():
    return [draws_row("a", "paraphrase", "ppdb", "accuracy", [90.0, 92.0, 94.0]),
            draws_row("a", "paraphrase", "ppdb", "epochs", [7.0, 7.0, 7.0]),
            row("a", "retrieval", "yago-10kdict", "accuracy", 80.0, items=[1, 1, 1, 1, 0]),
            row("b", "retrieval", "yago-10kdict", "accuracy", 70.0, items=[1, 1, 1, 0, 0])]


def test_primary_metric_is_the_first_reported_and_seeds_are_averaged():
    scores = primary_scores(rows())
    mean, std, metric = scores[("a", "ppdb")]
    assert metric == "accuracy"  # "epochs" is secondary and must not enter the mean
    assert mean == pytest.approx(92.0) and std == pytest.approx(2.0)
    assert scores[("b", "yago-10kdict")][1] is None


def test_table_orders_columns_averages_only_complete_rows_and_blanks_paper_10k():
    paper = {"E5-small": {"ppdb": 96.0, "yago-10kdict": 43.3}}
    table = score_table(rows(), paper)
    assert [k for k in table[0] if k not in ("model", "average")] == ["ppdb", "ppdb (paper draw)", "yago-10kdict"]
    a, b, ref = table
    assert a["ppdb"] == "92.0 ± 2.0" and a["average"] == "86.0"
    assert a["ppdb (paper draw)"] == "90.0"  # the first draw: the paper protocol's seed 0
    assert a["yago-10kdict"] == "80.0"  # one draw: no spread shown
    assert b["ppdb"] == "" and b["average"] == ""  # b has no ppdb score: no average
    assert ref["model"] == "E5-small (paper)"
    # the paper's single-draw figure sits beside the paper draw; full-dictionary figures are not comparable
    assert ref["ppdb"] == "" and ref["ppdb (paper draw)"] == "96.0" and ref["yago-10kdict"] == ""


def test_report_embeds_the_map_and_names_the_version():
    table = score_table(rows())
    md = report_markdown(table, {"version": "v123", "rows": 9}, b"\x89PNGfake")
    assert "`v123`" in md and "| a |" in md
    assert base64.b64encode(b"\x89PNGfake").decode() in md
    assert "10kdict" in md
