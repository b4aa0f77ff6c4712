#!/usr/bin/env bash
# The test command (what CI runs): set up, then pytest from the repo root.
# Arguments go to pytest, e.g. `bash scripts/test.sh tests/test_e2e.py -x -q`
# or `bash scripts/test.sh -m "not e2e"` for the unit tests alone, `-n 0` in one process.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

bash scripts/setup.sh </dev/null
# shellcheck source=scripts/env.sh
. scripts/env.sh
# Tests start their own servers on free ports with temporary homes; never the dev
# server on $PEARL_PREFECT_PORT, whose address and auth string env.sh just exported.
unset PREFECT_API_URL PREFECT_API_AUTH_STRING PREFECT_SERVER_API_AUTH_STRING
export PREFECT_HOME="$ROOT/.prefect/test"
export PREFECT_PROFILES_PATH="$PREFECT_HOME/profiles.toml"
# Two test processes, one per core of a CI machine (pytest-xdist; tests/conftest.py groups each
# module's tests, and the e2e tests sharing one stack, on one process). `-n 0` as an argument runs
# them in this process alone.
exec python -m pytest -n "${PEARL_TEST_PROCESSES:-2}" --dist loadfile --no-loadscope-reorder "$@"
