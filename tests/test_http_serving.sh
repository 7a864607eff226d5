# test_http_serving.sh — serving mechanisms end to end on models/attnd-sotu.gguf (in the
# repository, so no ../shared needed), with curl only: KV admission (8 of 8 requests succeed on a
# budget that holds one at a time; a budget below one context refused at start-up), durable
# session turns (kill -9 right after each 200, then restart), stale temporary files removed,
# SSE keep-alive comments while a stream waits, streams cut by shutdown ending with a
# finish_reason and [DONE], non-streamed ones with a 503, session TTL and LRU eviction.
# Checks mechanisms, never timings.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
: "${ATTND_BINARY:?}" "${ATTND_SOURCE_DIR:?}"
MODEL=$ATTND_SOURCE_DIR/models/attnd-sotu.gguf
[ -f "$MODEL" ] || fail "$MODEL missing"
status=0
# a request that runs its whole max_tokens: both end-of-generation tokens banned, </s> (id 2)
# and the chat turn's end <|im_end|> (id 4097), which plain completions sample now and then
LONG='"logit_bias":{"2":-100,"4097":-100}'
post() { curl -s -m 120 "http://127.0.0.1:$1$2" -H 'Content-Type: application/json' -d "$3"; }
code() { curl -s -m 120 -o "$4" -w '%{http_code}' "http://127.0.0.1:$1$2" -H 'Content-Type: application/json' -d "$3"; }

