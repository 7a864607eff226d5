# test_http_shutdown.sh — an honest shutdown (issue 51): the drain logs a countdown naming what it
# waits for, and a second SIGTERM exits at once (under 1 s) instead of waiting out
# shutdown_timeout_s. A request held open by its client (half a body) keeps the drain waiting.
# Streams cut by shutdown end in each API's own error form, never with a "stop" or "length" a
# client would take for a whole answer; a non-streamed request cut by it is a 503.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
status=0
start_server s --model "$MODEL" --threads 1 --shutdown-timeout-s 30
# a request whose body never ends: in flight until the server gives up on it
exec 3<>"/dev/tcp/127.0.0.1/$s_PORT"
printf 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"prompt": "Once' >&3
sleep 0.3
kill -TERM "$s_PID"
seen=0
for _ in $(seq 50); do
    grep -q 'shutdown: waiting for 1 request to finish, [0-9]* s left' "$s_LOG" && { seen=1; break; }
    sleep 0.1
done
check "the drain logs a countdown ($(grep -o 'shutdown: waiting.*' "$s_LOG" | head -1))" test $seen = 1
t0=$(date +%s%N)
kill -TERM "$s_PID"
rc=0
wait "$s_PID" || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
check "a second SIGTERM exits in under 1 s (${ms} ms)" test "$ms" -lt 1000
check "... with status 1 (got $rc)" test "$rc" = 1
check "... and says so" grep -q 'SIGTERM received again; exiting without waiting' "$s_LOG"
exec 3>&-

# ---- every API's stream cut by shutdown ------------------------------------------------------
# one slot, and 24 answers of 480 tokens queued ahead: ~11500 tokens outlast the 1 s drain even on
# a quiet machine (~3000 tokens/s), so the requests behind them are cut when it ends
start_server c --model "$MODEL" --threads 1 --max-parallel 1 --shutdown-timeout-s 1
base=http://127.0.0.1:$c_PORT
queued() { curl -sf "$base/slots" | grep -o '"state":"queued"' | wc -l; }
wait_queued() { for _ in $(seq 200); do [ "$(queued)" -ge "$1" ] && return 0; sleep 0.02; done; return 1; }
# the queued requests of 40 tokens: the seven below (the blockers ask for 480); counting all queued
# ones instead let a slow machine (AMD Zen 3, loaded) send SIGTERM before the last three arrived
queued_40() { curl -sf "$base/slots" | grep -o '"state":"queued"[^}]*"n_remain":40[,}]' | wc -l; }
wait_queued_40() { for _ in $(seq 500); do [ "$(queued_40)" -ge "$1" ] && return 0; sleep 0.02; done; return 1; }
for i in $(seq 24); do
    curl -s -m 60 "$base/v1/completions" -d "{\"prompt\": \"Queue $i\", \"max_tokens\": 480, \"ignore_eos\": true}" >/dev/null &
done
wait_queued 20 || bad "the blockers queue"
hi='"max_tokens": 40, "stream": true'
msgs='"messages": [{"role": "user", "content": "hi"}]'
stream() { curl -sN -m 60 "$base$1" -H 'Content-Type: application/json' -d "$2" >"$TMP/$3.txt" & }
stream /v1/chat/completions "{$msgs, $hi}" chat
stream /v1/completions "{\"prompt\": \"hi\", $hi}" cmpl
stream /completion "{\"prompt\": \"hi\", \"n_predict\": 40, \"stream\": true}" llama
stream /v1/responses "{\"input\": \"hi\", \"max_output_tokens\": 40, \"stream\": true, \"store\": false}" rsp
stream /v1/messages "{$msgs, $hi}" anth
stream /api/chat "{\"model\": \"attnd-sotu\", $msgs, \"options\": {\"num_predict\": 40}}" oll
curl -s -m 60 -o "$TMP/whole.json" -w '%{http_code}' "$base/v1/chat/completions" -d "{$msgs, \"max_tokens\": 40}" \
    >"$TMP/whole.code" &
wait_queued_40 7 || bad "the streams queue behind them ($(queued_40) of 7)"
kill -TERM "$c_PID"
wait "$c_PID"
wait
no_end() { ! grep -q "$1" "$TMP/$2.txt"; }
check "OpenAI chat: an error event ($(tail -c 200 "$TMP/chat.txt"))" grep -q '^data: {"error":{.*"type":"unavailable_error"' "$TMP/chat.txt"
check "OpenAI chat: no finish_reason" no_end '"finish_reason":"' chat
check "OpenAI completions: an error event" grep -q '^data: {"error":' "$TMP/cmpl.txt"
check "OpenAI completions: no finish_reason" no_end '"finish_reason":"' cmpl
check "/completion: stop_type shutdown ($(tail -c 300 "$TMP/llama.txt"))" grep -q '"stop":true.*"stop_type":"shutdown"' "$TMP/llama.txt"
check "/completion: then an error event" bash -c 'grep "^data: " "$1" | tail -n 1 | grep -q "^data: {\"error\":"' _ "$TMP/llama.txt"
check "Responses: response.failed ($(grep '^event:' "$TMP/rsp.txt" | tail -n 2 | tr '\n' ' '))" grep -q '^event: response.failed$' "$TMP/rsp.txt"
check "Responses: not incomplete" no_end 'response.incomplete' rsp
check "Anthropic: an error event ($(tail -c 200 "$TMP/anth.txt"))" grep -q '^event: error$' "$TMP/anth.txt"
check "Anthropic: no message_stop" no_end 'message_stop' anth
check "Ollama: an error line ($(tail -c 200 "$TMP/oll.txt"))" bash -c 'tail -n 1 "$1" | grep -q "^{\"error\":"' _ "$TMP/oll.txt"
check "Ollama: no done line" no_end '"done":true' oll
check "a whole answer cut by shutdown is a 503 ($(cat "$TMP/whole.code"))" test "$(cat "$TMP/whole.code")" = 503
check "... with an error body" grep -q '"error"' "$TMP/whole.json"
exit $status
