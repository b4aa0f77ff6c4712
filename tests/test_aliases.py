"""tasks.aliases: reducing alias_mentions buckets into aliases."""
from __future__ import annotations

import os
import random
from collections import Counter

import pyarrow as pa
import pytest

from storage.datasets import Dataset
from storage.schemas import ALIAS_MENTIONS, ALIASES
from tasks.aliases import plan_aliases, reduce_bucket, write_alias_bucket
from tasks.pages import alias_bucket
from tests.conftest import part_file  # noqa: E402


def mentions_dataset(root: str, parts: list[list[tuple]], n_buckets: int, version: str = "m1") -> Dataset:
    """parts: lists of (alias, target, source, count); buckets computed as the pages stage does."""
    d = Dataset(root, "alias_mentions", version, ALIAS_MENTIONS)
    for i, rows in enumerate(parts):
        d.write_part(i, pa.Table.from_pylist(
            [{"bucket": alias_bucket(a, n_buckets), "alias": a, "target": t, "source": s, "count": c}
             for a, t, s, c in rows], schema=ALIAS_MENTIONS))
    d.commit(code_version="t", params={}, inputs={})
    return d


def all_buckets(d: Dataset, n_buckets: int) -> list[pa.Table]:
    return [reduce_bucket(d, b) for b in range(n_buckets)]


def as_counter(table: pa.Table) -> Counter:
    c = Counter()
    for r in table.to_pylist():
        key = (r["alias"], r["title"], r["source"])
        assert key not in c, f"{key} appears twice"
        c[key] = r["count"]
    return c


def direct(parts: list[list[tuple]]) -> Counter:
    """The aliases computed in one place, without buckets, datasets or Arrow."""
    rows = [r for part in parts for r in part]
    redirect_of = {a: t for a, t, s, _ in rows if s == "redirect"}
    out = Counter()
    for alias, target, source, count in rows:
        title = redirect_of.get(target, target) if source == "anchor" else target
        if alias.lower() != title.lower():
            out[(alias, title, source)] += count
    return out


NYC_PARTS = [
    [("Big Apple", "NYC", "anchor", 2), ("NYC", "New York City", "redirect", 1),
     ("the city", "New York City", "anchor", 1), ("Gotham", "New York City", "anchor", 4)],
    [("Big Apple", "New York City", "anchor", 3), ("new york city", "NYC", "anchor", 5),
     ("New York city", "New York City", "redirect", 1), ("Gotham", "New York City", "anchor", 1),
     ("the city", "Paris", "anchor", 7)],
]


@pytest.mark.parametrize("n_buckets", [1, 2, 5])
def test_reduce_sums_resolves_and_drops_same_names(root, n_buckets):
    d = mentions_dataset(root, NYC_PARTS, n_buckets)
    got = Counter()
    for t in all_buckets(d, n_buckets):
        got.update(as_counter(t))
    assert got == Counter({
        ("Big Apple", "New York City", "anchor"): 5,  # 2 through the NYC redirect + 3 direct, over two parts
        ("Gotham", "New York City", "anchor"): 5,
        ("the city", "New York City", "anchor"): 1,
        ("the city", "Paris", "anchor"): 7,
        ("NYC", "New York City", "redirect"): 1,
        # "new york city" -> NYC -> New York City and the "New York city" redirect name the page itself
    })


def test_redirect_rows_keep_their_own_target_whatever_the_buckets(root):
    # A double redirect (The Big Apple -> NYC -> New York City) is not followed for the
    # redirect row, whether or not an anchor to NYC shares its bucket.
    parts = [[("NYC", "New York City", "redirect", 1), ("The Big Apple", "NYC", "redirect", 1),
              ("Gotham", "NYC", "anchor", 2)]]
    results = []
    for n in (1, 2, 3, 8, 16):
        d = mentions_dataset(root, parts, n, version=f"m{n}")
        got = Counter()
        for t in all_buckets(d, n):
            got.update(as_counter(t))
        results.append(got)
    assert all(r == results[0] for r in results)
    assert results[0] == Counter({("NYC", "New York City", "redirect"): 1, ("The Big Apple", "NYC", "redirect"): 1,
                                  ("Gotham", "New York City", "anchor"): 2})


