"""The door of the reuse stores (storage/reuse.py, `fetch` and `plan_store`), driven with generated
input (issue 57): an entry is served only when its key is the one wanted, its digest binds it to this
store's identity and its value is what the stage writes; anything else (a byte flipped, an entry of
another code version, a value of the wrong shape) is refused and counted, never raised, and the
stage recomputes it. `match`'s counts add up on any two sets of items."""
from __future__ import annotations

import json
import uuid
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.reuse import (
    ITEM_COUNTS, STORE_COUNTS, commit_store, content_key, encode_json, fetch, keys_of, match, plan_store,
    write_entries,
)
from tasks.pages import decode_extract, extract_page, extract_page_rows
from tasks.phrase_occurrences import decode_mined, encode_mined
from pearl_model.phrases.mining import MinedSentence
from tests.conftest import part_file  # noqa: E402

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["page", "sentences", "mentions", "quarantine", "filtered", "stats", "occurrences", "words",
                         "kind", "sentences_in", "x"]), inner, max_size=6), max_leaves=12)
words = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=6)
REFUSED = (ValueError, TypeError, KeyError)


def record(title: str, text: str, page_id: int = 1) -> dict:
    return {"seq": 0, "page_id": page_id, "title": title, "namespace": 0, "redirect_target": None,
            "text_format": "plain", "text": text, "raw": None, "error": None, "error_detail": None}


@given(json_values)
def test_a_value_of_another_shape_is_refused_by_decoding(value):
    """What a decoder accepts, the stage can use: stamped into rows without error."""
    raw = json.dumps(value).encode()
    try:
        extract = decode_extract(raw)
    except REFUSED:
        pass
    else:
        extract_page_rows([record("T", "x")], extracts={0: extract})
    try:
        decode_mined(raw)
    except REFUSED:
        pass


@given(st.lists(words, min_size=1, max_size=4), st.sampled_from(["plain", "wikitext"]))
def test_what_a_stage_writes_its_decoder_gives_back(sentence_words, fmt):
    text = " ".join(sentence_words) + ". " + " ".join(reversed(sentence_words)) + " and more words here."
    r = {**record("Some title", text), "text_format": fmt}
    extract = extract_page(r)
    assert decode_extract(encode_json(extract)) == extract
    mined = MinedSentence([(w, w.casefold(), "NP", "OTHER") for w in sentence_words],
                          Counter(sentences_in=1, sentences_parsed=1, occurrences_found=len(sentence_words),
                                  occurrences_kept=len(sentence_words)), list(sentence_words))
    assert decode_mined(encode_mined(mined)) == mined


def store_of(root: str, identity: dict, values: list[bytes], items: list[int], keys: list[bytes]):
    store = plan_store(root, "page_extracts", identity, {"in": uuid.uuid4().hex})
    write_entries(store, 0, keys, items, values, {"reused": 0, "computed": len(keys), "refused": 0})
    commit_store(store, {"in": "x"}, {})
    return store


CORRUPTIONS = ("value", "digest", "key", "identity", "none")


def written_again(entries, table) -> None:
    """Part 0 of a committed store rewritten by a writer, recorded and committed again: entries a
    writer got wrong, which the file's digest cannot see, so the door behind it is what is tested."""
    entries.write_part(0, table)
    m = entries.manifest()
    entries.commit(code_version=m["code_version"], params=m["params"], inputs=m["inputs"], stats=m["stats"])


@given(st.lists(st.text(max_size=8), min_size=1, max_size=6, unique=True),
       st.lists(st.sampled_from(CORRUPTIONS), min_size=6, max_size=6), st.data())
