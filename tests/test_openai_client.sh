# test_openai_client.sh — the official `openai` npm package talks to attnd with only baseURL
# changed: completions and chat completions, streamed and not. The package is installed once
# into the build directory (.npm-openai) and reused by later runs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
npm_packages .npm-openai openai
dir=$NPM_DIR
start_server srv --model "$MODEL" --threads 1
node "$here/js/openai_client.mjs" "$dir" "http://127.0.0.1:$srv_PORT/v1"
rc=$?
stop_server srv || rc=1
exit $rc
