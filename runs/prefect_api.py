"""One Prefect API for a process and the Dask workers it starts, stopped however the process ends.

Without `PREFECT_API_URL`, Prefect starts a temporary API server (uvicorn on a loopback port) in each
process that needs one: the flow's, then each Dask worker's as its first task run reports (the workers
inherit the flow's settings, which name no API). Prefect's server writes to the caller's stdout and is
stopped by an `atexit` hook only, which a Dask worker (ended with `os._exit`), a SIGTERM or a SIGKILL
skips: the server lives on with parent 1, holding the caller's stdout open.

`TemporaryAPI` is Prefect's server with two changes: its output goes to `$PREFECT_HOME/temporary-api.log`,
and it watches the process that started it and stops when that process is gone, however it ended
(a watchdog on the parent pid rather than Linux's PR_SET_PDEATHSIG, which fires when the *thread* that
started the server ends, and Prefect starts it from whichever thread first needs a client).
`shared_api()` names that one API to this process's settings and environment, so that the Dask workers
(and any process started meanwhile) report to it rather than start their own.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import prefect
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_HOME,
    get_current_settings,
    temporary_settings,
)

PARENT_ENV = "PEARL_PREFECT_API_PARENT"  # the pid the server watches
WATCH_SECONDS = 0.5
STOP_GRACE_SECONDS = 5  # as Prefect's own stop(): SIGTERM, then a hard exit


class TemporaryAPI(SubprocessASGIServer):
    """Prefect's temporary API server that writes to a log file and dies with the process that started it."""

    def _run_uvicorn_command(self) -> subprocess.Popen:
        # Prefect 3.8.8's command (its Popen takes no options), the app made by `watched_app` below.
        home = PREFECT_HOME.value()
        home.mkdir(parents=True, exist_ok=True)
        with open(home / "temporary-api.log", "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent),
                 "--factory", f"{__name__}:watched_app", "--host", "127.0.0.1", "--port", str(self.port),
                 "--log-level", "error", "--lifespan", "on"],
                env={**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
                     "PREFECT__SERVER_FINAL": "1", PARENT_ENV: str(os.getpid()),
                     **get_current_settings().to_environment_variables(exclude_unset=True)},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        super().stop()  # which drops the default: register a fresh one for a later run in this process
        temporary_api()


def watched_app():
    """The server's app (uvicorn's factory, in the server process), once a watchdog on its parent runs."""
    from prefect.server.api.server import create_app

    parent = int(os.environ[PARENT_ENV])

    def watch() -> None:
        while os.getppid() == parent:  # a dead parent's children are handed to init or a subreaper
            time.sleep(WATCH_SECONDS)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful shutdown
        time.sleep(STOP_GRACE_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()
    return create_app()


def temporary_api() -> SubprocessASGIServer:
    """This process's temporary API server, registered as Prefect's default so that Prefect's own lazy start
    (the first flow run without an API) starts this one; a server Prefect already runs is kept as it is."""
    current = SubprocessASGIServer._instances.get(None)
    if current is not None and not isinstance(current, TemporaryAPI) and not current.running:
        del SubprocessASGIServer._instances[None]
    return TemporaryAPI()  # Prefect's __new__ returns the registered default, or registers this one


@contextmanager
def shared_api() -> Iterator[str]:
    """The API's URL, named to this process's settings and exported as PREFECT_API_URL to the processes it
    starts (the Dask workers, whose task runs read this process's settings) while open: the user's own where
    set, otherwise this process's temporary server, started here if it is not running yet and then stopped
    on leaving."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    exported = os.environ.get("PREFECT_API_URL")
    url = PREFECT_API_URL.value() or exported  # the environment's may be newer than the settings read at import
    server = None if url else temporary_api()
    started_here = server is not None and not server.running
    try:
        if server is not None:
            server.start()
            url = server.api_url
        os.environ["PREFECT_API_URL"] = url
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        if exported is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = exported
        if started_here:
            server.stop()
