#!/usr/bin/env bash
# server_bench.sh — start `attnd serve` on a model and run server_bench.mjs against it.
#   [BENCH_ARGS="--turns 10 --streams 8 --tokens 128"] tools/bench/server_bench.sh [MODEL] [extra serve flags...]
# Uses ./build/attnd (build it Release for meaningful numbers). Prints numbers and ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-models/attnd-sotu.gguf} # the shipped model unless one is named
shift || true
log=$(mktemp)
./build/attnd serve --model "$model" --port 0 "$@" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.1
done
echo "# model $model, flags: $*"
# BENCH_ARGS overrides, e.g. BENCH_ARGS="--turns 10 --streams 8 --tokens 400"
node tools/bench/server_bench.mjs "http://127.0.0.1:$port" ${BENCH_ARGS:---turns 10 --streams 8 --tokens 128}
