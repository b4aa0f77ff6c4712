"""pearl_model.phrases.senses: the head word of a phrase and its WordNet supersense."""
from __future__ import annotations

from pathlib import Path

import pytest

from pearl_model.phrases.labels import label_id
from pearl_model.phrases.senses import NO_SENSE, NOUN_SENSES, SENSE_IDS, head_word, phrase_sense
from pearl_model.pairs.synonyms import LEXNAMES, wordnet_dir


class Lexicon:
    def __init__(self, senses: dict[str, str]):
        self.senses, self.asked = senses, []

    def noun_lexname(self, word: str) -> str | None:
        self.asked.append(word)
        return self.senses.get(word)


@pytest.mark.parametrize("phrase, head", [
    ("the densities of the alkali metals", "densities"), ("of spontaneous abortion", "abortion"),
    ("caustic potash", "potash"), ("anarchism's", "anarchism"), ("in the city that never sleeps", "city"),
    ("cats and dogs", "cats"), ("(pneumonia)", "pneumonia"), ("of", ""), ("", "")])
def test_head_word(phrase, head):
    assert head_word(phrase) == head


def test_only_other_noun_and_prepositional_phrases_get_a_sense():
    lex = Lexicon({"pneumonia": "noun.state", "potash": "noun.substance", "run": "noun.act"})
    assert NOUN_SENSES[phrase_sense("acute pneumonia", label_id("NP-OTHER"), lex)] == "noun.state"
    assert NOUN_SENSES[phrase_sense("with caustic potash", label_id("PP-OTHER"), lex)] == "noun.substance"
    assert phrase_sense("pneumonia", label_id("NP-PERSON"), lex) == NO_SENSE  # the type head's phrase
    assert phrase_sense("a long run", label_id("VP-OTHER"), lex) == NO_SENSE
    assert phrase_sense("the widget", label_id("NP-OTHER"), lex) == NO_SENSE  # not in the lexicon
    asked = len(lex.asked)
    assert phrase_sense("1.0", label_id("NP-OTHER"), lex) == NO_SENSE and len(lex.asked) == asked  # not a word


def test_the_senses_are_wordnets_noun_lexicographer_files():
    names = [line.split("\t")[1] for line in LEXNAMES.splitlines()]
    assert list(NOUN_SENSES) == [n for n in names if n.startswith("noun.")]
    assert SENSE_IDS["noun.state"] == NOUN_SENSES.index("noun.state")


@pytest.mark.skipif(not (Path(wordnet_dir()) / "data.noun").is_file(), reason="WordNet 3.0 not installed")
def test_wordnet_supersenses_of_chemicals_and_diseases():
    from pearl_model.pairs.synonyms import WordNetSynonyms

    wn = WordNetSynonyms()
    assert wn.noun_lexname("diseases") == "noun.state"  # through morphy
    assert wn.noun_lexname("sodium") == "noun.substance"
    assert wn.noun_lexname("quickly") is None and wn.noun_lexname("") is None
    other = label_id("NP-OTHER")
    assert NOUN_SENSES[phrase_sense("chronic hepatitis", other, wn)] != NOUN_SENSES[phrase_sense("potassium chloride", other, wn)]
