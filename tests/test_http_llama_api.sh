# test_http_llama_api.sh — llama-server's inspection endpoints on a real server: GET /props (the
# template and its source, defaults, context, build), GET /slots (running sequences, never their
# prompt), POST /apply-template (byte for byte what `attnd template` prints), and floats written
# as the number a user typed (0.8, not 0.80000001192092896).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
status=0
start_server s --model "$MODEL" --threads 1
base=http://127.0.0.1:$s_PORT
jq_get() { node -e 'const o=JSON.parse(require("fs").readFileSync(0,"utf8")); const v=eval("o"+process.argv[1]); console.log(typeof v==="object"?JSON.stringify(v):v)' "$1"; }

# ---- /props ----
props=$(curl -sf "$base/props") || bad "GET /props answers 200"
check "/props: n_ctx 512" test "$(jq_get '.default_generation_settings.n_ctx' <<<"$props")" = 512
check "/props: model_alias" test "$(jq_get '.model_alias' <<<"$props")" = attnd-sotu
check "/props: the model's Jinja template" grep -q '"chat_template":"{% for message in messages %}' <<<"$props"
check "/props: its source" test "$(jq_get '.chat_template_source' <<<"$props")" = "Jinja from tokenizer.chat_template"
check "/props: build_info" grep -q '"build_info":"attnd [0-9]' <<<"$props"
check "/props: total_slots" test "$(jq_get '.total_slots' <<<"$props")" = 16
# a float setting prints as typed: the text, not only the value
check "/props: temperature 0.8 as written" grep -q '"temperature":0.8,' <<<"$props"
check "/props: top_p 0.95 as written" grep -q '"top_p":0.95,' <<<"$props"
models=$(curl -sf "$base/v1/models")
check "/v1/models: no float noise ($(grep -o '"temperature":[^,]*' <<<"$models"))" \
    grep -q '"temperature":0.8,"top_k":40,"top_p":0.95,"min_p":0.05,' <<<"$models"
resp=$(curl -sf "$base/v1/responses" -d '{"input": "Hi", "max_output_tokens": 2, "store": false, "temperature": 0.7}')
check "/v1/responses: temperature 0.7 as sent" grep -q '"temperature":0.7,' <<<"$resp"
# ---- /apply-template: what `attnd template` prints for the same messages ----
msgs='[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|im_end|> there"}]'
curl -sf "$base/apply-template" -d "{\"messages\": $msgs}" | jq_get '.prompt' > "$TMP/served.txt" \
    || bad "POST /apply-template answers 200"
echo "{\"messages\": $msgs, \"add_generation_prompt\": true}" | "$ATTND_BINARY" template --model "$MODEL" > "$TMP/cli.txt"
echo >> "$TMP/cli.txt" # console.log's newline
check "/apply-template = attnd template, byte for byte" cmp "$TMP/served.txt" "$TMP/cli.txt"
check "/apply-template: ends in the assistant's turn" grep -q '^<|im_start|>assistant$' "$TMP/served.txt"
check_status 400 "/apply-template without messages is a 400" "$base/apply-template" -d '{}'
check_status 400 "/apply-template with a bad role is a 400" "$base/apply-template" -d '{"messages": [{"role": "wizard", "content": "x"}]}'
check_status 400 "/apply-template with a broken body is a 400" "$base/apply-template" -d '{"messages": ['

# ---- /slots: idle, then busy; never the prompt text ----
check "/slots: idle is []" test "$(curl -sf "$base/slots")" = "[]"
pids=()
for i in 1 2 3 4; do
    curl -s "$base/v1/completions" -d '{"prompt": "The secret word is zanzibar. Once upon a time", "max_tokens": 480, "temperature": 0}' \
        >/dev/null &
    pids+=($!)
done
seen=""
for _ in $(seq 200); do
    slots=$(curl -sf "$base/slots") || break
    if grep -q '"state":"\(generating\|prefilling\|queued\)"' <<<"$slots"; then seen=$slots; break; fi
    sleep 0.02
done
wait "${pids[@]}"
check "/slots: a running sequence shows (${seen:0:200})" test -n "$seen"
check "/slots: its n_ctx" grep -q '"n_ctx":512' <<<"$seen"
check "/slots: llama-server's next_token.n_decoded" grep -q '"next_token":\[{"has_next_token":[a-z]*,"n_remain":[0-9-]*,"n_decoded":[0-9]*}\]' <<<"$seen"
check "/slots: the prompt's token count" grep -q '"n_prompt_tokens":[1-9][0-9]*,' <<<"$seen"
check "/slots: no prompt text" bash -c '! grep -q "zanzibar\|\"prompt\"" <<<"$1"' _ "$seen"

stop_server s || bad "SIGTERM"
exit $status
