"""Run docs/quickstart.md's commands as written and time each step into
benchmarks/results/quickstart_times_cpu.json (the page renders the times from it).

    flock /work/helpers/cpu.lock python benchmarks/quickstart_times.py [--data data]
    python benchmarks/quickstart_times.py --from-clone    # first: git clone + `bash scripts/run.sh`

With `--from-clone` the times start where a new user does: a `git clone` of this checkout's HEAD
into a scratch directory, then the README's `bash scripts/run.sh` there (set-up of `.venv` with
pip's and npm's caches empty, the Prefect server and workers on a port of its own, the sample
build), each phase timed from the lines run.sh prints; the page's steps then run on the corpus
that clone built, and the clone's services are stopped by its own `scripts/services.sh stop`.

The page's blocks marked `<!-- quickstart: NAME -->` run in order in one bash (`set -euo pipefail`,
so a variable one block sets is there for the next), in a scratch directory holding a copy of the
corpus (`--data`, what `bash scripts/run.sh` built) and a link to `examples/`. `prefect deployment
run NAME --param ...` runs the deployment's flow in its own process against a temporary Prefect
server, with the parameters prefect.yaml gives the deployment and the page's `--param`s (as a
process worker would run it); `pearl` is the installed command. tests/test_quickstart.py runs the
same blocks through `run_page`, with overrides that swap in a tiny model and corpus.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "quickstart.md"
RESULTS = ROOT / "benchmarks" / "results" / "quickstart_times_cpu.json"
FIRST_STEP = re.compile(r"^step \d+/\d+ ")  # training's step line in the run's log (tasks/training.py)
FIRST_STEP_FILE = "QUICKSTART_FIRST_STEP"  # where the deployment shim writes when the first one came
BLOCK = re.compile(r"<!-- quickstart: (?P<name>[\w-]+) -->\s*\n```bash\n(?P<code>.*?)^```", re.S | re.M)
OVERRIDES = "QUICKSTART_OVERRIDES"  # JSON {deployment: {parameter: value}}, merged over the page's


def blocks(page: Path = PAGE) -> list[tuple[str, str]]:
    """The page's marked bash blocks, (name, code), in page order."""
    found = [(m["name"], m["code"]) for m in BLOCK.finditer(page.read_text(encoding="utf-8"))]
    if not found:
        raise ValueError(f"{page} has no block marked <!-- quickstart: NAME -->")
    return found


def script(steps: list[tuple[str, str]], times: Path) -> str:
    """One bash script running the blocks, writing `NAME START_EPOCH` before each (and `end`) to times."""
    mark = 'printf "%s %s\\n" {} "$EPOCHREALTIME" >> ' + str(times) + "\n"
    return "set -euo pipefail\n" + "".join(mark.format(name) + code for name, code in steps) + mark.format("end")


