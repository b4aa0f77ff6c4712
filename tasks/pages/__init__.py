"""Stage 2: one `raw_pages` part -> `pages`, `sentences`, `alias_mentions`, `quarantine`.

Runs once per partition on a Dask worker. Every raw record lands in exactly one of
`pages` (kept or filtered, with a reason) or `quarantine` (with a reason and its raw
bytes), so the counts reconcile: pages read = kept + filtered + quarantined. A page id
seen before (the same source listed twice, a repeated id in JSON lines) is quarantined as
`duplicate_page_id`: ids name pages and make sentence ids, so each must be unique.

Each extracted page's outputs but its id (`extract_page`, a function of its PAGE_CONTENT) are kept
in the `page_extracts` reuse store (storage/reuse.py), so the next dump's build extracts only new
and edited pages; the rows are stamped with ids by the same `extract_page_rows` either way.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import syntok.segmenter as segmenter

from storage.buckets import bucket_of, buckets_for
from storage.datasets import Dataset
from storage.dump_dates import dump_order, input_dump_date, recorded_date
from storage.reuse import (
    Keys, ReuseStore, commit_store, content_key, cpu_timed, encode_json, fetch, keys_of, library_versions, log_plan,
    plan_reuse, plan_store, write_entries,
)
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

    reuse: ReuseStore | None = None  # the page extracts kept for the next build (None: nothing to do)

    def all(self) -> tuple[Dataset, ...]:
        return (self.pages, self.sentences, self.alias_mentions, self.quarantine)

    def written(self) -> tuple[Dataset, ...]:
        """What a part's task writes: the four, and the reuse store's part."""
        return (*self.all(), *((self.reuse.entries,) if self.reuse is not None else ()))


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


# what a page's outputs are a function of, besides the settings: its key's fields (no id: a page
# moved to another id reuses its extract, the ids stamped afresh)
PAGE_CONTENT = ("title", "namespace", "redirect_target", "text_format", "text")
_STR = (str, type(None))
_PAGE_TYPES = {"is_redirect": bool, "redirect_target": _STR, "kind": str, "status": str, "filter_reason": _STR,
               "text": _STR, "n_sentences": int}  # a pages row but its PAGE_CONTENT's columns
EXTRACT_FIELDS = {"page": (dict, type(None)), "sentences": list, "mentions": list, "quarantine": (list, type(None)),
                  "filtered": int}


def page_key(r: dict) -> bytes:
    return content_key(*(r[f] for f in PAGE_CONTENT))


def _not_extracted(r: dict, duplicates: Mapping[int, int]) -> tuple[str, str | None, bytes | None] | None:
    """Why a raw record is quarantined before its text is read (reason, detail, raw bytes), or None."""
    if r["error"]:
        return r["error"], r["error_detail"], r["raw"]
    if r["seq"] in duplicates:
        return "duplicate_page_id", f"page_id {r['page_id']} was first read at seq {duplicates[r['seq']]}", _text_bytes(r)
    if not _sentence_ids_fit(r["page_id"]):
        return ("page_id_out_of_range", f"page_id {r['page_id']} * {SENTENCE_ID_STRIDE} does not fit a 64-bit "
                "sentence id", _text_bytes(r))
    return None


def extract_page(r: dict, min_sentence_words: int = 3, max_sentence_chars: int = 1000) -> dict:
    """One readable page's outputs from its PAGE_CONTENT alone (what the reuse store keeps): its
    `pages` row but the id (or a quarantine reason and detail), its kept sentences, its alias
    mentions in the order first seen, and how many sentences were filtered."""
    out = {"page": None, "sentences": [], "mentions": [], "quarantine": None, "filtered": 0}
    base = {"is_redirect": False, "redirect_target": None, "text": None, "n_sentences": 0}
    if r["namespace"] != 0:
        out["page"] = {**base, "kind": "other_namespace", "status": "filtered", "filter_reason": "namespace"}
        return out
    target = r["redirect_target"] or (wikitext.redirect_target(r["text"]) if r["text_format"] == "wikitext" else None)
    if target:
        target = wikitext.normalize_title(target)
        out["page"] = {**base, "is_redirect": True, "redirect_target": target, "kind": "redirect",
                       "status": "filtered", "filter_reason": "redirect"}
        if target.casefold() != r["title"].casefold():
            out["mentions"] = [[r["title"], target, "redirect", 1]]
        return out
    try:
        if r["text_format"] == "wikitext":
            text, code = wikitext.clean(r["text"])
            kind = wikitext.page_kind(r["title"], code)
            links = wikitext.anchors(code) if kind == "article" else []
        else:
            text = "\n".join(wikitext.paragraphs(r["text"]))
            kind, links = wikitext.page_kind(r["title"]), []
    except Exception as exc:  # mwparserfromhell is lenient; anything it raises is bad markup
        out["quarantine"] = ["malformed_markup", f"{type(exc).__name__}: {exc}"]
        return out
    if kind != "article":
        out["page"] = {**base, "kind": kind, "text": text, "status": "filtered", "filter_reason": kind}
        return out
    for paragraph in text.split("\n"):
        for s in split_sentences(paragraph):
            if _keep_sentence(s, min_sentence_words, max_sentence_chars):
                out["sentences"].append(s)
            else:
                out["filtered"] += 1
    if len(out["sentences"]) > SENTENCE_ID_STRIDE:
        n, out["sentences"] = len(out["sentences"]), []
        out["quarantine"] = ["too_many_sentences", f"{n} sentences, over the {SENTENCE_ID_STRIDE} a page's "
                             "sentence ids can number"]
        return out
    out["mentions"] = [[alias, tgt, "anchor", n] for (alias, tgt), n in Counter(links).items()]
    if not out["sentences"]:
        out["page"] = {**base, "kind": kind, "text": text, "status": "filtered", "filter_reason": "no_sentences"}
    else:
        out["page"] = {**base, "kind": kind, "text": text, "status": "kept", "filter_reason": None,
                       "n_sentences": len(out["sentences"])}
    return out


def decode_extract(value: bytes) -> dict:
    """A reuse entry's value back into `extract_page`'s form, or ValueError / TypeError / KeyError."""
    e = json.loads(value)
    if not isinstance(e, dict) or set(e) != set(EXTRACT_FIELDS) or not all(
            isinstance(e[k], t) for k, t in EXTRACT_FIELDS.items()) or (e["page"] is None) == (e["quarantine"] is None):
        raise ValueError("not a page extract")
    if e["page"] is not None and (set(e["page"]) != set(_PAGE_TYPES) or not all(
            isinstance(e["page"][k], t) for k, t in _PAGE_TYPES.items())
            or e["page"]["n_sentences"] != len(e["sentences"])):
        raise ValueError("not a pages row")
    if not all(isinstance(s, str) for s in e["sentences"]) or not all(
            isinstance(m, list) and len(m) == 4 and all(isinstance(x, str) for x in m[:3]) and type(m[3]) is int
            for m in e["mentions"]):
        raise ValueError("not sentences and mentions")
    if e["quarantine"] is not None and not (len(e["quarantine"]) == 2 and all(isinstance(x, str) for x in e["quarantine"])):
        raise ValueError("not a quarantine reason")
    return e


def extract_page_rows(
    raw: list[dict],
    *,
    duplicates: Mapping[int, int] | None = None,
    min_sentence_words: int = 3,
    max_sentence_chars: int = 1000,
    extracts: dict[int, dict] | None = None,
) -> tuple[list[dict], list[dict], Counter, list[dict], dict]:
    """Plain function over raw records: (pages, sentences, mention counts, quarantine, stats).

    ``duplicates`` maps the seq of a record whose page_id was seen before to the seq of the
    first record with that id (see `find_duplicate_pages`); those records are quarantined.
    ``extracts``: record position -> its `extract_page` where known (reused); the others are
    computed and added to it, and the CPU seconds that took are ``stats["compute_s"]``.
    """
    duplicates = duplicates or {}
    extracts = {} if extracts is None else extracts
    pages, sentences, quarantine = [], [], []
    mentions: Counter = Counter()
    stats = Counter()
    compute_s = 0.0
    for i, r in enumerate(raw):
        refused = _not_extracted(r, duplicates)
        if refused is not None:
            quarantine.append(_quarantined(r, *refused))
            continue
        if i not in extracts:
            extracts[i], seconds = cpu_timed(extract_page, r, min_sentence_words, max_sentence_chars)
            compute_s += seconds
        e = extracts[i]
        if e["filtered"]:
            stats["sentences_filtered"] += e["filtered"]
        if e["quarantine"] is not None:
            quarantine.append(_quarantined(r, *e["quarantine"], _text_bytes(r)))
            continue
        pages.append({"page_id": r["page_id"], "title": r["title"], "namespace": r["namespace"], **e["page"]})
        for alias, tgt, src, n in e["mentions"]:
            mentions[(alias, tgt, src)] += n
        for j, s in enumerate(e["sentences"]):
            sentences.append({"sentence_id": r["page_id"] * SENTENCE_ID_STRIDE + j,
                              "page_id": r["page_id"], "index": j, "text": s})
    stats["sentences_kept"] = len(sentences)
    stats["anchors"] = sum(v for (_, _, src), v in mentions.items() if src == "anchor")
    return pages, sentences, mentions, quarantine, {**stats, "compute_s": compute_s}


def _quarantined(r: dict, reason: str, detail: str | None, raw: bytes | None) -> dict:
    return {"seq": r["seq"], "page_id": r["page_id"], "title": r["title"], "reason": reason,
            "detail": detail, "raw": raw}


def _text_bytes(r: dict) -> bytes:
    """A readable record's text as the raw bytes of its quarantine row."""
    return (r["text"] or "").encode("utf-8", "surrogatepass")


