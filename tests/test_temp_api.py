"""An in-process flow without PREFECT_API_URL (a library user's script) starts ONE temporary Prefect API for
the process and its Dask workers, stops it however the process ends (a normal exit, or SIGKILL midway), and
never holds the caller's stdout open (issue 54, item 8)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

# The product's wiring in small: an outer flow runs a subflow on dask_task_runner, as flows/build_corpus.py does.
SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path

    from prefect import flow, task

    from flows.dask_runner import dask_task_runner

    @task
    def double(x: int) -> int:
        return 2 * x

    @flow
    def stages(xs: list[int], ready: str, go: str) -> list[int]:
        out = double.map(xs).result()  # each worker has reported a task run
        Path(ready).write_text("ready")
        deadline = time.monotonic() + 120
        while not Path(go).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return out

    @flow
    def outer(ready: str, go: str) -> list[int]:
        return stages.with_options(task_runner=dask_task_runner(n_workers=2))([1, 2, 3, 4], ready, go)

    if __name__ == "__main__":
        print(outer(sys.argv[1], sys.argv[2]), flush=True)
""")


def servers(home: Path) -> list[psutil.Process]:
    """The Prefect API servers (uvicorn) started under this test's PREFECT_HOME, whoever their parent is now."""
    found = []
    for p in psutil.process_iter():
        try:
            if "uvicorn" in " ".join(p.cmdline()) and p.environ().get("PREFECT_HOME") == str(home):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def gone_within(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while alive(procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive(procs)


@pytest.mark.parametrize("ending", ["normal", "sigkill"])
def test_one_temporary_api_for_the_process_and_its_workers_stopped_on_exit(tmp_path, ending):
    home = tmp_path / "prefect-home"
    script, ready, go = tmp_path / "run_flow.py", tmp_path / "ready", tmp_path / "go"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_PROFILES_PATH=str(home / "profiles.toml"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PEARL_DASK_DASHBOARD="127.0.0.1:0")
    proc = subprocess.Popen([sys.executable, str(script), str(ready), str(go)], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # read on a thread, so that a full pipe never blocks the flow; the thread ends at EOF
    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.extend(iter(lambda: proc.stdout.read1(1 << 16), b"")), daemon=True)
    reader.start()
    seen: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not ready.exists():
            reader.join(timeout=10)
            pytest.fail(f"the flow did not reach its stages (exit {proc.poll()}): "
                        f"{b''.join(output).decode(errors='replace')[-3000:]}")
        seen = servers(home)
        seen += [p for p in psutil.Process(proc.pid).children(recursive=True) if p not in seen]
        running = servers(home)
        assert len(running) == 1, f"{len(running)} temporary API servers: {[p.pid for p in running]}"
        if ending == "normal":
            go.write_text("go")
            assert proc.wait(timeout=120) == 0
            reader.join(timeout=10)  # (d) EOF on stdout: no server holds it open
            assert not reader.is_alive(), "the caller's stdout is still held open after the process ended"
            assert "[2, 4, 6, 8]" in b"".join(output).decode()
            assert not gone_within(running, 5), "the server outlived a normal exit"
        else:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            left = gone_within(running, 10)
            assert not left, f"the server outlived its SIGKILLed process: {[p.pid for p in left]}"
            reader.join(timeout=10)  # (d) EOF on stdout once the process and its server are gone
            assert not reader.is_alive(), "the caller's stdout is still held open after the process was killed"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for p in alive(seen + servers(home)):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
