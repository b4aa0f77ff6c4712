"""pearl_model.phrases: the 95 labels, the typing rule, screening, spaCy-derived constituents, mine()."""
from __future__ import annotations

import pytest

from pearl_model.phrases import labels
from pearl_model.phrases.entity_types import majority_entity_type, majority_lexical_type, occurrence_type
from pearl_model.phrases.mining import check_stats, make_ner, make_parser, mine, phrase_key, surface_form
from pearl_model.phrases.screening import screen
from pearl_model.phrases.spans import Constituent, Entity, ModelMissing, ParsedSentence, dedupe


# --- labels -----------------------------------------------------------------------------------
def test_vocabulary_is_5_lexical_by_19_entity_types():
    assert len(labels.ONTONOTES_TYPES) == 18
    assert len(labels.LABELS) == 95 == len(set(labels.LABELS))
    assert labels.LABELS[labels.label_id("NP-ORG")] == "NP-ORG"
    assert labels.label("PP", "QUANTITY") == "PP-QUANTITY"
    rows = labels.vocabulary()
    assert [r["label_id"] for r in rows] == list(range(95))
    assert {(r["lexical_type"], r["entity_type"]) for r in rows} == {
        (lt, et) for lt in labels.LEXICAL_TYPES for et in labels.ENTITY_TYPES}
    with pytest.raises(ValueError, match="unknown phrase label"):
        labels.label("NN", "ORG")
    with pytest.raises(ValueError):
        labels.label_id("NP-MISC")


@pytest.mark.parametrize("raw,expected", [
    ("B-ORG", "ORG"), ("I-WORK_OF_ART", "WORK_OF_ART"), ("gpe", "GPE"), ("S-PERSON", "PERSON"),
    ("PER", "PERSON"), ("O", None), ("B-MISC", None), ("", None),
])
def test_ontonotes_type(raw, expected):
    assert labels.ontonotes_type(raw) == expected


# --- the typing rule --------------------------------------------------------------------------
TEXT = "He moved to New York with the New York Times building."


def span(phrase: str, start: int = 0) -> tuple[int, int]:
    i = TEXT.index(phrase, start)
    return i, i + len(phrase)


NEW_YORK = Entity(*span("New York"), "GPE")
NYT = Entity(*span("New York Times"), "ORG")


def test_exact_span_takes_the_entity_type():
    assert occurrence_type(Constituent(*span("New York"), "NP", span("York")), [NEW_YORK]) == "GPE"
    assert occurrence_type(Constituent(*span("New York"), "NP", None), [NEW_YORK]) == "GPE"


def test_head_inside_an_entity_inside_the_phrase():
    # "to New York": the PP's head is the object's noun "York", inside the GPE.
    assert occurrence_type(Constituent(*span("to New York"), "PP", span("York")), [NEW_YORK, NYT]) == "GPE"


def test_head_outside_the_entity_is_other():
    # "the New York Times building" is headed by "building", outside the ORG.
    assert occurrence_type(Constituent(*span("the New York Times building"), "NP", span("building")), [NYT]) == "OTHER"
    # ...while "the New York Times" is headed by "Times", inside it.
    assert occurrence_type(Constituent(*span("the New York Times"), "NP", span("Times")), [NYT]) == "ORG"


def test_entity_sticking_out_of_the_phrase_does_not_count():
    # "York" alone: its head is inside the GPE, but the GPE is wider than the phrase.
    assert occurrence_type(Constituent(*span("York"), "NP", span("York")), [NEW_YORK]) == "OTHER"


def test_no_head_means_exact_match_only():
    assert occurrence_type(Constituent(*span("to New York"), "PP", None), [NEW_YORK]) == "OTHER"


def test_majority_and_its_tie_breaks():
    assert majority_entity_type({"ORG": 3, "OTHER": 5}) == "OTHER"
    assert majority_entity_type({"ORG": 2, "OTHER": 2}) == "ORG"  # an entity beats OTHER on a tie
    assert majority_entity_type({"PERSON": 2, "GPE": 2}) == "GPE"  # OntoNotes order
    assert majority_lexical_type({"PP": 1, "NP": 1, "VP": 4}) == "VP"
    assert majority_lexical_type({"PP": 3, "NP": 3}) == "NP"
    with pytest.raises(ValueError):
        majority_entity_type({})


