#!/usr/bin/env bash
# test_deploy_install.sh — `cmake --install` with a prefix and with DESTDIR staging installs the
# binary, the example config, the unit files and (when present) the default model; the installed
# binary finds the default model without flags, also after the tree is moved elsewhere.
set -euo pipefail
: "${ATTND_BINARY:?}" "${ATTND_SOURCE_DIR:?}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
BUILD_DIR=$(dirname "$ATTND_BINARY")

# 1. DESTDIR staging for prefix /usr: files land under DESTDIR, contents name /usr.
DESTDIR="$T/stage" cmake --install "$BUILD_DIR" --prefix /usr >"$T/log" 2>&1 || { cat "$T/log"; fail "install"; }
S="$T/stage/usr"
for f in bin/attnd share/attnd/attnd.conf.example lib/systemd/system/attnd.service \
         lib/systemd/system/attnd@.service lib/systemd/system/attnd-models.service share/doc/attnd/nginx-attnd.conf; do
    [ -f "$S/$f" ] || fail "missing $f after DESTDIR install"
done
[ -x "$S/bin/attnd" ] || fail "bin/attnd not executable"
grep -qx "ExecStart=/usr/bin/attnd serve" "$S/lib/systemd/system/attnd.service" || fail "ExecStart must name /usr/bin/attnd"
grep -q "$T" "$S/lib/systemd/system/attnd.service" && fail "DESTDIR leaked into the unit file"
cmp -s "$S/share/attnd/attnd.conf.example" "$ATTND_SOURCE_DIR/configs/attnd.conf" || fail "example config differs"
if [ -f "$ATTND_SOURCE_DIR/models/attnd-sotu.gguf" ]; then
    [ -f "$S/share/attnd/models/attnd-sotu.gguf" ] || fail "default model not installed"
fi
echo "ok: DESTDIR install"

# 2. Relocation: move the staged tree; the binary must find share/attnd/models next to itself.
#    Use the real default model when the build has one, else a fixture standing in for it.
MODEL_SRC="$ATTND_SOURCE_DIR/models/attnd-sotu.gguf"
if [ -f "$MODEL_SRC" ]; then
    mkdir -p "$S/share/attnd/models"
    [ -f "$S/share/attnd/models/attnd-sotu.gguf" ] || cp "$MODEL_SRC" "$S/share/attnd/models/attnd-sotu.gguf"
    mv "$T/stage/usr" "$T/moved"
    out=$(cd / && env -u ATTND_MODEL "$T/moved/bin/attnd" info 2>&1) || { echo "$out"; fail "attnd info without --model"; }
    grep -q "$T/moved/bin/../share/attnd/models/attnd-sotu.gguf\|$T/moved/share/attnd/models/attnd-sotu.gguf" <<<"$out" ||
        { echo "$out"; fail "relocated binary did not use its own default model"; }
    echo "ok: relocated binary finds its default model"
else
    fail "no default model $MODEL_SRC for the relocation check"
fi

# 3. A plain prefix install (no DESTDIR): the unit names the binary inside the prefix.
cmake --install "$BUILD_DIR" --prefix "$T/opt" >"$T/log" 2>&1 || { cat "$T/log"; fail "prefix install"; }
grep -qx "ExecStart=$T/opt/bin/attnd serve" "$T/opt/lib/systemd/system/attnd.service" || fail "prefix ExecStart"
echo "PASS"
