"""benchmarks/dev_compare.py: trained models against each other on dev data, paired."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

spec = importlib.util.spec_from_file_location(
    "dev_compare", Path(__file__).resolve().parents[1] / "benchmarks" / "dev_compare.py")
dc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dc)


def clustering(draws):
    return {"dataset": "conll2003:dev", "metric": "nmi", "value": sum(draws) / len(draws), "draws": draws}


def retrieval(items):
    return {"dataset": "heldout_alias", "metric": "top1", "value": 100 * sum(items) / len(items), "items": items}


def rows(shift=0.0, flip=0):
    """A model's dev rows: clustering draws moved by ``shift``, the first ``flip`` retrieval hits lost."""
    items = [1] * 40 + [0] * 10
    items = [0] * flip + items[flip:]
    return {"conll2003:dev": clustering([60.0 + shift + d for d in (0.1, -0.2, 0.3, 0.0, -0.1)]),
            "conll2003:dev/l2": clustering([61.0] * 5) | {"metric": "nmi_l2norm"},
            "heldout_alias_top1": retrieval(items)}


def test_a_model_worse_beyond_its_interval_fails_and_one_like_the_first_passes():
    got = dc.differences({"backbone": rows(-5), "a": rows(), "same": rows(), "worse": rows(-2, flip=8)},
                         ["a", "same", "worse"])
    assert set(got["vs_first"]["same"]) == {"conll2003:dev", "heldout_alias_top1"}  # criteria only: no /l2 view
    assert got["decision"]["same"] == {"worse_than": "a", "worse_on": [], "passes": True}
    assert got["vs_first"]["same"]["conll2003:dev"]["verdict"] == "no difference"
    assert got["decision"]["worse"] == {"worse_than": "a", "worse_on": ["conll2003:dev", "heldout_alias_top1"],
                                       "passes": False}
    d = got["vs_first"]["worse"]["conll2003:dev"]
    assert d["change"] == pytest.approx(-2.0) and d["paired_by"] == "draws" and d["high"] < 0
    assert got["vs_first"]["worse"]["heldout_alias_top1"]["change"] == pytest.approx(-16.0)
    assert got["vs_backbone"]["a"]["conll2003:dev"]["verdict"] == "better"
    table = dc.markdown({"setup": {"models": {"a": {}, "same": {}, "worse": {}}},
                         "scores": {m: {k: r["value"] for k, r in rows().items()} for m in ("backbone", "a", "same", "worse")}}
                        | got)
    assert "worse: worse than a on conll2003:dev, heldout_alias_top1" in table
    assert "same: no signal worse than a beyond its interval" in table


class _TrainingSet:
    def __init__(self, heldout):
        self.heldout = heldout

    def manifest(self):
        return {"inputs": {"heldout_aliases": self.heldout} if self.heldout else {}}


def test_held_out_aliases_are_scored_only_when_every_training_set_held_out_the_same():
    assert dc.shared_heldout([_TrainingSet("h1"), _TrainingSet("h1")]) == ("h1", "")
    version, why = dc.shared_heldout([_TrainingSet("h1"), _TrainingSet("h2")])
    assert version is None and "different aliases" in why
    assert dc.shared_heldout([_TrainingSet(None), _TrainingSet(None)])[0] is None


def refused(*args) -> str:
    """The message of a refused command, its lines joined (typer draws it in a wrapped box)."""
    got = CliRunner().invoke(dc.app, ["run", *map(str, args)])
    assert got.exit_code == 2, got.output
    return re.sub(r"[\s│╭╮╰╯─]+", " ", got.output)


def test_bad_requests_are_refused_before_any_model_loads(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
    out = tmp_path / "out.json"
    assert "as many distinct names" in refused(a, "--names", "x,y", "--out", out)
    assert "as many distinct names" in refused(a, b, "--names", "x,backbone", "--out", out)
    assert "at least 2 distinct seeds" in refused(a, b, "--probe-seeds", "3,3", "--out", out)
    assert "no training_set in its metadata" in refused(a, b, "--out", out)  # directories, not `train` exports
    assert not out.exists()
