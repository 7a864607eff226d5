// playground.mjs — the web playground (GET /) in headless Chromium, driven by puppeteer-core:
//   node playground.mjs NODE_MODULES_DIR CHROMIUM BASE_URL SCREENSHOT.png [KEYED_BASE_URL API_KEY [ENCODER_BASE_URL
//        [MULTI_BASE_URL [HYBRID_BASE_URL]]]]
// Loads the page, generates, checks the output, the probability shading, the heatmap (drawn, not
// blank), the layer and head pickers, the head thumbnails and their role labels, the raw / norm
// toggle, a selected token's logit lens and ablation grid (a click regenerates with that head
// removed, next to the original), branching, hovering a token, chat mode, and — on
// a second server that needs a key — the key prompt, and on an encoder's server (a bert that only
// embeds) Inspect: two inputs side by side, rows drawn whole (a token's later keys coloured, the
// other input's cells hatched), hovering lights the token's whole input, on a server of two
// models the model picker (names and states; every request names the model picked), and on a
// hybrid model's server (tiny qwen35) a Gated DeltaNet layer's signed rows on the diverging scale
// (a negative weight's cell red), its value heads in the picker. Fails on any console error and on any
// request that would leave the machine (every request is intercepted; only the server's own
// origin is allowed). Keeps a screenshot of the page after a generation.
import { createRequire } from "node:module";
import assert from "node:assert/strict";

const [modules, chromium, base, shot, keyedBase, apiKey, encoderBase, multiBase, hybridBase] = process.argv.slice(2);
const require = createRequire(modules + "/");
const puppeteer = require("puppeteer-core");

