"""tasks.eval_report: the score table and report built from result rows."""
from __future__ import annotations

import base64

import pytest

from tasks.eval_report import primary_scores, report_markdown, score_table


def rows():
    out = []
    for seed, v in ((0, 90.0), (1, 92.0), (2, 94.0)):
        out.append({"model": "a", "task": "paraphrase", "dataset": "ppdb", "metric": "accuracy", "value": v, "seed": seed})
        out.append({"model": "a", "task": "paraphrase", "dataset": "ppdb", "metric": "epochs", "value": 7.0, "seed": seed})
    out.append({"model": "a", "task": "retrieval", "dataset": "yago-10kdict", "metric": "accuracy", "value": 80.0, "seed": None})
    out.append({"model": "b", "task": "retrieval", "dataset": "yago-10kdict", "metric": "accuracy", "value": 70.0, "seed": None})
    return out


def test_primary_metric_is_the_first_reported_and_seeds_are_averaged():
    scores = primary_scores(rows())
    mean, std, metric = scores[("a", "ppdb")]
    assert metric == "accuracy"  # "epochs" is secondary and must not enter the mean
    assert mean == pytest.approx(92.0) and std == pytest.approx(2.0)
    assert scores[("b", "yago-10kdict")][1] is None


def test_table_orders_columns_averages_only_complete_rows_and_blanks_paper_10k():
    paper = {"E5-small": {"ppdb": 96.0, "yago-10kdict": 43.3}}
    table = score_table(rows(), paper)
    assert [k for k in table[0] if k not in ("model", "average")] == ["ppdb", "yago-10kdict"]
    a, b, ref = table
    assert a["ppdb"] == "92.0 ± 2.0" and a["average"] == "86.0"
    assert b["ppdb"] == "" and b["average"] == ""  # b has no ppdb score: no average
    assert ref["model"] == "E5-small (paper)"
    assert ref["ppdb"] == "96.0" and ref["yago-10kdict"] == ""  # full-dictionary figure not comparable


def test_report_embeds_the_map_and_names_the_version():
    table = score_table(rows())
    md = report_markdown(table, {"version": "v123", "rows": 9}, b"\x89PNGfake")
    assert "`v123`" in md and "| a |" in md
    assert base64.b64encode(b"\x89PNGfake").decode() in md
    assert "10kdict" in md
