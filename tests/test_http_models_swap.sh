#!/usr/bin/env bash
# test_http_models_swap.sh — issue 50's "Swapping" target, short: three models (a chat model
# drafting with its Q4_0 copy, that copy on its own, a small bert for embeddings) under a
# models_memory_mb budget that holds two, 4 clients of mixed traffic for 4 s; no request fails,
# every answer equals a one-model server's (temperature 0), and /metrics counted the loads and
# unloads. tools/bench/models_swap.py does it all (tools/bench/models_swap.sh: two minutes).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(dirname "$ATTND_BINARY")
out=$(python3 "$here/../tools/bench/models_swap.py" --attnd "$ATTND_BINARY" --make-tiny "$build/make_tiny" \
      --seconds 4 --clients 4 --threads 2)
rc=$?
echo "# $out"
[ $rc -eq 0 ] && echo "ok - 3 models in a budget of 2: no failed request, answers as alone, swaps counted" \
              || echo "not ok - models_swap.py failed ($rc)"
exit $rc
