#!/usr/bin/env bash
# Deploy prefect.yaml to a Prefect server: the one way to deploy (scripts/run.sh uses it).
#
#   bash scripts/deploy.sh                       # this checkout's local server (scripts/env.sh)
#   PREFECT_API_URL=http://<server>:4200/api PREFECT_API_AUTH_STRING='<its auth string>' \
#       bash scripts/deploy.sh                   # any other server
#   PEARL_SCHEDULE=on bash scripts/deploy.sh     # retrain/weekly's Monday schedule on (default off)
#
# With PREFECT_API_URL set, it deploys there with the PREFECT_API_AUTH_STRING given (none if
# unset); without it, to the local server that `bash scripts/services.sh start` runs.
# It creates the process work pools that prefect.yaml names and the concurrency limit the two
# train deployments share when they are missing, then runs `prefect --no-prompt deploy --all`
# (flows/deploy.py). The deployments' pull step keeps `{{ $PEARL_PROJECT_DIR }}` unresolved: each
# worker runs the code at its own PEARL_PROJECT_DIR (its checkout, or /app in the Docker image),
# so this checkout's path does not matter to workers elsewhere. Safe to run again; exits
# non-zero, with one line, when the server cannot be reached or refuses the auth string.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

if [ -z "${PREFECT_API_URL:-}" ]; then
    # shellcheck source=scripts/env.sh
    . scripts/env.sh
elif [ -f .venv/bin/activate ]; then
    # shellcheck disable=SC1091
    . .venv/bin/activate
fi
exec python -m flows.deploy "$@"