def test_dedupe_keeps_one_type_per_span():
    cs = [Constituent(0, 5, "VP"), Constituent(0, 5, "NP"), Constituent(0, 9, "PP")]
    assert dedupe(cs) == [Constituent(0, 9, "PP"), Constituent(0, 5, "NP")]


def test_span_validation():
    with pytest.raises(ValueError):
        Constituent(3, 3, "NP")
    with pytest.raises(ValueError):
        Constituent(0, 3, "QP")
    with pytest.raises(ValueError):
        Entity(0, 3, "MISC")


# --- normalisation and screening -------------------------------------------------------------
def test_normalisation():
    assert surface_form("  The\tNew  York\nTimes ") == "The New York Times"
    assert phrase_key("The  NEW York Times") == phrase_key("the new york times") == "the new york times"
    assert phrase_key("ﬁnance") == "finance"  # NFKC folds the ligature
    assert phrase_key("Straße") == "strasse"  # casefold, not lower


@pytest.mark.parametrize("text,reason", [
    ("", "empty"), ("   \n", "empty"), (None, "empty"),
    ("12 345 (67) -- 8.9 %", "symbol_only"), ("∑ ∫ → ≤", "symbol_only"),
    ("word " * 200, "too_long"),
    ("Le chat est sur la table et il dort dans la maison de ma grand-mère.", "non_english"),
    ("Der Hund läuft jeden Morgen schnell über die breite Straße zum Park.", "non_english"),
    ("東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。", "non_english"),
    ("The New York Times reported on Apple in 2019.", None),
    ("Kropotkin was born in Moscow.", None),  # short, full of names: never judged
    ("Paris.", None),
])
def test_screen(text, reason):
    assert screen(text, max_chars=600) == reason


# --- the spaCy-derived constituents on real sentences ------------------------------------------
@pytest.fixture(scope="module")
def spacy_parser():
    return make_parser("spacy")


def phrases_of(parser, text: str) -> set[tuple[str, str]]:
    (p,) = list(parser.parse([text]))
    return {(c.lexical_type, p.phrase(c)) for c in p.constituents}


def test_every_lexical_type_from_a_real_sentence(spacy_parser):
    got = phrases_of(spacy_parser, "The New York Times reported on Apple in 2019 very quickly, "
                                   "and its editors were quite happy with the result.")
    expected = {("NP", "The New York Times"), ("VP", "reported on Apple in 2019 very quickly"),
                ("PP", "on Apple"), ("NP", "Apple"), ("PP", "in 2019"), ("ADVP", "very quickly"),
                ("NP", "its editors"), ("VP", "were quite happy with the result"),
                ("ADJP", "quite happy with the result"), ("PP", "with the result"), ("NP", "the result")}
    assert expected <= got
    # Not constituents in a PTB tree: a compound inside a flat NP, a bare premodifying adverb.
    assert ("NP", "New York") not in got
    assert ("ADVP", "very") not in got and ("ADVP", "quite") not in got
    # Punctuation never at a span's edge; the subject is not in the VP.
    assert not any(ph[-1] in ",." or ph[0] in ",." for _, ph in got)


def test_noun_post_modifiers_and_prepositions_tagged_sconj(spacy_parser):
    got = phrases_of(spacy_parser, "The capital of France is Paris.")
    assert {("NP", "The capital of France"), ("PP", "of France"), ("NP", "France"), ("NP", "Paris")} <= got
    got = phrases_of(spacy_parser, "She has been working at the United Nations since 1995.")
    assert {("VP", "working at the United Nations since 1995"), ("PP", "at the United Nations"),
            ("PP", "since 1995")} <= got
    assert not any(lt == "NP" and ph == "She" for lt, ph in got)  # a lone pronoun is no phrase


def test_coordinated_verbs_and_noun_modifying_verbs(spacy_parser):
    got = phrases_of(spacy_parser, "He moved to New York in the early 19th century and became a very successful lawyer.")
    assert ("VP", "moved to New York in the early 19th century") in got  # cut before "and became"
    assert ("VP", "became a very successful lawyer") in got
    assert ("ADJP", "very successful") in got
    got = phrases_of(spacy_parser, "Anarchism advocates self-governed societies.")
    assert ("VP", "governed") not in got


