# test_agents_clients.sh — tool calling and structured output with the official `openai` npm
# client (tests/js/agents_clients.mjs): forced and named tool calls, streamed tool calls that
# reassemble to the whole answer, chat.completions.parse with a zod schema, 100 outputs at
# temperature 1 (30 under the sanitizers) under a nested schema validated with ajv, Responses with
# a function tool and text.format, and Responses reasoning items (whole, streamed, sent back).
# Runs on the repository's own model; the packages are installed once into the build directory
# (.npm-agents) and reused by later runs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
[ -f "$MODEL" ] || fail "$MODEL is missing"
npm_packages .npm-agents openai ajv zod
start_server srv --model "$MODEL" --threads 1
node "$here/js/agents_clients.mjs" "$NPM_DIR" "http://127.0.0.1:$srv_PORT/v1"
rc=$?
stop_server srv || { echo "not ok - SIGTERM"; rc=1; }
exit $rc
