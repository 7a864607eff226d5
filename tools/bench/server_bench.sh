#!/usr/bin/env bash
# server_bench.sh — start `attnd serve` on a model and run server_bench.mjs against it.
#   [BENCH_ARGS="--turns 10 --streams 8 --tokens 128"] tools/bench/server_bench.sh [MODEL] [extra serve flags...]
# Uses ./build/attnd (build it Release for meaningful numbers). Prints numbers and ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh
model=${1:-models/attnd-sotu.gguf} # the shipped model unless one is named
shift || true
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bench_serve "$log" ./build/attnd --model "$model" --port 0 "$@"
pid=$BENCH_PID port=$BENCH_PORT
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
echo "# model $model, flags: $*"
# BENCH_ARGS overrides, e.g. BENCH_ARGS="--turns 10 --streams 8 --tokens 400"
node tools/bench/server_bench.mjs "http://127.0.0.1:$port" ${BENCH_ARGS:---turns 10 --streams 8 --tokens 128}
