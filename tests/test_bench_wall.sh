#!/usr/bin/env bash
# test_bench_wall.sh — `attnd bench` measures the wall in the same run and says what decode and
# prefill make of it: the probe's GB/s is positive and finite; decode's bytes per token are the
# model's tensor bytes (stories260K ties its head to the embedding table, so all of them: 4 bytes
# per parameter as `attnd info` counts them) plus `attnd info`'s KV bytes per token times the
# average position read; the printed GB/s and shares are those ratios, in the text and the JSON.
set -u
BIN=${ATTND_BINARY:?ATTND_BINARY not set}
MODEL=${ATTND_DATA_DIR:?ATTND_DATA_DIR not set}/models/stories260K.gguf
source "$(dirname "$0")/check_lib.sh"
command -v python3 >/dev/null || { echo "python3 missing"; exit 77; }

out=$("$BIN" bench --model "$MODEL" --no-peer --no-growth --reps 2 --prompt-len 16 --n 8 --probe-mib 16 --json 2>&1)
check "bench with the probe runs" "$?" 0
json=$(tail -1 <<<"$out")
# field EXPR [ARG]: EXPR over the JSON line as d (and ARG as sys.argv[3])
field() { python3 -c 'import json, sys; d = json.loads(sys.argv[2]); print(eval(sys.argv[1]))' "$1" "$json" "${2:-}"; }

check "the probe's GB/s is positive and finite on 1 and n threads" \
    "$(field 'all(0 < d[k] < float("inf") for k in ("probe_gbs", "probe_gbs_1"))')" True

info=$("$BIN" info --model "$MODEL")
params=$(sed -n 's/^parameters: *\([0-9]*\) .*/\1/p' <<<"$info")
kv=$(sed -n 's/^KV cache: *\([0-9]*\) bytes\/token f16.*/\1/p' <<<"$info")
# decode runs from position 16 to 16 + 8: on average 16 + 8 / 2 = 20 positions of KV read
check "decode bytes = the F32 tensors (4 x $params) + $kv KV bytes x 20 positions" \
    "$(field 'int(d["decode_bytes"])')" "$((4 * params + kv * 20))"
check "decode GB/s = decode tok/s x bytes per token" \
    "$(field 'abs(d["attnd_decode_gbs"] - d["attnd_decode"] * d["decode_bytes"] / 1e9) <= 1e-3 * d["attnd_decode_gbs"]')" True
check "the decode share is decode GB/s over the probe's GB/s at the same thread count" \
    "$(field 'abs(d["attnd_decode_share"] - d["attnd_decode_gbs"] / d["probe_gbs"]) <= 1e-4 * d["attnd_decode_share"]')" True
line=$(grep -o '^decode GB/s: attnd [0-9.]* = [0-9.]* %' <<<"$out")
check "the printed line says the same GB/s and share (to its 2 and 1 decimals)" \
    "$(field 'abs(float(sys.argv[3].split()[3]) - d["attnd_decode_gbs"]) <= 0.006 and abs(float(sys.argv[3].split()[5]) - 100 * d["attnd_decode_share"]) <= 0.06' "$line")" True
check "the prefill share is ops/s over the path's peak" \
    "$(field 'd["peak_gops"] == 0 or abs(d["attnd_prefill_share"] - d["attnd_prefill"] * d["prefill_ops"] / 1e9 / d["peak_gops"]) <= 1e-3 * d["attnd_prefill_share"]')" True
check "the kernel path of the peak is named" "$(field 'bool(d["peak_path"])')" True

# --no-probe: the shares are left out, the rest stays
out=$("$BIN" bench --model "$MODEL" --no-peer --no-growth --no-probe --reps 1 --prompt-len 16 --n 8 2>&1)
check "--no-probe prints no bandwidth line" "$(grep -c '^read bandwidth' <<<"$out")" 0
check "--no-probe keeps the tokens/s line" "$(grep -c '^attnd  *[0-9.]*  *[0-9.]*$' <<<"$out")" 1
"$BIN" bench --model "$MODEL" --probe-mib 0 >/dev/null 2>&1
check "--probe-mib 0 is a usage error" "$?" 2
exit $fail
