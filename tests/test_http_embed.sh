# test_http_embed.sh — embeddings and reranking on real servers: POST /v1/embeddings (strings,
# ids, base64, dimensions, truncate, usage), Ollama's /api/embed and /api/embeddings, POST
# /v1/rerank and /rerank (sorted, top_n, documents), each vector equal to what `attnd embed` /
# `attnd rerank` compute from the same file, batches equal to their inputs alone, embeddings
# beside a running generation, the caps (embed_max_inputs, embed_max_tokens), and the roles: a
# generation model serves embeddings only with --embeddings, and an endpoint the model does not
# serve is a 400 naming those it does, on one model or several; /v1/attention on the bert (rows
# both ways, each input over its own tokens, = attnd attention; what encoders cannot do refused by
# name). Models: stories260K (a llama),
# make_tiny's decoder reranker, and its small bert (embeds only) and bert cross-encoder (ranks only),
# and a small modern-bert (on the server of several models).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
status=0
STORIES=$ATTND_DATA_DIR/models/stories260K.gguf
RANK=$TMP/rank.gguf
"$(dirname "$ATTND_BINARY")/make_tiny" "$RANK" rank || fail "make_tiny rank"

start_server e --model "$STORIES" --threads 1 --embeddings --embed-max-inputs 4 --embed-max-tokens 64
start_server g --model "$STORIES" --threads 1
start_server r --model "$RANK" --threads 1
E=http://127.0.0.1:$e_PORT G=http://127.0.0.1:$g_PORT R=http://127.0.0.1:$r_PORT

# py CHECK_NAME JSON_FILES... — the Python checks below, one per name; exit 0 = pass
py() { python3 "$TMP/checks.py" "$@"; }
cat > "$TMP/checks.py" <<'EOF'
import base64, json, math, struct, sys
name, files = sys.argv[1], sys.argv[2:]
js = [json.load(open(f)) if f.endswith(".json") else None for f in files]
def close(a, b, tol=1e-5): return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))
def norm(v): return math.sqrt(sum(x * x for x in v))
def cli(f): return [json.loads(l) for l in open(f) if l.strip()]
a = js[0]
if name == "openai":      # 3 inputs, unit vectors of 64, usage, = the CLI's
    d = a["data"]; c = cli(files[1])
    ok = a["object"] == "list" and [x["index"] for x in d] == [0, 1, 2] and all(x["object"] == "embedding" for x in d)
    ok = ok and all(len(x["embedding"]) == 64 and abs(norm(x["embedding"]) - 1) < 1e-5 for x in d)
    ok = ok and all(close(x["embedding"], y) for x, y in zip(d, c)) and a["usage"]["prompt_tokens"] == a["usage"]["total_tokens"] > 3
    sys.exit(0 if ok else 1)
if name == "alone":       # a batch's vectors = each input's alone
    sys.exit(0 if all(close(x["embedding"], y["data"][0]["embedding"]) for x, y in zip(a["data"], js[1:])) else 1)
if name == "dims":        # dimensions 8: the first 8, renormalised; base64 = the floats
    full, cut, b64 = a["data"][0]["embedding"], js[1]["data"][0]["embedding"], js[2]["data"][0]["embedding"]
    want = [x / norm(full[:8]) for x in full[:8]]
    floats = list(struct.unpack("<8f", base64.b64decode(b64)))
    sys.exit(0 if close(cut, want) and close(floats, cut, 1e-7) else 1)
if name == "ids":         # token ids as input = the text's tokens
    sys.exit(0 if close(a["data"][0]["embedding"], js[1]["data"][0]["embedding"]) else 1)
if name == "ollama":      # /api/embed = /v1/embeddings; legacy = raw, same direction
    e, o, l = a["embeddings"], js[1]["data"], js[2]["embedding"]
    ok = len(e) == 2 and all(close(x, y["embedding"]) for x, y in zip(e, o)) and a["prompt_eval_count"] > 0
    ok = ok and a["total_duration"] > 0 and a["model"] == "stories260K" and abs(norm(l) - 1) > 1e-3
    ok = ok and close([x / norm(l) for x in l], e[0])
    sys.exit(0 if ok else 1)
