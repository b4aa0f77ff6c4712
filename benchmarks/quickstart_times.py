"""Run docs/quickstart.md's commands as written and time each step into
benchmarks/results/quickstart_times_cpu.json (the page renders the times from it).

    flock /work/helpers/cpu.lock python benchmarks/quickstart_times.py [--data data]

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
    with prefect_test_harness(server_startup_timeout=120):  # a busy machine starts it slowly
        env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), OVERRIDES: json.dumps(overrides or {}),
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
    flow(**merge({**(spec.get("parameters") or {}), **params}, over))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data", help="the built corpus (copied, never written)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from stage_rates import machine

    with tempfile.TemporaryDirectory(prefix="quickstart-") as d:
        work = Path(d)
        shutil.copytree(args.data, work / "data", ignore=shutil.ignore_patterns("models", "matches", "registry"))
        (work / "examples").symlink_to(ROOT / "examples")
        started = dt.datetime.now(dt.timezone.utc)
        steps = run_page(work)
    result = {"what": "docs/quickstart.md's commands as written, each step's wall time (s)",
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "date": started.isoformat(timespec="seconds"),
              "machine": machine(), "steps": steps, "total_s": round(sum(steps.values()), 1),
              "how": "one bash in a scratch directory with a copy of the sample corpus; `prefect deployment run` "
                     "runs the flow in its own process against a temporary Prefect server"}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(steps))


if __name__ == "__main__":
    if sys.argv[1:2] == ["prefect"]:
        sys.path.insert(0, str(ROOT))
        deployment_run(sys.argv[2:])
    else:
        main()
