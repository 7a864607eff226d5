#!/usr/bin/env bash
# types_vs_llamacpp.sh — attnd against llama.cpp on TinyLlama-1.1B-shaped files (random weights)
# of the weight types of issue 27, each written by attnd's own quantizer: one F16 file from
# tools/bench/make_model.py, then `attnd quantize F16 OUT TYPE` per type. Both engines run the
# same file (`attnd bench --peer-dir`): prefill of a 512-token prompt and decode, at 1 and 2
# threads; prints the CPU, the kernel path attnd took, what each file holds (tensors per type,
# from `attnd info`) and the attnd / llama.cpp ratios.
#
#   tools/bench/types_vs_llamacpp.sh                         # every type (about an hour on 2 cores)
#   tools/bench/types_vs_llamacpp.sh --types Q5_0 --threads 1 --reps 1 --n 8   # one quick row
#
# Options: --types "Q4_1 Q5_0 ..." (any `attnd quantize` target; default below: the S mixes hold
# the most of Q3_K / Q5_K, Q5_K_M and Q3_K_M are the usual downloads), --threads "1 2",
# --prompt 512, --n 32 (generated tokens), --reps 3, --peer-dir DIR (default /work/peer, else
# tools/peers/llamacpp/install.sh), --out DIR (default build/bench), --attnd BIN (default
# build/attnd), --keep-f16 (keep the 2.2 GB F16 source afterwards).
# Files go to ${XDG_CACHE_HOME:-~/.cache}/attnd/bench/tinyllama-F16-<TYPE>.gguf and are reused.
# The lattice mixes (IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M; not in the
# default list; --types IQ is issue 47's seven: IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S,
# each the mix of that name) need an importance matrix: the first one written
# creates tinyllama-F16.imatrix.gguf next to them with `attnd imatrix` on the F16 file over the
# first 4 chunks of 512 tokens of the 2010-2012 State of the Union speeches (tests/data/
# sotu-heldout), and every lattice mix is quantized with it (`attnd quantize --imatrix`).
# TQ1_0, TQ2_0 and NVFP4 are not targets of `attnd quantize` (it refuses them).
# Each row is one `attnd bench` run: one untimed attnd warm-up, then --reps rounds of a
# read-bandwidth probe, attnd and llama.cpp, medians of each (decode also as GB/s and a share of
# the probe, prefill as a share of the kernel path's peak: docs/performance.md); the load average is printed before and after each row, so
# take the figures on a quiet machine and read the ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh

types="Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q5_K_S Q5_K_M IQ4_NL IQ4_XS MXFP4" threads="1 2" prompt=512 n=32 reps=3
peer="" out=build/bench attnd=build/attnd keep_f16=""
bench_options '2,20' 'types threads prompt n reps peer-dir=peer out attnd' 'keep-f16' "$@"

[ "$types" != IQ ] || types="IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S"
py=$(bench_numpy_python) || exit 1
[ -x "$attnd" ] || { echo "types_vs_llamacpp.sh: no $attnd (build it: cmake --build build --target attnd)" >&2; exit 1; }
if [ -z "$peer" ]; then
    if [ -d /work/peer/node_modules ]; then peer=/work/peer
    else peer=$(tools/peers/llamacpp/install.sh) || { echo "types_vs_llamacpp.sh: no llama.cpp peer" >&2; exit 1; }
    fi
fi

