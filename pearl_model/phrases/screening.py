"""Which sentences are worth parsing: a reason to skip one, or None to parse it.

Reasons, checked in this order:
  empty        nothing but whitespace;
  symbol_only  no letter at all (tables of numbers, lone punctuation, formulas);
  too_long     over ``max_chars`` characters (parser cost grows with length, and such
               "sentences" are mostly run-together lists the splitter could not cut);
  non_english  py3langid's naive Bayes identifier is confident (probability >=
               ``min_confidence``) that the text is another language. Short texts (under
               ``min_letters`` letters) are never judged: identification on a few words is
               noise, and a short English sentence full of names is often misread.
"""
from __future__ import annotations

from functools import lru_cache

from py3langid.langid import MODEL_FILE, LanguageIdentifier

REASONS = ("empty", "symbol_only", "too_long", "non_english")


@lru_cache(maxsize=1)
def _identifier():
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def language(text: str) -> tuple[str, float]:
    """(ISO 639-1 code, probability) of the text's language."""
    return _identifier().classify(text)


def screen(text: str | None, *, max_chars: int = 600, language_code: str = "en",
           min_confidence: float = 0.99, min_letters: int = 25) -> str | None:
    if text is None or not text.strip():
        return "empty"
    letters = sum(ch.isalpha() for ch in text)
    if letters == 0:
        return "symbol_only"
    if len(text) > max_chars:
        return "too_long"
    if language_code and letters >= min_letters:
        lang, p = language(text)
        if lang != language_code and p >= min_confidence:
            return "non_english"
    return None
