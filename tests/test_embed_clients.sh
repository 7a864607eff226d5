# test_embed_clients.sh — embedding and rerank clients unchanged against attnd
# (tests/js/embed_clients.mjs): the `openai` package's embeddings.create, LangChain's
# OpenAIEmbeddings, the `ollama` package's embed and embeddings, Cohere- and Jina-style rerank
# calls. Models: stories260K with --embeddings, make_tiny's reranker. The packages are installed
# once into the build directory (.npm-embed) and reused by later runs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
npm_packages .npm-embed openai @langchain/openai @langchain/core ollama
"$(dirname "$ATTND_BINARY")/make_tiny" "$TMP/rank.gguf" rank || fail "make_tiny rank"
start_server e --model "$ATTND_DATA_DIR/models/stories260K.gguf" --threads 1 --embeddings
start_server r --model "$TMP/rank.gguf" --threads 1
node "$here/js/embed_clients.mjs" "$NPM_DIR" "http://127.0.0.1:$e_PORT" "http://127.0.0.1:$r_PORT"
rc=$?
for s in e r; do stop_server $s || { echo "not ok - $s: SIGTERM"; rc=1; }; done
exit $rc
