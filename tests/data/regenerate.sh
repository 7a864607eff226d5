#!/usr/bin/env bash
# regenerate.sh — rewrite the llama.cpp reference outputs the test suite compares against:
#   tests/data/reference-greedy.json       llama.cpp's greedy tokens for every model x prompt
#   tests/data/reference-tokens-sotu.jsonl llama.cpp's ids for the conformance texts, default vocabulary
#   tests/data/reference-families.json     llama.cpp's greedy tokens for the generated model of each
#                                          family (tests/family_specs.h, written by BUILD_DIR/tiny_model)
#   tests/data/reference-hybrid.json       the same for the hybrid Gated DeltaNet families (qwen35,
#                                          qwen35moe, qwen3next), after an 88-token prompt
#   tests/data/reference-gemma4.json       the same for the Gemma 4 variants (dense, E, MoE)
#   tests/data/reference-mla.json          the same for the latent-attention models (deepseek2: DeepSeek-V2-Lite,
#                                          GLM-4.7-Flash and V3-class shapes), after the same 88-token prompt
#   tests/data/reference-quant-types.json  the type llama.cpp's own quantizer gives every tensor, per
#                                          mix, of attnd-sotu, qwen896 and llama960 (attnd quantize must agree),
#                                          and of attnd-sotu in the IQ1-IQ3 mixes with attnd-sotu.imatrix.gguf
#   tests/data/models/llamacpp/*.gguf      files llama.cpp's quantizer wrote, which attnd must run
#                                          (their greedy tokens are in reference-greedy.json)
#   tests/data/reference-embed.json        llama.cpp's pooled embeddings / rerank logits of the
#                                          generated encoders (tests/encoder_fixture.h, tiny_model)
#   tests/data/reference-xlmr.json         llama.cpp's token ids, CLS embeddings and rerank logits of
#                                          texts through make_tiny's XLM-RoBERTa pair (xlmr, xlmr-rank:
#                                          bge-m3's and bge-reranker-v2-m3's layouts, the real unigram
#                                          vocabulary), for tests/test_http_xlmr.sh and test_unigram
#
#   tests/data/regenerate.sh [BUILD_DIR] [--only-embed|--only-xlmr]   (default: build; needs
#                                            BUILD_DIR/attnd and BUILD_DIR/make_tiny, node and npm;
#                                            --only-embed / --only-xlmr rewrite reference-embed.json /
#                                            reference-xlmr.json alone)
#
# The quantized variants are made with `attnd quantize` exactly as the suite makes them
# (tests/test_models.h); llama.cpp runs through tools/peers/llamacpp (installed on first use),
# flash attention off, F32 KV cache, one thread: the closest llama.cpp gets to exact F32 math.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
bin=$build/attnd
[ -x "$bin" ] || { echo "regenerate.sh: no $bin (build first)" >&2; exit 1; }
peer=$("$root/tools/peers/llamacpp/install.sh")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the generated encoders: each one's inputs alone in llama.cpp's embedding (or, with pooling rank,
# ranking) context, one thread, the file's pooling
embed_refs() {
    local inputs out=$tmp/embed.jsonl
    inputs=$("$build/tiny_model" --encoder-inputs | paste -sd';')
    : >"$out"
    for f in $("$build/tiny_model" --list-encoders); do
        "$build/tiny_model" "$f" "$tmp/$f.gguf"
        local rank=; [ "${f%-reranker}" != "$f" ] && rank=--rank
        node "$peer/embed.mjs" --model "$tmp/$f.gguf" --inputs "$inputs" --threads 1 $rank 2>/dev/null |
            F="$f" node -e '
                const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
                const v = r.vectors.map((x) => x.map((y) => Number(y.toPrecision(8))));
                process.stdout.write(JSON.stringify({model: process.env.F, vectors: v}) + "\n");' >>"$out"
        echo "regenerate.sh: encoder $f done" >&2
    done
    node -e '
        const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
        const out = {generator: "llama.cpp via node-llama-cpp 3.21.1 (tools/peers/llamacpp/embed.mjs), 1 thread; models: tiny_model NAME, inputs: tiny_model --encoder-inputs (tests/encoder_fixture.h)",
                     cases: lines};
        process.stdout.write(JSON.stringify(out).replace(/\[\{/, "[\n{").replace(/\},\{"model"/g, "},\n{\"model\"") + "\n");' "$out" \
        >"$root/tests/data/reference-embed.json"
}

# XLM-RoBERTa end to end: llama.cpp tokenizes (its /v1/embeddings input: <s> text </s>; its
# /v1/rerank input, server-common.cpp format_prompt_rerank with the file's add_bos, add_eos and
# add_sep_token: <s> query </s> </s> document </s>), then embeds each input alone (the file's CLS
# pooling) or ranks it (the one-logit head, raw). The texts go through the character map
# (full-width forms, ligatures, combining marks, runs of spaces) and several scripts.
xlmr_refs() {
    local vocab=$root/tests/data/tokenizers/xlmr-ugm.gguf
    "$build/make_tiny" "$tmp/xlmr.gguf" xlmr "$vocab"
    "$build/make_tiny" "$tmp/xlmr-rank.gguf" xlmr-rank "$vocab"
    cat >"$tmp/xlmr-texts.json" <<'JSON'
{"texts": ["The giant panda (Ailuropoda melanoleuca) is a bear species endemic to China.",
           "query: how much protein should a female eat",
           "Die Hauptstadt von Österreich ist Wien.",
           "北京是中华人民共和国的首都。",
           "Ｆｕｌｌ－ｗｉｄｔｈ  ﬁle  café naïve\tend  ",
           "Привет, мир! 🙂 नमस्ते"],
 "query": "what is panda?",
 "documents": ["hi", "The giant panda (Ailuropoda melanoleuca) is a bear species endemic to China.",
               "Der Große Panda ist eine Bärenart aus China.", "パンダは中国の山岳地帯に住むクマです。"]}
JSON
    node -e '
        const t = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
        for (const x of [...t.texts, t.query, ...t.documents]) process.stdout.write(JSON.stringify({text: x}) + "\n");' \
        "$tmp/xlmr-texts.json" >"$tmp/xlmr-in.jsonl"
    node "$peer/tokenize.mjs" --model "$tmp/xlmr.gguf" --in "$tmp/xlmr-in.jsonl" >"$tmp/xlmr-ids.jsonl" 2>/dev/null
    node -e '
        const fs = require("fs"), t = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
        const r = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
        const n = t.texts.length, q = r[n].ids, BOS = 0, EOS = 2, SEP = 2;
        const embed = r.slice(0, n).map((x) => x.ids_with_special);
        const pairs = r.slice(n + 1).map((d) => [BOS, ...q, EOS, SEP, ...d.ids, EOS]);
        fs.writeFileSync(process.argv[3], embed.map((x) => x.join(",")).join(";"));
        fs.writeFileSync(process.argv[4], pairs.map((x) => x.join(",")).join(";"));
        fs.writeFileSync(process.argv[5], JSON.stringify({embed, pairs}));' \
        "$tmp/xlmr-texts.json" "$tmp/xlmr-ids.jsonl" "$tmp/xlmr-embed.in" "$tmp/xlmr-rank.in" "$tmp/xlmr-ids.json"
    node "$peer/embed.mjs" --model "$tmp/xlmr.gguf" --inputs "$(cat "$tmp/xlmr-embed.in")" --threads 1 \
        >"$tmp/xlmr-vec.json" 2>/dev/null
    node "$peer/embed.mjs" --model "$tmp/xlmr-rank.gguf" --inputs "$(cat "$tmp/xlmr-rank.in")" --threads 1 --rank \
        >"$tmp/xlmr-scores.json" 2>/dev/null
    node -e '
        const fs = require("fs"), rd = (f) => JSON.parse(fs.readFileSync(f, "utf8"));
        const t = rd(process.argv[1]), ids = rd(process.argv[2]), v = rd(process.argv[3]), s = rd(process.argv[4]);
        const p8 = (y) => Number(y.toPrecision(8));
        const out = {generator: "llama.cpp via node-llama-cpp 3.21.1 (tools/peers/llamacpp: tokenize.mjs, embed.mjs), 1 thread; models: make_tiny OUT xlmr|xlmr-rank tests/data/tokenizers/xlmr-ugm.gguf",
            embed: {texts: t.texts, ids: ids.embed, vectors: v.vectors.map((x) => x.map(p8))},
            rerank: {query: t.query, documents: t.documents, ids: ids.pairs, scores: s.vectors.map((x) => p8(x[0]))}};
        process.stdout.write(JSON.stringify(out, null, 1).replace(/\n +([-\d.e]+,?)(?=\n)/g, " $1").replace(/\n +\]/g, "]").replace(/\[ /g, "[") + "\n");' \
        "$tmp/xlmr-texts.json" "$tmp/xlmr-ids.json" "$tmp/xlmr-vec.json" "$tmp/xlmr-scores.json" \
        >"$root/tests/data/reference-xlmr.json"
    echo "regenerate.sh: wrote tests/data/reference-xlmr.json" >&2
}
if [ "${2:-}" = --only-embed ]; then
    embed_refs
    exit 0
fi
if [ "${2:-}" = --only-xlmr ]; then
    xlmr_refs
    exit 0
fi

# llama.cpp's own quantizer (tools/peers/llamacpp/quantize.c over the peer's libllama)
cc -O2 -o "$tmp/lcpp-quantize" "$root/tools/peers/llamacpp/quantize.c" -ldl
MIXES=(Q2_K Q3_K_S Q3_K_M Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL IQ4_XS Q8_0)
LCPP_KEEP=(attnd-sotu-Q2_K attnd-sotu-Q3_K_M attnd-sotu-IQ4_XS) # committed: every K-quant, IQ4 and fallback type
qtypes=$tmp/quant-types.jsonl
mkdir -p "$root/tests/data/models/llamacpp"
for base in attnd-sotu qwen896 llama960; do
    case $base in
    attnd-sotu) src=$root/models/attnd-sotu.gguf ;;
    *) src=$tmp/$base.gguf; "$build/make_tiny" "$src" "$base" >&2 ;;
    esac
    for mix in "${MIXES[@]}"; do
        out=$tmp/lcpp-$base-$mix.gguf
        "$tmp/lcpp-quantize" "$peer" "$src" "$out" "$mix" >/dev/null 2>&1
        node "$root/tools/peers/llamacpp/gguf_types.mjs" "$out" | M="$base.gguf" X="$mix" node -e '
            const t = JSON.parse(require("fs").readFileSync(0, "utf8"));
            process.stdout.write(JSON.stringify({model: process.env.M, mix: process.env.X, types: t}) + "\n");' >>"$qtypes"
        for k in "${LCPP_KEEP[@]}"; do [ "$k" = "$base-$mix" ] && cp "$out" "$root/tests/data/models/llamacpp/$k.gguf"; done
    done
    echo "regenerate.sh: llama.cpp quantizer on $base done" >&2
done
# llama.cpp's IQ1-IQ3 mixes, which need an importance matrix: the shipped model with the committed
# tests/data/attnd-sotu.imatrix.gguf (`attnd imatrix --model models/attnd-sotu.gguf --text T -o F
# --threads 1`, T = tests/data/sotu-heldout/201[012]_*.txt concatenated); the suite compares the
# types attnd's rules give with that matrix (test_quantize.c)
for mix in IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M; do
    out=$tmp/lcpp-attnd-sotu-$mix.gguf
    "$tmp/lcpp-quantize" "$peer" "$root/models/attnd-sotu.gguf" "$out" "$mix" "$root/tests/data/attnd-sotu.imatrix.gguf" \
        >/dev/null 2>&1
    node "$root/tools/peers/llamacpp/gguf_types.mjs" "$out" | X="$mix" node -e '
        const t = JSON.parse(require("fs").readFileSync(0, "utf8"));
        process.stdout.write(JSON.stringify({model: "attnd-sotu.gguf", mix: process.env.X,
            imatrix: "attnd-sotu.imatrix.gguf", types: t}) + "\n");' >>"$qtypes"
done
echo "regenerate.sh: llama.cpp quantizer's IQ mixes (with the imatrix) done" >&2
node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
    const out = {generator: "llama_model_quantize of node-llama-cpp 3.21.1 (tools/peers/llamacpp/quantize.c), 1 thread", cases: lines};
    process.stdout.write(JSON.stringify(out).replace(/\[\{/, "[\n{").replace(/\},\{"model"/g, "},\n{\"model\"") + "\n");' "$qtypes" \
    >"$root/tests/data/reference-quant-types.json"

# model names as test_models.h spells them
MODELS=(stories260K stories260K-F16 stories260K-BF16 stories260K-Q8_0 stories260K-Q4_0
        attnd-sotu attnd-sotu-Q8_0 attnd-sotu-Q4_K attnd-sotu-Q4_K_M
        attnd-sotu-Q2_K attnd-sotu-Q3_K_S attnd-sotu-Q3_K_M attnd-sotu-Q4_K_S attnd-sotu-Q5_K_S attnd-sotu-Q5_K_M
        attnd-sotu-Q4_1 attnd-sotu-Q5_0 attnd-sotu-Q5_1 attnd-sotu-IQ4_NL attnd-sotu-IQ4_XS attnd-sotu-MXFP4
        qwen896-Q4_K_M qwen896-Q5_K_M qwen896-Q2_K qwen896-IQ4_XS
        llama960-Q4_K_M llama960-Q5_K_M llama960-Q3_K_M
        llamacpp/attnd-sotu-Q2_K llamacpp/attnd-sotu-Q3_K_M llamacpp/attnd-sotu-IQ4_XS
        lowbit-IQ2_XXS lowbit-IQ2_XS lowbit-IQ2_S lowbit-IQ3_XXS lowbit-IQ3_S lowbit-IQ1_S lowbit-IQ1_M
        lowbit-TQ1_0 lowbit-TQ2_0 lowbit-NVFP4)
PROMPTS=("Once upon a time" "We the people" "The state of the Union is" "A" "Our economy"
         "In the year 1865, the Congress" "What is 2+2? The answer"
         "Fellow citizens of the Senate and House of Representatives: the progress of our country in the last year has been great, and we must now turn to the work that remains. Tonight I want to speak about jobs, about schools, about the health of our people, and about the security of the Nation. Let us begin.")
N=64

path_of() { # path_of NAME -> the file (quantized into $tmp when it is a variant)
    case $1 in
    stories260K) echo "$root/tests/data/models/stories260K.gguf" ;;
    attnd-sotu) echo "$root/models/attnd-sotu.gguf" ;;
    llamacpp/*) echo "$root/tests/data/models/$1.gguf" ;; # written by llama.cpp's quantizer, above
    lowbit-*) # random blocks of a type attnd does not write (issue 47), as test_models.h makes them
       [ -f "$tmp/$1.gguf" ] || "$build/make_tiny" "$tmp/$1.gguf" lowbit "${1#lowbit-}" >&2
       echo "$tmp/$1.gguf" ;;
    qwen896 | llama960) # generated random-weight models (tests/make_tiny.c), as test_models.h makes them
       [ -f "$tmp/$1.gguf" ] || "$build/make_tiny" "$tmp/$1.gguf" "$1" >&2
       echo "$tmp/$1.gguf" ;;
    *) local base=${1%-*} type=${1##*-}
       [ -f "$tmp/$1.gguf" ] || "$bin" quantize --quiet "$(path_of "$base")" "$tmp/$1.gguf" "$type" >&2
       echo "$tmp/$1.gguf" ;;
    esac
}

cases=$tmp/cases.jsonl
for m in "${MODELS[@]}"; do
    file=$(path_of "$m")
    for p in "${PROMPTS[@]}"; do
        node "$peer/generate.mjs" --model "$file" --prompt "$p" --n $N --threads 1 --flash-attn off --kv-type f32 |
            M="$m.gguf" P="$p" node -e '
                const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
                process.stdout.write(JSON.stringify({model: process.env.M, prompt: process.env.P,
                    prompt_tokens: r.prompt_tokens, tokens: r.tokens}) + "\n");' >>"$cases"
    done
    echo "regenerate.sh: $m done" >&2
done
node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
    const out = {generator: "llama.cpp via node-llama-cpp 3.21.1 (tools/peers/llamacpp), greedy, flash attention off, F32 KV cache, 1 thread",
                 n: Number(process.argv[2]), cases: lines};
    // one case per line, so a regeneration diffs line by line
    process.stdout.write(JSON.stringify(out).replace(/\[\{/, "[\n{").replace(/\},\{"model"/g, "},\n{\"model\"") + "\n");' "$cases" $N >"$root/tests/data/reference-greedy.json"

# the generated model of each family: the same file the suite generates (tiny_model), same prompt ids
fam=$tmp/families.jsonl
# (and gpt-oss with its weights in MXFP4, as released files keep their experts: `attnd quantize`)
"$build/tiny_model" gpt-oss "$tmp/gpt-oss.gguf"
"$bin" quantize --quiet "$tmp/gpt-oss.gguf" "$tmp/gpt-oss-MXFP4.gguf" MXFP4 >&2
for f in $("$build/tiny_model" --list) gpt-oss-MXFP4; do
    [ -f "$tmp/$f.gguf" ] || "$build/tiny_model" "$f" "$tmp/$f.gguf"
    node "$peer/generate.mjs" --model "$tmp/$f.gguf" --tokens 1,300,301,302,260,270,280 --n 100 --threads 1 \
        --flash-attn off --kv-type f32 --json |
        F="$f" node -e '
            const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
            process.stdout.write(JSON.stringify({family: process.env.F, prompt_tokens: r.prompt_tokens,
                tokens: r.tokens}) + "\n");' >>"$fam"
    echo "regenerate.sh: family $f done" >&2
done
node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
    const out = {generator: "llama.cpp via node-llama-cpp 3.21.1 (tools/peers/llamacpp), greedy, flash attention off, F32 KV cache, 1 thread; models: tiny_model FAMILY (tests/family_specs.h)",
                 cases: lines};
    process.stdout.write(JSON.stringify(out).replace(/\[\{/, "[\n{").replace(/\},\{"family"/g, "},\n{\"family\"") + "\n");' "$fam" >"$root/tests/data/reference-families.json"

# the hybrid Gated DeltaNet families (qwen35, qwen35moe, qwen3next): an 88-token prompt, so that the conv and
# the recurrent state carry far (tests/family_specs.h: hybrid_small, hybrid_prompt)
hyb=$tmp/hybrid.jsonl
hprompt=$("$build/tiny_model" --hybrid-prompt)
for f in $("$build/tiny_model" --list-hybrid); do
    "$build/tiny_model" "$f" "$tmp/$f.gguf"
    node "$peer/generate.mjs" --model "$tmp/$f.gguf" --tokens "$hprompt" --n 40 --threads 1 \
        --flash-attn off --kv-type f32 --json |
        F="$f" node -e '
            const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
            process.stdout.write(JSON.stringify({family: process.env.F, prompt_tokens: r.prompt_tokens,
                tokens: r.tokens}) + "\n");' >>"$hyb"
    echo "regenerate.sh: hybrid family $f done" >&2
done
node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
    const out = {generator: "llama.cpp via node-llama-cpp 3.21.1 (tools/peers/llamacpp), greedy, flash attention off, F32 KV cache, 1 thread; models: tiny_model FAMILY (tests/family_specs.h hybrid_small)",
                 cases: lines};
    process.stdout.write(JSON.stringify(out).replace(/\[\{/, "[\n{").replace(/\},\{"family"/g, "},\n{\"family\"") + "\n");' "$hyb" >"$root/tests/data/reference-hybrid.json"

# the latent-attention (deepseek2) models: the hybrid comparison's prompt (it crosses a KV block)
# (tests/family_specs.h: mla_small)
mla=$tmp/mla.jsonl
for f in $("$build/tiny_model" --list-mla); do
    "$build/tiny_model" "$f" "$tmp/$f.gguf"
    node "$peer/generate.mjs" --model "$tmp/$f.gguf" --tokens "$hprompt" --n 40 --threads 1 \
        --flash-attn off --kv-type f32 --json |
        F="$f" node -e '
            const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
            process.stdout.write(JSON.stringify({family: process.env.F, prompt_tokens: r.prompt_tokens,
                tokens: r.tokens}) + "\n");' >>"$mla"
    echo "regenerate.sh: latent-attention model $f done" >&2
done
node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
    const out = {generator: "llama.cpp via node-llama-cpp 3.21.1 (tools/peers/llamacpp), greedy, flash attention off, F32 KV cache, 1 thread; models: tiny_model NAME (tests/family_specs.h mla_small)",
                 cases: lines};
    process.stdout.write(JSON.stringify(out).replace(/\[\{/, "[\n{").replace(/\},\{"family"/g, "},\n{\"family\"") + "\n");' "$mla" >"$root/tests/data/reference-mla.json"

# Gemma 4's variants (dense, E, MoE; tests/family_specs.h gemma4_small): the family prompt, 100 tokens
g4=$tmp/gemma4.jsonl
for f in $("$build/tiny_model" --list-gemma4); do
    "$build/tiny_model" "$f" "$tmp/$f.gguf"
    node "$peer/generate.mjs" --model "$tmp/$f.gguf" --tokens 1,300,301,302,260,270,280 --n 100 --threads 1 \
        --flash-attn off --kv-type f32 --json |
        F="$f" node -e '
            const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
            process.stdout.write(JSON.stringify({family: process.env.F, prompt_tokens: r.prompt_tokens,
                tokens: r.tokens}) + "\n");' >>"$g4"
    echo "regenerate.sh: gemma4 variant $f done" >&2
done
node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
    const out = {generator: "llama.cpp via node-llama-cpp 3.21.1 (tools/peers/llamacpp), greedy, flash attention off, F32 KV cache, 1 thread; models: tiny_model VARIANT (tests/family_specs.h gemma4_small)",
                 cases: lines};
    process.stdout.write(JSON.stringify(out).replace(/\[\{/, "[\n{").replace(/\},\{"family"/g, "},\n{\"family\"") + "\n");' "$g4" >"$root/tests/data/reference-gemma4.json"

embed_refs
xlmr_refs

node "$peer/tokenize.mjs" --model "$root/models/attnd-sotu.gguf" --in "$root/tests/data/tokenizers/llama-spm.jsonl" \
    >"$root/tests/data/reference-tokens-sotu.jsonl"
echo "regenerate.sh: wrote tests/data/reference-greedy.json, reference-families.json, reference-hybrid.json, reference-mla.json, reference-gemma4.json, reference-embed.json, reference-xlmr.json and reference-tokens-sotu.jsonl" >&2
