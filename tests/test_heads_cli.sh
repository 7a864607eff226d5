#!/usr/bin/env bash
# test_heads_cli.sh — `attnd heads` on the shipped model: a table of 24 heads with the labels
# GET /v1/heads gives, and its cache per model file: the first run writes one file under
# XDG_CACHE_HOME, the second reads it back (an edited score shows), a model file with another
# modification time or --no-cache computes again, and a damaged cache file is recomputed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
export XDG_CACHE_HOME=$TMP/cache
model=$TMP/model.gguf
cp "$here/../models/attnd-sotu.gguf" "$model"
BIN=${ATTND_BINARY:?}

t1=$("$BIN" heads --model "$model" --threads 1) || fail "attnd heads"
[ "$(tail -n +2 <<< "$t1" | wc -l)" = 24 ] || fail "the table has no row per head: $t1"
grep -q "^    5    1  0\.[0-9]*  .* previous_token$" <<< "$t1" || fail "layer 5 head 1 is not labelled previous_token: $t1"
files=("$XDG_CACHE_HOME"/attnd/heads/*.json)
[ ${#files[@]} = 1 ] && [ -f "${files[0]}" ] || fail "expected one cache file, got ${files[*]}"
echo "ok: attnd heads prints 24 heads and writes one cache file"

j1=$("$BIN" heads --model "$model" --json --threads 1)
jq -e '.object == "heads" and (.heads | length) == 24' <<< "$j1" >/dev/null || fail "--json: $j1"
jq '.heads[0].previous_token = 0.987654' "${files[0]}" > "$TMP/edited" && mv "$TMP/edited" "${files[0]}"
grep -q "^    0    0  0\.988 " <<< "$("$BIN" heads --model "$model" --threads 1)" || fail "the cache was not read"
grep -q "^    0    0  0\.988 " <<< "$("$BIN" heads --model "$model" --no-cache --threads 1)" && fail "--no-cache read the cache"
echo "ok: the second run reads the cache; --no-cache computes again"

touch -d '2001-01-01' "$model"
grep -q "^    0    0  0\.988 " <<< "$("$BIN" heads --model "$model" --threads 1)" && fail "a changed model file used the old cache"
[ "$(ls "$XDG_CACHE_HOME"/attnd/heads/*.json | wc -l)" = 2 ] || fail "the changed file got no cache of its own"
for f in "$XDG_CACHE_HOME"/attnd/heads/*.json; do printf '{"heads": [1' > "$f"; done
t2=$("$BIN" heads --model "$model" --threads 1) || fail "a damaged cache file"
[ "$(tail -n +2 <<< "$t2")" = "$(tail -n +2 <<< "$t1")" ] || fail "a damaged cache file was not recomputed: $t2"
echo "ok: another modification time is another cache entry; a damaged one is recomputed"
