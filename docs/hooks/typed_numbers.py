"""A research page types no measured-looking number: the build fails naming each one.

A number a study measured comes from its results file (`{{ value(...) }}`, docs/hooks/results.py),
and a number someone else published from `benchmarks/results/published_tables.json`, so a rerun
or a correction changes every page that shows it. Flagged, outside fenced code, code spans,
results markers and links: a quantity with a unit of time, memory, share or ratio ("1,234 s",
"about 3 GB", "at 3x", "95.2%"), a decimal ("within 0.3") and a spread ("± 1.2"). A setting is
not a measurement: write its value, or a goal's (`3x`), as code (`0.5`), or after its name in
code (`average_weight` 0.5). ALLOWED lists the rest of the pages' own prose that looks like a measurement and is not.

    python docs/hooks/typed_numbers.py docs/research/*.md      # the flagged numbers, exit 1 if any
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

UNIT = r"(?:ms|s|sec|seconds?|min|minutes?|h|hours?|[kKMGT]i?B|%|points?|pp)"
MEASURED = re.compile(  # a ratio's x sits on its number ("3x"): "10 x 12" is a product
    rf"(?<![\w.\-/#])(?:\d[\d,]*(?:\.\d+)?(?:\s?{UNIT}|[x×])(?![\w-])|\d+\.\d+(?!\.?\d)|±\s?\d[\d.]*)")
ALLOWED = [  # (prose that reads like a measurement and is not, why)
    (r"\b95% (?:interval|confidence)", "the confidence level of every interval the pages give"),
    (r"\barXiv \d{4}\.\d{4,5}", "a paper's arXiv number"),
    (r"`[\w.\-]+`:? \d[\d.,]*", "a setting's value after its name in code"),
    (r"\b(?:Python|torch|sentence-transformers|transformers|spaCy|WordNet|Prefect|s3fs) \d+(?:\.\d+)+",
     "a software version"),
    (r"(?:§|\bsection |\bTable )\d+(?:\.\d+)*", "a section or table number"),
]
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_MARKER = re.compile(r"\{\{.*?\}\}|<!--.*?-->", re.S)
_CODE_OR_LINK = re.compile(r"`[^`\n]*`|\]\([^)\n]*\)|<https?://[^>\s]*>|https?://\S+")
_ALLOWED = re.compile("|".join(f"(?:{pattern})" for pattern, _ in ALLOWED))


def _blank(match: re.Match) -> str:
    """The match as blank lines and spaces: line numbers stay true."""
    return re.sub(r"[^\n]", " ", match.group(0))


def flagged(text: str) -> list[tuple[int, str]]:
    """(line number, the typed number) for each measured-looking number of a page's Markdown."""
    text = _MARKER.sub(_blank, _FENCE.sub(_blank, text))
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = _CODE_OR_LINK.sub(_blank, _ALLOWED.sub(_blank, line))
        found += [(number, m.group(0).strip()) for m in MEASURED.finditer(line)]
    return found


def scan(research: Path) -> list[str]:
    """`page:line: number` for every flagged number of the research pages under ``research``."""
    return [f"{page.name}:{line}: {number!r}" for page in sorted(research.glob("*.md"))
            for line, number in flagged(page.read_text(encoding="utf-8"))]


def on_pre_build(config) -> None:  # MkDocs hook
    from mkdocs.exceptions import PluginError

    found = scan(Path(config["docs_dir"]) / "research")
    if found:
        raise PluginError("typed numbers on research pages (render them from a results file, or write a "
                          "setting as code; docs/hooks/typed_numbers.py):\n  " + "\n  ".join(found))


def main(pages: list[str]) -> int:
    found = [f"{page}:{line}: {number!r}" for page in pages
             for line, number in flagged(Path(page).read_text(encoding="utf-8"))]
    print("\n".join(found) or "no typed numbers")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
