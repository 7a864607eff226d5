#!/usr/bin/env bash
# test_tokenize_cli.sh — `attnd tokenize` / `attnd detokenize` on JSON lines: one output line per
# input line in order, BOS per metadata, --no-bos, --parse-special, error lines for bad input,
# a round trip through detokenize, and usage errors (vocabularies from tests/data/tokenizers).
set -u
BIN=${ATTND_BINARY:?ATTND_BINARY not set}
DATA=${ATTND_DATA_DIR:-$(cd "$(dirname "$0")" && pwd)/data}
SPM="$DATA/tokenizers/llama-spm.gguf"
L3="$DATA/tokenizers/llama3-bpe.gguf"
fail=0
check() { # name, actual, expected
    if [[ "$2" != "$3" ]]; then
        echo "FAIL: $1"; echo "  got:      $2"; echo "  expected: $3"; fail=1
    else
        echo "ok: $1"
    fi
}

out=$(printf '{"text": "Hello world"}\n{"text": ""}\n' | "$BIN" tokenize --model "$SPM")
check "BOS added per add_bos_token, one line per input" "$out" $'{"ids": [1, 15043, 3186]}\n{"ids": [1]}'

out=$(printf '{"text": "Hello world"}\n' | "$BIN" tokenize --model "$SPM" --no-bos)
check "--no-bos" "$out" '{"ids": [15043, 3186]}'

out=$(printf '{"text": "<|eot_id|>"}\n' | "$BIN" tokenize --model "$L3" --no-bos --parse-special)
check "--parse-special matches control tokens" "$out" '{"ids": [128009]}'
out=$(printf '{"text": "<|eot_id|>"}\n' | "$BIN" tokenize --model "$L3" --no-bos)
[[ "$out" != '{"ids": [128009]}' && "$out" == '{"ids": ['* ]]
check "control tokens are plain text by default" "$?" 0

out=$(printf '{"text": "a"}\nnot json\n{"ids": [1]}\n{"text": "b"}\n' | "$BIN" tokenize --model "$L3" --no-bos)
rc=$?
check "bad lines give error lines, in place" "$(echo "$out" | cut -c1-10)" $'{"ids": [6\n{"error": \n{"error": \n{"ids": [6'
check "bad lines make the exit status 1" "$rc" 1

out=$(printf '{"text": "caf\\u00e9 \\u65e5\\u672c \\ud83d\\ude00 x"}\n' | "$BIN" tokenize --model "$L3" | "$BIN" detokenize --model "$L3")
check "detokenize(tokenize(text)) == text (BOS hidden)" "$out" '{"text": "café 日本 😀 x"}'
out=$(printf '{"ids": [128000, 9906]}\n' | "$BIN" detokenize --model "$L3" --render-special)
check "--render-special shows control tokens" "$out" '{"text": "<|begin_of_text|>Hello"}'
out=$(printf '{"ids": [1, 2, 3]}\n{"ids": [99999999]}\n{"ids": "x"}\n' | "$BIN" detokenize --model "$L3")
rc=$?
check "detokenize error lines" "$(echo "$out" | cut -c1-10)" $'{"text": "\n{"error": \n{"error": '
check "detokenize exit status 1 on errors" "$rc" 1
out=$(printf '{"ids": [15043, 29871, 243]}\n' | "$BIN" detokenize --model "$SPM")
check "a cut-off UTF-8 byte becomes U+FFFD" "$out" '{"text": "Hello �"}'

"$BIN" tokenize --bogus >/dev/null 2>&1
check "unknown option is a usage error" "$?" 2
"$BIN" tokenize --model /nonexistent.gguf </dev/null >/dev/null 2>&1
check "missing model file exits 1" "$?" 1
"$BIN" tokenize --help | grep -q -- --parse-special
check "--help documents --parse-special" "$?" 0
exit $fail
