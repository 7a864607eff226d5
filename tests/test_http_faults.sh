# test_http_faults.sh — issue 25's fault scenarios against real `attnd serve` processes on
# loopback, with the repository's own model: a failing state directory (ENOSPC, EROFS, EIO
# injected at each persist step through $ATTND_FAULT_FILE, statedir.h), kill -9 while turns are
# saved, a tight KV budget with session turns queued behind a stream, fairness between API keys,
# slow bodies, the per-address cap and the reserved /health slot.
#
# The ledger: every session turn answered 200 is written down (session, the history length the
# answer implies); after each scenario (and each restart) every session must hold at least its
# acknowledged history, and a session whose turn was refused must hold exactly what it held
# before. A deletion answered 200 must stay deleted across a restart.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
[ -f "$MODEL" ] || { echo "FAIL: $MODEL not found"; exit 1; }
status=0
FAULT=$TMP/fault
STATE=$TMP/state

# tokens_of PORT ID: the session's history length ("" when it does not exist)
tokens_of() { curl -s "http://127.0.0.1:$1/v1/sessions/$2" | sed -n 's/.*"tokens":\([0-9]*\).*/\1/p'; }

# turn PORT ID [stream]: one turn; prints the HTTP status. Every turn's prompt is longer than the
# session's turn before (a counter per session in a file), so a later turn's history is
# always the longer: an acknowledged non-streamed turn goes into the ledger (a file, so turns run
# in the background count too) with the history it implies, prompt + completion tokens.
turn() {
    local port=$1 id=$2 stream=${3:-false} code c words
    c=$(($(cat "$TMP/counter.$id" 2>/dev/null || echo 0) + 1)) # per session: its turns run in order
    echo "$c" >"$TMP/counter.$id"
    words=$(printf ' people%.0s' $(seq "$c"))
    code=$(curl -s -o "$TMP/turn.$id" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
        -d "{\"prompt\":\"We the$words\",\"max_tokens\":4,\"session_id\":\"$id\",\"stream\":$stream}")
    if [ "$code" = 200 ] && [ "$stream" = false ]; then
        local rec
        rec=$(python3 -c "import json,sys; u=json.load(open(sys.argv[1]))['usage']; print(sys.argv[2], u['prompt_tokens'] + u['completion_tokens'])" \
            "$TMP/turn.$id" "$id")
        # turns run in the background too: one locked append a record, so two never interleave
        { flock 9; printf '%s\n' "$rec" >>"$TMP/ledger"; } 9>"$TMP/ledger.lock"
    fi
    cp "$TMP/turn.$id" "$TMP/turn"
    echo "$code"
}

# ledger_holds PORT: every session in the ledger holds at least its longest acknowledged history
ledger_holds() {
    local port=$1 id want have lost=0 n=0
    while read -r id want; do
        n=$((n + 1))
        have=$(tokens_of "$port" "$id")
        if [ -z "$have" ] || [ "$have" -lt "$want" ]; then
            echo "  session $id: ${have:-gone}, acknowledged $want" >&2
            lost=$((lost + 1))
        fi
    done < <(sort -k1,1 -k2,2n "$TMP/ledger" | awk '{m[$1]=$2} END {for (k in m) print k, m[k]}')
    echo "  ledger: $n sessions, $(wc -l <"$TMP/ledger") acknowledged turns, $lost sessions short of them" >&2
    [ "$lost" = 0 ]
}
forget() { { flock 9; grep -v "^$1 " "$TMP/ledger" >"$TMP/ledger.new"; mv "$TMP/ledger.new" "$TMP/ledger"; } 9>"$TMP/ledger.lock"; }

serve() { start_server srv --model "$MODEL" --threads 1 --state-dir "$STATE" "$@"; P=$srv_PORT; }

# ---- 1: a failing state directory: nothing unsaved is acknowledged -----------------------------
export ATTND_FAULT_FILE=$FAULT
serve
for i in 1 2 3; do curl -s -o /dev/null "http://127.0.0.1:$P/v1/sessions" -d "{\"id\":\"s$i\"}"; done
for i in 1 2 3; do turn "$P" "s$i" >/dev/null; done
check "three sessions with an acknowledged turn each" test "$(wc -l <"$TMP/ledger")" = 3
refused=0
for step in open write fsync rename dirsync; do
    for e in ENOSPC EROFS EIO; do
        echo "$step $e" >"$FAULT"
        before=$(tokens_of "$P" s1)
        code=$(turn "$P" s1)
        want=503
        [ "$e" = ENOSPC ] && want=507
        after=$(tokens_of "$P" s1)
        # a failed directory sync comes after the rename: the new file may stay (memory holds it),
        # but the turn is still not acknowledged
        if [ "$code" = "$want" ] && { [ "$after" = "$before" ] || [ "$step" = dirsync ]; }; then
            refused=$((refused + 1))
        else
            echo "  $step $e: HTTP $code, history $before -> $after" >&2
        fi
    done
