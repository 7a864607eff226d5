# test_http_api.sh — the HTTP API end to end: real `attnd serve` processes on loopback ports,
# driven by tests/js/http_api.mjs (node's fetch and sockets). Covers the OpenAI shapes,
# streaming, sessions (prefix reuse, 409, restart), every error class, auth/CORS, queue and
# KV limits, disconnects, slow partial requests and graceful SIGTERM.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
JS="node $here/js/http_api.mjs"
status=0
run() { # run GROUP PORT [STATE]
    echo "# group $1"
    $JS "$1" "http://127.0.0.1:$2" "${3:-}" || status=1
}

# ---- the main server: state directory, small body cap and request timeout ----------------
# (the idle-connection timeout is tested on the `slow` server; here it only has to outlast the
# first token of 16 concurrent streams, which takes seconds under the sanitizers)
start_server main --model "$MODEL" --state-dir "$TMP/state" --body-limit 65536 \
    --request-timeout-s 30 --max-parallel 16 --threads 1
for g in basics errors sessions concurrency; do run $g "$main_PORT"; done
ATTND_REF_MODEL=$MODEL run reference "$main_PORT" "$ATTND_DATA_DIR/reference-greedy.json"
run fuzz "$main_PORT"
run restart1 "$main_PORT" "$TMP/restart.json"
grep -q "POST /v1/completions 200 prompt=.* client=127.0.0.1$" "$main_LOG" || { echo "not ok - access log line"; status=1; }
grep -q 'POST /v1/completions 400 prompt=0 gen=0 .* client=127.0.0.1 error="' "$main_LOG" ||
    { echo "not ok - a refused request logs its reason and client"; status=1; }
grep -q "^<[0-7]>" "$main_LOG" && { echo "not ok - syslog prefixes when stderr is not the journal"; status=1; }
grep -q "threads, .* KV budget .* full contexts.*state dir" "$main_LOG" ||
    { echo "not ok - the start-up line names threads, instruction set, KV budget, state dir"; status=1; }

if stop_server main; then echo "ok - SIGTERM exits 0"; else echo "not ok - SIGTERM exit status"; status=1; fi
grep -q "stopped" "$main_LOG" || { echo "not ok - shutdown is logged"; status=1; }
ls "$TMP/state"/restarted.session.json >/dev/null || { echo "not ok - session file written"; status=1; }

# ---- disconnects and slow partial requests: a stream of the whole context (250 tokens, about
# 0.5 s with one thread) is still running when its client leaves -------------------------------
start_server slow --model "$MODEL" --request-timeout-s 2 --threads 1
run disconnects "$slow_PORT"
run session409 "$slow_PORT"
grep -q "client disconnected" "$slow_LOG" || { echo "not ok - a disconnect is logged"; status=1; }
n=$(grep -o "request cancelled after [0-9]* generated tokens" "$slow_LOG" | grep -o "[0-9]\+" | head -1)
if [ -n "$n" ] && [ "$n" -lt 240 ]; then echo "ok - the disconnected stream stopped after $n of up to 250 tokens"
else echo "not ok - the disconnected stream was not cut short (${n:-no log})"; status=1; fi
stop_server slow || { echo "not ok - SIGTERM (slow)"; status=1; }

# ---- restart on the same state directory ---------------------------------------------------
start_server again --model "$MODEL" --state-dir "$TMP/state" --threads 1
run restart2 "$again_PORT" "$TMP/restart.json"
run nocors "$again_PORT"
stop_server again || { echo "not ok - second SIGTERM"; status=1; }
# the same state directory under a q8_0 KV cache: the start-up line counts its real bytes
start_server kvq --model "$MODEL" --state-dir "$TMP/state" --threads 1 --kv-type q8_0
run restart_kvq "$kvq_PORT" "$TMP/restart.json"
grep -q "KV budget 1024 MiB (q8_0, 3264 bytes/token) = 642 full contexts of 512 tokens" "$kvq_LOG" ||
    { echo "not ok - the start-up line counts q8_0 KV bytes (642 contexts, f16: 341)"; status=1; }
