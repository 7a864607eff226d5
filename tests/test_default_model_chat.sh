# test_default_model_chat.sh — the default model (models/attnd-sotu.gguf, v2) chats: a real
# `attnd serve` on it answers fixed questions through /v1/chat/completions, using the model's own
# ChatML template (no --chat-template): every answer is non-empty, and each question's answers over
# seeds 1-10 (100 tokens each) name the topic asked about, more often than the other questions'
# answers do. The questions were chosen from 15 tried with seeds 1-10 (these four mention their
# topic word for 8-9 of the 10 seeds on Intel AVX-512; the answers are quoted in
# models/README.md). A single seed is not asked to: a sampled answer follows the float rounding
# of the build and CPU (the sanitizer build's -O0, AVX2 against AVX-512 kernels); on AMD Zen 3
# (AVX2) two of the four seeds once chosen here wandered off their topic, and the public debt came
# up in 5 of 10 answers. A model that answers ChatML with nothing — v1 did — fails here. Then
# <|im_end|> ends a turn: pushed to the top with logit_bias, it stops the reply at once and is not
# written into the text.
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
        content: process.env.Q}], max_tokens: 100, temperature: 0.7, seed: Number(process.env.S),
        ...JSON.parse(process.env.X)}))')
    r=$(curl -s -m 120 "http://127.0.0.1:$chat_PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
    read -r finish tokens content < <(printf '%s' "$r" | node -e '
        let r; try { r = JSON.parse(require("fs").readFileSync(0, "utf8")); } catch (e) { r = {}; }
        const c = (r.choices || [{}])[0] || {};
        process.stdout.write((c.finish_reason || "none") + " " + ((r.usage || {}).completion_tokens ?? -1) + " " +
                             JSON.stringify((c.message || {}).content || ""));')
}

# question | the topic its answers must name (an extended regular expression, case-insensitive)
CASES=(
    "What can you tell me about the Navy?|navy|naval"
    "Tell me about the Army.|army"
    "What has been done about the public debt?|debt|bonds"
    "What about the Indians?|indian"
)
SEEDS=10
mkdir -p "$TMP/answers" "$TMP/req" "$TMP/resp"
# every request body at once (one node process), then each question's seeds as concurrent requests:
# the server decodes them as one batch (a sampled answer follows its seed either way)
QS=() && for c in "${CASES[@]}"; do QS+=("${c%%|*}"); done
node -e '
    const [dir, seeds, ...qs] = process.argv.slice(1);
    qs.forEach((q, i) => { for (let s = 1; s <= Number(seeds); s++)
        require("fs").writeFileSync(`${dir}/${i}-${s}.json`, JSON.stringify({messages: [{role: "user", content: q}],
            max_tokens: 100, temperature: 0.7, seed: s})); });' "$TMP/req" "$SEEDS" "${QS[@]}"
for i in "${!CASES[@]}"; do
    q=${QS[$i]} pids=()
    for seed in $(seq "$SEEDS"); do
        curl -s -m 300 "http://127.0.0.1:$chat_PORT/v1/chat/completions" -H 'Content-Type: application/json' \
            -d @"$TMP/req/$i-$seed.json" -o "$TMP/resp/$i-$seed.json" &
        pids+=($!)
    done
    wait "${pids[@]}" # the requests only: the server is a background job of this shell too
    # a line per seed: finish_reason and the content as a JSON string
    node -e '
        const [dir, i, seeds] = process.argv.slice(1);
        for (let s = 1; s <= Number(seeds); s++) {
            let r; try { r = JSON.parse(require("fs").readFileSync(`${dir}/${i}-${s}.json`, "utf8")); } catch (e) { r = {}; }
            const c = (r.choices || [{}])[0] || {};
            console.log((c.finish_reason || "none") + " " + JSON.stringify((c.message || {}).content || ""));
        }' "$TMP/resp" "$i" "$SEEDS" >"$TMP/answers/$i.lines"
    empty=0 leak=0 seed=0
    while read -r finish content; do
        seed=$((seed + 1))
        [ "$content" = '""' ] && empty=$((empty + 1))
        grep -q 'im_end\|im_start' <<<"$content" && leak=$((leak + 1))
        printf '%s\n' "$content" >>"$TMP/answers/$i"
        [ "$seed" = 1 ] && echo "# Q: $q (seed 1) -> $finish $content"
    done <"$TMP/answers/$i.lines"
    [ "$seed" = "$SEEDS" ] || bad "\"$q\": $seed answers of $SEEDS"
    [ "$empty" = 0 ] && ok "\"$q\": $SEEDS non-empty answers" || bad "\"$q\": $empty empty answers"
    [ "$leak" = 0 ] || bad "\"$q\": a chat marker leaked into $leak answers"
done
# each topic word: in how many of its own question's answers, and of each other question's
for i in "${!CASES[@]}"; do
    c=${CASES[$i]} q=${c%%|*} word=${c#*|}
    own=$(grep -Eci -- "$word" "$TMP/answers/$i") others=0 row=""
    for j in "${!CASES[@]}"; do
        n=$(grep -Eci -- "$word" "$TMP/answers/$j")
        row="$row $n"
        [ "$j" != "$i" ] && others=$((others + n))
    done
    echo "# '$word' in the answers to each question (of $SEEDS):$row"
    # in 3 or more of its own answers, and in 2 more than the other questions' answers on average
    # (the Army's answers often name the Navy too: "army and navy")
    [ "$own" -ge 3 ] && [ "$((3 * own))" -ge "$((others + 6))" ] &&
        ok "\"$q\": its answers name the topic ('$word' in $own of $SEEDS; the other questions' $others of $((3 * SEEDS)))" ||
        bad "\"$q\": '$word' in $own of $SEEDS answers; the other questions' $others of $((3 * SEEDS))"
done

# <|im_end|> (id 4097) ends the assistant's turn: the first token, the reply is empty and "stop"
ask "Tell me about the Army." 4 '{"logit_bias": {"4097": 100}}'
[ "$finish" = stop ] && [ "$tokens" = 1 ] && [ "$content" = '""' ] &&
    ok "<|im_end|> ends the reply and is not written into it" ||
    bad "<|im_end|> first: finish_reason $finish, $tokens tokens, content $content"
stop_server chat || bad "SIGTERM"
exit $status
