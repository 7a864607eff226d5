#!/usr/bin/env bash
# Builds build/bench_quant, build/bench_iq_peer, build/iq_vs_peer (tools/quant), build/bench_amx, build/bench_batch, build/bench_embed, build/bench_jinja, build/bench_histo, build/bench_deltanet, build/bench_mtp, build/bench_parts and build/bench_dense_rows against the engine library of ./build (run from the repository root,
# after `cmake --build build`). Not part of CMake: benchmarks are not shipped or tested.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --build build -j2 --target attnd_engine >/dev/null
gcc -std=gnu11 -O2 -Wall -Wextra -pthread -Iinclude -Iengine -Iengine/kernels tools/bench/bench_quant.c build/libattnd_engine.a -lm \
    -o build/bench_quant
echo "built build/bench_quant"
gcc -std=gnu11 -O2 -Wall -Wextra -Iinclude -Iengine -Iengine/kernels tools/bench/bench_iq_peer.c build/libattnd_engine.a -ldl -lm \
    -o build/bench_iq_peer
echo "built build/bench_iq_peer"
gcc -std=gnu11 -O2 -Wall -Wextra -pthread -Iinclude -Iengine -Iengine/kernels tools/quant/iq_vs_peer.c build/libattnd_engine.a \
    -ldl -lm -lutf8proc -o build/iq_vs_peer
echo "built build/iq_vs_peer"
gcc -std=gnu11 -O2 -Wall -Wextra -pthread -Iinclude -Iengine -Iengine/kernels tools/bench/bench_amx.c build/libattnd_engine.a -lm \
    -o build/bench_amx
echo "built build/bench_amx"
gcc -std=gnu11 -O2 -Wall -Wextra -pthread -Iinclude -Iengine -Iengine/kernels tools/bench/bench_batch.c build/libattnd_engine.a -lutf8proc -lm \
    -o build/bench_batch
echo "built build/bench_batch"
gcc -std=gnu11 -O2 -Wall -Wextra -pthread -Iinclude -Iengine -Iengine/kernels tools/bench/bench_embed.c build/libattnd_engine.a -lutf8proc -lm \
    -o build/bench_embed
echo "built build/bench_embed"
cmake --build build -j2 --target attnd_server >/dev/null
gcc -std=gnu11 -O2 -Wall -Wextra -Iinclude -Iserver/jinja tools/bench/bench_jinja.c build/libattnd_server.a build/libattnd_engine.a -ljansson \
    -lutf8proc -lm -o build/bench_jinja
echo "built build/bench_jinja"
gcc -std=gnu11 -O2 -Wall -Wextra -pthread -Iinclude -Iserver/runtime tools/bench/bench_histo.c build/libattnd_server.a \
    build/libattnd_engine.a -lm -o build/bench_histo
echo "built build/bench_histo"
gcc -std=gnu11 -O2 -Wall -Wextra -pthread -Iinclude -Iengine -Iengine/kernels tools/bench/bench_deltanet.c build/libattnd_engine.a -lm \
    -o build/bench_deltanet
echo "built build/bench_deltanet"
gcc -std=gnu11 -O2 -Wall -Wextra -pthread -Iinclude -Iengine -Itests tools/bench/bench_mtp.c build/libattnd_engine.a -lutf8proc -lm \
    -o build/bench_mtp
echo "built build/bench_mtp"
gcc -std=gnu11 -O2 -Wall -Wextra -pthread -Iinclude -Iengine -Iengine/kernels tools/bench/bench_parts.c build/libattnd_engine.a \
    -lutf8proc -lm -o build/bench_parts
echo "built build/bench_parts"
gcc -std=gnu11 -O2 -Wall -Wextra -pthread -Iinclude -Iengine -Iengine/kernels tools/bench/bench_dense_rows.c build/libattnd_engine.a \
    -lm -o build/bench_dense_rows
echo "built build/bench_dense_rows"
