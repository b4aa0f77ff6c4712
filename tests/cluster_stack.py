"""PostgreSQL and a Dask cluster as processes of their own, for tests/test_real_cluster.py.

`Postgres` initdb's a throwaway cluster and runs `postgres` on a free port of 127.0.0.1 (and
a Unix socket in its own directory), with a `prefect` role and database. PostgreSQL refuses to
run as root, so as root its programs run as the unprivileged user `nobody`. `DaskCluster` runs
`dask scheduler` and one `dask worker` process per worker, as on separate machines: each in a
directory of its own (its working directory, HOME, TMPDIR, PEARL_CACHE, PREFECT_HOME), and as
root without the capabilities that bypass file modes (`setpriv`: CAP_DAC_OVERRIDE and the rest;
`nobody` cannot run this interpreter, which lives under /root), so that a folder of the flow's
with mode 000 is unreadable to them and what they share with the flow is only what the
environment names (the S3 server); `machine_home` sets up any other such process (a Prefect
worker) the same way. Every process carries PEARL_E2E_TAG in its environment; `stop` stops them by
pid and returns what survived.
"""
from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.prefect_stack import ROOT, describe, free_port, stop_tree, tagged_processes

PG_PROGRAMS = ("initdb", "postgres", "pg_ctl")
UNPRIVILEGED = "nobody"


def find_postgres_bin() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin, else the directory of `postgres` on PATH."""
    def version(d: str) -> float:
        try:
            return float(Path(d).parent.name)
        except ValueError:
            return 0.0

    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    on_path = shutil.which("postgres")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for d in candidates:
        if all(os.access(Path(d) / p, os.X_OK) for p in PG_PROGRAMS):
            return Path(d)
    return None


def sweep(tag: str) -> list[str]:
    """Stop what still carries the tag; describe what survives that."""
    left = tagged_processes(tag)
    if left:
        stop_tree([], extra=left, timeout=10)
    return describe(tagged_processes(tag))


def unprivileged_ids() -> dict:
    """Popen's user/group arguments that run a process as `nobody` when we are root (else none)."""
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam(UNPRIVILEGED)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


class Postgres:
    """A PostgreSQL server of one test: data and socket in a temporary directory, TCP on loopback."""

    user = "prefect"
    database = "prefect"

    def __init__(self, bin_dir: Path, logs: Path):
        self.bin = bin_dir
        self.logs = logs
        self.port = free_port()
        self.password = uuid.uuid4().hex
        self.tag = uuid.uuid4().hex
        # Not under pytest's tmp_path: as root that sits in a 0700 directory `nobody` cannot
        # enter; and the socket path must stay under the 107 bytes a Unix socket name allows.
        self.dir = Path(tempfile.mkdtemp(prefix="pearl-pg-"))
        self.data = self.dir / "data"
        self.env = {**os.environ, "PEARL_E2E_TAG": self.tag, "LC_ALL": "C"}
        # Popen drops to this user between fork and exec, so the pid we hold is postgres itself.
        self.ids = unprivileged_ids()
        if self.ids:
            os.chown(self.dir, self.ids["user"], self.ids["group"])
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """What PREFECT_API_DATABASE_CONNECTION_URL gets: password auth over TCP, as a remote server."""
        return f"postgresql+asyncpg://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def tool(self, name: str, *args: str, timeout: float = 120) -> str:
        out = subprocess.run([str(self.bin / name), *args], env=self.env, cwd=self.dir, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=timeout, **self.ids)
        if out.returncode != 0:
            pytest.fail(f"{name} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        return out.stdout

    def log_tail(self, chars: int = 4000) -> str:
        log = self.logs / "postgres.log"
        return log.read_text(errors="replace")[-chars:] if log.exists() else ""

    def start(self) -> None:
        # Local (socket) connections trust the superuser; TCP needs the role's password.
        self.tool("initdb", "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                  "--auth-host=scram-sha-256", "--no-locale", "-E", "UTF8", "--no-sync")
        log = open(self.logs / "postgres.log", "ab")
        try:
            # Durability is of no use to a throwaway database: fsync off keeps it fast.
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.dir}",
                 "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                env=self.env, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, **self.ids)
        finally:
            log.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                asyncio.run(self._admin("SELECT 1"))
                break
            except (OSError, ConnectionError, asyncio.TimeoutError) as e:
                error = e
            except Exception as e:  # asyncpg's "the database system is starting up"
                if "starting up" not in str(e):
                    raise
                error = e
            if self.proc.poll() is not None:
                pytest.fail(f"postgres exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"postgres not accepting connections after 60s ({error}):\n{self.log_tail()}")
            time.sleep(0.3)
        # Prefect's migrations create pg_trgm, a trusted extension: owning the database is enough.
        asyncio.run(self._admin(
            f"CREATE ROLE {self.user} LOGIN PASSWORD '{self.password}'",
            f"CREATE DATABASE {self.database} OWNER {self.user}"))

    async def _admin(self, *statements: str) -> None:
        import asyncpg

        conn = await asyncpg.connect(host=str(self.dir), port=self.port, user="postgres", database="postgres",
                                     timeout=10)
        try:
            for s in statements:
                await conn.execute(s)
        finally:
            await conn.close()

    def fetch(self, sql: str, *args) -> list[dict]:
        """Rows of a query, as the prefect role over TCP (the way the server connects)."""
        import asyncpg

        async def run():
            conn = await asyncpg.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                                         database=self.database, timeout=10)
            try:
                return [dict(r) for r in await conn.fetch(sql, *args)]
            finally:
                await conn.close()

        return asyncio.run(run())

    def stop(self) -> list[str]:
        """`pg_ctl stop -m fast`, then by pid whatever is left; remove the data; return survivors."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                subprocess.run([str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-m", "fast", "-w",
                                "-t", "30"], env=self.env, cwd=self.dir, stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=60, **self.ids)
            except subprocess.TimeoutExpired:
                pass
            stop_tree([self.proc], timeout=10)  # a no-op when pg_ctl has stopped it
        survivors = sweep(self.tag)
        if not survivors:
            shutil.rmtree(self.dir, ignore_errors=True)
        return survivors


def confined() -> list[str]:
    """A command prefix that runs a program as root with no capabilities (file modes then bind it
    as they bind any user); none when we are not root (file modes already do)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): the workers could read every folder")
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]


