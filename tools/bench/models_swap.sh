#!/usr/bin/env bash
# models_swap.sh — issue 50's "Swapping" target for two minutes (tools/bench/models_swap.py):
# three models under a memory budget of two, mixed traffic from 6 clients, 0 failed requests,
# every answer as from a one-model server, loads and unloads counted in /metrics.
#
#     tools/bench/models_swap.sh [build dir] [extra models_swap.py flags]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
shift || true
echo "# $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$here/models_swap.py" --attnd "$build/attnd" --make-tiny "$build/make_tiny" --seconds 120 --clients 6 "$@"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