if name == "rerank":      # sorted, top_n, documents, = the CLI's scores
    res, c = a["results"], cli(files[1])[0]["results"]
    s = [x["relevance_score"] for x in res]
    ok = len(res) == 2 and s == sorted(s, reverse=True) and a["usage"]["total_tokens"] > 0
    ok = ok and all(x["document"]["text"] == y["document"]["text"] and abs(x["relevance_score"] - y["relevance_score"]) < 1e-5 and x["index"] == y["index"] for x, y in zip(res, c))
    sys.exit(0 if ok else 1)
if name == "rerank_all":  # no top_n: every document, no documents unless asked
    res = a["results"]
    sys.exit(0 if sorted(x["index"] for x in res) == [0, 1, 2] and all("document" not in x for x in res) else 1)
sys.exit(2)
EOF

post() { curl -s "$1" -H 'Content-Type: application/json' -d "$2"; }

# ---- /v1/embeddings ----
texts='["Once upon a time", "a little cat", "the sun was bright"]'
post "$E/v1/embeddings" "{\"input\": $texts, \"model\": \"x\"}" > "$TMP/o.json"
"$ATTND_BINARY" embed --model "$STORIES" --threads 1 "Once upon a time" "a little cat" "the sun was bright" > "$TMP/cli.txt" \
    || bad "attnd embed runs"
check "/v1/embeddings: 3 unit vectors of 64 floats, usage, equal to attnd embed" py openai "$TMP/o.json" "$TMP/cli.txt"
for i in 0 1 2; do
    post "$E/v1/embeddings" "{\"input\": $(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[$i]))" "$texts")}" > "$TMP/a$i.json"
