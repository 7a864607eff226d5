#!/usr/bin/env bash
# test_http_attention.sh — POST /v1/attention on a real server with the shipped model (F32 KV
# cache): weights against the float64 reference, generation, top_k, chat, sessions, bad asks
# (tests/js/http_attention.mjs); the cap on the answer's size (attention_max_weights); the API
# key; and GET / serving the playground without a key.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
MODEL=$here/../models/attnd-sotu.gguf
REF=${ATTND_ATTN_REFERENCE:?ATTND_ATTN_REFERENCE not set}

start_server srv --model "$MODEL" --threads 2 --kv-f32
node "$here/js/http_attention.mjs" "http://127.0.0.1:$srv_PORT" "$MODEL" "$REF" "$here/js/attention_check.mjs" "$TMP" ||
    fail "attention API"
stop_server srv || fail "server exit status"

# a small cap: 6 layers x 4 heads x 3 rows (1+2+3 weights) = 144 is refused at 100, with the way out
start_server cap --model "$MODEL" --threads 1 --attention-max-weights 100 --api-key s3cret
url="http://127.0.0.1:$cap_PORT"
auth=(-H "Authorization: Bearer s3cret")
body=$(curl -s "${auth[@]}" "$url/v1/attention" -d '{"prompt": [1, 571, 262]}')
code=$(curl -s -o /dev/null -w '%{http_code}' "${auth[@]}" "$url/v1/attention" -d '{"prompt": [1, 571, 262]}')
[ "$code" = 400 ] || fail "over the cap: HTTP $code $body"
for word in 144 100 attention_max_weights layers heads top_k; do
    grep -q "$word" <<< "$body" || fail "the cap message lacks '$word': $body"
done
code=$(curl -s -o /dev/null -w '%{http_code}' "${auth[@]}" "$url/v1/attention" -d '{"prompt": [1, 571, 262], "layers": [0]}')
[ "$code" = 200 ] || fail "narrowed ask: HTTP $code"
echo "ok: the cap refuses a larger ask, saying how to narrow it"

code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/attention" -d '{"prompt": "We"}')
[ "$code" = 401 ] || fail "no API key: HTTP $code"
page=$(curl -sf -D "$TMP/headers" "$url/") || fail "GET / without a key"
for id in prompt generate output attention layer head; do
    grep -q "data-testid=\"$id\"" <<< "$page" || fail "the page lacks data-testid=$id"
done
grep -qi '^content-type: text/html' "$TMP/headers" || fail "GET / content type"
grep -qi "^content-security-policy: .*connect-src 'self'" "$TMP/headers" || fail "GET / policy"
grep -q 'not why the model answered' <<< "$page" || fail "the page's note"
echo "ok: the API key applies to /v1/attention; GET / serves the playground without one"
stop_server cap || fail "server exit status"
