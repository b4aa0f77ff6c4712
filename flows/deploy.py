"""Deploy prefect.yaml to the Prefect server at PREFECT_API_URL: `scripts/deploy.sh` runs this.

    python -m flows.deploy                     # pools, the training limit, then `prefect deploy --all`
    python -m flows.deploy --setup-only --pool local-process --pool gpu    # what services.sh runs

1. Checks the server: an unreachable PREFECT_API_URL, or an auth string it refuses, is one line
   on stderr and exit code 1.
2. Creates, when missing, a process work pool for each pool prefect.yaml's deployments name
   (and each --pool), and the global concurrency limit the two train deployments share
   (flows.training_limit).
3. Runs `prefect --no-prompt deploy --all` from the directory that holds prefect.yaml, with
   PEARL_SCHEDULE `off` unless it is set, and without PEARL_PROJECT_DIR: Prefect then stores
   the pull step's `{{ $PEARL_PROJECT_DIR }}` unresolved, and each worker's flow run resolves
   it from its own environment (scripts/env.sh: the checkout's path; the Docker image: /app).
   A worker on another machine needs the code there, not at the path it was deployed from.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from flows.training_limit import TRAINING_LIMIT, ensure_training_limit

PROJECT = Path(__file__).resolve().parents[1]


class SetupError(Exception):
    """What went wrong, in one line."""


def deployment_pools(prefect_yaml: Path = PROJECT / "prefect.yaml") -> list[str]:
    """The work pools prefect.yaml's deployments name, in order of first use."""
    import yaml

    pools: list[str] = []
    for deployment in yaml.safe_load(prefect_yaml.read_text())["deployments"]:
        name = (deployment.get("work_pool") or {}).get("name")
        if name and name not in pools:
            pools.append(name)
    return pools


def check_api(client, url: str) -> None:
    """Raise SetupError unless the server answers and accepts our auth string."""
    import httpx

    problem = client.api_healthcheck()
    if problem is not None:
        reason = str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
        raise SetupError(f"cannot reach the Prefect API at {url}: {reason}")
    try:
        client.read_work_pools(limit=1)
    except httpx.HTTPStatusError as e:
        code = e.response.status_code
        if code == 401:
            from prefect.settings import PREFECT_API_AUTH_STRING

            given = "a PREFECT_API_AUTH_STRING it does not accept" if PREFECT_API_AUTH_STRING.value() \
                else "no PREFECT_API_AUTH_STRING"
            raise SetupError(f"the Prefect API at {url} refused the request (401 Unauthorized): this client sent "
                             f"{given}; set it to the server's auth string") from None
        raise SetupError(f"the Prefect API at {url} answered {code} {e.response.reason_phrase}") from None
    except httpx.HTTPError as e:
        raise SetupError(f"cannot reach the Prefect API at {url}: {e}") from None


def ensure_process_pool(client, name: str) -> bool:
    """Create process work pool `name` unless it exists (as `prefect work-pool create --type process`
    does, with the process worker's default job template); True when this call created it."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
    from prefect.workers.process import ProcessWorker

    try:
        client.read_work_pool(name)
        return False
    except ObjectNotFound:
        pass
    try:
        client.create_work_pool(WorkPoolCreate(name=name, type="process",
                                               base_job_template=ProcessWorker.get_default_base_job_template()))
    except ObjectAlreadyExists:  # created meanwhile (a worker starting on it)
        return False
    return True


def set_up_server(pools: list[str]) -> None:
    """Check the server at PREFECT_API_URL; create the missing pools and the training limit."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise SetupError("PREFECT_API_URL is not set: point it at the Prefect server "
                         "(http://<server>:4200/api), or `source scripts/env.sh` for this checkout's local one")
    with get_client(sync_client=True) as client:
        check_api(client, url)
        for pool in pools:
            if ensure_process_pool(client, pool):
                log(f"created process work pool {pool}")
        if ensure_training_limit(client):
            log(f"created global concurrency limit {TRAINING_LIMIT} (one training at a time)")


def deploy_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `prefect deploy` runs in: the caller's, with PEARL_SCHEDULE defaulting to
    off (checked here, not by Prefect after four deployments) and PEARL_PROJECT_DIR removed."""
    from pydantic import TypeAdapter, ValidationError

    env = dict(os.environ if environ is None else environ)
    env.setdefault("PEARL_SCHEDULE", "off")
    try:
        TypeAdapter(bool).validate_python(env["PEARL_SCHEDULE"])
    except ValidationError:
        raise SetupError(f"PEARL_SCHEDULE={env['PEARL_SCHEDULE']!r}: use on or off") from None
    # Unset, `{{ $PEARL_PROJECT_DIR }}` stays in the stored pull step for each worker to resolve.
    env.pop("PEARL_PROJECT_DIR", None)
    return env


def log(message: str) -> None:
    print(f"[deploy] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", action="append", default=[],
                        help="another process work pool to create if missing (repeatable)")
    parser.add_argument("--setup-only", action="store_true",
                        help="create the pools and the limit, without deploying")
    args = parser.parse_args(argv)
    try:
        env = None if args.setup_only else deploy_environment()
        pools = list(dict.fromkeys([*([] if args.setup_only else deployment_pools()), *args.pool]))
        set_up_server(pools)
    except SetupError as e:
        print(f"[deploy] error: {e}", file=sys.stderr)
        return 1
    if args.setup_only:
        return 0
    log(f"deploying {PROJECT / 'prefect.yaml'} (retrain/weekly's schedule {env['PEARL_SCHEDULE']})")
    return subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"],
                          cwd=PROJECT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