def test_an_entry_not_as_written_is_refused_and_counted(memory_root, texts, corruptions, data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = f"{memory_root}/{uuid.uuid4().hex}"
    identity = {"stage": "t", "code_version": "1"}
    extracts = [extract_page(record("T", t)) for t in texts]
    values = [encode_json(e) for e in extracts]
    keys = [content_key("T", t) for t in texts]
    old = store_of(root, identity, values, list(range(len(texts))), keys)
    other = plan_store(root, "page_extracts", {**identity, "code_version": "2"}, {"in": "y"})  # another identity's seal
    # rewrite the committed part with some entries corrupted as generated
    part = part_file(old.entries, 0)
    t = pq.read_table(part, filesystem=old.entries.fs).to_pylist()
    bad = set()
    for i, row in enumerate(t):
        how = corruptions[i]
        if how == "value":
            flip = data.draw(st.integers(0, len(row["value"]) - 1))
            row["value"] = row["value"][:flip] + bytes([row["value"][flip] ^ 1]) + row["value"][flip + 1:]
        elif how == "digest":
            row["digest"] = bytes([row["digest"][0] ^ 1]) + row["digest"][1:]
        elif how == "key":
            row["key"] = content_key("other", i)
        elif how == "identity":
            row["digest"] = other.digest(row["key"], row["value"])
        bad |= {i} if how != "none" else set()
    written_again(old.entries, pa.Table.from_pylist(t, schema=old.entries.schema))

    reader = plan_store(root, "page_extracts", identity, {"in": "z"})
    assert reader.previous is not None and reader.previous.version == old.entries.version
    refs = np.array([[i, 0, i] for i in range(len(texts))], np.int64)
    served, refused = fetch(reader, refs, dict(enumerate(keys)), decode_extract)
    assert refused == len(bad)
    assert served == {i: extracts[i] for i in range(len(texts)) if i not in bad}


def test_a_store_of_another_identity_or_none_is_not_read(memory_root):
    identity = {"stage": "t", "code_version": "1"}
    assert plan_store(memory_root, "page_extracts", identity, {"in": "a"}).previous is None  # none yet
    store_of(memory_root, identity, [b"{}"], [1], [content_key("a")])
    other = plan_store(memory_root, "page_extracts", {**identity, "code_version": "2"}, {"in": "b"})
    assert other.previous is None and "another code version" in other.refused
    served, refused = fetch(other, np.array([[0, 0, 0]]), {0: content_key("a")}, decode_extract)
    assert served == {} and refused == 1


items_and_contents = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 5)), max_size=20)


@given(items_and_contents, items_and_contents, st.integers(1, 4))
def test_match_counts_add_up_and_refs_hold_the_key(memory_root, old, new, parts):
    root = f"{memory_root}/{uuid.uuid4().hex}"
    identity = {"stage": "t", "code_version": "1"}
    store = plan_store(root, "page_extracts", identity, {"in": "old"})
    for p in range(parts):
        mine = old[p::parts]
        write_entries(store, p, [content_key(c) for _, c in mine], [i for i, _ in mine], [b"{}"] * len(mine), {})
    commit_store(store, {"in": "old"}, {})
    reader = plan_store(root, "page_extracts", identity, {"in": "new"})
    chunks = [new[p::2] for p in range(2)]
    keyed = [keys_of(range(len(c)), (i for i, _ in c), (content_key(x) for _, x in c)) for c in chunks]
    refs, counts = match(keyed, reader.previous)
    assert counts["keyed"] == sum(counts[k] for k in ITEM_COUNTS[1:]) == len(new)
    assert counts[STORE_COUNTS[0]] == sum(counts[k] for k in STORE_COUNTS[1:]) == len(old)
    old_contents = {c for _, c in old}
    for c, r in zip(chunks, refs):
        assert sorted(r[:, 0].tolist()) == [j for j, (_, x) in enumerate(c) if x in old_contents]
        for row, p, orow in r.tolist():  # the entry referred to holds the wanted key
            assert old[p::parts][orow][1] == c[row][1]
    same = {(i, x) for i, x in old}
    assert counts["unchanged"] == sum(1 for i, x in new if (i, x) in same)
    assert counts["new"] == sum(1 for i, x in new if x not in old_contents and i not in {j for j, _ in old})


# ---------------------------------------------------------------- the per-phrase stores' entries