done
check "a turn whose save fails at any of 5 steps with any of 3 errnos is refused (507 / 503) and the history stays ($refused of 15)" \
    test "$refused" = 15
echo "rename ENOSPC" >"$FAULT"
turn "$P" s2 true >/dev/null
check "a streamed turn that cannot be saved ends with an error event, not a finish_reason" \
    bash -c "grep -q 'could not be saved' '$TMP/turn' && ! grep -q '\"finish_reason\":\"stop\"' '$TMP/turn'"
curl -s "http://127.0.0.1:$P/health" >"$TMP/health"
check "/health says degraded" grep -q '"status":"degraded"' "$TMP/health"
check "/metrics counts the failures" bash -c "curl -s http://127.0.0.1:$P/metrics | grep -q '^attnd_state_write_failures_total [1-9]'"
code=$(http_status "http://127.0.0.1:$P/v1/sessions" -d '{"id":"new1"}')
check "a session that cannot be saved is not created ($code)" test "$code" = 507 -a -z "$(tokens_of "$P" new1)"
echo "unlink EROFS" >"$FAULT"
code=$(http_status -X DELETE "http://127.0.0.1:$P/v1/sessions/s3")
check "a deletion that cannot be made durable is refused ($code) and the session stays" test "$code" = 503 -a -n "$(tokens_of "$P" s3)"
rm -f "$FAULT"
code=$(turn "$P" s1)
check "space back: the next turn is saved ($code) and /health is ok again" \
    bash -c "[ $code = 200 ] && curl -s http://127.0.0.1:$P/health | grep -q '\"status\":\"ok\"'"
code=$(http_status -X DELETE "http://127.0.0.1:$P/v1/sessions/s3")
check "and the deletion goes through ($code)" test "$code" = 200
forget s3
stop_server srv || bad "SIGTERM exit status"
serve
check "after a restart: no acknowledged turn lost" ledger_holds "$P"
check "the deleted session stays deleted" test -z "$(tokens_of "$P" s3)"
stop_server srv || bad "SIGTERM exit status"
unset ATTND_FAULT_FILE

# ---- 1b: stored responses: a store: true answer only once the response is durable -------------
# The ledger of responses: every POST /v1/responses answered 200 must be found after a restart;
# one refused must be found (or not) after a restart exactly as before it: memory = disk.
export ATTND_FAULT_FILE=$FAULT
RSTATE=$TMP/rstate
start_server rsp --model "$MODEL" --threads 1 --state-dir "$RSTATE"
R=$rsp_PORT
rcode() { curl -s -o "$TMP/rsp" -w '%{http_code}' "http://127.0.0.1:$R/v1/responses" -d "$1"; }
rid() { python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('id', ''))" "$TMP/rsp"; }
get_code() { http_status "http://127.0.0.1:$R/v1/responses/$1"; }
: >"$TMP/racked"
: >"$TMP/rrefused"
ask='{"input":"We the people","max_output_tokens":4}'
[ "$(rcode "$ask")" = 200 ] && rid >>"$TMP/racked"
refused=0
for step in open write fsync rename dirsync; do
    for e in ENOSPC EROFS EIO; do
        echo "$step $e .response.json" >"$FAULT"
        code=$(rcode "$ask")
        want=503
        [ "$e" = ENOSPC ] && want=507
        # the answer names no id; the store's files say what was kept (a failed sync after the
        # rename leaves the file, and memory holds it: it must survive the restart too)
        if [ "$code" = "$want" ] && grep -q 'could not be stored' "$TMP/rsp"; then
            refused=$((refused + 1))
        else
            echo "  $step $e: HTTP $code $(head -c 200 "$TMP/rsp")" >&2
        fi
    done
done
check "a response whose file fails at any of 5 steps with any of 3 errnos is refused (507 / 503) ($refused of 15)" \
    test "$refused" = 15
check "a refused store leaves no temporary file" bash -c "! ls '$RSTATE' | grep -q '\\.tmp\\.'"
echo "rename ENOSPC .response.json" >"$FAULT"
curl -s -N "http://127.0.0.1:$R/v1/responses" -d '{"input":"We the people","max_output_tokens":4,"stream":true}' \
    >"$TMP/rstream"
