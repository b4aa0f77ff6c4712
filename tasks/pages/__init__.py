"""Stage 2: one `raw_pages` part -> `pages`, `sentences`, `alias_mentions`, `quarantine`.

Runs once per partition on a Dask worker. Every raw record lands in exactly one of
`pages` (kept or filtered, with a reason) or `quarantine` (with a reason and its raw
bytes), so the counts reconcile: pages read = kept + filtered + quarantined. A page id
seen before (the same source listed twice, a repeated id in JSON lines) is quarantined as
`duplicate_page_id`: ids name pages and make sentence ids, so each must be unique.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import syntok.segmenter as segmenter

from storage.buckets import bucket_of, buckets_for
from storage.datasets import Dataset
from storage.schemas import ALIAS_MENTIONS, PAGES, QUARANTINE, SENTENCES
from tasks.pages import wikitext

CODE_VERSION = "pages-4"
# alias_mentions rows per page read (the sample's 206 enwiki pages: 36.6; rounded up)
MENTION_ROWS_PER_PAGE = 40


def alias_bucket_count(pages: int) -> int:
    """The alias reducers for ``pages`` read, when the flow leaves ``alias_buckets`` unset."""
    return buckets_for(pages, MENTION_ROWS_PER_PAGE)
SENTENCE_ID_STRIDE = 1_000_000  # sentence_id = page_id * stride + index
_INT64 = 2**63


@dataclass(frozen=True)
class PageOutputs:
    """The four datasets this stage writes, one part each per raw part."""

    pages: Dataset
    sentences: Dataset
    alias_mentions: Dataset
    quarantine: Dataset

    def all(self) -> tuple[Dataset, ...]:
        return (self.pages, self.sentences, self.alias_mentions, self.quarantine)


alias_bucket = bucket_of  # the alias reducer an alias goes to


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of one paragraph with syntok, sliced from the original text by offset."""
    out = []
    for para in segmenter.analyze(paragraph):
        for sentence in para:
            if not sentence:
                continue
            start = sentence[0].offset
            end = sentence[-1].offset + len(sentence[-1].value)
            text = paragraph[start:end].strip()
            if text:
                out.append(text)
    return out


_CLOSERS = "\"'\u201d\u2019)]"


def _keep_sentence(text: str, min_words: int, max_chars: int) -> bool:
    # Prose ends in terminal punctuation; list items, captions and bibliography lines
    # that survive markup removal mostly don't, and they are not sentences to parse.
    return (
        len(text) <= max_chars
        and len(text.split()) >= min_words
        and text.rstrip(_CLOSERS).endswith((".", "!", "?"))
        and any(c.isalpha() for c in text)
    )


def find_duplicate_pages(raw: Dataset) -> list[np.ndarray]:
    """Per raw part, the readable records whose page_id an earlier readable record has.

    Each entry is an (n, 2) int64 array of (seq, seq of the first record with that id),
    empty for almost every part. Reads only the `seq` and `page_id` columns and sorts them
    once (23M records, a full dump: 18 s and 1.2 GB here, plus reading the parts).
    """
    seqs, ids = [], []
    for i in range(len(raw.parts())):
        t = raw.read_part(i, columns=["seq", "page_id"],
                          filter=pc.field("error").is_null() & pc.field("page_id").is_valid())
        seqs.append(t["seq"].to_numpy())
        ids.append(t["page_id"].to_numpy())
    part_ends = np.cumsum([len(s) for s in seqs])
    seq = np.concatenate(seqs) if seqs else np.empty(0, np.int64)
    page_id = np.concatenate(ids) if ids else np.empty(0, np.int64)
    del seqs, ids
    order = np.lexsort((seq, page_id))  # by page_id, then input order
    sorted_ids = page_id[order]
    repeats = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1]) + 1  # positions in `order`
    group_start = np.ones(len(order), dtype=bool)
    group_start[repeats] = False
    starts = np.flatnonzero(group_start)
    first = starts[np.searchsorted(starts, repeats, side="right") - 1]
    pairs = np.stack([seq[order[repeats]], seq[order[first]]], axis=1).astype(np.int64)
    rows = order[repeats]  # row numbers in the concatenation, which the parts cut in turn
    by_row = np.argsort(rows, kind="stable")
    pairs, rows = pairs[by_row], rows[by_row]
    bounds = np.searchsorted(rows, np.concatenate([[0], part_ends]))
    return [pairs[bounds[i]:bounds[i + 1]] for i in range(len(part_ends))]


def _sentence_ids_fit(page_id: int) -> bool:
    # page_id * stride + index is unique while index < stride and the page's whole block of
    # ids fits in int64 (a JSON-lines id can be any integer).
    return -_INT64 <= page_id * SENTENCE_ID_STRIDE and (page_id + 1) * SENTENCE_ID_STRIDE <= _INT64