POSITIVE_PARAMS = {"kinds": ["wordnet", "fasttext", "context"], "max_per_kind": 3, "paraphrase_options": None}
token_parts = st.one_of(st.text(max_size=3), st.booleans(), st.integers(-1, 1), st.none())
entries = st.dictionaries(
    st.sampled_from(["tokens", "wordnet", "paraphrase", "x"]),
    st.lists(st.lists(token_parts, min_size=2, max_size=4) | st.text(max_size=4) | token_parts, max_size=5)
    | token_parts,
    max_size=4)


class Synonyms:
    """A synonym source that offers one replacement for every word."""

    def synonyms(self, word, pos=None):
        return [word[::-1] + "x"]


@given(entries | json_values)
def test_a_phrase_entry_the_decoder_accepts_the_stage_can_use(value):
    """An accepted phrase entry: its tokens (given a phrase they spell, as `fits` asks) make
    variants, and its positives are lists of at most max_per_kind strings."""
    from tasks.augmentations import decoder, synonym_positives, tokens_fit

    try:
        e = decoder(POSITIVE_PARAMS)(json.dumps(value).encode())
    except REFUSED:
        return
    phrase = " ".join(t[0] for t in e["tokens"])
    assert tokens_fit(phrase, e["tokens"])
    synonym_positives([phrase], [e["tokens"]], {"fasttext": Synonyms()}, 3)
    assert isinstance(e["wordnet"], list) and len(e["wordnet"]) <= 3


@given(st.lists(words, min_size=1, max_size=4), st.lists(words, max_size=3))
def test_what_the_positives_stage_writes_its_decoder_gives_back(tokens, wordnet):
    from tasks.augmentations import decoder, tokens_fit

    entry = {"tokens": [(w, "NOUN", False) for w in tokens], "wordnet": wordnet}
    assert decoder(POSITIVE_PARAMS)(encode_json(entry)) == entry
    assert tokens_fit(" ".join(tokens), entry["tokens"])
    assert not tokens_fit("", entry["tokens"])  # not the phrase they spell


@given(st.binary(max_size=40), st.integers(1, 8))
def test_a_vector_entry_is_a_finite_unit_vector_of_the_models_size_or_refused(value, dim):
    from tasks.negatives import decode_vector

    try:
        v = decode_vector(value, dim)
    except REFUSED:
        return
    assert v.shape == (dim,) and np.isfinite(v).all() and abs(float(np.linalg.norm(v)) - 1) <= 1e-3


@given(st.lists(st.floats(-100, 100, allow_nan=False, width=32), min_size=1, max_size=8).filter(
    lambda xs: any(abs(x) > 1e-3 for x in xs)))
def test_what_the_vectors_stage_writes_its_decoder_gives_back(xs):
    from tasks.negatives import decode_vector, encode_vector

    v = np.asarray(xs, np.float32)
    v = (v / np.linalg.norm(v)).astype(np.float32)
    assert np.array_equal(decode_vector(encode_vector(v), len(v)), v)


def without_time(counts: dict) -> dict:
    """`reuse_part`'s counts but the CPU seconds (a measurement: checked in its own test)."""
    assert counts["compute_s"] >= 0
    return {k: v for k, v in counts.items() if k != "compute_s"}


