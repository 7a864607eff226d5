# test_template_hostile.sh — a model file whose tokenizer.chat_template is hostile (issue 44):
# real `attnd serve` processes on loopback with generated models (tests/tiny_model.c) that carry
# the audit's templates. A template that fails at load is refused with its error: the server
# starts, /health is ok, chat falls back to the built-in family and the log names the error. A
# template that fails on one message answers that request with a JSON error naming the template
# line, and the server carries on. SIGTERM exits within shutdown_timeout_s.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
status=0
TINY="${ATTND_BUILD_DIR:?}/tiny_model"
[ -x "$TINY" ] || fail "$TINY not built"

# model NAME TEMPLATE: a generated qwen3 model whose tokenizer.chat_template is TEMPLATE
model() {
    printf '%s' "$2" >"$TMP/$1.jinja"
    "$TINY" qwen3 "$TMP/$1.gguf" --chat-template "$TMP/$1.jinja" || fail "tiny_model $1"
}
# post PORT BODY: prints the HTTP status of a chat completion, the body goes to $TMP/body
post() {
    curl -s -m 30 -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" \
        "http://127.0.0.1:$1/v1/chat/completions"
}
# stop_within NAME SECONDS: SIGTERM, then check that the server exited 0 within SECONDS
stop_within() {
    local name=$1 limit=$2 t0 rc=0
    t0=$(date +%s.%N)
    stop_server "$name" || rc=$?
    local took
    took=$(echo "$(date +%s.%N) - $t0" | bc)
    check "$name: SIGTERM exits (rc $rc) in ${took}s, within shutdown_timeout_s ($limit s)" \
        bash -c "[ $rc = 0 ] && [ \$(echo '$took <= $limit' | bc) = 1 ]"
}
hi='{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}'

# ---- 1: templates that fail at load (the start-up probe crashed or hung on them before) -------
# the crash (printing a list nested 100000 deep), the two hangs (repeat counts), the quadratic
# unique and the 3 MB search in a loop
load_fail=(
    '{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}'
    '{{ "" * 9000000000000000000 }}'
    '{{ ("abcd" * 4611686018427387904)|length }}'
    '{{ range(60000)|unique|length }}'
    '{% set s = "a" * 3000000 %}{% for i in range(100000) %}{% if "b" in s %}x{% endif %}{% endfor %}'
)
# (the step budget ends the last two; on a slow machine the 1 s wall-clock cap may end them first)
errors=("nested deeper than 64 levels" "exceeds the template's size limit" "exceeds the template's size limit"
        "\(steps\|longer than 1000 ms\)" "\(steps\|longer than 1000 ms\)")
for i in "${!load_fail[@]}"; do
    model "load$i" "${load_fail[$i]}"
    t0=$(date +%s)
    start_server "load$i" --model "$TMP/load$i.gguf" --threads 1 --state-dir "$TMP/state$i" --shutdown-timeout-s 3
    P=$(eval echo "\$load${i}_PORT")
    L=$(eval echo "\$load${i}_LOG")
    check "load$i: the server starts in $(( $(date +%s) - t0 )) s and /health is ok" \
        bash -c "curl -sf http://127.0.0.1:$P/health | grep -q '\"status\":\"ok\"'"
    check "load$i: the log warns with the template's error" \
        grep -q "the model's chat template fails at load: template line 1: .*${errors[$i]}.*using the built-in" "$L"
    code=$(post "$P" "$hi")
    check "load$i: a chat request is served by the built-in template ($code)" test "$code" = 200
    stop_within "load$i" 3
done

# ---- 2: a template that fails on one message ---------------------------------------------------
# it renders the probes' messages, so it is kept; "hang" and "slow" reach the bounds
per_msg='{% for m in messages %}{% if m.content == "hang" %}{{ ("abcd" * 4611686018427387904)|length }}'
per_msg+='{% elif m.content == "slow" %}{{ range(60000)|unique|length }}{% endif %}'
per_msg+='<|im_start|>{{ m.role }}{{ "\n" }}{{ m.content }}<|im_end|>{{ "\n" }}{% endfor %}'
per_msg+='{% if add_generation_prompt %}<|im_start|>assistant{{ "\n" }}{% endif %}'
model permsg "$per_msg"
start_server permsg --model "$TMP/permsg.gguf" --threads 1 --state-dir "$TMP/state-permsg" --shutdown-timeout-s 3
P=$permsg_PORT
check "permsg: the template is the model's own" grep -q "chat template .*(Jinja from tokenizer.chat_template)" "$permsg_LOG"
code=$(post "$P" "$hi")
check "permsg: an ordinary message is answered ($code)" test "$code" = 200
for word in hang slow; do
    t0=$(date +%s.%N)
    code=$(post "$P" "{\"messages\":[{\"role\":\"user\",\"content\":\"$word\"}],\"max_tokens\":1}")
    took=$(echo "$(date +%s.%N) - $t0" | bc)
    check "permsg: '$word' gets a 400 in ${took}s ($code)" test "$code" = 400
    check "permsg: its JSON error names the template line" \
        bash -c "jq -e '.error.message | startswith(\"template line 1: \")' '$TMP/body' >/dev/null"
    code=$(post "$P" "$hi")
    check "permsg: the server carries on after '$word' ($code)" test "$code" = 200
done
# a client that leaves during a failing render does not keep a core busy: the render ends by
# its own bounds, and a SIGTERM right after it exits within shutdown_timeout_s
curl -s -m 0.05 -o /dev/null -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"slow"}],"max_tokens":1}' "http://127.0.0.1:$P/v1/chat/completions"
stop_within permsg 3
exit $status
