#!/usr/bin/env bash
# test_cli.sh — the CLI agrees with the server where they overlap: `attnd version`, and
# `--threads 0` meaning all CPUs in every command that takes --threads (as `serve --threads 0`).
set -u
BIN=${ATTND_BINARY:?ATTND_BINARY not set}
fail=0
check() { # name, actual, expected
    if [[ "$2" != "$3" ]]; then echo "FAIL: $1"; echo "  got:      $2"; echo "  expected: $3"; fail=1
    else echo "ok: $1"; fi
}
want="attnd $(sed -n 's/^project(attnd VERSION \([0-9.]*\).*/\1/p' "${ATTND_SOURCE_DIR:?}/CMakeLists.txt")"
check "attnd version" "$("$BIN" version)" "$want"
check "attnd --version" "$("$BIN" --version)" "$want"
"$BIN" --help | grep -q "^  version "
check "--help lists version" "$?" 0
"$BIN" version extra >/dev/null 2>&1
check "version takes no arguments" "$?" 2

a=$("$BIN" generate --threads 0 --tokens 1,571,262 --n 4 --json 2>/dev/null | grep -o '"tokens": *\[[0-9, ]*\]' | head -1)
b=$("$BIN" generate --threads 1 --tokens 1,571,262 --n 4 --json 2>/dev/null | grep -o '"tokens": *\[[0-9, ]*\]' | head -1)
[[ -n "$a" ]]
check "generate --threads 0 runs" "$?" 0
check "generate --threads 0 gives what one thread gives" "$a" "$b"
"$BIN" score --threads 0 --tokens 1,571,262,545 >/dev/null 2>&1
check "score --threads 0 runs" "$?" 0
"$BIN" generate --threads -1 --tokens 1 --n 1 >/dev/null 2>&1
check "a negative thread count is a usage error" "$?" 2
exit $fail