def test_reuse_part_measures_the_seconds_computing_and_the_store_keeps_them(memory_root):
    """`compute_s`: the CPU seconds of the items computed, in the part's footer and summed into the
    store's manifest (what the corpus-reuse report prices the reused items at); none when all are reused."""
    import time

    from storage.reuse import reuse_part

    def busy(todo: list[int]) -> list[str]:  # 0.05 CPU seconds per item
        end = time.process_time() + 0.05 * len(todo)
        while time.process_time() < end:
            pass
        return [f"out{i}" for i in todo]

    root, identity = f"{memory_root}/{uuid.uuid4().hex}", {"stage": "t", "code_version": "1"}
    keys, items = [content_key("item", i) for i in range(4)], list(range(4))
    old = plan_store(root, "phrase_vectors", identity, {"in": "a"})
    _, counts = reuse_part(old, 0, None, keys, items, busy, encode_json, json.loads)
    assert counts["computed"] == 4 and counts["compute_s"] >= 0.2
    assert old.entries.part_metadata(0)["compute_s"] == counts["compute_s"]
    assert commit_store(old, {"in": "a"}, {})["stats"]["compute_s"] == pytest.approx(counts["compute_s"], abs=1e-6)
    reader = plan_store(root, "phrase_vectors", identity, {"in": "b"})
    refs, _ = match([keys_of(range(4), items, keys[:2] + [content_key("other", i) for i in (2, 3)])], reader.previous)
    _, counts = reuse_part(reader, 0, refs[0], keys[:2] + [content_key("other", i) for i in (2, 3)], items, busy,
                           encode_json, json.loads)
    assert (counts["reused"], counts["computed"]) == (2, 2) and 0.1 <= counts["compute_s"] < 0.2
    _, counts = reuse_part(reader, 1, refs[0][:2], keys[:2], items[:2], busy, encode_json, json.loads)
    assert counts == {"reused": 2, "computed": 0, "refused": 0, "compute_s": 0.0}


@given(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=6, unique=True),
       st.lists(st.sampled_from(("value", "digest", "tokens", "none")), min_size=6, max_size=6), st.data())
