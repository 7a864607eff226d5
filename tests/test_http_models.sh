# test_http_models.sh — a server of several models (docs/models.md) on a real server: a models
# directory of two tiny models and a broken file, routing by `model` on the OpenAI, Anthropic and
# Ollama APIs, loading on first use, models_max_loaded unloading the least recently used one,
# POST /models/load and /models/unload (refused while a request uses the model), the broken file
# answered with its name while the others keep serving; /props, /slots, /apply-template,
# /v1/attention, /v1/heads, count_tokens and the sessions API by model (409 for another model's
# session); then [model.NAME] presets under a
# models_memory_mb budget; and a one-model server still taking any `model`.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
status=0
mkdir -p "$TMP/models" "$TMP/cache"
ln -s "$MODEL" "$TMP/models/alpha.gguf"
ln -s "$MODEL" "$TMP/models/beta.gguf"
echo "not a model" > "$TMP/models/broken.gguf"
echo "notes" > "$TMP/models/README.txt"
export XDG_CACHE_HOME=$TMP/cache # the pull cache counts: an empty one here

start_server s --models-dir "$TMP/models" --models-max-loaded 1 --models-wait-s 2 --threads 1 --kv-budget-mb 16 --state-dir "$TMP/state"
base=http://127.0.0.1:$s_PORT
state() { curl -sf "$base/v1/models" | grep -o "\"id\":\"$1\",[^}]*}" | grep -o '"value":"[a-z]*"' | cut -d'"' -f4; }
chat() { curl -s "$base/v1/chat/completions" -d "{\"model\": \"$1\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 3, \"temperature\": 0}"; }

# ---- what is available, nothing loaded yet ----
models=$(curl -sf "$base/v1/models")
check "/v1/models lists alpha, beta and broken, not README.txt" \
    bash -c '[ "$(grep -o "\"id\":\"[a-z]*\"" <<<"$1" | tr "\n" " ")" = "\"id\":\"alpha\" \"id\":\"beta\" \"id\":\"broken\" " ]' _ "$models"
check "alpha is unloaded before its first request" test "$(state alpha)" = unloaded
check "/api/tags lists them as Ollama names" grep -q '"name":"beta:latest"' <<<"$(curl -sf "$base/api/tags")"
check "/api/ps: nothing loaded" test "$(curl -sf "$base/api/ps")" = '{"models":[]}'

# ---- routing and loading on first use ----
a=$(chat alpha)
check "a chat naming alpha loads it and answers as alpha" grep -q '"model":"alpha"' <<<"$a"
check "alpha is loaded" test "$(state alpha)" = loaded
check "/api/ps lists alpha" grep -q '"name":"alpha:latest"' <<<"$(curl -sf "$base/api/ps")"
b=$(chat beta)
check "beta answers as beta" grep -q '"model":"beta"' <<<"$b"
check "models_max_loaded 1: alpha (idle, least recently used) is unloaded for beta" test "$(state alpha)" = unloaded
check "the same prompt at temperature 0 on the same weights: the same text" \
    test "$(grep -o '"content":"[^"]*"' <<<"$a")" = "$(grep -o '"content":"[^"]*"' <<<"$b")"
metrics=$(curl -sf "$base/metrics")
check "/metrics: alpha's unload counted with its model label" grep -q '^attnd_model_unloads_total{model="alpha"} 1$' <<<"$metrics"
check "/metrics: beta loaded" grep -q '^attnd_model_loaded{model="beta"} 1$' <<<"$metrics"
check "/metrics: beta's scheduler series carry its label" grep -q '^attnd_model_generated_tokens_total{model="beta"} 3$' <<<"$metrics"
check "/metrics: none for alpha, unloaded" bash -c '! grep -q "^attnd_model_kv_used_bytes{model=\"alpha\"}" <<<"$1"' _ "$metrics"
o=$(curl -s "$base/api/chat" -d '{"model": "alpha:latest", "messages": [{"role": "user", "content": "Hi"}], "stream": false, "options": {"num_predict": 2}}')
check "Ollama's /api/chat routes alpha:latest" grep -q '"model":"alpha:latest"' <<<"$o"
m=$(curl -s "$base/v1/messages" -d '{"model": "beta", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}')
check "Anthropic's /v1/messages routes beta" grep -q '"model":"beta"' <<<"$m"
r=$(curl -s "$base/v1/responses" -d '{"model": "alpha", "input": "Hi", "max_output_tokens": 2, "store": false}')
check "/v1/responses routes alpha" grep -q '"model":"alpha"' <<<"$r"
c=$(curl -s "$base/v1/completions" -d '{"model": "beta", "prompt": "Once", "max_tokens": 2, "stream": true}')
check "a streamed completion routes beta" grep -q '"model":"beta"' <<<"$c"

