"""What the generating hooks share: the repository root on sys.path (so the reference pages
describe this checkout's code, not another copy installed in the venv), Markdown escaping for
table cells, and the `<!-- name -->` markers they replace."""
from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


CODE_SPAN = re.compile(r"(``[^`]+``|`[^`]+`)")  # rST literals are ``double``


def cell(text: str) -> str:
    """Prose safe in a Markdown table cell: one line, no column break, no stray emphasis,
    link or HTML; code spans in backticks are kept as they are."""
    parts = CODE_SPAN.split(" ".join(text.split()))
    return "".join(part if i % 2 else re.sub(r"([\\|*_\[\]])", r"\\\1", part).replace("<", "&lt;")
                   for i, part in enumerate(parts))


DOCS_PATH = re.compile(r"\bdocs/([\w./-]+?\.md)(#[\w-]+)?\b")


def prose(text: str, page_uri: str) -> str:
    """cell(text), with each `docs/<page>.md` it names made a link from the page at `page_uri`
    (so a strict build fails when the page it names is gone)."""
    out, pos = [], 0
    for m in DOCS_PATH.finditer(text):
        target = posixpath.relpath(m.group(1), posixpath.dirname(page_uri) or ".") + (m.group(2) or "")
        out += [cell(text[pos:m.start()]), f"[{cell(m.group(1))}]({target})"]
        pos = m.end()
    out.append(cell(text[pos:]))
    return "".join(out)


def replace_marker(markdown: str, name: str, render: Callable[[str], str], page_uri: str) -> str:
    """Every line that is exactly `<!-- name -->` replaced by render(page_uri)'s Markdown."""
    marker = re.compile(rf"^<!--\s*{re.escape(name)}\s*-->[ \t]*$", re.M)
    return marker.sub(lambda _: render(page_uri), markdown) if marker.search(markdown) else markdown
