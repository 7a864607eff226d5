#!/usr/bin/env bash
# families.sh — attnd against llama.cpp on the newer families' released shapes (random weights,
# Q4_K_M; tools/bench/family_shapes.py has their widths): Qwen3.6-35B-A3B (qwen35moe), Qwen3.6-27B
# (qwen35), Gemma-4-26B-A4B and GLM-4.7-Flash (deepseek2) at 4 layers (one full-attention layer
# among three Gated DeltaNet ones; three local and one global; one dense and three MoE), and
# Gemma-4-E4B at its full 42 layers; prefill and decode at each thread count and prompt length.
# Prints tokens/s, attnd / llama.cpp ratios, and decode as a share of the read bandwidth measured
# in the same run: of the bytes a decode token actually reads (make_model.py --reads: the selected
# experts only, one row of the embedding tables, the DeltaNet state; plus attnd's KV figure).
#
#   tools/bench/families.sh                                   # everything (50-60 minutes on 2 shared cores)
#   tools/bench/families.sh --shapes glm-4.7-flash --threads 1 --reps 1
#
# Options: --shapes "qwen3.6-35b-a3b qwen3.6-27b gemma4-26b-a4b glm-4.7-flash gemma4-e4b",
# --threads "1 2", --prompts 512, --n 32, --reps 3, --peer-dir DIR (an installed llama.cpp peer;
# default /work/peer when present, else `attnd bench` installs one), --out DIR (results; default
# build/bench), --attnd BIN (default build/attnd).
#
# Models are written once by tools/bench/make_model.py (python3 + numpy) under
# ${XDG_CACHE_HOME:-~/.cache}/attnd/bench (1.7 to 4.7 GB each, 15 GB for the five). Each row is one
# `attnd bench` run: one untimed attnd warm-up, then --reps rounds of a read-bandwidth probe,
# attnd and llama.cpp, medians of each. The load average is printed before and after each row:
# other work on the machine slows both engines, so read the ratios, not the absolute figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh

shapes="qwen3.6-35b-a3b qwen3.6-27b gemma4-26b-a4b glm-4.7-flash gemma4-e4b"
threads="1 2" prompts=512 n=32 reps=3 peer="" out=build/bench attnd=build/attnd
[ -d /work/peer ] && peer=/work/peer
bench_options '2,22' 'shapes threads prompts n reps peer-dir=peer out attnd' '' "$@"

py=$(bench_numpy_python) || exit 1
[ -x "$attnd" ] || { echo "families.sh: $attnd is missing (cmake --build build --target attnd)" >&2; exit 1; }
peer_args=()
[ -n "$peer" ] && peer_args=(--peer-dir "$peer")

cache=${XDG_CACHE_HOME:-$HOME/.cache}/attnd/bench
mkdir -p "$cache" "$out"
layers_of() { if [ "$1" = gemma4-e4b ]; then echo 42; else echo 4; fi; } # E4B at full depth
model() { printf '%s/%s-%sl-Q4_K_M' "$cache" "$1" "$(layers_of "$1")"; } # its file, without .gguf
for s in $shapes; do
    m=$(model "$s")
    if [ ! -s "$m.gguf" ] || [ ! -s "$m.reads" ]; then
        echo "families.sh: writing $m.gguf ..." >&2
        "$py" tools/bench/make_model.py --shape "$s" --layers "$(layers_of "$s")" --reads "$m.reads" "$m.gguf.tmp"
        mv "$m.gguf.tmp" "$m.gguf"
    fi
done

res=$out/families.tsv
printf 'shape\tthreads\tprompt\tattnd_prefill\tllamacpp_prefill\tattnd_decode\tllamacpp_decode\tload_before\tload_after\tread_mb\tdecode_gbs\tprobe_gbs\tdecode_share\tllamacpp_share\troofline_share\n' >"$res"
load() { cut -d' ' -f1 /proc/loadavg; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; attnd $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for p in $prompts; do
    for th in $threads; do
        for s in $shapes; do
            m=$(model "$s")
            l0=$(load)
            txt=$("$attnd" bench --model "$m.gguf" --threads "$th" --prompt-len "$p" --n "$n" --reps "$reps" \
                --no-growth "${peer_args[@]}" --json) || txt="{}"
            l1=$(load)
            # bytes read per decode token: the file's (make_model.py --reads) plus the KV cache's
            # that attnd bench prints ("decode reads ... (weights W + KV K at position P)")
            kv=$(printf '%s\n' "$txt" | sed -n 's/.*+ KV \([0-9.]*\) at position.*/\1/p' | tail -1)
            printf '%s\n' "$txt" | tail -1 | "$py" -c '
import json, sys
j = json.loads(sys.stdin.read())
read = float(open(sys.argv[7]).read()) + float(sys.argv[8] or 0) * 1e6
probe = j.get("probe_gbs", 0)
gbs, pgbs = j.get("attnd_decode", 0) * read / 1e9, j.get("llamacpp_decode", 0) * read / 1e9
print("\t".join(sys.argv[1:4] + ["%.2f" % j.get(k, 0) for k in
      ("attnd_prefill", "llamacpp_prefill", "attnd_decode", "llamacpp_decode")] + sys.argv[4:6] +
      ["%.1f" % (read / 1e6), "%.3f" % gbs, "%.3f" % probe, "%.4f" % (gbs / probe if probe else 0),
       "%.4f" % (pgbs / probe if probe else 0), "%.4f" % j.get("attnd_decode_share", 0)]))
' "$s" "$th" "$p" "$l0" "$l1" "$m" "$m.reads" "$kv" >>"$res"
            tail -1 "$res" | awk -F'\t' '{printf "  %-16s %s thr  prompt %-4s prefill %6.1f / %6.1f   decode %5.2f / %5.2f   (load %s -> %s)\n", $1, $2, $3, $4, $5, $6, $7, $8, $9}'
            tail -1 "$res" | awk -F'\t' '{printf "                   decode reads %.0f MB/token: %.2f GB/s = %.0f %% of the %.1f GB/s probe (llama.cpp %.0f %%; attnd'"'"'s own byte count: %.0f %%)\n", $10, $11, 100 * $13, $12, 100 * $14, 100 * $15}'
        done
    done
done

echo
echo "attnd / llama.cpp (tokens/s ratios; > 1 means attnd is faster), prompt + $n generated tokens, median of $reps"
awk -F'\t' 'NR > 1 { printf "%-16s %s thread%s prompt %-4s   prefill %5.2fx   decode %5.2fx   decode %3.0f %% of the wall (load %s -> %s)\n",
    $1, $2, $2 == 1 ? " " : "s", $3, ($5 > 0 ? $4 / $5 : 0), ($7 > 0 ? $6 / $7 : 0), 100 * $13, $8, $9 }' "$res"
echo "results: $res"