# ---- errors: unknown, missing, broken; the others keep serving ----
check_status 404 "an unknown model is a 404" "$base/v1/chat/completions" -d '{"model": "gamma", "messages": [{"role": "user", "content": "Hi"}]}'
check "... listing the names" grep -q "available: alpha, beta, broken" <<<"$(chat gamma)"
check_status 400 "no model on a server of several is a 400" "$base/v1/completions" -d '{"prompt": "Hi"}'
check_status 500 "the broken file is an error answer" "$base/v1/chat/completions" -d '{"model": "broken", "messages": [{"role": "user", "content": "Hi"}]}'
check "... naming it" grep -q "model 'broken' failed to load" <<<"$(chat broken)"
check "/v1/models shows broken as failed, with why" grep -q '"id":"broken",[^}]*"value":"failed","error":"[^"]*not a GGUF' <<<"$(curl -sf "$base/v1/models")"
check "the others keep serving after it" grep -q '"model":"alpha"' <<<"$(chat alpha)"
show=$(curl -s "$base/api/show" -d '{"model": "alpha:latest"}')
check "Ollama's /api/show names its model (${show:0:80})" grep -q '"capabilities":\["completion"' <<<"$show"
check_status 404 "/api/show of an unknown model" "$base/api/show" -d '{"name": "gamma"}'
check "/tokenize with a model tokenizes with it" grep -q '^{"tokens":\[[0-9]' <<<"$(curl -s "$base/tokenize" -d '{"model": "alpha", "content": "Hi"}')"
check "/detokenize with a model" test "$(curl -s "$base/detokenize" -d '{"model": "alpha", "tokens": []}')" = '{"content":""}'
check_status 400 "/tokenize without a model on a server of several" "$base/tokenize" -d '{"content": "Hi"}'
check "/health reports each model's state" grep -q '"models":{"alpha":"loaded","beta":"unloaded","broken":"failed"}' <<<"$(curl -sf "$base/health")"

# ---- the inspection and session endpoints route by model too (?model= on GET and DELETE) ----
props=$(curl -s "$base/props?model=beta")
check "/props of beta, not loaded: its state, without loading it (${props:0:60})" \
    bash -c 'grep -q "\"model_alias\":\"beta\"" <<<"$1" && grep -q "\"status\":{\"value\":\"unloaded\"}" <<<"$1" &&
             grep -q "\"is_sleeping\":true" <<<"$1"' _ "$props"
check "/slots of beta, not loaded: none" test "$(curl -s "$base/slots?model=beta")" = '[]'
check "... and beta stays unloaded" test "$(state beta)" = unloaded
props=$(curl -s "$base/props?model=alpha")
check "/props of alpha, loaded: its context and template" \
    bash -c 'grep -q "\"n_ctx\":512" <<<"$1" && grep -q "\"model_alias\":\"alpha\"" <<<"$1" && grep -q "\"chat_template_source\"" <<<"$1"' _ "$props"
check "/slots of alpha: its sequences (none now)" test "$(curl -s "$base/slots?model=alpha")" = '[]'
check_status 404 "/props of an unknown model" "$base/props?model=gamma"
check "... listing the names" grep -q "model 'gamma' not found; available: alpha, beta, broken" <<<"$(curl -s "$base/slots?model=gamma")"
check_status 400 "/props without a model on a server of several" "$base/props"
hi='"messages": [{"role": "user", "content": "Hi"}]'
check "/apply-template renders alpha's template" grep -q '"prompt":".*Hi' <<<"$(curl -s "$base/apply-template" -d "{\"model\": \"alpha\", $hi}")"
check_status 404 "/apply-template of an unknown model" "$base/apply-template" -d "{\"model\": \"gamma\", $hi}"
check "/v1/messages/count_tokens on alpha" grep -q '"input_tokens":[1-9]' \
    <<<"$(curl -s "$base/v1/messages/count_tokens" -d "{\"model\": \"alpha\", $hi}")"
