# test_ollama_client.sh — the official `ollama` npm client talks to attnd's /api with only the
# host changed (tests/js/ollama_client.mjs): list, show, ps, version; chat and generate whole and
# streamed (NDJSON) alike at temperature 0, num_predict and stop, raw generate, a template
# (Go's, the subset attnd renders) and one it refuses, format with a
# schema (every answer at temperature 1 validates, ajv) and "json", tools and tool results,
# think, Ollama's errors, and embed (the server runs with --embeddings). Runs on the repository's
# own model, then the tool and think checks
# again on make_tiny's chat model (context 8192) under Qwen3's Jinja template, whose prompt with
# tools the 512-token default model cannot hold, and generate with a suffix (fill-in-the-middle)
# on make_tiny's fim model, whose vocabulary has the FIM tokens; the packages are installed once
# into the build directory (.npm-ollama) and reused by later runs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
[ -f "$MODEL" ] || fail "$MODEL is missing"
npm_packages .npm-ollama ollama ajv
start_server srv --model "$MODEL" --threads 1 --embeddings
node "$here/js/ollama_client.mjs" "$NPM_DIR" "http://127.0.0.1:$srv_PORT"
rc=$?
stop_server srv || { echo "not ok - SIGTERM"; rc=1; }
"$(dirname "$ATTND_BINARY")/make_tiny" "$TMP/chat.gguf" chat || fail "make_tiny chat"
start_server wide --model "$TMP/chat.gguf" --threads 1 --chat-template-file "$here/data/templates/qwen3.jinja"
node "$here/js/ollama_client.mjs" "$NPM_DIR" "http://127.0.0.1:$wide_PORT" wide || rc=1
stop_server wide || { echo "not ok - SIGTERM (wide)"; rc=1; }
"$(dirname "$ATTND_BINARY")/make_tiny" "$TMP/fim.gguf" fim || fail "make_tiny fim"
start_server fim --model "$TMP/fim.gguf" --threads 1
node "$here/js/ollama_client.mjs" "$NPM_DIR" "http://127.0.0.1:$fim_PORT" fim || rc=1
stop_server fim || { echo "not ok - SIGTERM (fim)"; rc=1; }
exit $rc
