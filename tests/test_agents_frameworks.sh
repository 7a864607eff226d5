#!/usr/bin/env bash
# test_agents_frameworks.sh — the agent frameworks against attnd (tests/js/agents_frameworks.mjs):
# LangChain's ChatOpenAI bindTools and withStructuredOutput, the Vercel AI SDK's generateObject
# and generateText with a tool through @ai-sdk/openai-compatible. Runs on the repository's own
# model; the packages (majors pinned: their APIs change between majors) are installed once into
# the build directory (.npm-agents-fw, this test's own) and reused by later runs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
model=$MODEL
[ -f "$model" ] || fail "$model is missing"
dir=$(dirname "$ATTND_BINARY")/.npm-agents-fw
pkgs="@langchain/openai@1 @langchain/core@1 ai@5 @ai-sdk/openai-compatible@1 zod@4"
if [ ! -f "$dir/node_modules/@langchain/openai/package.json" ] || [ ! -f "$dir/node_modules/ai/package.json" ] ||
   [ ! -f "$dir/node_modules/@ai-sdk/openai-compatible/package.json" ] || [ ! -f "$dir/node_modules/zod/package.json" ]; then
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || echo '{"name":"attnd-agents-fw-test","private":true}' > "$dir/package.json"
    # shellcheck disable=SC2086
    if ! (cd "$dir" && npm install --no-audit --no-fund --loglevel=error $pkgs >/dev/null); then
        echo "FAIL: npm install $pkgs failed (no registry access?)" >&2
        exit 1
    fi
fi
v() { node -p "require('$dir/node_modules/$1/package.json').version"; }
echo "# @langchain/openai $(v @langchain/openai), ai $(v ai), @ai-sdk/openai-compatible $(v @ai-sdk/openai-compatible), zod $(v zod)"
start_server srv --model "$model" --threads 1
id=$(curl -s "http://127.0.0.1:$srv_PORT/v1/models" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).data[0].id))')
node "$here/js/agents_frameworks.mjs" "$dir" "http://127.0.0.1:$srv_PORT/v1" "$id"
rc=$?
stop_server srv || { echo "not ok - SIGTERM"; rc=1; }
exit $rc
