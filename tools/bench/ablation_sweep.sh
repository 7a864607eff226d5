#!/usr/bin/env bash
# ablation_sweep.sh — the cost of "measure": "ablation" on POST /v1/attention: every head ablated
# in turn, for one prompt of --tokens token ids (BOS, then ids drawn from the vocabulary with a
# fixed seed), ablated at the measured position only (the default) and from position 0 (the
# whole prompt). Prints the answer's cost (wall ms, sequences, batch size, batches, tokens).
#
#   tools/bench/ablation_sweep.sh [--model M] [--threads 2] [--tokens 64] [--reps 3]
#
# Targets (docs/server.md): the shipped model (6 x 4 heads), 64 tokens, < 1 s on 2 threads; the
# TinyLlama shape (22 x 32 heads; python3 tools/bench/make_model.py --type Q4_K_M OUT.gguf) < 60 s.
# A timing is only worth reading on a quiet machine: the load average is printed with it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh
model=models/attnd-sotu.gguf threads=2 tokens=64 reps=3
bench_options '2,7' 'model threads tokens reps' '' "$@"
bin=${ATTND_BINARY:-build/attnd}
[ -x "$bin" ] || { echo "build attnd first (cmake --build build --target attnd)" >&2; exit 2; }
log=$(mktemp /tmp/attnd-sweep.XXXXXX)
"$bin" serve --host 127.0.0.1 --port 0 --model "$model" --threads "$threads" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do
    port=$(grep -o 'listening on [^ ]*:[0-9]*' "$log" | grep -o '[0-9]*$' | head -1 || true)
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "${port:-}" ] || { cat "$log" >&2; exit 1; }
url="http://127.0.0.1:$port"
n_vocab=$(curl -s "$url/v1/models" | jq '.data[0].meta.n_vocab // 32000')
ids=$(python3 -c "import random,sys; r=random.Random(7); v=int(sys.argv[2]); print([1]+[r.randrange(3, v) for _ in range(int(sys.argv[1])-1)])" "$tokens" "$n_vocab")
echo "model $model, $threads threads, $tokens tokens; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for from in measured 0; do
    extra=$([ "$from" = 0 ] && echo ', "ablate_from": 0' || true)
    for r in $(seq "$reps"); do
        t0=$(date +%s.%N)
        cost=$(curl -s "$url/v1/attention" -d "{\"prompt\": $ids, \"measure\": \"ablation\"$extra}" | jq -c '.cost')
        t1=$(date +%s.%N)
        printf 'ablate_from %-8s rep %d: %s (request %.0f ms)\n' "$from" "$r" "$cost" "$(echo "($t1 - $t0) * 1000" | bc)"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
