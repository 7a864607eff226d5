#!/usr/bin/env bash
# tinyllama.sh — attnd against llama.cpp on TinyLlama-1.1B-shaped models (llama, 22 layers, dim
# 2048, FFN 5632, 32 heads / 4 KV heads, vocab 32000, context 2048; random weights), prefill and
# decode, at 1 and 2 threads, for a 512-token prompt and one that fills the context; prints a
# table of attnd / llama.cpp ratios and draws docs/bench-tinyllama.png.
#
#   tools/bench/tinyllama.sh                      # everything (about 40 minutes on 2 cores)
#   tools/bench/tinyllama.sh --types Q4_K_M --threads 2 --prompts 512 --reps 3
#
# Options: --types "Q8_0 Q4_0 Q4_K_M", --threads "1 2", --prompts "512 2016", --n 32, --reps 3,
# --peer-dir DIR (an installed llama.cpp peer; default: tools/peers/llamacpp/install.sh installs
# one), --out DIR (results; default build/bench), --chart PNG (default docs/bench-tinyllama.png,
# "" for none), --attnd BIN (default build/attnd, built when missing), --chart-only (redraw the
# chart from --out's results).
# The longest prompt is 2016 tokens: with 32 generated tokens that fills the 2048-token context.
#
# Models are written once by tools/bench/make_model.py (python3 + numpy) under
# ${XDG_CACHE_HOME:-~/.cache}/attnd/bench (Q8_0 1.2 GB, Q4_0 0.6 GB, Q4_K_M 0.7 GB).
# Each row is one `attnd bench` run: one untimed attnd warm-up, then --reps rounds of a
# read-bandwidth probe (1 GiB, 1 and n threads), attnd and llama.cpp, medians of each; decode is
# also printed as GB/s of weights + KV read per token and as a share of the probe at the same
# thread count, prefill as a share of the kernel path's compute peak (docs/performance.md). The load average is printed before and after each row:
# other work on the machine slows both engines, so read the ratios, not the absolute figures.
# Needs: cmake and a C compiler (to build attnd), python3-numpy, node + npm (the peer), gnuplot.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh

types="Q8_0 Q4_0 Q4_K_M" threads="1 2" prompts="512 2016" n=32 reps=3 peer="" out=build/bench
chart=docs/bench-tinyllama.png attnd=build/attnd chart_only=""
bench_options '2,22' 'types threads prompts n reps peer-dir=peer out chart attnd' 'chart-only' "$@"

py=$(bench_numpy_python) || exit 1

draw_chart() {
    [ -n "$chart" ] || return 0
    command -v gnuplot >/dev/null || { echo "tinyllama.sh: gnuplot missing (apt-get install gnuplot-nox); no chart" >&2; return 0; }
    awk -F'\t' 'NR > 1 { printf "\"%s %st p%s\"\t%.3f\t%.3f\n", $1, $2, $3, ($5 > 0 ? $4 / $5 : 0), ($7 > 0 ? $6 / $7 : 0) }' "$out/tinyllama.tsv" >"$out/ratios.dat"
    gnuplot <<EOF
set terminal pngcairo size 1100,520 font ",10" noenhanced
set output "$chart"
set title "attnd / llama.cpp, TinyLlama-1.1B shape (random weights): type, threads (t), prompt tokens (p); $n generated, median of $reps"
set ylabel "tokens/s ratio (attnd / llama.cpp)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set xtics rotate by -35 left
set yrange [0:*]
set grid ytics
set key top left
plot "$out/ratios.dat" using 2:xtic(1) title "prefill", "" using 3 title "decode", 1 with lines lw 2 lc rgb "black" title "llama.cpp = 1"
EOF
    echo "chart: $chart"
}
if [ -n "$chart_only" ]; then draw_chart; exit 0; fi

[ "$attnd" != build/attnd ] || [ -x build/attnd ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j"$(nproc)" >/dev/null; }
if [ -z "$peer" ]; then
    peer=$(tools/peers/llamacpp/install.sh) || { echo "tinyllama.sh: could not install the llama.cpp peer" >&2; exit 1; }
fi

cache=${XDG_CACHE_HOME:-$HOME/.cache}/attnd/bench
mkdir -p "$cache" "$out"
for t in $types; do
    m=$cache/tinyllama-$t.gguf
    if [ ! -s "$m" ]; then
        echo "tinyllama.sh: writing $m ..." >&2
        "$py" tools/bench/make_model.py --type "$t" "$m.tmp" && mv "$m.tmp" "$m"
    fi
done

res=$out/tinyllama.tsv
printf 'type\tthreads\tprompt\tattnd_prefill\tllamacpp_prefill\tattnd_decode\tllamacpp_decode\tload_before\tload_after\tdecode_gbs\tprobe_gbs\tdecode_share\tprefill_share\tpeak_path\tllamacpp_decode_share\tprobe_gbs_1\n' >"$res"
load() { cut -d' ' -f1 /proc/loadavg; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; attnd $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for p in $prompts; do
    for th in $threads; do
        for t in $types; do
            l0=$(load)
            j=$("$attnd" bench --model "$cache/tinyllama-$t.gguf" --threads "$th" --prompt-len "$p" --n "$n" \
                --reps "$reps" --no-growth --peer-dir "$peer" --json | tail -1) || j="{}"
            l1=$(load)
            echo "$j" | "$py" -c '
import json, sys
j = json.loads(sys.stdin.read())
print("\t".join(sys.argv[1:4] + ["%.2f" % j.get(k, 0) for k in
      ("attnd_prefill", "llamacpp_prefill", "attnd_decode", "llamacpp_decode")] + sys.argv[4:6] +
      ["%.4f" % j.get(k, 0) for k in ("attnd_decode_gbs", "probe_gbs", "attnd_decode_share", "attnd_prefill_share")] +
      [j.get("peak_path", "?"), "%.4f" % j.get("llamacpp_decode_share", 0), "%.4f" % j.get("probe_gbs_1", 0)]))
' "$t" "$th" "$p" "$l0" "$l1" >>"$res"
            tail -1 "$res" | awk -F'\t' '{printf "  %-7s %s thr  prompt %-5s prefill %7.1f / %7.1f   decode %5.1f / %5.1f   (load %s -> %s)\n", $1, $2, $3, $4, $5, $6, $7, $8, $9}'
            echo "$j" | "$py" -c 'import json, sys; print("          kernels: " + json.loads(sys.stdin.read()).get("kernels", "?"))' || true
            tail -1 "$res" | awk -F'\t' '{printf "          wall: decode %.1f GB/s = %.0f %% of the probe, %.1f GB/s (1 thread %.1f; llama.cpp %.0f %%); prefill %.0f %% of the %s peak\n", $10, 100 * $12, $11, $16, 100 * $15, 100 * $13, $14}'
        done
    done
done

echo
echo "attnd / llama.cpp (tokens/s ratios; > 1 means attnd is faster), prompt + $n generated tokens, median of $reps"
awk -F'\t' 'NR > 1 { printf "%-7s %s thread%s prompt %-5s   prefill %5.2fx   decode %5.2fx   decode %3.0f %% of the wall, prefill %3.0f %% of the peak\n",
    $1, $2, $2 == 1 ? " " : "s", $3, ($5 > 0 ? $4 / $5 : 0), ($7 > 0 ? $6 / $7 : 0), 100 * $12, 100 * $13 }' "$res"

draw_chart
