"""Phrases without a parser (ULR): n-grams whose words occur together more than chance says.

The map side (``PmiCandidates``, a ``ConstituencyParser``) runs spaCy's tagger and NER only, no
dependency parse, and offers every candidate n-gram of a sentence as an occurrence: runs of 1
to ``max_words`` tokens with no punctuation or symbol inside (a token with no letter or digit,
"$", "×", "=", an invisible format character, ends a run; "&" may join words inside), not
starting or ending with a stop word (a leading preposition is allowed: "in New York" is a PP),
and single tokens only where the dependency rules would keep one as a phrase of its own
(``stands_alone``: a bare noun with no modifier or determiner before it and no noun after it,
a verb with no object after it, an adverb, a predicative adjective), not every content word of
the corpus.
Each sentence also gives its ``words`` for the corpus-wide counts PMI needs. The reduce side
keeps a multi-word n-gram when it is frequent (``min_freq``, as every phrase) and its
normalised PMI is at least ``min_npmi`` (``npmi``); single words are kept by frequency alone.

Words for PMI are whitespace tokens, casefolded, punctuation stripped from their edges: the
reducer splits a phrase key the same way with no tokenizer, so numerator and denominators
count the same units ("New York's" is the words "new", "york's" in both).

Lexical type from the part-of-speech pattern (no tree to read it from): a leading preposition
makes a PP; a noun, proper noun, pronoun or number last an NP; a verb or auxiliary first a VP;
an adjective last an ADJP; an adverb last an ADVP; anything else NP. The head (for entity
typing) is the last token, or the first verb of a VP.
"""
from __future__ import annotations

import math
import string
import warnings
from typing import Iterator, Mapping, Sequence

from .spacy_rules import DEFAULT_SPACY_MODEL, load_spacy
from .spacy_rules import entities as doc_entities
from .spans import Constituent, ModelMissing, ParsedSentence

_EDGE_PUNCT = string.punctuation + "“”‘’«»–—…"


def pmi_words(text: str) -> list[str]:
    """The words PMI counts: whitespace tokens, casefolded, edge punctuation stripped, none empty."""
    return [w for w in (t.strip(_EDGE_PUNCT).casefold() for t in text.split()) if w]


def lexical_type(pos: Sequence[str]) -> str:
    if pos[0] == "ADP" and len(pos) > 1:
        return "PP"
    if pos[-1] in ("NOUN", "PROPN", "PRON", "NUM"):
        return "NP"
    if pos[0] in ("VERB", "AUX"):
        return "VP"
    if pos[-1] == "ADJ":
        return "ADJP"
    if pos[-1] == "ADV":
        return "ADVP"
    return "NP"


_NOUNS = ("NOUN", "PROPN")


def stands_alone(tokens: Sequence, i: int) -> bool:
    """Whether token i would be a one-word phrase of a parse, judged from its neighbours' tags."""
    t = tokens[i]
    prev = tokens[i - 1].pos_ if i > 0 else None
    nxt = tokens[i + 1].pos_ if i + 1 < len(tokens) else None
    if t.pos_ in _NOUNS:
        return prev not in (*_NOUNS, "ADJ", "NUM", "DET", "PRON") and nxt not in _NOUNS
    if t.pos_ == "VERB":
        return nxt not in (*_NOUNS, "DET", "PRON", "ADJ", "NUM", "VERB")
    if t.pos_ == "ADJ":
        return prev == "AUX" and nxt not in _NOUNS
    return t.pos_ == "ADV"


def is_word(token) -> bool:
    # spaCy's is_punct leaves symbols out ("$", "×", "="), and math markup leaves format characters.
    return any(c.isalnum() for c in token.text)


def candidates(doc, max_words: int) -> list[Constituent]:
    """Every candidate n-gram of a spaCy doc as a character span (see the module docstring)."""
    out = []
    tokens = list(doc)
    for i, first in enumerate(tokens):
        if not is_word(first) or (first.is_stop and first.pos_ != "ADP"):
            continue
        for j in range(i, min(i + max_words, len(tokens))):
            last = tokens[j]
            if last.text == "&":
                continue  # joins names ("Arts & Sciences"), never ends one
            if not is_word(last):
                break  # no punctuation or symbol inside an n-gram
            span = tokens[i:j + 1]
            if last.is_stop or (len(span) == 1 and not stands_alone(tokens, i)):
                continue
            pos = [t.pos_ for t in span]
            lt = lexical_type(pos)
            head = next((t for t in span if t.pos_ in ("VERB", "AUX")), last) if lt == "VP" else last
            out.append(Constituent(first.idx, last.idx + len(last.text), lt,
                                   (head.idx, head.idx + len(head.text))))
    return out