def test_reuse_part_recomputes_what_the_door_refuses(memory_root, texts, corruptions, data):
    """A part's outputs through `reuse_part`: an entry refused by the door (flipped, another seal, or
    tokens that do not spell the phrase: `fits`) is computed again, and reused + computed = items."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from storage.reuse import item_of, reuse_part
    from tasks.augmentations import decoder, tokens_fit

    root = f"{memory_root}/{uuid.uuid4().hex}"
    identity = {"stage": "t", "code_version": "1"}
    decode = decoder(POSITIVE_PARAMS)
    made = [{"tokens": [(t, "NOUN", False)], "wordnet": [t + "s"]} for t in texts]
    keys, items = [content_key(t) for t in texts], [item_of(t) for t in texts]
    old = plan_store(root, "phrase_positives", identity, {"in": "a"})
    first, counts = reuse_part(old, 0, None, keys, items, lambda todo: [made[i] for i in todo], encode_json, decode)
    assert first == made and without_time(counts) == {"reused": 0, "computed": len(texts), "refused": 0}
    commit_store(old, {"in": "a"}, {})
    part = part_file(old.entries, 0)
    rows, bad = pq.read_table(part, filesystem=old.entries.fs).to_pylist(), set()
    for i, row in enumerate(rows):
        how = corruptions[i]
        if how == "value":
            flip = data.draw(st.integers(0, len(row["value"]) - 1))
            row["value"] = row["value"][:flip] + bytes([row["value"][flip] ^ 1]) + row["value"][flip + 1:]
        elif how in ("digest", "tokens"):  # "tokens": a well-sealed entry whose tokens are another phrase's
            if how == "tokens":
                row["value"] = encode_json({"tokens": [(texts[i] + "?", "NOUN", False)], "wordnet": []})
            row["digest"] = old.digest(row["key"], row["value"]) if how == "tokens" else \
                bytes([row["digest"][0] ^ 1]) + row["digest"][1:]
        bad |= {i} if how != "none" else set()
    written_again(old.entries, pa.Table.from_pylist(rows, schema=old.entries.schema))

    reader = plan_store(root, "phrase_positives", identity, {"in": "b"})
    refs, _ = match([keys_of(range(len(texts)), items, keys)], reader.previous)
    computed: list[int] = []
    got, counts = reuse_part(reader, 0, refs[0], keys, items, lambda todo: computed.extend(todo) or
                             [made[i] for i in todo], encode_json, decode,
                             lambda i, e: tokens_fit(texts[i], e["tokens"]))
    assert got == made and computed == sorted(bad)
    assert without_time(counts) == {"reused": len(texts) - len(bad), "computed": len(bad), "refused": len(bad)}


# ---------------------------------------------------------------- an example sentence's typing (phrase_types)

entity_types = st.sampled_from(["PERSON", "GPE", "ORG", "OTHER", "DATE"])
typings = st.builds(lambda parsed, types: (parsed, types if parsed else []), st.booleans(),
                    st.lists(st.tuples(words, entity_types), max_size=4))
# near the shape (entity types sometimes not the vocabulary's, types sometimes on an unparsed
# sentence), or anything
near_typings = st.fixed_dictionaries({"parsed": st.booleans(), "types": st.lists(
    st.tuples(words, entity_types | words).map(list) | st.lists(json_values, max_size=3), max_size=3)})
typing_values = near_typings | json_values | st.fixed_dictionaries({"parsed": json_values, "types": json_values})


@given(st.lists(typing_values, min_size=1, max_size=5))
def test_a_typing_entry_is_served_through_the_door_only_when_the_stage_can_use_it(memory_root, values):
    """Whatever a sealed store entry holds, `fetch` with `decode_types` serves a typing whose entity
    types make labels (and an unparsed sentence with none), or refuses it and counts it."""
    from pearl_model.phrases import labels
    from tasks.phrase_types import SentenceTypes, decode_types

    root = f"{memory_root}/{uuid.uuid4().hex}"
    identity = {"stage": "phrase_types", "code_version": "1"}
    raw = [json.dumps(v).encode() for v in values]
    keys = [content_key(i) for i in range(len(raw))]
    store_of(root, identity, raw, list(range(len(raw))), keys)
    reader = plan_store(root, "page_extracts", identity, {"in": "b"})
    served, refused = fetch(reader, np.array([[i, 0, i] for i in range(len(raw))]), dict(enumerate(keys)),
                            decode_types)
    assert len(served) + refused == len(raw)
    for t in served.values():
        assert isinstance(t, SentenceTypes) and (t.parsed or not t.types)
        for key, et in t.types:
            assert isinstance(key, str) and labels.label_id(labels.label("NP", et)) >= 0


@given(st.lists(typings, min_size=1, max_size=5))
def test_what_the_typing_stage_writes_the_door_gives_back(memory_root, made):
    """A stage's typings written through `reuse_part` come back through it, every one reused."""
    from storage.reuse import reuse_part
    from tasks.phrase_types import SentenceTypes, decode_types, encode_types

    root = f"{memory_root}/{uuid.uuid4().hex}"
    identity = {"stage": "phrase_types", "code_version": "1"}
    each = [SentenceTypes(p, tuple(types)) for p, types in made]
    keys, items = [content_key("sentence", i) for i in range(len(each))], list(range(len(each)))
    old = plan_store(root, "sentence_types", identity, {"in": "a"})
    reuse_part(old, 0, None, keys, items, lambda todo: [each[i] for i in todo], encode_types, decode_types)
    commit_store(old, {"in": "a"}, {})
    reader = plan_store(root, "sentence_types", identity, {"in": "b"})
    refs, _ = match([keys_of(range(len(each)), items, keys)], reader.previous)
    got, counts = reuse_part(reader, 0, refs[0], keys, items, lambda todo: pytest.fail(f"recomputed {todo}"),
                             encode_types, decode_types)
    assert got == each and counts == {"reused": len(each), "computed": 0, "refused": 0, "compute_s": 0.0}


# ---------------------------------------------------------------- a damaged store is recomputed (issue 64, defect 4)
def _manifest_names_outside(entries) -> None:
    m = entries.manifest()
    m["parts"][0]["file"] = "../x.parquet"
    entries.fs.pipe_file(f"{entries.path}/_manifest.json", json.dumps(m).encode())


