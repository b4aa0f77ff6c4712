"""Phrase-in-context positives (Phrase-BERT): a phrase paired with the words around it in a
corpus sentence, so that a phrase's vector learns what its contexts say about it.

The phrase itself is masked in the context by default: kept, the positive holds the
phrase's own words and InfoNCE is satisfied by their overlap, which is the lexical cue
Phrase-BERT's objective is meant to take away. ``MASK`` is the BERT-family mask token, which
the E5 backbones' tokenizer reads as one special token; for another tokenizer it is plain
text, still the same for every context.
"""
from __future__ import annotations

import re

MASK = "[MASK]"


def _pattern(phrase: str) -> re.Pattern:
    # The phrase's tokens with any spacing between them ("New York 's" also matches "New York's",
    # as the parser split it), not inside a longer word.
    tokens = phrase.split()
    return re.compile(r"(?<!\w)" + r"\s*".join(map(re.escape, tokens)) + r"(?!\w)", re.IGNORECASE)


def context_positive(phrase: str, sentence: str, window: int = 6, mask: bool = True) -> str | None:
    """Up to ``window`` words either side of the phrase's first occurrence in ``sentence``, the
    phrase replaced by ``MASK`` (``mask``) or kept as the sentence spells it.

    None when the phrase does not occur in the sentence (matched ignoring case, on word
    boundaries) or when the sentence holds nothing but the phrase (no context to learn from)."""
    if window < 1:
        raise ValueError(f"context_window must be >= 1 word, got {window}")
    if not phrase.strip():
        return None
    m = _pattern(phrase).search(sentence)
    if m is None:
        return None
    left, right = sentence[:m.start()].split()[-window:], sentence[m.end():].split()[:window]
    if not left and not right:
        return None
    return " ".join([*left, MASK if mask else m.group(0), *right])