stop_server kvq || { echo "not ok - SIGTERM (kvq)"; status=1; }

# ---- API key and CORS ------------------------------------------------------------------------
start_server secured --model "$MODEL" --api-key s3cret-key --cors-origins "http://app.example" --threads 1
run auth "$secured_PORT"
stop_server secured || status=1

# ---- one slot, one queue place: 429 --------------------------------------------------------
start_server tight --model "$MODEL" --max-parallel 1 --queue-limit 1 --max-sessions 1 --no-session-evict-lru --threads 1
run busy "$tight_PORT"
stop_server tight || status=1

# ---- a KV budget of one 128-token context (1 MiB = 170 tokens): over-long prompts 400, idle
# caches evicted --------------------------------------------------------------------------------
start_server small --model "$MODEL" --kv-budget-mb 1 --ctx-size 128 --threads 1
run kvfull "$small_PORT"
stop_server small || status=1

# ---- /health is 503 while the model loads: a FIFO as the model file holds model_load in
# open() until a writer appears, with the port already bound -----------------------------------
mkfifo "$TMP/loading.gguf"
"$ATTND_BINARY" serve --port 0 --model "$TMP/loading.gguf" 2>"$TMP/loading.log" &
lpid=$!
SERVER_PIDS+=("$lpid")
for _ in $(seq 300); do grep -q "listening on" "$TMP/loading.log" && break; sleep 0.1; done
lport=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$TMP/loading.log" | grep -o '[0-9]*$')
h=$(curl -s -o "$TMP/h.json" -w '%{http_code}' "http://127.0.0.1:$lport/health")
m=$(curl -s -o "$TMP/m.json" -w '%{http_code}' "http://127.0.0.1:$lport/v1/models")
if [ "$h" = 503 ] && [ "$m" = 503 ] && grep -q '"type":"unavailable_error"' "$TMP/h.json"; then echo "ok - /health and the API answer 503 while the model loads"
else echo "not ok - while loading: /health $h, /v1/models $m"; status=1; fi
exec 3>"$TMP/loading.gguf"; exec 3>&-   # let open() return: an empty "model" then fails to load
lrc=0
wait "$lpid" || lrc=$?
if [ $lrc -eq 1 ] && grep -q "cannot load" "$TMP/loading.log"; then echo "ok - a model that cannot load exits 1 with a message"
else echo "not ok - bad model: exit $lrc"; cat "$TMP/loading.log"; status=1; fi

# ---- a file that is not a model: refused before the port opens -----------------------------
brc=0
"$ATTND_BINARY" serve --port 0 --model "$ATTND_SOURCE_DIR/README.md" 2>"$TMP/bad.log" || brc=$?
if [ $brc -eq 1 ] && grep -q "cannot load .*README.md: .*not a GGUF file" "$TMP/bad.log" && ! grep -q "listening on" "$TMP/bad.log"
then echo "ok - a file that is not a model is refused before listening"
else echo "not ok - README.md as the model: exit $brc"; cat "$TMP/bad.log"; status=1; fi

# ---- SIGTERM with a stream in flight: it finishes, the server exits 0 -----------------------
start_server drain --model "$MODEL" --threads 1 --shutdown-timeout-s 5
t0=$(date +%s)
run drain "$drain_PORT" "$drain_PID"
rc=0
wait "$drain_PID" || rc=$?
t1=$(date +%s)
if [ $rc -eq 0 ] && [ $((t1 - t0)) -le 15 ]; then echo "ok - SIGTERM during a stream exits 0 in $((t1 - t0)) s"
else echo "not ok - SIGTERM during a stream: exit $rc after $((t1 - t0)) s"; cat "$drain_LOG"; status=1; fi

[ $status -eq 0 ] && echo "all HTTP API checks passed"
exit $status