def _duplicates(duplicates: np.ndarray) -> dict[int, int]:
    return dict(np.asarray(duplicates, dtype=np.int64).reshape(-1, 2).tolist())


def page_keys(raw: Dataset, index: int, duplicates: np.ndarray) -> tuple[Keys, int]:
    """The content keys of raw part ``index``'s pages whose text is extracted, and how many there are
    not (unreadable, a repeated id, an id out of range: quarantined as before)."""
    records = raw.read_part(index, columns=["seq", "page_id", "raw", "error", "error_detail", *PAGE_CONTENT]).to_pylist()
    dup = _duplicates(duplicates)
    keyed = [(i, r) for i, r in enumerate(records) if _not_extracted(r, dup) is None]
    return keys_of((i for i, _ in keyed), (r["page_id"] for _, r in keyed), (page_key(r) for _, r in keyed)), \
        len(records) - len(keyed)


def extract_part(
    raw: Dataset,
    index: int,
    out: PageOutputs,
    duplicates: np.ndarray,
    *,
    n_buckets: int = 8,
    min_sentence_words: int = 3,
    max_sentence_chars: int = 1000,
    refs: np.ndarray | None = None,
) -> dict:
    """Process raw part ``index``; a part whose outputs exist is reused, not redone.

    ``duplicates``: this part's entry of `find_duplicate_pages`. ``refs``: this part's entry of the
    reuse plan (`plan_page_reuse`): pages whose extract the previous store holds, read through
    `storage.reuse.fetch` instead of extracted. The part's counts are stored in its `pages` part
    (Parquet metadata), so a resumed run's totals include reused parts.
    """
    if all(d.has_part(index) for d in out.written()):
        return {"part": index, "reused": True}
    records = raw.read_part(index).to_pylist()
    dup = _duplicates(duplicates)
    keys = {i: page_key(r) for i, r in enumerate(records) if out.reuse is not None and _not_extracted(r, dup) is None}
    extracts, refused = fetch(out.reuse, refs, keys, decode_extract) if keys and refs is not None else ({}, 0)
    reused = len(extracts)
    pages, sentences, mentions, quarantine, stats = extract_page_rows(
        records, duplicates=dup, min_sentence_words=min_sentence_words, max_sentence_chars=max_sentence_chars,
        extracts=extracts,
    )
    compute_s = stats.pop("compute_s")  # the store's footer keeps it, not the datasets' stats
    counts = {"records": len(records), **stats}
    mention_rows = [
        {"bucket": alias_bucket(alias, n_buckets), "alias": alias, "target": target, "source": src, "count": n}
        for (alias, target, src), n in mentions.items()
    ]
    # A part counts as done when all exist; `pages` goes last and carries the counts.
    out.sentences.write_part(index, pa.Table.from_pylist(sentences, schema=SENTENCES))
    out.alias_mentions.write_part(index, pa.Table.from_pylist(mention_rows, schema=ALIAS_MENTIONS))
    out.quarantine.write_part(index, pa.Table.from_pylist(quarantine, schema=QUARANTINE))
    if out.reuse is not None:
        write_entries(out.reuse, index, list(keys.values()), [records[i]["page_id"] for i in keys],
                      [encode_json(extracts[i]) for i in keys],
                      {"reused": reused, "computed": len(keys) - reused, "refused": refused, "compute_s": compute_s})
    out.pages.write_part(index, pa.Table.from_pylist(pages, schema=PAGES), metadata={"stats": counts})
    return {"part": index, "reused": False, **counts, "pages_reused": reused}


