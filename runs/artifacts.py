"""Prefect artifacts from a stage's tasks, sent only inside a Prefect run: the benchmarks run the
same task bodies as plain functions, where the content is computed and nothing is sent.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence


def in_a_run() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext

    return TaskRunContext.get() is not None or FlowRunContext.get() is not None


def publish(create: Callable, *args, **kwargs) -> Any:
    """`create(*args, **kwargs)`, a `prefect.artifacts` function, in a Prefect run. Outside one (a
    task's body run as a plain function, as the benchmarks do) nothing is sent: Prefect deprecates
    artifacts without a run, and one would start a server. The content is computed either way.
    Credentials in URLs anywhere in the content are redacted (artifacts are shown to every API user)."""
    from pearl_redact import redact

    return create(*redact(args), **redact(kwargs)) if in_a_run() else None


def publish_link(link: str, **kwargs) -> Any:
    """A link artifact (`publish`) to a page a browser opens from the UI: an http(s) URL. A dataset's
    or a model's location is no such page: `publish_location` shows it."""
    from prefect.artifacts import create_link_artifact

    return publish(create_link_artifact, link=link, **kwargs)


def location_markdown(title: str, location: str, commands: Sequence[str] = (), note: str = "") -> str:
    """Where an output lives, as text to copy, with the commands that use it: not a link, which a
    browser would not open (a web page may not link to a file:// location: "Not allowed to load local
    resource"; no browser opens s3:// or gs://). A local location is an absolute path."""
    from storage.datasets import as_location

    lines = [f"**{title}**", "", "```text", as_location(location), "```"]
    if note:
        lines += ["", note]
    if commands:
        lines += ["", "Use it:", "", "```bash", *commands, "```"]
    return "\n".join(lines)


def train_command(root: str, version: str) -> str:
    """The command that trains a model on this training_set version (the `train/pearl` deployment)."""
    from shlex import quote

    from storage.datasets import as_location

    return (f"prefect deployment run train/pearl --watch --param training_set_version={version} "
            f"--param storage_root={quote(as_location(root))}")


def publish_location(location: str, *, key: str, title: str, commands: Sequence[str] = (), note: str = "",
                     description: str | None = None) -> Any:
    """A markdown artifact (`publish`) of :func:`location_markdown`."""
    from prefect.artifacts import create_markdown_artifact

    return publish(create_markdown_artifact, location_markdown(title, location, commands, note), key=key,
                   description=description)
