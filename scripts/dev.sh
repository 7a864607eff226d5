#!/usr/bin/env bash
# dev.sh — set up a Debian machine for attnd, build it, and either serve or test.
#
#   scripts/dev.sh run    install what serving needs, build, install attnd to /usr/local (on PATH), and
#                         serve the default model on 127.0.0.1:8080
#   scripts/dev.sh test   install what the tests need too, build (plain and ASan/UBSan), run the whole suite
#                         (ctest -j, one test per core),
#                         the server's threads under ThreadSanitizer (stress_server), then every fuzz target
#                         briefly (tools/fuzz/run.sh, FUZZ_SECONDS=10 each). Warnings are errors here.
#   scripts/dev.sh bench  install what the tests need + python3-numpy and gnuplot-nox, build, and run
#                         tools/bench/tinyllama.sh (attnd against llama.cpp; extra arguments go to it)
#
# Works as root or through sudo. Extra arguments after `run` go to `attnd serve`.
set -euo pipefail
cd "$(dirname "$0")/.."

# Serving needs a compiler and five libraries; the tests also need Criterion, curl, systemd's
# analyzer, nginx, Redis (the shared session store), a headless browser (the attention page) and
# Node.js (the HTTP and OpenAI-client tests).
RUN_PACKAGES=(cmake make gcc pkg-config libmicrohttpd-dev libjansson-dev libutf8proc-dev libhiredis-dev
              libcurl4-openssl-dev)
TEST_PACKAGES=(libcriterion-dev curl systemd nginx-light chromium redis-server
               clang libclang-rt-dev python3 prometheus)  # clang + libFuzzer: tools/fuzz; promtool

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

install_packages() { # install_packages PKG...
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "dev.sh: installing ${missing[*]}" >&2
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    fi
}

install_test_packages() {
    local extra=()
    # Node.js may come from another repository than Debian's; only install Debian's when there is none
    command -v npm >/dev/null 2>&1 || extra+=(nodejs npm)
    install_packages "${RUN_PACKAGES[@]}" "${TEST_PACKAGES[@]}" "${extra[@]}"
}

build() { # build DIR [cmake args...]: everything
    local dir=$1; shift
    cmake -S . -B "$dir" "$@" >/dev/null
    cmake --build "$dir" -j"$(nproc)"
}

# The threads meet in the server (MHD's connection threads and the connection watchdog, the
# scheduler thread, the engine's worker pool, the file and Redis session stores):
# tests/stress_server.c drives them all at once under ThreadSanitizer. Criterion's
# runner cannot start under TSan (Snaipe/Criterion#274), so the stress program is a plain one, and
# only it is built there: the extra build stays a few minutes on two cores.
tsan_tests() {
    cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTND_TSAN=ON -DATTND_WERROR=ON \
        -DATTND_BUILD_TESTS=ON >/dev/null
    cmake --build build-tsan -j"$(nproc)" --target stress_server
    (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
        ctest -R '^stress_server$' --output-on-failure)
}

case "${1:-}" in
run)
    shift
    install_packages "${RUN_PACKAGES[@]}"
    build build -DCMAKE_BUILD_TYPE=Release -DATTND_WERROR=ON -DATTND_BUILD_TESTS=OFF
    # on PATH from now on: /usr/local/bin/attnd, the default model and the units beside it
    as_root cmake --install build --prefix /usr/local >/dev/null
    echo "dev.sh: installed $(command -v attnd || echo /usr/local/bin/attnd); serving (Ctrl-C stops it)" >&2
    exec /usr/local/bin/attnd serve "$@"
    ;;
bench)
    shift
    install_test_packages
    install_packages python3-numpy gnuplot-nox
    build build -DCMAKE_BUILD_TYPE=Release -DATTND_BUILD_TESTS=OFF
    exec tools/bench/tinyllama.sh "$@"
    ;;
test)
    install_test_packages
    build build -DCMAKE_BUILD_TYPE=Release -DATTND_WERROR=ON -DATTND_BUILD_TESTS=ON
    # in parallel, one test per core: the server tests mostly wait, so the cores stay busy
    (cd build && ctest --output-on-failure -j"$(nproc)")
    build build-asan -DCMAKE_BUILD_TYPE=Debug -DATTND_SANITIZE=ON -DATTND_WERROR=ON -DATTND_BUILD_TESTS=ON \
        -DATTND_TEST_MODELS_DIR="$PWD/build/test-models" # reuse the Release pass's quantized models
    (cd build-asan && ATTND_SANITIZED=1 ctest --output-on-failure -j"$(nproc)")
    tsan_tests
    tools/fuzz/run.sh "${FUZZ_SECONDS:-10}"
    ;;
*)
    echo "usage: scripts/dev.sh run|test|bench" >&2
    exit 2
    ;;
esac