def extract_page_rows(
    raw: list[dict],
    *,
    duplicates: Mapping[int, int] | None = None,
    min_sentence_words: int = 3,
    max_sentence_chars: int = 1000,
) -> tuple[list[dict], list[dict], Counter, list[dict], dict]:
    """Plain function over raw records: (pages, sentences, mention counts, quarantine, stats).

    ``duplicates`` maps the seq of a record whose page_id was seen before to the seq of the
    first record with that id (see `find_duplicate_pages`); those records are quarantined.
    """
    duplicates = duplicates or {}
    pages, sentences, quarantine = [], [], []
    mentions: Counter = Counter()
    stats = Counter()
    for r in raw:
        if r["error"]:
            quarantine.append(_quarantined(r, r["error"], r["error_detail"], r["raw"]))
            continue
        if r["seq"] in duplicates:
            quarantine.append(_quarantined(r, "duplicate_page_id", f"page_id {r['page_id']} was first read at seq "
                                           f"{duplicates[r['seq']]}", _text_bytes(r)))
            continue
        if not _sentence_ids_fit(r["page_id"]):
            quarantine.append(_quarantined(r, "page_id_out_of_range", f"page_id {r['page_id']} * "
                                           f"{SENTENCE_ID_STRIDE} does not fit a 64-bit sentence id", _text_bytes(r)))
            continue
        base = {
            "page_id": r["page_id"], "title": r["title"], "namespace": r["namespace"],
            "is_redirect": False, "redirect_target": None, "text": None, "n_sentences": 0,
        }
        if r["namespace"] != 0:
            pages.append({**base, "kind": "other_namespace", "status": "filtered", "filter_reason": "namespace"})
            continue
        target = r["redirect_target"] or (wikitext.redirect_target(r["text"]) if r["text_format"] == "wikitext" else None)
        if target:
            target = wikitext.normalize_title(target)
            pages.append({**base, "is_redirect": True, "redirect_target": target, "kind": "redirect",
                          "status": "filtered", "filter_reason": "redirect"})
            if target.casefold() != r["title"].casefold():
                mentions[(r["title"], target, "redirect")] += 1
            continue
        try:
            if r["text_format"] == "wikitext":
                text, code = wikitext.clean(r["text"])
                kind = wikitext.page_kind(r["title"], code)
                links = wikitext.anchors(code) if kind == "article" else []
            else:
                text = "\n".join(wikitext.paragraphs(r["text"]))
                kind, links = wikitext.page_kind(r["title"]), []
        except Exception as exc:  # mwparserfromhell is lenient; anything it raises is bad markup
            quarantine.append(_quarantined(r, "malformed_markup", f"{type(exc).__name__}: {exc}", _text_bytes(r)))
            continue
        if kind != "article":
            pages.append({**base, "kind": kind, "text": text, "status": "filtered", "filter_reason": kind})
            continue
        kept = []
        for paragraph in text.split("\n"):
            for s in split_sentences(paragraph):
                if _keep_sentence(s, min_sentence_words, max_sentence_chars):
                    kept.append(s)
                else:
                    stats["sentences_filtered"] += 1
        if len(kept) > SENTENCE_ID_STRIDE:
            quarantine.append(_quarantined(r, "too_many_sentences", f"{len(kept)} sentences, over the "
                                           f"{SENTENCE_ID_STRIDE} a page's sentence ids can number", _text_bytes(r)))
            continue
        for alias, tgt in links:
            mentions[(alias, tgt, "anchor")] += 1
        if not kept:
            pages.append({**base, "kind": kind, "text": text, "status": "filtered", "filter_reason": "no_sentences"})
            continue
        pages.append({**base, "kind": kind, "text": text, "status": "kept", "filter_reason": None,
                      "n_sentences": len(kept)})
        for i, s in enumerate(kept):
            sentences.append({"sentence_id": r["page_id"] * SENTENCE_ID_STRIDE + i,
                              "page_id": r["page_id"], "index": i, "text": s})
    stats["sentences_kept"] = len(sentences)
    stats["anchors"] = sum(v for (_, _, src), v in mentions.items() if src == "anchor")
    return pages, sentences, mentions, quarantine, dict(stats)


def _quarantined(r: dict, reason: str, detail: str | None, raw: bytes | None) -> dict:
    return {"seq": r["seq"], "page_id": r["page_id"], "title": r["title"], "reason": reason,
            "detail": detail, "raw": raw}


def _text_bytes(r: dict) -> bytes:
    """A readable record's text as the raw bytes of its quarantine row."""
    return (r["text"] or "").encode("utf-8", "surrogatepass")


