// serve_load.mjs — issue 12's serving targets against a running `attnd serve` (serve_load.sh
// starts it with no tuning flags and measures `attnd generate` for the baseline).
//   node serve_load.mjs BASE_URL GENERATE_TOK_PER_S [--tokens 128] [--streams 8] [--long 1500]
// Prints, with the targets next to them:
//   1. one stream's decode tokens/s against `attnd generate --threads 2` (target >= 0.9x);
//   2. 8 concurrent streams' aggregate tokens/s against one stream (target >= 5x), from the first
//      token of any to the last of any, and in the window where all 8 are generating;
//   3. while a LONG-token prompt prefills beside two streams: their p99 token gap against their
//      quiet median gap (target <= 5x), and that prompt's time to first token against its
//      prefill time alone (target <= 1.5x).
// A benchmark, not a test: it prints numbers and ratios and never fails on speed.
const args = process.argv.slice(2);
const BASE = args[0], GEN_TPS = Number(args[1]);
const opt = (name, d) => { const i = args.indexOf('--' + name); return i > 0 ? Number(args[i + 1]) : d; };
const TOKENS = opt('tokens', 128), STREAMS = opt('streams', 8);
const BAN = { 1: -100, 2: -100 }; // no BOS/EOS: every request generates exactly max_tokens

// One streamed completion; returns the arrival time (ms) of every chunk carrying text, and the
// request's start.
async function streamTimes(body) {
  const t0 = performance.now();
  const r = await fetch(BASE + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true, logit_bias: BAN, temperature: 0 }) });
  if (r.status !== 200) throw new Error(`stream: HTTP ${r.status} ${await r.text()}`);
  const times = [];
  let tail = '';
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    const now = performance.now();
    tail += dec.decode(chunk, { stream: true });
    const blocks = tail.split('\n\n');
    tail = blocks.pop();
    for (const b of blocks) if (b.startsWith('data: {') && /"text":"[^"]/.test(b)) times.push(now);
  }
  return { t0, times };
}

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const gaps = (ts) => ts.slice(1).map((t, i) => t - ts[i]);
const tps = (runs) => { // aggregate decode tokens/s from first to last token over all streams
  const first = Math.min(...runs.map((r) => r.times[0])), last = Math.max(...runs.map((r) => r.times.at(-1)));
  return runs.reduce((n, r) => n + r.times.length - 1, 0) / ((last - first) / 1000);
};
// tokens/s while every stream is generating: from the last stream's first token to the first
// stream's last (the window above also holds the other prompts' prefill and the ragged ends)
const tpsSteady = (runs) => {
  const from = Math.max(...runs.map((r) => r.times[0])), to = Math.min(...runs.map((r) => r.times.at(-1)));
  const n = runs.reduce((k, r) => k + r.times.filter((t) => t > from && t <= to).length, 0);
  return to > from ? n / ((to - from) / 1000) : NaN;
};
const fmt = (x, d = 2) => x.toFixed(d);
// a counter of GET /metrics (Prometheus text)
const metric = async (name) => {
  const text = await (await fetch(BASE + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return line ? Number(line.split(' ')[1]) : NaN;
};

async function main() {
  const models = await (await fetch(BASE + '/v1/models')).json();
  const ctx = models.data[0].context_length;
  const LONG = Math.min(opt('long', 1500), ctx - 8), TOK = Math.min(TOKENS, ctx - 16), BUSY = Math.min(4 * TOK, ctx - 16);
  await streamTimes({ prompt: 'Warm up', max_tokens: 8 });

  const one = await streamTimes({ prompt: 'The nation', max_tokens: TOK });
  const tps1 = tps([one]);
  console.log(`1. one stream: ${fmt(tps1, 1)} tok/s; attnd generate --threads 2: ${fmt(GEN_TPS, 1)} tok/s;` +
              ` ratio ${fmt(tps1 / GEN_TPS)} (target >= 0.9)`);

  const steps0 = await metric('attnd_engine_steps_total'), gen0 = await metric('attnd_generated_tokens_total');
  const many = await Promise.all(Array.from({ length: STREAMS }, (_, i) =>
    streamTimes({ prompt: `Stream ${i} of the nation`, max_tokens: TOK })));
  const tpsN = tps(many);
  const perStep = ((await metric('attnd_generated_tokens_total')) - gen0) / ((await metric('attnd_engine_steps_total')) - steps0);
  console.log(`2. ${STREAMS} streams: ${fmt(tpsN, 1)} tok/s together; ratio to one stream ${fmt(tpsN / tps1)} (target >= 5);` +
              ` ${fmt(perStep, 1)} tokens per engine step`);
  const steady = tpsSteady(many);
  console.log(`   while all ${STREAMS} generate (their prompts read): ${fmt(steady, 1)} tok/s, ${fmt(steady / tps1)}x one stream`);

  // the long prompt alone: its prefill time is its time to first token on an idle server
  const ids = (salt) => Array.from({ length: LONG }, (_, i) => 3 + ((i * 7 + salt) % 3000));
  const solo = await streamTimes({ prompt: ids(1), max_tokens: 1 });
  const soloMs = solo.times[0] - solo.t0;
  // two streams decoding; the long prompt arrives once they are well under way
  const streams = [0, 1].map((i) => streamTimes({ prompt: `Busy ${i}`, max_tokens: BUSY }));
  await new Promise((res) => setTimeout(res, 20 * 1000 / tps1));
  const mixed = await streamTimes({ prompt: ids(2), max_tokens: 1 });
  const busy = await Promise.all(streams);
  const ttft = mixed.times[0] - mixed.t0;
  const inWindow = [], quiet = [];
  for (const b of busy)
    gaps(b.times).forEach((g, i) => (b.times[i + 1] >= mixed.t0 && b.times[i] <= mixed.times[0] ? inWindow : quiet).push(g));
  const med = pct(quiet, 0.5), p99 = inWindow.length ? pct(inWindow, 0.99) : NaN;
  console.log(`3. ${LONG}-token prompt beside 2 streams: their quiet median gap ${fmt(med, 1)} ms, p99 gap while it` +
              ` prefilled ${fmt(p99, 1)} ms; ratio ${fmt(p99 / med)} (target <= 5)`);
  console.log(`   its time to first token ${fmt(ttft, 0)} ms, alone ${fmt(soloMs, 0)} ms; ratio ${fmt(ttft / soloMs)} (target <= 1.5)`);
  if (LONG < 1500) console.log(`   (the model's context is ${ctx} tokens, so the long prompt is ${LONG}, not 1500)`);
}

main().catch((e) => { console.error(e.message); process.exit(1); });
