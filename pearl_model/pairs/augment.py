"""On-the-fly augmentation operators used to make PEARL's positives during training.

Every operator has the signature ``op(phrase: str, rng: random.Random) -> str``.

Contract shared by all operators:

* Seeded and deterministic: the output depends only on ``phrase`` and the state of
  ``rng`` (a ``random.Random``); the same seed gives the same output.
* ``phrase`` must be a ``str`` (``TypeError`` naming the type otherwise) that is neither
  empty nor whitespace-only (``ValueError``), so the output is never empty nor made
  only of whitespace.
* Character operators only edit *words*: maximal runs of alphabetic characters
  (``str.isalpha``, so unicode letters count) of length >= 2. Digits-only tokens such as
  "1997", punctuation and one-letter words such as "a" or "I" are never changed. The
  position is drawn uniformly among all eligible positions of the phrase.
* Exactly one edit per call: ``drop_char``, ``insert_char`` and ``keyboard_typo`` give a
  Levenshtein distance of exactly 1 to the input; ``swap_chars`` exchanges two adjacent,
  different characters of one word (exactly two adjacent positions change);
  ``swap_tokens`` exchanges two adjacent, different whitespace-separated tokens;
  ``change_case`` rewrites the phrase in one of its other letter cases (lower, upper,
  each word capitalised, first letter capitalised), every character kept otherwise.
* Whitespace between (and around) tokens is preserved exactly.
* When no position is eligible the operator returns the input object itself, unchanged
  (``out is phrase``), without consuming randomness, so callers can tell nothing happened.
"""
from __future__ import annotations

import random
import re
import string
from typing import Callable

__all__ = [
    "QWERTY_NEIGHBOURS", "CHAR_OPS", "TOKEN_OPS", "CASE_OPS", "ALL_OPS",
    "swap_chars", "drop_char", "insert_char", "keyboard_typo", "swap_tokens", "change_case",
    "augment", "can_change", "random_on_the_fly",
]

# Letters touching each key on a standard QWERTY keyboard (rows staggered), letters only.
QWERTY_NEIGHBOURS: dict[str, str] = {
    "q": "wa", "w": "qesa", "e": "wrds", "r": "etfd", "t": "rygf",
    "y": "tuhg", "u": "yijh", "i": "uokj", "o": "ipkl", "p": "ol",
    "a": "qwsz", "s": "awedxz", "d": "serfcx", "f": "drtgvc", "g": "ftyhbv",
    "h": "gyujnb", "j": "huikmn", "k": "jiolm", "l": "kop",
    "z": "asx", "x": "zsdc", "c": "xdfv", "v": "cfgb", "b": "vghn", "n": "bhjm", "m": "njk",
}

Op = Callable[[str, random.Random], str]


def _check_phrase(phrase: object) -> None:
    if not isinstance(phrase, str):
        raise TypeError(f"phrase must be str, got {type(phrase).__name__}")
    if not phrase or phrase.isspace():
        raise ValueError("phrase must be non-empty and not only whitespace")


def _check(phrase: object, rng: object) -> None:
    _check_phrase(phrase)
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be random.Random, got {type(rng).__name__}")


def _runs(s: str, pred: Callable[[str], bool]) -> list[tuple[int, int]]:
    """(start, end) of the maximal runs of characters satisfying ``pred``."""
    out, start = [], None
    for i, ch in enumerate(s):
        if pred(ch):
            if start is None:
                start = i
        elif start is not None:
            out.append((start, i))
            start = None
    if start is not None:
        out.append((start, len(s)))
    return out


def _words(s: str) -> list[tuple[int, int]]:
    """Spans of the editable words: alphabetic runs of length >= 2."""
    return [(a, b) for a, b in _runs(s, str.isalpha) if b - a >= 2]


def _is_qwerty(ch: str) -> bool:
    return ch.isascii() and ch.lower() in QWERTY_NEIGHBOURS


# Eligible positions of each operator (indices into the phrase or, for tokens, the pair index).
def _swap_chars_positions(s: str) -> list[int]:
    return [i for a, b in _words(s) for i in range(a, b - 1) if s[i] != s[i + 1]]


def _drop_char_positions(s: str) -> list[int]:
    return [i for a, b in _words(s) for i in range(a, b)]


def _insert_char_positions(s: str) -> list[int]:
    return [i for a, b in _words(s) for i in range(a, b + 1)]


def _keyboard_positions(s: str) -> list[int]:
    return [i for a, b in _words(s) for i in range(a, b) if _is_qwerty(s[i])]


def _tokens(s: str) -> list[tuple[int, int]]:
    return _runs(s, lambda ch: not ch.isspace())


def _swap_tokens_positions(s: str) -> list[int]:
    toks = [s[a:b] for a, b in _tokens(s)]
    return [k for k in range(len(toks) - 1) if toks[k] != toks[k + 1]]


_WORD_START = re.compile(r"(?<!\S)\w")  # a word's first character ("o'neill" -> "O'neill", not "O'Neill")