def machine_home(name: str, env: dict, seed: tuple[Path, ...] = ()) -> tuple[Path, dict]:
    """A directory of the process `name`, outside the test's, and `env` updated to make it the
    process's whole local disk: working directory, HOME, TMPDIR, PEARL_CACHE (holding a copy of
    each folder of `seed`, as the machine's image would), PREFECT_HOME, PREFECT_LOCAL_STORAGE_PATH.
    The caller removes it."""
    d = Path(tempfile.mkdtemp(prefix=f"pearl-{name}-"))
    for sub in ("tmp", "cache", "prefect"):
        (d / sub).mkdir()
    for src in seed:
        shutil.copytree(src, d / "cache" / src.name)
    return d, {**env, "HOME": str(d), "TMPDIR": str(d / "tmp"), "PEARL_CACHE": str(d / "cache"),
               "PREFECT_HOME": str(d / "prefect"), "PREFECT_PROFILES_PATH": str(d / "prefect" / "profiles.toml"),
               "PREFECT_LOCAL_STORAGE_PATH": str(d / "prefect" / "storage"),
               "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))}


class DaskCluster:
    """`dask scheduler` and `dask worker` processes on loopback, with the given environment, each
    in a machine-like directory of its own (`home`), confined (`confined`); `seed_cache`:
    directories copied into each one's PEARL_CACHE first (a converted backbone, as a worker's
    image would carry it)."""

    def __init__(self, tmp: Path, logs: Path, env: dict, n_workers: int = 2, seed_cache: tuple[Path, ...] = ()):
        self.tmp = tmp
        self.logs = logs
        self.env = env
        self.n_workers = n_workers
        self.seed_cache = seed_cache
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.homes: dict[str, Path] = {}

    def spawn(self, name: str, *args: str, seed: bool = False) -> subprocess.Popen:
        cwd, env = machine_home(name, self.env, self.seed_cache if seed else ())
        self.homes[name] = cwd
        log = open(self.logs / f"{name}.log", "ab")
        try:
            return subprocess.Popen([*confined(), sys.executable, "-m", "dask", *args], cwd=cwd, env=env,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            log.close()

    def log_tails(self, chars: int = 4000) -> str:
        return "\n".join(f"--- {f.name} (end) ---\n{f.read_text(errors='replace')[-chars:]}"
                         for f in sorted(self.logs.glob("dask-*.log")))

    def client(self, **kwargs):
        from distributed import Client

        return Client(self.address, timeout="30s", set_as_default=False, **kwargs)

    def start(self, timeout: float = 180) -> None:
        self.scheduler = self.spawn("dask-scheduler", "scheduler", "--host", "127.0.0.1", "--port", str(self.port),
                                    "--no-dashboard")
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            if self.scheduler.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Dask scheduler did not come up\n{self.log_tails()}")
            time.sleep(0.3)
        for i in range(self.n_workers):
            # One process and thread each, as the local cluster's: the stages are CPU-bound Python.
            self.workers.append(self.spawn(
                f"dask-worker-{i}", "worker", self.address, "--name", f"real-{i}", "--host", "127.0.0.1",
                "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                "--local-directory", "dask-worker-space", seed=True))  # in its working directory
        try:
            with self.client() as c:
                c.wait_for_workers(self.n_workers, timeout=max(10.0, deadline - time.monotonic()))
        except Exception as e:  # TimeoutError, or a client that cannot connect
            dead = [f"worker {i} exited {w.returncode}" for i, w in enumerate(self.workers) if w.poll() is not None]
            pytest.fail(f"{self.n_workers} Dask workers not connected: {e!r} {dead}\n{self.log_tails()}")

    def stop(self) -> None:
        """Workers first (so none reconnects), then the scheduler; each with its descendants."""
        stop_tree(self.workers)
        if self.scheduler is not None:
            stop_tree([self.scheduler])
        for d in self.homes.values():
            shutil.rmtree(d, ignore_errors=True)
