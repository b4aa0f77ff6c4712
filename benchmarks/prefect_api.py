"""One Prefect API for a benchmark that runs a flow on a local Dask cluster: `runs.prefect_api.shared_api`
(the user's own where `PREFECT_API_URL` is set, otherwise one temporary server for the benchmark and its
Dask workers), started before the measured flow rather than inside its time, on a fresh home that is
removed when the benchmark ends.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from runs.prefect_api import shared_api


@contextmanager
def prefect_api() -> Iterator[str]:
    """The API's URL, exported as PREFECT_API_URL for this process and its children while open."""
    if os.environ.get("PREFECT_API_URL"):
        with shared_api() as url:
            yield url
        return
    home = os.environ.get("PREFECT_HOME")
    with tempfile.TemporaryDirectory(prefix="pearl-bench-prefect-", ignore_cleanup_errors=True) as fresh:
        os.environ["PREFECT_HOME"] = fresh
        try:
            with shared_api() as url:
                yield url
        finally:
            if home is None:
                os.environ.pop("PREFECT_HOME", None)
            else:
                os.environ["PREFECT_HOME"] = home