done
check "/v1/embeddings: a batch's vectors equal each input alone" py alone "$TMP/o.json" "$TMP/a0.json" "$TMP/a1.json" "$TMP/a2.json"
post "$E/v1/embeddings" '{"input": "a little cat", "dimensions": 8}' > "$TMP/d8.json"
post "$E/v1/embeddings" '{"input": "a little cat", "dimensions": 8, "encoding_format": "base64"}' > "$TMP/b64.json"
check "/v1/embeddings: dimensions cut and renormalise; base64 is their float32 bytes" py dims "$TMP/a1.json" "$TMP/d8.json" "$TMP/b64.json"
ids=$(curl -s "$E/tokenize" -d '{"content": "a little cat", "add_special": true}' | python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
post "$E/v1/embeddings" "{\"input\": [$ids]}" > "$TMP/ids.json"
check "/v1/embeddings: token ids embed as their text does" py ids "$TMP/ids.json" "$TMP/a1.json"
check_status 400 "/v1/embeddings: 5 inputs over embed_max_inputs 4" "$E/v1/embeddings" -d '{"input": ["a","b","c","d","e"]}'
long=$(python3 -c "print('Once upon a time ' * 40)")
check_status 400 "/v1/embeddings: an input over embed_max_tokens 64" "$E/v1/embeddings" -d "{\"input\": \"$long\"}"
post "$E/v1/embeddings" "{\"input\": \"$long\", \"truncate\": true}" > "$TMP/t.json"
check "/v1/embeddings: truncate cuts it to 64 tokens" grep -q '"prompt_tokens":64,' "$TMP/t.json"
check_status 400 "/v1/embeddings: dimensions above the model's" "$E/v1/embeddings" -d '{"input": "a", "dimensions": 65}'
check_status 400 "/v1/embeddings: a bad encoding_format" "$E/v1/embeddings" -d '{"input": "a", "encoding_format": "fp8"}'
check_status 400 "/v1/embeddings: a token id outside the vocabulary" "$E/v1/embeddings" -d '{"input": [1, 99999]}'
check_status 400 "/v1/embeddings: a broken body" "$E/v1/embeddings" -d '{"input": ['
check_status 200 "/embeddings (llama-server's path)" "$E/embeddings" -d '{"input": "a"}'

# ---- embeddings beside a generation: both answer, the vector unchanged ----
curl -s "$E/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0}' > "$TMP/gen.json" &
gen=$!
post "$E/v1/embeddings" '{"input": "a little cat"}' > "$TMP/beside.json"
wait $gen
check "a generation beside the embedding ends" grep -q '"finish_reason"' "$TMP/gen.json"
check "an embedding beside a generation equals it alone" py ids "$TMP/beside.json" "$TMP/a1.json"

# ---- Ollama ----
post "$E/api/embed" '{"model": "stories260K", "input": ["Once upon a time", "a little cat"]}' > "$TMP/oe.json"
post "$E/api/embeddings" '{"model": "stories260K:latest", "prompt": "Once upon a time"}' > "$TMP/ol.json"
check "/api/embed = /v1/embeddings; /api/embeddings is the raw vector" py ollama "$TMP/oe.json" "$TMP/o.json" "$TMP/ol.json"
check "/api/show: capabilities completion and embedding" grep -q '"capabilities":\["completion","embedding"\]' \
    <(post "$E/api/show" '{"model": "stories260K"}')
check_status 404 "/api/embed: another model's name" "$E/api/embed" -d '{"model": "llama3", "input": "a"}'
check "/api/embed: errors in Ollama's shape" grep -q '^{"error":"model' <(post "$E/api/embed" '{"model": "llama3", "input": "a"}')
post "$E/api/embed" "{\"model\": \"stories260K\", \"input\": \"$long\"}" > "$TMP/ot.json"
check "/api/embed truncates by default" grep -q '"prompt_eval_count":64' "$TMP/ot.json"
check_status 400 "/api/embed: truncate false refuses the long input" "$E/api/embed" \
    -d "{\"model\": \"stories260K\", \"input\": \"$long\", \"truncate\": false}"

# ---- roles ----
check_status 400 "without --embeddings, /v1/embeddings is a 400" "$G/v1/embeddings" -d '{"input": "a"}'
check "... that names --embeddings and what the model serves" grep -q 'does not embed (start the server with --embeddings); it serves /v1/completions' \
    <(post "$G/v1/embeddings" '{"input": "a"}')
check_status 400 "a generation model does not rerank" "$G/v1/rerank" -d '{"query": "a", "documents": ["b"]}'
check "/props: roles" grep -q '"roles":\["generate","embed"\]' <(curl -s "$E/props")
check "/v1/models: roles" grep -q '"roles":\["generate"\]' <(curl -s "$G/v1/models")

# ---- rerank ----
docs='["Once upon a time", {"text": "a little cat"}, "the sun was bright"]'
post "$R/v1/rerank" "{\"query\": \"a cat\", \"documents\": $docs, \"top_n\": 2, \"return_documents\": true}" > "$TMP/rr.json"
"$ATTND_BINARY" rerank --model "$RANK" --threads 1 --json --query "a cat" "Once upon a time" "a little cat" "the sun was bright" \
    > "$TMP/rcli.txt" || bad "attnd rerank runs"
check "/v1/rerank: top_n sorted results with documents, equal to attnd rerank" py rerank "$TMP/rr.json" "$TMP/rcli.txt"
post "$R/rerank" "{\"query\": \"a cat\", \"documents\": $docs}" > "$TMP/rr2.json"
check "/rerank: every document, no texts unless asked" py rerank_all "$TMP/rr2.json"
check_status 400 "/v1/rerank without a query" "$R/v1/rerank" -d '{"documents": ["a"]}'
check_status 400 "/v1/rerank with no documents" "$R/v1/rerank" -d '{"query": "a", "documents": []}'
check_status 400 "a reranker does not embed" "$R/v1/embeddings" -d '{"input": "a"}'
check "/props of the reranker: roles" grep -q '"roles":\["generate","rank"\]' <(curl -s "$R/props")

# ---- encoders: a bert that only embeds, a bert cross-encoder that only ranks ----
"$(dirname "$ATTND_BINARY")/make_tiny" "$TMP/bert.gguf" bert || fail "make_tiny bert"
"$(dirname "$ATTND_BINARY")/make_tiny" "$TMP/bert-rank.gguf" bert-rank || fail "make_tiny bert-rank"
start_server b --model "$TMP/bert.gguf" --threads 1 --embed-max-inputs 4
start_server x --model "$TMP/bert-rank.gguf" --threads 1
B=http://127.0.0.1:$b_PORT X=http://127.0.0.1:$x_PORT
post "$B/v1/embeddings" "{\"input\": $texts}" > "$TMP/bo.json"
"$ATTND_BINARY" embed --model "$TMP/bert.gguf" --threads 1 "Once upon a time" "a little cat" "the sun was bright" > "$TMP/bcli.txt"
check "bert: 3 vectors of 32, equal to attnd embed" python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["data"]; c = [json.loads(l) for l in open(sys.argv[2])]
sys.exit(0 if len(a) == 3 and all(len(x["embedding"]) == 32 and all(abs(p - q) < 1e-5 for p, q in zip(x["embedding"], y)) for x, y in zip(a, c)) else 1)' \
    "$TMP/bo.json" "$TMP/bcli.txt"
check_status 400 "bert: chat is a 400" "$B/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Hi"}]}'
check "... naming what it serves" grep -q "'bert' does not generate text; it serves /api/embed, /api/embeddings, /v1/embeddings, /embeddings\"" \
    <(post "$B/v1/chat/completions" '{"messages": [{"role": "user", "content": "Hi"}]}')
