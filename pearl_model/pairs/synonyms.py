"""Token-level synonym sources for PEARL's positives: WordNet 3.0 and fastText neighbours.

WordNet (``WordNetSynonyms``) is read with NLTK's ``WordNetCorpusReader`` straight from
the Debian ``wordnet-base`` files (``/usr/share/wordnet``, or ``$PEARL_WORDNET_DIR``).
Those files lack two things the NLTK reader (nltk 3.10) touches while it is constructed:

* ``lexnames``, the 45 lexicographer file names, read once to name each synset's
  lexicographer file. The list is fixed by WordNet 3.0 (lexnames(5)); it is served from
  memory (``LEXNAMES``) by overriding the reader's ``open`` for that one file id.
* ``index.sense``: not needed to look up synsets, lemmas, morphy or counts (those use
  ``index.*``, ``data.*``, ``*.exc`` and ``cntlist.rev``), only for sense keys
  (``lemma_from_key``) and for ``map_wn``, which the constructor calls to map sense keys
  of NLTK's downloadable "wordnet" corpus onto the loaded one for the multilingual (OMW)
  data. With no OMW reader that mapping is useless (and would need ``nltk_data``), so
  ``map_wn`` returns None. ``lemma_from_key`` stays unavailable.

NLTK 3.10's path sandbox only opens regular, singly-linked files inside a directory on
``nltk.data.path`` that are owned by root or by this account and not group/world
writable: a prepared directory of symlinks or hardlinks is refused, hence the in-memory
``lexnames``. The WordNet directory is appended to ``nltk.data.path`` (process-wide).

Synonyms are *lemmas* (WordNet base forms). ``synonyms`` looks inflected words up through
morphy with the exception lists ("ran" -> run's synsets) and returns base forms, not
re-inflected. ``replacements`` (what ``phrase_synonym_variants`` uses) only takes the
synsets in which the word itself is a lemma, so a replacement fits in place without
re-inflection ("cars" gets none, "car" gets "automobile").
"""
from __future__ import annotations

import io
import os
import re
import threading
import warnings
from functools import cache, lru_cache
from pathlib import Path
from typing import Iterable, Protocol, Sequence

import numpy as np
from rapidfuzz.distance import Indel

# nltk, spaCy and gensim are imported where WordNet, the stop words or fastText are first used:
# the evaluation package and several stages import this module for its light helpers.

__all__ = [
    "DEFAULT_WORDNET_DIR", "LEXNAMES", "WordNetNotFoundError", "WordNetSynonyms", "SynonymSource",
    "wordnet_dir", "wordnet_reader", "wordnet_pos", "phrase_synonym_variants", "train_fasttext", "save_fasttext",
    "load_fasttext", "fasttext_vectors", "FastTextNeighbours", "is_trivial_variant", "edit_similarity",
    "CloseSynonyms", "REPLACEABLE_POS",
]

DEFAULT_WORDNET_DIR = "/usr/share/wordnet"
_WN_FILES = [f"{k}.{p}" for k in ("index", "data") for p in ("noun", "verb", "adj", "adv")] + [
    f"{p}.exc" for p in ("noun", "verb", "adj", "adv")]

# WordNet 3.0 lexicographer files, numbered 0..44 (lexnames(5)); the last column is the
# POS number (1 noun, 2 verb, 3 adjective, 4 adverb).
_LEX = ("adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute "
        "noun.body noun.cognition noun.communication noun.event noun.feeling noun.food noun.group "
        "noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant "
        "noun.possession noun.process noun.quantity noun.relation noun.shape noun.state "
        "noun.substance noun.time verb.body verb.change verb.cognition verb.communication "
        "verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion "
        "verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl").split()
_POS_NUMBER = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
LEXNAMES = "".join(f"{i:02d}\t{n}\t{_POS_NUMBER[n.split('.')[0]]}\n" for i, n in enumerate(_LEX))

# spaCy / Universal POS tags -> WordNet POS letters. Other UPOS tags (DET, ADP, AUX, PRON,
# NUM, PUNCT, ...) have no WordNet entries: no synonyms. WordNet letters are accepted too;
# "a" covers head adjectives and satellites ("s").
_UPOS_TO_WN = {"NOUN": ("n",), "PROPN": ("n",), "VERB": ("v",), "ADJ": ("a",), "ADV": ("r",),
               "n": ("n",), "v": ("v",), "a": ("a",), "s": ("s",), "r": ("r",)}
_NO_WORDNET = {"ADP", "AUX", "CCONJ", "CONJ", "DET", "INTJ", "NUM", "PART", "PRON", "PUNCT",
               "SCONJ", "SYM", "X", "SPACE", ""}
