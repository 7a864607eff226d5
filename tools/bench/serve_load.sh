#!/usr/bin/env bash
# serve_load.sh — issue 12's serving targets on MODEL: `attnd serve` started with NO tuning flags
# or environment (as a user would), against `attnd generate --threads 2` on the same model.
#   tools/bench/serve_load.sh MODEL [--tokens 128] [--streams 8] [--long 1500] [--rounds 3]
# Prints (see serve_load.mjs), as medians of alternating rounds: one stream vs generate (target
# >= 0.9x), 8 streams vs 1 (>= 5x); then the p99 token gap of two streams while a 1500-token
# prompt prefills vs their quiet median (<= 5x), and that prompt's time to first token vs its
# prefill alone (<= 1.5x). Uses ./build/attnd (a Release build), node for the streaming client.
# Run on a quiet machine (~3 minutes); it never fails on speed.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh
model=${1:?usage: tools/bench/serve_load.sh MODEL [--tokens N] [--streams N] [--long N]}
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bench_serve "$log" ./build/attnd --model "$model" --port 0
pid=$BENCH_PID port=$BENCH_PORT
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
echo "# model $model; attnd serve with no flags but --model/--port; $(nproc) CPUs"
node tools/bench/serve_load.mjs "http://127.0.0.1:$port" "$model" "$@"
