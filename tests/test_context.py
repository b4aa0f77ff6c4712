"""pearl_model.pairs.context: the phrase-in-context positive cut from a sentence."""
from __future__ import annotations

import pytest

from pearl_model.pairs.context import MASK, context_positive

SENTENCE = "In 1921 the old bridge over the river was rebuilt by the city council of Riga after the war ."


def test_the_phrase_is_masked_and_the_window_counts_words_either_side():
    got = context_positive("the river", SENTENCE, window=3)
    assert got == f"old bridge over {MASK} was rebuilt by"
    assert context_positive("the river", SENTENCE, window=3, mask=False) == "old bridge over the river was rebuilt by"


def test_case_is_ignored_but_the_sentence_spelling_is_kept():
    assert context_positive("The City Council", SENTENCE, window=1, mask=False) == "by the city council of"


def test_the_phrase_must_match_whole_words():
    assert context_positive("bridge", "Two bridges crossed here.") is None
    assert context_positive("old", "The bold move.") is None


def test_tokens_rejoined_by_the_parser_still_match():
    assert context_positive("New York 's", "He liked New York's parks a lot.", window=2) == f"He liked {MASK} parks a"


def test_no_context_and_bad_window():
    assert context_positive("the war", "The war") is None  # nothing but the phrase
    assert context_positive("Tallinn", SENTENCE) is None
    with pytest.raises(ValueError, match="context_window"):
        context_positive("the river", SENTENCE, window=0)
