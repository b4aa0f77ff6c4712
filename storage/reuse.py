"""Per-item reuse across builds: what a per-page (or per-sentence) stage computed for one item,
kept under the hash of the content it read, so the next dump's build computes only what changed.

A stage's reuse store is a dataset of REUSE_ENTRIES (key, item, digest, value), one part per part
of the stage's output, written and committed with them (``Dataset.write_part``: atomic parts, a
manifest last). Its name is the stage's (``page_extracts``, ``sentence_mining``); its version
hashes the stage's *identity* (code version, the parameters that change one item's output, the
libraries that compute it) with the build's input, and its manifest keeps that identity as its
parameters. The next build finds the latest store through ``_latest.json`` (`plan_store`).

Keys and matching: an item's key is the SHA-256 of the content it read (`content_key`); the stage
computes the keys of its input first (one map step), `match` joins them with the previous store's
(by the key's first 64 bits, numpy, in one process: 16 bytes per item) and hands each task the
entries it may reuse; a task reads them through `fetch`, the one door, which serves an entry only
when its full key is the one wanted and its digest binds it to this identity (an entry from
another code version or parameters, edited or truncated: recomputed, and counted). Items are
counted as unchanged (same key, same item id), moved (same key under another id), edited (a new
key for an id the store has) and new; on the store's side, removed (an id no longer read whose
entry nobody took). The store a build writes holds the entries of what it read, reused or
computed, so removed items drop out.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import time
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterable, TypeVar

import numpy as np
import pyarrow as pa

from .datasets import Dataset, DatasetIncomplete, ManifestError, dataset_version, latest_version
from .schemas import REUSE_ENTRIES
from pearl_redact import redact

T = TypeVar("T")
FORMAT = "reuse-entries-1"  # the layout of a store's rows (a new one: no older store is read)
KEY_BYTES = 32
# the counts `match` gives: the items read (keyed = unchanged + moved + edited + new) and the
# store's entries (store_entries = still_read + moved_away + removed)
ITEM_COUNTS = ("keyed", "unchanged", "moved", "edited", "new")
STORE_COUNTS = ("store_entries", "still_read", "moved_away", "removed")
PART_COUNTS = ("reused", "computed", "refused")  # what the tasks did: reused + computed = keyed
# CPU seconds the tasks spent computing the computed items (a worker process runs one task at a time),
# summed over parts: with `computed`, the stage's measured cost per item, which prices what the reused
# items saved (tasks/reuse_report.py)
PART_TIMES = ("compute_s",)


def cpu_timed(compute: Callable[..., T], *args, **kwargs) -> tuple[T, float]:
    """``compute(*args, **kwargs)`` and the CPU seconds it took in this process: how every stage
    measures PART_TIMES' ``compute_s`` (its models loaded before, so the seconds are the items')."""
    start = time.process_time()
    out = compute(*args, **kwargs)
    return out, time.process_time() - start


def content_key(*fields) -> bytes:
    """SHA-256 of the fields an item's output is a function of (JSON: strings, numbers, None)."""
    return hashlib.sha256(json.dumps(fields, separators=(",", ":")).encode("ascii")).digest()


def item_of(name: str) -> int:
    """A stable int64 id for an item named by a string (a phrase key): what `match` counts by."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()[:8], "big", signed=True)


def library_versions(*distributions: str) -> dict[str, str | None]:
    """Installed versions of the libraries that compute an item: a store made with others is not reused."""
    out = {}
    for name in distributions:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class ReuseStore:
    """One stage's reuse: the store this build writes (``entries``), the one it reads (``previous``,
    None when there is none or it was refused, ``refused`` saying why) and the identity both are of.
    Cheap and picklable (sent to Dask workers)."""

    entries: Dataset
    identity: str  # canonical JSON of code version, parameters, libraries
    previous: Dataset | None = None
    refused: str | None = None

    @cached_property
    def seal(self) -> bytes:
        """What an entry's digest binds it to: this identity."""
        return hashlib.sha256(self.identity.encode()).digest()

    def digest(self, key: bytes, value: bytes) -> bytes:
        return hashlib.sha256(self.seal + key + value).digest()[:16]


