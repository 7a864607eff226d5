# test_anthropic_client.sh — the official `@anthropic-ai/sdk` npm client talks to attnd's
# /v1/messages with only baseURL changed (tests/js/anthropic_client.mjs): messages.create, the
# SDK's stream helpers, count_tokens, max_tokens and stop sequences, forced and named tool use
# whose input validates (ajv), a streamed tool_use, tool_result round trips, thinking blocks, and
# Anthropic's error types. The server has an API key, which the SDK sends as x-api-key. Runs on
# the repository's own model, then the tool and thinking checks again with every tool offered on
# make_tiny's chat model (context 8192) under Qwen3's Jinja template, which the 512-token default
# model cannot hold; the packages are installed once into the build directory (.npm-anthropic)
# and reused by later runs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
[ -f "$MODEL" ] || fail "$MODEL is missing"
npm_packages .npm-anthropic @anthropic-ai/sdk ajv
key=sk-ant-test-$$
start_server srv --model "$MODEL" --threads 1 --api-key "$key"
node "$here/js/anthropic_client.mjs" "$NPM_DIR" "http://127.0.0.1:$srv_PORT" "$key"
rc=$?
stop_server srv || { echo "not ok - SIGTERM"; rc=1; }
"$(dirname "$ATTND_BINARY")/make_tiny" "$TMP/chat.gguf" chat || fail "make_tiny chat"
start_server wide --model "$TMP/chat.gguf" --threads 1 --api-key "$key" \
    --chat-template-file "$here/data/templates/qwen3.jinja"
node "$here/js/anthropic_client.mjs" "$NPM_DIR" "http://127.0.0.1:$wide_PORT" "$key" wide || rc=1
stop_server wide || { echo "not ok - SIGTERM (wide)"; rc=1; }
exit $rc