cache=${XDG_CACHE_HOME:-$HOME/.cache}/attnd/bench
mkdir -p "$cache" "$out"
f16=$cache/tinyllama-F16.gguf
imatrix=$cache/tinyllama-F16.imatrix.gguf
for t in $types; do
    m=$cache/tinyllama-F16-$t.gguf
    [ -s "$m" ] && continue
    if [ ! -s "$f16" ]; then
        echo "types_vs_llamacpp.sh: writing $f16 ..." >&2
        "$py" tools/bench/make_model.py --type F16 "$f16.tmp" && mv "$f16.tmp" "$f16"
    fi
    with_matrix=()
    case $t in
    IQ[123]_*)
        if [ ! -s "$imatrix" ]; then
            echo "types_vs_llamacpp.sh: attnd imatrix -> $imatrix ..." >&2
            cat tests/data/sotu-heldout/201[012]_*.txt >"$imatrix.txt"
            "$attnd" imatrix --model "$f16" --text "$imatrix.txt" --chunks 4 -o "$imatrix.tmp.gguf" >/dev/null
            mv "$imatrix.tmp.gguf" "$imatrix" && rm -f "$imatrix.txt"
        fi
        with_matrix=(--imatrix "$imatrix") ;;
    esac
    echo "types_vs_llamacpp.sh: attnd quantize -> $m ..." >&2
    "$attnd" quantize --quiet "$f16" "$m.tmp" "$t" "${with_matrix[@]}" && mv "$m.tmp" "$m"
done
[ -n "$keep_f16" ] || rm -f "$f16"

res=$out/types_vs_llamacpp.tsv
printf 'type\tthreads\tprompt\tattnd_prefill\tllamacpp_prefill\tattnd_decode\tllamacpp_decode\tload_before\tload_after\tkernels\tdecode_gbs\tprobe_gbs\tdecode_share\tprefill_share\tpeak_path\tllamacpp_decode_share\tprobe_gbs_1\n' >"$res"
load() { cut -d' ' -f1 /proc/loadavg; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; attnd $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for t in $types; do
    m=$cache/tinyllama-F16-$t.gguf
    # the tensor types the file holds (attnd info's count per type)
    echo "$t: $("$attnd" info --model "$m" 2>/dev/null | grep -m1 '^tensors:' | sed 's/^tensors: *//' || true)"
    for th in $threads; do
        l0=$(load)
        j=$("$attnd" bench --model "$m" --threads "$th" --prompt-len "$prompt" --n "$n" \
            --reps "$reps" --no-growth --peer-dir "$peer" --json | tail -1) || j="{}"
        l1=$(load)
        # one row of the table: the four rates of the bench's JSON line, the loads, the kernel path
        "$py" -c 'import json, sys
a, j = sys.argv[1:], json.loads(sys.argv[6] or "{}")
rates = ["%.2f" % j.get(e + "_" + p, 0) for p in ("prefill", "decode") for e in ("attnd", "llamacpp")]
wall = ["%.4f" % j.get(k, 0) for k in ("attnd_decode_gbs", "probe_gbs", "attnd_decode_share", "attnd_prefill_share")]
wall += [j.get("peak_path", "?"), "%.4f" % j.get("llamacpp_decode_share", 0), "%.4f" % j.get("probe_gbs_1", 0)]
print("\t".join(a[:3] + rates + a[3:5] + [str(j.get("kernels", "?"))] + wall))' "$t" "$th" "$prompt" "$l0" "$l1" "$j" >>"$res"
        tail -1 "$res" | awk -F'\t' '{printf "  %-7s %s thr  prefill %7.1f / %7.1f   decode %5.1f / %5.1f   (load %s -> %s)  kernels: %s\n", $1, $2, $4, $5, $6, $7, $8, $9, $10}'
        tail -1 "$res" | awk -F'\t' '{printf "          wall: decode %.1f GB/s = %.0f %% of the probe, %.1f GB/s (1 thread %.1f; llama.cpp %.0f %%); prefill %.0f %% of the %s peak\n", $11, 100 * $13, $12, $17, 100 * $16, 100 * $14, $15}'
    done
done

echo
echo "attnd / llama.cpp (tokens/s ratios; > 1 means attnd is faster), $prompt-token prompt + $n generated, median of $reps"
echo "targets (issue 27): decode >= 1.0x, prefill >= 1.5x"
awk -F'\t' 'NR > 1 { printf "%-7s %s thread%s   prefill %5.2fx   decode %5.2fx   decode %3.0f %% of the wall, prefill %3.0f %% of the peak\n",
    $1, $2, $2 == 1 ? " " : "s", ($5 > 0 ? $4 / $5 : 0), ($7 > 0 ? $6 / $7 : 0), 100 * $13, 100 * $14 }' "$res"
echo "results: $res"
