// attention_check.mjs — checks an attention response (POST /v1/attention or `attnd attention
// --json`) against the float64 reference printed by attn_reference:
//   node attention_check.mjs RESPONSE.json REFERENCE.json [max_abs_diff]
// Every row must be causal (row of position p: p + 1 weights, or min(p + 1, k) [position, weight]
// pairs heaviest first), whole rows must sum to 1, and every weight must equal the reference's
// within max_abs_diff (default 1e-3). With top_k, the kept positions must be the reference's k
// largest (up to near-ties). Prints the largest difference; exits 1 on the first failure.
import { readFileSync } from "node:fs";

const [respPath, refPath, tolArg] = process.argv.slice(2);
const resp = JSON.parse(readFileSync(respPath, "utf8"));
const ref = JSON.parse(readFileSync(refPath, "utf8"));
const tol = tolArg ? Number(tolArg) : 1e-3;

function fail(msg) {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
}

if (!Array.isArray(resp.tokens) || !Array.isArray(resp.attention)) fail("no tokens or attention array");
if (!Number.isInteger(resp.first_row) || !Number.isInteger(resp.n_prompt)) fail("first_row/n_prompt missing");
let worst = 0;
for (const a of resp.attention) {
  const refRows = ref.attention[a.layer]?.[a.head];
  if (!refRows) fail(`layer ${a.layer} head ${a.head} not in the reference`);
  a.weights.forEach((row, i) => {
    const pos = resp.first_row + i;
    const want = refRows[pos];
    if (!want) fail(`no reference row for position ${pos}`);
    const pairs = Array.isArray(row[0]);
    if (!pairs) {
      if (row.length !== pos + 1) fail(`L${a.layer}H${a.head} row ${pos}: ${row.length} weights, want ${pos + 1}`);
      const sum = row.reduce((s, w) => s + w, 0);
      if (Math.abs(sum - 1) > 1e-4) fail(`L${a.layer}H${a.head} row ${pos} sums to ${sum}`);
      row.forEach((w, j) => (worst = Math.max(worst, Math.abs(w - want[j]))));
    } else {
      const k = row.length;
      if (k > pos + 1) fail(`row ${pos}: ${k} pairs for ${pos + 1} positions`);
      row.forEach(([j, w], n) => {
        if (!(j >= 0 && j <= pos)) fail(`row ${pos}: position ${j} is not causal`);
        if (n && row[n - 1][1] < w) fail(`row ${pos}: pairs not heaviest first`);
        worst = Math.max(worst, Math.abs(w - want[j]));
      });
      const sorted = [...want].sort((x, y) => y - x);
      const kth = sorted[k - 1], next = sorted[k] ?? -1;
      if (kth - next > 2 * tol) {
        const kept = new Set(row.map(([j]) => j));
        want.forEach((w, j) => {
          if (w >= kth - tol && w > next + tol && !kept.has(j)) fail(`row ${pos}: position ${j} (${w}) left out`);
        });
      }
    }
  });
}
if (worst > tol) fail(`max |weight - float64 reference| = ${worst} > ${tol}`);
console.log(`ok: ${resp.attention.length} heads, rows from ${resp.first_row}, max |diff| vs float64 = ${worst.toExponential(2)}`);
