#!/usr/bin/env bash
# The one command: set up, start the local Prefect server + worker (if not running),
# deploy prefect.yaml (scripts/deploy.sh), run build-corpus/wiki and watch it to the end.
#
#   bash scripts/run.sh                          # the whole sample dump into data/
#   bash scripts/run.sh --param 'read={"max_pages": 50}'   # extra arguments go to `prefect deployment run`
#   PEARL_SCHEDULE=on bash scripts/run.sh        # deploy retrain/weekly's schedule on (default off)
#
# Exits non-zero if the flow run does not complete. The server and worker keep running
# afterwards (UI at http://127.0.0.1:4200); `bash scripts/services.sh stop` stops them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

bash scripts/setup.sh
# shellcheck source=scripts/env.sh
. scripts/env.sh
bash scripts/services.sh start

echo "[run] deploying prefect.yaml" >&2
bash scripts/deploy.sh
# prefect.yaml gives the schedule PEARL_SCHEDULE (scripts/env.sh: off unless set).
echo "[run] retrain/weekly's schedule (Mondays 03:00 UTC) is $PEARL_SCHEDULE;" \
    "PEARL_SCHEDULE=on or off before this script sets it" >&2

echo "[run] running build-corpus/wiki" >&2
exec prefect deployment run build-corpus/wiki --watch "$@"