def extract_part(
    raw: Dataset,
    index: int,
    out: PageOutputs,
    duplicates: np.ndarray,
    *,
    n_buckets: int = 8,
    min_sentence_words: int = 3,
    max_sentence_chars: int = 1000,
) -> dict:
    """Process raw part ``index``; a part whose four outputs exist is reused, not redone.

    ``duplicates``: this part's entry of `find_duplicate_pages`. The part's counts are stored
    in its `pages` part (Parquet metadata), so a resumed run's totals include reused parts.
    """
    if all(d.has_part(index) for d in out.all()):
        return {"part": index, "reused": True}
    records = raw.read_part(index).to_pylist()
    pages, sentences, mentions, quarantine, stats = extract_page_rows(
        records, duplicates=dict(np.asarray(duplicates, dtype=np.int64).reshape(-1, 2).tolist()),
        min_sentence_words=min_sentence_words, max_sentence_chars=max_sentence_chars,
    )
    counts = {"records": len(records), **stats}
    mention_rows = [
        {"bucket": alias_bucket(alias, n_buckets), "alias": alias, "target": target, "source": src, "count": n}
        for (alias, target, src), n in mentions.items()
    ]
    # A part counts as done when all four exist; `pages` goes last and carries the counts.
    out.sentences.write_part(index, pa.Table.from_pylist(sentences, schema=SENTENCES))
    out.alias_mentions.write_part(index, pa.Table.from_pylist(mention_rows, schema=ALIAS_MENTIONS))
    out.quarantine.write_part(index, pa.Table.from_pylist(quarantine, schema=QUARANTINE))
    out.pages.write_part(index, pa.Table.from_pylist(pages, schema=PAGES), metadata={"stats": counts})
    return {"part": index, "reused": False, **counts}


def plan_page_outputs(raw: Dataset, params: dict) -> PageOutputs:
    from storage.datasets import dataset_version
    from storage.schemas import ALL

    def ds(name: str) -> Dataset:
        return Dataset(raw.root, name, dataset_version(name, CODE_VERSION, params, {"raw_pages": raw.version}), ALL[name])

    return PageOutputs(ds("pages"), ds("sentences"), ds("alias_mentions"), ds("quarantine"))


def commit_page_outputs(out: PageOutputs, raw: Dataset, params: dict) -> dict:
    """Manifests of the four outputs, with counts summed from the stored parts (reused or not)."""
    if all(d.is_complete() for d in out.all()):  # a rerun that changed nothing keeps the manifests
        return {d.name: d.reuse() for d in out.all()}
    totals: Counter = Counter()
    for i in range(len(raw.parts())):
        totals.update(out.pages.part_metadata(i)["stats"])
    if totals["records"] != raw.manifest()["rows"]:
        raise AssertionError(f"pages parts account for {totals['records']} records, raw_pages has "
                             f"{raw.manifest()['rows']}")
    manifests = {}
    for d in out.all():
        manifests[d.name] = d.commit(code_version=CODE_VERSION, params=params,
                                     inputs={"raw_pages": raw.version}, stats=dict(totals))
    return manifests


from prefect import task, unmapped  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402

from runs.steps import PREFECT, Steps  # noqa: E402


@task(name="plan-pages", cache_policy=NONE)
def plan_page_outputs_task(raw: Dataset, params: dict) -> PageOutputs:
    return plan_page_outputs(raw, params)


@task(name="find-duplicate-pages", cache_policy=NONE)
def find_duplicate_pages_task(raw: Dataset) -> list[np.ndarray]:
    duplicates = find_duplicate_pages(raw)
    get_run_logger().info("%d records repeat an earlier page_id", sum(len(d) for d in duplicates))
    return duplicates


@task(name="extract-part", task_run_name="extract-part-{index}", cache_policy=NONE, retries=1)
def extract_part_task(raw: Dataset, index: int, out: PageOutputs, params: dict, duplicates: np.ndarray) -> dict:
    result = extract_part(raw, index, out, duplicates, n_buckets=params["alias_buckets"],
                          min_sentence_words=params["min_sentence_words"],
                          max_sentence_chars=params["max_sentence_chars"])
    get_run_logger().info("part %d: %s", index, result)
    return result


@task(name="commit-pages", cache_policy=NONE)
def commit_page_outputs_task(out: PageOutputs, raw: Dataset, params: dict) -> dict:
    return commit_page_outputs(out, raw, params)


def pages_stage(raw: Dataset, params: dict, *,
                steps: Steps = PREFECT) -> tuple[PageOutputs, dict]:
    """The stage in its flow: raw_pages -> pages, sentences, alias_mentions, quarantine, one
    extraction task per raw part; returns the outputs and their committed manifests."""
    steps.stage("pages")
    pages = steps.call(plan_page_outputs_task, raw, params)
    duplicates = steps.call(find_duplicate_pages_task, raw)
    steps.map(extract_part_task, unmapped(raw), range(len(raw.parts())), unmapped(pages), unmapped(params),
              duplicates)
    return pages, steps.call(commit_page_outputs_task, pages, raw, params)
