#!/usr/bin/env bash
# test_http_attention.sh — POST /v1/attention on a real server with the shipped model (F32 KV
# cache): weights against the float64 reference, generation, top_k, chat, sessions, bad asks
# (tests/js/http_attention.mjs); the caps on the answer's size (attention_max_weights,
# attention_max_bytes) and on inspections at once (attention_parallel); one prompt per request;
# the API key; and GET / serving the playground without a key.
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

# the answer's bytes are capped too; one inspection at a time; one prompt per request
start_server lim --model "$MODEL" --threads 1 --attention-max-bytes 16k --attention-parallel 1
url="http://127.0.0.1:$lim_PORT"
body=$(curl -s "$url/v1/attention" -d '{"prompt": "The state of the union is strong and the people"}')
grep -q '"param":"layers"' <<< "$body" && grep -q attention_max_bytes <<< "$body" ||
    fail "over the byte cap: $body"
echo "ok: an answer over attention_max_bytes is a 400 naming the cap"
body=$(curl -s -w ' %{http_code}' "$url/v1/attention" -d '{"prompt": ["We", "the people"], "layers": [0], "heads": [0]}')
grep -q '"param":"prompt"' <<< "$body" && grep -q ' 400$' <<< "$body" || fail "a list of prompts: $body"
echo "ok: a list of prompts is a 400 (it would inspect only the first)"
for i in 1 2 3 4; do
    curl -s -o /dev/null -w '%{http_code}\n' "$url/v1/attention" \
        -d '{"prompt": "We", "layers": [0], "heads": [0], "top_k": 1, "max_tokens": 96}' >"$TMP/acode$i" &
done
wait $(jobs -p | grep -v -w -e "$lim_PID")
codes=$(cat "$TMP"/acode? | sort | tr '\n' ' ')
grep -q 200 <<< "$codes" && grep -q 429 <<< "$codes" && ! grep -qv -e 200 -e 429 <<< "$(cat "$TMP"/acode?)" ||
    fail "4 inspections at once with attention_parallel 1: $codes"
echo "ok: inspections beyond attention_parallel get 429 ($codes)"
stop_server lim || fail "server exit status"
