"""The datasets reference, generated from `storage/schemas.py` (where every Parquet dataset's
schema is defined once): a page holding the line `<!-- datasets-reference -->` gets, per dataset
in `schemas.ALL`'s order, the comment above its schema, its bucket column when it is a bucketed
map output, and a table of its columns (type, nullability, the column's own comment).

The schemas are pyarrow objects (no docstrings), so their prose is read from the module's
comments: the block of `#` lines above a schema's assignment (skipping helper assignments
between, e.g. `_POSITIVE`) and the comment ending each `pa.field(...)` line.

From the shell: `python docs/hooks/datasets_reference.py` prints the generated Markdown.
"""
from __future__ import annotations

import ast
import io
import tokenize

from _markdown import ROOT, prose, replace_marker
from mkdocs.plugins import event_priority

SOURCE = ROOT / "storage" / "schemas.py"


def comments(source: str) -> dict[int, str]:
    """Line number -> the text of the comment on that line."""
    return {tok.start[0]: tok.string.lstrip("#").strip()
            for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}


def _assigns(statement: ast.stmt, names: set[str]) -> bool:
    return any(isinstance(t, ast.Name) and t.id in names for t in getattr(statement, "targets", []))


def source_notes(source: str) -> tuple[dict[str, str], dict[str, dict[str, str]], dict[str, str]]:
    """From the module's text: (schema variable -> the comment block above it,
    schema variable -> {column: its line comment}, dataset name -> the comment on its ALL entry)."""
    tree, lines, notes = ast.parse(source), source.splitlines(), comments(source)
    statements = [s for s in tree.body if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)]
    all_node = next(s.value for s in statements if s.targets[0].id == "ALL")
    schema_vars = {v.id for v in all_node.values if isinstance(v, ast.Name)}
    statement_at = {line: s for s in tree.body for line in range(s.lineno, s.end_lineno + 1)}

    above: dict[str, str] = {}
    columns: dict[str, dict[str, str]] = {}
    for s in statements:
        name = s.targets[0].id
        if name not in schema_vars:
            continue
        block, line = [], s.lineno - 1
        while line >= 1:
            text = lines[line - 1].strip()
            if text.startswith("#"):
                block.insert(0, notes[line])
                line -= 1
            elif line in statement_at and not _assigns(statement_at[line], schema_vars):
                line = statement_at[line].lineno - 1  # a helper between the comment and the schema
            else:
                break
        above[name] = " ".join(block)
        columns[name] = {}
        for node in ast.walk(s.value):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "field"
                    and node.args and isinstance(node.args[0], ast.Constant) and node.end_lineno in notes):
                columns[name].setdefault(node.args[0].value, notes[node.end_lineno])

    entries = {}
    for key, value in zip(all_node.keys, all_node.values):
        if isinstance(key, ast.Constant):
            entries[key.value] = (value.id if isinstance(value, ast.Name) else "", notes.get(value.end_lineno, ""))
    return above, columns, entries


def render(page_uri: str = "reference/datasets.md") -> str:
    from storage import schemas
    from storage.buckets import bucket_column

    above, columns, entries = source_notes(SOURCE.read_text(encoding="utf-8"))
    out = []
    first_of: dict[str, str] = {}  # schema variable -> the first dataset written with it
    for dataset, schema in schemas.ALL.items():
        var, entry_note = entries[dataset]
        first = first_of.setdefault(var, dataset)
        if first == dataset:
            text = prose(" ".join(p for p in (above.get(var, ""), entry_note) if p), page_uri)
        else:  # a schema shared with an earlier dataset: its own note, then a link
            note = entry_note and prose(entry_note + ".", page_uri)
            text = f"{note} The same columns as [`{first}`](#{first}).".strip()
        bucket = bucket_column(schema)
        out += [f"### `{dataset}` {{ #{dataset} }}", ""]
        if text:
            out += [text, ""]
        if bucket:
            out += [f"A map output bucketed by `{bucket}`: each part holds one row group per bucket, "
                    f"so a reducer reads only its own.", ""]
        out += ["| column | type | nullable | note |", "|---|---|---|---|"]
        notes = columns.get(var, {})
        for field in schema:
            out.append(f"| `{field.name}` | `{field.type}` | {'yes' if field.nullable else 'no'} "
                       f"| {prose(notes.get(field.name, ''), page_uri)} |")
        out.append("")
    return "\n".join(out)


@event_priority(50)  # before results.py's markers (priority 0)
def on_page_markdown(markdown: str, page, config, files) -> str:
    return replace_marker(markdown, "datasets-reference", render, page.file.src_uri)


if __name__ == "__main__":
    print(render())
