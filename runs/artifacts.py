"""Prefect artifacts from a stage's tasks, sent only inside a Prefect run: the benchmarks run the
same task bodies as plain functions, where the content is computed and nothing is sent.
"""
from __future__ import annotations

from typing import Any, Callable


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
    """A link artifact (`publish`) whose link is a working URL: a local path becomes a file:// URI."""
    from prefect.artifacts import create_link_artifact

    from storage.datasets import as_url

    return publish(create_link_artifact, link=as_url(link), **kwargs)
