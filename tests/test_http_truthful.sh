# test_http_truthful.sh — answers that say what is true (issue 51): every error body carries
# request_id (context_length_exceeded too), an unknown session's 404 says how to create one and
# mentions load balancers only where one can be in front, and the start-up tenants line matches
# the configuration (no key configured says so).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
status=0
start_server s --model "$MODEL" --threads 1
base=http://127.0.0.1:$s_PORT

check "tenants line: no key says so ($(grep -o 'tenants: .\{0,60\}' "$s_LOG"))" grep -q 'tenants: no API key' "$s_LOG"
check "tenants line: not '1 key'" bash -c '! grep -q "tenants: 1 key" "$1"' _ "$s_LOG"

# context_length_exceeded: a prompt of 600 tokens on a 512-token context
long=$(printf '1,%.0s' $(seq 600))
body=$(curl -s -H 'X-Request-Id: rid-long-1' "$base/v1/completions" -d "{\"prompt\": [${long%,}], \"max_tokens\": 1}")
check "context_length_exceeded: the code" grep -q '"code":"context_length_exceeded"' <<<"$body"
check "context_length_exceeded: request_id in the body (${body:0:120}...)" grep -q '"request_id":"rid-long-1"' <<<"$body"
body=$(curl -s -H 'X-Request-Id: rid-long-2' "$base/completion" -d "{\"prompt\": [${long%,}], \"n_predict\": 1}")
check "/completion's context_length_exceeded: request_id" grep -q '"request_id":"rid-long-2"' <<<"$body"

# an unknown session: create it first; no balancer on a single server
body=$(curl -s "$base/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Hi"}], "session_id": "never-made"}')
check "unknown session: how to create it (${body:0:200})" grep -q 'POST /v1/sessions {\\"id\\": \\"never-made\\"}' <<<"$body"
check "unknown session: no load balancer on one server" bash -c '! grep -q "load balancer" <<<"$1"' _ "$body"
check "unknown session: request_id" grep -q '"request_id":"req-' <<<"$body"
# a proxy sent the header for another id: the balancer hint is due
body=$(curl -s -H 'X-Session-Id: other' "$base/v1/chat/completions" \
    -d '{"messages": [{"role": "user", "content": "Hi"}], "session_id": "never-made"}')
check "unknown session behind a proxy: the X-Session-Id hint" grep -q 'load balancer.*X-Session-Id' <<<"$body"

# ignore_eos as llama-server takes it: "Thank you." ends after 2 tokens at temperature 0 without it
tok() { grep -o "\"$1\":[0-9]*" | grep -o '[0-9]*$'; }
n=$(curl -s "$base/v1/completions" -d '{"prompt": "Thank you.", "max_tokens": 50, "temperature": 0}' | tok completion_tokens)
check "without ignore_eos the answer ends early ($n tokens)" test "$n" -lt 50
n=$(curl -s "$base/v1/completions" -d '{"prompt": "Thank you.", "max_tokens": 50, "temperature": 0, "ignore_eos": true}' | tok completion_tokens)
check "/v1/completions ignore_eos: all 50 tokens ($n)" test "$n" = 50
n=$(curl -s "$base/completion" -d '{"prompt": "Thank you.", "n_predict": 50, "temperature": 0, "ignore_eos": true}' | tok tokens_predicted)
check "/completion ignore_eos: all 50 tokens ($n)" test "$n" = 50
n=$(curl -s "$base/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Thank you."}], "max_tokens": 40, "temperature": 0, "ignore_eos": true}' | tok completion_tokens)
check "/v1/chat/completions ignore_eos: all 40 tokens ($n)" test "$n" = 40
n=$(curl -s "$base/v1/responses" -d '{"input": "Thank you.", "max_output_tokens": 40, "temperature": 0, "ignore_eos": true, "store": false}' | tok output_tokens)
check "/v1/responses ignore_eos: all 40 tokens ($n)" test "$n" = 40
check_status 400 "ignore_eos must be a boolean" "$base/v1/completions" -d '{"prompt": "x", "ignore_eos": 3}'
# llama-server's other sampling fields: off values pass, the rest are refused by name
check_status 200 "dry_*, xtc_*, mirostat, min_keep, n_probs at their off values" "$base/completion" \
    -d '{"prompt": "x", "n_predict": 2, "mirostat": 0, "mirostat_tau": 5, "dry_multiplier": 0, "dry_base": 1.75, "xtc_probability": 0, "xtc_threshold": 0.1, "min_keep": 0, "n_probs": 0, "typical_p": 1}'
for f in '"mirostat": 2' '"dry_multiplier": 0.8' '"xtc_probability": 0.5' '"min_keep": 5' '"n_probs": 3'; do
    body=$(curl -s "$base/completion" -d "{\"prompt\": \"x\", \"n_predict\": 2, $f}")
    name=${f%%\":*}; name=${name#\"}
    check "$f is refused naming $name" grep -q "\"param\":\"$name\"" <<<"$body"
done
body=$(curl -s "$base/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "x"}], "mirostat": 1}')
check "chat refuses mirostat too" grep -q '"param":"mirostat"' <<<"$body"
stop_server s || bad "SIGTERM"

start_server k --model "$MODEL" --threads 1 --api-key sk-one
check "tenants line: one key ($(grep -o 'tenants: .\{0,30\}' "$k_LOG"))" grep -q 'tenants: 1 key, each keeps' "$k_LOG"
stop_server k || bad "SIGTERM (k)"
exit $status
