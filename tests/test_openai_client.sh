# test_openai_client.sh — the official `openai` npm package talks to attnd with only baseURL
# changed: completions and chat completions, streamed and not. The package is installed once
# into the build directory (.npm-openai) and reused by later runs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
dir=$(dirname "$ATTND_BINARY")/.npm-openai
if [ ! -f "$dir/node_modules/openai/package.json" ]; then
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || echo '{"name":"attnd-openai-test","private":true}' > "$dir/package.json"
    if ! (cd "$dir" && npm install --no-audit --no-fund --loglevel=error openai >/dev/null); then
        echo "FAIL: npm install openai failed (no registry access?)" >&2
        exit 1
    fi
fi
echo "# openai $(node -p "require('$dir/node_modules/openai/package.json').version")"
start_server srv --model "$MODEL" --threads 1
node "$here/js/openai_client.mjs" "$dir" "http://127.0.0.1:$srv_PORT/v1"
rc=$?
stop_server srv || rc=1
exit $rc