check_status 400 "bert: Ollama's generate is a 400" "$B/api/generate" -d '{"model": "bert", "prompt": "Hi"}'
check "/props of the bert: roles embed" grep -q '"roles":\["embed"\]' <(curl -s "$B/props")
post "$X/rerank" "{\"query\": \"a cat\", \"documents\": $docs, \"return_documents\": true}" > "$TMP/xr.json"
"$ATTND_BINARY" rerank --model "$TMP/bert-rank.gguf" --threads 1 --json --top-n 3 --query "a cat" "Once upon a time" "a little cat" \
    "the sun was bright" > "$TMP/xcli.txt"
check "bert cross-encoder: /rerank equal to attnd rerank" python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["results"]; c = json.loads(open(sys.argv[2]).read())["results"]
sys.exit(0 if len(a) == 3 and [x["index"] for x in a] == [y["index"] for y in c] and all(abs(x["relevance_score"] - y["relevance_score"]) < 1e-5 for x, y in zip(a, c)) else 1)' \
    "$TMP/xr.json" "$TMP/xcli.txt"
check_status 400 "bert cross-encoder: embeddings are a 400" "$X/v1/embeddings" -d '{"input": "a"}'

# ---- /v1/attention on an encoder: rows both ways, each input over its own tokens ----
post "$B/v1/attention" '{"prompt": ["Once upon a time", "a little cat"]}' > "$TMP/ba.json"
"$ATTND_BINARY" attention --model "$TMP/bert.gguf" --threads 1 --json --prompt "Once upon a time" > "$TMP/ba0.json"
"$ATTND_BINARY" attention --model "$TMP/bert.gguf" --threads 1 --json --prompt "a little cat" > "$TMP/ba1.json"
check "bert /v1/attention: two inputs side by side, every row over its own input (causal false), = attnd attention of each" python3 -c '
import json, sys
a, c = json.load(open(sys.argv[1])), [json.load(open(f)) for f in sys.argv[2:]]
ins = a["inputs"]
ok = a["causal"] is False and all(x["causal"] is False for x in c) and a["first_row"] == 0
ok = ok and [i["n_tokens"] for i in ins] == [len(x["tokens"]) for x in c] and ins[1]["first"] == ins[0]["n_tokens"]
ok = ok and a["tokens"] == c[0]["tokens"] + c[1]["tokens"] and a["n_prompt"] == len(a["tokens"]) == a["usage"]["prompt_tokens"]
ok = ok and len(a["attention"]) == 2 * 4 and all(len(h["weights"]) == len(a["tokens"]) for h in a["attention"])
for h in a["attention"]:
    for i, x in zip(ins, c):
        mine = h["weights"][i["first"]:i["first"] + i["n_tokens"]]
        alone = next(g for g in x["attention"] if g["layer"] == h["layer"] and g["head"] == h["head"])["weights"]
        ok = ok and all(len(r) == i["n_tokens"] and abs(sum(r) - 1) < 1e-4 for r in mine)
        ok = ok and all(abs(p - q) < 2e-6 for r, s in zip(mine, alone) for p, q in zip(r, s))
        ok = ok and any(r[j] > 0 for r in mine[:1] for j in range(1, len(r)))   # the first token sees later ones
