"""The promotion gate's decisions on crafted benchmark results, and what it does to the registry."""
from __future__ import annotations

import math

import pytest

from pearl_model.evaluation.common import draws_row, pearson, row
from storage.registry import ModelRegistry
from tasks.promotion import decide, decision_markdown, failure_markdown, gate, scores_by_model
from tests.test_registry import stored_model

def rows_of(model: str, ppdb=(90.0, 91.0, 89.0), conll=(40.0, 41.0, 39.0), turney=None, bird=None) -> list[dict]:
    """One model's primary rows of a run: two datasets over draws, two over items."""
    turney = [1.0] * 50 + [0.0] * 50 if turney is None else turney
    sims = [i / 100 for i in range(100)] if bird is None else bird
    return [draws_row(model, "t", "ppdb", "accuracy", ppdb), draws_row(model, "t", "conll2003", "nmi", conll),
            row(model, "t", "turney", "accuracy", 100 * sum(turney) / len(turney), items=turney),
            row(model, "t", "bird", "pearson", 100 * pearson(sims, HUMAN), items=sims, item_targets=HUMAN)]


HUMAN = [(i % 17) / 17 + i / 200 for i in range(100)]
CURRENT = rows_of("cur")


def test_a_better_model_is_promoted_on_a_difference_the_run_can_see():
    cand = rows_of("cand", ppdb=(92.0, 93.0, 91.5), conll=(43.0, 44.0, 42.0), turney=[1.0] * 60 + [0.0] * 40)
    d = decide(cand + CURRENT, "cand", "cur")
    assert d.promote and d.current_average is not None
    avg = d.lines[-1]
    assert avg["dataset"] == "average" and avg["change"] > 0 and avg["low"] > -0.5 and avg["verdict"] == "better"
    assert {x["dataset"]: x["verdict"] for x in d.lines[:-1]} == {
        "ppdb": "better", "turney": "better", "bird": "no difference", "conll2003": "better"}
    assert "95% interval" in d.reasons[0] and "above -0.5" in d.reasons[0]


def test_a_model_the_run_cannot_tell_apart_is_kept_unless_the_noise_is_within_the_tolerance():
    # the same accuracy on other items, probe seeds and random states that disagree: no difference
    cand = rows_of("cand", ppdb=(88.0, 93.0, 89.0), conll=(43.0, 38.0, 39.0), turney=[0.0] * 50 + [1.0] * 50)
    d = decide(cand + CURRENT, "cand", "cur")
    avg = d.lines[-1]
    assert not d.promote and avg["low"] < -0.5 < avg["high"]
    assert "cannot see that the candidate is within the average tolerance of 0.5" in d.reasons[0]
    assert "(no difference)" in d.reasons[0]
    assert decide(cand + CURRENT, "cand", "cur", average_tolerance=50).promote
    assert decide(CURRENT + [{**r, "model": "same"} for r in CURRENT], "same", "cur").promote  # identical: no noise


def test_a_drop_beyond_the_tolerance_blocks_only_where_the_run_can_see_it():
    seen = rows_of("cand", ppdb=(99.0, 99.5, 98.5), conll=(30.0, 31.0, 29.0), turney=[1.0] * 90 + [0.0] * 10)
    d = decide(seen + CURRENT, "cand", "cur", average_tolerance=0.5, dataset_tolerance=3.0)
    assert not d.promote and len(d.reasons) == 1 and d.reasons[0].startswith("conll2003 drops by 10.00 points")
    assert {x["dataset"]: x["verdict"] for x in d.lines}["conll2003"] == "drop > 3 seen"
    assert decide(seen + CURRENT, "cand", "cur", dataset_tolerance=10.5).promote  # a looser tolerance lets it through
    unseen = rows_of("cand", ppdb=(99.0, 99.5, 98.5), conll=(50.0, 21.0, 19.0), turney=[1.0] * 90 + [0.0] * 10)
    d = decide(unseen + CURRENT, "cand", "cur")  # conll2003 -3.33 on average, but the draws cannot tell
    assert {x["dataset"]: x["verdict"] for x in d.lines}["conll2003"] == "no difference"
    assert not any(r.startswith("conll2003") for r in d.reasons)


def test_first_model_missing_datasets_and_bad_scores():
    first = decide(rows_of("cand"), "cand", None)
    assert first.promote and "no model is current" in first.reasons[0]
    fewer = decide([r for r in rows_of("cand") if r["dataset"] != "conll2003"] + CURRENT, "cand", "cur")
    assert not fewer.promote and any("not scored on conll2003" in r for r in fewer.reasons)
    nan = decide([{**r, "value": math.nan} if r["dataset"] == "bird" else r for r in rows_of("cand")] + CURRENT,
                 "cand", "cur")
    assert not nan.promote and "non-finite scores on bird" in nan.reasons[0]
    assert not decide(CURRENT, "cand", "cur").promote
    with pytest.raises(ValueError, match="negative"):
        decide(CURRENT, "cur", "cur", average_tolerance=-1)


