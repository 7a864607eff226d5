#!/usr/bin/env bash
# models_swap.sh — issue 50's "Swapping" target for two minutes (tools/bench/models_swap.py):
# three models under a memory budget of two, mixed traffic, 0 failed requests, every answer as
# from a one-model server, loads and unloads counted in /metrics.
#   tools/bench/models_swap.sh [--seconds 120] [--clients 6] [--threads 2]
# Uses ./build/attnd and ./build/make_tiny (a Release build). Prints the machine's load before
# and after (a shared machine moves the latencies, never the answers). Fails when a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh
seconds=120 clients=6 threads=2
bench_options '2,4' 'seconds clients threads' '' "$@"
echo "# $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 tools/bench/models_swap.py --attnd build/attnd --make-tiny build/make_tiny \
    --seconds "$seconds" --clients "$clients" --threads "$threads"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
