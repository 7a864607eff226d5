// playground.mjs — the web playground (GET /) in headless Chromium, driven by puppeteer-core:
//   node playground.mjs NODE_MODULES_DIR CHROMIUM BASE_URL SCREENSHOT.png [KEYED_BASE_URL API_KEY]
// Loads the page, generates, checks the output, the probability shading, the heatmap (drawn, not
// blank), the layer and head pickers, the head thumbnails, hovering a token, chat mode, and — on
// a second server that needs a key — the key prompt. Fails on any console error and on any
// request that would leave the machine (every request is intercepted; only the server's own
// origin is allowed). Keeps a screenshot of the page after a generation.
import { createRequire } from "node:module";
import assert from "node:assert/strict";

const [modules, chromium, base, shot, keyedBase, apiKey] = process.argv.slice(2);
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

await page.evaluate(() => window.scrollTo(0, 0));
await page.screenshot({ path: shot, fullPage: true });
ok(`screenshot kept: ${shot}`);

// chat mode: the user's turn and the model's answer join the conversation
await page.click("#tab-chat");
await page.type('[data-testid="prompt"]', "What is the state of the Union?");
await page.click('[data-testid="generate"]');
await page.waitForFunction(() => document.querySelectorAll("#chatlog .msg").length === 2, { timeout: 60000 });
ok("chat mode keeps the conversation");

if (keyedBase) {
  const p2 = await open(keyedBase + "/");
  await p2.waitForSelector("#keybox", { visible: true });
  await p2.type("#apikey", apiKey);
  await p2.click("#savekey");
  await p2.waitForFunction(() => document.getElementById("model").textContent.includes("attnd-sotu"));
  ok("a server with an API key: the page asks for it, then works");
}

await browser.close();
if (problems.length) {
  console.error(problems.join("\n"));
  process.exit(1);
}
ok("no console errors, no request left the machine");
