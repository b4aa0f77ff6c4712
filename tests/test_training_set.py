"""tasks.training_set: phrases + augmentations + negatives joined part by part."""
from __future__ import annotations

import zlib

import pyarrow as pa

from storage.datasets import Dataset
from storage.schemas import AUGMENTATIONS, NEGATIVES, PHRASES
from tasks import training_set as ts


def ds(root, name, schema, parts):
    d = Dataset(root, name, "v1", schema)
    for i, rows in enumerate(parts):
        d.write_part(i, pa.Table.from_pylist(rows, schema=schema))
    d.commit(code_version="t", params={}, inputs={})
    return d


def phrase(text, label="NP-ORG", label_id=11):
    return {"phrase": text, "phrase_key": text.lower(), "lexical_type": "NP", "entity_type": "ORG",
            "label": label, "label_id": label_id, "frequency": 3, "example_sentence_ids": [1]}


def test_join_keeps_every_phrase_with_its_positives_and_negatives_in_order(root):
    phrases = ds(root, "phrases", PHRASES, [[phrase("The New York Times"), phrase("Apple")], [phrase("Paris")]])
    aug = ds(root, "augmentations", AUGMENTATIONS, [[
        {"phrase_key": "the new york times", "phrase": "The New York Times", "kind": "alias", "positive": "NYT",
         "source": "redirect", "rank": 1},
        {"phrase_key": "the new york times", "phrase": "The New York Times", "kind": "alias",
         "positive": "New York Times", "source": "anchor", "rank": 0},
        {"phrase_key": "the new york times", "phrase": "The New York Times", "kind": "wordnet",
         "positive": "The New York Multiplication", "source": "wordnet-3.0", "rank": 0}], []])
    negs = ds(root, "negatives", NEGATIVES, [[
        {"phrase_key": "the new york times", "phrase": "The New York Times", "negative": "The New York Review",
         "negative_key": "the new york review", "edit_sim": 0.81, "cosine": 0.8, "score": 0.8, "rank": 1},
        {"phrase_key": "the new york times", "phrase": "The New York Times", "negative": "The New York Post",
         "negative_key": "the new york post", "edit_sim": 0.8, "cosine": 0.7, "score": 0.8, "rank": 0}]])
    params = {"validation_fraction": 0.5}
    out = ts.plan_training_set(phrases, aug, negs, params)
    for part in range(2):
        ts.write_part(phrases, aug, negs, part, out, params)
    man = ts.commit_training_set(out, phrases, aug, negs, params)
    rows = {r["phrase"]: r for r in out.read().to_pylist()}
    assert set(rows) == {"The New York Times", "Apple", "Paris"} and man["rows"] == 3
    nyt = rows["The New York Times"]
    assert nyt["positives"] == [{"kind": "alias", "text": "New York Times", "sentence_id": None},
                                {"kind": "alias", "text": "NYT", "sentence_id": None},
                                {"kind": "wordnet", "text": "The New York Multiplication", "sentence_id": None}]
    assert nyt["negatives"] == ["The New York Post", "The New York Review"]
    assert rows["Paris"]["positives"] == [] and rows["Paris"]["negatives"] == []
    assert man["stats"]["phrases_without_negative"] == 2
    assert man["stats"].get("phrases_train", 0) + man["stats"].get("phrases_validation", 0) == 3
    assert len(man["extra"]["labels"]) == 95


def test_split_is_a_stable_hash_of_the_phrase():
    keys = [f"phrase {i}" for i in range(4000)]
    split = [ts.split_of(k, 0.05) for k in keys]
    assert split == [ts.split_of(k, 0.05) for k in keys]
    assert 0.03 < split.count("validation") / len(keys) < 0.07
    assert all(ts.split_of(k, 0.0) == "train" for k in keys[:100])


def alias(a, title, source="redirect", count=3):
    return {"alias": a, "title": title, "source": source, "count": count}


TITLES = [f"Article {i}" for i in range(40)]


