# test_openai_clients.sh — what real client libraries send beyond one completion at a time
# (tests/js/openai_clients.mjs): the official `openai` npm package (prompt lists, n > 1,
# models.retrieve, error codes, the Responses API) and LangChain's OpenAI.generate on three
# prompts, against attnd with only baseURL changed. Then a restart on the same state directory:
# a stored response is still there and its conversation continues.
# Runs on the repository's own model (models/attnd-sotu.gguf); the packages are installed once
# into the build directory (.npm-clients) and reused by later runs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
[ -f "$MODEL" ] || fail "$MODEL is missing"
npm_packages .npm-clients openai @langchain/openai @langchain/core
# the model's own chat template (ChatML, stored in the GGUF): no --chat-template
flags=(--model "$MODEL" --threads 1 --state-dir "$TMP/state")
start_server srv "${flags[@]}"
node "$here/js/openai_clients.mjs" main "$NPM_DIR" "http://127.0.0.1:$srv_PORT/v1" "$TMP/stored.json"
rc=$?
stop_server srv || { echo "not ok - SIGTERM"; rc=1; }
if [ -f "$TMP/stored.json" ]; then
    start_server again "${flags[@]}"
    node "$here/js/openai_clients.mjs" restarted "$NPM_DIR" "http://127.0.0.1:$again_PORT/v1" "$TMP/stored.json" || rc=1
    stop_server again || { echo "not ok - SIGTERM after the restart"; rc=1; }
else
    echo "not ok - no stored response to continue after a restart"
    rc=1
fi
exit $rc
