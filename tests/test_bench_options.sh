#!/usr/bin/env bash
# test_bench_options.sh — tools/bench/bench_lib.sh's bench_options, the option parser of every
# tools/bench script: values (with the variable named for the option, dashes as underscores, or
# named by `opt=var`), flags, and a usage exit (status 2, the script's header) for an unknown
# option or a value left out.
set -u
LIB="$(cd "$(dirname "$0")/.." && pwd)/tools/bench/bench_lib.sh"
source "$(dirname "$0")/check_lib.sh"
script=$(mktemp)
trap 'rm -f "$script"' EXIT
cat >"$script" <<'SCRIPT'
# usage: this line
source "$LIB"
n=1 peer_dir=d peer=p small="" keep_f16=""
bench_options '1,1' 'n peer-dir out-dir=peer' 'small keep-f16' "$@"
echo "n=$n peer_dir=$peer_dir peer=$peer small=$small keep_f16=$keep_f16"
SCRIPT
run() { LIB=$LIB bash "$script" "$@" 2>&1; echo "rc=$?"; }

check "no options keep the defaults" "$(run)" $'n=1 peer_dir=d peer=p small= keep_f16=\nrc=0'
check "values, with spaces, set the variable named for the option" "$(run --n '5 6' --peer-dir /x)" \
    $'n=5 6 peer_dir=/x peer=p small= keep_f16=\nrc=0'
check "opt=var names another variable" "$(run --out-dir /o)" $'n=1 peer_dir=d peer=/o small= keep_f16=\nrc=0'
check "flags set 1 and take no value" "$(run --small --keep-f16 --n 2)" $'n=2 peer_dir=d peer=p small=1 keep_f16=1\nrc=0'
check "the last value wins" "$(run --n 2 --n 3)" $'n=3 peer_dir=d peer=p small= keep_f16=\nrc=0'
check "an unknown option prints the usage lines and exits 2" "$(run --m 3)" $'# usage: this line\nrc=2'
check "a value left out is a usage error" "$(run --n)" $'# usage: this line\nrc=2'
check "a flag given a value is a usage error" "$(run --small 1)" $'# usage: this line\nrc=2'
check "an option given as --opt=value is a usage error" "$(run --n=3)" $'# usage: this line\nrc=2'
check "a word of the list alone is not an option" "$(run n 3)" $'# usage: this line\nrc=2'
exit $fail