def _case_forms(s: str) -> list[str]:
    """The phrase in its other letter cases, distinct, in a fixed order (the positions of
    ``change_case``). Headlines write "LONDON", lists "Lithium carbonate", running text
    "lithium carbonate": one name."""
    low = s.lower()
    forms = [low, s.upper(), _WORD_START.sub(lambda m: m.group().upper(), low),
             _WORD_START.sub(lambda m: m.group().upper(), low, count=1)]
    return [f for f in dict.fromkeys(forms) if f != s]


def _change_case_positions(s: str) -> list[int]:
    return list(range(len(_case_forms(s))))


def swap_chars(phrase: str, rng: random.Random) -> str:
    """Swap two neighbouring, different characters inside one word."""
    _check(phrase, rng)
    pos = _swap_chars_positions(phrase)
    if not pos:
        return phrase
    i = rng.choice(pos)
    return phrase[:i] + phrase[i + 1] + phrase[i] + phrase[i + 2:]


def drop_char(phrase: str, rng: random.Random) -> str:
    """Delete one character of one word (the word keeps at least one letter)."""
    _check(phrase, rng)
    pos = _drop_char_positions(phrase)
    if not pos:
        return phrase
    i = rng.choice(pos)
    return phrase[:i] + phrase[i + 1:]


def insert_char(phrase: str, rng: random.Random) -> str:
    """Insert one lowercase ASCII letter inside or at either edge of one word."""
    _check(phrase, rng)
    pos = _insert_char_positions(phrase)
    if not pos:
        return phrase
    i = rng.choice(pos)
    return phrase[:i] + rng.choice(string.ascii_lowercase) + phrase[i:]


def keyboard_typo(phrase: str, rng: random.Random) -> str:
    """Replace one ASCII letter of one word by a QWERTY neighbour, keeping its case."""
    _check(phrase, rng)
    pos = _keyboard_positions(phrase)
    if not pos:
        return phrase
    i = rng.choice(pos)
    old = phrase[i]
    new = rng.choice(QWERTY_NEIGHBOURS[old.lower()])
    if old.isupper():
        new = new.upper()
    return phrase[:i] + new + phrase[i + 1:]


def swap_tokens(phrase: str, rng: random.Random) -> str:
    """Swap two adjacent, different whitespace-separated tokens; whitespace stays in place."""
    _check(phrase, rng)
    pos = _swap_tokens_positions(phrase)
    if not pos:
        return phrase
    k = rng.choice(pos)
    spans = _tokens(phrase)
    (a1, b1), (a2, b2) = spans[k], spans[k + 1]
    return phrase[:a1] + phrase[a2:b2] + phrase[b1:a2] + phrase[a1:b1] + phrase[b2:]


def change_case(phrase: str, rng: random.Random) -> str:
    """The phrase in another letter case (PEARL's operators never change case, so training
    on them alone made case a cheap way to tell phrases apart: BC5CDR-dev's KMeans split
    "Lithium carbonate" from "lithium carbonate" instead of chemicals from diseases)."""
    _check(phrase, rng)
    forms = _case_forms(phrase)
    return rng.choice(forms) if forms else phrase


CHAR_OPS: dict[str, Op] = {
    "swap_chars": swap_chars,
    "drop_char": drop_char,
    "insert_char": insert_char,
    "keyboard_typo": keyboard_typo,
}
TOKEN_OPS: dict[str, Op] = {"swap_tokens": swap_tokens}
CASE_OPS: dict[str, Op] = {"change_case": change_case}  # not a typo: kept out of the character encoder's edits
ALL_OPS: dict[str, Op] = {**CHAR_OPS, **TOKEN_OPS, **CASE_OPS}

_POSITIONS: dict[str, Callable[[str], list[int]]] = {
    "swap_chars": _swap_chars_positions,
    "drop_char": _drop_char_positions,
    "insert_char": _insert_char_positions,
    "keyboard_typo": _keyboard_positions,
    "swap_tokens": _swap_tokens_positions,
    "change_case": _change_case_positions,
}


def _op(kind: object) -> Op:
    if not isinstance(kind, str) or kind not in ALL_OPS:
        raise ValueError(f"unknown augmentation kind {kind!r}; known kinds: {', '.join(ALL_OPS)}")
    return ALL_OPS[kind]


def augment(phrase: str, kind: str, rng: random.Random) -> str:
    """Apply the operator named ``kind`` (a key of ALL_OPS)."""
    return _op(kind)(phrase, rng)


def can_change(phrase: str, kind: str) -> bool:
    """Whether the operator ``kind`` has an eligible position in ``phrase``."""
    _op(kind)
    _check_phrase(phrase)
    return bool(_POSITIONS[kind](phrase))


def random_on_the_fly(phrase: str, rng: random.Random) -> tuple[str | None, str]:
    """Apply one kind drawn uniformly among those that would change ``phrase``.

    Returns ``(kind, new_phrase)``, or ``(None, phrase)`` (no randomness consumed) when
    no operator can change it.
    """
    _check(phrase, rng)
    kinds = [k for k in ALL_OPS if _POSITIONS[k](phrase)]
    if not kinds:
        return None, phrase
    kind = rng.choice(kinds)
    return kind, ALL_OPS[kind](phrase, rng)
