// server_bench.mjs — throughput and session-reuse numbers for a running `attnd serve`.
//   node server_bench.mjs BASE_URL [--turns 10] [--streams 8] [--tokens 128]
// Prints (1) prefill time of turns 1..N of one session vs. the same conversation without
// a session (cache defeated), and (2) aggregate decode tokens/s with S concurrent streams vs 1.
// A benchmark, not a test: it prints numbers and ratios and never fails on speed.
const args = process.argv.slice(2);
const BASE = args[0];
const opt = (name, d) => { const i = args.indexOf('--' + name); return i > 0 ? Number(args[i + 1]) : d; };
const TURNS = opt('turns', 10), STREAMS = opt('streams', 8), TOKENS = opt('tokens', 128);
const BAN = { 1: -100, 2: -100 }; // no BOS/EOS: every request generates exactly max_tokens

async function post(path, body) {
  const r = await fetch(BASE + path, { method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } });
  const j = await r.json();
  if (r.status !== 200) throw new Error(`${path}: ${r.status} ${JSON.stringify(j)}`);
  return j;
}

async function sessionTurns() {
  const sid = 'bench-' + Date.now();
  await post('/v1/sessions', { id: sid });
  const withS = [], without = [];
  const msgs = [{ role: 'system', content: 'Tell a tale.' }];
  for (let t = 1; t <= TURNS; t++) {
    msgs.push({ role: 'user', content: `Q${t}: and then what?` });
    let a;
    try {
      a = await post('/v1/chat/completions', { messages: msgs, max_tokens: 8, temperature: 0, session_id: sid, logit_bias: BAN });
    } catch (e) {
      if (!/context length/.test(e.message)) throw e;
      console.log(`(stopped before turn ${t}: the conversation no longer fits the model's context)`);
      break;
    }
    // the same conversation with a unique first message, so no cached prefix beyond a few tokens
    const fresh = [{ role: 'system', content: `[${Math.random().toFixed(6)}] ` + msgs[0].content }, ...msgs.slice(1)];
    let b;
    try {
      b = await post('/v1/chat/completions', { messages: fresh, max_tokens: 8, temperature: 0, logit_bias: BAN });
    } catch (e) {
      if (!/context length/.test(e.message)) throw e;
      console.log(`(stopped at turn ${t}: the conversation no longer fits the model's context)`);
      break;
    }
    withS.push({ turn: t, prompt: a.usage.prompt_tokens, cached: a.usage.prompt_tokens_details.cached_tokens,
                 prefilled: a.timings.prompt_n, ms: a.timings.prompt_ms });
    without.push({ prefilled: b.timings.prompt_n, ms: b.timings.prompt_ms });
    msgs.push({ role: 'assistant', content: a.choices[0].message.content });
  }
  console.log(`\n== session turns 1..${withS.length}: prefill per turn (8 generated tokens each)`);
  console.log('turn  prompt_tokens  cached  prefilled  prefill_ms | no-session: prefilled  prefill_ms');
  withS.forEach((w, i) => console.log(`${String(w.turn).padStart(4)}  ${String(w.prompt).padStart(12)}  ${String(w.cached).padStart(6)}  ${String(w.prefilled).padStart(9)}  ${w.ms.toFixed(2).padStart(10)} | ${String(without[i].prefilled).padStart(20)}  ${without[i].ms.toFixed(2).padStart(10)}`));
  const last = withS.at(-1), lastNo = without.at(-1);
  console.log(`turn ${last.turn}: session prefilled ${last.prefilled} tokens in ${last.ms.toFixed(2)} ms; ` +
              `without a session ${lastNo.prefilled} tokens in ${lastNo.ms.toFixed(2)} ms (${(lastNo.ms / Math.max(last.ms, 1e-3)).toFixed(1)}x)`);
  if (withS.length > 1) console.log(`turn 2 vs turn ${last.turn} session prefill time: ${withS[1].ms.toFixed(2)} ms vs ${last.ms.toFixed(2)} ms ` +
              `(prompt grew ${withS[1].prompt} -> ${last.prompt} tokens)`);
}

async function streamTokens(prompt) {
  const r = await fetch(BASE + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: TOKENS, temperature: 0.8, seed: 1, stream: true, logit_bias: BAN,
                           stream_options: { include_usage: true } }) });
  let raw = '';
  for await (const c of r.body) raw += Buffer.from(c).toString();
  const usage = raw.split('\n\n').filter((b) => b.startsWith('data: {')).map((b) => JSON.parse(b.slice(6))).find((e) => e.usage)?.usage;
  return usage ? usage.completion_tokens : 0;
}

async function metric(name) {
  const t = await (await fetch(BASE + '/metrics')).text();
  return Number((new RegExp('^' + name + ' ([0-9.e+-]+)$', 'm').exec(t) || [])[1]);
}

// n concurrent streams; wall-clock tokens/s and engine-only tokens/s (generated tokens over the
// time the scheduler spent in decoding steps, from /metrics: no HTTP or client overhead)
async function throughput(n) {
  const g0 = await metric('attnd_generated_tokens_total'), d0 = await metric('attnd_decode_seconds_total');
  const t0 = performance.now();
  const counts = await Promise.all(Array.from({ length: n }, (_, i) => streamTokens(`Once upon a time, story ${i},`)));
  const s = (performance.now() - t0) / 1e3;
  const tok = counts.reduce((a, b) => a + b, 0);
  const g1 = await metric('attnd_generated_tokens_total'), d1 = await metric('attnd_decode_seconds_total');
  return { tok, s, rate: tok / s, engine: (g1 - g0) / Math.max(d1 - d0, 1e-9) };
}

const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
async function best(n, reps) {
  const runs = [];
  for (let i = 0; i < reps; i++) runs.push(await throughput(n));
  return { rate: median(runs.map((r) => r.rate)), engine: median(runs.map((r) => r.engine)), tok: runs[0].tok };
}

await sessionTurns();
await throughput(1); // warm-up
const one = await best(1, 3);
const many = await best(STREAMS, 3);
console.log(`\n== aggregate decode throughput (${TOKENS} tokens per stream; median of 3 runs)`);
console.log(`             wall clock (incl. prefill, HTTP, client)   engine decode steps only`);
console.log(`1 stream:   ${one.rate.toFixed(1).padStart(10)} tok/s ${''.padStart(30)} ${one.engine.toFixed(1).padStart(10)} tok/s`);
console.log(`${STREAMS} streams:  ${many.rate.toFixed(1).padStart(10)} tok/s ${''.padStart(30)} ${many.engine.toFixed(1).padStart(10)} tok/s`);
console.log(`ratio ${STREAMS} streams / 1 stream: wall clock ${(many.rate / one.rate).toFixed(2)}x, engine ${(many.engine / one.engine).toFixed(2)}x`);
