#!/usr/bin/env bash
# test_cli.sh — the CLI agrees with the server where they overlap: `attnd version`, and
# `--threads 0` meaning all CPUs in every command that takes --threads (as `serve --threads 0`);
# `attnd info` says whether a file runs, its chat template and KV cost (and README shows it true);
# `generate --draft-max` (speculative decoding) prints what plain generation prints.
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
"$BIN" bench --no-peer --no-growth --reps 1 --prompt-len 8 --n 4 2>&1 | grep -q '^attnd  *[0-9.]*  *[0-9.]*$'
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
rm -f "$gm"

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
