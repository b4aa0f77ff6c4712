"""pearl_model.training.selection: the score a checkpoint is chosen by, and scoring weights as exported."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pearl_model.training import selection as S  # noqa: E402


def test_selection_score_is_the_worst_and_mean_change_over_the_criteria():
    base = {"conll2003:dev": 38.0, "bc5cdr:dev": 58.0, "conll2003:dev/l2": 30.0, "heldout_alias_top1": 66.0,
            "heldout_alias_mrr": 70.0}
    mine = {"conll2003:dev": 40.0, "bc5cdr:dev": 57.0, "conll2003:dev/l2": 10.0, "heldout_alias_top1": 69.0,
            "heldout_alias_mrr": 10.0}
    worst, mean = S.selection_score(mine, base)
    assert worst == pytest.approx(-1.0)  # the /l2 view and MRR are reported, not chosen on
    assert mean == pytest.approx((2.0 - 1.0 + 3.0) / 3)
    with pytest.raises(ValueError, match="no score in common"):
        S.selection_score({"x": 1.0}, base)


def test_exported_weights_are_the_average_and_the_trained_ones_come_back():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = torch.nn.Linear(2, 2)

    m = M()
    trained = {k: v.clone() for k, v in m.backbone.state_dict().items()}
    original = {k: torch.zeros_like(v) for k, v in trained.items()}
    with S.exported_weights(m, original, 0.25) as inside:
        assert torch.allclose(inside.backbone.weight, 0.25 * trained["weight"])
    assert torch.equal(m.backbone.weight, trained["weight"])
    with pytest.raises(RuntimeError), S.exported_weights(m, original, 0.5):
        raise RuntimeError("scoring failed")
    assert torch.equal(m.backbone.weight, trained["weight"])  # restored even when scoring fails


def test_scaled_vectors_scale_only_the_character_part_and_encode_once():
    import numpy as np

    class Lookup:
        calls = 0

        def encode(self, phrases, normalize=True, batch_size=None):
            Lookup.calls += 1
            v = np.stack([np.random.default_rng(len(p)).normal(size=6) for p in phrases]).astype(np.float32)
            return v / np.linalg.norm(v, axis=1, keepdims=True) if normalize else v

    enc = S.ScaledVectors(Lookup(), backbone_dim=4)
    raw = enc.encode(["x", "yy"], normalize=False)
    enc.scale = 0.0
    zero = enc.encode(["x", "yy"], normalize=False)
    assert np.allclose(zero[:, :4], raw[:, :4]) and np.allclose(zero[:, 4:], 0)
    unit = enc.encode(["yy", "x"], normalize=True)
    assert np.allclose(np.linalg.norm(unit, axis=1), 1) and np.allclose(unit[1, 4:], 0)
    assert Lookup.calls == 1  # every later call came from the cache


def _record(weight, worst, mean):
    return {"average_weight": weight, "select_worst": worst, "select_mean": mean}


@pytest.mark.parametrize("worst_by_weight, expected, scored", [
    ({0.5: 0.1, 0.375: 0.2, 0.25: 0.3}, 0.5, []),              # the first loses nothing: no further check
    ({0.5: -0.3, 0.375: 0.1, 0.25: 0.2}, 0.375, [0.375]),      # the first in order that loses nothing, then stop
    ({0.5: -0.3, 0.375: -0.2, 0.25: -0.1}, 0.25, [0.375, 0.25]),  # none: the best worst change (rule worst's key)
    ({0.5: -0.1, 0.375: -0.2, 0.25: -0.1}, 0.5, [0.375, 0.25]),   # a tie: the first listed
])
def test_the_averaging_weight_is_the_first_candidate_that_loses_on_no_dev_signal(worst_by_weight, expected, scored):
    calls = []

    def select(model, weight):
        calls.append(weight)
        assert model == "kept checkpoint"
        return _record(weight, worst_by_weight[weight], 1.0)

    kept = _record(0.5, worst_by_weight[0.5], 1.0)
    chosen = S.choose_average_weight("kept checkpoint", select, kept, [0.5, 0.375, 0.25], "mean")
    assert calls == scored and chosen["average_weight"] == expected
    assert list(chosen["average_weights_tried"]) == [str(w) for w in [0.5] + scored]
    assert chosen["average_weights_tried"][str(expected)] == [worst_by_weight[expected], 1.0]


def test_the_weight_candidates_are_bounded_and_named_when_wrong():
    from pydantic import ValidationError

    from pearl_model.training.config import TrainConfig

    assert TrainConfig(average_weight=[0.5, 0.25]).average_weights == [0.5, 0.25]
    assert TrainConfig(average_weight=0.75).average_weights == [0.75]
    for bad in ([0.5, 1.5], [], -0.1):
        with pytest.raises(ValidationError, match="average_weight"):
            TrainConfig(average_weight=bad)


def test_each_criterion_change_has_an_interval_and_no_difference_is_said():
    from pearl_model.evaluation.common import draws_row, row

    base = {"bc5cdr:dev": draws_row("b", "t", "bc5cdr:dev", "nmi", [50.0, 51.0, 49.0, 50.0]),
            "bc5cdr:dev/l2": draws_row("b", "t", "bc5cdr:dev", "nmi_l2norm", [1.0, 2.0]),
            "heldout_alias_top1": row("b", "t", "heldout_alias", "top1", 50.0, items=[1, 0] * 50)}
    mine = {"bc5cdr:dev": draws_row("m", "t", "bc5cdr:dev", "nmi", [60.0, 61.0, 59.0, 60.5]),
            "bc5cdr:dev/l2": draws_row("m", "t", "bc5cdr:dev", "nmi_l2norm", [1.0, 2.0]),
            "heldout_alias_top1": row("m", "t", "heldout_alias", "top1", 50.0, items=[0, 1] * 50)}
    changes = S.dev_changes(mine, base)
    assert list(changes) == ["bc5cdr:dev", "heldout_alias_top1"]  # the criteria: no /l2 view
    change, low, high = changes["bc5cdr:dev"]
    assert change == pytest.approx(10.125) and low > 0
    assert changes["heldout_alias_top1"][0] == 0 and changes["heldout_alias_top1"][1] < 0 < changes["heldout_alias_top1"][2]
    assert S.changes_text(changes) == f"bc5cdr:dev +10.1 [{low:+.1f}, {high:+.1f}]"
    assert S.changes_text(S.dev_changes(base, base)) == "no difference on any dev signal"
