"""Numbers shown in the docs come from `benchmarks/results/*.json`, never from typed prose.

A page writes `{{ value("FILE.json", "PATH", ".1f") }}` for one number and
`{{ table("FILE.json", "PATH", {"Header": "colpath", "Other": ("colpath", ".1f")}) }}` for a
table (keywords `where={"colpath": literal}` and `limit=N` select rows). PATH is dot-separated:
a dict key, a list index, or `[key=value]` (the first element of a list whose `key` is
`value`); a list of segments stands for a path whose keys hold dots. In a table, PATH selects a
list (a row per element) or a dict (a row per entry, `_key` naming the entry's key).

Used three ways: as an MkDocs hook (`on_page_markdown`: a missing file, an unresolved path or a
malformed marker fails the build), by `scripts/render_status.py` for the README's status table,
and from the shell to check a page:

    python docs/hooks/results.py check docs/research/recipe-averaging.md

Markers are arguments as Python literals, parsed with `ast.literal_eval` and never evaluated,
so a page cannot run code; every character of a value a results file gives, but letters, digits,
`.` and `,`, is written as a character reference (`fmt`), so a results file cannot put HTML or
Markdown (an `attr_list` `{: onclick=... }`, a newline and a heading) into a page. Fenced code blocks are left as they are (a page may show the syntax).
"""
from __future__ import annotations

import ast
import html
import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
# a marker, with the backticks of a code span that is only the marker (`{{ value(...) }}`)
MARKER = re.compile(r"(`?)\{\{\s*((?:value|table)\s*\(.*?\))\s*\}\}(`?)", re.S)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
SELECT = re.compile(r"^\[(?P<key>[^=\]]+)=(?P<value>[^\]]*)\]$")
MISSING = object()


class ResultsError(ValueError):
    """A marker that cannot be rendered: the message names the file and the path."""


@lru_cache(maxsize=None)
def load(name: str) -> Any:
    path = (RESULTS / name).resolve()
    if path.parent != RESULTS.resolve() or path.suffix != ".json":
        raise ResultsError(f"{name!r} is not a .json file directly in benchmarks/results/")
    if not path.is_file():
        raise ResultsError(f"results file benchmarks/results/{name} does not exist")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ResultsError(f"benchmarks/results/{name} is not valid JSON: {e}") from None


def segments(path: str | list | tuple) -> list:
    if isinstance(path, (list, tuple)):
        return list(path)
    return [] if path == "" else path.split(".")


def resolve(doc: Any, path: str | list | tuple, default: Any = MISSING) -> Any:
    node = doc
    for i, seg in enumerate(segments(path)):
        where = ".".join(map(str, segments(path)[:i])) or "(top)"
        select = SELECT.match(seg) if isinstance(seg, str) else None
        if select and isinstance(node, list):
            key, want = select["key"], select["value"]
            found = [e for e in node if isinstance(e, dict) and str(e.get(key, MISSING)) == want]
            if not found:
                if default is not MISSING:
                    return default
                raise ResultsError(f"no element with {key}={want!r} in the list at {where}")
            node = found[0]
        elif isinstance(node, list) and (isinstance(seg, int) or str(seg).lstrip("-").isdigit()):
            try:
                node = node[int(seg)]
            except IndexError:
                if default is not MISSING:
                    return default
                raise ResultsError(f"index {seg} out of range at {where} (length {len(node)})") from None
        elif isinstance(node, dict) and str(seg) in node:
            node = node[str(seg)]
        else:
            if default is not MISSING:
                return default
            keys = sorted(node)[:20] if isinstance(node, dict) else type(node).__name__
            raise ResultsError(f"no {seg!r} at {where} (has: {keys})")
    return node


def fmt(value: Any, spec: str | None = None) -> str:
    """``value`` as page text: every value a results file gives a page passes here. A results file
    is data: its ``<script>``, ``[x](javascript:...)`` or ``*0.93*{: onclick=... }`` is shown, never
    run, linked or made an attribute."""
    if value is None:
        return "–"
    if spec and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = format(value, spec)
    return as_text(str(value))


def as_text(s: str) -> str:
    """``s`` with every character but a letter, a digit, ``.`` and ``,`` as a numeric character
    reference: Markdown and HTML show a reference as its character and never read it as markup.
    Escaping only what one parser treats as syntax (HTML's ``<&``, Markdown's ``*_[{|`` and line
    starts, each extension's own) leaves whatever the list forgot; numbers stay as they were."""
    return "".join(c if c.isalnum() or c in ".," else f"&#{ord(c)};" for c in s)


