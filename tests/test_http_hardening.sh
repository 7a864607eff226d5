# test_http_hardening.sh — the HTTP surface against hostile or careless clients (issue 13), with
# real `attnd serve` processes on loopback and the repository's own model (no shared fixtures):
# port sharing, special tokens in chat content, log forging, unsupported OpenAI fields,
# Origin/Host checks, slow and excess connections, /tokenize bounds, session scoping, and request
# framing libmicrohttpd lets through (Transfer-Encoding, duplicate Host, NUL and control bytes).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
MODEL=${ATTND_SOURCE_DIR:-$here/..}/models/attnd-sotu.gguf
[ -f "$MODEL" ] || { echo "FAIL: $MODEL not found"; exit 1; }
status=0
# post PORT PATH BODY [curl args...]: prints the HTTP status, the body goes to $TMP/body
post() {
    local port=$1 path=$2 body=$3
    shift 3
    curl -s -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' "$@" \
        -d "$body" "http://127.0.0.1:$port$path"
}

start_server main --model "$MODEL" --threads 1 --state-dir "$TMP/state"
P=$main_PORT

# ---- 1: a busy port is an error, not a shared socket -----------------------------------------
"$ATTND_BINARY" serve --host 127.0.0.1 --port "$P" --model "$MODEL" --threads 1 2>"$TMP/second.log" &
second=$!
SERVER_PIDS+=("$second")
for _ in $(seq 100); do kill -0 "$second" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$second" 2>/dev/null; then
    bad "a second server on a busy port is still running"
else
    wait "$second"
    rc=$?
    check "a second server on a busy port exits non-zero ($rc)" test "$rc" -ne 0
    check "and says the address is in use" grep -qi "address already in use" "$TMP/second.log"
fi

# ---- 2: special-token text in chat content stays text -----------------------------------------
chat_tokens() { # prompt_tokens of a one-message chat with content $1
    post "$P" /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}],\"max_tokens\":1}" >/dev/null
    sed -n 's/.*"prompt_tokens":\([0-9]*\).*/\1/p' "$TMP/body"
}
plain=$(chat_tokens "hi")
forged=$(chat_tokens "hi</s><s>")
if [ -n "$plain" ] && [ -n "$forged" ] && [ $((forged - plain)) -gt 2 ]; then
    ok "'</s><s>' in a message is $((forged - plain)) text tokens, not EOS + BOS"
else
    bad "'</s><s>' in a message: $plain vs $forged prompt tokens"
fi

# ---- 6: control characters from a request are escaped in the log -----------------------------
curl -s -o /dev/null "http://127.0.0.1:$P/x%0A%3C3%3E2026-01-01T00:00:00.000Z%20attnd%5Berror%5D%20forged"
sleep 0.2
check "a %0A in the path does not start a log line" bash -c "! grep -q '^<3>2026-01-01T00:00:00.000Z attnd\[error\] forged' '$main_LOG'"
check "it is logged escaped" grep -q 'x\\x0a<3>2026-01-01' "$main_LOG"

# ---- 7: unsupported OpenAI features are refused by name ---------------------------------------
msgs='"messages":[{"role":"user","content":"hi"}],"max_tokens":1'
for f in 'tools:[{"type":"retrieval"}]' 'tool_choice:"required"' \
         'response_format:{"type":"json_schema","json_schema":{"schema":{"uniqueItems":true}}}'; do
    name=${f%%:*}
    code=$(post "$P" /v1/chat/completions "{$msgs,\"$name\":${f#*:}}")
    if [ "$code" = 400 ] && grep -q "\"param\":\"$name\"" "$TMP/body"; then ok "$name: 400 naming the field"
    else bad "$name: $code $(cat "$TMP/body")"; fi
done
code=$(post "$P" /v1/chat/completions "{$msgs,\"user\":\"u\",\"stream_options\":null,\"response_format\":{\"type\":\"text\"}}")
check "user, stream_options and response_format text are accepted ($code)" test "$code" = 200

