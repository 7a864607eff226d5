#!/usr/bin/env bash
# test_http_session_fork.sh — POST /v1/sessions/{id}/fork with the shipped model and a state
# directory: the fork holds the source's history (or its first `at` tokens) and shares its KV
# blocks (the pool's bytes in use do not grow), its next turn reuses that KV, both branches
# continue alike and apart without disturbing each other, it survives a restart, bad asks are
# 404 / 400 / 409, and a fork counts against the key's session quota (429 past it).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
MODEL=$here/../models/attnd-sotu.gguf
state=$TMP/state

start_server srv --model "$MODEL" --threads 2 --kv-f32 --state-dir "$state"
url="http://127.0.0.1:$srv_PORT"
kv_used() { curl -s "$url/metrics" | awk '/^attnd_kv_bytes_used /{print $2}'; }
turn() { # session, prompt: the completion's text and cached tokens
    curl -s "$url/v1/completions" -d "{\"prompt\": \"$2\", \"session_id\": \"$1\", \"max_tokens\": 8, \"temperature\": 0}" |
        jq -c '[.choices[0].text, .usage.prompt_tokens_details.cached_tokens]'
}
curl -sf "$url/v1/sessions" -d '{"id": "trunk"}' >/dev/null || fail "create"
first=$(turn trunk "We the people")
text=$(jq -r '.[0]' <<< "$first")
used0=$(kv_used)
f=$(curl -s -X POST "$url/v1/sessions/trunk/fork" -d '{"id": "branch"}')
jq -e '.id == "branch" and .forked_from == "trunk" and .tokens == 12 and .kv_tokens == 12 and .at == 12' <<< "$f" \
    >/dev/null || fail "fork: $f"
[ "$(kv_used)" = "$used0" ] || fail "the fork copied KV: $used0 -> $(kv_used) bytes in use"
echo "ok: the fork holds the 12-token history and shares the KV blocks ($used0 bytes in use before and after)"

next="We the people$text and"
b=$(turn branch "$next")
[ "$(jq '.[1]' <<< "$b")" -ge 11 ] || fail "the branch's turn did not reuse the forked KV: $b"
t=$(turn trunk "$next")
before=$(curl -s "$url/v1/sessions/trunk" | jq -c '[.tokens, .kv_tokens]')
[ "$(jq '.[0]' <<< "$t")" = "$(jq '.[0]' <<< "$b")" ] || fail "trunk and branch continue differently: $t / $b"
other=$(turn branch "We the people$text but")
after=$(curl -s "$url/v1/sessions/trunk" | jq -c '[.tokens, .kv_tokens]')
[ "$after" = "$before" ] && [ "$(jq '.[0]' <<< "$other")" != "$(jq '.[0]' <<< "$b")" ] ||
    fail "the branch's other turn: trunk $before -> $after, $other / $b"
again=$(turn trunk "$next")
[ "$(jq '.[0]' <<< "$again")" = "$(jq '.[0]' <<< "$t")" ] || fail "the trunk's answer changed after the branch's turns"
echo "ok: the branch reuses the KV ($(jq '.[1]' <<< "$b") cached), continues as the trunk does, and apart from it"

c=$(curl -s -X POST "$url/v1/sessions/trunk/fork" -d '{"at": 3}')
jq -e '.tokens == 3 and .at == 3 and (.id | startswith("sess-"))' <<< "$c" >/dev/null || fail "fork at 3: $c"
cid=$(jq -r .id <<< "$c")
code() { curl -s -o /dev/null -w '%{http_code}' -X POST "$url/v1/sessions/$1/fork" -d "$2"; }
[ "$(code nope '{}')" = 404 ] || fail "fork of a missing session"
[ "$(code trunk '{"at": 999}')" = 400 ] || fail "at past the history"
[ "$(code trunk '{"at": "x"}')" = 400 ] || fail "a bad at"
[ "$(code trunk '{"id": "branch"}')" = 409 ] || fail "a taken id"
[ "$(code trunk '{"id": 5}')" = 400 ] || fail "a bad id"
echo "ok: fork at a point; missing, taken and bad asks are 404 / 409 / 400"
stop_server srv || fail "server exit status"

start_server again --model "$MODEL" --threads 2 --kv-f32 --state-dir "$state"
url="http://127.0.0.1:$again_PORT"
[ "$(curl -s "$url/v1/sessions/branch" | jq .tokens)" -gt 12 ] || fail "the branch did not survive a restart"
[ "$(curl -s "$url/v1/sessions/$cid" | jq .tokens)" = 3 ] || fail "the fork at 3 did not survive a restart"
echo "ok: forks are durable as any session"
stop_server again || fail "server exit status"

ATTND_SESSION_EVICT_LRU=false start_server quota --model "$MODEL" --threads 1 --max-sessions-per-key 2
url="http://127.0.0.1:$quota_PORT"
curl -sf "$url/v1/sessions" -d '{"id": "q1"}' >/dev/null || fail "create under the quota"
[ "$(code q1 '{"id": "q2"}')" = 200 ] || fail "a fork within the quota"
body=$(curl -s -w ' %{http_code}' -X POST "$url/v1/sessions/q1/fork" -d '{"id": "q3"}')
[ "${body##* }" = 429 ] && grep -q max_sessions_per_key <<< "$body" || fail "a fork past the quota: $body"
[ "$(curl -s "$url/v1/sessions" | jq '.data | length')" = 2 ] || fail "the refused fork left a session"
echo "ok: a fork counts against max_sessions_per_key (429 past it, nothing left behind)"
stop_server quota || fail "server exit status"