check "a streamed response that cannot be stored ends with response.failed, not response.completed" \
    bash -c "grep -q 'response.failed' '$TMP/rstream' && ! grep -q 'response.completed' '$TMP/rstream'"
rm -f "$FAULT"
[ "$(rcode "$ask")" = 200 ] && rid >>"$TMP/racked"
victim=$(head -1 "$TMP/racked")
echo "unlink EROFS .response.json" >"$FAULT"
code=$(http_status -X DELETE "http://127.0.0.1:$R/v1/responses/$victim")
check "a stored-response deletion that cannot be made durable is refused ($code) and it stays" \
    test "$code" = 503 -a "$(get_code "$victim")" = 200
rm -f "$FAULT"
[ "$(rcode "$ask")" = 200 ] && gone=$(rid)
echo "dirsync EIO .response.json" >"$FAULT"
code=$(http_status -X DELETE "http://127.0.0.1:$R/v1/responses/$gone")
# the file is unlinked, only its removal is not durable: memory follows the disk, the answer is an error
check "a deletion whose directory sync fails is refused too ($code), and memory follows the disk" \
    test "$code" = 503 -a "$(get_code "$gone")" = 404 -a ! -e "$RSTATE/$gone.response.json"
rm -f "$FAULT"
ls "$RSTATE" | sed -n 's/\.response\.json$//p' | sed 's/^.*~//' | sort >"$TMP/rfiles.before"
stop_server rsp || bad "SIGTERM exit status (rsp)"
start_server rsp --model "$MODEL" --threads 1 --state-dir "$RSTATE"
R=$rsp_PORT
lost=0
while read -r id; do [ "$(get_code "$id")" = 200 ] || lost=$((lost + 1)); done <"$TMP/racked"
check "after a restart: 0 of $(wc -l <"$TMP/racked") acknowledged responses lost ($lost)" test "$lost" = 0
differ=0
while read -r id; do [ "$(get_code "$id")" = 200 ] || differ=$((differ + 1)); done <"$TMP/rfiles.before"
check "every response the store held before the restart is there after it ($differ missing)" test "$differ" = 0
check "and nothing more ($(ls "$RSTATE" | grep -c '\.response\.json$') files, $(wc -l <"$TMP/rfiles.before") before)" \
    test "$(ls "$RSTATE" | grep -c '\.response\.json$')" = "$(wc -l <"$TMP/rfiles.before")"
check_status 200 "space back: the deletion goes through" -X DELETE "http://127.0.0.1:$R/v1/responses/$victim"
stop_server rsp || bad "SIGTERM exit status (rsp)"
start_server rsp --model "$MODEL" --threads 1 --state-dir "$RSTATE" --response-ttl-s 1
R=$rsp_PORT
check "the deleted response stays deleted after a restart" test "$(get_code "$victim")" = 404
[ "$(rcode "$ask")" = 200 ] && young=$(rid)
sleep 2.5
[ -e "$RSTATE/$young.response.json" ] && unswept=yes || unswept=no # before any request touches the store
check "a response past response_ttl_s leaves the disk on time, with no request (file still there: $unswept)" \
    test -n "$young" -a "$unswept" = no
check "and it is gone (404)" test "$(get_code "$young")" = 404
stop_server rsp || bad "SIGTERM exit status (rsp)"
start_server rsp --model "$MODEL" --threads 1 --state-dir "$RSTATE"
R=$rsp_PORT
rcode "$ask" >/dev/null
stop_server rsp || bad "SIGTERM exit status (rsp)"
sleep 1.5
left=$(ls "$RSTATE" | grep -c '\.response\.json$')
start_server rsp --model "$MODEL" --threads 1 --state-dir "$RSTATE" --response-ttl-s 1
check "and at start-up the expired ones leave the disk ($left before, $(ls "$RSTATE" | grep -c '\.response\.json$') after)" \
    test "$left" -gt 0 -a "$(ls "$RSTATE" | grep -c '\.response\.json$')" = 0
stop_server rsp || bad "SIGTERM exit status (rsp)"
unset ATTND_FAULT_FILE

# ---- 1c: tenants: quotas per key, and one key never evicts another's sessions --------------------
printf 'key-a-%s\nkey-b-%s\n' $$ $$ >"$TMP/qkeys"
start_server quota --model "$MODEL" --threads 1 --state-dir "$TMP/qstate" --max-sessions 6 \
    --api-key-file "$TMP/qkeys" --max-responses-per-key 2
