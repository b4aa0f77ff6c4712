"""One Prefect API for a benchmark that runs a flow on a local Dask cluster: `runs.prefect_api.shared_api`
(the user's own where `PREFECT_API_URL` is set, otherwise one temporary server for the benchmark and its
Dask workers), started before the measured flow rather than inside its time; a temporary one on a fresh
home, removed when the benchmark ends.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from runs.prefect_api import shared_api


@contextmanager
def prefect_api() -> Iterator[str]:
    """The API's URL, exported as PREFECT_API_URL for this process and its children while open."""
    home = os.environ.get("PREFECT_HOME")
    with ExitStack() as stack:
        if not os.environ.get("PREFECT_API_URL"):
            os.environ["PREFECT_HOME"] = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="pearl-bench-prefect-", ignore_cleanup_errors=True))
        try:
            yield stack.enter_context(shared_api())
        finally:
            if home is None:
                os.environ.pop("PREFECT_HOME", None)
            else:
                os.environ["PREFECT_HOME"] = home
