#!/usr/bin/env bash
# spec.sh — speculative decoding: decode tokens/s of `attnd generate` without and with
# speculation, against the acceptance rate reached, for
#   1. prompt lookup on a repeat-this-text prompt (the shipped model, real text),
#   2. prompt lookup on a prompt with nothing to repeat (the same model),
#   3. a TinyLlama-1.1B-shaped Q8_0 model with its own Q4_0 copy as draft model (both quantized by
#      `attnd quantize` from one F16 file of random weights written by tools/bench/make_model.py).
# Each row: one untimed warm-up, then --reps plain and speculative runs alternating, medians.
# Greedy (--temp 0): both runs print the same tokens, which the script checks.
#
#   tools/bench/spec.sh                    # all three rows
#   tools/bench/spec.sh --rows "1 2" --reps 5 --n 128
#
# Options: --rows "1 2 3", --reps 3, --n 96 (tokens generated), --threads 0, --draft-max 8,
# --attnd BIN (default build/attnd). The TinyLlama files are written once under
# ${XDG_CACHE_HOME:-~/.cache}/attnd/bench (Q8_0 1.2 GB, its Q4_0 copy 0.6 GB; the F16 file they
# come from, 2.2 GB, is removed once they exist). Timings on a busy
# machine are meaningless: take figures in a quiet window.
# Needs: python3-numpy (row 3), jq.
set -euo pipefail
cd "$(dirname "$0")/../.."

rows="1 2 3" reps=3 n=96 threads=0 dmax=8 attnd=build/attnd
while [ $# -gt 0 ]; do
    case "$1" in
    --rows) rows=$2 ;;
    --reps) reps=$2 ;;
    --n) n=$2 ;;
    --threads) threads=$2 ;;
    --draft-max) dmax=$2 ;;
    --attnd) attnd=$2 ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
    esac
    shift 2
done
command -v jq >/dev/null || { echo "spec.sh: needs jq" >&2; exit 1; }
[ -x "$attnd" ] || { echo "spec.sh: $attnd missing (build it first)" >&2; exit 1; }

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

# One row: label, then the generate arguments shared by both runs, then (after --) the speculative ones.
row() {
    local label=$1; shift
    local common=() specargs=()
    while [ "$1" != -- ]; do common+=("$1"); shift; done
    shift
    specargs=("$@")
    "$attnd" generate "${common[@]}" --n "$n" --temp 0 --threads "$threads" --json >/dev/null # warm-up
    local plain=() fast=() acc=()
    for _ in $(seq "$reps"); do
        local a b
        a=$("$attnd" generate "${common[@]}" --n "$n" --temp 0 --threads "$threads" --json)
        b=$("$attnd" generate "${common[@]}" --n "$n" --temp 0 --threads "$threads" --json "${specargs[@]}")
        [ "$(jq -c .tokens <<<"$a")" = "$(jq -c .tokens <<<"$b")" ] || { echo "spec.sh: $label: outputs differ" >&2; exit 1; }
        plain+=("$(jq .timings.decode_tok_per_s <<<"$a")")
        fast+=("$(jq .timings.decode_tok_per_s <<<"$b")")
        acc+=("$(jq 'if .timings.drafted > 0 then .timings.accepted / .timings.drafted else 0 end' <<<"$b")")
    done
    local p f r
    p=$(printf '%s\n' "${plain[@]}" | median)
    f=$(printf '%s\n' "${fast[@]}" | median)
    r=$(printf '%s\n' "${acc[@]}" | median)
    printf '%-34s %10.1f %10.1f %7.2fx %9.0f %%\n' "$label" "$p" "$f" "$(awk -v a="$f" -v b="$p" 'BEGIN { print (b > 0 ? a / b : 0) }')" "$(awk -v r="$r" 'BEGIN { print 100 * r }')"
}

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; attnd $(git rev-parse --short HEAD 2>/dev/null || echo '?'); load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-34s %10s %10s %8s %10s\n' case "plain tok/s" "spec tok/s" ratio accepted
repeat="Repeat this text exactly. Text: We will build the roads and bridges of America, and we will keep the peace. Repeat: We will build the roads and bridges of America, and we will keep the peace. Repeat: We will build"
nomatch="Tonight"
for r in $rows; do
    case "$r" in
    1) row "lookup, repeat-this-text" --prompt "$repeat" -- --draft-max "$dmax" ;;
    2) row "lookup, nothing to match" --prompt "$nomatch" -- --draft-max "$dmax" ;;
    3)
        py=""
        for p in /usr/bin/python3 python3; do "$p" -c 'import numpy' 2>/dev/null && { py=$p; break; }; done
        [ -n "$py" ] || { echo "spec.sh: row 3 needs python3 with numpy" >&2; exit 1; }
        cache=${XDG_CACHE_HOME:-$HOME/.cache}/attnd/bench
        mkdir -p "$cache"
        # one F16 file (2.2 GB, removed afterwards), quantized twice: the draft is the target's own copy
        f=$cache/tinyllama-F16.gguf t=$cache/tinyllama-F16-Q8_0.gguf d=$cache/tinyllama-F16-Q4_0.gguf
        if [ ! -s "$t" ] || [ ! -s "$d" ]; then
            [ -s "$f" ] || { "$py" tools/bench/make_model.py --type F16 "$f.tmp" && mv "$f.tmp" "$f"; }
            [ -s "$t" ] || "$attnd" quantize --quiet "$f" "$t" Q8_0
            [ -s "$d" ] || "$attnd" quantize --quiet "$f" "$d" Q4_0
            rm -f "$f"
        fi
        row "TinyLlama Q8_0, its Q4_0 as draft" --model "$t" --tokens 1,450,4799,310,278,3303,338 -- \
            --draft-max "$dmax" --draft-model "$d" --draft-min-p 0
        ;;
    *) echo "spec.sh: no row $r" >&2; exit 2 ;;
    esac
done
