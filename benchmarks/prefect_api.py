"""One Prefect API for a benchmark that runs a flow on a local Dask cluster.

Without a `PREFECT_API_URL`, Prefect starts an ephemeral server in the process that needs one: the
benchmark's, and then each Dask worker's as its first task run reports, inside the stages' measured
time. A benchmark therefore names one API in the environment before it starts its workers (which
inherit it): the user's own where `PREFECT_API_URL` is set, otherwise a temporary server on a fresh
home, stopped when the benchmark ends.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def prefect_api() -> Iterator[str]:
    """The API's URL, exported as PREFECT_API_URL for this process and its children while open."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    home = os.environ.get("PREFECT_HOME")
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="pearl-bench-prefect-")
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server = SubprocessASGIServer()
    try:
        server.start()
        os.environ["PREFECT_API_URL"] = server.api_url
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield server.api_url
    finally:
        server.stop()
        os.environ.pop("PREFECT_API_URL", None)
        if home is None:
            os.environ.pop("PREFECT_HOME", None)
        else:
            os.environ["PREFECT_HOME"] = home
