"""The date of a Wikipedia dump, read from its file's name, and how it orders against the dump a
build's reuse stores were made from.

Wikimedia names a dump's files ``<wiki>-<YYYYMMDD>-<what>`` (``enwiki-20240601-pages-articles-
multistream.xml.bz2``, ``enwiki-20240601-pages-articles1.xml-p1p41242.bz2``); that date is the one
thing a dump says about when it was made (its ``<siteinfo>`` holds no date). A name without one
(``enwiki-latest-...``, a JSON lines file, a renamed copy) gives none, and nothing is compared.
Reuse is by content, so an older dump is reused from correctly: the order is reported, not refused.
"""
from __future__ import annotations

import datetime as dt
import re

# eight digits standing alone between the name's separators: not a page-id range (p20240601p...)
_DATE = re.compile(r"(?:^|[-_.])([0-9]{8})(?=[-_.]|$)")


def dump_date(source: str) -> str | None:
    """The ISO date in a dump file's name (its last path segment), the first that is a real date."""
    name = source.rsplit("/", 1)[-1]  # the file's own name, not a folder's
    for found in _DATE.finditer(name):
        try:
            return dt.datetime.strptime(found.group(1), "%Y%m%d").date().isoformat()
        except ValueError:  # eight digits that are no date (20241340)
            continue
    return None


def input_dump_date(inputs: dict) -> str | None:
    """The date of a raw_pages input, from its manifest's ``inputs`` (``source``, or ``sources`` in
    reading order): the newest of its files' dates (split files of one dump share it), or None."""
    sources = inputs.get("sources") or ([inputs["source"]] if inputs.get("source") else [])
    dates = [d for d in map(dump_date, sources) if d is not None]
    return max(dates) if dates else None


def recorded_date(value: object) -> str | None:
    """A dump date as a manifest recorded it (an ISO date string), or None for anything else: a
    reuse store's manifest is a cache, and a damaged one never fails a build."""
    try:
        return dt.date.fromisoformat(value).isoformat() if isinstance(value, str) else None
    except ValueError:
        return None


def dump_order(date: str | None, previous_date: str | None, same_input: bool) -> str | None:
    """"older" when this dump's date is before the previous build's, "same date" when the dates are
    equal but the input is another (another file of that date, or other read settings); else None
    (newer, the same input, or a date unknown)."""
    if date is None or previous_date is None:
        return None
    if date < previous_date:
        return "older"
    return "same date" if date == previous_date and not same_input else None
