#!/usr/bin/env bash
# moe.sh — attnd against llama.cpp on Qwen3-30B-A3B-shaped Mixture-of-Experts models (qwen3moe:
# 2048 wide, 32/4 heads of 128, 128 experts of width 768, 8 per token, vocab 151936; random
# weights, Q4_K_M), prefill and decode at each thread count, for each depth; prints a table of
# tokens/s and attnd / llama.cpp ratios, and the decode ms each added layer costs (from the two
# depths), which should follow the active parameters (8 experts read per token), not the total
# (128 stored).
#
#   tools/bench/moe.sh                               # 6 and 12 layers, 1 and 2 threads (quiet machine)
#   tools/bench/moe.sh --layers 2 --threads 2 --reps 1 --no-peer    # a quick check that it runs
#
# Options: --layers "6 12", --threads "1 2", --prompt 512, --n 32, --reps 3, --experts 128 (fewer
# make a smaller file of the same widths; the ratio to llama.cpp then is of that model), --peer-dir
# DIR (an installed llama.cpp peer; default /work/peer when present, else `attnd bench` installs
# one), --no-peer (attnd only), --out DIR (results; default build/bench), --attnd BIN (default
# build/attnd).
#
# Models are written once by tools/bench/make_model.py (python3 + numpy) under
# ${XDG_CACHE_HOME:-~/.cache}/attnd/bench: about 390 MB a layer (12 layers: 4.7 GB), so mind the
# disk and the memory (the file is mmapped; both engines read it). Each row is one `attnd bench`
# run: one untimed attnd warm-up, then --reps attnd and llama.cpp runs alternating, medians of
# each. The load average is printed before and after each row: other work on the machine slows
# both engines, so read the ratios, not the absolute figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh

layers="6 12" threads="1 2" prompt=512 n=32 reps=3 experts=128 peer="" nopeer="" out=build/bench attnd=build/attnd
[ -d /work/peer ] && peer=/work/peer
bench_options '2,23' 'layers threads prompt n reps experts peer-dir=peer out attnd' 'no-peer=nopeer' "$@"

py=$(bench_numpy_python) || exit 1
[ -x "$attnd" ] || { echo "moe.sh: $attnd is missing (cmake --build build --target attnd)" >&2; exit 1; }

cache=${XDG_CACHE_HOME:-$HOME/.cache}/attnd/bench
mkdir -p "$cache" "$out"
tsv=$out/moe.tsv
printf 'layers\tthreads\tattnd_prefill\tpeer_prefill\tattnd_decode\tpeer_decode\tattnd_decode_ms\n' >"$tsv"
peer_args=(--no-peer)
[ -z "$nopeer" ] && [ -n "$peer" ] && peer_args=(--peer-dir "$peer")
[ -z "$nopeer" ] && [ -z "$peer" ] && peer_args=()

for L in $layers; do
    model=$cache/qwen3-30b-a3b-e$experts-${L}l-Q4_K_M.gguf
    if [ ! -s "$model" ]; then
        echo "== writing $model" >&2
        "$py" tools/bench/make_model.py --shape qwen3-30b-a3b --layers "$L" --experts "$experts" "$model.tmp"
        mv "$model.tmp" "$model"
    fi
    for t in $threads; do
        echo "== $L layers, $t threads (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
        line=$("$attnd" bench --model "$model" --threads "$t" --prompt-len "$prompt" --n "$n" --reps "$reps" \
            --no-growth "${peer_args[@]}" --json | tail -1)
        echo "   load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        "$py" - "$L" "$t" "$line" >>"$tsv" <<'PY'
import json, sys
L, t, j = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
ap, pp = j.get("attnd_prefill", 0.0), j.get("llamacpp_prefill", 0.0)
ad, pd = j.get("attnd_decode", 0.0), j.get("llamacpp_decode", 0.0)
ms = 1000.0 / ad if ad > 0 else 0.0
print(f"{L}\t{t}\t{ap:.2f}\t{pp:.2f}\t{ad:.2f}\t{pd:.2f}\t{ms:.3f}")
PY
    done
done

echo
column -t -s $'\t' "$tsv" 2>/dev/null || cat "$tsv"
awk -F'\t' 'NR > 1 && $4 > 0 && $6 > 0 { printf "%s layers, %s threads: prefill %.2fx, decode %.2fx llama.cpp\n", $1, $2, $3 / $4, $5 / $6 }' "$tsv"
# Decode ms that each added layer costs (between the shallowest and deepest file, per thread
# count): the output head and embeddings cancel out. A layer holds ~370 MB of Q4_K_M weights, of
# which a token reads ~35 MB (attention plus 8 of the 128 experts); at a few GB/s of memory
# bandwidth that is ~10 ms if decode follows the active parameters, ~100 ms if it read them all.
awk -F'\t' 'NR > 1 && $5 > 0 { ms = 1000 / $5; if (!($2 in lo) || $1 < lo[$2]) { lo[$2] = $1; lms[$2] = ms }
                              if (!($2 in hi) || $1 > hi[$2]) { hi[$2] = $1; hms[$2] = ms } }
             END { for (t in lo) if (hi[t] > lo[t])
                       printf "%s threads: decode +%.2f ms per added layer (%s -> %s layers)\n", t,
                              (hms[t] - lms[t]) / (hi[t] - lo[t]), lo[t], hi[t] }' "$tsv"
echo "results: $tsv"