check_status 404 "/v1/messages/count_tokens of an unknown model" "$base/v1/messages/count_tokens" -d "{\"model\": \"gamma\", $hi}"
att=$(curl -s "$base/v1/attention" -d '{"model": "alpha", "prompt": "Once upon", "layers": [0], "heads": [0]}')
check "/v1/attention on alpha answers as alpha (${att:0:60})" grep -q '"model":"alpha"' <<<"$att"
check_status 404 "/v1/attention of an unknown model" "$base/v1/attention" -d '{"model": "gamma", "prompt": "Once"}'
check "/v1/heads?model=alpha: alpha's head roles" grep -q '"object":"heads","model":"alpha"' <<<"$(curl -s "$base/v1/heads?model=alpha")"
check_status 404 "/v1/heads of an unknown model" "$base/v1/heads?model=gamma"
check "POST /v1/sessions on alpha" grep -q '"id":"talk-a"' <<<"$(curl -s "$base/v1/sessions" -d '{"model": "alpha", "id": "talk-a"}')"
check "GET /v1/sessions?model=alpha lists it" grep -q '"id":"talk-a"' <<<"$(curl -s "$base/v1/sessions?model=alpha")"
check_status 200 "GET /v1/sessions/talk-a?model=alpha" "$base/v1/sessions/talk-a?model=alpha"
check_status 404 "sessions of an unknown model" "$base/v1/sessions?model=gamma"
check "beta's list does not hold alpha's session" bash -c '! grep -q talk-a <<<"$1"' _ "$(curl -s "$base/v1/sessions?model=beta")"
# beta is loaded now and alpha unloaded (models_max_loaded 1): alpha's session is found in its files
check_status 409 "alpha's session named with beta is a 409" "$base/v1/sessions/talk-a?model=beta"
check "... naming alpha" grep -q "belongs to model 'alpha', not 'beta'" <<<"$(curl -s "$base/v1/sessions/talk-a?model=beta")"
check_status 409 "... to DELETE" -X DELETE "$base/v1/sessions/talk-a?model=beta"
check_status 409 "... to fork" "$base/v1/sessions/talk-a/fork" -d '{"model": "beta"}'
check_status 409 "... as a new session's id on beta" "$base/v1/sessions" -d '{"model": "beta", "id": "talk-a"}'
check_status 409 "... as the session_id of a completion on beta" "$base/v1/completions" \
    -d '{"model": "beta", "prompt": "Hi", "max_tokens": 1, "session_id": "talk-a"}'
check_status 404 "a session no model has is a 404" "$base/v1/sessions/nobody?model=beta"
check "a fork on alpha, loaded again for it" grep -q '"forked_from":"talk-a"' \
    <<<"$(curl -s "$base/v1/sessions/talk-a/fork" -d '{"model": "alpha", "id": "talk-b"}')"
check_status 409 "the fork is alpha's too" "$base/v1/sessions/talk-b?model=beta"
check_status 200 "DELETE /v1/sessions/talk-a?model=alpha" -X DELETE "$base/v1/sessions/talk-a?model=alpha"
check_status 404 "... gone" "$base/v1/sessions/talk-a?model=alpha"

# ---- explicit load and unload; never under a running request ----
check "alpha loaded, beta unloaded, as before" test "$(state alpha)/$(state beta)" = loaded/unloaded
check_status 200 "POST /models/unload alpha" "$base/models/unload" -d '{"model": "alpha"}'
check "alpha is unloaded" test "$(state alpha)" = unloaded
check_status 400 "unloading it again: it is not loaded" "$base/models/unload" -d '{"model": "alpha"}'
check_status 404 "unloading an unknown model" "$base/models/unload" -d '{"model": "gamma"}'
check_status 200 "POST /models/load beta" "$base/models/load" -d '{"model": "beta"}'
for _ in $(seq 100); do [ "$(state beta)" = loaded ] && break; sleep 0.05; done
check "beta loads in the background" test "$(state beta)" = loaded
# a long request keeps its model in use until it is stopped: 64 streamed choices of 480 tokens
# (seconds of work for any CPU; the server holds what it writes, so a slow reader alone would not)
long_body() { echo "{\"model\": \"$1\", \"prompt\": [$(printf '"Once upon a time %d",' $(seq 15))\"Once\"], \"max_tokens\": 480, \"n\": 4, \"stream\": true, \"ignore_eos\": true}"; }
curl -s "$base/v1/completions" -N -d "$(long_body beta)" >/dev/null &
slow=$!
for _ in $(seq 100); do curl -sf "$base/metrics" | grep -q '^attnd_model_requests_active{model="beta"} 1$' && break; sleep 0.05; done
check_status 409 "unloading beta while a request uses it is a 409" "$base/models/unload" -d '{"model": "beta"}'
check "... and beta stays loaded" test "$(state beta)" = loaded
# alpha needs beta's room (models_max_loaded 1) while beta is busy: it waits, beta drains
chat alpha > "$TMP/waited.json" & waiting=$!
for _ in $(seq 100); do curl -sf "$base/metrics" | grep -q '^attnd_model_requests_active{model="alpha"} 1$' && break; sleep 0.05; done
check "a request for alpha waits for room while beta is busy (no 503)" \
    bash -c 'kill -0 "$1" && [ "$2" = unloaded ]' _ "$waiting" "$(state alpha)"
