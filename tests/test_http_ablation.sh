#!/usr/bin/env bash
# test_http_ablation.sh — "ablate" on /v1/completions, /v1/chat/completions and /v1/attention with
# the shipped model: scale 1 on every head changes nothing (bit-identical log-probabilities), zero
# and mean ablation change the answer and differ from each other, an ablated request neither
# reuses nor fills the prompt cache (a plain request after it gets the first plain answer and
# its cached tokens), the attention answer echoes the ablation, and bad asks are 400s naming
# the field (a session or n > 1 with ablate, heads out of the model's range, bad modes).
# "measure": "ablation" on /v1/attention: 24 heads with their cost, and a head's change of
# log P(target) equals what /v1/completions with that head ablated gives (echo + logprobs).
# GET /v1/heads: 24 heads, labels by the published thresholds, the same scores as `attnd heads
# --json`, and the second answer is the cached first.
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

S="The President of the United States said that the state of the union is strong and the people of the United States"
sw=$(curl -s "$url/v1/attention" -d "{\"prompt\": \"$S\", \"measure\": \"ablation\", \"ablate_from\": 0, \"target_token\": \".\"}")
[ "$(jq '.heads | length' <<< "$sw")" = 24 ] && [ "$(jq '.target.id == .predicted.id' <<< "$sw")" = true ] || fail "sweep: $sw"
[ "$(jq '[.heads[] | select(.kl < 0)] | length' <<< "$sw")" = 0 ] || fail "a negative KL: $sw"
jq -e '.cost.sequences == 25 and .cost.batch_size >= 1 and .cost.batches >= 2 and .cost.wall_ms >= 0 and .ablate_from == 0' \
    <<< "$sw" >/dev/null || fail "sweep cost: $(jq -c .cost <<< "$sw")"
ids=$(jq -c '[.tokens[].id] + [.target.id]' <<< "$sw")
best=$(jq -c '.heads | max_by(.kl) | [.layer, .head, .delta_logprob]' <<< "$sw")
read -r L H D <<< "$(jq -r '@tsv' <<< "$best")"
echo_lp() { curl -s "$url/v1/completions" -d "{\"prompt\": $ids, \"max_tokens\": 0, \"echo\": true, \"logprobs\": 0$1}" |
    jq '.choices[0].logprobs.token_logprobs[-1]'; }
lp0=$(echo_lp '') lp1=$(echo_lp ", \"ablate\": [{\"layer\": $L, \"head\": $H}]")
base=$(jq '.target.logprob' <<< "$sw")
python3 -c "import sys; b,d,l0,l1=map(float,sys.argv[1:]); sys.exit(0 if abs(l0-b)<1e-3 and abs((l1-l0)-d)<1e-3 else 1)" \
    "$base" "$D" "$lp0" "$lp1" || fail "sweep head ($L, $H): log P $base, change $D; completions say $lp0 -> $lp1"
echo "ok: the sweep's biggest head (layer $L, head $H: change $D) matches an ablated completion ($lp0 -> $lp1)"
one=$(curl -s "$url/v1/attention" -d "{\"prompt\": \"$S\", \"measure\": \"ablation\", \"target_position\": 5, \"ablate_mode\": \"mean\"}")
jq -e '.target.position == 5 and (.tokens | length) == 5 and .ablate_from == 4 and .ablate_mode == "mean" and (.heads | length) == 24' \
    <<< "$one" >/dev/null || fail "target_position sweep: $(jq -c 'del(.heads)' <<< "$one")"
echo "ok: a target position measures that prompt token, from the position before it"
bad v1/attention '{"prompt": "We the people", "measure": "heads"}' measure ablation
bad v1/attention '{"prompt": "We the people", "measure": "ablation", "target_position": 0}' target_position ">= 1"
bad v1/attention '{"prompt": "We the people", "measure": "ablation", "target_position": 40}' target_position "outside"
bad v1/attention '{"prompt": "We the people", "measure": "ablation", "target_token": "the United States"}' target_token "one token"
bad v1/attention '{"prompt": "We the people", "measure": "ablation", "ablate_from": 30}' ablate_from "measured position"
bad v1/attention '{"prompt": "We the people", "measure": "ablation", "layers": [1]}' layers "cannot be combined"
bad v1/attention '{"prompt": "We the people", "measure": "ablation", "max_tokens": 4}' max_tokens "cannot be combined"
bad v1/attention '{"prompt": "We the people", "target_position": 2}' target_position "measure"
echo "ok: bad sweeps are 400s naming the field"

h1=$(curl -s "$url/v1/heads") h2=$(curl -s "$url/v1/heads")
[ "$(jq '.heads | length' <<< "$h1")" = 24 ] || fail "heads: $h1"
[ "$h1" = "$h2" ] || fail "the second /v1/heads answer is not the cached first"
jq -e '.thresholds as $t | all(.heads[]; ((.previous_token >= $t.previous_token) == (.labels | index("previous_token") != null))
    and ((.induction >= $t.induction) == (.labels | index("induction") != null))
    and ((.sink >= $t.sink) == (.labels | index("sink") != null)))' <<< "$h1" >/dev/null || fail "labels vs thresholds: $h1"
cli=$("$ATTND_BINARY" heads --json --no-cache --model "$MODEL" --kv-type f32 --threads 1) || fail "attnd heads"
[ "$(jq -c '[.heads[] | [.previous_token, .induction, .sink, .local, .labels]]' <<< "$cli")" = \
  "$(jq -c '[.heads[] | [.previous_token, .induction, .sink, .local, .labels]]' <<< "$h1")" ] ||
    fail "attnd heads and GET /v1/heads disagree"
echo "ok: GET /v1/heads is cached and agrees with attnd heads ($(jq -c '[.heads[] | select(.labels | length > 0) | "\(.layer).\(.head) \(.labels | join(","))"]' <<< "$h1"))"
stop_server srv || fail "server exit status"
