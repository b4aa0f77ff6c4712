"""benchmarks/positives_precision.py: precision from labels, and each kind's expected share of training draws."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "positives_precision", Path(__file__).resolve().parents[1] / "benchmarks" / "positives_precision.py")
pp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pp)


def test_shares_follow_the_uniform_draw_over_the_kinds_that_apply():
    # "the old car": char, swap_tokens, change_case + wordnet -> 1/4 each; "42": nothing applies -> identity
    shares = pp.draw_shares(["the old car", "42"], [{"wordnet"}, set()])
    assert shares["wordnet"] == {"share_of_draws": pytest.approx(1 / 8, abs=1e-4), "phrases_it_applies_to": 1}
    assert shares["identity"]["share_of_draws"] == 0.5
    assert sum(v["share_of_draws"] for v in shares.values()) == pytest.approx(1, abs=1e-3)


def test_precision_per_kind_and_unlabelled_rows_refused(tmp_path):
    p = tmp_path / "labels.tsv"
    p.write_text(pp.RULE + "kind\tsource\tphrase\tpositive\tlabel\n"
                 "wordnet\tw\ta car\tan auto\t1\nwordnet\tw\tthe fall\tthe autumn\t0\nalias\tt\tNYT\tThe Times\t1\n")
    got = pp.precision(pp.read_labels(str(p)))
    assert got["wordnet"]["precision"] == 0.5 and got["alias"]["precision"] == 1.0
    p.write_text("kind\tsource\tphrase\tpositive\tlabel\nwordnet\tw\ta car\tan auto\tyes\n")
    with pytest.raises(ValueError, match="not 0 or 1"):
        pp.read_labels(str(p))
