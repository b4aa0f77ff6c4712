#!/usr/bin/env bash
# The local Prefect server and process worker that `scripts/run.sh` uses.
#
#   bash scripts/services.sh start    # server on 127.0.0.1:$PEARL_PREFECT_PORT (4200), pools, workers
#   bash scripts/services.sh status   # what is running
#   bash scripts/services.sh stop     # stop both, with every process they started
#
# Two process work pools: $PEARL_WORK_POOL (local-process: the corpus, the evaluation, the
# retrain flow itself) and $PEARL_GPU_POOL (gpu: the training step of the scheduled retrain).
# On one machine a worker serves each; where a GPU machine runs the gpu pool's worker
# (`prefect worker start --pool gpu` there, with PREFECT_API_AUTH_STRING set to this
# checkout's .prefect/auth-string), set PEARL_GPU_WORKER=0 here.
#
# The API requires the auth string that scripts/env.sh makes and exports, with CSRF
# protection on and cross-origin requests from the UI's own origin only.
#
# Safe to call twice: `start` leaves a server that already answers and workers that are
# already running alone. Pids are in run/server.pid and run/worker*.pid, logs in run/*.log.
# Each service runs in its own session (process group); `stop` signals that group and
# every descendant (flow-run processes start in sessions of their own, and start Dask
# workers), by pid, with SIGTERM, and SIGKILLs what is left after PEARL_STOP_GRACE
# seconds (10; Prefect 3.8.8's worker often does not finish its own shutdown).
set -euo pipefail

# shellcheck source=scripts/env.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/env.sh"
cd "$PEARL_PROJECT_DIR"

if [ ! -x "$PEARL_PROJECT_DIR/.venv/bin/prefect" ]; then
    echo "[services] .venv is missing: run 'bash scripts/setup.sh' first" >&2
    exit 1
fi

SERVER_PID="$PEARL_RUN_DIR/server.pid"
WORKER_PID="$PEARL_RUN_DIR/worker.pid"
GPU_WORKER_PID="$PEARL_RUN_DIR/worker-gpu.pid"
SERVER_LOG="$PEARL_RUN_DIR/server.log"
START_TIMEOUT="${PEARL_SERVER_START_TIMEOUT:-180}"

log() { echo "[services] $*" >&2; }

healthy() {
    python - "$PREFECT_API_URL" <<'PY' >/dev/null 2>&1
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1].rstrip("/") + "/health", timeout=3) as r:
    sys.exit(0 if r.status == 200 else 1)
PY
}

# True when the server refuses a request without the auth string (scripts/env.sh): one
# started before the API was protected, or by hand without it, answers it.
protected() {
    python - "$PREFECT_API_URL" <<'PY' >/dev/null 2>&1
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/admin/version", timeout=3)
except urllib.error.HTTPError as e:
    sys.exit(0 if e.code == 401 else 1)
sys.exit(1)
PY
}

# The pid in a pid file, if that process is alive and is a prefect process (not a reused pid).
live_pid() {
    local file="$1" pid
    [ -f "$file" ] || return 1
    pid="$(cat "$file" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q prefect || return 1
    echo "$pid"
}

# Start "$@" in a new session, detached from this shell; print its pid.
spawn() {
    local logfile="$1"; shift
    if command -v setsid >/dev/null 2>&1; then
        # Not a process-group leader here (no job control), so setsid execs in place:
        # $! is the service's own pid, and its process group id.
        nohup setsid "$@" >>"$logfile" 2>&1 </dev/null &
    else
        nohup python -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' "$@" \
            >>"$logfile" 2>&1 </dev/null &
    fi
    echo $!
}