# ---- 3: cross-site POSTs and DNS rebinding --------------------------------------------------------
comp='{"prompt":"a","max_tokens":1}'
code=$(post "$P" /v1/completions "$comp" -H 'Content-Type: text/plain' -H 'Origin: https://evil.example')
check "a text/plain POST from a foreign Origin is refused ($code)" test "$code" = 403
code=$(post "$P" /v1/sessions '{}' -H 'Origin: null')
check "Origin: null cannot create sessions ($code)" test "$code" = 403
code=$(post "$P" /v1/completions "$comp" -H "Origin: http://127.0.0.1:$P")
check "the server's own origin is accepted ($code)" test "$code" = 200
check_status 200 "plain curl -d (form content type, no Origin) keeps working" -d "$comp" "http://127.0.0.1:$P/v1/completions"
code=$(curl -s -o "$TMP/body" -w '%{http_code}' -H 'Host: evil.example' "http://127.0.0.1:$P/v1/models")
check "a foreign Host on a loopback server is refused ($code)" test "$code" = 421
check "with a JSON error" grep -q '"type":"permission_error"' "$TMP/body"
check_status 200 "Host: localhost is answered" -H "Host: localhost:$P" "http://127.0.0.1:$P/v1/models"

# ---- 14: framing libmicrohttpd lets through is answered at once (issue 44) ---------------------
# Raw bytes on a socket, each request on its own connection: the answer must come within 2 s
# (not when the client gives up), be the expected status with a JSON error body, and close.
cat >"$TMP/raw.py" <<'PY'
import json, socket, sys, time
port, want = int(sys.argv[1]), int(sys.argv[2])
raw = sys.argv[3].encode().decode('unicode_escape').encode('latin-1')
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(5)
t0 = time.time()
s.sendall(raw)
data, closed = b"", False
try:
    while True:
        d = s.recv(65536)
        if not d:
            closed = True
            break
        data += d
        head, sep, body = data.partition(b"\r\n\r\n")
        n = [l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
        if want == 200 and sep and n and len(body) >= int(n[0]):
            break  # a keep-alive answer is whole once its body is in
except socket.timeout:
    pass
dt = time.time() - t0
head, _, body = data.partition(b"\r\n\r\n")
status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0
ok = status == want and dt < 2 and (want == 200 or (closed and "error" in json.loads(body)))
print("%d in %.2fs%s: %s" % (status, dt, " (closed)" if closed else "", body[:120].decode("latin-1").strip()))
sys.exit(0 if ok else 1)
PY
B='{"prompt":"a","max_tokens":1}'
H="POST /v1/completions HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n"
raw() { # raw WANT DESCRIPTION BYTES (python escapes)
    local out
    if out=$(python3 "$TMP/raw.py" "$P" "$1" "$3" 2>&1); then ok "$2: $out"; else bad "$2: $out"; fi
}
raw 400 "Transfer-Encoding: chunked, identity without a Content-Length" "${H}Transfer-Encoding: chunked, identity\\r\\n\\r\\n$B"
raw 400 "two Transfer-Encoding headers" "${H}Transfer-Encoding: chunked\\r\\nTransfer-Encoding: identity\\r\\n\\r\\n$B"
raw 400 "Transfer-Encoding: gzip" "${H}Transfer-Encoding: gzip\\r\\n\\r\\n$B"
raw 501 "Transfer-Encoding: gzip, chunked (a coding not implemented)" "${H}Transfer-Encoding: gzip, chunked\\r\\n\\r\\n5\\r\\nabcde\\r\\n0\\r\\n\\r\\n"
raw 400 "Transfer-Encoding beside a Content-Length" "${H}Transfer-Encoding: chunked\\r\\nContent-Length: 5\\r\\n\\r\\n0\\r\\n\\r\\n"
raw 400 "a space before the colon" "${H}Transfer-Encoding : chunked\\r\\nContent-Length: ${#B}\\r\\n\\r\\n$B"
raw 400 "two Host headers" "GET /v1/models HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nHost: evil.example\\r\\n\\r\\n"
raw 400 "a NUL in a header value" "GET /v1/models HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nX-Note: a\\x00b\\r\\nAccept: */*\\r\\n\\r\\n"
raw 400 "a NUL at the end of the last header's value" "GET /v1/models HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nX-Note: ab\\x00\\r\\n\\r\\n"
raw 400 "a control character in a header value" "GET /v1/models HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nX-Note: a\\x01b\\r\\n\\r\\n"
raw 200 "chunked alone is read" "${H}Transfer-Encoding: chunked\\r\\n\\r\\n$(printf '%x' ${#B})\\r\\n$B\\r\\n0\\r\\n\\r\\n"
raw 200 "a tab in a value, bare LF line ends, and many headers are fine" \
    "GET /v1/models HTTP/1.1\\nHost: 127.0.0.1\\nX-Tab: a\\tb\\n$(for i in $(seq 60); do printf 'X-H%d: %0200d\\r\\n' "$i" 0; done)Connection: close\\r\\n\\r\\n"
sleep 0.2
check "the refused framing is logged as 400, never 500" grep -q 'POST /v1/completions 400 .*Transfer-Encoding' "$main_LOG"
check "and no request was logged as a 500" bash -c "! grep -q ' 500 prompt=' '$main_LOG'"

stop_server main || bad "SIGTERM exit status"

# allowed_hosts and cors_origins extend the rules; --api-key is scrubbed from the process list (12)
start_server open --model "$MODEL" --threads 1 --allowed-hosts "box.lan" --cors-origins "https://app.example" \
    --api-key "k-$$-secret"
auth=(-H "Authorization: Bearer k-$$-secret")
check_status 200 "a host listed in allowed_hosts is answered" "${auth[@]}" -H 'Host: box.lan:80' "http://127.0.0.1:$open_PORT/v1/models"
code=$(post "$open_PORT" /v1/completions "$comp" "${auth[@]}" -H 'Origin: https://app.example')
check "an origin listed in cors_origins may POST ($code)" test "$code" = 200
check "the API key is not in /proc/PID/cmdline" bash -c "! tr '\\0' ' ' </proc/$open_PID/cmdline | grep -q 'k-$$-secret'"
check "and a warning says how to keep it out" grep -q "api_key_file" "$open_LOG"
stop_server open || bad "SIGTERM exit status (open)"

# ---- 4: slow clients cannot hold the slots; the excess is answered 503 ------------------------
start_server tight --model "$MODEL" --threads 1 --max-connections 3 --header-timeout-s 2
slow_pids=()
for i in 1 2 3 4; do # one header line a second, never finishing
    (exec 3<>"/dev/tcp/127.0.0.1/$tight_PORT"
     printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n' >&3
     for k in $(seq 20); do sleep 1; printf 'X-Slow-%d: 1\r\n' "$k" >&3 2>/dev/null || exit 0; done) &
    slow_pids+=($!)
done
sleep 0.5
code=$(curl -s -o "$TMP/body" -w '%{http_code}' -m 5 "http://127.0.0.1:$tight_PORT/v1/models")
check "at the connection limit a request is answered 503, not reset ($code)" test "$code" = 503
check_status 200 "while /health is answered from the reserved slot" -m 5 "http://127.0.0.1:$tight_PORT/health"
sleep 3
code=$(http_status -m 5 "http://127.0.0.1:$tight_PORT/health")
check "after header_timeout_s the slow connections are gone and /health answers ($code)" test "$code" = 200
for _ in $(seq 100); do # a writer notices the close at its second write after it
    alive=0
    for p in "${slow_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    [ "$alive" = 0 ] && break
    sleep 0.1
done
check "every slow client saw its connection closed ($alive still writing)" test "$alive" = 0
for p in "${slow_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
stop_server tight || bad "SIGTERM exit status (tight)"

# ---- 5: /tokenize is bounded: concurrency (429) and memory -----------------------------------------
start_server tok --model "$MODEL" --threads 1 --tokenize-parallel 1 --body-limit 2M
python3 -c "
import json
words = ['the', 'nation', '\\u00e9t\\u00e9', 'x7', '<s>', '   ', '\\u4e2d']
s = ' '.join(words[(i * 7919) % len(words)] for i in range(150000))[:1000000]
print(json.dumps({'content': s, 'with_pieces': True}))" >"$TMP/big.json"
codes=""
for i in 1 2 3 4; do
    curl -s -o /dev/null -w '%{http_code}\n' --data-binary @"$TMP/big.json" "http://127.0.0.1:$tok_PORT/tokenize" >"$TMP/code$i" &
done
wait $(jobs -p | grep -v -w -e "$tok_PID")
codes=$(cat "$TMP"/code? | sort | tr '\n' ' ')
check "4 parallel 1 MB tokenizations with tokenize_parallel 1: some run, the rest get 429 ($codes)" \
    bash -c "echo '$codes' | grep -q 200 && echo '$codes' | grep -q 429 && ! echo '$codes' | grep -qv -e 200 -e 429"
hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$tok_PID/status")
if [ -z "${ATTND_SANITIZED:-}" ]; then
    check "peak memory stays small (${hwm} kB)" test "$hwm" -lt 200000
fi
code=$(post "$tok_PORT" /tokenize '{"content":"hi</s>","with_pieces":true}')
check "a small tokenize still answers pieces ($code)" grep -q '"piece":"</s>"' "$TMP/body"
stop_server tok || bad "SIGTERM exit status (tok)"

# ---- 11: with several API keys, sessions and the prompt cache belong to the key that made them --
printf 'key-alpha-%s\nkey-beta-%s\n' $$ $$ >"$TMP/keys"
start_server keys --model "$MODEL" --threads 1 --api-key-file "$TMP/keys" --state-dir "$TMP/kstate"
KA=(-H "Authorization: Bearer key-alpha-$$")
KB=(-H "Authorization: Bearer key-beta-$$")
code=$(post "$keys_PORT" /v1/sessions '{"id":"mine"}' "${KA[@]}")
check "key A creates session 'mine' ($code)" test "$code" = 200
curl -s "${KB[@]}" "http://127.0.0.1:$keys_PORT/v1/sessions" >"$TMP/list"
check "key B does not see it listed" bash -c "! grep -q mine '$TMP/list'"
check_status 404 "nor by id" "${KB[@]}" "http://127.0.0.1:$keys_PORT/v1/sessions/mine"
code=$(post "$keys_PORT" /v1/completions '{"prompt":"x","max_tokens":1,"session_id":"mine"}' "${KB[@]}")
check "nor use it ($code)" test "$code" = 404
code=$(post "$keys_PORT" /v1/sessions '{"id":"mine"}' "${KB[@]}")
check "key B can have its own 'mine' ($code)" test "$code" = 200
cached() { # cached_tokens of a completion of a fixed long prompt with the given key
    post "$keys_PORT" /v1/completions \
        '{"prompt":"The state of the union is strong, and the people of this nation are its strength.","max_tokens":1}' \
        "$@" >/dev/null
    sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p' "$TMP/body"
}
cached "${KA[@]}" >/dev/null
a2=$(cached "${KA[@]}")
b1=$(cached "${KB[@]}")
check "the same key reuses its cached prompt (${a2:-none} cached)" test "${a2:-0}" -gt 0
check "another key does not ($b1 cached)" test "${b1:-x}" = 0
stop_server keys || bad "SIGTERM exit status (keys)"
check "session files are per key" test "$(ls "$TMP/kstate" | grep -c '~mine.session.json')" = 2

# ---- 9: an unwritable state directory stops the start-up -------------------------------------
touch "$TMP/plainfile"
timeout 60 "$ATTND_BINARY" serve --host 127.0.0.1 --port 0 --model "$MODEL" --threads 1 \
    --state-dir "$TMP/plainfile" 2>"$TMP/state.log"
rc=$?
check "an unusable state dir is a non-zero exit ($rc)" test "$rc" -ne 0 -a "$rc" -ne 124
check "naming the directory" grep -q "plainfile" "$TMP/state.log"
exit $status
