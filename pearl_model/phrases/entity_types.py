"""Entity type of a phrase occurrence, and of a phrase over all its occurrences.

Alignment rule (one occurrence): the phrase takes the type of an NER entity that
  1. covers exactly the same characters as the phrase ("The New York Times" = ORG), or
  2. lies inside the phrase and contains the phrase's head token ("in New York" is a PP
     whose head, the object's noun "York", is inside the GPE "New York": PP-GPE;
     "the New York Times building" is headed by "building", outside the ORG: OTHER).
Otherwise the occurrence is OTHER. Rule 2 types a phrase by what it is about, not by
any entity it happens to mention; an entity sticking out of the phrase never counts.
A phrase's type is the majority over its occurrences (ties: OntoNotes order, OTHER last).
"""
from __future__ import annotations

from typing import Iterable, Mapping

from .labels import ENTITY_TYPES, LEXICAL_TYPES, OTHER
from .spans import Constituent, Entity


def occurrence_type(c: Constituent, entities: Iterable[Entity]) -> str:
    inside_with_head = None
    for e in entities:
        if e.start == c.start and e.end == c.end:
            return e.type
        if inside_with_head is None and c.head is not None and c.start <= e.start and e.end <= c.end:
            h0, h1 = c.head
            if e.start <= h0 and h1 <= e.end:
                inside_with_head = e.type
    return inside_with_head or OTHER


_ENTITY_RANK = {t: i for i, t in enumerate(ENTITY_TYPES)}
_LEXICAL_RANK = {t: i for i, t in enumerate(LEXICAL_TYPES)}


def majority(counts: Mapping[str, int], order: Mapping[str, int]) -> str:
    """The most frequent key; ties go to the key earliest in ``order`` (deterministic)."""
    if not counts:
        raise ValueError("majority of no occurrences")
    return min(counts, key=lambda k: (-counts[k], order.get(k, len(order))))


def majority_entity_type(counts: Mapping[str, int]) -> str:
    return majority(counts, _ENTITY_RANK)


def majority_lexical_type(counts: Mapping[str, int]) -> str:
    return majority(counts, _LEXICAL_RANK)