Q=$quota_PORT
qa() { curl -s -o "$TMP/q" -w '%{http_code}' -H "Authorization: Bearer key-$1-$$" "http://127.0.0.1:$Q$2" "${@:3}"; }
for i in 1 2 3; do qa a /v1/sessions -d "{\"id\":\"a$i\"}" >/dev/null; done
made=0
for i in 1 2 3 4 5 6; do [ "$(qa b /v1/sessions -d "{\"id\":\"b$i\"}")" = 200 ] && made=$((made + 1)); done
a_left=0
for i in 1 2 3; do [ "$(qa a "/v1/sessions/a$i")" = 200 ] && a_left=$((a_left + 1)); done
check "key B making 6 sessions ($made answered) leaves key A's 3 alone ($a_left of 3)" test "$made" = 6 -a "$a_left" = 3
check "and their files ($(ls "$TMP/qstate" | grep -c '\.session\.json$') session files: 3 of A, 3 of B)" \
    test "$(ls "$TMP/qstate" | grep -c '\.session\.json$')" = 6
qa b /v1/responses -d "$ask" >/dev/null
qa b /v1/responses -d "$ask" >/dev/null
code=$(qa b /v1/responses -d "$ask")
check "a key's third stored response is a 429 naming max_responses_per_key ($code)" \
    bash -c "[ $code = 429 ] && grep -q max_responses_per_key '$TMP/q'"
code=$(qa b /v1/responses -d '{"input":"We the people","max_output_tokens":4,"store":false}')
check "store: false still answers ($code)" test "$code" = 200
code=$(qa a /v1/responses -d "$ask")
check "key A stores beside B's full quota ($code)" test "$code" = 200
stop_server quota || bad "SIGTERM exit status (quota)"
start_server quota --model "$MODEL" --threads 1 --max-sessions 6 --api-key-file "$TMP/qkeys" --no-session-evict-lru
Q=$quota_PORT
for i in 1 2 3; do qa b /v1/sessions -d "{\"id\":\"b$i\"}" >/dev/null; done
code=$(qa b /v1/sessions -d '{"id":"b4"}')
check "without LRU, a key's 4th session of a 6-session server is a 429 naming max_sessions_per_key ($code)" \
    bash -c "[ $code = 429 ] && grep -q max_sessions_per_key '$TMP/q'"
code=$(qa a /v1/sessions -d '{"id":"a1"}')
check "while the other key still makes one ($code)" test "$code" = 200
stop_server quota || bad "SIGTERM exit status (quota)"

# ---- 2: kill -9 while turns are being saved ----------------------------------------------------
for round in 1 2 3; do
    serve
    for i in 1 2; do (for k in $(seq 20); do turn "$P" "s$i" >/dev/null; done) & done
    sleep 1.$((RANDOM % 10))
    kill -KILL "$srv_PID"
    wait 2>/dev/null
    serve
    check "kill -9 round $round: no acknowledged turn lost" ledger_holds "$P"
    stop_server srv || bad "SIGTERM exit status"
done
ls "$STATE" | grep -q '\.tmp\.' && bad "temporary files left after the restarts" || ok "no temporary file left"

# ---- 3: KV budget: a stream never fails for a session turn queued behind it -------------------
start_server kv --model "$MODEL" --threads 1 --kv-budget-mb 3 --max-parallel 1 --state-dir "$TMP/kvstate"
K=$kv_PORT
long=$(python3 -c "print(' '.join(['union'] * 300))")
for i in 1 2 3; do
    curl -s -o /dev/null "http://127.0.0.1:$K/v1/sessions" -d "{\"id\":\"k$i\"}"
    curl -s -o /dev/null "http://127.0.0.1:$K/v1/completions" -d "{\"prompt\":\"$long $i\",\"max_tokens\":8,\"session_id\":\"k$i\"}"
done
curl -s -N "http://127.0.0.1:$K/v1/completions" \
    -d '{"prompt":"We","max_tokens":400,"stream":true,"logit_bias":{"2":-100,"4097":-100}}' >"$TMP/stream" &
spid=$!
sleep 0.3
for i in 1 2 3; do
    curl -s -o "$TMP/kt$i" -w '%{http_code}' "http://127.0.0.1:$K/v1/completions" \
        -d "{\"prompt\":\"$long $i more\",\"max_tokens\":4,\"session_id\":\"k$i\"}" >"$TMP/kc$i" &
done
wait "$spid"
wait $(jobs -p | grep -v -w -e "$kv_PID") 2>/dev/null
check "the stream ran to its end with no KV error" \
    bash -c "grep -q '\\[DONE\\]' '$TMP/stream' && ! grep -q 'KV cache budget exhausted' '$TMP/stream'"
check "and the queued turns were answered ($(cat "$TMP"/kc? | tr '\n' ' '))" \
    bash -c "[ \"\$(cat '$TMP'/kc? | tr -d '\n')\" = 200200200 ]"
stop_server kv || bad "SIGTERM exit status (kv)"

# ---- 4: fairness: a short request of one key beside a long batch of another --------------------
printf 'key-a-%s\nkey-b-%s\n' $$ $$ >"$TMP/keys"
start_server fair --model "$MODEL" --threads 1 --max-parallel 2 --api-key-file "$TMP/keys"
F=$fair_PORT
big=()
for i in 1 2 3 4 5 6; do
    curl -s -o /dev/null -H "Authorization: Bearer key-a-$$" "http://127.0.0.1:$F/v1/completions" \
        -d '{"prompt":"We","max_tokens":400,"logit_bias":{"2":-100,"4097":-100}}' &
    big+=($!)
done
sleep 0.5
code=$(http_status -m 60 -H "Authorization: Bearer key-b-$$" \
    "http://127.0.0.1:$F/v1/completions" -d '{"prompt":"Hi","max_tokens":2}')
running=0
for p in "${big[@]}"; do kill -0 "$p" 2>/dev/null && running=$((running + 1)); done
check "key B's short request is answered ($code) while key A's batch still runs ($running of 6)" \
    test "$code" = 200 -a "$running" -ge 4
for p in "${big[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
stop_server fair || bad "SIGTERM exit status (fair)"

# ---- 5: slow bodies, the per-address cap, /health's reserved slot --------------------------------
start_server slow --model "$MODEL" --threads 1 --max-connections 32 --max-connections-per-address 6 \
    --body-timeout-s 2 --header-timeout-s 2
S=$slow_PORT
slow=()
for i in $(seq 10); do # headers at once, then a body byte a second
    (exec 3<>"/dev/tcp/127.0.0.1/$S"
     printf 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{' >&3
     for k in $(seq 30); do sleep 1; printf ' ' >&3 2>/dev/null || exit 0; done) 2>/dev/null &
    slow+=($!)
done
sleep 0.5
health=0
for i in $(seq 10); do
    [ "$(http_status -m 2 "http://127.0.0.1:$S/health")" = 200 ] && health=$((health + 1))
done
check "/health answers beside 10 slow bodies ($health of 10)" test "$health" = 10
check_status 429 "a request over the per-address cap is answered 429, not reset" -m 5 "http://127.0.0.1:$S/v1/models"
sleep 3
check_status 200 "after body_timeout_s the slow bodies are cut and requests are answered" -m 5 "http://127.0.0.1:$S/v1/models"
check "the log says why" grep -q "request body did not arrive within 2 s" "$slow_LOG"
for p in "${slow[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
python3 -c "print('x' * 3000000)" >"$TMP/huge"
code=$(http_status -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/huge" \
    "http://127.0.0.1:$S/v1/completions")
check "a chunked body over body_limit gets its 413 ($code)" test "$code" = 413
stop_server slow || bad "SIGTERM exit status (slow)"

# ---- 6: attention answers leave no memory behind (not under sanitizers: their allocator) ---------
[ -n "${ATTND_SANITIZED:-}" ] && exit $status
start_server att --model "$MODEL" --threads 1 --attention-parallel 64
A=$att_PORT
ask=$(python3 -c "import json; print(json.dumps({'prompt': ' '.join(['the union'] * 120), 'top_k': 8}))")
rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$att_PID/status"; }
round() {
    for i in $(seq 16); do curl -s -o /dev/null "http://127.0.0.1:$A/v1/attention" -d "$ask" & done
    wait $(jobs -p | grep -v -w -e "$att_PID") 2>/dev/null
}
rss0=$(rss)
round
rss1=$(rss)
round
rss2=$(rss)
hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$att_PID/status")
# what stays after the first round is the KV of the 16 prompts, cached for their reuse
echo "  RSS at start ${rss0} kB; after 16 concurrent inspections ${rss1} kB; after 16 more ${rss2} kB; peak ${hwm} kB"
check "a second round leaves no more memory behind (${rss1} -> ${rss2} kB)" test "$rss2" -lt $((rss1 + 16384))
stop_server att || bad "SIGTERM exit status (att)"
exit $status