class TagPos:
    """The coarse POS spaCy's attribute ruler gives a token, looked up from its single-token rules.

    The ruler runs a Matcher over every doc to map the tagger's fine tags to POS (0.87 of the
    2.83 CPU seconds the tagger-only pipeline spends on 2,000 corpus sentences). The rules that set
    POS in the English pipelines test TAG, LOWER and IS_SPACE (a value, or IN / NOT_IN a list),
    and DEP, which is "" without a parser (parser "pmi" runs none): a rule's DEP test is settled
    once. Same precedence as the ruler: the last matching rule wins. ``of(nlp)`` is None for a
    pipeline with a parser or a rule of another kind: keep the ruler then."""

    _KEYS = {"TAG": "tag_", "LOWER": "lower_", "IS_SPACE": "is_space"}

    def __init__(self, rules: list[tuple[dict, str]]):
        self.rules = rules  # (tests on token attributes, POS), in the ruler's order
        self._cache: dict[tuple, str] = {}

    @staticmethod
    def _test(value, test) -> bool | None:
        if isinstance(test, (str, bool)):
            return value == test
        if isinstance(test, dict) and len(test) == 1 and set(test) <= {"IN", "NOT_IN"}:
            (op, values), = test.items()
            return (value in values) == (op == "IN")
        return None  # another operator: not looked up

    @classmethod
    def of(cls, nlp) -> "TagPos | None":
        if "parser" in nlp.pipe_names or "attribute_ruler" not in nlp.pipe_names:
            return None
        rules = []
        for rule in nlp.get_pipe("attribute_ruler").patterns:
            if "POS" not in rule["attrs"]:
                continue
            tokens = [t for pattern in rule["patterns"] for t in pattern]
            dep = [cls._test("", t["DEP"]) for t in tokens if "DEP" in t]
            if None in dep:
                return None
            if not all(dep):
                continue  # tests a dependency label: never matches without a parser
            if len(tokens) != 1 or not set(tokens[0]) - {"DEP"} <= set(cls._KEYS):
                return None
            tests = {cls._KEYS[k]: v for k, v in tokens[0].items() if k != "DEP"}
            if any(cls._test("", v) is None for v in tests.values()):
                return None
            rules.append((tests, rule["attrs"]["POS"]))
        return cls(rules)

    def __call__(self, token) -> str:
        key = (token.tag_, token.lower_, token.is_space)
        pos = self._cache.get(key)
        if pos is None:
            values = dict(zip(("tag_", "lower_", "is_space"), key))
            pos = next((p for tests, p in reversed(self.rules)
                        if all(self._test(values[a], t) for a, t in tests.items())), "")
            self._cache[key] = pos
        return pos

    def annotate(self, doc):
        for t in doc:
            t.pos_ = self(t)
        return doc


class PmiCandidates:
    """ConstituencyParser offering candidate n-grams (the PMI filter runs on the reduce side)."""

    name = "pmi"

    def __init__(self, model: str | None = None, batch_size: int = 256, max_words: int = 8, entities: bool = True):
        """``entities=False``: the tagger only (NER is over half of the pipeline's time)."""
        self.model, self.batch_size, self.max_words = model or DEFAULT_SPACY_MODEL, batch_size, max_words
        self.nlp = load_spacy(self.model, disable=("parser", "lemmatizer") if entities else ("parser", "lemmatizer", "ner"))
        if (entities and "ner" not in self.nlp.pipe_names) or not ({"tagger", "morphologizer"} & set(self.nlp.pipe_names)):
            raise ModelMissing(f"spaCy pipeline {self.model!r} needs a tagger and an NER for parser 'pmi'")
        self._entities = doc_entities
        self._pos = TagPos.of(self.nlp)
        if self._pos is not None:
            self.nlp.disable_pipe("attribute_ruler")

    def parse(self, texts: Sequence[str]) -> Iterator[ParsedSentence]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # spaCy warns per doc on odd whitespace
            for text, doc in zip(texts, self.nlp.pipe(texts, batch_size=self.batch_size)):
                if self._pos is not None:
                    self._pos.annotate(doc)
                yield ParsedSentence(text, candidates(doc, self.max_words), self._entities(doc), len(doc),
                                     words=pmi_words(text))


def npmi(ngram_count: int, word_counts: Sequence[int], total_words: int) -> float:
    """Normalised PMI of an n-gram: log(p(g) / prod p(w)) / ((n - 1) * -log p(g)).

    1 when each word occurs only inside the n-gram, 0 when the words are independent, below
    0 when they avoid each other. Dividing by n - 1 keeps longer n-grams on the bigram's
    [-1, 1] scale (their PMI can reach (n - 1) * -log p(g)). An n-gram filling the whole
    corpus (p(g) = 1) has no information to normalise by: 1 by convention."""
    n = len(word_counts)
    if n < 2:
        raise ValueError("NPMI needs an n-gram of at least two words")
    log_pg = math.log(ngram_count / total_words)
    if log_pg == 0:
        return 1.0
    pmi = log_pg - sum(math.log(c / total_words) for c in word_counts)
    return pmi / ((n - 1) * -log_pg)


def score_key(key: str, count: int, totals: Mapping[str, int], total_words: int) -> float | None:
    """NPMI of a phrase key (None: one of its words has no corpus count, e.g. split otherwise)."""
    counts = [totals.get(w) for w in pmi_words(key)]
    if any(c is None for c in counts):
        return None
    return npmi(count, counts, total_words)