def merge(base: dict, over: dict) -> dict:
    """``over`` on ``base``, dicts merged key by key (a flow's config parameters keep the page's fields)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def run_page(workdir: Path, overrides: dict | None = None, page: Path = PAGE,
             timeout: float | None = None) -> dict[str, float]:
    """Run the page's blocks in ``workdir`` against a temporary Prefect server; each step's seconds.
    Raises RuntimeError with the output when a command fails."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    steps = blocks(page)
    shims = workdir / ".quickstart-bin"
    shims.mkdir(exist_ok=True)
    (shims / "prefect").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" prefect "$@"\n')
    (shims / "prefect").chmod(0o755)
    times = workdir / ".quickstart-times"
    times.unlink(missing_ok=True)
    (workdir / ".quickstart-first-step").unlink(missing_ok=True)
    with prefect_test_harness(server_startup_timeout=120):  # a busy machine starts it slowly
        env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), OVERRIDES: json.dumps(overrides or {}),
               FIRST_STEP_FILE: str(workdir / ".quickstart-first-step"),
               "PATH": os.pathsep.join([str(shims), str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        for key in ("PREFECT_API_AUTH_STRING", "PREFECT_PROFILES_PATH"):  # the harness's server has none
            env.pop(key, None)
        done = subprocess.run(["bash", "-c", script(steps, times)], cwd=workdir, env=env, capture_output=True,
                              text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the quickstart's commands failed (exit {done.returncode}):\n"
                           f"{done.stdout[-4000:]}\n{done.stderr[-8000:]}")
    marks = [line.split() for line in times.read_text().splitlines()]
    return {name: round(float(marks[i + 1][1]) - float(t), 1) for i, (name, t) in enumerate(marks[:-1])}


def first_step_lines(workdir: Path) -> dict[str, dict]:
    """For each block whose run logged a training step: the seconds from the block's start to its
    first step line, and that line's step (`log_every` steps in: the stages before step 1, and those)."""
    path = workdir / ".quickstart-first-step"
    if not path.is_file():
        return {}
    return {name: {"seconds": float(seconds), "step": line} for name, seconds, line in
            (row.split(" ", 2) for row in path.read_text().splitlines())}


def mark_first_step() -> None:
    """Write to $QUICKSTART_FIRST_STEP, when training's first step line is logged, the running block's
    name (the last mark in the times file), the seconds since that block started, and the line's step."""
    import logging
    import time

    where = os.environ.get(FIRST_STEP_FILE)
    if not where:
        return
    marks = Path(where).with_name(".quickstart-times")

    class FirstStep(logging.Handler):
        seen = False

        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if self.seen or not FIRST_STEP.match(message):
                return
            self.seen = True
            name, started = marks.read_text().splitlines()[-1].split()
            with open(where, "a", encoding="utf-8") as f:
                f.write(f"{name} {time.time() - float(started):.1f} {message.split()[1]}\n")

    handler = FirstStep()
    for name in ("prefect.task_runs", "prefect.flow_runs"):  # get_run_logger's, in a task and in a flow
        logging.getLogger(name).addHandler(handler)


def deployment_run(argv: list[str]) -> None:
    """`prefect deployment run FLOW/DEPLOYMENT [--watch] [--param k=v ...]`: the deployment's flow in
    this process, with prefect.yaml's parameters, the `--param`s (JSON, else text, as prefect reads
    them) and the overrides of $QUICKSTART_OVERRIDES."""
    import yaml
    from prefect.flows import load_flow_from_entrypoint

    parser = argparse.ArgumentParser(prog="prefect")
    parser.add_argument("deployment", choices=["deployment"])
    parser.add_argument("run", choices=["run"])
    parser.add_argument("name")
    parser.add_argument("--watch", action="store_true")
    parser.add_argument("--param", action="append", default=[])
    args = parser.parse_args(argv)
    params = {}
    for pair in args.param:
        key, _, raw = pair.partition("=")
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    for spec in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]:
        flow = load_flow_from_entrypoint(str(ROOT / spec["entrypoint"]))
        if f"{flow.name}/{spec['name']}" == args.name:
            break
    else:
        sys.exit(f"no deployment {args.name} in prefect.yaml")
    over = json.loads(os.environ.get(OVERRIDES) or "{}").get(args.name, {})
    mark_first_step()
    flow(**merge({**(spec.get("parameters") or {}), **params}, over))


def first_run(workdir: Path, log: Path) -> tuple[Path, dict[str, float]]:
    """Clone this checkout's HEAD into ``workdir`` and run `bash scripts/run.sh` there as a new user
    would; the seconds of its phases, read from run.sh's own lines as they appear."""
    import socket
    import time

    clone = workdir / "pearl-pipeline"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "PEARL_", "VIRTUAL_ENV", "PYTHONPATH"))}
    with socket.socket() as s:  # a port of its own: a server on 4200 may be someone's
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env.update(PEARL_PREFECT_PORT=str(port), PIP_NO_CACHE_DIR="1", npm_config_cache=str(workdir / "npm-cache"),
               PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p))
    phases = [("set-up", "[run] deploying"), ("deploy", "[run] running build-corpus/wiki"), ("build-corpus", None)]
    times, t0 = {}, time.monotonic()
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, env=env)
    times["clone"] = round(time.monotonic() - t0, 1)
    t0, phase = time.monotonic(), 0
    try:
        with open(log, "w") as out:
            proc = subprocess.Popen(["bash", "scripts/run.sh"], cwd=clone, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
            for line in proc.stdout:
                out.write(line)
                if phases[phase][1] and line.startswith(phases[phase][1]):
                    times[phases[phase][0]] = round(time.monotonic() - t0, 1)
                    t0, phase = time.monotonic(), phase + 1
            if proc.wait() != 0:
                raise RuntimeError(f"bash scripts/run.sh failed (exit {proc.returncode}); its output: {log}")
        times[phases[phase][0]] = round(time.monotonic() - t0, 1)
    finally:
        subprocess.run(["bash", "scripts/services.sh", "stop"], cwd=clone, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return clone / "data", times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data", help="the built corpus (copied, never written)")
    parser.add_argument("--from-clone", action="store_true",
                        help="start from a git clone and `bash scripts/run.sh` (timed), not from --data")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from stage_rates import machine

    first = {}
    with tempfile.TemporaryDirectory(prefix="quickstart-") as d:
        work = Path(d)
        started = dt.datetime.now(dt.timezone.utc)
        if args.from_clone:
            args.data, first = first_run(work, Path(tempfile.gettempdir()) / "quickstart-first-run.log")
            print(json.dumps(first))
        shutil.copytree(args.data, work / "data", ignore=shutil.ignore_patterns("models", "matches", "registry"))
        (work / "examples").symlink_to(ROOT / "examples")
        steps = run_page(work)
        first_steps = first_step_lines(work)
    result = {"what": "docs/quickstart.md's commands as written, each step's wall time (s)",
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "date": started.isoformat(timespec="seconds"),
              "machine": machine(), "steps": steps, "total_s": round(sum(steps.values()), 1),
              # what `--watch` shows: the seconds until training's first step line (step log_every of max_steps)
              "first_step_line": first_steps,
              **({"first_run": first, "first_run_s": round(sum(first.values()), 1),
                  "clone_to_tables_s": round(sum(first.values()) + sum(steps.values()), 1)} if first else {}),
              "how": "one bash in a scratch directory with a copy of the sample corpus; `prefect deployment run` "
                     "runs the flow in its own process against a temporary Prefect server"
                     + ("; first_run: a git clone and `bash scripts/run.sh` in it, pip's and npm's caches empty, "
                        "its services on a port of their own" if first else "")}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(steps))


if __name__ == "__main__":
    if sys.argv[1:2] == ["prefect"]:
        sys.path.insert(0, str(ROOT))
        deployment_run(sys.argv[2:])
    else:
        main()
