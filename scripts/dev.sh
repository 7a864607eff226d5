#!/usr/bin/env bash
# dev.sh — set up a Debian machine for attnd, build it, and either serve or test.
#
#   scripts/dev.sh run    install what is missing, build, serve the default model on 127.0.0.1:8080
#   scripts/dev.sh test   install what is missing, build (plain and ASan/UBSan), run the whole suite
#   scripts/dev.sh bench  install what is missing (+ python3-numpy, gnuplot-nox), build, and run
#                         tools/bench/tinyllama.sh (attnd against llama.cpp; extra arguments go to it)
#
# Works as root or through sudo. Extra arguments after `run` go to `attnd serve`.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(cmake make gcc pkg-config libmicrohttpd-dev libjansson-dev libcriterion-dev libutf8proc-dev
          curl systemd nginx-light)

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    # Node.js (for the OpenAI-client and llama.cpp peer tests) may come from another repository
    # than Debian's; only install Debian's when there is none at all.
    command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "dev.sh: installing ${missing[*]}" >&2
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    fi
}

build() { # build DIR [cmake args...]
    local dir=$1; shift
    cmake -S . -B "$dir" "$@" >/dev/null
    cmake --build "$dir" -j"$(nproc)"
}

case "${1:-}" in
run)
    shift
    install_packages
    build build -DCMAKE_BUILD_TYPE=Release
    exec ./build/attnd serve "$@"
    ;;
bench)
    shift
    PACKAGES+=(python3-numpy gnuplot-nox)
    install_packages
    build build -DCMAKE_BUILD_TYPE=Release
    exec tools/bench/tinyllama.sh "$@"
    ;;
test)
    install_packages
    build build -DCMAKE_BUILD_TYPE=Release
    (cd build && ctest --output-on-failure)
    build build-asan -DCMAKE_BUILD_TYPE=Debug -DATTND_SANITIZE=ON
    (cd build-asan && ATTND_SANITIZED=1 ctest --output-on-failure)
    ;;
*)
    echo "usage: scripts/dev.sh run|test|bench" >&2
    exit 2
    ;;
esac