kill "$slow" 2>/dev/null; wait "$slow" 2>/dev/null
wait "$waiting"
check "once beta's request ends, alpha takes its room and answers" grep -q '"model":"alpha"' "$TMP/waited.json"
check "beta drained and unloaded for it" test "$(state beta)" = unloaded
# past models_wait_s (2 s here) the wait ends in a 503 with Retry-After
curl -s "$base/v1/completions" -N -d "$(long_body alpha)" >/dev/null &
slow=$!
for _ in $(seq 100); do curl -sf "$base/metrics" | grep -q '^attnd_model_requests_active{model="alpha"} 1$' && break; sleep 0.05; done
hdrs=$(curl -s -D - -o "$TMP/nowait.json" "$base/v1/chat/completions" -d '{"model": "beta", "messages": [{"role": "user", "content": "Hi"}]}')
check "beta's wait for alpha's room ends in a 503 with Retry-After (${hdrs:0:40})" \
    bash -c 'grep -q "^HTTP/1.1 503" <<<"$1" && grep -qi "^Retry-After: " <<<"$1"' _ "$hdrs"
check "... that says why" grep -q "stayed in use" "$TMP/nowait.json"
kill "$slow" 2>/dev/null; wait "$slow" 2>/dev/null
for _ in $(seq 100); do curl -sf "$base/metrics" | grep -q '^attnd_model_requests_active{model="alpha"} 0$' && break; sleep 0.05; done
check "alpha, no longer drained, serves again" grep -q '"model":"alpha"' <<<"$(chat alpha)"
listed=$("$ATTND_BINARY" models --url "$base")
check "attnd models --url: alpha loaded, with its context" grep -q '^alpha  *loaded .* MiB  context 512$' <<<"$listed"
check "attnd models --url: beta unloaded, broken failed" \
    bash -c 'grep -q "^beta  *unloaded" <<<"$1" && grep -q "^broken  *failed" <<<"$1"' _ "$listed"
# ---- a model's sessions are saved when it unloads and found again when it loads ----
r1=$(curl -s "$base/v1/responses" -d '{"model": "alpha", "input": "Hi", "max_output_tokens": 2}')
id=$(grep -o '"id":"resp_[0-9a-f]*"' <<<"$r1" | head -1 | cut -d'"' -f4)
check "a stored turn on alpha keeps its session in state_dir/models/alpha" test -f "$TMP/state/models/alpha/$id.session.json"
size1=$(stat -c %s "$TMP/state/models/alpha/$id.session.json" 2>/dev/null || echo 0)
check_status 200 "alpha unloads" "$base/models/unload" -d '{"model": "alpha"}'
r2=$(curl -s "$base/v1/responses" -d "{\"model\": \"alpha\", \"input\": \"More\", \"previous_response_id\": \"$id\", \"max_output_tokens\": 2}")
check "the next turn continues it after alpha loads again (${r2:0:120})" grep -q "\"previous_response_id\":\"$id\"" <<<"$r2"
check_status 409 "a turn naming another model than its chain's is a 409" "$base/v1/responses" \
    -d "{\"model\": \"beta\", \"input\": \"More\", \"previous_response_id\": \"$id\", \"max_output_tokens\": 2}"
check "... saying whose it is" grep -q "belongs to model 'alpha'" <<<"$(curl -s "$base/v1/responses" \
    -d "{\"model\": \"beta\", \"input\": \"More\", \"previous_response_id\": \"$id\", \"max_output_tokens\": 2}")"
check "... on the same session, which grew" test "$(stat -c %s "$TMP/state/models/alpha/$id.session.json")" -gt "$size1"
id2=$(grep -o '"id":"resp_[0-9a-f]*"' <<<"$r2" | head -1 | cut -d'"' -f4)
check_status 200 "deleting the chain's first response" -X DELETE "$base/v1/responses/$id"
check "... keeps the session its second response still uses" test -f "$TMP/state/models/alpha/$id.session.json"
check_status 200 "beta unloads alpha for a turn (one model at a time)" "$base/v1/chat/completions" \
    -d '{"model": "beta", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}'
