#!/usr/bin/env bash
# test_pull.sh — `attnd pull`, `attnd models`, `attnd split` and hf:// references against a local
# stand-in for the Hugging Face Hub (tests/fake_hub.py: its API, redirects, ranges, a cut
# mid-file, a wrong hash, a gated repository). The real Hub is never reached.
set -u
BIN=${ATTND_BINARY:?ATTND_BINARY not set}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${ATTND_DATA_DIR:-$HERE/data}
source "$HERE/check_lib.sh"

T=$(mktemp -d /tmp/attnd-pull-XXXXXX)
HUB_PID=
cleanup() { [ -n "$HUB_PID" ] && kill "$HUB_PID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

# the repositories: a tiny model in three quantizations (+ files that are not models), the same
# as a split set, a gated copy, and one whose listed sha256 is wrong
R=$T/hub/acme
mkdir -p "$R/tiny-GGUF" "$R/split-GGUF/Q8_0" "$R/gated-GGUF" "$R/bad-GGUF"
cp "$DATA/models/stories260K.gguf" "$R/tiny-GGUF/tiny-F32.gguf"
"$BIN" quantize "$R/tiny-GGUF/tiny-F32.gguf" "$R/tiny-GGUF/tiny-Q8_0.gguf" Q8_0 --quiet 2>/dev/null
"$BIN" quantize "$R/tiny-GGUF/tiny-F32.gguf" "$R/tiny-GGUF/tiny-Q4_K_M.gguf" Q4_K_M --quiet 2>/dev/null
cp "$R/tiny-GGUF/tiny-F32.gguf" "$R/tiny-GGUF/mmproj-tiny-Q8_0.gguf"
echo "# tiny" > "$R/tiny-GGUF/README.md"
echo "tiny-Q8_0.gguf 200000" > "$R/tiny-GGUF/.cut" # the first download of it stops at 200,000 bytes
"$BIN" split "$R/tiny-GGUF/tiny-Q8_0.gguf" "$R/split-GGUF/Q8_0/tiny-Q8_0" --parts 3 2>/dev/null
check "attnd split writes three files" "$(ls "$R/split-GGUF/Q8_0" | tr '\n' ' ')" \
    "tiny-Q8_0-00001-of-00003.gguf tiny-Q8_0-00002-of-00003.gguf tiny-Q8_0-00003-of-00003.gguf "
cp "$R/tiny-GGUF/tiny-Q8_0.gguf" "$R/gated-GGUF/gated-Q8_0.gguf"
echo "s3cret" > "$R/gated-GGUF/.token"
cp "$R/tiny-GGUF/tiny-Q8_0.gguf" "$R/bad-GGUF/bad-Q8_0.gguf"
echo "bad-Q8_0.gguf" > "$R/bad-GGUF/.wrong-sha"

python3 "$HERE/fake_hub.py" "$T/hub" "$T/port" "$T/log" &
HUB_PID=$!
for _ in $(seq 1 100); do [ -s "$T/port" ] && break; sleep 0.05; done
export HF_ENDPOINT="http://127.0.0.1:$(cat "$T/port")" XDG_CACHE_HOME="$T/cache"
unset HF_TOKEN
C=$T/cache/attnd/models

# a quant tag; the download is cut, resumed from the byte it had, and verified
out=$("$BIN" pull acme/tiny-GGUF:q8_0 --quiet 2>"$T/err")
check "pull prints the cached file" "$out" "$C/acme/tiny-GGUF/tiny-Q8_0.gguf"
cmp -s "$out" "$R/tiny-GGUF/tiny-Q8_0.gguf"
check "the pulled file is the Hub's, byte for byte" "$?" 0
check "the cut download resumed at byte 200000" \
    "$(grep -c '^GET /cdn/acme/tiny-GGUF/tiny-Q8_0.gguf bytes=200000-$' "$T/log")" 1
check "nothing is left half-written" "$(ls "$C/acme/tiny-GGUF" | grep -c part)" 0
n=$(wc -l <"$T/log")
out=$("$BIN" pull acme/tiny-GGUF:Q8_0 --quiet 2>&1)
check "a second pull downloads nothing" "$(tail -n +$((n + 1)) "$T/log" | grep -c '^GET /cdn/')" 0

# no tag: Q4_K_M first (not the projector, not the README)
out=$("$BIN" pull acme/tiny-GGUF --quiet 2>&1)
check "no tag: Q4_K_M, as llama-server's -hf" "$out" "$C/acme/tiny-GGUF/tiny-Q4_K_M.gguf"
out=$("$BIN" pull acme/tiny-GGUF:Q5_K_S --quiet 2>&1)
rc=$?
check "an unknown tag exits 1" "$rc" 1
check "... and lists the model files" "$out" \
    "attnd pull: acme/tiny-GGUF has no GGUF model file for tag 'Q5_K_S' (its GGUF files: tiny-F32.gguf, tiny-Q4_K_M.gguf, tiny-Q8_0.gguf)"
"$BIN" pull acme/../etc --quiet >/dev/null 2>&1
check "a reference outside org/repo is a usage error" "$?" 2
out=$("$BIN" pull acme/none-GGUF --quiet 2>&1)
check "a missing repository names the 404" "$(echo "$out" | grep -c 'HTTP 404: no such repository')" 1

# a split set comes whole and loads as one model: the same scores as the file it was split from
out=$("$BIN" pull acme/split-GGUF:Q8_0 --quiet 2>&1)
check "a split set: its first file" "$out" "$C/acme/split-GGUF/Q8_0/tiny-Q8_0-00001-of-00003.gguf"
check "... and every file of it" "$(ls "$C/acme/split-GGUF/Q8_0" | wc -l)" 3
whole=$("$BIN" score --model "$R/tiny-GGUF/tiny-Q8_0.gguf" --tokens 1,300,301,302,303,304,305 --json 2>&1)
split=$("$BIN" score --model "$out" --tokens 1,300,301,302,303,304,305 --json 2>&1)
check "the split set scores as the whole file" "$split" "$whole"
check "attnd info counts the set's files" "$("$BIN" info --model "$out" | grep -c 'in a split set of 3 files')" 1

# hf:// references resolve from the cache, with no network
kill "$HUB_PID" && wait "$HUB_PID" 2>/dev/null
HUB_PID=
out=$("$BIN" score --model hf://acme/split-GGUF:Q8_0 --tokens 1,300,301,302,303,304,305 --json 2>&1)
check "hf://org/repo:QUANT loads offline once pulled" "$out" "$whole"
out=$("$BIN" models)
check "attnd models lists each model once" "$(echo "$out" | awk '{print $1, $4}' | sort | tr '\n' ';')" \
    "acme/split-GGUF/Q8_0/tiny-Q8_0-00001-of-00003.gguf hf://acme/split-GGUF;acme/tiny-GGUF/tiny-Q4_K_M.gguf hf://acme/tiny-GGUF;acme/tiny-GGUF/tiny-Q8_0.gguf hf://acme/tiny-GGUF;"

python3 "$HERE/fake_hub.py" "$T/hub" "$T/port2" "$T/log" &
HUB_PID=$!
for _ in $(seq 1 100); do [ -s "$T/port2" ] && break; sleep 0.05; done
export HF_ENDPOINT="http://127.0.0.1:$(cat "$T/port2")"

# a gated repository: 401 without a token, the file with HF_TOKEN
out=$("$BIN" pull acme/gated-GGUF:Q8_0 --quiet 2>&1)
rc=$?
check "gated without a token exits 1" "$rc" 1
check "... and says to set HF_TOKEN" "$(echo "$out" | grep -c 'HTTP 401: the repository is gated or private.*HF_TOKEN')" 1
out=$(HF_TOKEN=s3cret "$BIN" pull acme/gated-GGUF:Q8_0 --quiet 2>&1)
check "gated with HF_TOKEN" "$out" "$C/acme/gated-GGUF/gated-Q8_0.gguf"

# a file whose sha256 is not the listed one is refused and kept aside
out=$("$BIN" pull acme/bad-GGUF:Q8_0 --quiet 2>&1)
rc=$?
check "a wrong sha256 exits 1" "$rc" 1
check "... names both hashes" "$(echo "$out" | grep -c 'sha256 [0-9a-f]\{64\}, but the Hub lists 0\{64\}')" 1
check "... keeps the file aside, not in the cache" "$(ls "$C/acme/bad-GGUF")" "bad-Q8_0.gguf.bad"
"$BIN" score --model hf://acme/bad-GGUF:Q8_0 --tokens 1,2 >/dev/null 2>&1
check "... and hf:// does not load it" "$?" 1

exit $fail