def reuse_identity(params: dict) -> dict:
    """What a page's extract is a function of besides its content (alias buckets are applied per part)."""
    return {"stage": "pages", "code_version": CODE_VERSION, "min_sentence_words": params["min_sentence_words"],
            "max_sentence_chars": params["max_sentence_chars"],
            "libraries": library_versions("mwparserfromhell", "syntok")}


def plan_page_outputs(raw: Dataset, params: dict) -> PageOutputs:
    """The four outputs, and the reuse store to write and read unless all four are committed."""
    from storage.datasets import dataset_version
    from storage.schemas import ALL

    def ds(name: str) -> Dataset:
        return Dataset(raw.root, name, dataset_version(name, CODE_VERSION, params, {"raw_pages": raw.version}), ALL[name])

    out = PageOutputs(ds("pages"), ds("sentences"), ds("alias_mentions"), ds("quarantine"))
    if all(d.is_complete() for d in out.all()):
        return out
    return replace(out, reuse=plan_store(raw.root, "page_extracts", reuse_identity(params), store_inputs(raw)))


def store_inputs(raw: Dataset) -> dict:
    """What a page_extracts store is made from: the raw_pages version and the date of the dump read
    into it (`storage.dump_dates`, from the input's file name: None without one), which the next
    build compares with its own."""
    return {"raw_pages": raw.version,
            "dump_date": input_dump_date(raw.manifest()["inputs"]) if raw.is_complete() else None}


