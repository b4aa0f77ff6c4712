"""pearl_model.selection: the score a checkpoint is chosen by, and scoring weights as exported."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pearl_model import selection as S  # noqa: E402


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
