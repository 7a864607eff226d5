#!/usr/bin/env bash
# test_attention_cli.sh — `attnd attention` on the shipped model: the JSON weights (whole rows,
# with generation, top_k) equal the float64 reference within 1e-3 with an F32 KV cache, rows are
# causal and sum to 1; the SVG is a complete document with a labelled heatmap and head thumbnails;
# the text summary names tokens; bad selections exit 2 naming the flag; --experts lists a MoE
# model's routes; an encoder's rows go both ways (SVG, text), --n and --weights norm refused.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${ATTND_BINARY:?ATTND_BINARY not set}
REF=${ATTND_ATTN_REFERENCE:?ATTND_ATTN_REFERENCE not set}
MODEL=$here/../models/attnd-sotu.gguf
command -v node >/dev/null || { echo "FAIL: node is not installed (scripts/dev.sh test installs it)"; exit 1; }
TMP=$(mktemp -d /tmp/attnd-attn-cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ids_of() { node -e 'const r=JSON.parse(require("fs").readFileSync(0,"utf8")); console.log(r.tokens.map(t=>t.id).join(","))' < "$1"; }

prompt="We the people of the United States, in order to form a more perfect union"
"$BIN" attention --model "$MODEL" --kv-type f32 --prompt "$prompt" --json > "$TMP/all.json" || fail "attention --json"
"$REF" "$MODEL" "$(ids_of "$TMP/all.json")" > "$TMP/ref.json" || fail "reference"
node "$here/js/attention_check.mjs" "$TMP/all.json" "$TMP/ref.json" 1e-3 || fail "whole rows vs reference"
heads=$(node -p 'JSON.parse(require("fs").readFileSync(process.argv[1])).attention.length' "$TMP/all.json")
[ "$heads" = 24 ] || fail "default should be every layer and head (6 x 4), got $heads"

# generation: the generated tokens join the positions; every token but the last has a row
"$BIN" attention --model "$MODEL" --kv-type f32 --prompt "$prompt" --n 6 --layer 1,4 --head 2 --json > "$TMP/gen.json" ||
    fail "attention --n"
"$REF" "$MODEL" "$(ids_of "$TMP/gen.json")" > "$TMP/ref_gen.json" || fail "reference"
node "$here/js/attention_check.mjs" "$TMP/gen.json" "$TMP/ref_gen.json" 1e-3 || fail "generated rows vs reference"
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
if (r.tokens.length !== r.n_prompt + 6) throw new Error(`tokens ${r.tokens.length} for n_prompt ${r.n_prompt} + 6`);
if (r.attention.length !== 2 || r.attention[0].layer !== 1 || r.attention[1].layer !== 4 || r.attention[1].head !== 2)
  throw new Error("selection not kept in order");
if (r.attention[0].weights.length !== r.tokens.length - 1) throw new Error("rows should cover all but the last token");
' "$TMP/gen.json" || fail "generation shape"

"$BIN" attention --model "$MODEL" --kv-type f32 --prompt "$prompt" --attn-top-k 3 --layer 5 --json > "$TMP/topk.json" ||
    fail "attention --attn-top-k"
node "$here/js/attention_check.mjs" "$TMP/topk.json" "$TMP/ref.json" 1e-3 || fail "top_k vs reference"

# norm-weighted rows (--weights norm) against the float64 reference's α_ij ‖W_O^h v_j‖, normalised;
# they are not the raw weights
"$BIN" attention --model "$MODEL" --kv-type f32 --prompt "$prompt" --weights norm --json > "$TMP/norm.json" ||
    fail "attention --weights norm"
"$REF" "$MODEL" "$(ids_of "$TMP/norm.json")" norm > "$TMP/ref_norm.json" || fail "norm reference"
node "$here/js/attention_check.mjs" "$TMP/norm.json" "$TMP/ref_norm.json" 1e-3 || fail "norm rows vs reference"
node "$here/js/attention_check.mjs" "$TMP/norm.json" "$TMP/ref.json" 1e-2 2> /dev/null &&
    fail "norm rows equal the raw weights"
grep -q '"weights":"norm"' "$TMP/norm.json" || fail "the answer does not say its rows are norm-weighted"
# the logit lens: every layer, a row per position, most probable first
"$BIN" attention --model "$MODEL" --prompt "$prompt" --layer 0,5 --logit-lens 4 --json > "$TMP/lens.json" ||
    fail "attention --logit-lens"
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
if (r.logit_lens.length !== 2 || r.logit_lens[1].layer !== 5) throw new Error("lens layers");
for (const l of r.logit_lens) {
  if (l.top.length !== r.tokens.length) throw new Error("a lens row per position");
  for (const row of l.top) row.forEach(([id, p], i) => {
    if (row.length !== 4 || !(p > 0 && p <= 1) || (i && row[i - 1][1] < p)) throw new Error("lens row " + JSON.stringify(row));
  });
}' "$TMP/lens.json" || fail "logit lens shape"
"$BIN" attention --model "$MODEL" --prompt "We" --weights value 2> "$TMP/err"; rc=$?
[ $rc = 2 ] && grep -q -- '--weights' "$TMP/err" || fail "bad --weights: rc $rc $(cat "$TMP/err")"

# SVG: a whole document, a cell per visible weight with hover text, labels, a thumbnail per head
"$BIN" attention --model "$MODEL" --prompt "$prompt" --layer 3 --svg "$TMP/map.svg" || fail "attention --svg"
head -c 5 "$TMP/map.svg" | grep -q '^<svg ' || fail "SVG does not start with <svg"
tail -n 1 "$TMP/map.svg" | grep -q '^</svg>$' || fail "SVG is not closed"
grep -q 'layer 3 · mean of 4 heads' "$TMP/map.svg" || fail "SVG title"
grep -q '>people</text>\|> people</text>' "$TMP/map.svg" || fail "SVG token labels"
[ "$(grep -c '<title>' "$TMP/map.svg")" -gt 20 ] || fail "SVG hover titles"
[ "$(grep -c '>head [0-3]</text>' "$TMP/map.svg")" = 4 ] || fail "SVG thumbnails"
grep -q 'not why the model answered' "$TMP/map.svg" || fail "SVG note"
"$BIN" attention --model "$MODEL" --prompt "We" --head 1 --svg "$TMP/h.svg" || fail "--svg --head"
grep -q 'layer 0 · head 1' "$TMP/h.svg" || fail "SVG of one head"

out=$("$BIN" attention --model "$MODEL" --prompt "We the people" --layer 2) || fail "text summary"
echo "$out" | grep -q '^layer 2, mean of 4 heads:' || fail "text header: $out"
echo "$out" | grep -q "people" || fail "text rows name tokens"

# bad asks: exit 2 with the flag named
"$BIN" attention --model "$MODEL" --prompt "We" --layer 6 2> "$TMP/err"; rc=$?
[ $rc = 2 ] && grep -q -- '--layer' "$TMP/err" && grep -q '0..5' "$TMP/err" || fail "bad --layer: rc $rc $(cat "$TMP/err")"
"$BIN" attention --model "$MODEL" --prompt "We" --head 1,1 2> "$TMP/err"; rc=$?
[ $rc = 2 ] && grep -q 'twice' "$TMP/err" || fail "repeated --head: rc $rc $(cat "$TMP/err")"
"$BIN" attention --model "$MODEL" --prompt "We" --json --svg x.svg 2> /dev/null; [ $? = 2 ] || fail "--json with --svg"
# --top-k is sampling's: top-k 1 at temperature 1 generates what greedy does, whatever the seed
"$BIN" attention --model "$MODEL" --prompt "$prompt" --n 8 --layer 0 --json > "$TMP/greedy.json" || fail "greedy --n 8"
"$BIN" attention --model "$MODEL" --prompt "$prompt" --n 8 --layer 0 --temp 1 --top-k 1 --seed 7 --json \
    > "$TMP/topk1.json" || fail "sampling --top-k 1"
[ "$(ids_of "$TMP/greedy.json")" = "$(ids_of "$TMP/topk1.json")" ] || fail "--top-k 1 did not reach the sampler"
"$BIN" attention --model "$MODEL" --prompt "$prompt" --n 8 --layer 0 --temp 1 --top-k 0 --seed 7 --json \
    > "$TMP/topk0.json" || fail "sampling --top-k 0"
[ "$(ids_of "$TMP/greedy.json")" != "$(ids_of "$TMP/topk0.json")" ] || fail "temperature 1 without top-k gave greedy text"

# the SVG is as wide as what it draws, and speaks of generated tokens only when there are some
svg_width() { sed -n "1s/^<svg [^>]*width='\([0-9]*\)'.*/\1/p" "$1"; }
w=$(svg_width "$TMP/map.svg")
[ -n "$w" ] && [ "$w" -lt 800 ] || fail "SVG of a short prompt is $w px wide"
grep -q 'orange' "$TMP/map.svg" && fail "SVG without generated tokens mentions orange"
"$BIN" attention --model "$MODEL" --prompt "$prompt" --n 3 --layer 3 --svg "$TMP/gen.svg" || fail "--svg --n"
grep -q 'orange' "$TMP/gen.svg" || fail "SVG with generated tokens does not say how they are shown"
grep -q "<title>token ‘.*’ → token ‘.*’: weight [01]\.[0-9]\{3\} (layer 3, mean of heads)</title>" "$TMP/map.svg" ||
    fail "SVG hover text"

# --experts on a Mixture-of-Experts model (tiny_model's qwen3moe: 8 experts, 2 a token): each
# selected layer lists, per row, two distinct experts with weights in order that sum to 1; the
# dense shipped model is refused, naming the flag
"${ATTND_BUILD_DIR:?}/tiny_model" qwen3moe "$TMP/moe.gguf" || fail "tiny_model qwen3moe"
"$BIN" attention --model "$TMP/moe.gguf" --threads 1 --tokens 1,40,77,300 --n 2 --layer 0,1 --head 0 --experts --json \
    > "$TMP/moe.json" || fail "attention --experts"
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
const rows = r.attention[0].weights.length;
if (rows !== r.tokens.length - 1) throw new Error(`rows ${rows}`);
if (JSON.stringify(r.experts.map(e => e.layer)) !== "[0,1]") throw new Error("expert layers");
for (const e of r.experts) {
  if (e.routes.length !== rows) throw new Error(`routes ${e.routes.length} for ${rows} rows`);
  for (const rt of e.routes) {
    const ids = rt.map(x => x[0]), ws = rt.map(x => x[1]);
    if (rt.length !== 2 || ids[0] === ids[1] || ids.some(i => i < 0 || i >= 8)) throw new Error(JSON.stringify(rt));
    if (!(ws[0] >= ws[1] && ws[1] > 0 && Math.abs(ws[0] + ws[1] - 1) < 1e-5)) throw new Error(JSON.stringify(rt));
  }
}' "$TMP/moe.json" || fail "experts shape"
"$BIN" attention --model "$MODEL" --prompt "We" --experts --json 2> "$TMP/err" > /dev/null; rc=$?
[ $rc = 2 ] && grep -q -- '--experts' "$TMP/err" && grep -q 'dense' "$TMP/err" || fail "--experts on a dense model: rc $rc $(cat "$TMP/err")"
"$BIN" attention --model "$TMP/moe.gguf" --tokens 1,40 --experts 2> "$TMP/err" > /dev/null; rc=$?
[ $rc = 2 ] && grep -q -- '--json' "$TMP/err" || fail "--experts without --json: rc $rc"
# an encoder (make_tiny's bert): rows both ways; the SVG's white area is the input's whole square
# (no causal triangle), the text summary of token 0 names later tokens; --n and --weights norm
# exit 2 naming the flag
"${ATTND_BUILD_DIR:?}/make_tiny" "$TMP/bert.gguf" bert || fail "make_tiny bert"
"$BIN" attention --model "$TMP/bert.gguf" --threads 1 --tokens 1,40,77,300,90,2 --layer 1 --svg "$TMP/bert.svg" ||
    fail "attention --svg on an encoder"
grep -q "<path fill='#fff'" "$TMP/bert.svg" && fail "encoder SVG draws a causal triangle"
grep -q 'before and after it' "$TMP/bert.svg" || fail "encoder SVG does not say rows go both ways"
cells=$(grep -c "<title>token" "$TMP/bert.svg")
[ "$cells" -gt 21 ] || fail "encoder SVG has $cells weighted cells; a causal map of 6 tokens has at most 21"
"$BIN" attention --model "$TMP/bert.gguf" --threads 1 --tokens 1,40,77,300,90,2 --layer 0 --head 0 > "$TMP/bert.txt" ||
    fail "attention text on an encoder"
grep -E '^ +0 .*->.*  [1-5] ' "$TMP/bert.txt" >/dev/null || fail "token 0 of an encoder names no later token: $(cat "$TMP/bert.txt")"
for flag in "--n 2" "--weights norm"; do
    "$BIN" attention --model "$TMP/bert.gguf" --tokens 1,40 $flag 2> "$TMP/err" > /dev/null; rc=$?
    [ $rc = 2 ] && grep -q -- "${flag% *}" "$TMP/err" && grep -q 'encoder' "$TMP/err" || fail "$flag on an encoder: rc $rc $(cat "$TMP/err")"
done
echo "ok: attnd attention"
