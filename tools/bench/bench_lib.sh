# bench_lib.sh — sourced by the tools/bench scripts that start `attnd serve` themselves.
#
#   bench_serve LOG BIN ARGS...   runs `BIN serve ARGS...` in the background (stderr to LOG) and
#                                 waits up to 60 s for it to answer /health on the loopback port
#                                 it names; sets BENCH_PID and BENCH_PORT, or prints LOG, stops the
#                                 server and exits 1.
#                                 ARGS must include --port 0 (any free port).

bench_serve() {
    local log=$1 bin=$2
    shift 2
    "$bin" serve "$@" 2>"$log" &
    BENCH_PID=$!
    BENCH_PORT=""
    for _ in $(seq 600); do
        BENCH_PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
        [ -n "$BENCH_PORT" ] && curl -sf "http://127.0.0.1:$BENCH_PORT/health" >/dev/null && return 0
        kill -0 "$BENCH_PID" 2>/dev/null || break # it exited (a bad model, a bad flag)
        sleep 0.1
    done
    cat "$log" >&2
    kill "$BENCH_PID" 2>/dev/null || true
    exit 1
}
