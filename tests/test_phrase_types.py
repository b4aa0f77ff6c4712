"""ner_scope "examples": a mining pass without NER, then entity types from the kept phrases' example sentences."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pyarrow as pa
import pytest

from flows.corpus_config import PhrasesConfig
from storage.datasets import Dataset
from storage.schemas import SENTENCES
from tasks import phrase_occurrences as occ_stage
from tasks import phrase_report
from tasks import phrase_types
from tasks import phrases as phrase_stage
from tests.test_phrase_stages import SENTENCES_TEXT, params, run_stages, sentences_dataset, table_rows


def run_typed(sentences: Dataset, p: dict, min_freq: int = 2):
    """The deferred stages as the flow wires them: mining without NER, the count, the typing."""
    p = {**p, "ner_scope": "examples"}
    out = occ_stage.plan_outputs(sentences, p)
    for chunk in occ_stage.plan_chunks(sentences, p["sentences_per_chunk"]):
        occ_stage.write_chunk(sentences, chunk, out, p)
    occ_stage.commit_outputs(out, sentences, p)
    rp = {"min_freq": min_freq, "examples_per_phrase": p["examples_per_phrase"], "ner_scope": "examples"}
    untyped = phrase_stage.plan_phrases(out.occurrences, rp)
    stats = [phrase_stage.write_bucket(out.occurrences, b, untyped, rp) for b in range(p["phrase_buckets"])]
    phrase_stage.commit_phrases(untyped, out.occurrences, rp, stats)
    plan = phrase_types.plan_types(untyped, sentences, p, p["phrase_buckets"])
    for b in range(p["phrase_buckets"]):
        phrase_types.write_requests(untyped, b, plan)
    phrase_types.commit_step(plan.requests, untyped, sentences, p)
    for g in range(len(plan.starts)):
        phrase_types.write_votes(g, plan, p, sentences)
    phrase_types.commit_step(plan.votes, untyped, sentences, p)
    for b in range(p["phrase_buckets"]):
        phrase_types.write_types(untyped, b, plan)
    phrase_types.commit_types(plan, untyped, sentences, p)
    return out, untyped, plan.phrases


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """All-NER and examples-NER runs of the same sentences, every sentence of a phrase an example."""
    root = str(tmp_path_factory.mktemp("types"))
    s = sentences_dataset(root, [SENTENCES_TEXT[:6], SENTENCES_TEXT[6:12], SENTENCES_TEXT[12:]])
    _, full = run_stages(s, params(examples_per_phrase=50))
    out, untyped, typed = run_typed(s, params(examples_per_phrase=50))
    return s, full, out, untyped, typed


def test_the_mining_pass_runs_no_ner(both):
    _, full, _, untyped, _ = both
    assert untyped.name == "untyped_phrases"
    assert {r["entity_type"] for r in untyped.read().to_pylist()} == {"OTHER"}
    assert {r["entity_type"] for r in full.read().to_pylist()} > {"OTHER"}  # the sentences hold entities


def test_typing_on_every_example_equals_typing_every_occurrence(both):
    # with every sentence of a phrase among its examples, the votes are all its occurrences
    _, full, _, _, typed = both
    assert typed.name == "phrases"
    assert table_rows(typed) == table_rows(full)
    rows = {r["phrase_key"]: r for r in table_rows(typed)}
    assert rows["the new york times"]["label"] == "NP-ORG" and rows["in 2019"]["label"] == "PP-DATE"


def test_counts_reconcile_and_the_report_reads_the_typed_phrases(both):
    _, _, out, untyped, typed = both
    stats = typed.manifest()["stats"]
    assert stats["requests"] == stats["requests_matched"] + stats["requests_unmatched"]
    assert stats["requests_unmatched"] == 0  # the same parse finds every phrase again
    assert stats["phrases_typed_by_examples"] + stats["phrases_without_example_vote"] == typed.manifest()["rows"]
    assert stats["phrases_without_example_vote"] == 0
    assert stats["requests"] == sum(len(r["example_sentence_ids"]) for r in untyped.read().to_pylist())
    counts = phrase_report.phrase_counts(out.stats, typed)
    assert counts["phrases"]["phrases_kept"] == typed.manifest()["rows"]
    table = phrase_report.counts_table(counts)
    assert {"group": "entity types", "what": "phrases typed by example votes",
            "count": stats["phrases_typed_by_examples"]} in table


def test_one_example_types_by_that_sentence_only(tmp_path):
    # "apple": an ORG in each sentence; "2019" and others typed from their first sentence only
    s = sentences_dataset(str(tmp_path), [SENTENCES_TEXT])
    _, _, typed = run_typed(s, params(examples_per_phrase=1))
    stats = typed.manifest()["stats"]
    assert stats["requests"] == typed.manifest()["rows"]
    assert stats["example_sentences"] <= stats["requests"]
    rows = {r["phrase_key"]: r for r in table_rows(typed)}
    assert rows["apple"]["entity_type"] == "ORG"
    assert all(len(r["example_sentence_ids"]) == 1 for r in rows.values())


def test_parts_with_overlapping_id_ranges_share_a_group():
    ranges = [("c", 50, 60), ("a", 0, 10), ("b", 5, 20), ("d", 70, 80)]
    starts, files = phrase_types.group_parts(ranges, groups=8)
    assert starts == (0, 50, 70) and files == (("a", "b"), ("c",), ("d",))
    starts, files = phrase_types.group_parts(ranges, groups=2)
    assert starts == (0, 70) and files == (("a", "b", "c"), ("d",))


def test_sentences_parts_with_interleaved_ids_are_all_read(tmp_path):
    # two parts whose id ranges interleave: one group reads both, and every request is matched
    d = Dataset(str(tmp_path), "sentences", "s1", SENTENCES)
    texts = [t for t in SENTENCES_TEXT if t]
    for part in (0, 1):
        rows = [{"sentence_id": 100 + 2 * j + part, "page_id": 1, "index": j, "text": t}
                for j, t in enumerate(texts) if j % 2 == part]
        d.write_part(part, pa.Table.from_pylist(rows, schema=SENTENCES))
    d.commit(code_version="t", params={}, inputs={})
    _, _, typed = run_typed(d, params(examples_per_phrase=2))
    stats = typed.manifest()["stats"]
    assert stats["requests_unmatched"] == 0 and stats["requests_unroutable"] == 0
    assert stats["requests_matched"] == stats["requests"] > 0


def test_scope_all_leaves_dataset_versions_as_they_were():
    assert "ner_scope" not in PhrasesConfig(ner_scope="all").params()
    assert "ner_scope" not in PhrasesConfig(ner_scope="all").mining_params(8)
    assert PhrasesConfig().mining_params(8)["ner_scope"] == "examples"  # the default
    assert PhrasesConfig(ner_scope="examples").mining_params(8)["ner_scope"] == "examples"
    assert PhrasesConfig(ner_scope="examples").reduce_params()["ner_scope"] == "examples"


def test_the_scope_comparison_counts_agreement_by_frequency_band():
    spec = importlib.util.spec_from_file_location(
        "entity_typing_scope", Path(__file__).resolve().parents[1] / "benchmarks" / "entity_typing_scope.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compare = module.compare
    full = [{"phrase_key": "a", "entity_type": "ORG", "frequency": 2},
            {"phrase_key": "b", "entity_type": "GPE", "frequency": 50},
            {"phrase_key": "c", "entity_type": "OTHER", "frequency": 60},
            {"phrase_key": "d", "entity_type": "DATE", "frequency": 500}]
    examples = [{**full[0]}, {**full[1], "entity_type": "ORG"}, {**full[2]}]  # "d" not in the examples run
    result = compare(full, examples)
    assert result["shared"] == 3 and result["overall"]["agreement"] == round(2 / 3, 4)
    assert result["by_frequency"]["2-3"] == {"phrases": 1, "agreement": 1.0, "typed_share_all": 1.0,
                                             "typed_share_examples": 1.0}
    assert result["by_frequency"]["10-99"]["agreement"] == 0.5
    assert result["disagreements"] == {"GPE -> ORG": 1}


def test_the_typing_store_is_of_the_ner_models_files(tmp_path):
    """A transformers NER in a local directory is in the store's identity by its files: another
    file there is another identity; the mining pass without NER does not read it."""
    from pearl_model.phrases.mining import sentence_identity

    model = tmp_path / "ner"
    model.mkdir()
    (model / "config.json").write_text("{}")
    params = {"parser": "spacy", "ner": "transformers", "ner_options": {"model": str(model)}, "language": "en",
              "max_sentence_chars": 600, "min_words": 1, "max_words": 8, "ner_scope": "examples"}
    before = phrase_types.reuse_identity(params)
    (model / "config.json").write_text('{"labels": 9}')
    after = phrase_types.reuse_identity(params)
    assert before["ner_model"] != after["ner_model"] and len(after["ner_model"]) == 64
    assert "ner_model" not in sentence_identity(params, entities=False)[0]
    assert "ner_model" not in phrase_types.reuse_identity({**params, "ner_options": {"model": "org/hub-name"}})
