#!/usr/bin/env bash
# The documentation site (mkdocs.yml, docs/):
#   bash scripts/docs.sh build   # strict: a warning (a broken link or anchor, a missing results
#                                # file, a setting without a description) fails it; into site/
#   bash scripts/docs.sh serve   # live preview on http://127.0.0.1:8000
# Further arguments go to mkdocs (e.g. `build -d /tmp/site`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

bash scripts/setup.sh </dev/null
export NO_MKDOCS_2_WARNING=1  # Material's banner about its successor, printed on every build

cmd="${1:-build}"
[ $# -gt 0 ] && shift
case "$cmd" in
    build) exec .venv/bin/mkdocs build --strict "$@" ;;
    serve) exec .venv/bin/mkdocs serve --dev-addr 127.0.0.1:8000 "$@" ;;
    *) echo "usage: bash scripts/docs.sh build|serve [mkdocs options]" >&2; exit 2 ;;
esac
