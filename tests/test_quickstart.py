"""docs/quickstart.md's commands, run as written (benchmarks/quickstart_times.py `run_page`) on a tiny
corpus and a tiny random-weight backbone: a renamed option or a moved file on the page fails here."""
from __future__ import annotations

import csv
import json
import re
import string

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks.quickstart_times import ROOT, blocks, first_step_lines, run_page  # noqa: E402
from tests.conftest import tiny_model_dir  # noqa: E402
from tests.test_train_flow import WORDS, tiny_corpus  # noqa: E402

LETTERS = list(string.ascii_lowercase)


@pytest.fixture
def workdir(tmp_path):
    """A checkout's view as the page has it: a corpus under data/, the examples beside it."""
    tiny_corpus(str(tmp_path / "data"))
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


def tiny_overrides(tmp_path) -> dict:
    (tmp_path / "backbone").mkdir()
    backbone = tiny_model_dir(tmp_path / "backbone", WORDS + LETTERS + [f"##{c}" for c in LETTERS])
    return {"train/pearl": {"backbone": str(backbone), "char_epochs": 1, "char_max_words": 0, "alias_holdout_pairs": 0,
                            "training": {"char_proj_dim": 4, "device": "cpu", "checkpoint_every": 0, "select_every": 0}},
            "link/tables": {"dask_workers": 1}}


def test_the_page_marks_its_steps_in_order():
    assert [name for name, _ in blocks()] == ["train", "similar", "link", "link-flow"]


def test_the_quickstart_runs_as_written(workdir, tmp_path_factory):
    times = run_page(workdir, tiny_overrides(tmp_path_factory.mktemp("tiny")), timeout=600)
    assert list(times) == ["train", "similar", "link", "link-flow"]
    assert all(t >= 0 for t in times.values())
    first = first_step_lines(workdir)  # what the page says of the wait before training's first step line
    assert list(first) == ["train"] and 0 < first["train"]["seconds"] < times["train"]
    assert re.fullmatch(r"\d+/\d+", first["train"]["step"])  # the tiny set's few steps: 2/2
    assert len([d for d in (workdir / "data" / "models").iterdir() if d.is_dir()]) == 1  # the step trained one
    with open(workdir / "matches.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows and {"left_row", "right_row", "left", "right", "score", "rank"} <= set(rows[0])
    latest = json.loads((workdir / "data" / "matches" / "_latest.json").read_text())
    assert latest  # the link/tables run committed a matches version


def test_a_broken_command_fails_the_run(workdir, tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- quickstart: broken -->\n```bash\npearl similar a b --no-such-option\n```\n")
    with pytest.raises(RuntimeError, match="no-such-option"):
        run_page(workdir, page=page, timeout=120)
