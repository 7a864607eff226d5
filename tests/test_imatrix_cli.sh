#!/usr/bin/env bash
# test_imatrix_cli.sh — `attnd imatrix` on the shipped model writes llama.cpp's GGUF imatrix (or
# the legacy .dat), with a perplexity per chunk; `attnd quantize --imatrix` reads both and writes
# other bytes than without; a missing or malformed matrix and a text shorter than a chunk are
# refused with a message (exit 1).
set -u
BIN=${ATTND_BINARY:?ATTND_BINARY not set}
SRC=${ATTND_SOURCE_DIR:?ATTND_SOURCE_DIR not set}
source "$(dirname "$0")/check_lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
M="$SRC/models/attnd-sotu.gguf"
head -c 6000 "$SRC/models/README.md" >"$T/text.txt"

out=$("$BIN" imatrix --model "$M" --text "$T/text.txt" -o "$T/im.gguf" --chunk 64 --chunks 3 --threads 1 2>&1)
check "imatrix exits 0" "$?" 0
check "imatrix prints each chunk's perplexity" "$(grep -c 'chunk [123]/3  perplexity [0-9.]*$' <<<"$out")" 3
check "imatrix names what it wrote" "$(grep -o 'wrote .* (42 weights, 3 chunks)' <<<"$out" | wc -l)" 1
check "the output is a GGUF file" "$(head -c 4 "$T/im.gguf")" GGUF
"$BIN" imatrix --model "$M" --text "$T/text.txt" -o "$T/im.dat" --chunk 64 --chunks 3 --threads 1 >/dev/null 2>&1
check "a .dat name writes the legacy format" "$(od -An -t d4 -N4 "$T/im.dat" | tr -d ' ')" 42

"$BIN" quantize "$M" "$T/plain.gguf" Q4_K_M --quiet 2>/dev/null
out=$("$BIN" quantize "$M" "$T/weighted.gguf" Q4_K_M --imatrix "$T/im.gguf" --quiet 2>&1)
check "quantize --imatrix (GGUF) exits 0" "$?" 0
check "quantize --imatrix says what it read" "$(grep -c 'imatrix .*im.gguf: 42 weights, 3 chunks' <<<"$out")" 1
cmp -s "$T/plain.gguf" "$T/weighted.gguf"
check "the matrix changes the encoding" "$?" 1
"$BIN" quantize "$M" "$T/weighted2.gguf" Q4_K_M --imatrix "$T/im.dat" --quiet >/dev/null 2>&1
check "quantize --imatrix (.dat) exits 0" "$?" 0
"$BIN" info --model "$T/weighted2.gguf" >/dev/null 2>&1
check "the weighted file loads" "$?" 0
keys=$(LC_ALL=C grep -a -o 'quantize\.imatrix\.[a-z_]*' "$T/weighted2.gguf" | sort | tr '\n' ' ')
check "the output has llama-quantize's imatrix keys" "$keys" \
    "quantize.imatrix.chunks_count quantize.imatrix.dataset quantize.imatrix.entries_count quantize.imatrix.file "
check "quantize.imatrix.file names the matrix" "$(LC_ALL=C grep -a -c "$T/im.dat" "$T/weighted2.gguf")" 1

out=$("$BIN" quantize "$M" "$T/x.gguf" Q4_K_M --imatrix "$T/none.gguf" 2>&1)
check "a missing matrix exits 1" "$?" 1
check "a missing matrix is named" "$(grep -c 'none.gguf' <<<"$out")" 1
printf 'GGUF\3\0\0\0garbage' >"$T/bad.gguf"
out=$("$BIN" quantize "$M" "$T/x.gguf" Q4_K_M --imatrix "$T/bad.gguf" 2>&1)
check "a malformed matrix exits 1" "$?" 1
check "a malformed matrix is named" "$(grep -c 'bad.gguf' <<<"$out")" 1
printf 'Fellow citizens' >"$T/short.txt"
out=$("$BIN" imatrix --model "$M" --text "$T/short.txt" -o "$T/s.gguf" --chunk 64 2>&1)
check "a text shorter than a chunk exits 1" "$?" 1
check "a text shorter than a chunk says so" "$(grep -c 'a chunk needs 64' <<<"$out")" 1
exit $fail
