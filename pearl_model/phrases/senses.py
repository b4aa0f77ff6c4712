"""Noun supersenses: the WordNet lexicographer file of an OTHER phrase's head noun.

The 95 phrase types give the common nouns of a corpus one label (``NP-OTHER``), so nothing
in the training signal tells a chemical from a disease, a tool from a feeling: InfoNCE on
surface positives leaves that layout to chance, and BC5CDR's chemical/disease split flipped
with the seed (docs/research/recipe-seeds.md). WordNet's 26 noun lexicographer files (``noun.substance``,
``noun.state``, ``noun.artifact``, ...; "supersenses") are a coarse semantic typing of
exactly those phrases, free offline. On BC5CDR-dev 2,335 of 4,000 disease names have a head
in ``noun.state`` and 2,633 of 5,400 chemical names one in ``noun.substance`` or
``noun.artifact`` (drugs): the direction the split needs.

The head is found without a parse (the training set keeps no tree): leading prepositions
are skipped, the phrase is cut at its first preposition, conjunction or relative pronoun
("the densities of the alkali metals" -> densities), and its last word is looked up (most
frequent noun sense, through morphy). Entity-typed phrases keep their own type (the type
head's), and verb, adjective and adverb phrases get none.
"""
from __future__ import annotations

from typing import Protocol

from pearl_model.phrases.labels import LABELS, OTHER

NOUN_SENSES: tuple[str, ...] = (
    "noun.Tops", "noun.act", "noun.animal", "noun.artifact", "noun.attribute", "noun.body", "noun.cognition",
    "noun.communication", "noun.event", "noun.feeling", "noun.food", "noun.group", "noun.location",
    "noun.motive", "noun.object", "noun.person", "noun.phenomenon", "noun.plant", "noun.possession",
    "noun.process", "noun.quantity", "noun.relation", "noun.shape", "noun.state", "noun.substance", "noun.time")
SENSE_IDS = {s: i for i, s in enumerate(NOUN_SENSES)}
NO_SENSE = -1
SENSED_LEXICAL_TYPES = ("NP", "PP")

# Where a noun phrase's head ends: post-modifiers start with these (lower-cased).
_CUT = frozenset("of in for with on at from by to as into onto upon between against during under over about "
                 "among through within without across along around behind beyond toward towards via per "
                 "and or but that which who whom whose where when than like".split())
_STRIP = ".,;:!?()[]{}\"'`“”‘’"


class NounLexicon(Protocol):
    def noun_lexname(self, word: str) -> str | None: ...


def head_word(phrase: str) -> str:
    """The last word before the first post-modifier (leading prepositions skipped), lower-cased."""
    words = phrase.split()
    while words and words[0].lower() in _CUT:
        words = words[1:]
    for i, w in enumerate(words):
        if w.lower() in _CUT:
            words = words[:i]
            break
    if not words:
        return ""
    word = words[-1].strip(_STRIP).lower()
    return word[:-2] if word.endswith("'s") else word


def phrase_sense(phrase: str, label_id: int, lexicon: NounLexicon) -> int:
    """The id in :data:`NOUN_SENSES` of an OTHER noun or prepositional phrase's head, else ``NO_SENSE``."""
    lexical, _, entity = LABELS[label_id].partition("-")
    if entity != OTHER or lexical not in SENSED_LEXICAL_TYPES:
        return NO_SENSE
    head = head_word(phrase)
    name = lexicon.noun_lexname(head) if head.isalpha() else None
    return SENSE_IDS.get(name, NO_SENSE) if name else NO_SENSE