def plan_store(root: str, name: str, identity: dict, inputs: dict[str, str]) -> ReuseStore:
    """The store a stage writes (versioned by its identity and input) and the latest one of that
    name, if it is complete and of this identity (else ``refused`` says why and nothing is reused)."""
    canonical = _canonical(identity)
    entries = Dataset(root, name, dataset_version(name, FORMAT, json.loads(canonical), inputs), REUSE_ENTRIES)
    previous, refused = None, None
    try:
        latest = latest_version(root, name)
        if latest is not None:
            found = Dataset(root, name, latest, REUSE_ENTRIES)
            manifest = found.manifest()
            # a manifest's parameters are redacted (credentials in a URL of the options): compared so
            if manifest.get("code_version") != FORMAT or _canonical(manifest.get("params")) != \
                    _canonical(redact(identity)):
                refused = (f"the latest {name} ({found.url}) was made by another code version or other parameters "
                           f"({_canonical(manifest.get('params'))[:300]}); this build's are {canonical[:300]}")
            else:
                for part in found.parts():  # names, links, sizes and digests, before a key is matched
                    found.read_metadata(part.index)
                previous = found
    except (DatasetIncomplete, ManifestError, OSError, pa.ArrowException) as e:  # damage: recomputed, said
        refused = str(e)
    return ReuseStore(entries, canonical, previous, refused)


@dataclass(frozen=True)
class Keys:
    """The keyed items of one part of a stage's input: their rows in it, ids and key prefixes."""

    rows: np.ndarray  # int64
    items: np.ndarray  # int64: page_id, sentence_id
    prefixes: np.ndarray  # uint64: the first 64 bits of each content key (the join's; `fetch` checks all)


def keys_of(rows: Iterable[int], items: Iterable[int], keys: Iterable[bytes]) -> Keys:
    return Keys(np.fromiter(rows, np.int64), np.fromiter(items, np.int64),
                np.fromiter((int.from_bytes(k[:8], "big") for k in keys), np.uint64))


def phrase_keys(phrases: Dataset, part: int) -> Keys:
    """The keys of a `phrases` part's phrases, for a stage whose output for a phrase is a function of
    its text alone: the text is the content key, the phrase key names the item (`item_of`)."""
    if not phrases.has_part(part):
        return keys_of((), (), ())
    t = phrases.read_part(part, columns=["phrase", "phrase_key"])
    return keys_of(range(t.num_rows), map(item_of, t["phrase_key"].to_pylist()),
                   map(content_key, t["phrase"].to_pylist()))


def _prefixes(column: pa.ChunkedArray) -> np.ndarray:
    """The first 64 bits of each key of a fixed-size binary column, read from its buffer."""
    col = column.combine_chunks()
    raw = np.frombuffer(col.buffers()[1], np.uint8)[col.offset * KEY_BYTES:(col.offset + len(col)) * KEY_BYTES]
    return np.ascontiguousarray(raw.reshape(-1, KEY_BYTES)[:, :8]).view(">u8").ravel().astype(np.uint64)


