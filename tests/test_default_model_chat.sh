# test_default_model_chat.sh — the default model (models/attnd-sotu.gguf, v2) chats: a real
# `attnd serve` on it answers fixed questions through /v1/chat/completions with fixed seeds, using
# the model's own ChatML template (no --chat-template), and each answer is non-empty and mentions
# the topic asked about. The questions were chosen from 15 tried with seeds 1-10 (these four
# mention their topic word for 8-9 of the 10 seeds, and with these seeds within the first 80
# characters, before the slightly different float rounding of another build (the sanitizer
# build's -O0 does) can steer a sampled answer elsewhere; the answers are quoted
# in models/README.md). A model that answers ChatML with nothing — v1 did — fails here. Then
# <|im_end|> ends a turn: pushed to the top with logit_bias, it stops the reply at once and is
# not written into the text.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
status=0

start_server chat --model "$MODEL" --threads 1
grep -q "chat template chatml" "$chat_LOG" && ok "the model's own template is ChatML" ||
    bad "chat template at start-up: $(grep -o 'chat template [a-z0-9]*' "$chat_LOG")"
grep -q "chat template; using ChatML" "$chat_LOG" && bad "a fallback warning for a model with a template" ||
    ok "no template fallback warning"

# ask QUESTION SEED [EXTRA_JSON_FIELDS]: sets finish, content (JSON string) and tokens (completion)
ask() {
    local body r
    body=$(Q="$1" S="$2" X="${3:-{\}}" node -e 'process.stdout.write(JSON.stringify({messages: [{role: "user",
        content: process.env.Q}], max_tokens: 200, temperature: 0.7, seed: Number(process.env.S),
        ...JSON.parse(process.env.X)}))')
    r=$(curl -s -m 120 "http://127.0.0.1:$chat_PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
    read -r finish tokens content < <(printf '%s' "$r" | node -e '
        let r; try { r = JSON.parse(require("fs").readFileSync(0, "utf8")); } catch (e) { r = {}; }
        const c = (r.choices || [{}])[0] || {};
        process.stdout.write((c.finish_reason || "none") + " " + ((r.usage || {}).completion_tokens ?? -1) + " " +
                             JSON.stringify((c.message || {}).content || ""));')
}

# question | seed | word the answer must contain (case-insensitive)
CASES=(
    "What can you tell me about the Navy?|8|navy"
    "Tell me about the Army.|4|army"
    "What has been done about the public debt?|5|debt"
    "What about the Indians?|3|indian"
)
for c in "${CASES[@]}"; do
    IFS='|' read -r q seed word <<<"$c"
    ask "$q" "$seed"
    echo "# Q: $q (seed $seed) -> $finish $content"
    [ "$content" != '""' ] && ok "\"$q\": a non-empty answer" || bad "\"$q\": empty answer"
    grep -qi -- "$word" <<<"$content" && ok "\"$q\": the answer mentions '$word'" ||
        bad "\"$q\": no '$word' in the answer"
    grep -q 'im_end\|im_start' <<<"$content" && bad "\"$q\": a chat marker leaked into the text"
done

# <|im_end|> (id 4097) ends the assistant's turn: the first token, the reply is empty and "stop"
ask "Tell me about the Army." 4 '{"logit_bias": {"4097": 100}}'
[ "$finish" = stop ] && [ "$tokens" = 1 ] && [ "$content" = '""' ] &&
    ok "<|im_end|> ends the reply and is not written into it" ||
    bad "<|im_end|> first: finish_reason $finish, $tokens tokens, content $content"
stop_server chat || bad "SIGTERM"
exit $status
