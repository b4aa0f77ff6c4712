"""The API reference follows the library's front door: a page writes `::: pearl_model.NAME` (a
mkdocstrings block) with a public name, and this hook points it at the module that defines the
name, read from `_PUBLIC` in `pearl_model/__init__.py` (the one table of the public names, which
`__getattr__` loads lazily, so griffe cannot see them statically). A move of the modules changes
that table and nothing here. A `::: pearl_model.NAME` whose NAME is not public fails the build.

`python docs/hooks/api_reference.py` prints the table.
"""
from __future__ import annotations

import ast
import re

from _markdown import ROOT
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

INIT = ROOT / "pearl_model" / "__init__.py"
BLOCK = re.compile(r"^(?P<indent>[ \t]*):::[ \t]+pearl_model\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)[ \t]*$", re.M)


def public_names() -> dict[str, str]:
    """The front door: public name -> its defining module, from `_PUBLIC` (read, not imported)."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "_PUBLIC" for t in targets):
            return ast.literal_eval(node.value)
    raise PluginError(f"{INIT}: no `_PUBLIC = {{name: module}}` table of the public names")


def resolve(markdown: str, source: str = "<text>") -> str:
    """Each `::: pearl_model.NAME` line rewritten to `::: <defining module>.NAME`."""
    public = None

    def one(match: re.Match) -> str:
        nonlocal public
        public = public if public is not None else public_names()
        name = match.group("name")
        if name not in public:
            raise PluginError(f"{source}: `::: pearl_model.{name}`: {name} is not in pearl_model's "
                              f"_PUBLIC ({', '.join(sorted(public))})")
        return f"{match.group('indent')}::: {public[name]}.{name}"

    return BLOCK.sub(one, markdown)


@event_priority(50)  # before results.py's markers (priority 0)
def on_page_markdown(markdown: str, page, config, files) -> str:
    return resolve(markdown, page.file.src_uri)


if __name__ == "__main__":
    for name, module in public_names().items():
        print(f"pearl_model.{name} -> {module}.{name}")