def value(file: str, path: str | list, spec: str | None = None) -> str:
    return fmt(resolve(load(file), path), spec)


def table(file: str, path: str | list, columns: dict, where: dict | None = None,
          limit: int | None = None) -> str:
    node = resolve(load(file), path)
    if isinstance(node, dict):
        rows = [({"_key": k, **v} if isinstance(v, dict) else {"_key": k, "_value": v})
                for k, v in node.items()]
    elif isinstance(node, list):
        rows = node
    else:
        raise ResultsError(f"{path!r} in {file} is a {type(node).__name__}, not a list or dict")
    if where:
        rows = [r for r in rows
                if all(resolve(r, k, None) == v or str(resolve(r, k, None)) == str(v) for k, v in where.items())]
    if not rows:
        raise ResultsError(f"no rows at {path!r} in {file}" + (f" where {where}" if where else ""))
    rows = rows[:limit] if limit else rows
    specs = {h: (c,) if isinstance(c, (str, list)) else tuple(c) for h, c in columns.items()}
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for header, (colpath, *rest) in specs.items():
            cell = resolve(row, colpath, rest[1]) if len(rest) > 1 else resolve(row, colpath)
            cells.append(fmt(cell, rest[0] if rest else None))  # a "|" in it is a reference
        lines.append("| " + " | ".join(cells) + " |")
    return "\n" + "\n".join(lines) + "\n"


FUNCTIONS = {"value": value, "table": table}


def call(marker: str) -> str:
    try:
        node = ast.parse(marker, mode="eval").body
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise ResultsError("a marker holds one call of value(...) or table(...)")
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (SyntaxError, ValueError) as e:
        raise ResultsError(f"malformed marker: {e}") from None
    try:
        return FUNCTIONS[node.func.id](*args, **kwargs)
    except TypeError as e:
        raise ResultsError(f"bad arguments: {e}") from None


def render(text: str, source: str = "<text>") -> str:
    """The text with every marker outside fenced code replaced; every error at once."""
    errors: list[str] = []

    def one(match: re.Match) -> str:
        try:
            out = call(match.group(2))
            line_so_far = match.string[match.string.rfind("\n", 0, match.start()) + 1:match.start()]
            opened = line_so_far.count("`") % 2 == 1  # the marker is inside a longer code span
            if not (opened or match.group(1)):
                return out + match.group(3)
            if not match.group(2).startswith("value"):
                raise ResultsError("a table(...) marker cannot be inside a code span")
            if match.group(1) and match.group(3) and not opened:
                # a code span shows references as typed: a span of the marker alone is written as HTML
                return f"<code>{out}</code>"
            # in a longer span Markdown shows the text as it is; only a backtick or a line break ends it
            raw = html.unescape(out)
            if "`" in raw or "\n" in raw or "\r" in raw:
                raise ResultsError(f"a value in a code span holds a backtick or a line break: {out[:80]}")
            return match.group(1) + raw + match.group(3)
        except ResultsError as e:
            line = text.count("\n", 0, match.start()) + 1
            errors.append(f"{source}:{line}: {e}\n    {match.group(0)[:200]}")
            return match.group(0)

    out, pos = [], 0
    for fence in FENCE.finditer(text):
        out += [MARKER.sub(one, text[pos:fence.start()]), fence.group(0)]
        pos = fence.end()
    out.append(MARKER.sub(one, text[pos:]))
    if errors:
        raise ResultsError("\n".join(errors))
    return "".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:  # MkDocs hook
    from mkdocs.exceptions import PluginError

    try:
        return render(markdown, page.file.src_uri)
    except ResultsError as e:
        raise PluginError(f"results markers:\n{e}") from None


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "check":
        print("usage: python docs/hooks/results.py check PAGE.md [PAGE.md ...]", file=sys.stderr)
        return 2
    failed = False
    for page in argv[1:]:
        try:
            rendered = render(Path(page).read_text(encoding="utf-8"), page)
        except ResultsError as e:
            print(e, file=sys.stderr)
            failed = True
        else:
            print(rendered if len(argv) == 2 else f"{page}: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