def test_held_out_titles_are_a_stable_salted_hash_share():
    chosen = [ts.title_held_out(t, 0.25) for t in TITLES * 1]
    assert chosen == [ts.title_held_out(t, 0.25) for t in TITLES]
    many = [f"Title {i}" for i in range(4000)]
    assert 0.03 < sum(ts.title_held_out(t, 0.05) for t in many) / 4000 < 0.07
    assert not any(ts.title_held_out(t, 0.0) for t in many) and all(ts.title_held_out(t, 1.0) for t in many)
    # not the phrase split's hash: held-out articles are not all validation phrases
    held = [t for t in many if ts.title_held_out(t, 0.05)]
    assert sum(ts.split_of(t.casefold(), 0.05) == "validation" for t in held) < len(held) / 2


def test_held_out_aliases_never_appear_in_the_training_set(root):
    """A tiny corpus: every article has a redirect and an anchor; the held-out articles' pairs
    go to heldout_aliases and neither side of them is an anchor or a positive in training."""
    held = [t for t in TITLES if ts.title_held_out(t, 0.3)]
    kept = [t for t in TITLES if not ts.title_held_out(t, 0.3)]
    assert len(held) >= 3 and len(kept) >= 3
    rows = [alias(f"AKA {t}", t) for t in TITLES] + [alias(f"the {t.lower()}", t, "anchor", 1) for t in TITLES]
    rows.append(alias("the thing", held[0], "anchor"))  # ambiguous: names two articles
    rows.append(alias("the thing", kept[0], "anchor"))
    from storage.schemas import ALIASES

    # partitioned by alias text, as the aliases stage writes them
    aliases = ds(root, "aliases", ALIASES, [[r for r in rows if zlib.crc32(r["alias"].encode()) % 2 == i]
                                            for i in range(2)])
    hparams = {"alias_holdout_fraction": 0.3}
    heldout = ts.plan_heldout_aliases(aliases, hparams)
    hman = ts.build_heldout_aliases(aliases, heldout, hparams)
    pairs = {(r["alias"], r["title"]) for r in heldout.read().to_pylist()}
    assert pairs == {(f"AKA {t}", t) for t in held} | {(f"the {t.lower()}", t) for t in held}
    assert hman["stats"] == {"pairs": 2 * len(held), "ambiguous_aliases_not_held_out": 1, "titles": len(held)}

    # Phrases: every title and alias; positives naming other articles' names, as augmentations makes them.
    names = [(t, a) for t in TITLES for a in (t, f"AKA {t}", f"the {t.lower()}")]
    phrases = ds(root, "phrases", PHRASES, [[phrase(a) for _, a in names] + [phrase("the thing")]])
    aug_rows = [{"phrase_key": a.lower(), "phrase": a, "kind": "alias", "positive": b, "source": "redirect", "rank": i}
                for t, a in names for i, (t2, b) in enumerate(n for n in names if n[0] == t and n[1] != a)]
    aug_rows += [{"phrase_key": "the thing", "phrase": "the thing", "kind": "alias", "positive": t, "source": "title",
                  "rank": i} for i, t in enumerate((held[0], kept[0]))]
    aug = ds(root, "augmentations", AUGMENTATIONS, [aug_rows])
    negs = ds(root, "negatives", NEGATIVES, [[]])
    params = {"validation_fraction": 0.2, "alias_holdout_fraction": 0.3}
    out = ts.plan_training_set(phrases, aug, negs, params, heldout)
    ts.write_part(phrases, aug, negs, 0, out, params, heldout)
    man = ts.commit_training_set(out, phrases, aug, negs, params, heldout)
    assert man["inputs"]["heldout_aliases"] == heldout.version
    assert out.version != ts.plan_training_set(phrases, aug, negs, params).version

    table = out.read().to_pylist()
    assert len(table) == man["rows"] == len(names) + 1  # one row per phrase: nothing lost
    secret = {x.lower() for pair in pairs for x in pair}
    trained = [r for r in table if r["split"] != "heldout"]
    assert {r["phrase_key"] for r in table if r["split"] == "heldout"} == secret
    assert not secret & {r["phrase_key"] for r in trained}
    assert not secret & {p["text"].lower() for r in trained for p in r["positives"]}
    assert man["stats"]["phrases_heldout"] == len(secret)
    assert man["stats"]["phrases_train"] + man["stats"].get("phrases_validation", 0) == len(trained)
    # the kept articles keep their alias positives; "the thing" keeps the kept article only
    assert {p["text"] for r in trained if r["phrase"] == kept[1] for p in r["positives"]} == {
        f"AKA {kept[1]}", f"the {kept[1].lower()}"}
    assert [p["text"] for r in trained if r["phrase"] == "the thing" for p in r["positives"]] == [kept[0]]
    removed = sum(1 for r in aug_rows if r["positive"].lower() in secret and r["phrase_key"] not in secret)
    assert man["stats"]["positives_held_out"] == removed == 1  # only "the thing" -> held[0] crossed over