STORE_DAMAGE = {
    "truncated": lambda e: e.fs.pipe_file(part_file(e, 0), e.fs.cat_file(part_file(e, 0))[:-9]),
    "flipped": lambda e: e.fs.pipe_file(part_file(e, 0), bytes([e.fs.cat_file(part_file(e, 0))[0] ^ 1])
                                        + e.fs.cat_file(part_file(e, 0))[1:]),
    "gone": lambda e: e.fs.rm(part_file(e, 0)),
    "outside": _manifest_names_outside,
    "rows": lambda e: e.fs.pipe_file(f"{e.path}/_manifest.json",
                                     json.dumps({**e.manifest(), "rows": "many"}).encode()),
}


@pytest.mark.parametrize("damage", sorted(STORE_DAMAGE))
def test_a_damaged_store_is_refused_whole_and_its_items_computed_again(memory_root, damage):
    """A truncated or flipped store part, one gone, a manifest naming ``../x.parquet`` or counting
    nonsense: the build goes on, the store is refused (the reason names it), nothing of it is served,
    and every item is computed again and counted. On the old main the first two raised ArrowInvalid
    and the fourth UnsafeManifest out of the stage."""
    from storage.reuse import item_of, reuse_part

    root = f"{memory_root}/{uuid.uuid4().hex}"
    identity = {"stage": "t", "code_version": "1"}
    texts = ["alpha", "beta", "gamma"]
    keys, items = [content_key(t) for t in texts], [item_of(t) for t in texts]
    old = plan_store(root, "phrase_positives", identity, {"in": "a"})
    reuse_part(old, 0, None, keys, items, lambda todo: [{"n": i} for i in todo], encode_json, json.loads)
    commit_store(old, {"in": "a"}, {})
    STORE_DAMAGE[damage](old.entries)

    reader = plan_store(root, "phrase_positives", identity, {"in": "b"})
    assert reader.previous is None and old.entries.version in reader.refused
    refs, counts = match([keys_of(range(3), items, keys)], reader.previous)
    got, part_counts = reuse_part(reader, 0, refs[0], keys, items, lambda todo: [{"n": i} for i in todo],
                                  encode_json, json.loads)
    assert got == [{"n": 0}, {"n": 1}, {"n": 2}] and counts["new"] == 3 and counts["store_entries"] == 0
    assert without_time(part_counts) == {"reused": 0, "computed": 3, "refused": 0}
    assert commit_store(reader, {"in": "b"}, counts)["stats"]["previous_refused"] == reader.refused


@pytest.mark.parametrize("recorded", [20240101, "2024-13-01", ["2024-01-01"], None])
def test_a_previous_dump_date_that_is_no_date_is_unknown_not_a_failure(memory_root, recorded):
    """A page_extracts manifest (a cache) whose dump_date is a number or no date: compared as unknown
    (on the old main a number raised TypeError, comparing str and int, out of the pages stage)."""
    from storage.datasets import Dataset
    from storage.schemas import RAW_PAGES
    from tasks.pages import PageOutputs, dump_check

    root = f"{memory_root}/{uuid.uuid4().hex}"
    raw = Dataset(root, "raw_pages", "r2", RAW_PAGES)
    raw.write_part(0, RAW_PAGES.empty_table())
    raw.commit(code_version="c", params={}, inputs={"source": "/dumps/enwiki-20240601-pages-articles.xml.bz2"})
    identity = {"stage": "t", "code_version": "1"}
    old = store_of(root, identity, [b"{}"], [1], [content_key("a")])
    m = old.entries.manifest()
    old.entries.fs.pipe_file(f"{old.entries.path}/_manifest.json",
                             json.dumps({**m, "inputs": {"raw_pages": "r1", "dump_date": recorded}}).encode())
    reuse = plan_store(root, "page_extracts", identity, {"in": "b"})
    assert reuse.previous is not None
    out = PageOutputs(*(Dataset(root, n, "v", RAW_PAGES) for n in ("a", "b", "c", "d")), reuse=reuse)
    assert dump_check(out, raw) == ({"older_dump": 0, "same_date_dump": 0}, None)
