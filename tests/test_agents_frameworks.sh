#!/usr/bin/env bash
# test_agents_frameworks.sh — the agent frameworks against attnd (tests/js/agents_frameworks.mjs):
# LangChain's ChatOpenAI bindTools and withStructuredOutput, the Vercel AI SDK's generateObject
# and generateText with a tool through @ai-sdk/openai-compatible. Runs on the repository's own
# model; the packages are installed once into the build directory (.npm-agents-fw, this test's
# own) and reused by later runs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
model=$MODEL
[ -f "$model" ] || fail "$model is missing"
# majors pinned: their APIs change between majors
npm_packages .npm-agents-fw @langchain/openai@1 @langchain/core@1 ai@5 @ai-sdk/openai-compatible@1 zod@4
dir=$NPM_DIR
start_server srv --model "$model" --threads 1
id=$(curl -s "http://127.0.0.1:$srv_PORT/v1/models" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).data[0].id))')
node "$here/js/agents_frameworks.mjs" "$dir" "http://127.0.0.1:$srv_PORT/v1" "$id"
rc=$?
stop_server srv || { echo "not ok - SIGTERM"; rc=1; }
exit $rc
