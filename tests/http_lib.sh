# http_lib.sh — helpers for the shell tests that run a real `attnd serve` on a loopback port.
# Source it; it sets traps so every server started here is killed when the test exits.
#
#   start_server NAME [serve flags...]   starts on a free port; sets NAME_PORT, NAME_PID, NAME_LOG
#   stop_server NAME                     SIGTERM, waits, returns the exit status
#   need_shared / need_node              skip the test (exit 0 with a message) when missing

ATTND_SHARED_DIR=${ATTND_SHARED_DIR:-$(dirname "$0")/../../shared}
MODELS=$ATTND_SHARED_DIR/models
TMP=$(mktemp -d /tmp/attnd-http-test.XXXXXX)
SERVER_PIDS=()

cleanup() {
    for p in "${SERVER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

need_shared() {
    if [ ! -f "$MODELS/stories260K.gguf" ]; then
        echo "SKIP: $MODELS/stories260K.gguf not found (shared fixtures absent)"
        exit 77
    fi
}

need_node() {
    if ! command -v node >/dev/null; then
        echo "SKIP: node is not installed"
        exit 77
    fi
}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# start_server NAME [flags...]
start_server() {
    local name=$1
    shift
    local log=$TMP/$name.log
    # sanitizer builds start slower; the loop waits up to 60 s
    "$ATTND_BINARY" serve --host 127.0.0.1 --port 0 "$@" 2>"$log" &
    local pid=$!
    SERVER_PIDS+=("$pid")
    local port=""
    for _ in $(seq 600); do
        port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
        if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
        if ! kill -0 "$pid" 2>/dev/null; then cat "$log" >&2; fail "server $name exited at start"; fi
        sleep 0.1
    done
    [ -n "$port" ] || { cat "$log" >&2; fail "server $name did not start"; }
    printf -v "${name}_PORT" '%s' "$port"
    printf -v "${name}_PID" '%s' "$pid"
    printf -v "${name}_LOG" '%s' "$log"
}

# stop_server NAME: SIGTERM and wait; echoes nothing, returns the server's exit status
stop_server() {
    local name=$1
    local pid_var=${name}_PID
    local pid=${!pid_var}
    kill -TERM "$pid" 2>/dev/null
    local rc=0
    wait "$pid" || rc=$?
    return $rc
}