def test_a_context_positive_keeps_its_sentence_id_and_is_drawn_as_a_cached_kind(root):
    from pearl_model.training.loop import examples_from_rows

    phrases = ds(root, "phrases", PHRASES, [[phrase("Apple")]])
    aug = ds(root, "augmentations", AUGMENTATIONS, [[
        {"phrase_key": "apple", "phrase": "Apple", "kind": "context", "positive": "shares of [MASK] rose",
         "source": "sentence:42", "rank": 0, "sentence_id": 42}]])
    negs = ds(root, "negatives", NEGATIVES, [[]])
    params = {"validation_fraction": 0.0}
    out = ts.plan_training_set(phrases, aug, negs, params)
    ts.write_part(phrases, aug, negs, 0, out, params)
    ts.commit_training_set(out, phrases, aug, negs, params)
    row = out.read().to_pylist()[0]
    assert row["positives"] == [{"kind": "context", "text": "shares of [MASK] rose", "sentence_id": 42}]
    examples = examples_from_rows([row])
    assert examples[0].cached == {"context": ("shares of [MASK] rose",)}


def test_dataset_locations_are_paths_to_copy_with_the_command_that_uses_them(root, tmp_path):
    """The training-set (and dataset) artifacts show the location as an absolute path to copy, not a
    link: a browser refuses a file:// link from the UI's page, and a bare path in a link is resolved by
    the UI under its own address; fsspec URLs stay as they are."""
    import asyncio
    import re
    from pathlib import Path

    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    from tasks.promotion import dataset_links_task

    phrases = ds(root, "phrases", PHRASES, [[phrase("Paris")]])
    aug = ds(root, "augmentations", AUGMENTATIONS, [[]])
    negs = ds(root, "negatives", NEGATIVES, [[]])
    params = {"validation_fraction": 0.5}
    out = ts.plan_training_set(phrases, aug, negs, params)
    ts.write_part(phrases, aug, negs, 0, out, params)

    async def shown():  # each artifact's location: the first line of its code block
        async with get_client() as client:
            return {a.key: a.data for a in await client.read_artifacts()}

    with prefect_test_harness():
        ts.commit_training_set_task(out, phrases, aug, negs, params)
        dataset_links_task(root, {"phrases": "v1", "training_set": out.version})
        found = asyncio.run(shown())
    assert set(found) == {"training-set", "dataset-phrases", "dataset-training-set"}
    for md in found.values():  # a path to copy, not a link a browser refuses to open from the UI
        location = re.search(r"```text\n(.*)\n```", md).group(1)
        assert "file://" not in md and "](" not in md and Path(location).is_absolute(), md
    training_set = re.search(r"```text\n(.*)\n```", found["training-set"]).group(1)
    assert (Path(training_set) / "_manifest.json").exists() and Path(training_set) == Path(out.url)
    command = f"prefect deployment run train/pearl --watch --param training_set_version={out.version} "
    assert command in found["training-set"] and command in found["dataset-training-set"]
    assert "train/pearl" not in found["dataset-phrases"]

    from storage.datasets import as_location

    assert as_location("s3://bucket/models/m1") == "s3://bucket/models/m1"
    assert as_location("a b") == str(Path.cwd() / "a b")