def dump_check(out: PageOutputs, raw: Dataset) -> tuple[dict, str | None]:
    """How this build's dump orders against the one the reused page_extracts was made from: the
    counts (older_dump, same_date_dump: 1 or 0) and what to warn. Either way the pages are reused
    by content, which is right in both directions; the order is said, not refused."""
    inputs = store_inputs(raw)
    before = out.reuse.previous.manifest().get("inputs") if out.reuse is not None and out.reuse.previous is not None \
        else {}
    before = before if isinstance(before, dict) else {}
    before_date = recorded_date(before.get("dump_date"))
    order = dump_order(inputs["dump_date"], before_date, before.get("raw_pages") == raw.version)
    counts = {"older_dump": int(order == "older"), "same_date_dump": int(order == "same date")}
    if order == "older":
        return counts, (f"the dump read is dated {inputs['dump_date']}, older than the one the previous build's "
                        f"page_extracts was made from ({before_date}): pages are reused by content, the "
                        "datasets are this dump's")
    if order == "same date":
        return counts, (f"the dump read is dated {inputs['dump_date']} as the previous build's was, but is another "
                        f"input (raw_pages {raw.version}, before {before.get('raw_pages')}: another file of that date or "
                        "other read settings): pages are reused by content")
    return counts, None


def plan_page_reuse(out: PageOutputs, keyed: list[tuple[Keys, int]], raw: Dataset
                    ) -> tuple[list[np.ndarray], dict, str | None]:
    """Per raw part, the pages whose extract the previous store holds (`storage.reuse.match`), the
    counts (not_keyed, quarantined before extraction, + keyed = records read; `dump_check`'s) and
    what to warn of the dump's date."""
    refs, counts = plan_reuse(out.reuse, [k for k, _ in keyed])
    if not counts:
        return refs, {}, None
    dump_counts, warning = dump_check(out, raw)
    return refs, {**counts, "not_keyed": sum(n for _, n in keyed), **dump_counts}, warning


