#!/usr/bin/env bash
# regenerate-xlmr.sh — rebuild the unigram ("t5") references from Hugging Face's own tokenizer:
#   tests/data/tokenizers/xlmr-ugm.jsonl         {"text", "ids", "ids_with_special", "decoded",
#                                                 "decoded_special"}
#   tests/data/tokenizers/xlmr-ugm-pairs.jsonl   {"a", "b", "ids", "type_ids"} (tok_encode_pair)
#
#   tests/data/tokenizers/regenerate-xlmr.sh      (needs python3, node and npm; the registry once)
#
# The vocabulary is xlmr-ugm.gguf, llama.cpp's models/ggml-vocab-nomic-bert-moe.gguf as it is:
# XLM-RoBERTa's 250002 SentencePiece pieces plus <mask> (the vocabulary of bge-m3,
# bge-reranker-v2-m3 and multilingual-e5), with its precompiled character map
# (nmt_nfkc), add_space_prefix and remove_extra_whitespaces. It is turned back into the
# tokenizer.json that XLM-RoBERTa checkpoints ship and run through npm tokenizers@0.23.2 (HF's
# Rust tokenizers, Node binding): Precompiled normaliser (the same map, base64), WhitespaceSplit
# then Metaspace (U+2581, prepended to every word), Unigram (unk 3, scores as in the file),
# <s> $A </s> / <s> $A </s> </s> $B </s> (one token type), Metaspace decoder.
#   ids               encode(text, add_special_tokens=false) with no added tokens and the control
#                     pieces renamed out of reach, so "<s>" in the text is plain text (attnd's
#                     parse_special=false; llama.cpp leaves control tokens out of the lattice)
#   ids_with_special  encode(text, add_special_tokens=true) with <s> <pad> </s> <unk> <mask> as
#                     added special tokens (lstrip off: XLM-R's <mask> strips the space before it
#                     in HF; attnd does not)
#   decoded           decode(ids, skip_special_tokens=true); decoded_special: decode(ids_with_special,
#                     skip_special_tokens=false)
# Texts: the 323 texts of gemma3-spm.jsonl (the corpus of the other tokenizers) plus the texts
# below.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error tokenizers@0.23.2 >&2)

python3 - "$here/xlmr-ugm.gguf" "$tmp" <<'PY'
import base64, json, struct, sys
data = open(sys.argv[1], "rb").read()
pos = 4
def rd(fmt):
    global pos
    v = struct.unpack_from(fmt, data, pos)
    pos += struct.calcsize(fmt)
    return v[0]
def rstr():
    global pos
    n = rd("<Q")
    s = data[pos:pos + n].decode("utf-8")
    pos += n
    return s
FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
def val(t):
    if t == 8:
        return rstr()
    if t == 9:
        et, n = rd("<I"), rd("<Q")
        if et == 0:
            global pos
            v = data[pos:pos + n]
            pos += n
            return bytes(v)
        return [val(et) for _ in range(n)]
    return rd(FMT[t])
rd("<I"), rd("<Q")
kv = {}
for _ in range(rd("<Q")):
    k = rstr()
    kv[k] = val(rd("<I"))
toks, types, scores = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"], kv["tokenizer.ggml.scores"]
charsmap = base64.b64encode(kv["tokenizer.ggml.precompiled_charsmap"]).decode()
CONTROL, UNKNOWN = 3, 2
unk = kv["tokenizer.ggml.unknown_token_id"]
specials = [(i, t) for i, (t, ty) in enumerate(zip(toks, types)) if ty in (CONTROL, UNKNOWN)]
def piece(i, t, ty, hide):
    return "\u0000\u0000\u0000ctl%d" % i if hide and ty in (CONTROL, UNKNOWN) else t
metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
def tokenizer(added):
    s, e = toks.index("<s>"), toks.index("</s>")
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in specials] if added else [],
        "normalizer": {"type": "Precompiled", "precompiled_charsmap": charsmap},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [s], "tokens": ["<s>"]},
                               "</s>": {"id": "</s>", "ids": [e], "tokens": ["</s>"]}}},
        "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": unk, "byte_fallback": False,
                  "vocab": [[piece(i, t, ty, not added), sc] for i, (t, ty, sc) in enumerate(zip(toks, types, scores))]},
    }
for name, added in [("special", True), ("plain", False)]:
    json.dump(tokenizer(added), open("%s/%s.json" % (sys.argv[2], name), "w"), ensure_ascii=False)
