#!/usr/bin/env bash
# spec.sh — speculative decoding: decode tokens/s of `attnd generate` without speculation, with
# the cost-aware controller (the default) and with a fixed draft length (--draft-fixed), against
# the acceptance rate reached, for
#   1. prompt lookup on a repeat-this-text prompt (the shipped model, real text),
#   2. prompt lookup on a prompt with nothing to repeat (the same model),
#   3. a TinyLlama-1.1B-shaped Q8_0 model with its own Q4_0 copy as draft model,
#   4. the same with its own Q2_K copy as draft model (all three quantized by `attnd quantize`
#      from one F16 file of random weights written by tools/bench/make_model.py);
#   5. tokens/s against acceptance: a synthetic TinyLlama-shaped Q8_0 model whose greedy output
#      its own Q4_0 copy reproduces about as often as a structure share says (make_model.py
#      --successors, one vocabulary region per share: 0, 0.5, 0.75, 0.9, 0.97), one line per share;
#   6. the same with its Q2_K copy as draft.
# Rows 5 and 6 are a stand-in for a real draft pair, not a real model (random layers of the real
# shape and cost, plus a token -> next-token path in the embedding and output head: see
# make_model.py); acceptance is what the run measured.
# The last column is the cost the controller measured: the largest verify step it ran against a
# 1-token step, as "ratio@rows", and a draft model's step against it, "D ratio" (from the
# adaptive run's timings.step_ms).
# Each row: one untimed warm-up, then --reps plain, adaptive and fixed runs alternating, medians.
# Greedy (--temp 0): every run prints the same tokens, which the script checks.
#
#   tools/bench/spec.sh                    # all six rows
#   tools/bench/spec.sh --rows "1 2" --reps 5 --n 128
#
# Options: --rows "1 2 3 4", --reps 3, --n 96 (tokens generated), --threads 0, --draft-max 8,
# --attnd BIN (default build/attnd). The TinyLlama files are written once under
# ${XDG_CACHE_HOME:-~/.cache}/attnd/bench (Q8_0 1.2 GB, its Q4_0 copy 0.6 GB, Q2_K 0.4 GB, for rows
# 3-4 and again for rows 5-6; the F16 file they come from, 2.2 GB, is removed once they exist).
# Timings on a busy machine are meaningless: take figures in a quiet window.
# Needs: python3-numpy (rows 3-6), jq.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh

