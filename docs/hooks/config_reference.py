"""The configuration reference, generated from the settings models themselves (the one place each
setting's default, bounds and description live): build-corpus's stage models
(`flows/corpus_config.py`, one flow parameter each) and `TrainConfig` (the `train` flow's
`training` parameter). A page holding the line `<!-- config-reference -->` gets, per model, a
table of field, type, default, bounds and description. A field without a description raises
`MissingDescription`, which fails the build.

From the shell: `python docs/hooks/config_reference.py` prints the generated Markdown.
"""
from __future__ import annotations

import json
import types
import typing

from _markdown import cell, prose, replace_marker
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from sphinx_roles import plain

# annotated-types constraint attribute -> how the bounds column writes it
BOUNDS = {"ge": "≥ {}", "gt": "> {}", "le": "≤ {}", "lt": "< {}", "multiple_of": "multiple of {}",
          "min_length": "length ≥ {}", "max_length": "length ≤ {}"}


PAGE = "reference/configuration.md"  # where the marker is, for links in the descriptions


class MissingDescription(ValueError):
    """A settings field without a description: the reference would have a hole."""


def models() -> list[tuple[str, str, type[BaseModel]]]:
    """(flow, parameter, model) for every settings model, in the order a run uses them."""
    from flows.corpus_config import STAGES
    from pearl_model import TrainConfig

    return ([("build-corpus", name, model) for name, model in STAGES.items()]
            + [("train", "training", TrainConfig)])


def constraints(metadata) -> list[str]:
    """Bounds from a field's (or an Annotated type's) metadata: annotated-types objects or FieldInfo."""
    out = []
    for item in metadata:
        nested = getattr(item, "metadata", None)  # a pydantic FieldInfo inside Annotated[...]
        if isinstance(nested, list):
            out += constraints(nested)
            continue
        for attr, fmt in BOUNDS.items():
            value = getattr(item, attr, None)
            if value is not None:
                out.append(fmt.format(value))
    return out


def type_name(tp) -> str:
    """A readable type, bounds of nested Annotated types written inline: `float (≥ 0, ≤ 1)`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        inner, bounds = type_name(args[0]), constraints(args[1:])
        return f"{inner} ({', '.join(bounds)})" if bounds else inner
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if tp is type(None):
        return "null"
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]" if args else origin.__name__
    return getattr(tp, "__name__", str(tp))


def default(field) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return json.dumps(value)


def code(text: str) -> str:
    """A code span in a table cell (pipes inside code spans do not split the row)."""
    return f"`{text}`"


def render_model(model: type[BaseModel], heading: str, page_uri: str = PAGE) -> str:
    """One model's section: its docstring, then a row per field. Raises MissingDescription."""
    missing = [name for name, field in model.model_fields.items() if not (field.description or "").strip()]
    if missing:
        raise MissingDescription(f"{model.__module__}.{model.__qualname__}: no description for "
                                 f"{', '.join(missing)} (Field(..., description=...))")
    doc = plain(" ".join((model.__doc__ or "").split("\n\n")[0].split()))
    rows = ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        bounds = ", ".join(constraints(field.metadata))
        rows.append(f"| {code(name)} | {code(type_name(field.annotation))} | {code(default(field))} "
                    f"| {cell(bounds)} | {prose(field.description, page_uri)} |")
    return "\n".join([heading, "", prose(doc, page_uri) if doc else "", "", *rows, ""])


def render(page_uri: str = PAGE) -> str:
    sections = []
    for flow, parameter, model in models():
        sections.append(render_model(model, f"### `{parameter}`: {model.__name__} {{ #{parameter} }}\n\n"
                                            f"The `{flow}` flow's `{parameter}` parameter "
                                            f"(`{model.__module__}.{model.__name__}`).", page_uri))
    return "\n".join(sections)


@event_priority(50)  # before results.py's markers (priority 0)
def on_page_markdown(markdown: str, page, config, files) -> str:
    try:
        return replace_marker(markdown, "config-reference", render, page.file.src_uri)
    except MissingDescription as e:
        raise PluginError(f"{page.file.src_uri}: {e}") from None


if __name__ == "__main__":
    print(render())
