// serve_load.mjs — issue 12's serving targets against a running `attnd serve` (serve_load.sh
// starts it with no tuning flags).
//   node serve_load.mjs BASE_URL MODEL [--tokens 128] [--streams 8] [--long 1500] [--rounds 3]
// Rounds alternate, so a drift of the host's memory bandwidth (which moves one stream's speed,
// memory-bound, more than 8 streams', compute-bound) touches each measurement alike; each ratio
// is taken within its round and the median over rounds is printed, with the targets next to it:
//   1. one stream's decode tokens/s against `attnd generate --threads 2` run in the same round
//      (target >= 0.9x);
//   2. 8 concurrent streams (new prompts each round, so each is read from scratch) against one
//      stream (target >= 5x): decode tokens/s while all 8 generate, as one stream's figure is
//      counted from its first token to its last (no prompt is read inside either window); and
//      from the first token of any to the last of any, which also holds the seven other prompts'
//      prefill and the ragged ends;
//   3. while a LONG-token prompt prefills beside two streams: their p99 token gap against their
//      quiet median gap (target <= 5x), and that prompt's time to first token against its
//      prefill time alone (target <= 1.5x).
// A benchmark, not a test: it prints numbers and ratios and never fails on speed.
import { execFileSync } from 'node:child_process';

const args = process.argv.slice(2);
const BASE = args[0], MODEL = args[1];
const opt = (name, d) => { const i = args.indexOf('--' + name); return i > 0 ? Number(args[i + 1]) : d; };
const TOKENS = opt('tokens', 128), STREAMS = opt('streams', 8), ROUNDS = opt('rounds', 3);
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
const median = (xs) => pct(xs, 0.5);
// `attnd generate --threads 2` on the same model and token count: its decode tokens/s
const generateTps = (tok) => JSON.parse(execFileSync('./build/attnd', ['generate', '--model', MODEL, '--prompt',
  'The nation', '--n', String(tok), '--ignore-eos', '--threads', '2', '--json'], { stdio: ['ignore', 'pipe', 'ignore'] })).timings.decode_tok_per_s;
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

  const rows = [];
  for (let r = 1; r <= ROUNDS; r++) {
    const gen = generateTps(TOK);
    const one = tps([await streamTimes({ prompt: 'The nation', max_tokens: TOK })]);
    const steps0 = await metric('attnd_engine_steps_total'), gen0 = await metric('attnd_generated_tokens_total');
    const many = await Promise.all(Array.from({ length: STREAMS }, (_, i) =>
      streamTimes({ prompt: `Round ${r}, stream ${i} of the nation`, max_tokens: TOK })));
    const perStep = ((await metric('attnd_generated_tokens_total')) - gen0) / ((await metric('attnd_engine_steps_total')) - steps0);
    const row = { gen, one, all: tpsSteady(many), whole: tps(many), perStep };
    rows.push(row);
    console.log(`   round ${r}: generate ${fmt(gen, 1)}, one stream ${fmt(one, 1)}, ${STREAMS} streams ${fmt(row.all, 1)} while` +
                ` all generate / ${fmt(row.whole, 1)} first to last token (tok/s); ${fmt(perStep, 1)} tokens per engine step`);
  }
  const med = (f) => median(rows.map(f));
  const tps1 = med((w) => w.one);
  console.log(`1. one stream: ${fmt(tps1, 1)} tok/s; attnd generate --threads 2: ${fmt(med((w) => w.gen), 1)} tok/s;` +
              ` ratio ${fmt(med((w) => w.one / w.gen))} (target >= 0.9)`);
  console.log(`2. ${STREAMS} streams while all generate: ${fmt(med((w) => w.all), 1)} tok/s together; ratio to one stream` +
              ` ${fmt(med((w) => w.all / w.one))} (target >= 5)`);
  console.log(`   first token of any to last of any (the other prompts' prefill and the ragged ends inside):` +
              ` ${fmt(med((w) => w.whole), 1)} tok/s, ${fmt(med((w) => w.whole / w.one))}x one stream`);

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
  const mq = pct(quiet, 0.5), p99 = inWindow.length ? pct(inWindow, 0.99) : NaN;
  console.log(`3. ${LONG}-token prompt beside 2 streams: their quiet median gap ${fmt(mq, 1)} ms, p99 gap while it` +
              ` prefilled ${fmt(p99, 1)} ms; ratio ${fmt(p99 / mq)} (target <= 5)`);
  console.log(`   its time to first token ${fmt(ttft, 0)} ms, alone ${fmt(soloMs, 0)} ms; ratio ${fmt(ttft / soloMs)} (target <= 1.5)`);
  if (LONG < opt('long', 1500)) console.log(`   (the model's context is ${ctx} tokens, so the long prompt is ${LONG}, not ${opt('long', 1500)})`);
}

main().catch((e) => { console.error(e.message); process.exit(1); });