# POS whose tokens phrase_synonym_variants may replace. PROPN is left out: a name's
# "synonym" names something else ("Bush" -> "shrub", "Apple" -> "Malus pumila").
REPLACEABLE_POS = frozenset({"NOUN", "VERB", "ADJ", "ADV"})


class WordNetNotFoundError(FileNotFoundError):
    """The WordNet 3.0 database files are not where they were looked for."""


def wordnet_dir(path: str | os.PathLike | None = None) -> Path:
    """The WordNet directory: ``path``, else ``$PEARL_WORDNET_DIR``, else /usr/share/wordnet."""
    return Path(path or os.environ.get("PEARL_WORDNET_DIR") or DEFAULT_WORDNET_DIR)


def wordnet_pos(pos: str | None) -> tuple[str, ...] | None:
    """WordNet POS letters for a spaCy/UPOS tag; None means all; () means none."""
    if pos is None:
        return None
    if pos in _UPOS_TO_WN:
        return _UPOS_TO_WN[pos]
    if pos.upper() in _NO_WORDNET:
        return ()
    raise ValueError(f"unknown POS tag {pos!r}: expected a Universal POS tag (NOUN, VERB, ADJ, "
                     "ADV, PROPN, ...) or a WordNet letter (n, v, a, s, r)")


@cache
def _reader_class():
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class _DebianWordNetReader(WordNetCorpusReader):
        def open(self, file):
            if file == "lexnames":
                return io.StringIO(LEXNAMES)
            return super().open(file)

        def map_wn(self, version="wordnet"):
            return None  # OMW sense mapping: needs index.sense + nltk_data, unused here
    return _DebianWordNetReader


@lru_cache(maxsize=4)
def _load_reader(root: str):
    import nltk.data
    missing = [f for f in _WN_FILES if not os.path.isfile(os.path.join(root, f))]
    if missing:
        raise WordNetNotFoundError(
            f"WordNet 3.0 database not found in {root} (missing {', '.join(missing)}): install it "
            "with `apt-get install wordnet-base`, or set PEARL_WORDNET_DIR to a directory holding "
            "data.noun, index.noun, ... and the *.exc files")
    if root not in nltk.data.path:
        nltk.data.path.append(root)  # NLTK 3.10 only opens files under nltk.data.path
    try:
        with warnings.catch_warnings():  # "multilingual functions are not available"
            warnings.simplefilter("ignore", UserWarning)
            return _reader_class()(root, None), threading.Lock()
    except PermissionError as e:
        raise PermissionError(f"NLTK refused to read WordNet in {root}: its files must be plain "
                              f"files owned by root or this user and not group/world writable "
                              f"({e})") from e


def wordnet_reader(path: str | os.PathLike | None = None):
    """The NLTK WordNet reader of :func:`wordnet_dir` (one per directory and process; not
    thread-safe: :class:`WordNetSynonyms` holds a lock beside it)."""
    return _load_reader(str(wordnet_dir(path).resolve()))[0]


def _norm(lemma: str) -> str:
    return lemma.replace("_", " ").casefold()