PY

python3 - "$here/gemma3-spm.jsonl" >"$tmp/texts.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    print(json.dumps({"text": json.loads(line)["text"]}, ensure_ascii=False))
extra = [
    "Hello world", "Hello   world  ", "  leading and trailing  ", "tab\tnew\nline\rcr \t\n  spaced",
    "\uff28\uff45\uff4c\uff4c\uff4f \uff37\uff4f\uff52\uff4c\uff44 \u2160\u2161 \u00aa\u00ba \u00bd \u2153 \u00b2\u00b3 \u2460",
    "na\u00efve caf\u00e9 e\u0301cole n\u0303 \u212b \ufb01 \u00df \u0130stanbul \u1f88",
    "ideographic\u3000space\u00a0nbsp\u2009thin\u2028line\u2029para\u1680ogham\u0085nel",
    "a\u0000b\u0001c\u200bd\u200de\ufefff\u00adg\u000bh\u000ci\u007fj\ue000k\ufffdl\u0378m\U000e0001n",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u4e2d\u6587\u6587\u672c\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u30cf\u309a \u30ac \u304b\u3099 \uff76\uff9e \uff8a\uff9f",
    "\u043d\u0435\u0449\u043e \u043d\u0430 \u0411\u044a\u043b\u0433\u0430\u0440\u0441\u043a\u0438 \u0645\u0631\u062d\u0628\u0627 \u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd",
    "\u0915\u0943\u0937\u094d\u0923 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "\U0001f999 \U0001f600x x\U0001f600 \u2603 \u2764\ufe0f \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1eb\U0001f1f7",
    "<s> hello </s> <unk> <mask> <pad> x<s>y </s></s>",
    "\u2581already\u2581escaped \u2581 \u2581\u2581x",
    "``quoted'' \u201csmart\u201d \u2018single\u2019 \u2014 \u2026 \u00ab\u00bb",
    "zzqxjvkw qqqqqqqqqqqqqqqqqqqqqqq \U00010400\U00010401 \U0001d400\U0001d401",
    "Ａ\u0301 A\u0301 \uff41\u0308 \u1100\u1161\u11a8",
    "", "   ", "\u0000\u0001\u200b",
]
for t in extra:
    print(json.dumps({"text": t}, ensure_ascii=False))
PY

cat >"$tmp/ref.js" <<'JS'
const fs = require("node:fs");
const { Tokenizer } = require("tokenizers");
const dir = process.argv[2];
const special = Tokenizer.fromFile(`${dir}/special.json`), plain = Tokenizer.fromFile(`${dir}/plain.json`);
const ids = async (tok, text, add) => (await tok.encode(text, null, { addSpecialTokens: add })).getIds();
(async () => {
    for (const line of fs.readFileSync(`${dir}/texts.jsonl`, "utf8").trim().split("\n")) {
        const text = JSON.parse(line).text;
        const r = { text, ids: await ids(plain, text, false), ids_with_special: await ids(special, text, true) };
        r.decoded = await special.decode(r.ids, true);
        r.decoded_special = await special.decode(r.ids_with_special, false);
        process.stdout.write(JSON.stringify(r) + "\n");
    }
    const pairs = [
        ["what is panda?", "The giant panda (Ailuropoda melanoleuca) is a bear species endemic to China."],
        ["what is panda?", "hi"],
        ["Wie heißt die Hauptstadt?", "Die Hauptstadt von Österreich ist Wien."],
        ["", "an empty query"],
        ["an empty document", ""],
        ["</s> in a query", "and <s> in a document"],
        ["中文查询", "日本語の文書です。"],
    ];
    let out = "";
    for (const [a, b] of pairs) {
        const e = await plain.encode(a, b, { addSpecialTokens: true }); // special text stays text
        out += JSON.stringify({ a, b, ids: e.getIds(), type_ids: e.getTypeIds() }) + "\n";
    }
    fs.writeFileSync(`${dir}/pairs.jsonl`, out);
})();
JS
(cd "$tmp" && node ref.js "$tmp") >"$here/xlmr-ugm.jsonl"
cp "$tmp/pairs.jsonl" "$here/xlmr-ugm-pairs.jsonl"
echo "regenerate-xlmr.sh: $(wc -l <"$here/xlmr-ugm.jsonl") texts, $(wc -l <"$here/xlmr-ugm-pairs.jsonl") pairs" >&2
