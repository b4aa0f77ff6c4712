"""What every parser and NER backend produces: character spans over one sentence.

Backends differ in how they find constituents (a dependency parse, a constituency
parser) and entities (spaCy, a transformers tagger), but all of them hand back spans as
character offsets into the sentence they were given, so the typing rule and the counting
never depend on a backend's tokenisation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol, Sequence

from .labels import LEXICAL_TYPES, ONTONOTES_TYPES


@dataclass(frozen=True)
class Constituent:
    """A phrase occurrence: text[start:end], of one lexical type.

    ``head`` is the character span of the token that decides the phrase's entity type
    (the noun of an NP, the object's noun of a PP, the verb of a VP); None when the
    backend cannot tell, and then only an exactly matching entity types the phrase.
    """

    start: int
    end: int
    lexical_type: str
    head: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.lexical_type not in LEXICAL_TYPES:
            raise ValueError(f"lexical type {self.lexical_type!r} is not one of {LEXICAL_TYPES}")
        if not 0 <= self.start < self.end:
            raise ValueError(f"empty or negative span [{self.start}, {self.end})")


@dataclass(frozen=True)
class Entity:
    start: int
    end: int
    type: str  # one of the 18 OntoNotes types

    def __post_init__(self) -> None:
        if self.type not in ONTONOTES_TYPES:
            raise ValueError(f"entity type {self.type!r} is not an OntoNotes type")


@dataclass
class ParsedSentence:
    text: str
    constituents: list[Constituent]
    # Entities found by the parser's own pipeline (spaCy's NER runs in the same pass as
    # its parser); None when the parser has no NER of its own.
    entities: list[Entity] | None = None
    n_tokens: int = 0
    error: str | None = None  # set when this sentence alone could not be parsed
    words: list[str] | None = None  # the words corpus-wide counts are kept of (parser "pmi" only)

    def phrase(self, c: Constituent) -> str:
        return self.text[c.start:c.end]


class ConstituencyParser(Protocol):
    """Sentences in, constituent spans out, one ParsedSentence per input, in order."""

    name: str

    def parse(self, texts: Sequence[str]) -> Iterator[ParsedSentence]: ...


class EntityRecognizer(Protocol):
    """OntoNotes entity spans for each sentence (the parse is there for backends that reuse it)."""

    name: str

    def entities(self, parsed: Sequence[ParsedSentence]) -> list[list[Entity]]: ...


class ModelMissing(RuntimeError):
    """A parser or NER model is not installed; the message says what to install."""


def dedupe(constituents: Iterable[Constituent]) -> list[Constituent]:
    """One constituent per span: the first lexical type in LEXICAL_TYPES order wins.

    Unary chains (an NP that is all of its PP's object, a VP that is one verb) give the
    same span twice; a phrase occurrence is counted once.
    """
    best: dict[tuple[int, int], Constituent] = {}
    rank = {t: i for i, t in enumerate(LEXICAL_TYPES)}
    for c in constituents:
        key = (c.start, c.end)
        if key not in best or rank[c.lexical_type] < rank[best[key].lexical_type]:
            best[key] = c
    return sorted(best.values(), key=lambda c: (c.start, -c.end))

