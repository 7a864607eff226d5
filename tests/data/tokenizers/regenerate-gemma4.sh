#!/usr/bin/env bash
# regenerate-gemma4.sh — rebuild the Gemma 4 vocabulary fixture and its cases:
#   tests/data/tokenizers/gemma4-bpe.gguf    a "gemma4" BPE vocabulary (tokenizer.ggml.model gemma4:
#                                            U+2581 for spaces, merges over raw UTF-8, <0xXX> bytes)
#                                            made from Gemma 3's first 32768 ids and Gemma 4's chat
#                                            tokens by tools/vocab/gemma4_bpe_from_spm.py
#   tests/data/tokenizers/gemma4-bpe.jsonl   {"text", "ids", "ids_with_special"}: llama.cpp's ids
#
#   tests/data/tokenizers/regenerate-gemma4.sh      (needs python3 and node; the peer installed)
#
# Texts: those of gemma3-spm.jsonl (the conformance texts and the family ones) and Gemma 4's chat
# and tool-call markup below.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
peer=$("$root/tools/peers/llamacpp/install.sh")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$root/tools/vocab/gemma4_bpe_from_spm.py" "$here/gemma3-spm.gguf" 32768 "$here/gemma4-bpe.gguf"
python3 - "$here/gemma3-spm.jsonl" >"$tmp/texts.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    print(json.dumps({"text": json.loads(line)["text"]}, ensure_ascii=False))
extra = [
    "<|turn>system\nYou are helpful.<turn|>\n<|turn>user\nHi there!<turn|>\n<|turn>model\n",
    "<|channel>thought\nLet me think.<channel|>The answer is 4.",
    '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>C<|"|>}<tool_call|><|tool_response>',
    "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n",
    "a\nb\n\nc\n\n\nd \n e  \n\n  f",
    "   leading and trailing spaces   ",
    "\u00e0\u00e9\u00ee\u00f5\u00fc \u0416\u0443\u043a \u3053\u3093\u306b\u3061\u306f \U0001F916\U0001F9E0 already",
]
for t in extra:
    print(json.dumps({"text": t}, ensure_ascii=False))
PY
node "$peer/tokenize.mjs" --model "$here/gemma4-bpe.gguf" --in "$tmp/texts.jsonl" >"$here/gemma4-bpe.jsonl"
echo "regenerate-gemma4.sh: wrote gemma4-bpe.gguf and gemma4-bpe.jsonl ($(wc -l <"$here/gemma4-bpe.jsonl") texts)" >&2
