#!/usr/bin/env bash
# test_deploy_config.sh — configuration as a user meets it through `attnd serve`:
# --print-config shows the effective values and where each came from (flag > environment >
# file > default), the shipped configs/attnd.conf is accepted as is, and mistakes stop the
# server with exit status 2 and a message naming file, line and key — before any model loads.
# Skips when this attnd has no `serve` command yet.
set -euo pipefail
: "${ATTND_BINARY:?}" "${ATTND_SOURCE_DIR:?}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset ATTND_PORT ATTND_THREADS ATTND_HOST ATTND_CONFIG ATTND_MAX_SESSIONS CONFIGURATION_DIRECTORY STATE_DIRECTORY

printf 'port = 1111\nthreads = 3\nhost = 0.0.0.0   # all interfaces\nmax_sessions = 9\n' >"$T/a.conf"
out=$(ATTND_PORT=2222 ATTND_THREADS=5 "$ATTND_BINARY" serve --config "$T/a.conf" --threads 7 --model /m.gguf --print-config) ||
    fail "--print-config exited $?"
grep -Eq '^port += 2222 +# environment ATTND_PORT$' <<<"$out" || { echo "$out"; fail "port must come from the environment"; }
grep -Eq '^threads += 7 +# flag --threads$' <<<"$out" || { echo "$out"; fail "threads must come from the flag"; }
grep -Eq "^host += 0\.0\.0\.0 +# $T/a\.conf:3\$" <<<"$out" || { echo "$out"; fail "host must come from a.conf:3"; }
grep -Eq "^max_sessions += 9 +# $T/a\.conf:4\$" <<<"$out" || { echo "$out"; fail "max_sessions from file"; }
grep -Eq '^queue_limit += [0-9]+ +# default$' <<<"$out" || { echo "$out"; fail "queue_limit must be a default"; }
echo "ok: --print-config shows values and origins"

# The printed configuration is itself a valid config file with the same values.
grep -v '^#' <<<"$out" >"$T/printed.conf"
again=$("$ATTND_BINARY" serve --config "$T/printed.conf" --print-config) || fail "printed config does not load back"
diff <(grep -v '^#' <<<"$out" | sed 's/ *#.*//') <(grep -v '^#' <<<"$again" | sed 's/ *#.*//') ||
    fail "printed config reads back differently"
echo "ok: printed configuration reads back"

# The shipped example loads unchanged, and with every setting uncommented.
"$ATTND_BINARY" serve --config "$ATTND_SOURCE_DIR/configs/attnd.conf" --model /m.gguf --print-config >/dev/null ||
    fail "configs/attnd.conf rejected"
sed -n 's/^#\([a-z_]* =.*\)/\1/p' "$ATTND_SOURCE_DIR/configs/attnd.conf" >"$T/all.conf"
"$ATTND_BINARY" serve --config "$T/all.conf" --model /m.gguf --print-config >/dev/null || fail "uncommented attnd.conf rejected"
echo "ok: configs/attnd.conf loads, also fully uncommented"

expect_error() { # description, expected message part, command...
    local what=$1 want=$2
    shift 2
    local rc=0
    msg=$("$@" 2>&1 >/dev/null) || rc=$?
    [ $rc -eq 2 ] || fail "$what: exit status $rc (want 2); output: $msg"
    grep -qF -- "$want" <<<"$msg" || fail "$what: message '$msg' lacks '$want'"
    echo "ok: $what -> $msg"
}
printf 'port = 8080\n\nprot = 9\n' >"$T/typo.conf"
expect_error "unknown key" "$T/typo.conf:3: key 'prot': unknown setting (did you mean 'port'?)" \
    "$ATTND_BINARY" serve --config "$T/typo.conf" --model /m.gguf
printf 'threads = lots\n' >"$T/bad.conf"
expect_error "bad value" "$T/bad.conf:1: key 'threads': 'lots'" "$ATTND_BINARY" serve --config "$T/bad.conf" --model /m.gguf
expect_error "bad environment" "environment ATTND_PORT" env ATTND_PORT=99999 "$ATTND_BINARY" serve --model /m.gguf
expect_error "unknown flag" "--prot" "$ATTND_BINARY" serve --prot 1 --model /m.gguf
expect_error "missing config file" "$T/none.conf" "$ATTND_BINARY" serve --config "$T/none.conf" --model /m.gguf
echo "PASS"
