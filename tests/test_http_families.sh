#!/usr/bin/env bash
# test_http_families.sh — the model families on a real server (tests/tiny_model.c's generated
# files): a LongRoPE file (phi3: context 512, original 128) takes the factors llama.cpp takes for
# the context served, short at ctx_size 128 and long without a cap (start-up log); a
# Mixture-of-Experts file (qwen3moe) answers a completion.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
status=0
"$ATTND_BUILD_DIR/tiny_model" phi3 "$TMP/phi3.gguf" || fail "tiny_model phi3"
"$ATTND_BUILD_DIR/tiny_model" qwen3moe "$TMP/moe.gguf" || fail "tiny_model qwen3moe"

start_server capped --model "$TMP/phi3.gguf" --threads 1 --ctx-size 128
check "ctx_size 128 (the original context): the short LongRoPE factors" \
    grep -q "LongRoPE: the short factors (a context of 128 within rope.scaling.original_context_length)" "$capped_LOG"
stop_server capped || bad "server exit status"
start_server full --model "$TMP/phi3.gguf" --threads 1
check "no cap (context 512): the long LongRoPE factors" \
    grep -q "LongRoPE: the long factors (a context of 512 beyond" "$full_LOG"
stop_server full || bad "server exit status"

start_server moe --model "$TMP/moe.gguf" --threads 2
body=$(curl -s "http://127.0.0.1:$moe_PORT/v1/completions" -d '{"prompt": [1, 40, 77], "max_tokens": 8, "temperature": 0}')
check "a MoE model answers a completion: $body" grep -q '"completion_tokens":8' <<<"$body"
stop_server moe || bad "server exit status"
exit $status
