#!/usr/bin/env bash
# run.sh — build every libFuzzer harness (clang, ASan + UBSan) and run each for SECONDS.
#
#   tools/fuzz/run.sh SECONDS [TARGET...]     default: all targets, 15 s each
#
# Each target starts from its seed corpus (tools/fuzz/corpus/<target>, in the repository) and
# works in a scratch copy, so runs never change the committed seeds. Exits non-zero when any
# target finds a crash, a leak, an out-of-memory or a timeout; the reproducer is left in
# $FUZZ_OUT (default build-fuzz/findings) and the command to replay it is printed.
# Environment: FUZZ_BUILD (build dir, default build-fuzz), FUZZ_JOBS (build parallelism),
# FUZZ_PARALLEL (targets run at once, default one per core).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH=${1:-15}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then # every tools/fuzz/fuzz_<name>.c
    for f in tools/fuzz/fuzz_*.c; do TARGETS+=("$(basename "$f" .c)"); done
fi
BUILD=${FUZZ_BUILD:-build-fuzz}
OUT=${FUZZ_OUT:-$BUILD/findings}

command -v clang >/dev/null || { echo "run.sh: clang is not installed (scripts/dev.sh installs it)" >&2; exit 2; }
CC=clang cmake -S tools/fuzz -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$BUILD" -j"${FUZZ_JOBS:-$(nproc)}" >/dev/null

mkdir -p "$OUT"
# One target a core at a time: each target is one single-threaded libFuzzer process.
run_one() {
    local t=$1 work="$BUILD/corpus/$1" log="$OUT/$1.log" dict=()
    rm -rf "$work" "$OUT/$t.failed" && mkdir -p "$work"
    [ -d "tools/fuzz/corpus/$t" ] && cp -r "tools/fuzz/corpus/$t/." "$work/"
    [ -f "tools/fuzz/$t.dict" ] && dict=(-dict="tools/fuzz/$t.dict")
    if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$BUILD/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$OUT/$t-" "${dict[@]}" "$work" >"$log" 2>&1; then
        grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$log" | tail -1 | sed "s/^/   $t: /" >&2
    else
        { echo "   $t: FAILED — see $log; replay with: $BUILD/$t $OUT/$t-<artifact>"; tail -40 "$log"; } >&2
        touch "$OUT/$t.failed"
    fi
}
jobs_max=${FUZZ_PARALLEL:-$(nproc)}
echo "== ${#TARGETS[@]} targets, ${SECONDS_EACH}s each, $jobs_max at a time" >&2
for t in "${TARGETS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    run_one "$t" &
done
wait
failed=()
for t in "${TARGETS[@]}"; do if [ -e "$OUT/$t.failed" ]; then failed+=("$t"); fi; done
if [ ${#failed[@]} -gt 0 ]; then
    echo "run.sh: findings in ${failed[*]}" >&2
    exit 1
fi
echo "run.sh: ${#TARGETS[@]} targets ran ${SECONDS_EACH}s each without findings" >&2
