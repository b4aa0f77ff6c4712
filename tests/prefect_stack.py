"""A real Prefect stack for the end-to-end tests: server, work pools, workers, CLI, API.

`Stack` starts `prefect server start` on a free port with a temporary PREFECT_HOME (the UI
on when asked), creates process work pools and starts a worker on each. Its server is
protected as scripts/env.sh protects a checkout's (`api_protection`): an auth string of its
own, CSRF protection, CORS for the UI's origin only; its workers, CLI and API client send
the string. Every process started carries PEARL_E2E_TAG in its environment (flow-run processes and Dask workers
inherit it); `stop` stops the services with their process groups and descendants, by pid,
and returns what survived, so a fixture can fail on leftovers.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
POOL = "local-process"


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 4200:
            return port


# What scripts/env.sh exports to protect the API (the server's and the clients' settings).
API_PROTECTION = ("PREFECT_SERVER_API_AUTH_STRING", "PREFECT_API_AUTH_STRING",
                  "PREFECT_SERVER_CSRF_PROTECTION_ENABLED", "PREFECT_SERVER_CORS_ALLOWED_ORIGINS")


def api_protection(checkout: Path, port: int) -> dict[str, str]:
    """The API_PROTECTION settings scripts/env.sh gives a checkout whose server is on `port`,
    sourced from a copy of env.sh in `checkout` (a throwaway checkout: its own auth string,
    made there on the first call)."""
    (checkout / "scripts").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "scripts" / "env.sh", checkout / "scripts" / "env.sh")
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "HOME": os.environ.get("HOME", str(checkout)), "PEARL_PREFECT_PORT": str(port)}
    out = subprocess.run(["bash", "-c", ". scripts/env.sh && env -0"], cwd=checkout, env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=True)
    exported = dict(line.split("=", 1) for line in out.stdout.split("\0") if "=" in line)
    return {k: exported[k] for k in API_PROTECTION if k in exported}


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Processes whose environment carries our tag: everything this test started."""
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            if p.environ().get("PEARL_E2E_TAG") == tag:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
    return found


def stop_tree(procs: list[subprocess.Popen], extra: list[psutil.Process] = (), timeout: float = 20) -> None:
    """SIGTERM each process group and every descendant, by pid; SIGKILL what is left."""
    targets: dict[int, psutil.Process] = {p.pid: p for p in extra}
    for proc in procs:
        try:
            root = psutil.Process(proc.pid)
            targets[root.pid] = root
            for child in root.children(recursive=True):
                targets[child.pid] = child
        except psutil.NoSuchProcess:
            pass

    def send(sig: int) -> None:
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)  # started with start_new_session: pgid == pid
                except (ProcessLookupError, PermissionError):
                    pass
        for p in list(targets.values()):
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    send(signal.SIGTERM)
    _, alive = psutil.wait_procs(list(targets.values()), timeout=timeout)
    if alive:
        send(signal.SIGKILL)
        psutil.wait_procs(alive, timeout=10)
    for proc in procs:
        try:
            proc.wait(timeout=5)  # reap our direct children
        except subprocess.TimeoutExpired:
            pass


def describe(procs: list[psutil.Process]) -> list[str]:
    """pid and command line of each process still alive (what a test reports as left over)."""
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid}: {' '.join(p.cmdline())[:200]}")
        except psutil.Error:
            pass
    return out


