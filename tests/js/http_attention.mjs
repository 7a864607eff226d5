// http_attention.mjs — POST /v1/attention on a live server (started by test_http_attention.sh
// with the shipped model and an F32 KV cache):
//   node http_attention.mjs BASE_URL MODEL.gguf ATTN_REFERENCE CHECK_SCRIPT TMPDIR
// Weights against the float64 reference (whole rows, generation, top_k, a session's reuse),
// the response shape, and the bad asks (400 naming the field).
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import assert from "node:assert/strict";

const [base, model, refBin, check, tmp] = process.argv.slice(2);
let n = 0;

async function post(path, body) {
  const res = await fetch(base + path, { method: "POST", headers: { "Content-Type": "application/json" },
                                         body: JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
}
// The response against attn_reference for its own token ids (rows causal, summing to 1, 1e-3).
// With weights "norm", against the reference's norm-weighted rows.
function againstReference(name, resp) {
  const ids = resp.tokens.map((t) => t.id).join(",");
  const respPath = `${tmp}/${name}.json`, refPath = `${tmp}/${name}.ref.json`;
  writeFileSync(respPath, JSON.stringify(resp));
  const args = resp.weights === "norm" ? [model, ids, "norm"] : [model, ids];
  writeFileSync(refPath, execFileSync(refBin, args, { maxBuffer: 1 << 28 }));
  console.log(`${name}: ` + execFileSync("node", [check, respPath, refPath, "1e-3"]).toString().trim());
}
function ok(msg) { n++; console.log(`ok ${n}: ${msg}`); }

const prompt = "We the people of the United States, in order to form a more perfect union";

// every layer and head of the prompt
let r = await post("/v1/attention", { prompt });
assert.equal(r.status, 200, JSON.stringify(r.json));
assert.equal(r.json.object, "attention");
assert.equal(r.json.model, "attnd-sotu");
assert.equal(r.json.attention.length, r.json.n_layer * r.json.n_head);
assert.equal(r.json.first_row, 0);
assert.equal(r.json.attention[0].weights.length, r.json.tokens.length);
assert.equal(r.json.tokens[0].text, "<s>");
againstReference("all", r.json);
ok("whole rows of every layer and head equal the float64 reference");

// the same through /attention with token ids, two layers, one head
const ids = r.json.tokens.map((t) => t.id);
r = await post("/attention", { prompt: ids, layers: [5, 2], heads: [3] });
assert.equal(r.status, 200, JSON.stringify(r.json));
assert.deepEqual(r.json.attention.map((a) => [a.layer, a.head]), [[5, 3], [2, 3]]);
assert.deepEqual(r.json.tokens.map((t) => t.id), ids);
againstReference("ids", r.json);
ok("token-id prompt, layers in the order asked, /attention alias");

// generation: the generated tokens join the positions; every token but the last has a row
r = await post("/v1/attention", { prompt, max_tokens: 6, temperature: 0, layers: [1] });
assert.equal(r.status, 200, JSON.stringify(r.json));
assert.equal(r.json.usage.completion_tokens, 6);
assert.equal(r.json.tokens.length, r.json.n_prompt + 6);
assert.equal(r.json.attention[0].weights.length, r.json.tokens.length - 1);
const greedy = await post("/v1/completions", { prompt, max_tokens: 6, temperature: 0 });
assert.equal(r.json.text, greedy.json.choices[0].text, "the attention job generates what a completion does");
againstReference("gen", r.json);
ok("max_tokens > 0 generates as a completion does and adds the generated rows");

// norm-weighted rows of a generation (the value norms of each new position as it is reached),
// and the logit lens: the last layer's most probable token is what greedy decoding picks next
r = await post("/v1/attention", { prompt, max_tokens: 5, temperature: 0, weights: "norm", logit_lens: 3 });
assert.equal(r.status, 200, JSON.stringify(r.json));
assert.equal(r.json.weights, "norm");
againstReference("norm", r.json);
const last = r.json.logit_lens.find((l) => l.layer === r.json.n_layer - 1);
assert.equal(r.json.logit_lens.length, r.json.n_layer);
for (let p = r.json.n_prompt - 1; p < r.json.tokens.length - 1; p++)
  assert.equal(last.top[p][0][0], r.json.tokens[p + 1].id, `position ${p}: lens top-1 is the greedy next token`);
r = await post("/v1/attention", { prompt, weights: "value" });
assert.equal(r.status, 400);
assert.equal(r.json.error.param, "weights");
r = await post("/v1/attention", { prompt, logit_lens: 1 << 20 });
assert.equal(r.status, 400);
assert.equal(r.json.error.param, "logit_lens");
ok("weights: norm equals the float64 reference; the last layer's lens predicts the greedy token");

// top_k: [position, weight] pairs of the largest weights
r = await post("/v1/attention", { prompt, top_k: 3, layers: [0, 4] });
assert.equal(r.status, 200, JSON.stringify(r.json));
for (const a of r.json.attention) a.weights.forEach((row, i) => assert.equal(row.length, Math.min(i + 1, 3)));
againstReference("topk", r.json);
ok("top_k keeps the k largest weights of each row, heaviest first");

// chat messages go through the template
r = await post("/v1/attention", { messages: [{ role: "user", content: "Hello" }], layers: [0], heads: [0] });
assert.equal(r.status, 200, JSON.stringify(r.json));
assert.ok(r.json.tokens.map((t) => t.text).join("").includes("Hello"));
ok("messages are rendered with the chat template");

// a session reuses its KV: rows start after the cached prefix, and still match the reference
await post("/v1/sessions", { id: "attn-1" });
r = await post("/v1/attention", { session_id: "attn-1", prompt: "We the people", max_tokens: 4, temperature: 0, layers: [3] });
assert.equal(r.status, 200, JSON.stringify(r.json));
assert.equal(r.json.first_row, 0);
r = await post("/v1/attention", { session_id: "attn-1", prompt: "We the people" + r.json.text + " and so on", layers: [3] });
assert.equal(r.status, 200, JSON.stringify(r.json));
assert.ok(r.json.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(r.json.usage));
assert.equal(r.json.first_row, r.json.usage.prompt_tokens_details.cached_tokens);
assert.equal(r.json.attention[0].weights.length, r.json.tokens.length - r.json.first_row);
againstReference("session", r.json);
ok("a session's cached positions are reused and have no rows; the rest match the reference");

// bad asks: 400 naming the field
const bad = [
  [{ prompt, layers: [6] }, "layers", /0\.\.5/],
  [{ prompt, layers: [1, 1] }, "layers", /twice/],
  [{ prompt, heads: [4] }, "heads", /0\.\.3/],
  [{ prompt, heads: "all" }, "heads", /list/],
  [{ prompt, layers: [] }, "layers", /non-empty/],
  [{ prompt, top_k: -1 }, "top_k", /non-negative/],
  [{ prompt, stream: true }, "stream", /stream/],
  [{ layers: [0] }, "prompt", /required/],
  [{ prompt: [99999] }, "prompt", /token id/],
  [{ prompt, max_tokens: 100000 }, "max_tokens", /max_tokens/],
];
for (const [body, param, re] of bad) {
  const b = await post("/v1/attention", body);
  assert.equal(b.status, 400, `${JSON.stringify(body)} -> ${b.status}`);
  assert.equal(b.json.error.param, param, `${JSON.stringify(body)}: ${JSON.stringify(b.json)}`);
  assert.match(b.json.error.message, re);
}
ok("bad asks are 400 with the field named");

// the server still answers completions afterwards
const after = await post("/v1/completions", { prompt: "We", max_tokens: 2, temperature: 0 });
assert.equal(after.status, 200);
ok("the server keeps serving");