def test_markdown_says_what_and_why():
    d = decide(rows_of("cand", turney=[1.0] * 40 + [0.0] * 60) + CURRENT, "cand", "cur")
    md = decision_markdown(d, "cand1", "cur1", "kept")
    assert md.startswith("# Not promoted: the current model stays")
    turney = next(x for x in d.lines if x["dataset"] == "turney")
    assert "turney drops by 10.00" in md and turney["high"] < -3
    assert (f"| turney | 50.00 | 40.00 | -10.00 | {turney['low']:+.2f} to {turney['high']:+.2f} | drop > 3 seen |"
            in md)
    fail = failure_markdown("train", ValueError("boom"), "cur1")
    assert "failed at: **train**" in fail and "ValueError: boom" in fail and "`cur1`" in fail


def test_scores_by_model_uses_the_primary_metric():
    rows = [draws_row("a", "t", "ppdb", "accuracy", [90.0, 92.0]), draws_row("a", "t", "ppdb", "epochs", [50, 50]),
            row("b", "t", "bird", "pearson", 61.0)]
    assert scores_by_model(rows) == {"a": {"ppdb": 91.0}, "b": {"bird": 61.0}}


def turney_rows(model: str, correct: int) -> list[dict]:
    items = [1.0] * correct + [0.0] * (100 - correct)
    return [row(model, "t", "turney", "accuracy", float(correct), items=items)]


def test_gate_registers_every_candidate_and_moves_the_pointer_only_on_promotion(root, tmp_path):
    reg = ModelRegistry(root)
    for v in ("m1", "m2", "m3"):
        stored_model(root, v, tmp_path)
    d, outcome = gate(root, "m1", None, turney_rows("d1", 60), "d1", None, "ev1", 0.5, 3.0)
    assert outcome == "promoted" and reg.current_version() == "m1"

    worse = turney_rows("d2", 50) + turney_rows("d1", 60)
    d, outcome = gate(root, "m2", "m1", worse, "d2", "d1", "ev2", 0.5, 3.0)
    assert outcome == "kept" and not d.promote and reg.current_version() == "m1"
    entry = reg.entry("m2")
    assert entry["decision"]["outcome"] == "kept" and entry["benchmark"]["scores"] == {"turney": 50.0}
    assert entry["benchmark"]["compared_with"] == "m1"

    better = turney_rows("d3", 62) + turney_rows("d1", 60)
    d, outcome = gate(root, "m3", "m1", better, "d3", "d1", "ev3", 0.5, 3.0)
    assert outcome == "promoted" and reg.current_version() == "m3"
    assert reg.pointer()["previous"] == "m1"

    d, outcome = gate(root, "m3", "m3", [], "d3", "d3", None, 0.5, 3.0)
    assert outcome == "unchanged" and reg.current_version() == "m3"


def model_with_alias_scores(root, version, tmp_path, before, after):
    from storage.files import FileSet

    src = tmp_path / f"src-{version}"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"0" * 16)
    stats = {"steps": 3} if before is None else {"val_alias_top1_before": before, "val_alias_top1": after + 0.1,
                                                 "alias_top1_exported": after}
    FileSet(root, "models", version).upload(src, code_version="train-2", params={}, inputs={"training_set": "ts1"},
                                            stats=stats)


def test_alias_check_is_off_by_default_and_blocks_a_drop_beyond_its_tolerance(root, tmp_path):
    from tasks.promotion import alias_check

    assert alias_check({"val_alias_top1_before": 0.50, "alias_top1_exported": 0.49}, 2.0) is None
    reason = alias_check({"val_alias_top1_before": 0.50, "alias_top1_exported": 0.45}, 2.0)
    assert reason.startswith("held-out alias top-1 drops by 5.00 points in training (50.00 -> 45.00)")
    assert "no held-out alias scores" in alias_check({"val_loss": 1.0}, 2.0)
    with pytest.raises(ValueError, match="alias_tolerance"):
        alias_check({}, -1)

    reg = ModelRegistry(root)
    model_with_alias_scores(root, "m1", tmp_path, 0.50, 0.30)  # benchmark fine, aliases collapse
    model_with_alias_scores(root, "m2", tmp_path, 0.50, 0.52)
    d, outcome = gate(root, "m1", None, turney_rows("d1", 60), "d1", None, "ev1", 0.5, 3.0)
    assert outcome == "promoted"  # without alias_tolerance the check is off
    d, outcome = gate(root, "m1", None, turney_rows("d1", 60), "d1", None, "ev1", 0.5, 3.0, alias_tolerance=1.0)
    assert outcome == "kept" and d.reasons[0].startswith("held-out alias top-1 drops by 20.00 points")
    assert reg.current_version() == "m1"  # promoted by the first call, not moved by the second
    d, outcome = gate(root, "m2", "m1", turney_rows("d2", 61) + turney_rows("d1", 60), "d2", "d1", "ev2", 0.5, 3.0,
                      alias_tolerance=1.0)
    assert outcome == "promoted" and reg.current_version() == "m2"
