#!/usr/bin/env bash
# regenerate-bert.sh — rebuild the WordPiece references from Hugging Face's own tokenizer:
#   tests/data/tokenizers/bert-bge.jsonl         {"text", "ids", "ids_with_special", "decoded",
#                                                 "decoded_special", "ids_cased", "ids_lower",
#                                                 "ids_strip"}
#   tests/data/tokenizers/bert-bge-pairs.jsonl   {"a", "b", "ids", "type_ids"}: encode(a, b), special
#                                                text in a and b plain (attnd's tok_encode_pair)
#
#   tests/data/tokenizers/regenerate-bert.sh      (needs python3, node and npm; the registry once)
#
# The vocabulary is bert-bge.gguf (llama.cpp's models/ggml-vocab-bert-bge.gguf: bge-small-en-v1.5,
# i.e. bert-base-uncased's 30522 pieces), turned back into HF's form (a "▁x" token is the
# word-initial piece "x", a bare "x" the continuation "##x", control tokens as they are) and run
# through npm tokenizers@0.23.2, HF's Rust tokenizers library itself (Node binding), with the
# tokenizer.json that BERT checkpoints ship: BertNormalizer (clean_text, handle_chinese_chars,
# strip_accents null, lowercase), BertPreTokenizer, WordPiece ([UNK], "##", 100 characters),
# the [CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1 template, and the WordPiece decoder.
#   ids               encode(text, add_special_tokens=false) with no added tokens, so "[CLS]" in
#                     the text is plain text (attnd's parse_special=false)
#   ids_with_special  encode(text, add_special_tokens=true) with the five specials as added tokens
#   decoded           decode(ids, skip_special_tokens=true); decoded_special: decode(ids_with_special,
#                     skip_special_tokens=false)
#   ids_cased, ids_lower, ids_strip   as ids, with lowercase/strip_accents false/false, true/false
#                     and false/true (the GGUF keys tokenizer.ggml.normalizer.*)
# Texts: the 323 texts of gemma3-spm.jsonl (the corpus of the other tokenizers) plus the BERT
# texts below.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error tokenizers@0.23.2 >&2)

python3 - "$here/bert-bge.gguf" "$tmp" <<'PY'
import json, struct, sys
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
        return [val(et) for _ in range(n)]
    return rd(FMT[t])
rd("<I"), rd("<Q")
kv = {}
for _ in range(rd("<Q")):
    k = rstr()
    kv[k] = val(rd("<I"))
toks, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
CONTROL = 3
def hf(tok, ty):
    if ty == CONTROL or (tok.startswith("[") and tok.endswith("]")):  # [unusedN]: kept by old converters
        return tok
    return tok[1:] if tok.startswith("\u2581") else "##" + tok
vocab = {}
for i, (t, ty) in enumerate(zip(toks, types)):
    vocab.setdefault(hf(t, ty), i)
specials = [(i, t) for i, (t, ty) in enumerate(zip(toks, types)) if ty == CONTROL]
def tokenizer(lower, strip, added):
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in specials] if added else [],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": strip, "lowercase": lower},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [vocab["[CLS]"]], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [vocab["[SEP]"]], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }
for name, lower, strip, added in [("special", True, None, True), ("plain", True, None, False),
                                  ("cased", False, False, False), ("lower", True, False, False),
                                  ("strip", False, True, False)]:
    json.dump(tokenizer(lower, strip, added), open("%s/%s.json" % (sys.argv[2], name), "w"), ensure_ascii=False)
PY

