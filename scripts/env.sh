# Sourced by the other scripts (and by you: `source scripts/env.sh`) to point `prefect`
# at this checkout's local server and use this checkout's virtual environment.
#
# Everything Prefect keeps (SQLite database, profiles, local results) lives under
# $PEARL_PROJECT_DIR/.prefect, so nothing in ~/.prefect is read or changed.
# Override the port with PEARL_PREFECT_PORT (default 4200).

_pearl_env_src="${BASH_SOURCE[0]:-$0}"
PEARL_PROJECT_DIR="$(cd "$(dirname "$_pearl_env_src")/.." && pwd -P)"
unset _pearl_env_src
export PEARL_PROJECT_DIR
# prefect.yaml's pull step reads this: `directory: "{{ $PEARL_PROJECT_DIR }}"`, in each flow run
# that a worker started from here runs (scripts/deploy.sh leaves it out of the deploy, so that
# the placeholder is stored as it is and every worker resolves it to its own checkout).

export PEARL_PREFECT_PORT="${PEARL_PREFECT_PORT:-4200}"
export PEARL_RUN_DIR="$PEARL_PROJECT_DIR/run"          # pid files and logs of the services
export PEARL_WORK_POOL="${PEARL_WORK_POOL:-local-process}"
# The training step of the scheduled retrain runs on this pool (prefect.yaml: train/pearl-gpu).
export PEARL_GPU_POOL="${PEARL_GPU_POOL:-gpu}"
# 1: services.sh starts a local worker on the GPU pool too; 0: a GPU machine runs it.
export PEARL_GPU_WORKER="${PEARL_GPU_WORKER:-1}"
# on: `prefect deploy` turns retrain/weekly's Monday schedule on (prefect.yaml reads it);
# off by default, so that a developer's machine does not train every week.
export PEARL_SCHEDULE="${PEARL_SCHEDULE:-off}"

export PREFECT_HOME="$PEARL_PROJECT_DIR/.prefect"
export PREFECT_PROFILES_PATH="$PREFECT_HOME/profiles.toml"
export PREFECT_API_URL="http://127.0.0.1:${PEARL_PREFECT_PORT}/api"
export PREFECT_SERVER_API_HOST=127.0.0.1
export PREFECT_SERVER_API_PORT="$PEARL_PREFECT_PORT"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_CLI_PROMPT=false
# `prefect deployment run --watch` prints a run's logs (the stage lines and summaries of
# runs/progress.py) only from a server that streams them: off by default
export PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED=true
export PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED=true
# A local server takes no API key (it takes the auth string below); a key left in the
# caller's environment would be sent to it.
unset PREFECT_API_KEY
export PYTHONUNBUFFERED=1
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ -f "$PEARL_PROJECT_DIR/.venv/bin/activate" ]; then
    # shellcheck disable=SC1091
    . "$PEARL_PROJECT_DIR/.venv/bin/activate"
fi

# The API is closed to other local users and to web pages: the server requires Prefect's
# basic-auth string, which the workers, their flow runs, the CLI and the scripts send (the UI
# asks for it on its login page). It is made once per checkout in .prefect/auth-string
# (git-ignored, readable by its owner only), published without overwriting so that two
# first sources at once agree on one string. CSRF protection is on, and only the UI's own
# origin may make cross-origin requests.
PEARL_AUTH_FILE="$PREFECT_HOME/auth-string"
export PEARL_AUTH_FILE
if [ ! -s "$PEARL_AUTH_FILE" ]; then
    (
        umask 077
        mkdir -p "$PREFECT_HOME"
        tmp="$PEARL_AUTH_FILE.tmp-$$"
        token="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')" && [ -n "$token" ] \
            && printf 'pearl:%s\n' "$token" >"$tmp" \
            && { ln "$tmp" "$PEARL_AUTH_FILE" 2>/dev/null || mv -n "$tmp" "$PEARL_AUTH_FILE"; }
        rm -f "$tmp"
    )
fi
if [ -s "$PEARL_AUTH_FILE" ]; then
    PREFECT_API_AUTH_STRING="$(cat "$PEARL_AUTH_FILE")"
    export PREFECT_API_AUTH_STRING PREFECT_SERVER_API_AUTH_STRING="$PREFECT_API_AUTH_STRING"
else
    echo "[env] could not create $PEARL_AUTH_FILE: the Prefect API would be unprotected" >&2
    unset PREFECT_API_AUTH_STRING PREFECT_SERVER_API_AUTH_STRING
fi
export PREFECT_SERVER_CSRF_PROTECTION_ENABLED=true
export PREFECT_SERVER_CORS_ALLOWED_ORIGINS="http://127.0.0.1:${PEARL_PREFECT_PORT},http://localhost:${PEARL_PREFECT_PORT}"