const browser = await puppeteer.launch({
  executablePath: chromium, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
const problems = [];
let n = 0;
function ok(msg) { n++; console.log(`ok ${n}: ${msg}`); }

async function open(url) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1360, height: 1100, deviceScaleFactor: 1 });
  const origin = new URL(url).origin;
  await page.setRequestInterception(true);
  page.on("request", (req) => {
    const u = req.url();
    if (u.startsWith(origin + "/") || u.startsWith("data:")) return req.continue();
    problems.push(`request left the server: ${u}`);
    req.abort();
  });
  page.on("console", (m) => {
    // a 401 the page expects (it then asks for the key) is logged by Chromium as a resource error
    if (m.type() === "error" && !/401/.test(m.text())) problems.push(`console error: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  await page.goto(url, { waitUntil: "networkidle0" });
  return page;
}
const text = (page, sel) => page.$eval(sel, (e) => e.textContent);
async function setValue(page, sel, v) {
  await page.$eval(sel, (e, v) => { e.value = v; e.dispatchEvent(new Event("change")); }, v);
}
// Non-white pixels of the heatmap canvas (a drawn map has many).
const inked = (page) => page.$eval('[data-testid="attention"] canvas', (c) => {
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let k = 0;
  for (let i = 0; i < d.length; i += 4) if (d[i] < 200 || d[i + 1] < 200) k++;
  return { k, w: c.width, h: c.height };
});

const page = await open(base + "/");
await page.waitForFunction(() => document.getElementById("model").textContent.includes("attnd-sotu"));
ok("the page loads and names the model");
assert.equal(await page.$eval('[data-testid="model-pick"]', (e) => e.hidden), true, "one model: no picker");

// the sampling fields start from the server's own defaults (the same seed gives curl's text)
const defaults = await page.evaluate(async () => (await (await fetch("/v1/models")).json()).data[0].meta.defaults);
for (const k of ["temperature", "top_p", "top_k", "min_p", "repeat_penalty"]) {
  const v = await page.$eval("#" + k, (e) => Number(e.value));
  assert.equal(v, defaults[k], `${k}: the page shows ${v}, the server's default is ${defaults[k]}`);
}
ok(`sampling fields show the server's defaults (${JSON.stringify(defaults)})`);

await page.$eval('[data-testid="prompt"]', (e) => (e.value = ""));
await page.type('[data-testid="prompt"]', "We the people of the United States, in order to form");
await setValue(page, "#max_tokens", "20");
await setValue(page, "#temperature", "0");
await page.click('[data-testid="generate"]');
await page.waitForFunction(() => /tokens · layer/.test(document.getElementById("attnstatus").textContent),
                           { timeout: 60000 });
const out = await text(page, '[data-testid="output"]');
assert.ok(out.startsWith("We the people") && out.length > 60, `output: ${out}`);
const shaded = await page.$$eval('[data-testid="output"] .tok', (s) => s.filter((e) => e.style.background).length);
assert.ok(shaded >= 10, `only ${shaded} tokens shaded by probability`);
ok(`generated text streamed, ${shaded} tokens shaded by probability`);

let px = await inked(page);
assert.ok(px.w > 200 && px.h > 200 && px.k > 2000, `heatmap looks blank: ${JSON.stringify(px)}`);
assert.equal(await page.$$eval('[data-testid="layer"] option', (o) => o.length), 6);
assert.equal(await page.$$eval('[data-testid="head"] option', (o) => o.length), 5); // mean + 4 heads
assert.equal(await page.$$eval("#thumbs canvas", (c) => c.length), 4);
ok(`heatmap drawn (${px.w}x${px.h}, ${px.k} inked pixels), pickers and a thumbnail per head`);

await page.select('[data-testid="layer"]', "3");
await page.waitForFunction(() => /layer 3/.test(document.getElementById("attnstatus").textContent));
await page.select('[data-testid="head"]', "2");
px = await inked(page);
assert.ok(px.k > 2000, "heatmap blank after changing layer and head");
const cap = await page.$$eval("#thumbs figure.on figcaption", (f) => f.map((e) => e.textContent));
assert.deepEqual(cap, ["layer 3 · head 2"]);
ok("layer and head pickers redraw the map for layer 3, head 2");

// hovering a token lights up the tokens it attends to
const strip = await page.$$("#strip .tok");
assert.ok(strip.length > 20);
await strip[12].hover();
const lit = await page.$$eval("#strip .tok", (s) => s.filter((e) => e.style.background).length);
assert.equal(lit, 13, "token 12 should shade itself and the 12 before it");
ok("hovering a token shades the earlier tokens it attends to");

// hovering a cell of the map names both tokens, the weight, the layer and the head
const cell = await page.$eval('[data-testid="attention"] canvas', (c) => {
  const b = c.getBoundingClientRect();
  return { x: b.left + b.width - 6, y: b.top + b.height - 6 }; // the last row's last column: itself
});
await page.mouse.move(cell.x, cell.y);
const tipText = await text(page, "#tip");
assert.match(tipText, /^token ‘.+’ → token ‘.+’: weight [01]\.\d{3} \(layer 3, head 2\)$/, `tooltip: ${tipText}`);
ok(`the map's tooltip reads: ${tipText}`);

// head-role labels (GET /v1/heads) under the thumbnails: layer 3 head 3 is a local head
await page.waitForFunction(() => [...document.querySelectorAll("#thumbs .roles")].some((e) => e.textContent), { timeout: 30000 });
const roles = await page.$$eval("#thumbs figure", (f) => f.map((e) => e.querySelector(".roles").textContent));
const heads = await page.evaluate(async () => (await (await fetch("/v1/heads")).json()).heads.filter((h) => h.layer === 3));
assert.deepEqual(roles, heads.map((h) => h.labels.join(", ")), `thumbnail labels ${JSON.stringify(roles)}`);
ok(`head-role labels on the thumbnails: ${JSON.stringify(roles)}`);

// the raw / norm toggle asks for norm-weighted rows and redraws
await page.select('[data-testid="weights"]', "norm");
await page.waitForFunction(() => /· norm$/.test(document.getElementById("attnstatus").textContent), { timeout: 30000 });
px = await inked(page);
assert.ok(px.k > 2000, "heatmap blank with norm weights");
await page.select('[data-testid="weights"]', "attention");
await page.waitForFunction(() => /heads$/.test(document.getElementById("attnstatus").textContent), { timeout: 30000 });
ok("the raw / norm toggle redraws the map from norm-weighted rows and back");

// a selected token: its logit lens, the ablation grid, a click regenerates side by side, a branch
await (await page.$$("#strip .tok"))[8].click();
await page.waitForFunction(() => document.querySelectorAll('[data-testid="ablation-grid"] td[data-layer]').length === 24,
                           { timeout: 60000 });
const lensRows = await page.$$eval('[data-testid="lens"] tr', (r) => r.length);
assert.equal(lensRows, 7, "the lens table: a header and a row per layer");
const sel8 = await page.evaluate(() => ({ tok: document.querySelectorAll("#strip .tok")[8].textContent,
                                           status: document.getElementById("selstatus").textContent }));
assert.match(sel8.status, /^token 8 .* p = \d+\.\d% · 25 sequences in \d+ ms$/, sel8.status);
const worst = await page.$$eval('[data-testid="ablation-grid"] td[data-layer]', (c) =>
  c.map((e) => ({ l: e.dataset.layer, h: e.dataset.head, d: Number(e.textContent) })).sort((a, b) => a.d - b.d)[0]);
await page.click(`[data-testid="ablation-grid"] td[data-layer="${worst.l}"][data-head="${worst.h}"]`);
await page.waitForFunction(() => document.querySelector('[data-testid="compare"] div[data-done]'), { timeout: 60000 });
const panes = await page.$$eval('[data-testid="compare"] div', (d) => d.map((e) => e.lastChild.textContent));
assert.equal(panes.length, 2);
assert.equal(panes[0], out.slice("We the people of the United States, in order to form".length), "the original pane");
assert.ok(panes[1].length > 0, "the ablated pane is empty");
ok(`token 8 (‘${sel8.tok}’): lens of 6 layers, 24 ablation cells; removing layer ${worst.l} head ${worst.h} ` +
   `(${worst.d}) regenerates side by side: ${JSON.stringify(panes[1].slice(0, 40))}`);
await page.click('[data-testid="branch"]');
const branched = await page.$eval('[data-testid="prompt"]', (e) => e.value);
const upTo8 = await page.$$eval("#strip .tok", (s) => s.slice(1, 9).map((e) => e.textContent).join("").replace(/^ /, ""));
assert.equal(branched, upTo8, "Branch here puts the text up to the token into the prompt");
ok(`branch from token 8: the prompt is now ${JSON.stringify(branched)}`);

// with a session: Branch here forks it at the token (POST /v1/sessions/{id}/fork) and the next
// Generate continues the branch, reusing the forked KV
await page.click('[data-testid="use-session"]');
await page.$eval('[data-testid="prompt"]', (e) => (e.value = "We the people of the United States, in order to form"));
await page.click('[data-testid="generate"]');
await page.waitForFunction(() => /session sess-\S+, 0 cached/.test(document.getElementById("genstatus").textContent),
                           { timeout: 60000 });
await page.waitForFunction(() => /tokens · layer/.test(document.getElementById("attnstatus").textContent), { timeout: 60000 });
await (await page.$$("#strip .tok"))[8].click();
await page.waitForFunction(() => document.querySelectorAll('[data-testid="ablation-grid"] td[data-layer]').length === 24 &&
                           /sequences/.test(document.getElementById("selstatus").textContent), { timeout: 60000 });
await page.click('[data-testid="branch"]');
await page.waitForFunction(() => /^branch sess-\S+ of sess-\S+ at 9 tokens \(9 with KV\)$/.test(document.getElementById("genstatus").textContent),
                           { timeout: 30000 });
const forkMsg = await text(page, "#genstatus");
await page.click('[data-testid="generate"]');
await page.waitForFunction(() => /, \d+ cached$/.test(document.getElementById("genstatus").textContent), { timeout: 60000 });
const after = await text(page, "#genstatus");
const reused = Number(after.match(/, (\d+) cached$/)[1]);
assert.ok(reused >= 8, `the branch's turn reused ${reused} tokens: ${after}`);
const nSess = await page.evaluate(async () => (await (await fetch("/v1/sessions")).json()).data.length);
assert.ok(nSess >= 2, `${nSess} sessions: the trunk and the branch`);
await page.click('[data-testid="use-session"]');
await page.waitForFunction(() => /tokens · layer/.test(document.getElementById("attnstatus").textContent), { timeout: 60000 });
assert.equal(await page.$$eval('[data-testid="ablation-grid"] td', (c) => c.length), 0, "the grid of the old text stays");
ok(`with a session: ${forkMsg}; the branch's Generate reused ${reused} cached tokens`);
await (await page.$$("#strip .tok"))[12].click(); // for the screenshot: a selected token with its lens and grid
await page.waitForFunction(() => /sequences/.test(document.getElementById("selstatus").textContent), { timeout: 60000 });
const w2 = await page.$$eval('[data-testid="ablation-grid"] td[data-layer]', (c) =>
  c.map((e) => ({ l: e.dataset.layer, h: e.dataset.head, d: Number(e.textContent) })).sort((a, b) => a.d - b.d)[0]);
await page.click(`[data-testid="ablation-grid"] td[data-layer="${w2.l}"][data-head="${w2.h}"]`);
await page.waitForFunction(() => document.querySelector('[data-testid="compare"] div[data-done]'), { timeout: 60000 });

await page.evaluate(() => window.scrollTo(0, 0));
await page.screenshot({ path: shot, fullPage: true });
ok(`screenshot kept: ${shot}`);

// a 200-token map: it fits its box, and its labels stay readable (>= 9 px, thinned out)
const long = Array.from({ length: 60 }, (_, i) => ["We the people", "of the United States", "in order to form"][i % 3]).join(", ");
await page.$eval('[data-testid="prompt"]', (e, v) => (e.value = v), long);
await setValue(page, "#max_tokens", "8");
await page.click('[data-testid="generate"]');
await page.waitForFunction(() => /^\d+ tokens · layer/.test(document.getElementById("attnstatus").textContent) &&
                           Number(document.getElementById("attnstatus").textContent.split(" ")[0]) >= 200,
                           { timeout: 60000 });
const big = await page.$eval('[data-testid="attention"]', (box) => {
  const c = box.querySelector("canvas");
  return { n: Number(document.getElementById("attnstatus").textContent.split(" ")[0]), px: Number(c.dataset.labelPx),
           every: Number(c.dataset.labelEvery), cw: c.getBoundingClientRect().width, bw: box.clientWidth };
});
assert.ok(big.px >= 9, `labels at ${big.px} px`);
assert.ok(big.cw <= big.bw, `the map (${big.cw} px) is wider than its box (${big.bw} px)`);
assert.ok(big.every > 1, "at 200 tokens the labels should thin out");
const sel = await page.$eval('[data-testid="head"]', (e) => {
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = getComputedStyle(e).font;
  return { need: Math.max(...[...e.options].map((o) => ctx.measureText(o.text).width)), have: e.clientWidth };
});
assert.ok(sel.have >= sel.need + 16, `the head selector (${sel.have} px) cuts its longest option (${Math.round(sel.need)} px)`);
await page.evaluate(() => window.scrollTo(0, 0));
const shot200 = shot.replace(/\.png$/, "-200.png");
await page.screenshot({ path: shot200, fullPage: true });
ok(`${big.n} tokens: the map fits (${Math.round(big.cw)} of ${big.bw} px), labels ${big.px} px, one every ${big.every}; ${shot200}`);

// chat mode: the user's turn and the model's answer join the conversation, the reply shown once
await page.click("#tab-chat");
await page.type('[data-testid="prompt"]', "What is the state of the Union?");
await page.click('[data-testid="generate"]');
await page.waitForFunction(() => document.querySelectorAll("#chatlog .msg").length === 2, { timeout: 60000 });
await page.waitForFunction(() => !document.getElementById("generate").disabled, { timeout: 60000 });
const chatView = await page.evaluate(() => ({
  reply: document.querySelectorAll("#chatlog .msg")[1].textContent.replace(/^assistant/, ""),
  shaded: document.querySelectorAll("#chatlog .msg")[1].querySelectorAll(".tok").length,
  outputShown: document.getElementById("output").offsetParent !== null,
}));
assert.ok(chatView.reply.trim().length > 0, "empty reply");
assert.ok(chatView.shaded > 0, "the reply bubble is not shaded by probability");
assert.equal(chatView.outputShown, false, "in chat the reply must not also appear under Output");
const seen = await page.evaluate((r) => document.querySelector("section .card").innerText.split(r).length - 1,
                                 chatView.reply.trim());
assert.equal(seen, 1, `the reply appears ${seen} times on the page`);
ok("chat mode keeps the conversation and shows the reply once, shaded");

if (keyedBase) {
  const p2 = await open(keyedBase + "/");
  await p2.waitForSelector("#keybox", { visible: true });
  await p2.type("#apikey", apiKey);
  await p2.click("#savekey");
  await p2.waitForFunction(() => document.getElementById("model").textContent.includes("attnd-sotu"));
  ok("a server with an API key: the page asks for it, then works");
}

if (encoderBase) {
  const p3 = await open(encoderBase + "/");
  await p3.waitForFunction(() => document.getElementById("generate").textContent === "Inspect");
  assert.equal(await p3.$eval("#tab-chat", (e) => e.style.display), "none");
  await p3.$eval('[data-testid="prompt"]', (e) => (e.value = "Once upon a time\na little cat"));
  await p3.click('[data-testid="generate"]');
  await p3.waitForFunction(() => /both ways, 2 inputs/.test(document.getElementById("attnstatus").textContent),
                           { timeout: 30000 });
  // row 0 at its input's last key (after it: masked under a causal mask) is that weight's colour;
  // row 0 over the other input is hatched grey
  const enc = await p3.evaluate(() => {
    const c = document.querySelector('[data-testid="attention"] canvas'), g = state.geom, a = state.attn;
    const dpr = window.devicePixelRatio || 1, ctx = c.getContext("2d");
    const at = (p, j) => [...ctx.getImageData(Math.floor((g.lw + (j + 0.5) * g.cell) * dpr),
                                             Math.floor((g.lw + (p + 0.5) * g.cell) * dpr), 1, 1).data].slice(0, 3);
    const j = a.inputs[0].n_tokens - 1, want = heat(row(0, state.head)[j]).match(/\d+/g).map(Number);
    const other = new Set();
    for (let y = 0; y < a.inputs[0].n_tokens * g.cell * dpr; y++) // rows of input 0
      other.add(ctx.getImageData(Math.floor((g.lw + a.inputs[1].first * g.cell) * dpr) + 1,
                                 Math.floor(g.lw * dpr) + y, 1, 1).data.slice(0, 3).join(","));
    return { got: at(0, j), want, other: [...other], brk: document.querySelectorAll("#strip .tok.brk").length,
             n0: a.inputs[0].n_tokens, causal: a.causal };
  });
  assert.equal(enc.causal, false);
  assert.deepEqual(enc.got, enc.want, `row 0, key ${enc.n0 - 1}: drawn ${enc.got}, its weight's colour ${enc.want}`);
  const grey = (c) => { const [r, g, b] = c.split(",").map(Number); return r >= 180 && r <= 240 && Math.abs(r - g) < 12 && Math.abs(g - b) < 16; };
  assert.ok(enc.other.length >= 2 && enc.other.every(grey),
            `the other input's cells should be hatched grey: ${JSON.stringify(enc.other)}`);
  assert.equal(enc.brk, 1, "the strip marks where the second input starts");
  await (await p3.$$("#strip .tok"))[0].hover();
  const lit0 = await p3.$$eval("#strip .tok", (s) => s.filter((e) => e.style.background).length);
  assert.equal(lit0, enc.n0, `token 0 should light its whole input (${enc.n0} tokens), lit ${lit0}`);
  await (await p3.$$("#strip .tok"))[1].click();
  await p3.waitForFunction(() => /An encoder/.test(document.getElementById("selstatus").textContent));
  await p3.screenshot({ path: shot.replace(/\.png$/, "-encoder.png"), fullPage: true });
  ok(`an encoder: Inspect draws whole rows (row 0 sees ${enc.n0} tokens), the other input hatched, hover lights the input`);
}

if (multiBase) {
  // two models: the picker lists both with their states; what the page asks names the one picked
  const p4 = await open(multiBase + "/");
  const asked = [];
  p4.on("request", (q) => asked.push({ url: q.url(), body: q.postData() || "" }));
  await p4.waitForFunction(() => document.querySelectorAll('[data-testid="model-pick"] option').length === 2);
  const names = await p4.$$eval('[data-testid="model-pick"] option', (o) => o.map((e) => e.textContent));
  assert.ok(/^sotu-a · /.test(names[0]) && /^sotu-b · /.test(names[1]), `the picker lists ${names}`);
  await p4.select('[data-testid="model-pick"]', "sotu-b");
  await p4.waitForFunction(() => /sotu-b · loaded/.test(document.querySelector('[data-testid="model-pick"]').textContent),
                           { timeout: 60000 });
  await p4.click('[data-testid="use-session"]');
  await setValue(p4, "#max_tokens", "3");
  await p4.click('[data-testid="generate"]');
  await p4.waitForFunction(() => /^\d+ tokens · layer/.test(document.getElementById("attnstatus").textContent),
                           { timeout: 60000 });
  const named = (path) => asked.filter((q) => new URL(q.url).pathname === path);
  const of = (q) => q.body ? JSON.parse(q.body).model : new URL(q.url).searchParams.get("model");
  for (const path of ["/v1/heads", "/v1/sessions", "/v1/completions", "/v1/attention"]) {
    const qs = named(path);
    assert.ok(qs.length > 0, `no ${path} request`);
    assert.ok(qs.every((q) => of(q) === "sotu-b"), `${path} should name sotu-b: ${qs.map(of)}`);
  }
  const sess = await p4.evaluate(async () => (await (await fetch("/v1/sessions?model=sotu-b")).json()).data.length);
  assert.equal(sess, 1, "the page's session is sotu-b's");
  await p4.screenshot({ path: shot.replace(/\.png$/, "-models.png"), clip: { x: 0, y: 0, width: 1360, height: 420 } });
  ok("two models: the picker lists them with their states; heads, session, completion and attention name the one picked");
}

if (hybridBase) {
  const p5 = await open(hybridBase + "/");
  await p5.$eval('[data-testid="prompt"]', (e) => (e.value = "abcabd"));
  await setValue(p5, "#max_tokens", "4");
  await setValue(p5, "#temperature", "0");
  await p5.click('[data-testid="generate"]');
  await p5.waitForFunction(() => /tokens · layer 0/.test(document.getElementById("attnstatus").textContent),
                           { timeout: 60000 });
  assert.match(await text(p5, "#attnstatus"), /Gated DeltaNet: signed effective weights/);
  assert.equal(await p5.$$eval('[data-testid="head"] option', (o) => o.length), 33); // mean + 32 value heads
  assert.equal(await p5.$$eval("#thumbs canvas", (c) => c.length), 32);
  // the value head with the most negative weight (relative to its map's largest |w|), picked: that
  // weight's cell is drawn in its colour on the diverging scale, red
  const head = await p5.evaluate(() => {
    const a = state.attn, n = a.first_row + a.attention[0].weights.length;
    let best = { h: 0, rel: 0 };
    for (const hd of a.attention) {
      const top = mapTop(hd.head);
      for (let p = a.first_row; p < n; p++)
        for (const w of row(p, hd.head)) if (-w / top > best.rel) best = { h: hd.head, rel: -w / top };
    }
    return best.h;
  });
  await p5.select('[data-testid="head"]', String(head));
  const neg = await p5.evaluate(() => {
    const c = document.querySelector('[data-testid="attention"] canvas'), g = state.geom, a = state.attn;
    const dpr = window.devicePixelRatio || 1, top = mapTop(state.head);
    let best = null;
    for (let p = a.first_row; p < g.n; p++)
      row(p, state.head).forEach((w, j) => { if (!best || w < best.w) best = { p, j, w }; });
    const px = [...c.getContext("2d").getImageData(Math.floor((g.lw + (best.j + 0.5) * g.cell) * dpr),
                                                   Math.floor((g.lw + (best.p + 0.5) * g.cell) * dpr), 1, 1).data];
    return { ...best, rel: -best.w / top, got: px.slice(0, 3), want: heat(best.w, top).match(/\d+/g).map(Number) };
  });
  assert.ok(neg.w < 0 && neg.rel > 0.1, `no clearly negative weight in head ${head}'s map: ${JSON.stringify(neg)}`);
  assert.deepEqual(neg.got, neg.want, `cell (${neg.p}, ${neg.j}): drawn ${neg.got}, its weight's colour ${neg.want}`);
  assert.ok(neg.got[0] > neg.got[2] + 20, `a negative weight should be red: ${neg.got}`);
  assert.equal(await p5.$eval("#dn-legend", (e) => e.style.display), "block");
  await p5.screenshot({ path: shot.replace(/\.png$/, "-hybrid.png"), fullPage: true });
  await p5.select('[data-testid="layer"]', "3");
  await p5.waitForFunction(() => /layer 3/.test(document.getElementById("attnstatus").textContent));
  assert.doesNotMatch(await text(p5, "#attnstatus"), /DeltaNet/);
  assert.equal(await p5.$eval("#dn-legend", (e) => e.style.display), "none");
  assert.equal(await p5.$$eval('[data-testid="head"] option', (o) => o.length), 17); // mean + 16 heads
  ok(`a hybrid model: layer 0's signed rows on the diverging scale (head ${head}: w = ${neg.w.toPrecision(3)} red), ` +
     "32 value heads; layer 3 softmax rows, 16 heads");
}

await browser.close();
if (problems.length) {
  console.error(problems.join("\n"));
  process.exit(1);
}
ok("no console errors, no request left the machine");
