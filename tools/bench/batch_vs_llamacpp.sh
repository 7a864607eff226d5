#!/usr/bin/env bash
# batch_vs_llamacpp.sh — how batched decode scales in attnd and in llama.cpp, on the same model and
# threads in one run: aggregate decode tokens/s of B = 1, 2, 4, 8 sequences decoded together (one
# batched step per token), each B's ratio to B = 1, side by side.
#
#   tools/bench/batch_vs_llamacpp.sh MODEL [threads (2)] [reps (3)] [n (64)] [pairs (1)]
#
# attnd: `build/bench_batch MODEL threads reps` (8 steps per round after a 64-token context; built
# by tools/bench/build.sh). llama.cpp: tools/peers/llamacpp/batch.mjs --threads T --reps R --n N
# (N greedy steps after a 64-token prompt; the peer is installed by tools/peers/llamacpp/install.sh,
# $ATTND_PEER_DIR picks its folder). Each tool alternates the batch sizes over its own reps and
# takes medians, so each ratio column comes from one process; the two tools then alternate `pairs`
# times (attnd, llama.cpp, attnd, ...) and the table shows the median over the pairs.
# "cpu x1" is the same ratio in process CPU time per token (what a step costs when neighbours
# disturb the wall clock). Read the ratios, not the absolute figures, on a busy machine.
# Needs: cmake and a C compiler, node + npm.
# shellcheck disable=SC2016 # the single-quoted node programs are JavaScript, not shell
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
model=$1 threads=${2:-2} reps=${3:-3} n=${4:-64} pairs=${5:-1}
[ -f "$model" ] || { echo "batch_vs_llamacpp.sh: no model '$model'" >&2; exit 1; }

[ -f build/CMakeCache.txt ] || cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
tools/bench/build.sh >&2
peer=$(tools/peers/llamacpp/install.sh)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for p in $(seq 1 "$pairs"); do
    echo "pair $p/$pairs: attnd ..." >&2
    build/bench_batch "$model" "$threads" "$reps" >"$out/attnd.$p.txt"
    echo "pair $p/$pairs: llama.cpp ..." >&2
    node "$peer/batch.mjs" --model "$model" --threads "$threads" --reps "$reps" --n "$n" >"$out/peer.$p.txt"
done

# batch -> "tok/s ratio cpu_ratio" per tool and pair, then medians over the pairs
for p in $(seq 1 "$pairs"); do
    awk -v p="$p" '/^batched decode/ { on = 1; next } /^decode step/ { on = 0 }
        on && $1 ~ /^[0-9]+$/ && NF == 6 { print "attnd", p, $1, $2, $3, $6 }' "$out/attnd.$p.txt"
    grep '^{' "$out/peer.$p.txt" | node -e '
        const j = JSON.parse(require("fs").readFileSync(0, "utf8"));
        for (const r of j.rows) console.log("peer", process.argv[1], r.batch, r.tok_per_s, r.ratio, r.cpu_ratio);
        for (const r of j.rows) if (!r.batched) console.error(`llama.cpp did not batch ${r.batch} sequences into one decode per step`);
    ' "$p"
done >"$out/rows.txt"

for tool in attnd peer; do
    grep -q "^$tool " "$out/rows.txt" || { echo "batch_vs_llamacpp.sh: no batch rows from $tool (its output: $out)" >&2; trap - EXIT; exit 1; }
done
head -n1 "$out/attnd.1.txt"
grep '^#' "$out/peer.1.txt"
echo "# below: medians over $pairs pair(s) of the two runs"
node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map((l) => l.split(" "));
    const med = (v) => { const s = [...v].sort((a, b) => a - b), h = s.length >> 1; return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2; };
    const by = new Map();
    for (const [tool, , b, tps, r, c] of lines) {
        const k = `${tool} ${b}`;
        if (!by.has(k)) by.set(k, []);
        by.get(k).push([Number(tps), Number(r), Number(c)]);
    }
    const get = (tool, b, i) => by.has(`${tool} ${b}`) ? med(by.get(`${tool} ${b}`).map((x) => x[i])) : NaN;
    const batches = [...new Set(lines.map((l) => Number(l[2])))].sort((a, b) => a - b);
    const f = (x, d, w) => (Number.isNaN(x) ? "-" : x.toFixed(d)).padStart(w);
    console.log("         ---------- attnd ----------   -------- llama.cpp --------   attnd/llama.cpp");
    console.log("  batch   tokens/s    x1  cpu x1        tokens/s    x1  cpu x1          tokens/s");
    for (const b of batches)
        console.log(`  ${String(b).padEnd(5)}${f(get("attnd", b, 0), 1, 11)}${f(get("attnd", b, 1), 2, 6)}${f(get("attnd", b, 2), 2, 8)}` +
            `${f(get("peer", b, 0), 1, 16)}${f(get("peer", b, 1), 2, 6)}${f(get("peer", b, 2), 2, 8)}` +
            `${f(get("attnd", b, 0) / get("peer", b, 0), 2, 18)}`);
' "$out/rows.txt"
