"""Parser "pmi" (ULR): candidate n-grams on the map side, the NPMI filter on the reduce side."""
from __future__ import annotations

import math
import random

import pytest

from pearl_model.phrases.pmi import lexical_type, npmi, pmi_words
from tasks import phrase_occurrences as occ_stage
from tasks import phrase_report
from tasks import phrases as phrase_stage
from tests.test_phrase_stages import params, sentences_dataset


def test_npmi_by_hand():
    # 100 words; "new zealand" 5 times, each word only there: PMI = (n-1) * -log p(g), NPMI 1
    assert npmi(5, [5, 5], 100) == pytest.approx(1.0)
    # independent words: p(g) = p(a) p(b) -> 0
    assert npmi(1, [10, 10], 100) == pytest.approx(0.0)
    # a trigram filling its words' every occurrence is 1 too (normalised by n - 1)
    assert npmi(4, [4, 4, 4], 1000) == pytest.approx(1.0)
    assert npmi(2, [10, 40], 200) == pytest.approx(math.log(2 / 200 / (10 / 200 * 40 / 200)) / -math.log(2 / 200))
    with pytest.raises(ValueError):
        npmi(3, [3], 10)


def test_words_and_lexical_types():
    assert pmi_words("New York's  parks, (mostly) green.") == ["new", "york's", "parks", "mostly", "green"]
    assert lexical_type(["ADP", "PROPN", "PROPN"]) == "PP"
    assert lexical_type(["ADJ", "NOUN"]) == "NP"
    assert lexical_type(["VERB", "DET", "NOUN"]) == "NP"  # the noun last decides, as for a parse's NP
    assert lexical_type(["VERB", "ADV"]) == "VP"
    assert lexical_type(["ADV", "ADJ"]) == "ADJP"