def store_index(store: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(key prefix, item, part, row) of every entry of a committed store, through Dataset.parts."""
    prefixes, items, parts, rows = [], [], [], []
    for p, part in enumerate(store.parts()):
        t = store.read_part(part.index, columns=["key", "item"])
        prefixes.append(_prefixes(t["key"]))
        items.append(t["item"].to_numpy())
        parts.append(np.full(t.num_rows, p, np.int64))
        rows.append(np.arange(t.num_rows, dtype=np.int64))
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.empty(0, dt))
    return cat(prefixes, np.uint64), cat(items, np.int64), cat(parts, np.int64), cat(rows, np.int64)


def match(new: list[Keys], previous: Dataset | None) -> tuple[list[np.ndarray], dict]:
    """Per part of ``new``: an (n, 3) int64 array of (row, store part, store row), the entries of
    ``previous`` its items may reuse; and the counts (ITEM_COUNTS, STORE_COUNTS). Of several entries
    with an item's key, the one with the same item id, else the first (all hold the same output)."""
    n_key = np.concatenate([k.prefixes for k in new]) if new else np.empty(0, np.uint64)
    n_item = np.concatenate([k.items for k in new]) if new else np.empty(0, np.int64)
    ends = np.cumsum([len(k.rows) for k in new])
    o_key, o_item, o_part, o_row = store_index(previous) if previous is not None else \
        (np.empty(0, np.uint64), np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64))
    order = np.lexsort((o_item, o_key))
    sk, si = o_key[order], o_item[order]
    lo, hi = np.searchsorted(sk, n_key, "left"), np.searchsorted(sk, n_key, "right")
    found = hi > lo
    pick = lo.copy()
    for i in np.flatnonzero(hi - lo > 1):  # a content the store holds under several ids: rare
        same = np.flatnonzero(si[lo[i]:hi[i]] == n_item[i])
        pick[i] = lo[i] + (same[0] if len(same) else 0)
    picked = order[pick[found]]  # store entries taken
    same_id = np.zeros(len(n_key), bool)
    same_id[found] = o_item[picked] == n_item[found]
    old_ids = np.unique(o_item)
    was_there = np.isin(n_item, old_ids)
    taken = np.zeros(len(o_key), bool)
    taken[picked] = True
    still_read = np.isin(o_item, n_item)
    counts = {"keyed": len(n_key), "unchanged": int(same_id.sum()), "moved": int((found & ~same_id).sum()),
              "edited": int((~found & was_there).sum()), "new": int((~found & ~was_there).sum()),
              "store_entries": len(o_key), "still_read": int(still_read.sum()),
              "moved_away": int((~still_read & taken).sum()), "removed": int((~still_read & ~taken).sum())}
    refs_all = np.full((len(n_key), 2), -1, np.int64)
    refs_all[found] = np.stack([o_part[picked], o_row[picked]], axis=1)
    out, start = [], 0
    for k, end in zip(new, ends):
        sel = found[start:end]
        out.append(np.concatenate([k.rows[sel, None], refs_all[start:end][sel]], axis=1).astype(np.int64))
        start = end
    return out, counts


def plan_reuse(store: ReuseStore | None, keyed: list[Keys]) -> tuple[list[np.ndarray], dict]:
    """Per part of the stage's input, the entries of the previous store its items may reuse, and the
    counts (`match`); none where there is nothing to write (no store, or one already committed)."""
    if store is None or store.entries.is_complete():
        return [np.empty((0, 3), np.int64) for _ in keyed], {}
    return match(keyed, store.previous)


def log_plan(store: ReuseStore | None, counts: dict, what: str, logger) -> None:
    """What a stage's plan-reuse task logs: why a previous store was refused (a warning), then the counts."""
    if store is not None and store.refused:
        logger.warning("%s not reused: %s", what, store.refused)
    logger.info("%s reuse: %s", what, counts)


def fetch(store: ReuseStore, refs: np.ndarray, wanted: dict[int, bytes], decode: Callable[[bytes], T],
          fits: Callable[[int, T], bool] | None = None) -> tuple[dict[int, T], int]:
    """The one door to a previous store's entries: {row: decode(value)} for each (row, store part,
    store row) of ``refs`` whose entry has the full key ``wanted[row]``, a digest that binds it to
    this store's identity, and a value ``decode`` accepts (it raises ValueError, KeyError or TypeError
    on any other) and, with ``fits``, one that fits its row (``fits(row, value)``: what the key alone
    does not say, e.g. that a phrase's tokens spell it); the count of entries refused (the caller
    recomputes those rows)."""
    out: dict[int, T] = {}
    refs = np.asarray(refs, dtype=np.int64).reshape(-1, 3)
    if store.previous is None or not len(refs):
        return out, len(refs)
    refused = 0
    parts = store.previous.parts()
    for p in np.unique(refs[:, 1]):
        mine = refs[refs[:, 1] == p]
        try:
            t = store.previous.read_part(parts[int(p)].index, columns=["key", "digest", "value"])
            t = t.take(pa.array(mine[:, 2]))
        except (OSError, IndexError, ManifestError, pa.ArrowException):  # a part gone, damaged, or shorter
            refused += len(mine)
            continue
        for row, key, digest, value in zip(mine[:, 0].tolist(), *(t[c].to_pylist() for c in ("key", "digest", "value"))):
            try:
                if key != wanted[row] or digest != store.digest(key, value):
                    raise ValueError("not the entry wanted, or not as written")
                v = decode(value)
                if fits is not None and not fits(row, v):
                    raise ValueError("not an entry of this item")
                out[row] = v
            except (ValueError, KeyError, TypeError, RecursionError):
                refused += 1
    return out, refused


