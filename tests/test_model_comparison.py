"""tasks.model_comparison: a trained model against its backbone, paired differences with intervals."""
from __future__ import annotations

import pytest

from pearl_model.evaluation.common import draws_row, row
from tasks.model_comparison import compare, comparison_markdown


def rows():
    return [draws_row("m", "t", "conll2003", "nmi", [60.0, 61.0, 59.0, 60.5]),
            draws_row("b", "t", "conll2003", "nmi", [50.0, 51.0, 49.0, 50.5]),
            row("m", "t", "turney", "accuracy", 50.0, items=[1, 0] * 100),
            row("b", "t", "turney", "accuracy", 50.0, items=[0, 1] * 100),
            row("m", "t", "analogy", "accuracy", 40.0), row("b", "t", "analogy", "accuracy", 30.0)]


def test_each_dataset_has_its_change_and_interval_and_says_no_difference_where_it_holds_0():
    lines = compare(rows()[:4], "m", "b")
    turney, conll, avg = lines  # the paper's column order
    assert conll["change"] == 10.0 and conll["low"] > 0 and conll["verdict"] == "better"
    assert turney["change"] == 0.0 and turney["low"] < 0 < turney["high"] and turney["verdict"] == "no difference"
    assert avg["dataset"] == "average" and avg["change"] == 5.0 and avg["low"] <= 5.0 <= avg["high"]
    md = comparison_markdown(lines, "m", "b")
    assert "Better on: conll2003. Worse on: none. No difference on: turney." in md
    assert f"| turney | accuracy | 50.0 | 50.0 | +0.0 | [{turney['low']:+.1f}, {turney['high']:+.1f}] | no difference |" in md


def test_a_dataset_without_per_item_scores_is_shown_unpaired():
    lines = compare(rows(), "m", "b")
    analogy = next(x for x in lines if x["dataset"] == "analogy")
    assert analogy["change"] == 10.0 and analogy["low"] is None and analogy["verdict"] == "not paired"
    assert lines[-1]["verdict"] == "not paired"  # no interval for an average over an unpaired dataset
    assert "| analogy | accuracy | 30.0 | 40.0 | +10.0 |  | not paired |" in comparison_markdown(lines, "m", "b")
    assert compare(rows(), "m", "nobody") == []
    with pytest.raises(KeyError):
        compare([{"model": "m"}], "m", "b")