python3 - "$here/gemma3-spm.jsonl" >"$tmp/texts.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    print(json.dumps({"text": json.loads(line)["text"]}, ensure_ascii=False))
extra = [
    "Hello, World! HELLO world hello",
    "\u00c4pfel caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m \u00f1 \u00d8 \u00df \ufb01 e\u0301cole \u212b",
    "\u0130stanbul \u0131i \u0130 I\u0307 \u01c5emal \u1f88",
    "\u03a3\u0391\u03a3 \u03c3\u03b1\u03c2 \u1f48\u03b4\u03c5\u03c3\u03c3\u03b5\u03cd\u03c2",
    "\u1fef test` \u037e; \u0387",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u4e2d\u6587\u6587\u672c\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\U00020000\U0002A6D6x\U0002B820y\U0002B920z\U0002CEAF \uf900\ufa0e\u3400\u4dbf \U0002F800",
    "ideographic\u3000space\u00a0nbsp\u2009thin\u2028line\u2029para\u1680ogham",
    "a\u0000b\u0001c\u200bd\u200de\ufefff\u00adg\u0085h\u000bi\u000cj\u007fk\ue000l\ufffdm\u0378n\U000e0001o",
    "tab\tnew\nline\rcr \t\n  spaced",
    "a" * 100, "a" * 101, "\u00e9" * 100 + " " + "\u00e9" * 101, "ab" * 60 + " x", "x" * 99 + "!" + "y" * 101,
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "\U0001f999 \U0001f600x x\U0001f600 \u2603 \u2764\ufe0f",
    "a\u00bfb\u00a1c\u00abd\u00bbe\u2014f\u2026g\u00a7h\u00b6i\u2020j\u2030k\u2039l\u2022m\u300cn\u300do",
    "$5+3=8 <x> ^y~ |z| `q` {w} [v] \\u @h #t %p &a *s _u",
    "1,000,000.50 \u00bd \u2153 \u00b2\u00b3 \u2460\u2461 \u0663\u0664 \uff11\uff12",
    "[CLS] hello [SEP] [UNK] [MASK] [PAD] [unused0] [cls] x[SEP]y",
    "\u043d\u0435\u0449\u043e \u043d\u0430 \u0411\u044a\u043b\u0433\u0430\u0440\u0441\u043a\u0438 \u0645\u0631\u062d\u0628\u0627 \u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd",
    "\u0915\u0943\u0937\u094d\u0923 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "don't can't I'm we've they're it's o'clock rock 'n' roll",
    "\uff28\uff45\uff4c\uff4c\uff4f \uff37\uff4f\uff52\uff4c\uff44 \u2160\u2161 \u00aa\u00ba",
    "",
    "   ",
    "\u0000\u0001\u200b",
]
for t in extra:
    print(json.dumps({"text": t}, ensure_ascii=False))
PY

cat >"$tmp/ref.js" <<'JS'
const fs = require("node:fs");
const { Tokenizer } = require("tokenizers");
const dir = process.argv[2];
const load = (n) => Tokenizer.fromFile(`${dir}/${n}.json`);
const [special, plain, cased, lower, strip] = ["special", "plain", "cased", "lower", "strip"].map(load);
const ids = async (tok, text, add) => (await tok.encode(text, null, { addSpecialTokens: add })).getIds();
(async () => {
    for (const line of fs.readFileSync(`${dir}/texts.jsonl`, "utf8").trim().split("\n")) {
        const text = JSON.parse(line).text;
        const r = { text, ids: await ids(plain, text, false), ids_with_special: await ids(special, text, true) };
        r.decoded = await special.decode(r.ids, true);
        r.decoded_special = await special.decode(r.ids_with_special, false);
        r.ids_cased = await ids(cased, text, false);
        r.ids_lower = await ids(lower, text, false);
        r.ids_strip = await ids(strip, text, false);
        process.stdout.write(JSON.stringify(r) + "\n");
    }
    const pairs = [
        ["what is panda?", "The giant panda (Ailuropoda melanoleuca) is a bear species endemic to China."],
        ["what is panda?", "hi"],
        ["Wie heißt die Hauptstadt?", "Die Hauptstadt von Österreich ist Wien."],
        ["", "an empty query"],
        ["an empty document", ""],
        ["[SEP] in a query", "and [CLS] in a document"],
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
(cd "$tmp" && node ref.js "$tmp") >"$here/bert-bge.jsonl"
cp "$tmp/pairs.jsonl" "$here/bert-bge-pairs.jsonl"
echo "regenerate-bert.sh: $(wc -l <"$here/bert-bge.jsonl") texts, $(wc -l <"$here/bert-bge-pairs.jsonl") pairs" >&2
