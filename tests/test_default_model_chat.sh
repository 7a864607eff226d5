# test_default_model_chat.sh — the default model (models/attnd-sotu.gguf, v2) chats: a real
# `attnd serve` on it answers fixed questions through /v1/chat/completions with fixed seeds, using
# the model's own ChatML template (no --chat-template), and each answer is non-empty, mentions the
# topic asked about, and ends as it did when v2 was trained (three end with <|im_end|>, finish_reason
# "stop"; one reaches max_tokens). The questions were chosen from 15 tried with seeds 1-10 (these
# four mention their topic word for 8-9 of the 10 seeds; the answers are quoted in
# models/README.md); a model that answers ChatML with nothing — v1 did — fails here.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
status=0
ok() { echo "ok - $*"; }
bad() { echo "not ok - $*"; status=1; }

start_server chat --model "$MODEL" --threads 1
grep -q "chat template chatml" "$chat_LOG" && ok "the model's own template is ChatML" ||
    bad "chat template at start-up: $(grep -o 'chat template [a-z0-9]*' "$chat_LOG")"
grep -q "chat template; using ChatML" "$chat_LOG" && bad "a fallback warning for a model with a template" ||
    ok "no template fallback warning"

# question | seed | word the answer must contain (case-insensitive) | finish_reason it must have
# (with these seeds the v2 model's answers mention the topic early; three of them end by
# themselves before the 200-token limit, which checks that <|im_end|> ends a turn)
CASES=(
    "What can you tell me about the Navy?|8|navy|stop"
    "Tell me about the Army.|4|army|stop"
    "What has been done about the public debt?|5|debt|stop"
    "What about the Indians?|3|indian|length"
)
for c in "${CASES[@]}"; do
    IFS='|' read -r q seed word want_finish <<<"$c"
    body=$(Q="$q" S="$seed" node -e 'process.stdout.write(JSON.stringify({messages: [{role: "user",
        content: process.env.Q}], max_tokens: 200, temperature: 0.7, seed: Number(process.env.S)}))')
    r=$(curl -s -m 120 "http://127.0.0.1:$chat_PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
    read -r finish content < <(printf '%s' "$r" | node -e '
        let r; try { r = JSON.parse(require("fs").readFileSync(0, "utf8")); } catch (e) { r = {}; }
        const c = (r.choices || [{}])[0] || {};
        process.stdout.write((c.finish_reason || "none") + " " + JSON.stringify((c.message || {}).content || ""));')
    echo "# Q: $q (seed $seed) -> $finish $content"
    [ "$content" != '""' ] && ok "\"$q\": a non-empty answer" || bad "\"$q\": empty answer: $r"
    grep -qi -- "$word" <<<"$content" && ok "\"$q\": the answer mentions '$word'" ||
        bad "\"$q\": no '$word' in the answer"
    [ "$finish" = "$want_finish" ] && ok "\"$q\": finish_reason $finish" ||
        bad "\"$q\": finish_reason $finish, expected $want_finish"
    grep -q 'im_end\|im_start' <<<"$content" && bad "\"$q\": a chat marker leaked into the text"
done
stop_server chat || bad "SIGTERM"
exit $status