def write_entries(store: ReuseStore, index: int, keys: list[bytes], items: list[int], values: list[bytes],
                  counts: dict) -> None:
    """Part ``index`` of the store this build writes; ``counts`` (PART_COUNTS, PART_TIMES) in its footer. A
    committed store is not written again (a stage part redone after the store's commit: same entries)."""
    if store.entries.is_complete():
        return
    table = pa.table({"key": pa.array(keys, pa.binary(KEY_BYTES)), "item": pa.array(items, pa.int64()),
                      "digest": pa.array([store.digest(k, v) for k, v in zip(keys, values)], pa.binary(16)),
                      "value": pa.array(values, pa.binary())}, schema=REUSE_ENTRIES)
    store.entries.write_part(index, table, metadata=counts)


def reuse_part(store: ReuseStore | None, index: int, refs: np.ndarray | None, keys: list[bytes], items: list[int],
               compute: Callable[[list[int]], list[T]], encode: Callable[[T], bytes],
               decode: Callable[[bytes], T], fits: Callable[[int, T], bool] | None = None) -> tuple[list[T], dict]:
    """One part's outputs, item by item: read through `fetch` where ``refs`` (this part's entry of
    `plan_reuse`) names an entry (``decode``, ``fits``: `fetch`'s), else ``compute``d (it gets the
    positions to do, in order, and returns their outputs); then the part of the store this build
    writes (before the caller writes its own part, which marks the part done). Returns the outputs
    in order, PART_COUNTS and PART_TIMES (the CPU seconds of ``compute``: `cpu_timed`)."""
    kept, refused = fetch(store, refs, dict(enumerate(keys)), decode, fits) \
        if store is not None and refs is not None else ({}, 0)
    todo = [i for i in range(len(keys)) if i not in kept]
    computed, compute_s = cpu_timed(compute, todo) if todo else ([], 0.0)
    done = dict(zip(todo, computed))
    values = [kept[i] if i in kept else done[i] for i in range(len(keys))]
    counts = {"reused": len(kept), "computed": len(todo), "refused": refused, "compute_s": compute_s}
    if store is not None:
        write_entries(store, index, keys, items, [encode(v) for v in values], counts)
    return values, counts


def commit_store(store: ReuseStore, inputs: dict[str, str], counts: dict) -> dict:
    """The store's manifest: its identity as parameters; as stats `match`'s counts (and the stage's
    own, ``counts``), the parts' PART_COUNTS and PART_TIMES summed, and the previous store's version (or why none)."""
    if store.entries.is_complete():
        return store.entries.reuse()
    totals = Counter(counts) + store.entries.metadata_totals()
    stats = {**{k: totals[k] for k in (*ITEM_COUNTS, *STORE_COUNTS, *PART_COUNTS, *counts)},
             **{k: round(totals[k], 6) for k in PART_TIMES},  # a few items' seconds: not rounded to zero
             "previous": store.previous.version if store.previous is not None else None,
             "previous_refused": store.refused}
    return store.entries.commit(code_version=FORMAT, params=json.loads(store.identity), inputs=inputs, stats=stats)


def counts_table(stats: dict) -> list[dict]:
    """A store's counts as rows (side, count, what it means): the reuse artifact of its stage."""
    meaning = {"keyed": "items read (= the next four)", "unchanged": "same content, same id: reused",
               "moved": "same content, another id: reused", "edited": "new content for an id the store had",
               "new": "new content, new id", "store_entries": "entries of the previous store (= the next three)",
               "still_read": "their id read again", "moved_away": "their content read under another id",
               "removed": "neither: dropped", "reused": "outputs read from the store",
               "computed": "outputs computed", "refused": "entries refused by the door (computed)",
               "compute_s": "CPU seconds computing them (the tasks' sum)"}
    rows = [{"count": k, "value": stats.get(k, 0), "meaning": m} for k, m in meaning.items()]
    dump = {"older_dump": "1: the dump read is older than the previous build's (dates in the files' names)",
            "same_date_dump": "1: the dump read has the previous build's date but is another input"}
    rows += [{"count": k, "value": stats[k], "meaning": m} for k, m in dump.items() if k in stats]  # page_extracts
    return rows + [{"count": "previous", "value": stats.get("previous") or "none",
                    "meaning": stats.get("previous_refused") or "the store reused from"}]


def encode_json(value) -> bytes:
    """An entry's value: JSON (ASCII, so any string round-trips, lone surrogates too)."""
    return json.dumps(value, separators=(",", ":")).encode("ascii")