sys.exit(0 if ok else 1)' "$TMP/ba.json" "$TMP/ba0.json" "$TMP/ba1.json"
post "$B/v1/attention" '{"prompt": ["Once upon a time", "a little cat"], "layers": [1], "heads": [2], "top_k": 3}' > "$TMP/bk.json"
check "bert /v1/attention top_k: pairs of positions inside each row's own input" python3 -c '
import json, sys
a = json.load(open(sys.argv[1])); ins = a["inputs"]; rows = a["attention"][0]["weights"]
own = [next(i for i in ins if i["first"] <= p < i["first"] + i["n_tokens"]) for p in range(len(rows))]
sys.exit(0 if len(a["attention"]) == 1 and all(len(r) == 3 and all(o["first"] <= j < o["first"] + o["n_tokens"] for j, w in r) for r, o in zip(rows, own)) else 1)' "$TMP/bk.json"
for f in '"max_tokens": 4' '"ablate": [{"layer": 0, "head": 0}]' '"measure": "ablation"' '"weights": "norm"' '"logit_lens": 2' '"session_id": "s1"'; do
    name=${f#\"}; name=${name%%\"*}
    check "bert /v1/attention: $name is refused by name" grep -q "\"param\":\"$name\"" \
        <(post "$B/v1/attention" "{\"prompt\": \"a cat\", $f}")
done
check_status 400 "bert /v1/heads: an encoder's heads have no causal roles" "$B/v1/heads"
check_status 400 "bert /v1/attention: 5 prompts over embed_max_inputs 4" "$B/v1/attention" -d '{"prompt": ["a","b","c","d","e"]}'
check "stories /v1/attention: a decoder's rows say causal true" grep -q '"causal":true,' \
    <(post "$G/v1/attention" '{"prompt": "Once upon a time", "layers": [0], "heads": [0]}')

# ---- a server of several models: routed by "model", each model's role checked ----
mkdir -p "$TMP/models" && ln -s "$STORIES" "$TMP/models/story.gguf" && ln -s "$RANK" "$TMP/models/ranker.gguf"
"$(dirname "$ATTND_BINARY")/make_tiny" "$TMP/models/mbert.gguf" modern-bert || fail "make_tiny modern-bert"
start_server m --models-dir "$TMP/models" --threads 1 --kv-budget-mb 16 --embeddings
M=http://127.0.0.1:$m_PORT
post "$M/v1/embeddings" '{"model": "story", "input": "a little cat"}' > "$TMP/m.json"
check "several models: /v1/embeddings on the named one equals the one-model server's" py ids "$TMP/m.json" "$TMP/a1.json"
post "$M/v1/rerank" "{\"model\": \"ranker\", \"query\": \"a cat\", \"documents\": $docs}" > "$TMP/mr.json"
check "several models: /v1/rerank on the reranker" py rerank_all "$TMP/mr.json"
check "several models: the story model does not rank, and says what it serves" grep -q "'story' does not rank; it serves /v1/completions" \
    <(post "$M/v1/rerank" '{"model": "story", "query": "a", "documents": ["b"]}')
check_status 400 "several models: embeddings without a model" "$M/v1/embeddings" -d '{"input": "a"}'
post "$M/v1/embeddings" "{\"model\": \"mbert\", \"input\": $texts}" > "$TMP/mb.json"
"$ATTND_BINARY" embed --model "$TMP/models/mbert.gguf" --threads 1 "Once upon a time" "a little cat" "the sun was bright" > "$TMP/mbcli.txt"
check "several models: a modern-bert's /v1/embeddings, 3 vectors of 64 equal to attnd embed" python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["data"]; c = [json.loads(l) for l in open(sys.argv[2])]
sys.exit(0 if len(a) == 3 and all(len(x["embedding"]) == 64 and all(abs(p - q) < 1e-5 for p, q in zip(x["embedding"], y)) for x, y in zip(a, c)) else 1)' \
    "$TMP/mb.json" "$TMP/mbcli.txt"

for s in e g r b x m; do stop_server $s || bad "$s: SIGTERM"; done
exit $status
