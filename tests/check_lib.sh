# check_lib.sh — sourced by the shell tests that compare outputs with what they expect
# (test_cli.sh, test_template_cli.sh, test_tokenize_cli.sh, test_bench_options.sh).
#
#   check NAME ACTUAL EXPECTED    prints "ok: NAME", or "FAIL: NAME" with both values and sets
#                                 fail=1; the test ends with `exit $fail`.
fail=0
check() {
    if [[ "$2" != "$3" ]]; then
        echo "FAIL: $1"; echo "  got:      $2"; echo "  expected: $3"; fail=1
    else
        echo "ok: $1"
    fi
}