class WordNetSynonyms:
    """WordNet 3.0 synonyms (lemmas of the word's synsets) for a word and a POS.

    Order: POS by POS (with ``pos=None``: noun, verb, adjective, adverb), the word's
    synsets in WordNet sense order (most frequent sense first; for an inflected or
    ambiguous form, morphy's base forms in morphy's order, the form itself first), within
    a synset lemmas by decreasing SemCor tag count (cntlist.rev), ties in the synset's own
    order; first occurrence kept (case-insensitive). Underscores become spaces ("kick the
    bucket", "myocardial infarct"); the word and its own base forms are left out.

    A synset in which the word is spelt only with capitals ("Fox" in fox.n.04, Charles
    James Fox) is a proper-name sense: used only when the query has a capital too.
    ``max_senses`` keeps only the first N synsets per POS (rare senses are noisy).
    Morphy is NLTK's ``_morphy`` (all base forms; the public ``morphy`` gives one).
    """

    def __init__(self, path: str | os.PathLike | None = None, max_senses: int | None = None):
        self.path = wordnet_dir(path)
        self.max_senses = max_senses  # only the first N synsets per POS (None: all)
        # one reader (and lock: it seeks in shared file handles) per directory and process
        self._reader, self._lock = _load_reader(str(self.path.resolve()))

    def __reduce__(self):  # pickles as its path; the worker loads its own reader
        return (type(self), (str(self.path), self.max_senses))

    def _synsets(self, word: str, pos: str | None, own_only: bool):
        letters = wordnet_pos(pos)
        key = "_".join(word.split()).lower()
        if not key or letters == ():
            return [], set()
        lower = key == "_".join(word.split())
        r = self._reader
        out, own = [], {key}
        with self._lock:
            for p in letters or ("n", "v", "a", "r"):
                forms = set(r._morphy(key, "a" if p == "s" else p)) | {key}  # exceptions too
                own.update(forms)
                # every base form's synsets, in morphy order, each in sense order
                for s in r.synsets(key, p)[: self.max_senses]:
                    lemmas = [(l.name(), l.count()) for l in s.lemmas()]
                    mine = [n for n, _ in lemmas if n.lower() in forms]
                    if own_only and key not in {n.lower() for n in mine}:
                        continue
                    if lower and mine and all(n != n.lower() for n in mine):
                        continue  # a proper-name sense ("Fox", "Bush") of a lowercase word
                    out.append(sorted(lemmas, key=lambda nc: -nc[1]))
        return out, {_norm(f) for f in own}

    def _collect(self, word, pos, own_only) -> list[str]:
        groups, own = self._synsets(word, pos, own_only)
        own.add(_norm(" ".join(word.split())))
        seen, out = set(own), []
        for lemmas in groups:
            for name, _ in lemmas:
                n = _norm(name)
                if n not in seen:
                    seen.add(n)
                    out.append(name.replace("_", " "))
        return out

    def synonyms(self, word: str, pos: str | None = None) -> list[str]:
        """Lemmas of ``word``'s synsets for ``pos`` (UPOS or WordNet letter; None: any)."""
        return self._collect(word, pos, own_only=False)

    def replacements(self, word: str, pos: str | None = None) -> list[str]:
        """Synonyms that can stand in for ``word`` as written: only synsets listing the
        word itself as a lemma, so inflected forms ("cars", "ran") get none."""
        return self._collect(word, pos, own_only=True)

    def noun_lexname(self, word: str) -> str | None:
        """The lexicographer file of ``word``'s most frequent noun sense (``noun.substance``,
        ``noun.state``, ...), through morphy ("diseases" -> disease); None if it is no noun."""
        key = "_".join(word.split()).lower()
        if not key:
            return None
        with self._lock:
            synsets = self._reader.synsets(key, "n")
            return synsets[0].lexname() if synsets else None


class SynonymSource(Protocol):
    def synonyms(self, word: str, pos: str | None = None) -> list[str]: ...


@cache
def _stop_words() -> frozenset[str]:
    from spacy.lang.en.stop_words import STOP_WORDS
    return frozenset(w.casefold() for w in STOP_WORDS)


def _is_stop(word: str) -> bool:
    return word.casefold() in _stop_words()


def _match_case(template: str, word: str) -> str:
    if len(template) > 1 and template.isupper():
        return word.upper()
    if template[:1].isupper() and word[:1].islower():
        return word[:1].upper() + word[1:]
    return word


def token_spans(tokens: Sequence[str], phrase: str) -> list[tuple[int, int]]:
    """Where each token is in ``phrase``, in order (ValueError: a token not found there)."""
    spans, pos = [], 0
    for t in tokens:
        i = phrase.find(t, pos)
        if i < 0:
            raise ValueError(f"token {t!r} not found in phrase {phrase!r} after offset {pos}")
        spans.append((i, i + len(t)))
        pos = i + len(t)
    return spans


