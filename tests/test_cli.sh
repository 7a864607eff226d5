#!/usr/bin/env bash
# test_cli.sh — the CLI agrees with the server where they overlap: `attnd version`, and
# `--threads 0` meaning all CPUs in every command that takes --threads (as `serve --threads 0`);
# `attnd info` says whether a file runs, its chat template and KV cost (and README shows it true);
# `generate --draft-max` (speculative decoding) prints what plain generation prints; a newcomer's
# commands with llama.cpp's flags (-m -c -t -n -p -s --temp -ngl ...) exit as documented.
set -u
BIN=${ATTND_BINARY:?ATTND_BINARY not set}
source "$(dirname "$0")/check_lib.sh"
want="attnd $(sed -n 's/^project(attnd VERSION \([0-9.]*\).*/\1/p' "${ATTND_SOURCE_DIR:?}/CMakeLists.txt")"
check "attnd version" "$("$BIN" version)" "$want"
check "attnd --version" "$("$BIN" --version)" "$want"
"$BIN" --help | grep -q "^  version "
check "--help lists version" "$?" 0
"$BIN" version extra >/dev/null 2>&1
check "version takes no arguments" "$?" 2

a=$("$BIN" generate --threads 0 --tokens 1,571,262 --n 4 --json 2>/dev/null | grep -o '"tokens": *\[[0-9, ]*\]' | head -1)
b=$("$BIN" generate --threads 1 --tokens 1,571,262 --n 4 --json 2>/dev/null | grep -o '"tokens": *\[[0-9, ]*\]' | head -1)
[[ -n "$a" ]]
check "generate --threads 0 runs" "$?" 0
check "generate --threads 0 gives what one thread gives" "$a" "$b"
"$BIN" score --threads 0 --tokens 1,571,262,545 >/dev/null 2>&1
check "score --threads 0 runs" "$?" 0
"$BIN" generate --threads -1 --tokens 1 --n 1 >/dev/null 2>&1
check "a negative thread count is a usage error" "$?" 2

