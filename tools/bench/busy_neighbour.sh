#!/usr/bin/env bash
# busy_neighbour.sh — issue 12's last serving target on MODEL: `attnd generate` at its DEFAULT
# thread count while one other process keeps a core busy, against a quiet 1-thread run.
#   tools/bench/busy_neighbour.sh MODEL [--tokens 32] [--reps 3]
# Runs alternate quiet (--threads 1) and busy (no --threads; a `sh` spin loop beside it, stopped
# by its PID after each run); prints each run's decode tokens/s, the medians and their ratio
# (target >= 0.8). Uses ./build/attnd (a Release build). A benchmark: it never fails on speed.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh
model=${1:?usage: tools/bench/busy_neighbour.sh MODEL [--tokens N] [--reps N]}
shift
tokens=32 reps=3
bench_options '2,4' 'tokens reps' '' "$@"

spin=
trap '[ -n "$spin" ] && kill "$spin" 2>/dev/null; true' EXIT

decode_tps() { # generate's decode tokens/s, with any extra flags
    ./build/attnd generate --model "$model" --prompt "The nation" --n "$tokens" --ignore-eos --json "$@" |
        grep -o '"decode_tok_per_s":[0-9.eE+-]*' | cut -d: -f2
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

quiet=() busy=()
for ((r = 1; r <= reps; r++)); do
    quiet+=("$(decode_tps --threads 1)")
    sh -c 'while :; do :; done' &
    spin=$!
    sleep 0.5
    busy+=("$(decode_tps)")
    kill "$spin"
    wait "$spin" 2>/dev/null || true
    spin=
    printf 'run %d: quiet, 1 thread %.1f tok/s; default threads beside a busy process %.1f tok/s\n' "$r" "${quiet[-1]}" "${busy[-1]}"
done
q=$(printf '%s\n' "${quiet[@]}" | median)
b=$(printf '%s\n' "${busy[@]}" | median)
echo "# $model, $tokens tokens, $(nproc) CPUs, medians of $reps"
awk -v q="$q" -v b="$b" 'BEGIN { printf "busy neighbour, default threads: %.1f tok/s; quiet, 1 thread: %.1f tok/s; ratio %.2f (target >= 0.8)\n", b, q, b / q }'