rows="1 2 3 4 5 6" reps=3 n=96 threads=0 dmax=8 attnd=build/attnd
bench_options '2,31' 'rows reps n threads draft-max=dmax attnd' '' "$@"
command -v jq >/dev/null || { echo "spec.sh: needs jq" >&2; exit 1; }
[ -x "$attnd" ] || { echo "spec.sh: $attnd missing (build it first)" >&2; exit 1; }

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
acc_of() { jq 'if .timings.drafted > 0 then .timings.accepted / .timings.drafted else 0 end' <<<"$1"; }
# the largest measured verify step against the 1-token step, "ratio@rows"
# and, with a draft model, its step against the 1-token step as "D ratio"
cost_of() {
    jq -r '(.timings.step_ms // {}) as $t | $t | with_entries(select(.key | test("^[0-9]+$"))) as $m
        | (if ($m["1"] // 0) > 0 and ($m | length) > 1
          then ($m | to_entries | max_by(.key | tonumber)) as $e | "\($e.value / $m["1"] * 100 | round / 100)@\($e.key)"
          else "-" end)
        + (if ($m["1"] // 0) > 0 and ($t.draft_per_token // 0) > 0
           then " D\($t.draft_per_token / $m["1"] * 100 | round / 100)" else "" end)' <<<"$1"
}

# One row: label, then the generate arguments shared by all runs, then (after --) the speculative ones.
row() {
    local label=$1; shift
    local common=() specargs=()
    while [ "$1" != -- ]; do common+=("$1"); shift; done
    shift
    specargs=("$@")
    local gen=("$attnd" generate "${common[@]}" --n "$n" --temp 0 --threads "$threads" --json)
    "${gen[@]}" >/dev/null # warm-up
    local plain=() ada=() fix=() acc_a=() acc_f=() cost=()
    for _ in $(seq "$reps"); do
        local a b c
        a=$("${gen[@]}")
        b=$("${gen[@]}" "${specargs[@]}")
        c=$("${gen[@]}" "${specargs[@]}" --draft-fixed)
        for x in "$b" "$c"; do
            [ "$(jq -c .tokens <<<"$a")" = "$(jq -c .tokens <<<"$x")" ] || { echo "spec.sh: $label: outputs differ" >&2; exit 1; }
        done
        plain+=("$(jq .timings.decode_tok_per_s <<<"$a")")
        ada+=("$(jq .timings.decode_tok_per_s <<<"$b")")
        fix+=("$(jq .timings.decode_tok_per_s <<<"$c")")
        acc_a+=("$(acc_of "$b")")
        acc_f+=("$(acc_of "$c")")
        cost+=("$(cost_of "$b")")
    done
    local p f x ra rf
    p=$(printf '%s\n' "${plain[@]}" | median)
    f=$(printf '%s\n' "${ada[@]}" | median)
    x=$(printf '%s\n' "${fix[@]}" | median)
    ra=$(printf '%s\n' "${acc_a[@]}" | median)
    rf=$(printf '%s\n' "${acc_f[@]}" | median)
    printf '%-28s %9.1f | %9.1f %6sx %5.0f %% | %9.1f %6sx %5.0f %% | %s\n' "$label" "$p" "$f" "$(ratio "$f" "$p")" \
        "$(awk -v r="$ra" 'BEGIN { print 100 * r }')" "$x" "$(ratio "$x" "$p")" "$(awk -v r="$rf" 'BEGIN { print 100 * r }')" \
        "${cost[$((reps - 1))]}"
}

cache=${XDG_CACHE_HOME:-$HOME/.cache}/attnd/bench
shares="0 0.5 0.75 0.9 0.97" # rows 5-6: one vocabulary region per share, in order

# The Q8_0, Q4_0 and Q2_K copies of one F16 TinyLlama-shaped file $1-F16 (make_model.py with the
# arguments after $1), written once: the drafts are the target's own copies.
tinyllama_files() {
    local base=$1 py=""
    shift
    local f=$base-F16.gguf
    [ -s "$base-Q8_0.gguf" ] && [ -s "$base-Q4_0.gguf" ] && [ -s "$base-Q2_K.gguf" ] && return
    mkdir -p "$cache"
    py=$(bench_numpy_python) || exit 1 # rows 3-6
    # one F16 file (2.2 GB, removed afterwards), quantized three times
    [ -s "$f" ] || { "$py" tools/bench/make_model.py --type F16 "$@" "$f.tmp" && mv "$f.tmp" "$f"; }
    for t in Q8_0 Q4_0 Q2_K; do [ -s "$base-$t.gguf" ] || "$attnd" quantize --quiet "$f" "$base-$t.gguf" "$t"; done
    rm -f "$f" # all three exist now
}

# The random TinyLlama-shaped target and its draft of type $1 (Q4_0, Q2_K).
tinyllama() {
    local b=$cache/tinyllama-F16
    tinyllama_files "$b"
    row "TinyLlama Q8_0, $1 draft" --model "$b-Q8_0.gguf" --tokens 1,450,4799,310,278,3303,338 -- \
        --draft-max "$dmax" --draft-model "$b-$1.gguf" --draft-min-p 0
}

# The structured stand-in (make_model.py --successors) with its draft of type $1: one line per
# share, a prompt of six tokens from that share's region (the vocabulary's normal tokens, 259 on,
# cut in equal regions).
successors() {
    local b=$cache/tinyllama-succ-${shares// /_} r=0 n_reg width
    tinyllama_files "$b" --successors "${shares// /,}"
    n_reg=$(wc -w <<<"$shares") width=$(((32000 - 259) / n_reg))
    for s in $shares; do
        local lo=$((259 + r * width)) toks=1
        for o in 11 23 37 41 53 67; do toks+=",$((lo + o))"; done
        row "structure $s, $1 draft" --model "$b-Q8_0.gguf" --tokens "$toks" -- \
            --draft-max "$dmax" --draft-model "$b-$1.gguf" --draft-min-p 0
        r=$((r + 1))
    done
}

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; attnd $(git rev-parse --short HEAD 2>/dev/null || echo '?'); load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-28s %9s | %9s %7s %7s | %9s %7s %7s | %s\n' case "plain" "adaptive" ratio accepted "fixed" ratio accepted \
    "verify cost"
repeat="Repeat this text exactly. Text: We will build the roads and bridges of America, and we will keep the peace. Repeat: We will build the roads and bridges of America, and we will keep the peace. Repeat: We will build"
nomatch="Tonight"
for r in $rows; do
    case "$r" in
    1) row "lookup, repeat-this-text" --prompt "$repeat" -- --draft-max "$dmax" ;;
    2) row "lookup, nothing to match" --prompt "$nomatch" -- --draft-max "$dmax" ;;
    3) tinyllama Q4_0 ;;
    4) tinyllama Q2_K ;;
    5) successors Q4_0 ;;
    6) successors Q2_K ;;
    *) echo "spec.sh: no row $r" >&2; exit 2 ;;
    esac
done
