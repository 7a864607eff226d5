#!/usr/bin/env bash
# test_tokenize_cli.sh — `attnd tokenize` / `attnd detokenize` speak like POST /tokenize and
# /detokenize (field names, defaults): plain lines, --text, --jsonl bodies, one output line per
# input line in order, error lines for bad input, a round trip through detokenize, usage errors, a
# WordPiece vocabulary (vocabularies from tests/data/tokenizers).
set -u
BIN=${ATTND_BINARY:?ATTND_BINARY not set}
DATA=${ATTND_DATA_DIR:-$(cd "$(dirname "$0")" && pwd)/data}
SPM="$DATA/tokenizers/llama-spm.gguf"
L3="$DATA/tokenizers/llama3-bpe.gguf"
source "$(dirname "$0")/check_lib.sh"

# plain text lines, defaults as POST /tokenize: no BOS, special-token text parsed
out=$(printf 'Hello world\n\n' | "$BIN" tokenize --model "$SPM")
check "plain lines, one output line each, no BOS by default" "$out" $'{"tokens": [15043, 3186]}\n{"tokens": []}'
out=$("$BIN" tokenize --model "$SPM" --text "Hello world" --add-special)
check "--text and --add-special (BOS per add_bos_token)" "$out" '{"tokens": [1, 15043, 3186]}'
out=$("$BIN" tokenize --model "$SPM" --text "Hello" --with-pieces)
check "--with-pieces as /tokenize's with_pieces" "$out" '{"tokens": [{"id": 15043, "piece": "▁Hello"}]}'

out=$("$BIN" tokenize --model "$L3" --text "<|eot_id|>")
check "special-token text is parsed by default" "$out" '{"tokens": [128009]}'
out=$("$BIN" tokenize --model "$L3" --text "<|eot_id|>" --no-parse-special)
[[ "$out" != '{"tokens": [128009]}' && "$out" == '{"tokens": ['* ]]
check "--no-parse-special keeps it as text" "$?" 0

# --jsonl: each line is a /tokenize body, absent fields take the flags' values
out=$(printf '{"content": "a"}\nnot json\n{"tokens": [1]}\n{"content": "b", "add_special": true}\n{"content": "c", "add_special": 1}\n' |
      "$BIN" tokenize --model "$L3" --jsonl)
rc=$?
check "--jsonl: /tokenize bodies, error lines in place" "$out" $'{"tokens": [64]}\n{"error": "line 2: expected {\\"content\\": \\"...\\"}: \'[\' or \'{\' expected near \'not\'"}\n{"error": "line 3: expected {\\"content\\": \\"...\\"}"}\n{"tokens": [128000, 65]}\n{"error": "line 5: add_special, parse_special and with_pieces must be booleans"}'
check "bad lines make the exit status 1" "$rc" 1
"$BIN" tokenize --model "$L3" --text x --jsonl >/dev/null 2>&1
check "--text with --jsonl is a usage error" "$?" 2

out=$("$BIN" tokenize --model "$L3" --text "café 日本 😀 x" | "$BIN" detokenize --model "$L3")
check "detokenize(tokenize(text)) == text, /detokenize's answer" "$out" '{"content": "café 日本 😀 x"}'
out=$(printf '128000 9906\n' | "$BIN" detokenize --model "$L3" --render-special)
check "plain ids; --render-special shows control tokens" "$out" '{"content": "<|begin_of_text|>Hello"}'
out=$("$BIN" detokenize --model "$L3" --tokens 9906,1917)
check "detokenize --tokens" "$out" '{"content": "Hello world"}'
out=$(printf '{"tokens": [1, 2, 3]}\n99999999\n{"tokens": "x"}\n1 two\n' | "$BIN" detokenize --model "$L3")
rc=$?
check "detokenize error lines" "$(echo "$out" | cut -c1-12)" $'{"content": \n{"error": "l\n{"error": "l\n{"error": "l'
check "detokenize exit status 1 on errors" "$rc" 1
out=$(printf '15043 29871 243\n' | "$BIN" detokenize --model "$SPM")
check "a cut-off UTF-8 byte becomes U+FFFD" "$out" '{"content": "Hello �"}'

"$BIN" tokenize --bogus >/dev/null 2>&1
check "unknown option is a usage error" "$?" 2
"$BIN" tokenize --model /nonexistent.gguf </dev/null >/dev/null 2>&1
check "missing model file exits 1" "$?" 1
"$BIN" tokenize --help | grep -q -- --no-parse-special
check "--help documents --no-parse-special" "$?" 0
"$BIN" tokenize --text "We the people" >/dev/null
check "the default model is used without --model" "$?" 0

# a WordPiece (BERT) vocabulary: lowercased, accents stripped, pieces, [CLS] ... [SEP]
BERT="$DATA/tokenizers/bert-bge.gguf"
out=$("$BIN" tokenize --model "$BERT" --text "Unaffable Äpfel" --with-pieces)
check "bert: word-initial and continuation pieces" "$out" '{"tokens": [{"id": 14477, "piece": "▁una"}, {"id": 20961, "piece": "ffa"}, {"id": 3468, "piece": "ble"}, {"id": 9706, "piece": "▁ap"}, {"id": 7959, "piece": "fe"}, {"id": 2140, "piece": "l"}]}'
out=$("$BIN" tokenize --model "$BERT" --text "Hello, World!" --add-special)
check "bert: --add-special is [CLS] ... [SEP]" "$out" '{"tokens": [101, 7592, 1010, 2088, 999, 102]}'
out=$(echo "$out" | "$BIN" detokenize --model "$BERT" --render-special)
check "bert: detokenize joins the pieces as HF's decoder" "$out" '{"content": "[CLS] hello, world! [SEP]"}'
exit $fail
