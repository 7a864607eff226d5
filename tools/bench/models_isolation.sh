#!/usr/bin/env bash
# models_isolation.sh — issue 50's "Isolation" target (tools/bench/models_isolation.py): model
# A's p99 time to first token while model B (a 1.1 GB file, made once by make_model.py into
# /tmp/attnd-bench) loads, against the spans where B is unloaded, alternating (target <= 1.2x).
#   tools/bench/models_isolation.sh [--samples 200] [--threads 2]
# Uses ./build/attnd (a Release build). Prints the machine's load, which moves the numbers.
# A benchmark: it never fails on speed.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh
samples=200 threads=2
bench_options '2,5' 'samples threads' '' "$@"
py=$(bench_numpy_python) || exit 1
echo "# $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" tools/bench/models_isolation.py --attnd build/attnd --samples "$samples" --threads "$threads"