# ---- a KV budget below one full context is refused at start-up, saying what would fit --------
out=$("$ATTND_BINARY" serve --model "$MODEL" --port 0 --kv-budget-mb 1 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -q "cannot hold one full context" <<<"$out" && grep -q "kv_budget_mb >= [0-9]" <<<"$out"; then
    ok "a budget below one context is a start-up error naming the budget that fits"
else bad "tiny KV budget at start-up (rc $rc): $out"; fi

# ---- 3 MiB holds one 512-token context: 8 concurrent requests take turns, none fails --------
start_server kv --model "$MODEL" --kv-budget-mb 3 --max-parallel 8 --threads 1
for i in $(seq 8); do
    code "$kv_PORT" /v1/completions "{\"prompt\":\"The nation $i\",\"max_tokens\":200,$LONG}" "$TMP/kv$i.json" \
        >"$TMP/kv$i.code" &
done
wait_jobs() { for p in $(jobs -p); do [[ " ${SERVER_PIDS[*]} " == *" $p "* ]] || wait "$p"; done; }
wait_jobs
n=0
for i in $(seq 8); do
    [ "$(cat "$TMP/kv$i.code")" = 200 ] && grep -q '"completion_tokens":200' "$TMP/kv$i.json" && n=$((n + 1))
done
if [ $n -eq 8 ]; then ok "8 of 8 concurrent requests succeed on a KV budget that holds one"; else
    bad "only $n of 8 requests succeeded: $(cat "$TMP"/kv*.code)"
    for i in $(seq 8); do grep -q '"completion_tokens":200' "$TMP/kv$i.json" || echo "# request $i: $(head -c 800 "$TMP/kv$i.json")"; done
fi
c=$(code "$kv_PORT" /v1/completions "{\"prompt\":[$(seq -s, 5 600)],\"max_tokens\":4}" "$TMP/long.json")
[ "$c" = 400 ] && grep -q "context length is 512" "$TMP/long.json" && ok "a request that can never fit is a 400 naming the limit" ||
    bad "over-long request: $c $(cat "$TMP/long.json")"
stop_server kv || bad "SIGTERM (kv)"

# ---- durable acknowledgements: kill -9 right after each 200, restart, the turn is on disk ----
state=$TMP/state
start_server d0 --model "$MODEL" --state-dir "$state" --threads 1
post "$d0_PORT" /v1/sessions '{"id":"durable"}' >/dev/null
kill -KILL "$d0_PID"
prev=0
kept=0
for i in $(seq 10); do
    start_server "d$i" --model "$MODEL" --state-dir "$state" --threads 1
    port_var=d${i}_PORT pid_var=d${i}_PID
    words=$(printf 'and then %.0s' $(seq "$i")) # a longer prompt each turn: the history grows
    r=$(post "${!port_var}" /v1/completions "{\"prompt\":\"$words\",\"max_tokens\":8,\"session_id\":\"durable\"}")
    kill -KILL "${!pid_var}" # at once: the answer came, so the turn must be on disk
    total=$(grep -o '"total_tokens":[0-9]*' <<<"$r" | grep -o '[0-9]*$')
    on_disk=$(grep -o '"tokens":\[[^]]*\]' "$state/durable.session.json" | tr -cd ',' | wc -c)
    [ -n "$total" ] && [ "$((on_disk + 1))" -eq "$total" ] && [ "$total" -gt "$prev" ] && kept=$((kept + 1))
    prev=${total:-$prev}
done
[ $kept -eq 10 ] && ok "10 of 10 turns killed with kill -9 right after their 200 are on disk" || bad "only $kept of 10 turns on disk"
touch "$state/durable.session.json.tmp.999.1"
start_server after --model "$MODEL" --state-dir "$state" --threads 1
[ ! -e "$state/durable.session.json.tmp.999.1" ] && ok "start-up removes leftover temporary files" || bad "stale temp file kept"
t=$(curl -s "http://127.0.0.1:$after_PORT/v1/sessions/durable" | grep -o '"tokens":[0-9]*' | grep -o '[0-9]*$')
[ "$t" = "$prev" ] && ok "the restarted server has the last turn's history ($t tokens)" || bad "history after restart: $t, expected $prev"
stop_server after || bad "SIGTERM (after)"

# ---- one slot and a queue: a waiting stream gets keep-alive comments, not an empty 200 ------
start_server q --model "$MODEL" --max-parallel 1 --request-timeout-s 1 --sse-keepalive-s 1 --shutdown-timeout-s 1 --threads 1
# blockers hold the slot and the queue; they leave after 2.5 s whatever the machine's speed
blockers=()
for i in $(seq 16); do
    post "$q_PORT" /v1/completions "{\"prompt\":\"Queue $i\",\"max_tokens\":250,$LONG}" >/dev/null &
    blockers+=($!)
done
sleep 0.3
curl -sN -m 300 "http://127.0.0.1:$q_PORT/v1/completions" -d '{"prompt":"The nation","max_tokens":5,"stream":true}' >"$TMP/ka.txt" &
ka_pid=$!
curl -sN -m 300 "http://127.0.0.1:$q_PORT/v1/responses" -d '{"input":"hi","max_output_tokens":5,"stream":true,"store":false}' \
    >"$TMP/ka_rsp.txt" &
ka_rsp_pid=$!
sleep 2.5
kill "${blockers[@]}" 2>/dev/null
wait "$ka_pid" "$ka_rsp_pid"
grep -q '^: keep-alive$' "$TMP/ka.txt" && ok "a waiting stream sends ': keep-alive' comments" || bad "no keep-alive comment"
grep -q '^: keep-alive$' "$TMP/ka_rsp.txt" && grep -Eq '^event: response.(completed|incomplete)$' "$TMP/ka_rsp.txt" &&
    ok "a waiting /v1/responses stream sends ': keep-alive' comments, then its events" ||
    bad "responses keep-alive: $(grep -v "^data" "$TMP/ka_rsp.txt" | head -c 600)"
grep -q '"finish_reason":"length"' "$TMP/ka.txt" && grep -q '^data: \[DONE\]$' "$TMP/ka.txt" &&
    ok "a stream queued past request_timeout_s still gets its tokens and [DONE]" || bad "queued stream: $(head -c 300 "$TMP/ka.txt")"
wait_jobs

# ---- shutdown cuts what is still queued: streams end with an error event, the rest get a 503 --
# 48 x 250 tokens queued ahead (one slot) outlast the 1 s shutdown timeout even on a quiet machine
# (the default model decodes ~3000 tokens/s there), so the two requests behind them are cut.
for i in $(seq 48); do post "$q_PORT" /v1/completions "{\"prompt\":\"Queue $i\",\"max_tokens\":250,$LONG}" >/dev/null & done
sleep 0.3
curl -sN -m 120 "http://127.0.0.1:$q_PORT/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":50,"stream":true}' >"$TMP/cut.txt" &
cut_pid=$!
code "$q_PORT" /v1/completions '{"prompt":"cut me","max_tokens":50}' "$TMP/cut.json" >"$TMP/cut.code" &
cutw_pid=$!
curl -sN -m 120 "http://127.0.0.1:$q_PORT/v1/responses" -d '{"input":"hi","max_output_tokens":50,"stream":true,"store":false}' \
    >"$TMP/cut_rsp.txt" &
