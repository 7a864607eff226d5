#!/usr/bin/env bash
# test_http_attention_hybrid.sh — POST /v1/attention on a hybrid model (tiny_model's qwen35: layers
# 0-2 Gated DeltaNet, 32 value heads; layer 3 gated attention, 16 heads): both kinds of layers in
# one answer, the DeltaNet rows marked as signed effective weights (engine/attn_capture.c computes
# them; tests/test_attn_capture.c checks their values against float64), the attention rows softmax
# rows as before; "norm" weights on a DeltaNet layer and out-of-range heads are 400s naming the
# field, and ablation still is (GET /v1/heads of a hybrid model: tests/test_head_roles.c).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
"$ATTND_BUILD_DIR/tiny_model" qwen35 "$TMP/q35.gguf" || fail "tiny_model qwen35"
# a cap above the first asks (48 heads x 10 weights = 480) and below a 32-token DeltaNet row set
start_server hy --model "$TMP/q35.gguf" --threads 1 --kv-f32 --attention-max-weights 500
url="http://127.0.0.1:$hy_PORT/v1/attention"

body=$(curl -s "$url" -d '{"prompt": [260, 270], "layers": [2, 3], "max_tokens": 2}')
python3 - "$body" <<'PY' || fail "both kinds of layers: $body"
import json, sys
b = json.loads(sys.argv[1])
assert b["n_value_heads"] == 32 and b["full_attention_interval"] == 4, b
dn = [e for e in b["attention"] if e["layer"] == 2]
at = [e for e in b["attention"] if e["layer"] == 3]
assert [e["head"] for e in dn] == list(range(32)), [e["head"] for e in dn]
assert [e["head"] for e in at] == list(range(16)), [e["head"] for e in at]
rows = 3  # 2 prompt tokens and the first generated one (the last is never fed back)
neg = 0
for e in dn:
    assert e["kind"] == "deltanet" and e["effective"] is True and e["from"] == 0, e
    assert len(e["weights"]) == rows
    for p, r in enumerate(e["weights"]):
        assert len(r) == p + 1, (p, r)
        neg += sum(w < 0 for w in r)
assert neg > 0, "no negative effective weight"
for e in at:
    assert e["kind"] == "attention" and "effective" not in e, e
    for p, r in enumerate(e["weights"]):
        assert len(r) == p + 1 and all(w >= 0 for w in r) and abs(sum(r) - 1) < 1e-4, (p, r)
PY
ok "a hybrid model answers with signed DeltaNet rows and softmax attention rows"

body=$(curl -s "$url" -d '{"prompt": [260, 270, 280, 290], "layers": [0], "heads": [5], "top_k": 2}')
python3 - "$body" <<'PY' || fail "top_k on a DeltaNet layer: $body"
import json, sys
b = json.loads(sys.argv[1])
(e,) = b["attention"]
assert e["kind"] == "deltanet" and e["head"] == 5, e
for p, r in enumerate(e["weights"]):
    assert len(r) == min(p + 1, 2), r
    assert all(isinstance(x, list) and 0 <= x[0] <= p for x in r), r
    assert [abs(x[1]) for x in r] == sorted((abs(x[1]) for x in r), reverse=True), r
PY
ok "top_k on a DeltaNet layer keeps the largest |w|"

check_field() { # $1 body, $2 what: a 400 naming the field
    local b
    b=$(curl -s -w ' %{http_code}' "$url" -d "$1")
    grep -q "\"param\":\"$2\"" <<< "$b" && grep -q ' 400$' <<< "$b" || fail "$2: $b"
}
check_field '{"prompt": [260, 270], "layers": [2], "weights": "norm"}' weights
check_field '{"prompt": [260, 270], "heads": [20]}' heads
check_field '{"prompt": [260, 270], "ablate": [{"layer": 3, "head": 0}]}' ablate
check_field '{"prompt": [260, 270], "measure": "ablation"}' measure
ok "norm weights on a DeltaNet layer, heads beyond a selected layer's, ablation and the sweep are 400s naming the field"
# the cap counts a DeltaNet layer's rows whole, also with top_k (32 rows: 528 weights made, 32 sent)
long=$(seq -s, 260 291)
check_field "{\"prompt\": [$long], \"layers\": [0], \"heads\": [0], \"top_k\": 1}" prompt
b=$(curl -s "$url" -d "{\"prompt\": [$long], \"layers\": [0], \"heads\": [0], \"top_k\": 1}")
grep -q "528 effective weights" <<< "$b" || fail "the DeltaNet cap message: $b"
code=$(curl -s -o /dev/null -w '%{http_code}' "$url" -d "{\"prompt\": [$long], \"layers\": [3], \"heads\": [0], \"top_k\": 1}")
[ "$code" = 200 ] || fail "an attention layer's top_k under the cap: HTTP $code"
ok "attention_max_weights counts a DeltaNet layer's rows whole, also with top_k"
stop_server hy || fail "server exit status"
