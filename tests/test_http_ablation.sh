#!/usr/bin/env bash
# test_http_ablation.sh — "ablate" on /v1/completions, /v1/chat/completions and /v1/attention with
# the shipped model: scale 1 on every head changes nothing (bit-identical log-probabilities), zero
# and mean ablation change the answer and differ from each other, an ablated request neither
# reuses nor fills the prompt cache (a plain request after it gets the first plain answer and
# its cached tokens), the attention answer echoes the ablation, and bad asks are 400s naming
# the field (a session or n > 1 with ablate, heads out of the model's range, bad modes).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
MODEL=$here/../models/attnd-sotu.gguf

start_server srv --model "$MODEL" --threads 2 --kv-f32
url="http://127.0.0.1:$srv_PORT"
P='"prompt": "The state of the union is", "max_tokens": 8, "temperature": 0, "logprobs": 1'
complete() { curl -s "$url/v1/completions" -H 'Content-Type: application/json' -d "{$P$1}"; }
lps() { jq -c '.choices[0].logprobs.token_logprobs' <<< "$1"; }
text() { jq -r '.choices[0].text' <<< "$1"; }

plain=$(complete '')
[ "$(lps "$plain")" != null ] || fail "plain completion: $plain"
every=$(for l in 0 1 2 3 4 5; do for h in 0 1 2 3; do printf '{"layer":%d,"head":%d,"scale":1},' $l $h; done; done)
ident=$(complete ", \"ablate\": [${every%,}]")
[ "$(lps "$ident")" = "$(lps "$plain")" ] || fail "scale 1 on every head changed the answer: $ident"
echo "ok: scale 1 on all 24 heads is bit-identical to no ablation"

zero=$(complete ', "ablate": [{"layer":0,"head":0},{"layer":0,"head":1},{"layer":0,"head":2},{"layer":0,"head":3}]')
mean=$(complete ', "ablate": [{"layer":0,"head":0,"mode":"mean"},{"layer":0,"head":1,"mode":"mean"},{"layer":0,"head":2,"mode":"mean"},{"layer":0,"head":3,"mode":"mean"}]')
[ "$(lps "$zero")" != null ] && [ "$(lps "$mean")" != null ] || fail "ablated completions: $zero $mean"
[ "$(lps "$zero")" != "$(lps "$plain")" ] || fail "zeroing layer 0 changed nothing"
[ "$(lps "$mean")" != "$(lps "$plain")" ] || fail "mean-ablating layer 0 changed nothing"
[ "$(lps "$mean")" != "$(lps "$zero")" ] || fail "mean and zero ablation gave the same answer"
echo "ok: zero and mean ablation of layer 0 change the answer, differently ('$(text "$plain")' / '$(text "$zero")' / '$(text "$mean")')"
[ "$(jq '.usage.prompt_tokens_details.cached_tokens // 0' <<< "$zero")" = 0 ] || fail "an ablated request reused the cache: $zero"
again=$(complete '')
[ "$(lps "$again")" = "$(lps "$plain")" ] || fail "a plain request after ablated ones differs: $again"
[ "$(jq '.usage.prompt_tokens_details.cached_tokens' <<< "$again")" -gt 0 ] ||
    fail "the plain request found no cached prefix: $again"
echo "ok: ablated requests neither reuse nor fill the prompt cache"

chat='"messages": [{"role": "user", "content": "Tell me about the union."}], "max_tokens": 6, "temperature": 0, "logprobs": true'
c0=$(curl -s "$url/v1/chat/completions" -d "{$chat}" | jq -c '[.choices[0].logprobs.content[].logprob]')
c1=$(curl -s "$url/v1/chat/completions" -d "{$chat, \"ablate\": [{\"layer\":1,\"head\":2},{\"layer\":3,\"head\":0}]}" |
    jq -c '[.choices[0].logprobs.content[].logprob]')
[ -n "$c0" ] && [ "$c0" != null ] && [ -n "$c1" ] && [ "$c1" != "$c0" ] || fail "chat with ablate: $c0 / $c1"
echo "ok: chat completions take ablate"

a0=$(curl -s "$url/v1/attention" -d '{"prompt": "We the people", "layers": [2], "heads": [0]}')
a1=$(curl -s "$url/v1/attention" -d '{"prompt": "We the people", "layers": [2], "heads": [0], "ablate": [{"layer":0,"head":1,"mode":"mean","scale":0.5}]}')
[ "$(jq -c '.ablate' <<< "$a1")" = '[{"layer":0,"head":1,"mode":"mean","scale":0.5}]' ] || fail "attention echo: $a1"
[ "$(jq -c '.attention' <<< "$a0")" != "$(jq -c '.attention' <<< "$a1")" ] || fail "ablating layer 0 left layer 2's map alone"
[ "$(jq 'has("ablate")' <<< "$a0")" = false ] || fail "a plain inspection echoes an ablation"
echo "ok: /v1/attention takes ablate and echoes it"

bad() { # body, expected param, a word of the message
    local body code
    body=$(curl -s -w ' %{http_code}' "$url/$1" -d "$2")
    code=${body##* }
    [ "$code" = 400 ] && grep -q "\"param\":\"$3\"" <<< "$body" && grep -q -- "$4" <<< "$body" ||
        fail "$1 $2: expected 400 naming $3 ($4), got $body"
}
bad v1/completions '{"prompt": "We", "session_id": "s1", "ablate": [{"layer":0,"head":0}]}' ablate session
bad v1/completions '{"prompt": "We", "n": 2, "ablate": [{"layer":0,"head":0}]}' n "'n' must be 1"
bad v1/completions '{"prompt": "We", "ablate": [{"layer":6,"head":0}]}' ablate "0..5"
bad v1/chat/completions '{"messages": [{"role":"user","content":"x"}], "ablate": [{"layer":0,"head":4}]}' ablate "0..3"
bad v1/attention '{"prompt": "We", "ablate": [{"layer":0,"head":0,"mode":"half"}]}' ablate "mode"
bad v1/attention '{"prompt": "We", "ablate": {"layer":0}}' ablate "list"
echo "ok: bad ablations are 400s naming the field"
stop_server srv || fail "server exit status"