check_status 200 "deleting the chain's last response while alpha is unloaded" -X DELETE "$base/v1/responses/$id2"
check "... deletes the chain's session in alpha's store" test ! -e "$TMP/state/models/alpha/$id.session.json"
stop_server s || bad "SIGTERM"

# ---- presets under a memory budget ----
size=$(stat -L -c %s "$MODEL")
budget=$(( (2 * (size + 16 * 1048576) + 1048576) / 1048576 )) # two models of this size and 16 MiB of KV fit, not three
cat > "$TMP/attnd.conf" <<EOF
kv_budget_mb = 16
models_memory_mb = $budget
[model.one]
model = $MODEL
ctx_size = 128
[model.two]
model = $TMP/models/alpha.gguf
[model.three]
model = $TMP/models/beta.gguf
[model.four]
model = $MODEL
draft_model = $MODEL
EOF
start_server p --config "$TMP/attnd.conf" --threads 2 --no-models-cache --model "$MODEL" --model-alias solo
base=http://127.0.0.1:$p_PORT
check "--model beside presets is one more model, named by --model-alias" test "$(state solo)" = unloaded
msize() { curl -sf "$base/v1/models" | M="$1" node -e 'const d = JSON.parse(require("fs").readFileSync(0, "utf8"));
    process.stdout.write(String((d.data.find((m) => m.id === process.env.M) || {}).size))'; }
check "a preset's draft_model file counts in its size ($(msize one) + $size = $(msize four))" \
    test "$(msize four)" = "$(( $(msize one) + size ))"
check "a preset's ctx_size is its own" grep -q '"id":"one",.*"context_length":128' <<<"$(chat one >/dev/null; curl -sf "$base/v1/models")"
chat two >/dev/null
check "two models fit the budget" test "$(state one)/$(state two)" = loaded/loaded
chat three >/dev/null
check "the third unloads the least recently used (one)" test "$(state one)/$(state two)/$(state three)" = unloaded/loaded/loaded
check "a session on two" grep -q '"id":"s2"' <<<"$(curl -s "$base/v1/sessions" -d '{"model": "two", "id": "s2"}')"
check_status 409 "three, loaded beside two, answers 409 for two's session (no state_dir: found in two's memory)" \
    "$base/v1/sessions/s2?model=three"
shared() { curl -sf "$base/metrics" | grep "^attnd_model_steps_shared_total{model=\"$1\"}" | cut -d' ' -f2; }
check "one model working alone runs on all the threads (no step shared)" test "$(shared two)/$(shared three)" = 0/0
long() { curl -s "$base/v1/completions" -d "{\"model\": \"$1\", \"prompt\": \"Once\", \"max_tokens\": 240, \"n\": 2, \"ignore_eos\": true}" >/dev/null; }
long two & bg=$!
long three
wait "$bg"
check "two models working at once share the threads: each ran steps on its share ($(shared two), $(shared three))" \
    bash -c '[ "$1" -gt 0 ] && [ "$2" -gt 0 ]' _ "$(shared two)" "$(shared three)"
stop_server p || bad "SIGTERM (presets)"

# ---- with API keys, loading and unloading need the admin key ----
start_server k --models-dir "$TMP/models" --no-models-cache --threads 1 --kv-budget-mb 16 --api-key user1 --admin-api-key boss1
base=http://127.0.0.1:$k_PORT
check_status 401 "no key: 401" "$base/models/load" -d '{"model": "alpha"}'
check_status 403 "a user's key cannot load a model" "$base/models/load" -H 'Authorization: Bearer user1' -d '{"model": "alpha"}'
check_status 403 "... nor unload one" "$base/models/unload" -H 'Authorization: Bearer user1' -d '{"model": "alpha"}'
check_status 200 "the admin key loads it" "$base/models/load" -H 'Authorization: Bearer boss1' -d '{"model": "alpha"}'
check_status 200 "a user's key still generates" "$base/v1/completions" -H 'Authorization: Bearer user1' -d '{"model": "beta", "prompt": "Hi", "max_tokens": 1}'
stop_server k || bad "SIGTERM (keys)"

# ---- one model: any `model` is accepted, as always ----
start_server o --model "$MODEL" --threads 1
base=http://127.0.0.1:$o_PORT
check "a one-model server answers whatever model is named" grep -q '"model":"attnd-sotu"' <<<"$(chat whatever)"
check_status 400 "a one-model server has no /models/load" "$base/models/load" -d '{"model": "x"}'
stop_server o || bad "SIGTERM (one model)"
exit $status
