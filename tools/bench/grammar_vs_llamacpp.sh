#!/usr/bin/env bash
# grammar_vs_llamacpp.sh — grammar-constrained decode against unconstrained decode, attnd and
# llama.cpp side by side, on the TinyLlama-1.1B shape (random weights) with two real
# vocabularies: 32,000-token SentencePiece (llama-spm) and the 151,936-token qwen2 BPE. The
# grammar is bench_grammar's JSON schema (a nested person record), converted by attnd's
# json_schema.c; llama.cpp gets the very same GBNF text (its own sampler grammar). Greedy, one
# request at a time; attnd through its /completion endpoint (tokens/s from its timings),
# llama.cpp through node-llama-cpp (tools/peers/llamacpp/grammar.mjs). Target: constrained /
# unconstrained >= 0.9.
#
#   tools/bench/grammar_vs_llamacpp.sh                       # 2 threads, 64 tokens, median of 3
#   tools/bench/grammar_vs_llamacpp.sh --threads 1 --n 32 --reps 1
#   tools/bench/grammar_vs_llamacpp.sh --small --reps 1      # 1-layer, dim-256 models: a quick check
#
# Options: --threads 2, --n 64 (generated tokens; the grammar may end a reply sooner), --reps 3,
# --type Q8_0, --small, --peer-dir DIR (an installed llama.cpp peer; default:
# tools/peers/llamacpp/install.sh), --out DIR (default build/bench), --attnd BIN (default
# build/attnd). Models are written once by make_model.py under ${XDG_CACHE_HOME:-~/.cache}/attnd/bench.
# With random weights the model never writes JSON by itself: nearly every constrained step is a
# rejected token and a full vocabulary mask (the worst case for both engines). Run it on a quiet
# machine; the load average is printed per row.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh

threads=2 n=64 reps=3 type=Q8_0 small="" peer="" out=build/bench attnd=build/attnd
bench_options '2,21' 'threads n reps type peer-dir=peer out attnd' 'small' "$@"
vocabs=tests/data/tokenizers # the committed vocabularies (a fresh clone has them)
py=$(bench_numpy_python) || exit 1
[ -x "$attnd" ] && [ -f build/libattnd_engine.a ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j"$(nproc)" >/dev/null; }
mkdir -p "$out"
work=$(mktemp -d)
srv_pid=""
cleanup() { [ -z "$srv_pid" ] || kill "$srv_pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# the peer: an installed node-llama-cpp with this tree's scripts next to it
if [ -z "$peer" ]; then
    peer=$(tools/peers/llamacpp/install.sh) || { echo "grammar_vs_llamacpp.sh: could not install the llama.cpp peer" >&2; exit 1; }
fi
mkdir -p "$work/peer"
ln -s "$(cd "$peer" && pwd)/node_modules" "$work/peer/node_modules"
cp tools/peers/llamacpp/peer.mjs tools/peers/llamacpp/grammar.mjs "$work/peer/"
[ -f "$peer/package.json" ] && cp "$peer/package.json" "$work/peer/"

# the grammar, as attnd converts the schema
cc -O2 -Iinclude -Iserver/api tools/bench/bench_grammar.c server/api/json_schema.c build/libattnd_engine.a \
   -ljansson -lutf8proc -lm -lpthread -fopenmp -o "$work/bench_grammar"
"$work/bench_grammar" --gbnf >"$work/schema.gbnf"
schema=$("$work/bench_grammar" --schema)

cache=${XDG_CACHE_HOME:-$HOME/.cache}/attnd/bench
mkdir -p "$cache"
shape=() tag=tinyllama
[ -z "$small" ] || shape=(--layers 1 --dim 256 --ffn 512 --heads 4 --kv-heads 2) tag=small
prompt="Here is the person record as JSON:"
med() { sort -g | awk '{a[NR] = $1} END {print NR ? a[int((NR + 1) / 2)] : 0}'; }
load() { cut -d' ' -f1 /proc/loadavg; }

res=$out/grammar.tsv
printf 'vocab\tattnd_free\tattnd_grammar\tllamacpp_free\tllamacpp_grammar\tload_before\tload_after\n' >"$res"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $threads threads; attnd $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for voc in llama-spm qwen2-bpe; do
    m=$cache/grammar-$tag-$voc-$type.gguf
    if [ ! -s "$m" ]; then
        echo "grammar_vs_llamacpp.sh: writing $m ..." >&2
        "$py" tools/bench/make_model.py --type "$type" "${shape[@]}" --tokenizer "$vocabs/$voc.gguf" "$m.tmp" && mv "$m.tmp" "$m"
    fi
    eos=$("$py" -c '
import struct, sys
sys.path.insert(0, "tools/bench")
from make_model import tokenizer_records
for r in tokenizer_records(sys.argv[1])[0]:
    k = struct.unpack_from("<Q", r)[0]
    if r[8:8 + k] == b"tokenizer.ggml.eos_token_id":
        print(struct.unpack_from("<I", r, 12 + k)[0])
' "$m")
    bench_serve "$work/srv.log" "$attnd" --host 127.0.0.1 --port 0 --model "$m" --threads "$threads"
    srv_pid=$BENCH_PID port=$BENCH_PORT
    attnd_run() { # extra JSON members -> tokens/s
        curl -s "http://127.0.0.1:$port/completion" -d "{\"prompt\": \"$prompt\", \"n_predict\": $n, \"temperature\": 0, $1}" |
            "$py" -c 'import json, sys; print(json.load(sys.stdin)["timings"]["predicted_per_second"])'
    }
    peer_run() { node "$work/peer/grammar.mjs" --model "$m" --prompt "$prompt" --n "$n" --threads "$threads" "$@" |
                 "$py" -c 'import json, sys; print(json.load(sys.stdin)["decode_tok_per_s"] or 0)'; }
    l0=$(load)
    attnd_run '"logit_bias": {"'"$eos"'": -100}' >/dev/null # warm-up
    af=$(for _ in $(seq "$reps"); do attnd_run '"logit_bias": {"'"$eos"'": -100}'; done | med)
    ag=$(for _ in $(seq "$reps"); do attnd_run "\"json_schema\": $schema"; done | med)
    kill "$srv_pid"; wait "$srv_pid" 2>/dev/null || true; srv_pid=""
    lf=$(for _ in $(seq "$reps"); do peer_run; done | med)
    lg=$(for _ in $(seq "$reps"); do peer_run --grammar "$work/schema.gbnf"; done | med)
    l1=$(load)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$voc" "$af" "$ag" "$lf" "$lg" "$l0" "$l1" >>"$res"
done

echo
echo "decode tokens/s, greedy, $n tokens, median of $reps ($tag shape, $type; constrained = the JSON-schema grammar)"
awk -F'\t' 'NR > 1 { printf "%-10s attnd %7.1f -> %7.1f (%.2fx)   llama.cpp %7.1f -> %7.1f (%.2fx)   attnd/llama.cpp constrained %.2fx   (load %s -> %s)\n",
    $1, $2, $3, ($2 > 0 ? $3 / $2 : 0), $4, $5, ($4 > 0 ? $5 / $4 : 0), ($5 > 0 ? $3 / $5 : 0), $6, $7 }' "$res"
echo "table: $res"
