#!/usr/bin/env bash
# test_http_xlmr.sh — XLM-RoBERTa embedders and rerankers (bge-m3, bge-reranker-v2-m3,
# multilingual-e5: arch bert, tokenizer model t5) served end to end, against llama.cpp.
# Models: make_tiny's xlmr (bge-m3's layout, CLS pooling) and xlmr-rank (a one-logit head), each
# with the real 250048-piece unigram vocabulary (tests/data/tokenizers/xlmr-ugm.gguf) and random
# weights. tests/data/reference-xlmr.json (regenerate.sh --only-xlmr) holds llama.cpp's ids, CLS
# vectors and rerank logits of the same texts; here: /tokenize gives llama.cpp's ids (<s> ... </s>),
# /v1/embeddings' vectors have cosine >= 0.9999 with llama.cpp's and count the same tokens, and
# /v1/rerank's scores are within 1e-3 of llama.cpp's logits, in its order, counting its pair
# tokens (<s> query </s> </s> document </s>).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
status=0
REF=$ATTND_DATA_DIR/reference-xlmr.json
VOCAB=$ATTND_DATA_DIR/tokenizers/xlmr-ugm.gguf
MAKE_TINY=$(dirname "$ATTND_BINARY")/make_tiny
"$MAKE_TINY" "$TMP/xlmr.gguf" xlmr "$VOCAB" || fail "make_tiny xlmr"
"$MAKE_TINY" "$TMP/xlmr-rank.gguf" xlmr-rank "$VOCAB" || fail "make_tiny xlmr-rank"
start_server e --model "$TMP/xlmr.gguf" --threads 1
start_server r --model "$TMP/xlmr-rank.gguf" --threads 1
E=http://127.0.0.1:$e_PORT R=http://127.0.0.1:$r_PORT

# the requests, from the reference's texts
python3 - "$REF" "$TMP" <<'EOF'
import json, sys
ref, tmp = json.load(open(sys.argv[1])), sys.argv[2]
for i, t in enumerate(ref["embed"]["texts"]):
    json.dump({"content": t, "add_special": True}, open(f"{tmp}/tok{i}.json", "w"))
json.dump({"input": ref["embed"]["texts"]}, open(f"{tmp}/embed.json", "w"))
json.dump({"query": ref["rerank"]["query"], "documents": ref["rerank"]["documents"]}, open(f"{tmp}/rerank.json", "w"))
EOF
n_texts=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["embed"]["texts"]))' "$REF")
for ((i = 0; i < n_texts; i++)); do
    curl -s "$E/tokenize" -H 'Content-Type: application/json' --data-binary @"$TMP/tok$i.json" > "$TMP/tok$i.out"
done
check "/tokenize: llama.cpp's ids for every text, <s> ... </s>" python3 - "$REF" "$TMP" "$n_texts" <<'EOF'
import json, sys
ref, tmp, n = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
bad = [i for i in range(n) if json.load(open(f"{tmp}/tok{i}.out"))["tokens"] != ref["embed"]["ids"][i]]
for i in bad: print(f"text {i}: {json.load(open(f'{tmp}/tok{i}.out'))['tokens']} vs {ref['embed']['ids'][i]}", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF

curl -s "$E/v1/embeddings" -H 'Content-Type: application/json' --data-binary @"$TMP/embed.json" > "$TMP/embed.out"
check "/v1/embeddings: cosine >= 0.9999 with llama.cpp's CLS vectors, its token count" python3 - "$REF" "$TMP/embed.out" <<'EOF'
import json, math, sys
ref, got = json.load(open(sys.argv[1]))["embed"], json.load(open(sys.argv[2]))
ok = len(got["data"]) == len(ref["vectors"])
ok = ok and got["usage"]["prompt_tokens"] == sum(len(x) for x in ref["ids"])
for d, want in zip(got["data"], ref["vectors"]):
    v = d["embedding"]
    cos = sum(a * b for a, b in zip(v, want)) / math.sqrt(sum(a * a for a in v) * sum(b * b for b in want))
    print(f"# text {d['index']}: cosine {cos:.8f}")
    ok = ok and len(v) == len(want) and cos >= 0.9999
sys.exit(0 if ok else 1)
EOF

curl -s "$R/v1/rerank" -H 'Content-Type: application/json' --data-binary @"$TMP/rerank.json" > "$TMP/rerank.out"
check "/v1/rerank: llama.cpp's logits within 1e-3, its order, its pair tokens" python3 - "$REF" "$TMP/rerank.out" <<'EOF'
import json, sys
ref, got = json.load(open(sys.argv[1]))["rerank"], json.load(open(sys.argv[2]))
want = ref["scores"]
score = {r["index"]: r["relevance_score"] for r in got["results"]}
ok = sorted(score) == list(range(len(want))) and got["usage"]["prompt_tokens"] == sum(len(x) for x in ref["ids"])
for i, w in enumerate(want):
    print(f"# document {i}: {score.get(i)} vs llama.cpp {w}")
    ok = ok and abs(score.get(i, 1e9) - w) <= 1e-3
# the results come best first; documents llama.cpp ranks more than 2e-3 apart keep their order
order = [r["index"] for r in got["results"]]
ok = ok and all(order.index(i) < order.index(j) for i in range(len(want)) for j in range(len(want)) if want[i] > want[j] + 2e-3)
sys.exit(0 if ok else 1)
EOF
check_status 400 "the reranker does not embed" "$R/v1/embeddings" -d '{"input": "a"}'
check_status 400 "the embedder does not rerank" "$E/v1/rerank" -d '{"query": "a", "documents": ["b"]}'
exit $status