class Stack:
    """The server, worker and CLI of one test session, all on a temporary PREFECT_HOME."""

    def __init__(self, tmp: Path, ui: bool = False, pools: tuple[str, ...] = (POOL,), env: dict | None = None):
        self.tmp = tmp
        self.ui = ui
        self.pools = pools
        self.port = free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.tag = uuid.uuid4().hex
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.results = tmp / "results"
        home = tmp / "prefect-home"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        self.env.update(
            PEARL_E2E_TAG=self.tag,
            PEARL_PROJECT_DIR=str(ROOT),  # read by prefect.yaml's pull step
            PREFECT_HOME=str(home),
            PREFECT_PROFILES_PATH=str(home / "profiles.toml"),
            PREFECT_API_URL=self.api_url,
            PREFECT_SERVER_API_HOST="127.0.0.1",
            PREFECT_SERVER_API_PORT=str(self.port),
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            PREFECT_UI_ENABLED="true" if ui else "false",
            PREFECT_CLI_PROMPT="false",
            # as scripts/env.sh: `--watch` prints the run's logs (runs/progress.py's lines)
            PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED="true",
            PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED="true",
            PREFECT_WORKER_QUERY_SECONDS="2",
            PREFECT_WORKER_HEARTBEAT_SECONDS="5",
            # So that the test can read what the flow returned (the versions it wrote).
            PREFECT_RESULTS_PERSIST_BY_DEFAULT="true",
            PREFECT_LOCAL_STORAGE_PATH=str(self.results),
            PYTHONUNBUFFERED="1",
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        self.env.update(api_protection(tmp / "checkout", self.port))
        self.env.update(env or {})
        self.auth_string = self.env.get("PREFECT_API_AUTH_STRING")
        self.services: list[subprocess.Popen] = []

    # -- running things --
    def prefect_cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "prefect", *args]

    def spawn(self, name: str, *args: str, machine: tuple[list[str], Path, dict] | None = None) -> subprocess.Popen:
        """`prefect *args` in the background, logged to logs/<name>.log; `machine`: (a command prefix,
        the working directory, the environment) of a process set up as another machine's."""
        prefix, cwd, env = machine or ([], ROOT, self.env)
        log = open(self.logs / f"{name}.log", "ab")
        try:
            proc = subprocess.Popen([*prefix, *self.prefect_cmd(*args)], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        self.services.append(proc)
        return proc

    def cli(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        return self.run(self.prefect_cmd(*args), timeout=timeout, check=check, what=f"prefect {' '.join(args)}")

    def run(self, cmd: list[str], timeout: float = 120, check: bool = True, env: dict | None = None,
            what: str | None = None) -> subprocess.CompletedProcess:
        """Run `cmd` from the repo root with this stack's environment (updated by `env`, where None
        removes a variable); stdout and stderr together in .stdout."""
        what = what or " ".join(cmd)
        env = {k: v for k, v in {**self.env, **(env or {})}.items() if v is not None}
        # In a session of its own so that a timeout can stop it with its children.
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_tree([proc])
            out, _ = proc.communicate()
            pytest.fail(f"`{what}` ran over {timeout}s:\n{out[-4000:]}\n{self.log_tails()}")
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out, None)
        if check and result.returncode != 0:
            pytest.fail(f"`{what}` exited {result.returncode}:\n{out[-4000:]}\n{self.log_tails()}")
        return result

    def log_tails(self, chars: int = 6000) -> str:
        parts = []
        for f in sorted(self.logs.glob("*.log")):
            parts.append(f"--- {f.name} (end) ---\n{f.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def wait_for(self, what: str, ready, proc: subprocess.Popen, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"{what} exited with {proc.returncode} while starting\n{self.log_tails()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what} not ready after {timeout}s\n{self.log_tails()}")
            time.sleep(0.5)

    # -- the API --
    def api(self, fn):
        """Run ``await fn(client)`` against this stack's server."""
        from prefect.client.orchestration import get_client
        from prefect.settings import (PREFECT_API_AUTH_STRING, PREFECT_API_URL, PREFECT_LOCAL_STORAGE_PATH,
                                      temporary_settings)

        async def main():
            async with get_client() as client:
                return await fn(client)

        with temporary_settings(updates={PREFECT_API_URL: self.api_url, PREFECT_API_AUTH_STRING: self.auth_string,
                                         PREFECT_LOCAL_STORAGE_PATH: self.results}):
            return asyncio.run(main())

    # -- lifecycle --
    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = self.spawn("server", "server", "start", "--host", "127.0.0.1", "--port", str(self.port))
        self.wait_for("prefect server", self.healthy, server, timeout=120)
        for pool in self.pools:
            self.start_worker(pool)

    def start_worker(self, pool: str, machine: tuple[list[str], Path, dict] | None = None) -> subprocess.Popen:
        """Create the process work pool and start a worker on it (`machine`: as `spawn`'s); wait until
        it heartbeats."""
        name = f"e2e-{pool}"
        self.cli("work-pool", "create", pool, "--type", "process", "--overwrite")
        started = time.time()
        worker = self.spawn(f"worker-{pool}", "worker", "start", "--pool", pool, "--type", "process", "--name", name,
                            machine=machine)

        def worker_online() -> bool:
            async def q(client):
                return await client.read_workers_for_work_pool(pool)
            try:
                workers = self.api(q)
            except Exception:
                return False
            return any(w.name == name and w.last_heartbeat_time
                       and w.last_heartbeat_time.timestamp() >= started - 5 for w in workers)

        self.wait_for(f"prefect worker on {pool}", worker_online, worker, timeout=90)
        return worker

    def stop(self) -> list[str]:
        """Stop everything started; return descriptions of processes that survived."""
        stop_tree(self.services, extra=tagged_processes(self.tag))
        deadline = time.monotonic() + 15
        left = tagged_processes(self.tag)
        while left and time.monotonic() < deadline:
            stop_tree([], extra=left, timeout=5)
            left = tagged_processes(self.tag)
        return describe(left)