def test_heads_and_entities_ride_along(spacy_parser):
    (p,) = list(spacy_parser.parse(["He moved to New York in 1850."]))
    by_phrase = {p.phrase(c): c for c in p.constituents}
    pp = by_phrase["to New York"]
    assert p.text[pp.head[0]:pp.head[1]] == "York"
    assert {(p.text[e.start:e.end], e.type) for e in p.entities} >= {("New York", "GPE"), ("1850", "DATE")}
    assert occurrence_type(pp, p.entities) == "GPE"


def test_missing_spacy_model_names_what_to_install():
    with pytest.raises(ModelMissing, match="install"):
        make_parser("spacy", model="en_core_web_nonexistent")
    with pytest.raises(ValueError, match="unknown parser"):
        make_parser("stanza")
    with pytest.raises(ValueError, match="unknown NER"):
        make_ner("flair")


# --- mine(): every sentence and occurrence accounted for ------------------------------------
class FixedParser:
    """A parser with known output, so mine()'s bookkeeping is checked exactly."""

    name = "fixed"

    def __init__(self, fail_on: str | None = None):
        self.fail_on = fail_on

    def parse(self, texts):
        for t in texts:
            if t == self.fail_on:
                yield ParsedSentence(t, [], None, error="parse_failed: ValueError")
                continue
            words = t.rstrip(".").split(" ")
            ends = [sum(len(w) + 1 for w in words[:i + 1]) - 1 for i in range(len(words))]
            # every prefix of the words is an "NP"; the first word is an entity
            yield ParsedSentence(t, [Constituent(0, e, "NP", (0, len(words[0]))) for e in ends],
                                 [Entity(0, len(words[0]), "PERSON")], len(words))


def test_mine_accounts_for_everything():
    texts = ["Alice met Bob near the river bank today.", "", "Alice ran.", "12 34", "Bad one here.", None]
    occ, stats = mine(texts, FixedParser(fail_on="Bad one here."), None, min_words=2, max_words=4)
    check_stats(stats)
    assert stats["sentences_in"] == 6
    assert stats["sentences_filtered_empty"] == 2 and stats["sentences_filtered_symbol_only"] == 1
    assert stats["sentences_failed"] == 1 and stats["sentences_parsed"] == 2
    # 8 prefixes + 2 prefixes found; 1-word ones too short, 5+ words too long
    assert stats["occurrences_found"] == 10
    assert stats["occurrences_filtered_too_few_words"] == 2
    assert stats["occurrences_filtered_too_many_words"] == 4
    assert stats["occurrences_kept"] == 4 == len(occ)
    assert {o.phrase for o in occ} == {"Alice met", "Alice met Bob", "Alice met Bob near", "Alice ran"}
    assert all(o.index in (0, 2) for o in occ)
    # the head "Alice" lies in the PERSON entity inside every phrase
    assert {o.entity_type for o in occ} == {"PERSON"}
    assert {o.key for o in occ} >= {"alice met bob"}


def test_check_stats_catches_a_lost_sentence():
    with pytest.raises(AssertionError, match="reconcile"):
        check_stats({"sentences_in": 3, "sentences_parsed": 2, "occurrences_found": 0, "occurrences_kept": 0})


def test_ner_none_types_everything_other():
    occ, _ = mine(["Alice met Bob."], FixedParser(), make_ner("none"), min_words=1, max_words=5)
    assert occ and {o.entity_type for o in occ} == {"OTHER"}


def test_spacy_ner_needs_a_parser_that_gives_entities():
    class NoEnts(FixedParser):
        def parse(self, texts):
            for p in super().parse(texts):
                p.entities = None
                yield p

    with pytest.raises(ValueError, match="spaCy-based parser"):
        mine(["Alice met Bob."], NoEnts(), make_ner("spacy"))


def test_spans_cut_inside_brackets_are_dropped(spacy_parser):
    (p,) = list(spacy_parser.parse(["He joined the General Union of Anarchists (Draft) in 1926."]))
    for c in p.constituents:
        text = p.phrase(c)
        assert text.count("(") == text.count(")"), text
