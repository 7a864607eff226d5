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

# "experts": true on a Mixture-of-Experts model (tiny_model's qwen3moe: 8 experts, 2 a token), and
# a 400 naming the field on the dense shipped model
"$ATTND_BUILD_DIR/tiny_model" qwen3moe "$TMP/moe.gguf" || fail "tiny_model qwen3moe"
start_server moe --model "$TMP/moe.gguf" --threads 1
body=$(curl -s "http://127.0.0.1:$moe_PORT/v1/attention" \
    -d '{"prompt": [1, 40, 77, 300], "layers": [0, 1], "heads": [0], "experts": true, "max_tokens": 2}')
python3 - "$body" <<'PY' || fail "experts in the answer: $body"
import json, sys
b = json.loads(sys.argv[1])
rows = len(b["attention"][0]["weights"])  # the prompt's and the generated tokens' (but the last)
assert rows >= 4, rows
assert [e["layer"] for e in b["experts"]] == [0, 1], b["experts"]
for e in b["experts"]:
    assert len(e["routes"]) == rows, len(e["routes"])
    for r in e["routes"]:
        ids, ws = [x[0] for x in r], [x[1] for x in r]
        assert len(r) == 2 and len(set(ids)) == 2 and all(0 <= i < 8 for i in ids), r
        assert ws[0] >= ws[1] > 0 and abs(sum(ws) - 1) < 1e-5, r
PY
echo "ok: a MoE model's answer lists each position's experts and weights"
stop_server moe || fail "server exit status"
start_server dense --model "$MODEL" --threads 1
body=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$dense_PORT/v1/attention" -d '{"prompt": "We", "experts": true}')
grep -q '"param":"experts"' <<< "$body" && grep -q ' 400$' <<< "$body" || fail "experts on a dense model: $body"
echo "ok: experts on a dense model is a 400 naming the field"
stop_server dense || fail "server exit status"