cutr_pid=$!
sleep 0.5
kill -TERM "$q_PID"
wait "$cut_pid" "$cutw_pid" "$cutr_pid"
# (test_http_shutdown.sh checks every API's form of it)
grep -q '^event: response.failed$' "$TMP/cut_rsp.txt" && ! grep -q 'response.incomplete' "$TMP/cut_rsp.txt" &&
    ok "a /v1/responses stream cut by shutdown ends with response.failed" || bad "cut responses stream: $(tail -c 400 "$TMP/cut_rsp.txt")"
grep -q '^data: {"error":' "$TMP/cut.txt" && ! grep -q '"finish_reason":"\(length\|stop\)"' "$TMP/cut.txt" &&
    ok "a stream cut by shutdown ends with an error event, no finish_reason" || bad "cut stream: $(tail -c 400 "$TMP/cut.txt")"
[ "$(cat "$TMP/cut.code")" = 503 ] && grep -q '"error"' "$TMP/cut.json" && ok "a non-streamed request cut by shutdown is a 503 JSON error" ||
    bad "cut request: $(cat "$TMP/cut.code") $(cat "$TMP/cut.json")"
wait "$q_PID"
wait_jobs

# ---- session lifetime: LRU eviction at max_sessions, TTL, and the off switch ----------------
start_server life --model "$MODEL" --state-dir "$TMP/life" --max-sessions 2 --session-ttl-s 2 --threads 1
for s in s1 s2; do post "$life_PORT" /v1/sessions "{\"id\":\"$s\"}" >/dev/null; sleep 0.05; done
c=$(code "$life_PORT" /v1/sessions '{"id":"s3"}' "$TMP/s3.json")
s1=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$life_PORT/v1/sessions/s1")
[ "$c" = 200 ] && [ "$s1" = 404 ] && [ ! -e "$TMP/life/s1.session.json" ] && [ -e "$TMP/life/s3.session.json" ] &&
    ok "at max_sessions the least recently used idle session is evicted, file included" || bad "LRU eviction: $c $s1"
sleep 3.5
s3=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$life_PORT/v1/sessions/s3")
[ "$s3" = 404 ] && [ ! -e "$TMP/life/s3.session.json" ] && ok "an idle session expires after session_ttl_s, file included" ||
    bad "TTL: s3 is $s3"
stop_server life || bad "SIGTERM (life)"
start_server nolru --model "$MODEL" --max-sessions 1 --no-session-evict-lru --session-ttl-s 0 --threads 1
post "$nolru_PORT" /v1/sessions '{"id":"a"}' >/dev/null
c=$(code "$nolru_PORT" /v1/sessions '{"id":"b"}' "$TMP/b.json")
[ "$c" = 429 ] && ok "session_evict_lru = false keeps the 429 at max_sessions" || bad "no-LRU: $c"
stop_server nolru || bad "SIGTERM (nolru)"
exit $status
