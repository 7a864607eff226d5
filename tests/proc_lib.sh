# proc_lib.sh — for shell tests that start their own processes (nginx, a notify listener...).
# Source it: it creates the temporary directory $T and the array PIDS; when the test exits, every
# PID in PIDS gets SIGTERM (graceful), then SIGKILL if still there after 5 s, and $T is removed.

T=$(mktemp -d)
PIDS=()
cleanup() {
    local p i
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do
        for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$T"
}
trap cleanup EXIT
