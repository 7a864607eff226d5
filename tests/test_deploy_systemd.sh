#!/usr/bin/env bash
# test_deploy_systemd.sh — the shipped unit files pass `systemd-analyze verify` and rate at most
# 2.0 ("OK") in `systemd-analyze security --offline=true`, both as written in deploy/ (binary
# path substituted) and as `cmake --install` writes them into a prefix.
# Needs systemd-analyze (Debian package `systemd`, installed by scripts/dev.sh test).
set -euo pipefail
: "${ATTND_BINARY:?}" "${ATTND_SOURCE_DIR:?}"

if ! command -v systemd-analyze >/dev/null; then
    echo "FAIL: systemd-analyze not installed (scripts/dev.sh test installs systemd)"
    exit 1
fi
MAX_EXPOSURE=2.0
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Installed into a prefix: the units must name the installed binary.
BUILD_DIR=$(dirname "$ATTND_BINARY")
cmake --install "$BUILD_DIR" --prefix "$T/prefix" >"$T/install.log" 2>&1 || { cat "$T/install.log"; fail "cmake --install"; }
UNITS="$T/prefix/lib/systemd/system"
grep -qx "ExecStart=$T/prefix/bin/attnd serve" "$UNITS/attnd.service" || fail "installed ExecStart not rewritten"
grep -qx "ExecStart=$T/prefix/bin/attnd serve --port %i" "$UNITS/attnd@.service" || fail "installed template ExecStart"
grep -qx "ExecStart=$T/prefix/bin/attnd serve --models-dir /srv/attnd/models" "$UNITS/attnd-models.service" ||
    fail "installed attnd-models.service ExecStart"

# The template is checked as an instance (systemd-analyze needs a concrete name for %i).
cp "$UNITS/attnd@.service" "$T/attnd@8081.service"
# As written in the source tree, with the binary path substituted (verify needs it to exist).
mkdir -p "$T/src"
for u in attnd.service attnd@.service attnd-models.service; do
    sed "s#/usr/local/bin/attnd#$ATTND_BINARY#" "$ATTND_SOURCE_DIR/deploy/$u" >"$T/src/$u"
done
cp "$T/src/attnd@.service" "$T/src/attnd@9000.service"

cd "$T" # systemd-analyze may write nothing, but keep it away from the source tree
for unit in "$UNITS/attnd.service" "$T/attnd@8081.service" "$T/src/attnd.service" "$T/src/attnd@9000.service" \
    "$UNITS/attnd-models.service" "$T/src/attnd-models.service"; do
    if ! out=$(systemd-analyze verify "$unit" 2>&1) || [ -n "$out" ]; then
        echo "$out" >&2
        fail "systemd-analyze verify $unit"
    fi
    echo "ok: verify $(basename "$unit")"
    sec=$(systemd-analyze security --offline=true "$unit" 2>&1) || { echo "$sec" >&2; fail "security $unit"; }
    score=$(sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p' <<<"$sec")
    [ -n "$score" ] || { echo "$sec" >&2; fail "no exposure score for $unit"; }
    awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }' ||
        { echo "$sec" | grep '✗' >&2; fail "$(basename "$unit") exposure $score > $MAX_EXPOSURE"; }
    echo "ok: security $(basename "$unit") exposure $score (<= $MAX_EXPOSURE)"
done

# Directives the issue asks for, so a later "fix" cannot quietly drop them.
for d in Type=notify WatchdogSec= Restart=on-failure DynamicUser=yes StateDirectory=attnd ConfigurationDirectory=attnd \
         ProtectSystem=strict ProtectHome=yes PrivateTmp=yes NoNewPrivileges=yes PrivateDevices=yes \
         "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX" SystemCallFilter=@system-service \
         MemoryDenyWriteExecute=yes LockPersonality=yes; do
    grep -q "^$d" "$ATTND_SOURCE_DIR/deploy/attnd.service" || fail "attnd.service lacks $d"
done
grep -qx "CapabilityBoundingSet=" "$ATTND_SOURCE_DIR/deploy/attnd.service" || fail "attnd.service lacks CapabilityBoundingSet="
# the models unit: the same hardening, a folder of models, and the pull cache it serves
for d in $(grep -o '^[A-Za-z]*=' "$ATTND_SOURCE_DIR/deploy/attnd.service" | sort -u); do
    grep -q "^$d" "$ATTND_SOURCE_DIR/deploy/attnd-models.service" || fail "attnd-models.service lacks $d"
done
for d in CacheDirectory=attnd Environment=XDG_CACHE_HOME=/var/cache; do
    grep -qx "$d" "$ATTND_SOURCE_DIR/deploy/attnd-models.service" || fail "attnd-models.service lacks $d"
done
echo "PASS"