# Stop processes by pid: their process groups and all their descendants; TERM, then KILL.
kill_tree() {
    python - "$@" <<'PY'
import os, signal, sys
import psutil

roots = []
for arg in sys.argv[1:]:
    try:
        roots.append(psutil.Process(int(arg)))
    except (psutil.NoSuchProcess, ValueError):
        pass
procs = {}
for root in roots:
    procs[root.pid] = root
    try:
        for child in root.children(recursive=True):
            procs[child.pid] = child
    except psutil.NoSuchProcess:
        pass
me = os.getpgrp()
def signal_all(sig):
    for root in roots:
        try:
            if os.getpgid(root.pid) == root.pid and root.pid != me:
                os.killpg(root.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for p in list(procs.values()):
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
signal_all(signal.SIGTERM)
gone, alive = psutil.wait_procs(list(procs.values()), timeout=float(os.environ.get("PEARL_STOP_GRACE", "10")))
if alive:
    print(f"[services] {len(alive)} process(es) ignored SIGTERM: killing", file=sys.stderr)
    signal_all(signal.SIGKILL)
    gone, alive = psutil.wait_procs(alive, timeout=10)
sys.exit(1 if alive else 0)
PY
}

wait_healthy() {
    local pid="$1" deadline=$((SECONDS + START_TIMEOUT))
    until healthy; do
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            log "the server exited while starting; end of $SERVER_LOG:"
            tail -n 40 "$SERVER_LOG" >&2 || true
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "the server did not answer $PREFECT_API_URL/health within ${START_TIMEOUT}s; end of $SERVER_LOG:"
            tail -n 40 "$SERVER_LOG" >&2 || true
            return 1
        fi
        sleep 1
    done
}

start_server() {
    local pid
    if healthy; then
        if pid="$(live_pid "$SERVER_PID")"; then
            log "server already running (pid $pid) at ${PREFECT_API_URL%/api}"
        else
            log "a server already answers at ${PREFECT_API_URL%/api} (not started by this script): using it"
        fi
        protected || log "WARNING: the server at ${PREFECT_API_URL%/api} answers without the auth string:" \
            "restart it (bash scripts/services.sh restart) so that its API is protected"
        return 0
    fi
    if pid="$(live_pid "$SERVER_PID")"; then
        log "server (pid $pid) is starting: waiting for it"
    else
        log "starting prefect server on 127.0.0.1:$PEARL_PREFECT_PORT (log: $SERVER_LOG)"
        echo "--- $(date -u +%FT%TZ) start" >>"$SERVER_LOG"
        pid="$(spawn "$SERVER_LOG" prefect server start --host 127.0.0.1 --port "$PEARL_PREFECT_PORT")"
        echo "$pid" >"$SERVER_PID"
    fi
    wait_healthy "$pid"
    log "server is up: UI at ${PREFECT_API_URL%/api}"
}

# The process work pools of both workers, and the training limit, created when missing: the
# same code as `bash scripts/deploy.sh` (flows/deploy.py), which also creates prefect.yaml's pools.
ensure_pools() {
    python -m flows.deploy --setup-only --pool "$PEARL_WORK_POOL" --pool "$PEARL_GPU_POOL"
}

# True once worker $2 of pool $1 has sent a heartbeat since $3 (epoch seconds).
worker_online() {
    python - "$1" "$2" "$3" <<'PY' >/dev/null 2>&1
import asyncio, sys
from prefect.client.orchestration import get_client

async def main():
    pool, name, since = sys.argv[1], sys.argv[2], float(sys.argv[3])
    async with get_client() as client:
        workers = await client.read_workers_for_work_pool(pool)
    return any(w.name == name and w.last_heartbeat_time and w.last_heartbeat_time.timestamp() >= since - 5
               for w in workers)

sys.exit(0 if asyncio.run(main()) else 1)
PY
}

# start_worker POOL PIDFILE: a process worker on POOL (log run/worker-POOL.log).
start_worker() {
    local pool="$1" pidfile="$2" pid since deadline
    local name="pearl-$pool-$PEARL_PREFECT_PORT" logfile="$PEARL_RUN_DIR/worker-$pool.log"
    if pid="$(live_pid "$pidfile")"; then
        log "worker already running (pid $pid) on pool $pool"
        return 0
    fi
    log "starting process worker $name on pool $pool (log: $logfile)"
    since="$(date +%s)"
    echo "--- $(date -u +%FT%TZ) start" >>"$logfile"
    pid="$(spawn "$logfile" prefect worker start --pool "$pool" --type process --name "$name")"
    echo "$pid" >"$pidfile"
    deadline=$((SECONDS + 90))
    until worker_online "$pool" "$name" "$since"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "the worker exited while starting; end of $logfile:"
            tail -n 40 "$logfile" >&2 || true
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "the worker sent no heartbeat within 90s; end of $logfile:"
            tail -n 40 "$logfile" >&2 || true
            return 1
        fi
        sleep 1
    done
    log "worker is up (pid $pid)"
}

stop_one() {
    local what="$1" file="$2" pid
    if pid="$(live_pid "$file")"; then
        log "stopping $what (pid $pid)"
        kill_tree "$pid" || log "some processes of the $what could not be stopped"
    else
        log "$what is not running"
    fi
    rm -f "$file"
}

status() {
    local rc=0 pid
    if pid="$(live_pid "$SERVER_PID")"; then
        echo "server: running (pid $pid), log $SERVER_LOG"
    else
        echo "server: not started by this script"
    fi
    if healthy; then
        echo "api:    answering at $PREFECT_API_URL (UI ${PREFECT_API_URL%/api})"
        protected || { echo "api:    answers without the auth string: restart the server"; rc=1; }
    else
        echo "api:    not answering at $PREFECT_API_URL"; rc=1
    fi
    if pid="$(live_pid "$WORKER_PID")"; then
        echo "worker: running (pid $pid) on pool $PEARL_WORK_POOL, log $PEARL_RUN_DIR/worker-$PEARL_WORK_POOL.log"
    else
        echo "worker: not running"; rc=1
    fi
    if pid="$(live_pid "$GPU_WORKER_PID")"; then
        echo "worker: running (pid $pid) on pool $PEARL_GPU_POOL, log $PEARL_RUN_DIR/worker-$PEARL_GPU_POOL.log"
    elif [ "$PEARL_GPU_WORKER" = 1 ]; then
        echo "worker: not running on pool $PEARL_GPU_POOL"; rc=1
    else
        echo "worker: none started here on pool $PEARL_GPU_POOL (PEARL_GPU_WORKER=0: another machine serves it)"
    fi
    return "$rc"
}

mkdir -p "$PEARL_RUN_DIR" "$PREFECT_HOME"
case "${1:-status}" in
    start)
        if [ -z "${PREFECT_SERVER_API_AUTH_STRING:-}" ]; then
            log "no auth string ($PEARL_AUTH_FILE): refusing to start an unprotected server"
            exit 1
        fi
        start_server
        ensure_pools
        start_worker "$PEARL_WORK_POOL" "$WORKER_PID"
        if [ "$PEARL_GPU_WORKER" = 1 ]; then
            start_worker "$PEARL_GPU_POOL" "$GPU_WORKER_PID"
        fi
        ;;
    stop)
        # Workers first, so that they do not see the server vanish under a running flow.
        stop_one "worker ($PEARL_GPU_POOL)" "$GPU_WORKER_PID"
        stop_one worker "$WORKER_PID"
        stop_one server "$SERVER_PID"
        ;;
    status)
        status
        ;;
    restart)
        bash "$PEARL_PROJECT_DIR/scripts/services.sh" stop
        exec bash "$PEARL_PROJECT_DIR/scripts/services.sh" start
        ;;
    *)
        echo "usage: $0 start|stop|status|restart" >&2
        exit 2
        ;;
esac
