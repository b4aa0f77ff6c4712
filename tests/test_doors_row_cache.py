"""The door of kept scores (pearl_model/evaluation/row_cache.py), driven with generated input
(issue 54, item 3): every seed list and draw count that changes the rows keys them apart, and a
kept file that is not as written (truncated, a byte flipped, a JSON type changed, a number
edited) is never served: the rows are scored afresh, the file written again, nothing else left."""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pearl_model.evaluation import _row_cache
from pearl_model.evaluation.row_cache import RowCache

FRESH = [{"fresh": True}]
seed_lists = st.lists(st.integers(0, 4), min_size=2, max_size=6)
finite = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | finite | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                        max_size=3), max_leaves=6)
rows_sets = st.lists(st.fixed_dictionaries({"metric": st.sampled_from(["accuracy", "nmi"]), "value": finite,
                                            "draws": st.lists(finite, min_size=2, max_size=4)}),
                     min_size=1, max_size=3)


class Named:
    name = "m"

    def encode(self, phrases, normalize=True, batch_size=None):
        raise AssertionError("keys are made without encoding")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    (root / "ppdb").mkdir()
    (root / "ppdb" / "ppdb.json").write_text("[]")
    return root


@given(seed_lists, seed_lists, st.integers(2, 4), st.integers(2, 4))
def test_seed_lists_and_draws_that_change_the_rows_key_them_apart(bench, a, b, draws_a, draws_b):
    """Draws are kept in seed order and paired by position: any other list (order, a repeat) or
    draw count is other rows, so another key; the same list is the same key."""
    def key_path(seeds, draws: int) -> Path:
        return _row_cache(bench / "rows", "m", Named(), bench, ["ppdb", "conll2003"], seeds, None, draws).path("ppdb")

    assert (key_path(a, draws_a) == key_path(b, draws_b)) == (a == b and draws_a == draws_b)
    assert key_path(a, draws_a) != key_path(a[::-1], draws_a) or a == a[::-1]
    assert key_path(a, draws_a) != key_path(a + a[-1:], draws_a)


def truncate(text: str, data) -> str:
    return text[:data.draw(st.integers(0, len(text) - 1))]


def flip_byte(text: str, data) -> bytes:
    raw = bytearray(text.encode())
    raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    return bytes(raw)


def retype(text: str, data) -> str:
    """One part of the file (the whole, its key, digest or rows, a row or a row's field) replaced by
    a JSON value of another type."""
    entry = json.loads(text)
    where = data.draw(st.sampled_from(["whole", "key", "sha256", "rows", "row", "field"]))
    new = data.draw(json_values)
    if where == "whole":
        entry = new
    elif where in ("key", "sha256", "rows"):
        assume(type(new) is not type(entry[where]))
        entry[where] = new
    elif where == "row":
        assume(not isinstance(new, dict))
        entry["rows"][0] = new
    else:
        field = data.draw(st.sampled_from(["metric", "value", "draws"]))
        assume(type(new) is not type(entry["rows"][0][field]))
        entry["rows"][0][field] = new
    return json.dumps(entry)


def edit_number(text: str, data) -> str:
    numbers = list(re.finditer(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text))
    match = data.draw(st.sampled_from(numbers))
    typed = repr(data.draw(finite | st.integers()))
    return text[:match.start()] + typed + text[match.end():]


@given(rows_sets, st.sampled_from([truncate, flip_byte, retype, edit_number]), st.data())
def test_a_kept_file_not_as_written_is_never_served(rows, corrupt, data):
    with tempfile.TemporaryDirectory() as tmp:
        cache = RowCache(tmp, {"spec": "m"}, {"seeds": [0, 1, 2]})
        cache.rows("ppdb", lambda: rows)
        path = cache.path("ppdb")
        written = json.loads(path.read_text())
        corrupted = corrupt(path.read_text(), data)
        path.write_bytes(corrupted if isinstance(corrupted, bytes) else corrupted.encode())
        try:
            same = json.loads(path.read_bytes()) == written  # an edit that changed nothing (a space for a tab)
        except ValueError:
            same = False

        served = cache.rows("ppdb", lambda: FRESH)
        assert served == (rows if same else FRESH)
        assert cache.counts == {"scored": 1 + (not same), "read_back": int(same), "rejected": int(not same)}
        assert cache.rows("ppdb", lambda: [{"again": True}]) == served  # written again, as written
        assert [p.name for p in Path(tmp).iterdir()] == [path.name]  # nothing else left
