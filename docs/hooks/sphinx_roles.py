"""The code's docstrings are plain prose with Sphinx cross-reference roles (:class:`PearlModel`,
:func:`~pearl_model.x.y`), which Markdown would show as raw text: `plain()` makes each a code
span of its target (`~` keeps the last name, as Sphinx does). Used by the configuration
reference for the models' docstrings, and by mkdocstrings for the API reference as a griffe
extension (mkdocs.yml, handlers.python.options.extensions); not an MkDocs hook."""
from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:mod|class|func|meth|attr|data|obj|exc|const):`(~?)([^`]+)`")


def plain(text: str) -> str:
    """Sphinx roles in ``text`` as Markdown code spans."""
    return ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
