#!/usr/bin/env bash
# iq_ppl_vs_llamacpp.sh — issue 47's quality target: the shipped model quantized to each of
# llama.cpp's IQ1–IQ3 mixes by `attnd quantize --imatrix` and by llama.cpp's own quantizer
# (llama_model_quantize of the peer, tools/peers/llamacpp/quantize.c) with the same importance
# matrix, then the perplexity of every file on the same held-out text, measured by attnd.
#
#   tools/quant/iq_ppl_vs_llamacpp.sh [BUILD_DIR] [CHUNKS] [MIXES]
#
# (defaults: build, 24 chunks, all ten mixes; MIXES e.g. "IQ1_S IQ1_M IQ2_XXS")
#
# Texts (tests/data/sotu-heldout, speeches the model never saw): the importance matrix is computed
# on 2010–2012, perplexity on 2013–2016, so the matrix never saw the scored text. Perplexity is
# `attnd imatrix`'s (llama.cpp's perplexity measure: 512-token chunks, BOS first, the second half of
# each chunk scored), over the first CHUNKS chunks. Prints a Markdown table: type, perplexity of
# attnd's file, of llama.cpp's file, their ratio, and both file sizes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
chunks=${2:-24}
mixes=${3:-IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M}
bin=$build/attnd
[ -x "$bin" ] || { echo "iq_ppl_vs_llamacpp.sh: no $bin (build first)" >&2; exit 1; }
peer=$("$root/tools/peers/llamacpp/install.sh")
model=$root/models/attnd-sotu.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

held=$root/tests/data/sotu-heldout
cat "$held"/201[012]_*.txt >"$tmp/calib.txt"
cat "$held"/201[3456]_*.txt >"$tmp/eval.txt"
cc -O2 -o "$tmp/lcpp-quantize" "$root/tools/peers/llamacpp/quantize.c" -ldl

# perplexity of FILE on the eval text: the last running figure `attnd imatrix` prints
ppl() {
    "$bin" imatrix --model "$1" --text "$tmp/eval.txt" --chunks "$chunks" --threads 1 -o "$tmp/scratch.gguf" 2>&1 |
        sed -n 's/.*perplexity \([0-9.]*\)$/\1/p' | tail -1
}

"$bin" imatrix --model "$model" --text "$tmp/calib.txt" --threads 1 -o "$tmp/imatrix.gguf" 2>/dev/null
echo "| type | attnd ppl | llama.cpp ppl | attnd / llama.cpp | attnd bytes | llama.cpp bytes |"
echo "|---|---|---|---|---|---|"
echo "| F32 (unquantized) | $(ppl "$model") | | | $(stat -c %s "$model") | |"
for mix in $mixes; do
    "$bin" quantize --quiet "$model" "$tmp/a.gguf" "$mix" --imatrix "$tmp/imatrix.gguf" 2>/dev/null
    "$tmp/lcpp-quantize" "$peer" "$model" "$tmp/l.gguf" "$mix" "$tmp/imatrix.gguf" >/dev/null 2>&1
    a=$(ppl "$tmp/a.gguf") l=$(ppl "$tmp/l.gguf")
    echo "| $mix | $a | $l | $(python3 -c "print(f'{$a / $l:.4f}')") | $(stat -c %s "$tmp/a.gguf") | $(stat -c %s "$tmp/l.gguf") |"
done
