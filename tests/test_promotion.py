"""The promotion gate's decisions on crafted benchmark results, and what it does to the registry."""
from __future__ import annotations

import math

import pytest

from storage.registry import ModelRegistry
from tasks.promotion import decide, decision_markdown, failure_markdown, gate, scores_by_model
from tests.test_registry import stored_model

CURRENT = {"ppdb": 90.0, "turney": 50.0, "bird": 60.0, "conll2003": 40.0}


def test_better_model_is_promoted():
    d = decide({"ppdb": 91.0, "turney": 52.0, "bird": 60.5, "conll2003": 41.0}, CURRENT)
    assert d.promote
    assert d.candidate_average == pytest.approx(61.125, abs=0.01) and d.current_average == 60.0
    assert d.lines[-1] == {"dataset": "average", "current": 60.0, "candidate": 61.12, "change": 1.12, "verdict": "ok"}
    assert "+1.12" in d.reasons[0]


def test_slightly_worse_within_tolerance_is_promoted_beyond_is_not():
    within = {k: v - 0.4 for k, v in CURRENT.items()}
    assert decide(within, CURRENT, average_tolerance=0.5).promote
    beyond = {k: v - 0.6 for k, v in CURRENT.items()}
    d = decide(beyond, CURRENT, average_tolerance=0.5)
    assert not d.promote
    assert "average drops by 0.60" in d.reasons[0]
    assert decide(beyond, CURRENT, average_tolerance=1.0).promote


def test_one_collapsing_dataset_blocks_promotion_even_when_the_average_rises():
    cand = {"ppdb": 99.0, "turney": 70.0, "bird": 70.0, "conll2003": 30.0}  # average +9.75, CoNLL -10
    d = decide(cand, CURRENT, average_tolerance=0.5, dataset_tolerance=3.0)
    assert not d.promote
    assert len(d.reasons) == 1 and d.reasons[0].startswith("conll2003 drops by 10.00 points")
    verdicts = {x["dataset"]: x["verdict"] for x in d.lines}
    assert verdicts == {"ppdb": "ok", "turney": "ok", "bird": "ok", "conll2003": "drop > 3", "average": "ok"}
    assert decide(cand, CURRENT, dataset_tolerance=10.5).promote  # a looser tolerance lets it through


def test_first_model_missing_datasets_and_bad_scores():
    first = decide({"bird": 55.0}, None)
    assert first.promote and "no model is current" in first.reasons[0]
    fewer = decide({"ppdb": 95.0, "turney": 55.0, "bird": 65.0}, CURRENT)
    assert not fewer.promote and any("not scored on conll2003" in r for r in fewer.reasons)
    nan = decide({**CURRENT, "bird": math.nan}, CURRENT)
    assert not nan.promote and "non-finite scores on bird" in nan.reasons[0]
    assert not decide({}, CURRENT).promote
    with pytest.raises(ValueError, match="negative"):
        decide(CURRENT, CURRENT, average_tolerance=-1)


def test_markdown_says_what_and_why():
    d = decide({**CURRENT, "bird": 50.0}, CURRENT)
    md = decision_markdown(d, "cand1", "cur1", "kept")
    assert md.startswith("# Not promoted: the current model stays")
    assert "bird drops by 10.00" in md and "| bird | 60.00 | 50.00 | -10.00 | drop > 3 |" in md
    fail = failure_markdown("train", ValueError("boom"), "cur1")
    assert "failed at: **train**" in fail and "ValueError: boom" in fail and "`cur1`" in fail


def test_scores_by_model_uses_the_primary_metric_mean_over_seeds():
    rows = [{"model": "a", "dataset": "ppdb", "metric": "accuracy", "value": v, "seed": s}
            for s, v in enumerate([90.0, 92.0])]
    rows += [{"model": "a", "dataset": "ppdb", "metric": "epochs", "value": 50.0, "seed": 0},
             {"model": "b", "dataset": "bird", "metric": "pearson", "value": 61.0, "seed": None}]
    assert scores_by_model(rows) == {"a": {"ppdb": 91.0}, "b": {"bird": 61.0}}


def test_gate_registers_every_candidate_and_moves_the_pointer_only_on_promotion(root, tmp_path):
    reg = ModelRegistry(root)
    for v in ("m1", "m2", "m3"):
        stored_model(root, v, tmp_path)
    d, outcome = gate(root, "m1", None, {"d1": {"bird": 60.0}}, "d1", None, "ev1", 0.5, 3.0)
    assert outcome == "promoted" and reg.current_version() == "m1"

    worse = {"d2": {"bird": 50.0}, "d1": {"bird": 60.0}}
    d, outcome = gate(root, "m2", "m1", worse, "d2", "d1", "ev2", 0.5, 3.0)
    assert outcome == "kept" and not d.promote and reg.current_version() == "m1"
    entry = reg.entry("m2")
    assert entry["decision"]["outcome"] == "kept" and entry["benchmark"]["scores"] == {"bird": 50.0}
    assert entry["benchmark"]["compared_with"] == "m1"

    better = {"d3": {"bird": 62.0}, "d1": {"bird": 60.0}}
    d, outcome = gate(root, "m3", "m1", better, "d3", "d1", "ev3", 0.5, 3.0)
    assert outcome == "promoted" and reg.current_version() == "m3"
    assert reg.pointer()["previous"] == "m1"

    d, outcome = gate(root, "m3", "m3", {}, "d3", "d3", None, 0.5, 3.0)
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
    d, outcome = gate(root, "m1", None, {"d1": {"bird": 60.0}}, "d1", None, "ev1", 0.5, 3.0)
    assert outcome == "promoted"  # without alias_tolerance the check is off
    d, outcome = gate(root, "m1", None, {"d1": {"bird": 60.0}}, "d1", None, "ev1", 0.5, 3.0, alias_tolerance=1.0)
    assert outcome == "kept" and d.reasons[0].startswith("held-out alias top-1 drops by 20.00 points")
    assert reg.current_version() == "m1"  # promoted by the first call, not moved by the second
    d, outcome = gate(root, "m2", "m1", {"d2": {"bird": 60.5}, "d1": {"bird": 60.0}}, "d2", "d1", "ev2", 0.5, 3.0,
                      alias_tolerance=1.0)
    assert outcome == "promoted" and reg.current_version() == "m2"