def planted_corpus(n: int = 240, seed: int = 0) -> list[str]:
    """Sentences where "Kuala Lumpur" and "stock exchange" always come together, and colours
    and vehicles meet by chance: side by side in a third of the sentences, apart otherwise."""
    rng = random.Random(seed)
    colours, vehicles = ["red", "blue", "green", "yellow"], ["car", "bus", "truck", "bicycle"]
    places = ["Kuala Lumpur", "Oslo", "Lima", "Quito"]
    templates = ["A {c} {v} waited near the stock exchange in {p} today.",
                 "The {v} outside the stock exchange was painted {c} in {p}.",
                 "People in {p} said {c} suits any {v} they own."]
    return [templates[i % 3].format(c=rng.choice(colours), v=rng.choice(vehicles), p=places[(i // 3) % 4])
            for i in range(n)]


def run_pmi(root: str, texts: list[str], min_npmi: float, min_freq: int = 2):
    sentences = sentences_dataset(root, [texts[: len(texts) // 2], texts[len(texts) // 2:]])
    p = params(parser="pmi", max_words=3, sentences_per_chunk=25)
    out = occ_stage.plan_outputs(sentences, p)
    for chunk in occ_stage.plan_chunks(sentences, p["sentences_per_chunk"]):
        occ_stage.write_chunk(sentences, chunk, out, p)
    occ_stage.commit_outputs(out, sentences, p)
    wp = {"min_freq": min_freq}
    totals = phrase_stage.plan_word_totals(out.word_counts, wp)
    for b in range(p["phrase_buckets"]):
        phrase_stage.write_word_totals(out.word_counts, b, totals, wp)
    phrase_stage.commit_word_totals(totals, out.word_counts, wp)
    rp = {"min_freq": min_freq, "examples_per_phrase": 2, "pmi_min_npmi": min_npmi}
    phrases = phrase_stage.plan_phrases(out.occurrences, rp, totals)
    stats = [phrase_stage.write_bucket(out.occurrences, b, phrases, rp, totals) for b in range(p["phrase_buckets"])]
    man = phrase_stage.commit_phrases(phrases, out.occurrences, rp, stats, totals)
    return phrases, man, totals, out


def test_planted_collocations_are_found_and_chance_pairs_are_not(tmp_path):
    texts = planted_corpus()
    phrases, man, totals, out = run_pmi(str(tmp_path), texts, min_npmi=0.5)
    kept = {r["phrase_key"]: r for r in phrases.read().to_pylist()}
    assert "kuala lumpur" in kept and "stock exchange" in kept
    assert kept["kuala lumpur"]["entity_type"] in ("GPE", "LOC", "FAC", "ORG", "OTHER")
    for colour in ("red", "blue", "green", "yellow"):
        for vehicle in ("car", "bus", "truck", "bicycle"):
            assert f"{colour} {vehicle}" not in kept  # seen ~5 times each, but by chance
    # single words that stand alone stay, by frequency alone; a noun inside an n-gram does not
    assert "quito" in kept and "oslo" in kept and "car" not in kept
    s = man["stats"]
    assert s["ngrams_kept"] + s["ngrams_filtered_below_npmi"] + s["ngrams_filtered_below_min_freq"] \
        + s["ngrams_filtered_word_unknown"] == s["ngrams_scored"]
    assert s["ngrams_filtered_below_npmi"] >= 16
    # every word was counted, the totals keep the frequent ones
    words = sum(len(pmi_words(t)) for t in texts)
    assert totals.manifest()["stats"]["total_words"] == words
    # the flow's report reconciles the phrases the NPMI filter dropped
    counts = phrase_report.phrase_counts(out.stats, phrases)
    table = phrase_report.counts_table(counts)
    assert {"group": "phrases filtered", "what": "pmi", "count": s["phrases_filtered_pmi"]} in table
    assert s["phrases_filtered_pmi"] > 0
    md = phrase_report.datasets_markdown([phrases], counts, None, [])
    assert f"kept **{s['phrases_kept']}** + filtered **{s['distinct_phrases'] - s['phrases_kept']}**" in md


def test_a_corpus_too_small_for_the_thresholds_says_what_passed(tmp_path):
    with pytest.raises(ValueError, match=r"no n-gram passed.*ngrams_filtered_below_min_freq \d+"):
        run_pmi(str(tmp_path), ["A red car waited.", "A blue bus left early.", "Nothing repeats here at all."],
                min_npmi=0.3)


def test_single_words_are_candidates_only_where_a_parse_would_keep_one():
    from pearl_model.phrases.pmi import candidates
    from pearl_model.phrases.spacy_rules import load_spacy

    nlp = load_spacy(disable=("parser", "lemmatizer"))
    doc = nlp("Bribery consumed the national budget while officials slept quietly.")
    singles = {doc.text[c.start:c.end] for c in candidates(doc, 4) if " " not in doc.text[c.start:c.end]}
    assert "Bribery" in singles and "quietly" in singles  # a bare noun, an adverb
    assert "budget" not in singles and "national" not in singles  # inside "the national budget"
    assert "consumed" not in singles  # it has an object
    multi = {doc.text[c.start:c.end] for c in candidates(doc, 4)}
    assert "national budget" in multi and "the national budget" not in multi  # no stop word at an edge


def test_symbols_end_an_ngram_as_punctuation_does():
    from pearl_model.phrases.pmi import candidates
    from pearl_model.phrases.spacy_rules import load_spacy

    nlp = load_spacy(disable=("parser", "lemmatizer"))
    doc = nlp("The square measured 10 cm × 10 cm and cost $ 5 at Sight & Sound in blackboard bold \u2060\u2060.")
    spans = {doc.text[c.start:c.end] for c in candidates(doc, 6)}
    assert "10 cm" in spans and "Sight & Sound" in spans
    assert not any(ch in span for span in spans for ch in ("×", "$", "\u2060", "."))
    assert "& Sound" not in spans and "Sight &" not in spans


def test_a_change_to_the_pmi_candidates_versions_only_the_pmi_datasets(tmp_path, monkeypatch):
    sentences = sentences_dataset(str(tmp_path), [["A sentence."]])
    spacy_p, pmi_p = params(), params(parser="pmi")
    before = {n: occ_stage.plan_outputs(sentences, p).occurrences.version for n, p in (("spacy", spacy_p), ("pmi", pmi_p))}
    monkeypatch.setitem(occ_stage.PARSER_CODE_VERSIONS, "pmi", "pmi-candidates-next")
    assert occ_stage.plan_outputs(sentences, spacy_p).occurrences.version == before["spacy"]
    assert occ_stage.plan_outputs(sentences, pmi_p).occurrences.version != before["pmi"]


def test_the_pos_lookup_gives_the_attribute_rulers_pos_on_every_token():
    # The ruler's Matcher pass replaced by a lookup of its own rules: every token's POS, and so every
    # candidate, as with the ruler (the words its exceptions name: "n't", "'s", "have", "that")
    import warnings

    from pearl_model.phrases.pmi import PmiCandidates, TagPos, candidates
    from tests.test_phrase_stages import SENTENCES_TEXT

    texts = [t for t in SENTENCES_TEXT if t] + [
        "She didn't say that it's the one they have seen, but those were not there.",
        "I'm sure there are some who'd have done it , and  that  was that.",
        "What did he do?  Who's there?\tNobody knows which one."]
    fast = PmiCandidates(entities=False)
    assert fast._pos is not None and "attribute_ruler" not in fast.nlp.pipe_names
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast.nlp.enable_pipe("attribute_ruler")  # the same pipeline with its ruler back
        try:
            ruled = list(fast.nlp.pipe(texts))
        finally:
            fast.nlp.disable_pipe("attribute_ruler")
        looked = [fast._pos.annotate(d) for d in fast.nlp.pipe(texts)]
    assert [[t.pos_ for t in d] for d in looked] == [[t.pos_ for t in d] for d in ruled]
    assert {t.pos_ for d in ruled for t in d} >= {"AUX", "PART", "PRON", "VERB", "NOUN", "SPACE"}
    assert [candidates(d, 8) for d in looked] == [candidates(d, 8) for d in ruled]


def test_the_pos_lookup_declines_rules_it_cannot_settle():
    from pearl_model.phrases.pmi import TagPos

    class Ruler:
        def __init__(self, patterns):
            self.patterns = patterns

    class Nlp:
        pipe_names = ["tok2vec", "tagger", "attribute_ruler"]

        def __init__(self, patterns):
            self.ruler = Ruler(patterns)

        def get_pipe(self, name):
            return self.ruler

    tag = {"patterns": [[{"TAG": "NN"}]], "attrs": {"POS": "NOUN"}}
    dep = {"patterns": [[{"DEP": "expl"}, {"LOWER": "is"}]], "attrs": {"POS": "VERB"}}  # never without a parser
    assert TagPos.of(Nlp([tag, dep])).rules == [({"tag_": "NN"}, "NOUN")]
    not_dep = {"patterns": [[{"TAG": "DT", "DEP": {"NOT_IN": ["det"]}}]], "attrs": {"POS": "PRON"}}  # "" is not det
    assert TagPos.of(Nlp([tag, not_dep])).rules[-1] == ({"tag_": "DT"}, "PRON")
    assert TagPos.of(Nlp([tag, {"patterns": [[{"TAG": {"REGEX": "^N"}}]], "attrs": {"POS": "NOUN"}}])) is None
    assert TagPos.of(Nlp([tag, {"patterns": [[{"TAG": "NN"}, {"TAG": "NN"}]], "attrs": {"POS": "NOUN"}}])) is None
    Nlp.pipe_names = ["tok2vec", "tagger", "parser", "attribute_ruler"]
    assert TagPos.of(Nlp([tag])) is None  # with a parser, DEP tests could match: keep the ruler