def _random_parts(seed: int) -> list[list[tuple]]:
    rnd = random.Random(seed)
    titles = [f"Title {i}" for i in range(12)] + ["Caf\u00e9 society", "AT&T"]
    redirect_names = [f"Redirect {i}" for i in range(8)] + ["title 3"]  # one differs from its target by case only
    redirects = {r: rnd.choice(titles) for r in redirect_names}
    redirects["title 3"] = "Title 3"
    redirects["Redirect 7"] = "Redirect 0"  # a double redirect
    anchor_texts = [f"anchor {i}" for i in range(30)] + ["TITLE 1", "redirect 2"]
    parts = []
    placed = set()
    for _ in range(3):
        rows = []
        for _ in range(60):
            rows.append((rnd.choice(anchor_texts), rnd.choice(titles + redirect_names), "anchor", rnd.randint(1, 5)))
        for r, t in redirects.items():
            if r not in placed and rnd.random() < 0.5:
                rows.append((r, t, "redirect", 1))
                placed.add(r)
        parts.append(rows)
    for r, t in redirects.items():
        if r not in placed:
            parts[-1].append((r, t, "redirect", 1))
    return parts


@pytest.mark.parametrize("seed, n_buckets", [(0, 1), (1, 3), (2, 8), (3, 5)])
def test_all_buckets_together_equal_the_direct_computation(root, seed, n_buckets):
    parts = _random_parts(seed)
    d = mentions_dataset(root, parts, n_buckets)
    tables = all_buckets(d, n_buckets)
    seen_aliases: dict[str, int] = {}
    total = Counter()
    for b, t in enumerate(tables):
        assert t.schema == ALIASES
        for alias in set(t["alias"].to_pylist()):
            assert alias_bucket(alias, n_buckets) == b
            assert alias not in seen_aliases, f"{alias!r} in buckets {seen_aliases[alias]} and {b}"
            seen_aliases[alias] = b
        c = as_counter(t)
        assert not set(c) & set(total)
        total.update(c)
    expected = direct(parts)
    assert total == expected
    assert sum(total.values()) == sum(expected.values()) > 0


def test_bucket_output_is_sorted_by_title_then_count(root):
    parts = [[("a", "T2", "anchor", 1), ("b", "T1", "anchor", 5), ("c", "T1", "anchor", 9),
              ("d", "T1", "anchor", 5), ("e", "T2", "anchor", 3)]]
    d = mentions_dataset(root, parts, 1)
    t = reduce_bucket(d, 0)
    assert list(zip(t["title"].to_pylist(), t["count"].to_pylist(), t["alias"].to_pylist())) == [
        ("T1", 9, "c"), ("T1", 5, "b"), ("T1", 5, "d"), ("T2", 3, "e"), ("T2", 1, "a")]


def test_empty_bucket(root):
    d = mentions_dataset(root, [[("only", "Target", "anchor", 1)]], 4)
    empty = [b for b in range(4) if b != alias_bucket("only", 4)]
    for b in empty:
        t = reduce_bucket(d, b)
        assert t.num_rows == 0 and t.schema == ALIASES


def test_write_alias_bucket_reuses_an_existing_part(root):
    d = mentions_dataset(root, NYC_PARTS, 1)
    out = plan_aliases(d, {"alias_buckets": 1})
    assert out.name == "aliases" and out.schema == ALIASES
    n = write_alias_bucket(d, 0, out)
    assert n == out.read_part(0).num_rows == 5
    st = os.stat(part_file(out, 0))
    assert write_alias_bucket(d, 0, out) == -1
    st2 = os.stat(part_file(out, 0))
    assert (st.st_ino, st.st_mtime_ns) == (st2.st_ino, st2.st_mtime_ns)


def test_plan_aliases_version_follows_input_and_params(root):
    d1 = Dataset(root, "alias_mentions", "m1", ALIAS_MENTIONS)
    d2 = Dataset(root, "alias_mentions", "m2", ALIAS_MENTIONS)
    v = plan_aliases(d1, {"alias_buckets": 4}).version
    assert v == plan_aliases(d1, {"alias_buckets": 4}).version
    assert v != plan_aliases(d2, {"alias_buckets": 4}).version
    assert v != plan_aliases(d1, {"alias_buckets": 8}).version
