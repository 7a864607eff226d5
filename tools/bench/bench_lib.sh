# bench_lib.sh — sourced by the tools/bench scripts: one option parser for all of them, and the
# start of `attnd serve` for those that run a server themselves.
#
#   bench_options LINES VALUES FLAGS ARGS...
#                                 parses a script's options. Each word of VALUES names an option
#                                 that takes a value: `n` for --n (sets $n), `peer-dir` for
#                                 --peer-dir (sets $peer_dir), `peer-dir=peer` to set $peer
#                                 instead. Each word of FLAGS names one that takes no value and
#                                 sets its variable to 1. Anything else, or an option without its
#                                 value, prints lines LINES of the script (its usage header) and
#                                 exits 2. The variables must not be named opt_*.
#
#   bench_numpy_python            prints the first python3 that imports numpy (Debian's
#                                 /usr/bin/python3 first: a pyenv shim earlier on PATH may lack
#                                 numpy), or says that one is needed and fails:
#                                 py=$(bench_numpy_python) || exit 1
#
#   bench_serve LOG BIN ARGS...   runs `BIN serve ARGS...` in the background (stderr to LOG) and
#                                 waits up to 60 s for it to answer /health on the loopback port
#                                 it names; sets BENCH_PID and BENCH_PORT, or prints LOG, stops the
#                                 server and exits 1.
#                                 ARGS must include --port 0 (any free port).

bench_options() {
    local opt_lines=$1 opt_values=$2 opt_flags=$3 opt_var
    shift 3
    while [ $# -gt 0 ]; do
        if opt_var=$(bench_option_var "$1" "$opt_values") && [ $# -ge 2 ]; then
            printf -v "$opt_var" '%s' "$2"
            shift 2
        elif opt_var=$(bench_option_var "$1" "$opt_flags"); then
            printf -v "$opt_var" 1
            shift
        else
            sed -n "${opt_lines}p" "$0" >&2
            exit 2
        fi
    done
}

# bench_option_var OPT WORDS: prints the variable that WORDS (as bench_options reads them) give
# option OPT, or fails when OPT is not among them.
bench_option_var() {
    local word name
    for word in $2; do
        name=${word%%=*}
        [ "$1" = "--$name" ] || continue
        if [ "$word" = "$name" ]; then printf '%s\n' "${name//-/_}"; else printf '%s\n' "${word#*=}"; fi
        return 0
    done
    return 1
}

bench_numpy_python() {
    local p
    for p in /usr/bin/python3 python3; do
        if "$p" -c 'import numpy' 2>/dev/null; then printf '%s\n' "$p"; return 0; fi
    done
    echo "${0##*/}: needs python3 with numpy (apt-get install python3-numpy)" >&2
    return 1
}

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