def commit_page_outputs(out: PageOutputs, raw: Dataset, params: dict, reuse_counts: dict | None = None) -> dict:
    """Manifests of the four outputs, with counts summed from the stored parts (reused or not). The
    reuse store is committed first (its counts in its manifest): a run killed after it still finds
    the four outputs' parts."""
    if out.reuse is not None:
        commit_store(out.reuse, store_inputs(raw), reuse_counts or {})
    if all(d.is_complete() for d in out.all()):  # a rerun that changed nothing keeps the manifests
        return {d.name: d.reuse() for d in out.all()}
    manifests = {}
    totals: Counter = Counter()
    for i in range(len(raw.parts())):
        totals.update(out.pages.part_metadata(i)["stats"])
    if totals["records"] != raw.manifest()["rows"]:
        raise AssertionError(f"pages parts account for {totals['records']} records, raw_pages has "
                             f"{raw.manifest()['rows']}")
    for d in out.all():
        manifests[d.name] = d.commit(code_version=CODE_VERSION, params=params,
                                     inputs={"raw_pages": raw.version}, stats=dict(totals))
    return manifests


from prefect import task, unmapped  # noqa: E402
from prefect.artifacts import create_table_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402

from runs.artifacts import publish  # noqa: E402
from runs.steps import PREFECT, Steps  # noqa: E402
from storage.reuse import counts_table  # noqa: E402


@task(name="plan-pages", cache_policy=NONE)
def plan_page_outputs_task(raw: Dataset, params: dict) -> PageOutputs:
    return plan_page_outputs(raw, params)


@task(name="find-duplicate-pages", cache_policy=NONE)
def find_duplicate_pages_task(raw: Dataset) -> list[np.ndarray]:
    duplicates = find_duplicate_pages(raw)
    get_run_logger().info("%d records repeat an earlier page_id", sum(len(d) for d in duplicates))
    return duplicates


@task(name="page-keys", task_run_name="page-keys-{index}", cache_policy=NONE, retries=1)
def page_keys_task(raw: Dataset, index: int, out: PageOutputs, duplicates: np.ndarray) -> tuple[Keys, int]:
    if out.reuse is None or out.reuse.entries.is_complete():  # nothing to extract
        return keys_of((), (), ()), 0
    return page_keys(raw, index, duplicates)


@task(name="plan-page-reuse", cache_policy=NONE)
def plan_page_reuse_task(out: PageOutputs, keyed: list[tuple[Keys, int]], raw: Dataset
                         ) -> tuple[list[np.ndarray], dict]:
    refs, counts, warning = plan_page_reuse(out, keyed, raw)
    log_plan(out.reuse, counts, "page extracts", get_run_logger())
    if warning:
        get_run_logger().warning(warning)
    return refs, counts


@task(name="extract-part", task_run_name="extract-part-{index}", cache_policy=NONE, retries=1)
def extract_part_task(raw: Dataset, index: int, out: PageOutputs, params: dict, duplicates: np.ndarray,
                      refs: np.ndarray) -> dict:
    result = extract_part(raw, index, out, duplicates, n_buckets=params["alias_buckets"],
                          min_sentence_words=params["min_sentence_words"],
                          max_sentence_chars=params["max_sentence_chars"], refs=refs)
    get_run_logger().info("part %d: %s", index, result)
    return result


@task(name="commit-pages", cache_policy=NONE)
def commit_page_outputs_task(out: PageOutputs, raw: Dataset, params: dict, reuse_counts: dict) -> dict:
    manifests = commit_page_outputs(out, raw, params, reuse_counts)
    if out.reuse is not None:
        publish(create_table_artifact, counts_table(out.reuse.entries.manifest()["stats"]), key="page-reuse",
                description="Pages reused from the previous build's page_extracts, and computed")
    return manifests


def pages_stage(raw: Dataset, params: dict, *,
                steps: Steps = PREFECT) -> tuple[PageOutputs, dict]:
    """The stage in its flow: raw_pages -> pages, sentences, alias_mentions, quarantine, one
    extraction task per raw part, each reusing the extracts of the pages the previous build's
    `page_extracts` holds (their keys first, one task per raw part, then matched in the flow);
    returns the outputs and their committed manifests."""
    steps.stage("pages")
    pages = steps.call(plan_page_outputs_task, raw, params)
    duplicates = steps.call(find_duplicate_pages_task, raw)
    parts = range(len(raw.parts()))
    keyed = steps.map(page_keys_task, unmapped(raw), parts, unmapped(pages), duplicates)
    refs, counts = steps.call(plan_page_reuse_task, pages, keyed, raw)
    steps.map(extract_part_task, unmapped(raw), parts, unmapped(pages), unmapped(params), duplicates, refs)
    return pages, steps.call(commit_page_outputs_task, pages, raw, params, counts)