def phrase_synonym_variants(phrase_tokens: Sequence[tuple[str, str, bool]], source: SynonymSource,
                            max_variants: int, *, phrase: str | None = None) -> list[str]:
    """Variants of a phrase with exactly one token replaced by a synonym of its POS.

    ``phrase_tokens`` are (text, UPOS, is_stop) per token, e.g. from spaCy. A token is
    replaceable when its POS is in ``REPLACEABLE_POS`` (not PROPN, NUM, PUNCT, ...), it is
    not a stop word (its flag or spaCy's STOP_WORDS) and it has a letter and no digit.
    Synonyms come from ``source.replacements`` when it has one (WordNet: no inflected
    tokens replaced), else ``source.synonyms``; a synonym that is a stop word is skipped,
    and so is one that holds the word itself ("art" -> "fine art", "mission" -> "foreign
    mission": WordNet's lemma for a narrower thing);
    a Title-case token is looked up lowercased (PROPN is never replaced, so it is a common
    word at the start of a sentence or title) and its case (Title, UPPER) is carried over.

    Spacing: with ``phrase`` (the original text) the tokens are found in it in order and
    everything around the replaced token is kept byte for byte; without it the tokens are
    joined by single spaces. Order: round robin over the replaceable tokens left to right,
    each token's i-th synonym in round i, so the first variants touch different tokens.
    Duplicates and the unchanged phrase are dropped; at most ``max_variants`` returned.
    """
    if max_variants <= 0:
        return []
    texts = [t[0] for t in phrase_tokens]
    if phrase is None:
        phrase = " ".join(texts)
    spans = token_spans(texts, phrase)
    get = getattr(source, "replacements", None) or source.synonyms
    candidates: list[tuple[int, list[str]]] = []
    for i, (text, pos, is_stop) in enumerate(phrase_tokens):
        if (pos not in REPLACEABLE_POS or is_stop or _is_stop(text)
                or not any(c.isalpha() for c in text) or any(c.isdigit() for c in text)):
            continue
        query = text.lower() if text.istitle() else text  # sentence-initial "Fox" is "fox"
        syns = [_match_case(text, s) for s in get(query, pos) if s.strip() and not _is_stop(s)
                and query.casefold() not in s.casefold().split()]
        if syns:
            candidates.append((i, syns))
    out, seen = [], {phrase}
    for rank in range(max((len(s) for _, s in candidates), default=0)):
        for i, syns in candidates:
            if rank < len(syns):
                a, b = spans[i]
                v = phrase[:a] + syns[rank] + phrase[b:]
                if v not in seen:
                    seen.add(v)
                    out.append(v)
                    if len(out) == max_variants:
                        return out
    return out


# ---------------------------------------------------------------- fastText neighbours

def train_fasttext(sentences: Iterable[list[str]], vector_size: int = 100, window: int = 5,
                   min_count: int = 5, epochs: int = 10, seed: int = 0, workers: int = 1,
                   sg: int = 1, **kwargs):
    """Train a gensim FastText model on tokenised sentences (skip-gram by default).

    Deterministic for a given corpus and ``seed`` with ``workers=1``: gensim seeds its
    initial vectors and sampling from ``seed`` (numpy generators, not Python's ``hash``),
    and one worker thread removes the ordering jitter between threads. More workers train
    faster but not reproducibly. A one-shot iterator is materialised, since gensim passes
    over the corpus once for the vocabulary and once per epoch.
    """
    from gensim.models import FastText
    if iter(sentences) is sentences:
        sentences = list(sentences)
    return FastText(sentences=sentences, vector_size=vector_size, window=window,
                    min_count=min_count, epochs=epochs, seed=seed, workers=workers, sg=sg, **kwargs)


_FASTTEXT_MAGIC = (793712314).to_bytes(4, "little")  # 0x2F4F16BA, the first int32 of a fastText .bin


def save_fasttext(model, path: str | os.PathLike) -> Path:
    """The model in fastText's own binary format (gensim's ``save_facebook_model``): one
    file, no pickle, readable by the fastText tool as well."""
    from gensim.models.fasttext import save_facebook_model
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_facebook_model(model, str(path))
    return path


def load_fasttext(path: str | os.PathLike):
    """The FastTextKeyedVectors of a fastText binary (``save_fasttext``, or a ``.bin`` of the
    fastText tool). Never gensim's pickle-based ``load``: a model file must not be able to
    run code in the process that reads it."""
    from gensim.models.fasttext import load_facebook_vectors
    from gensim.utils import open as open_uri
    with open_uri(str(path), "rb") as fh:
        head = fh.read(4)
    if head != _FASTTEXT_MAGIC:
        raise ValueError(f"{path} is not a fastText binary (it starts with {head!r}, not fastText's magic "
                         f"number {_FASTTEXT_MAGIC!r}); pickled gensim models are not loaded")
    return load_facebook_vectors(str(path))


def fasttext_vectors(words: Sequence[str], vectors, ngrams, min_n: int, max_n: int):
    """FastTextKeyedVectors from plain arrays: the words' vectors (n, dim) and the n-gram
    buckets' vectors (bucket, dim; a read-only memory map will do), as a trained model's
    ``wv.vectors`` and ``wv.vectors_ngrams``. Gives the model's neighbours, for
    out-of-vocabulary words too (from their n-grams); no pickle involved."""
    from gensim.models.fasttext import FastTextKeyedVectors
    kv = FastTextKeyedVectors(ngrams.shape[1], min_n, max_n, ngrams.shape[0])
    kv.add_vectors(list(words), np.asarray(vectors, dtype=np.float32).reshape(len(words), ngrams.shape[1]))
    kv.vectors_ngrams = ngrams
    return kv


_NON_ALNUM = re.compile(r"[\W_]+")


def _core(word: str) -> str:
    return _NON_ALNUM.sub("", word.casefold())


