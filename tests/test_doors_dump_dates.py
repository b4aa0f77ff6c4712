"""The date of a dump from its file's name (storage/dump_dates.py), driven with generated names: a
Wikimedia name gives its date wherever the file lies, a page-id range or a run of digits that is
no date never reads as one, and the order of two dumps is said only when both dates are known."""
from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from storage.dump_dates import dump_date, dump_order, input_dump_date

dates = st.dates(dt.date(1990, 1, 1), dt.date(2099, 12, 31))
wikis = st.from_regex(r"[a-z]{2,8}wiki", fullmatch=True)
rests = st.sampled_from(["pages-articles-multistream.xml.bz2", "pages-articles-multistream-index.txt.bz2",
                         "pages-articles.xml", "pages-meta-current.xml.gz"])
folders = st.sampled_from(["", "data/", "/mnt/dumps/", "s3://bucket/enwiki/20991231/", "memory://root/x-19990101/",
                           "https://user:secret@host/dumps/"])
page_ranges = st.tuples(st.integers(0, 99_999_999), st.integers(0, 99_999_999)).map(lambda r: f"p{r[0]}p{r[1]}")


def name(wiki: str, date: dt.date, rest: str) -> str:
    return f"{wiki}-{date:%Y%m%d}-{rest}"


@given(folders, wikis, dates, rests)
def test_a_dump_name_gives_its_date_wherever_it_lies(folder, wiki, date, rest):
    assert dump_date(folder + name(wiki, date, rest)) == date.isoformat()


@given(wikis, dates, st.integers(1, 40), page_ranges)
def test_a_split_files_page_range_is_not_its_date(wiki, date, n, pages):
    """``enwiki-20240601-pages-articles27.xml-p68475910p69975909.bz2``: the date, never the range."""
    assert dump_date(f"{wiki}-{date:%Y%m%d}-pages-articles{n}.xml-{pages}.bz2") == date.isoformat()
    assert dump_date(f"{wiki}-latest-pages-articles{n}.xml-{pages}.bz2") is None


@given(folders, st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Nd"]), max_size=30))
def test_a_name_without_eight_digits_has_no_date(folder, text):
    assert dump_date(folder + text.replace("/", "_")) is None


@given(st.integers(0, 99_999_999), wikis, rests)
def test_eight_digits_are_a_date_only_when_they_are_one(digits, wiki, rest):
    raw = f"{digits:08d}"
    try:
        expected = dt.datetime.strptime(raw, "%Y%m%d").date().isoformat()
    except ValueError:
        expected = None
    assert dump_date(f"{wiki}-{raw}-{rest}") == expected
    assert dump_date(f"{wiki}-{raw}9-{rest}") is None  # nine digits: no date


@given(st.lists(st.one_of(st.builds(name, wikis, dates, rests), st.just("enwiki-latest-pages-articles.xml"),
                          st.just("ovos_summaries.jsonl")), min_size=1, max_size=4))
def test_an_input_of_several_files_is_as_new_as_its_newest_dated_one(sources):
    known = [dump_date(s) for s in sources if dump_date(s) is not None]
    expected = max(known) if known else None
    assert input_dump_date({"sources": sources}) == expected
    assert input_dump_date({"source": sources[0]}) == dump_date(sources[0])
    assert input_dump_date({}) is None


@given(st.none() | dates, st.none() | dates, st.booleans())
def test_the_order_is_said_only_when_both_dates_are_known(date, before, same_input):
    iso = (lambda d: d and d.isoformat())
    order = dump_order(iso(date), iso(before), same_input)
    if date is None or before is None or date > before or (date == before and same_input):
        assert order is None
    elif date < before:
        assert order == "older"
    else:
        assert order == "same date"
