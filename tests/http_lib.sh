# http_lib.sh — helpers for the shell tests that run a real `attnd serve` on a loopback port.
# Source it; it sets traps so every server started here is killed when the test exits.
#
#   start_server NAME [serve flags...]   starts on a free port; sets NAME_PORT, NAME_PID, NAME_LOG
#   stop_server NAME                     SIGTERM, waits, returns the exit status
#   need_node                            fail the test when node is missing (scripts/dev.sh test installs it)
#   npm_packages DIR PKG...              install PKG... once into the build directory's DIR (one per
#                                        test: parallel tests never share one; PKG may be name@range);
#                                        sets NPM_DIR, prints versions
#   ok/bad/check DESCRIPTION [COMMAND...] TAP lines; bad (or a failing check) sets status=1
#   http_status CURL_ARGS...             the HTTP status of one request, body discarded
#   check_status WANT DESCRIPTION CURL_ARGS...  check that one request is answered WANT
#   $MODEL                               the default model, models/attnd-sotu.gguf (what users serve)

ATTND_SOURCE_DIR=${ATTND_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
ATTND_DATA_DIR=${ATTND_DATA_DIR:-$ATTND_SOURCE_DIR/tests/data}
MODEL=$ATTND_SOURCE_DIR/models/attnd-sotu.gguf
TMP=$(mktemp -d /tmp/attnd-http-test.XXXXXX)
SERVER_PIDS=()

cleanup() {
    for p in "${SERVER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

need_node() {
    if ! command -v node >/dev/null; then
        echo "FAIL: node is not installed (scripts/dev.sh test installs it)" >&2
        exit 1
    fi
}

npm_packages() {
    local name=$1 p missing=0 versions=()
    shift
    NPM_DIR=${ATTND_BUILD_DIR:-$(dirname "$ATTND_BINARY")}/$name
    # a package may carry a version range (ai@5, @langchain/openai@1): its folder is the name
    pkg_dir() { if [[ $1 == ?*@* ]]; then echo "${1%@*}"; else echo "$1"; fi; }
    for p in "$@"; do [ -f "$NPM_DIR/node_modules/$(pkg_dir "$p")/package.json" ] || missing=1; done
    if [ $missing = 1 ]; then
        mkdir -p "$NPM_DIR"
        [ -f "$NPM_DIR/package.json" ] || echo "{\"name\":\"attnd-test${name//./-}\",\"private\":true}" > "$NPM_DIR/package.json"
        if ! (cd "$NPM_DIR" && npm install --no-audit --no-fund --loglevel=error "$@" >/dev/null); then
            echo "FAIL: npm install $* failed (no registry access?)" >&2
            exit 1
        fi
    fi
    for p in "$@"; do
        versions+=("$(pkg_dir "$p") $(node -p "require('$NPM_DIR/node_modules/$(pkg_dir "$p")/package.json').version")")
    done
    local line
    printf -v line '%s, ' "${versions[@]}"
    echo "# ${line%, }"
}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# TAP-style results: ok/bad print a line, bad sets status=1 (the script starts with status=0
# and exits with $status); check DESCRIPTION COMMAND... is ok when the command succeeds.
ok() { echo "ok - $*"; }
bad() { echo "not ok - $*"; status=1; }
check() {
    local d=$1
    shift
    if "$@"; then ok "$d"; else bad "$d"; fi
}

# http_status CURL_ARGS...: the HTTP status of one request, its body thrown away.
http_status() {
    curl -s -o /dev/null -w '%{http_code}' "$@"
}

# check_status WANT DESCRIPTION CURL_ARGS...: check that one request is answered WANT.
check_status() {
    local want=$1 d=$2 code
    shift 2
    code=$(http_status "$@")
    check "$d ($code)" test "$code" = "$want"
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
