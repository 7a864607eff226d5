#!/usr/bin/env bash
# test_deploy_monitoring.sh — what an operator starts from in deploy/: a live server's /metrics
# passes `promtool check metrics` with the latency histograms filled in as requests ran (one
# time-to-first-token per request, one inter-token gap per token after a sequence's first);
# the Prometheus config and alert rules load (`promtool check`), the rules pass their unit tests
# (deploy/prometheus/alerts.test.yml), and every metric the Grafana dashboard queries is one the
# server exports; X-Request-Id comes back (the client's, or a new one), in error bodies and in the
# request's log lines. Needs promtool (Debian `prometheus`, installed by scripts/dev.sh test).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
command -v promtool >/dev/null || { echo "FAIL: promtool not installed (scripts/dev.sh test installs prometheus)"; exit 1; }
DEPLOY=$here/../deploy
rc=0
check() { if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAIL: $1: got '$2', expected '$3'"; rc=1; fi; }

out=$(cd "$DEPLOY/prometheus" && promtool check config prometheus.yml 2>&1) || { echo "$out"; rc=1; }
out=$(cd "$DEPLOY/prometheus" && promtool check rules alerts.yml 2>&1) || { echo "$out"; rc=1; }
out=$(cd "$DEPLOY/prometheus" && promtool test rules alerts.test.yml 2>&1)
check "alert rules pass their unit tests" "$?" 0
[ $rc = 0 ] || echo "$out"

start_server srv --model "$here/../models/attnd-sotu.gguf" --threads 1
base=http://127.0.0.1:$srv_PORT
post() { curl -s -o /dev/null -w '%{http_code}' "$base$1" -H 'Content-Type: application/json' -d "$2"; }
check "completion" "$(post /v1/completions '{"prompt":"We the people","max_tokens":5,"temperature":0,"ignore_eos":true}')" 200
check "streamed completion" "$(post /v1/completions '{"prompt":"The Union","max_tokens":7,"temperature":0,"stream":true,"ignore_eos":true}')" 200
check "chat" "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"ignore_eos":true}')" 200
check "an Anthropic message" "$(post /v1/messages '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3}')" 200
check "an Ollama generate" "$(post /api/generate '{"model":"attnd-sotu","prompt":"Hi","stream":false,"options":{"num_predict":3}}')" 200
check "a 404" "$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/nothing")" 404
m=$(curl -s "$base/metrics")
lint=$(promtool check metrics <<<"$m" 2>&1)
check "promtool check metrics is clean" "$lint" ""
val() { awk -v k="$1" '$1 == k { print $2 }' <<<"$m"; }
# the histograms have a series per API: the three OpenAI requests, one Anthropic, one Ollama
oai='{api="openai"}'
check "a time to first token per request" "$(val attnd_time_to_first_token_seconds_count$oai)" 3
check "a queue wait per request" "$(val attnd_request_queue_time_seconds_count$oai)" 3
check "a duration per request" "$(val attnd_e2e_request_latency_seconds_count$oai)" 3
check "prompt tokens per request" "$(val attnd_request_prompt_tokens_count$oai)" 3
check "generated tokens per sequence, summed" "$(val attnd_request_generation_tokens_sum$oai)" "16.000000"
check "an inter-token gap per token after the first" "$(val attnd_inter_token_latency_seconds_count$oai)" 13
check "the +Inf bucket holds every observation" "$(val 'attnd_time_to_first_token_seconds_bucket{api="openai",le="+Inf"}')" 3
check "Anthropic's request in its own series" "$(val 'attnd_e2e_request_latency_seconds_count{api="anthropic"}')" 1
check "Ollama's request in its own series" "$(val 'attnd_e2e_request_latency_seconds_count{api="ollama"}')" 1
buckets=$(grep '^attnd_inter_token_latency_seconds_bucket{api="openai"' <<<"$m" | awk '{print $2}' | tr '\n' ' ')
sorted=$(tr ' ' '\n' <<<"$buckets" | grep . | sort -n | tr '\n' ' ')
check "buckets are cumulative" "$buckets" "$sorted"
check "2xx by class" "$(val 'attnd_requests_by_class_total{endpoint="completions",class="2xx"}')" 2
for g in attnd_requests_waiting attnd_requests_running attnd_requests_swapped attnd_kv_cache_usage_ratio attnd_sessions; do
    [ -n "$(val $g)" ] || { echo "FAIL: gauge $g missing"; rc=1; }
done

# request ids: the client's is kept, a bad one replaced, and both tie the logs to the answer
hdr() { curl -s -D - -o "$TMP/body" "$@" | tr -d '\r' | sed -n 's/^[Xx]-[Rr]equest-[Ii]d: //p'; }
check "a client's X-Request-Id comes back" "$(hdr -H 'X-Request-Id: trace-77.a:b_c' "$base/health")" "trace-77.a:b_c"
made=$(hdr -H 'X-Request-Id: bad id with spaces' "$base/health")
[[ "$made" =~ ^req-[0-9a-f]{24}$ ]] && echo "ok: a malformed id is replaced ($made)" || { echo "FAIL: replaced id '$made'"; rc=1; }
made=$(hdr "$base/v1/nothing")
[[ "$made" =~ ^req-[0-9a-f]{24}$ ]] && echo "ok: an id is made when none is sent" || { echo "FAIL: made id '$made'"; rc=1; }
check "an error body carries the id" "$(node -p 'JSON.parse(require("fs").readFileSync(process.argv[1])).error.request_id' "$TMP/body")" "$made"
hdr -H 'X-Request-Id: turn-9' "$base/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"We","max_tokens":2}' >/dev/null
sleep 0.2
grep -q "attnd\[info\] req=turn-9 POST /v1/completions 200 .* id=cmpl-" "$srv_LOG" &&
    echo "ok: the access log line has the request id and the completion id" ||
    { echo "FAIL: no access log line for turn-9"; grep turn-9 "$srv_LOG"; rc=1; }
grep -q "req=$made GET /v1/nothing 404" "$srv_LOG" && echo "ok: a refused request's log line has its id" ||
    { echo "FAIL: no log line for $made"; rc=1; }

# every metric the dashboard queries exists
names=$(node -e '
const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const s = new Set();
for (const p of d.panels) for (const t of p.targets) for (const n of t.expr.match(/attnd_[a-z0-9_]+/g) || []) s.add(n);
console.log([...s].join("\n"));' "$DEPLOY/grafana/attnd-dashboard.json") || { echo "FAIL: dashboard JSON"; rc=1; }
n=0 missing=0
for name in $names; do
    n=$((n + 1))
    grep -q "^$name[ {]" <<<"$m" || { echo "FAIL: the dashboard queries $name, which /metrics does not export"; missing=1; }
done
[ "$n" -ge 10 ] || { echo "FAIL: only $n metrics in the dashboard"; missing=1; }
[ $missing = 0 ] && echo "ok: the dashboard's $n metrics are all exported" || rc=1
stop_server srv || rc=1
exit $rc