def edit_similarity(a: str, b: str) -> float:
    """rapidfuzz's normalised Indel similarity of the casefolded words (``fuzz.ratio / 100``,
    the measure the hard negatives use): 1.0 equal, 0.0 nothing in common."""
    return Indel.normalized_similarity(a.casefold(), b.casefold())


def is_trivial_variant(a: str, b: str) -> bool:
    """True when a and b differ only by case, punctuation/underscores/hyphens/spaces, or
    a plural ending: after casefolding and removing every non-alphanumeric character,
    equal, or one is the other plus "s" or "es"."""
    x, y = _core(a), _core(b)
    if len(x) > len(y):
        x, y = y, x
    return x == y or (y.startswith(x) and y[len(x):] in ("s", "es"))


class FastTextNeighbours:
    """Nearest fastText neighbours of a word above a cosine threshold, as synonyms.

    ``model_or_path``: a gensim FastText model, its KeyedVectors (e.g. ``fasttext_vectors``),
    or the path of a fastText binary (``save_fasttext``). Out-of-vocabulary words get
    fastText's n-gram vector. ``pos`` is accepted for the common interface and ignored
    (fastText has no POS). Stop words get
    no neighbours and are never neighbours; neighbours with no letter, the word itself
    and its trivial variants (``is_trivial_variant``) are dropped. At most ``topn`` are
    returned, by decreasing cosine then alphabetically. Words are matched as given: the
    caller lowercases like the training corpus did.

    ``max_edit_similarity``: neighbours spelt at least this much like the word
    (``edit_similarity``) are dropped. A fastText model trained on a small corpus ranks
    spelling neighbours first ("existing" -> "exiting", "recipe" -> "recife"), and those
    mostly mean something else. None keeps them.
    """

    def __init__(self, model_or_path, threshold: float = 0.7, topn: int = 10,
                 max_edit_similarity: float | None = None):
        model = model_or_path
        if isinstance(model, (str, os.PathLike)):
            model = load_fasttext(model)
        self.wv = getattr(model, "wv", model)
        self.threshold, self.topn, self.max_edit_similarity = threshold, topn, max_edit_similarity

    def synonyms(self, word: str, pos: str | None = None) -> list[str]:
        if not word.strip() or _is_stop(word) or not any(c.isalpha() for c in word):
            return []
        try:
            pool = self.wv.most_similar(word, topn=self.topn * 3 + 10)
        except KeyError:  # no vocabulary word and no known n-gram
            return []
        pool.sort(key=lambda wc: (-wc[1], wc[0]))
        out = [w for w, c in pool if c >= self.threshold and any(ch.isalpha() for ch in w)
               and not _is_stop(w) and not is_trivial_variant(word, w)
               and (self.max_edit_similarity is None or edit_similarity(word, w) < self.max_edit_similarity)]
        return out[: self.topn]


class CloseSynonyms:
    """The synonyms of ``source`` that an encoder puts close to the word they replace.

    ``encode``: texts -> unit vectors (the backbone, e.g. ``PhraseEncoder.encode``); a
    synonym is kept when its cosine with the word is >= ``min_cosine``. The word alone,
    not the phrase: in the phrase the shared rest dominates the cosine, and on labelled
    positives only the word-level cosine told a synonym ("large" -> "big") from a wrong
    sense ("fall" -> "autumn") or a look-alike ("cathode" -> "cathedral").
    ``prefetch`` encodes a batch of (word, POS) queries and their synonyms at once (one
    call per phrases part instead of one per word); a word not prefetched is encoded on
    its own.
    """

    def __init__(self, source: SynonymSource, encode, min_cosine: float):
        self.source, self.encode, self.min_cosine = source, encode, min_cosine
        self._vectors: dict[str, object] = {}

    def _candidates(self, word: str, pos: str | None) -> list[str]:
        return (getattr(self.source, "replacements", None) or self.source.synonyms)(word, pos)

    def prefetch(self, queries: Iterable[tuple[str, str | None]]) -> None:
        """Vectors of these words and their synonyms (words with none are skipped); replaces
        the previous batch."""
        texts = sorted({t for w, p in queries for c in [self._candidates(w, p)] if c for t in (w, *c)})
        self._vectors = dict(zip(texts, self.encode(texts))) if texts else {}

    def replacements(self, word: str, pos: str | None = None) -> list[str]:
        candidates = self._candidates(word, pos)
        if not candidates:
            return []
        missing = sorted({word, *candidates} - self._vectors.keys())
        if missing:
            self._vectors.update(zip(missing, self.encode(missing)))
        v = self._vectors[word]
        return [c for c in candidates if float(v @ self._vectors[c]) >= self.min_cosine]

    synonyms = replacements