# speculative decoding: the same text as without, and how many drafts were kept
P="Repeat: we will build the roads and bridges of America. Repeat: we will build the roads and bridges"
field() { python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
a=$("$BIN" generate --prompt "$P" --n 24 --temp 0 --stop "America." --json 2>/dev/null | field '[d["tokens"], d["text"]]')
b=$("$BIN" generate --prompt "$P" --n 24 --temp 0 --stop "America." --json --draft-max 6 2>/dev/null)
check "generate --draft-max gives the plain tokens and text" "$(field '[d["tokens"], d["text"]]' <<<"$b")" "$a"
t='d["timings"]'
check "generate --draft-max counts drafts" "$(field "$t['accepted'] <= $t['drafted'] and '1' in $t['step_ms']" <<<"$b")" True
# a fixed draft length drafts whatever the costs measured (the default's choices follow timings)
c=$("$BIN" generate --prompt "$P" --n 24 --temp 0 --stop "America." --json --draft-max 6 --draft-fixed 2>/dev/null)
check "generate --draft-fixed gives the plain tokens and text" "$(field '[d["tokens"], d["text"]]' <<<"$c")" "$a"
check "generate --draft-fixed drafts" "$(field "$t['drafted'] > 0 and $t['accepted'] <= $t['drafted']" <<<"$c")" True
"$BIN" generate --tokens 1,2 --n 2 --draft-model /nonexistent.gguf >/dev/null 2>&1
check "--draft-model without --draft-max is a usage error" "$?" 2
err=$("$BIN" generate --tokens 1,2 --n 2 --draft-max 4 --draft-model "${ATTND_DATA_DIR:?}/models/stories260K.gguf" 2>&1)
grep -q "vocabulary differs" <<<"$err"
check "a draft model of another vocabulary is refused with a message" "$?" 0

# attnd bench: --model is optional (the default model), as its usage says
"$BIN" bench --help 2>&1 | grep -q '^usage: attnd bench \[--model PATH\]'
check "bench usage: --model is optional" "$?" 0
"$BIN" bench --no-peer --no-growth --reps 1 --prompt-len 8 --n 4 --probe-mib 16 2>&1 | grep -q '^attnd  *[0-9.]*  *[0-9.]*$'
check "bench runs without --model" "$?" 0

# issue 47: a file of the low-bit types (random blocks, tests/make_tiny.c) is named by type and runs
lowbit=$(mktemp -d)
for ty in IQ1_M NVFP4; do
    "${ATTND_BUILD_DIR:?}/make_tiny" "$lowbit/$ty.gguf" lowbit $ty >/dev/null
    out=$("$BIN" info --model "$lowbit/$ty.gguf" 2>&1)
    grep -q "^tensors:       21 ($ty: 16, F32: 5)$" <<<"$out" && grep -q "^runs:          yes$" <<<"$out" &&
        ! grep -q "does not compute" <<<"$out"
    check "info: a $ty file is named by its types and runs" "$?" 0
    "$BIN" generate --model "$lowbit/$ty.gguf" --tokens 1,300,301 --n 4 >/dev/null 2>&1
    check "generate runs a $ty file" "$?" 0
done
rm -rf "$lowbit"

# attnd info says whether attnd can run a file, the chat template and the KV cost
out=$("$BIN" info 2>&1)
out0=$out
grep -q "^runs:          yes$" <<<"$out"
check "info: the default model runs" "$?" 0
grep -q "^chat template: chatml (detected from tokenizer.chat_template)$" <<<"$out"
check "info: the chat template serve would use" "$?" 0
grep -q "^KV cache:      6144 bytes/token f16 (12288 f32); a full context: 3.0 MiB f16$" <<<"$out"
check "info: KV bytes per token (6 layers x 4 KV heads x 64 x 2 x 2 bytes)" "$?" 0
# issue 30: every KV type's real bytes, and the full contexts the default budget holds (q8_0 ~2x f16)
grep -q "^KV types:      f16 6144 bytes/token = 341 contexts; f32 12288 bytes/token = 170 contexts; q8_0 3264 bytes/token = 642 contexts; q4_0 1728 bytes/token = 1213 contexts; (full contexts in a 1024 MiB kv_budget_mb)$" <<<"$out"
check "info: KV bytes per token and full contexts per KV type" "$?" 0
grep -Eq "^kernels:       (portable|avx2|avx512|amx)( \(.*\))?$" <<<"$out"
check "info: the kernel path that runs" "$?" 0
out=$(ATTND_ISA=portable "$BIN" info 2>&1)
grep -q "^kernels:       portable" <<<"$out"
check "info: ATTND_ISA=portable selects the portable kernels" "$?" 0
if grep -q amx_int8 /proc/cpuinfo; then # an AMX CPU: the tiles, unless the OS refuses or ATTND_ISA says avx512
    grep -Eq "^kernels:       (amx \(AMX (bf16|int8) tiles|avx512 \(CPU has AMX: refused)" <<<"$("$BIN" info 2>&1)"
    check "info: AMX CPU: amx kernels (or why not)" "$?" 0
    if grep -q "^kernels:       amx" <<<"$("$BIN" info 2>&1)"; then # the tiles' arithmetic is named
        grep -q "^kernels:       amx (AMX int8 tiles" <<<"$(ATTND_AMX=int8 "$BIN" info 2>&1)"
        check "info: ATTND_AMX=int8 names the int8 tiles" "$?" 0
        if grep -q amx_bf16 /proc/cpuinfo; then
            grep -q "^kernels:       amx (AMX bf16 tiles" <<<"$("$BIN" info 2>&1)"
            check "info: an AMX-BF16 CPU runs the bf16 tiles by default" "$?" 0
        fi
    fi
    grep -q "^kernels:       avx512 (CPU has AMX: turned off by ATTND_ISA" <<<"$(ATTND_ISA=avx512 "$BIN" info 2>&1)"
    check "info: ATTND_ISA=avx512 forces the AVX-512 path on an AMX CPU" "$?" 0
fi
out=$("$BIN" info --model "${ATTND_DATA_DIR:?}/tokenizers/gpt2-bpe.gguf" 2>&1)
grep -q "^runs:          no: model has no tensor 'token_embd.weight'$" <<<"$out"
check "info: a vocabulary-only file does not run, and says why" "$?" 0
"$BIN" info --json | grep -q '"runs":true,"chat_template":"chatml"'
check "info --json: runs and chat_template" "$?" 0
grep -q "^KV per layer:  6 global layers: 6144 bytes/token f16$" <<<"$out0"
check "info: KV bytes per token of the global layers" "$?" 0
# a Gemma 3 shaped file (tiny_model): 5 local layers of window 24, 1 global; 1 x 2 x 32 x 2 x 2 bytes each
gm=$(mktemp --suffix .gguf)
"${ATTND_BUILD_DIR:?}/tiny_model" gemma3 "$gm"
grep -q "^KV per layer:  1 global layers: 256 bytes/token f16; 5 local layers (window 24): 1280 bytes/token f16, held for the window only$" <<<"$("$BIN" info --model "$gm" 2>&1)"
check "info: KV bytes per token of the local and global layers, and the window" "$?" 0
# the phi3 family file carries LongRoPE: context 512, original 128
"${ATTND_BUILD_DIR:?}/tiny_model" phi3 "$gm"
grep -q "^LongRoPE:      long factors (a context of 512 beyond rope.scaling.original_context_length)$" <<<"$("$BIN" info --model "$gm" 2>&1)"
check "info: which LongRoPE factors apply" "$?" 0
# served with ctx_size 128 (at the original context), llama.cpp's choice: the short factors
grep -q "^LongRoPE:      short factors (a context of 128 within rope.scaling.original_context_length)$" <<<"$("$BIN" info --model "$gm" --ctx-size 128 2>&1)"
check "info --ctx-size: the short LongRoPE factors under a cap" "$?" 0
grep -q "^LongRoPE:      long factors (a context of 129 beyond" <<<"$("$BIN" info --model "$gm" --ctx-size 129 2>&1)"
check "info --ctx-size: the long factors just beyond it" "$?" 0
# issue 48: what a file is for: a decoder generates; a bert cross-encoder ranks (its head of 1 output)
grep -q "^roles:         generate (a decoder; pooling last, 256 floats per input)$" <<<"$out0"
check "info: a decoder's role" "$?" 0
"${ATTND_BUILD_DIR:?}/tiny_model" bert-reranker "$gm"
grep -q "^roles:         rank (an encoder: attention both ways; pooling rank, 1 float per input; a classification head of 1 output)$" <<<"$("$BIN" info --model "$gm" 2>&1)"
check "info: an encoder's role, pooling and head" "$?" 0
grep -q "^KV cache:      none (an encoder keeps nothing between requests)$" <<<"$("$BIN" info --model "$gm" 2>&1)"
check "info: an encoder keeps no KV (and has no chat template)" "$?" 0
"$BIN" info --model "$gm" --json | grep -q '"roles":\["rank"\],"encoder":true,"pooling":"rank","embedding_dim":1,"classifier_outputs":1'
check "info --json: roles and pooling" "$?" 0
"${ATTND_BUILD_DIR:?}/make_tiny" "$gm" modern-bert >/dev/null
out=$("$BIN" info --model "$gm" 2>&1)
grep -q "^architecture:  modern-bert$" <<<"$out" && grep -q "^runs:          yes" <<<"$out" &&
    grep -q "^roles:         embed (an encoder: attention both ways; pooling mean, 64 floats per input)$" <<<"$out"
check "info: a modern-bert file is named, runs and embeds" "$?" 0
rm -f "$gm"

# issue 51: a newcomer's commands, typed with llama.cpp's flags, each exiting as documented.
# run WANT_RC DESCRIPTION CMD...: checks the exit status; the output (stdout + stderr) is in $out
run() {
    local want=$1 what=$2
    shift 2
    out=$("$@" 2>&1)
    check "$what (exit $want)" "$?" "$want"
}
M=$ATTND_SOURCE_DIR/models/attnd-sotu.gguf
run 0 "generate -m -p -n -t -s --temp" "$BIN" generate -m "$M" -p "We the people" -n 6 -t 1 -s 3 --temp 0.7 --json
a=$(field 'd["tokens"]' <<<"$out")
run 0 "generate with attnd's own spellings" "$BIN" generate --model "$M" --prompt "We the people" --n 6 --threads 1 \
    --seed 3 --temperature 0.7 --json
check "the short flags and --temp mean what the long ones do" "$(field 'd["tokens"]' <<<"$out")" "$a"
run 0 "generate --top-k --top-p --min-p --repeat-penalty" "$BIN" generate -p "We" -n 2 --top-k 5 --top-p 0.9 \
    --min-p 0.1 --repeat-penalty 1.1 --temp 0.5
run 0 "generate -ngl 99 (a GPU flag) runs" "$BIN" generate -p "We" -n 2 -ngl 99
grep -q "^attnd generate: -ngl 99 ignored: attnd computes on the CPU$" <<<"$out"
check "-ngl is ignored with a note" "$?" 0
run 0 "generate -c 100000 runs at the model's context" "$BIN" generate -p "We" -n 2 -c 100000
grep -q "^attnd generate: --ctx-size 100000 is more than the model's context of 512; using 512$" <<<"$out"
check "generate: a capped --ctx-size says so" "$?" 0
run 1 "generate -c 8 with a longer prompt fails" "$BIN" generate -p "We the people of the United States" -n 4 -c 8
grep -q "exceed the context of 8" <<<"$out"
check "generate -c caps the context" "$?" 0
run 0 "score -m" "$BIN" score -m "$M" --tokens 1,571,262,545
run 2 "score -c: not an option of score" "$BIN" score -c 5 --tokens 1,2
grep -q "'-c' (--ctx-size) is not an option of attnd score" <<<"$out"
check "an alias of a flag the command lacks says so" "$?" 0
for c in info generate score template tokenize attention chat; do
    run 2 "$c --modle" "$BIN" $c --modle x
    grep -q "unknown option '--modle' (did you mean '--model'?)" <<<"$out"
    check "$c: did you mean '--model'" "$?" 0
done
run 2 "generate --tmep" "$BIN" generate --tmep 0.5
grep -q "did you mean '--temp'" <<<"$out"
check "did you mean '--temp'" "$?" 0
run 2 "generate --json=1: a flag given a value" "$BIN" generate --json=1
run 0 "info -m -c 100000" "$BIN" info -m "$M" -c 100000
grep -q "^attnd info: --ctx-size 100000 is more than the model's context of 512; using 512$" <<<"$out"
check "info: a capped --ctx-size says so" "$?" 0
run 1 "info on a file attnd cannot run" "$BIN" info -m "$ATTND_DATA_DIR/tokenizers/gpt2-bpe.gguf"
grep -q "^runs:          no: " <<<"$out"
check "info: exit 1 comes with 'runs: no'" "$?" 0
run 1 "info --json on a file attnd cannot run" "$BIN" info --json -m "$ATTND_DATA_DIR/tokenizers/gpt2-bpe.gguf"
run 1 "info on a missing file" "$BIN" info -m /nonexistent.gguf
for c in generate score; do
    run 0 "$c --help" "$BIN" $c --help
    grep -q "^usage: attnd $c \[--model PATH\]" <<<"$out"
    check "$c usage: --model is optional (the default model)" "$?" 0
done
run 0 "serve -m -c -t -n --temp -np -a -ngl" "$BIN" serve -m "$M" -c 256 -t 1 -n 64 --temp 0.5 -np 2 -a m1 -ngl 99 \
    --print-config
for kv in "model *= $M " "ctx_size *= 256 " "threads *= 1 " "max_tokens *= 64 " "temperature *= 0.5 " \
          "max_parallel *= 2 " "model_alias *= m1 "; do
    grep -q "^$kv" <<<"$out"
    check "serve: llama-server's spelling sets $kv" "$?" 0
done
grep -q "^attnd serve: -ngl 99 ignored: attnd computes on the CPU$" <<<"$out"
check "serve: -ngl is ignored with a note" "$?" 0
run 0 "serve --temperature --max-tokens (attnd's spelling)" "$BIN" serve --temperature 0.25 --max-tokens 7 --print-config
grep -q "^temperature *= 0.25 " <<<"$out"
check "serve --temperature still works" "$?" 0
run 2 "serve --prot" "$BIN" serve --prot 1
grep -q "did you mean '--port'" <<<"$out"
check "serve: did you mean '--port'" "$?" 0
run 0 "serve --help" "$BIN" serve --help
grep -q -- "--log-level LEVEL  *error | warn | info | debug" <<<"$out"
check "serve --help: --log-level takes a word" "$?" 0
grep -q -- "-m (--model), -c (--ctx-size)" <<<"$out"
check "serve --help names llama-server's spellings" "$?" 0
# a served --ctx-size above the model's context is cut with a warning in the log
log=$(mktemp)
"$BIN" serve -m "$M" -c 100000 --port 0 -t 1 2>"$log" &
pid=$!
for _ in $(seq 300); do grep -q "model ready" "$log" && break; sleep 0.1; done
kill "$pid"
wait "$pid"
grep -q "ctx_size 100000 is more than the model's context of 512; using 512" "$log"
check "serve: a capped ctx_size says so" "$?" 0
rm -f "$log"
run 0 "bench -m -t -p -n -r (llama-bench's flags)" "$BIN" bench -m "$M" -t 1 -p 8 -n 4 -r 1 --no-peer --no-growth
run 0 "chat --help" "$BIN" chat --help
"$BIN" --help | grep -q "^  chat "
check "--help lists chat" "$?" 0

# README's `attnd info` example is the default model's real output
block=$(awk '/^attnd info --model M.gguf$/{on=1; next} on && /^```$/{exit} on && $0 != "..." {print}' \
        "$ATTND_SOURCE_DIR/README.md")
[[ -n "$block" ]]
check "README has the attnd info example" "$?" 0
info=$("$BIN" info)
while IFS= read -r line; do
    grep -qxF -- "$line" <<<"$info" || { echo "FAIL: README line not in attnd info: $line"; fail=1; }
done <<<"$block"
exit $fail
