// openai_clients.mjs — what real client libraries send beyond single completions, against attnd
// with only baseURL changed: prompt batches, n > 1, models.retrieve, OpenAI's error codes, the
// Responses API (streamed and not, stored, followed up, retrieved, deleted), LangChain's
// OpenAI.generate over three prompts. Driven by tests/test_openai_clients.sh.
//   node openai_clients.mjs PHASE INSTALL_DIR BASE_URL STATE_FILE
// PHASE "main" runs everything and writes the id of a stored response to STATE_FILE; PHASE
// "restarted" (a new server on the same state directory) continues that conversation.
import { createRequire } from 'node:module';
import fs from 'node:fs';

const [phase, installDir, baseURL, stateFile] = process.argv.slice(2);
const require = createRequire(installDir + '/package.json');
const OpenAIPkg = require('openai');
const OpenAI = OpenAIPkg.default || OpenAIPkg.OpenAI || OpenAIPkg;
const client = new OpenAI({ baseURL, apiKey: 'sk-test-not-checked', maxRetries: 0 });

let failures = 0;
function check(cond, name, detail) {
  if (cond) console.log(`ok - ${name}`);
  else { console.log(`not ok - ${name}: ${JSON.stringify(detail).slice(0, 600)}`); failures++; }
}
async function rejects(fn) {
  try { await fn(); return null; } catch (e) { return e; }
}

async function completions(model) {
  const prompts = ['The state of the union is', 'Our economy', 'I thank'];
  const batch = await client.completions.create({ model, prompt: prompts, max_tokens: 6, temperature: 0 });
  check(batch.choices.length === 3 && batch.choices.every((c, i) => c.index === i && typeof c.text === 'string'),
        'a prompt array gives one choice per prompt, in order', batch.choices);
  const single = await Promise.all(prompts.map((p) => client.completions.create({ model, prompt: p, max_tokens: 6, temperature: 0 })));
  check(single.every((s, i) => s.choices[0].text === batch.choices[i].text),
        'each batched choice equals the prompt completed alone', { batch: batch.choices.map((c) => c.text), single: single.map((s) => s.choices[0].text) });
  const sum = (k) => single.reduce((a, s) => a + s.usage[k], 0);
  check(batch.usage.prompt_tokens === sum('prompt_tokens') && batch.usage.completion_tokens === sum('completion_tokens'),
        'usage of a batch is the sum', { batch: batch.usage, want: [sum('prompt_tokens'), sum('completion_tokens')] });

  const ids = await client.completions.create({ model, prompt: [[1, 2, 3], [4, 5]], max_tokens: 3, temperature: 0 });
  check(ids.choices.length === 2 && ids.usage.prompt_tokens === 5, 'token-id prompt arrays', ids);

  const n3 = await client.completions.create({ model, prompt: 'The', max_tokens: 8, temperature: 1, seed: 7, n: 3 });
  check(n3.choices.length === 3 && n3.choices.every((c, i) => c.index === i), 'n = 3 gives three choices', n3.choices);
  check(new Set(n3.choices.map((c) => c.text)).size > 1, 'the n choices are sampled independently', n3.choices.map((c) => c.text));
  const one = await client.completions.create({ model, prompt: 'The', max_tokens: 8, temperature: 1, seed: 7, n: 1 });
  check(n3.usage.prompt_tokens === one.usage.prompt_tokens, 'usage.prompt_tokens counts the prompt once', { n3: n3.usage, one: one.usage });
  const again = await client.completions.create({ model, prompt: 'The', max_tokens: 8, temperature: 1, seed: 7, n: 3 });
  check(again.choices.every((c, i) => c.text === n3.choices[i].text), 'n choices are reproducible from the seed', again.choices);

  const texts = ['', '', '', ''];
  const s = await client.completions.create({ model, prompt: ['Our', 'We'], max_tokens: 6, temperature: 1, seed: 7, n: 2, stream: true });
  for await (const chunk of s) for (const c of chunk.choices) texts[c.index] += c.text;
  const ns = await client.completions.create({ model, prompt: ['Our', 'We'], max_tokens: 6, temperature: 1, seed: 7, n: 2 });
  check(ns.choices.length === 4 && texts.every((t, i) => t === ns.choices[i].text),
        'streamed prompts x n equal the non-streamed choices (index = prompt * n + k)', { texts, want: ns.choices.map((c) => c.text) });
}

async function chat(model) {
  const messages = [{ role: 'user', content: 'Say something.' }];
  const c = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 1, seed: 3, n: 2 });
  check(c.choices.length === 2 && c.choices[1].index === 1 && c.choices[1].message.role === 'assistant', 'chat n = 2', c.choices);
  const contents = ['', ''];
  const s = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 1, seed: 3, n: 2, stream: true,
                                                   stream_options: { include_usage: true } });
  let usage = null;
  for await (const chunk of s) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) contents[ch.index] += ch.delta?.content ?? '';
  }
  check(contents[0] === c.choices[0].message.content && contents[1] === c.choices[1].message.content &&
        usage && usage.prompt_tokens === c.usage.prompt_tokens, 'streamed chat n = 2 equals the non-streamed one', { contents, usage });

  const e = await rejects(() => client.chat.completions.create({ model, messages: [{ role: 'function', content: 'x', name: 'f' }] }));
  check(e && e.status === 400 && /developer/.test(e.message), 'a function message is refused listing the accepted roles', e && e.message);
}

async function errors(model) {
  const long = 'the union '.repeat(2000);
  const e = await rejects(() => client.completions.create({ model, prompt: long, max_tokens: 4 }));
  check(e && e.status === 400 && e.code === 'context_length_exceeded' && /\d+ tokens/.test(e.message),
        'an over-long prompt is context_length_exceeded with the numbers', e && { code: e.code, message: e.message });
  const m = await client.models.retrieve(model);
  check(m.id === model && m.object === 'model' && typeof m.owned_by === 'string', 'models.retrieve', m);
  const nf = await rejects(() => client.models.retrieve('no-such-model'));
  check(nf && nf.status === 404 && nf.code === 'model_not_found', 'an unknown model is 404 model_not_found', nf && { status: nf.status, code: nf.code });
}

async function responses(model) {
  const r = await client.responses.create({ model, input: 'The state of the union', instructions: 'Continue.', max_output_tokens: 8, temperature: 0 });
  check(r.object === 'response' && typeof r.output_text === 'string' && r.output_text.length > 0 && r.usage.output_tokens > 0 &&
        r.usage.input_tokens > 0 && ['completed', 'incomplete'].includes(r.status), 'responses.create', r);

  let text = '', types = [], final = null;
  const s = await client.responses.create({ model, input: 'The state of the union', instructions: 'Continue.', max_output_tokens: 8,
                                            temperature: 0, stream: true });
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  check(types[0] === 'response.created' && types.includes('response.output_text.delta') &&
        ['response.completed', 'response.incomplete'].includes(types[types.length - 1]), 'the Responses event sequence', types);
  check(text === r.output_text && final && final.usage.output_tokens === r.usage.output_tokens, 'streamed response equals the whole one', { text, want: r.output_text });

  const st = client.responses.stream({ model, input: 'We', max_output_tokens: 4, temperature: 0 });
  const fin = await st.finalResponse();
  check(typeof fin.output_text === 'string' && fin.output_text.length > 0, 'responses.stream().finalResponse()', fin.output_text);

  // instructions are not carried over (as in OpenAI's API): the follow-up repeats them
  const follow = await client.responses.create({ model, previous_response_id: r.id, input: 'And then?', instructions: 'Continue.',
                                                 max_output_tokens: 6, temperature: 0 });
  check(follow.previous_response_id === r.id && follow.usage.input_tokens > r.usage.input_tokens + r.usage.output_tokens &&
        follow.usage.input_tokens_details.cached_tokens >= r.usage.input_tokens,
        'a follow-up continues the stored conversation, its first turn read from the KV cache', { first: r.usage, follow: follow.usage });
  const got = await client.responses.retrieve(r.id);
  check(got.id === r.id && got.output_text === r.output_text, 'responses.retrieve', got);

  const tmp = await client.responses.create({ model, input: 'x', max_output_tokens: 2 });
  await client.responses.delete(tmp.id);
  const gone = await rejects(() => client.responses.retrieve(tmp.id));
  check(gone && gone.status === 404, 'a deleted response is gone', gone && gone.status);
  const noprev = await rejects(() => client.responses.create({ model, input: 'x', previous_response_id: 'resp_nonexistent' }));
  check(noprev && noprev.status === 404 && noprev.param === 'previous_response_id', 'an unknown previous_response_id is a 404 naming it',
        noprev && { status: noprev.status, param: noprev.param });
  const sessions = async () => (await (await fetch(baseURL + '/sessions')).json()).data.length;
  const before = await sessions();
  const tooLong = await rejects(() => client.responses.create({ model, input: 'the union '.repeat(2000) }));
  check(tooLong && tooLong.code === 'context_length_exceeded' && (await sessions()) === before,
        'a turn that cannot run is context_length_exceeded and leaves no session behind', tooLong && tooLong.code);
  const nostore = await client.responses.create({ model, input: 'x', max_output_tokens: 2, store: false });
  const notkept = await rejects(() => client.responses.retrieve(nostore.id));
  check(notkept && notkept.status === 404, 'store: false keeps nothing', notkept && notkept.status);

  for (const [field, body] of [['tools', { tools: [{ type: 'web_search' }] }],
                               ['reasoning', { reasoning: { effort: 'high' } }],
                               ['text.format', { text: { format: { type: 'yaml' } } }]]) {
    const e = await rejects(() => client.responses.create({ model, input: 'x', ...body }));
    check(e && e.status === 400 && e.param === field, `unsupported ${field} is a 400 naming it`, e && { status: e.status, param: e.param });
  }
  fs.writeFileSync(stateFile, JSON.stringify({ id: follow.id, text: follow.output_text }));
}

async function langchain(model) {
  const { OpenAI: LCOpenAI } = await import(require.resolve('@langchain/openai'));
  const llm = new LCOpenAI({ model, apiKey: 'sk-test-not-checked', temperature: 0, maxTokens: 6, configuration: { baseURL } });
  const res = await llm.generate(['The state of the union is', 'Our economy', 'I thank']);
  check(res.generations.length === 3 && res.generations.every((g) => g.length === 1 && typeof g[0].text === 'string') &&
        res.llmOutput.tokenUsage.completionTokens > 0, "LangChain OpenAI.generate on three prompts", res);
}

async function restarted(model) {
  const prev = JSON.parse(fs.readFileSync(stateFile, 'utf8'));
  const got = await client.responses.retrieve(prev.id);
  check(got.id === prev.id && got.output_text === prev.text, 'a stored response survives a restart', got);
  const next = await client.responses.create({ model, previous_response_id: prev.id, input: 'Go on.', max_output_tokens: 4, temperature: 0 });
  check(next.previous_response_id === prev.id && next.usage.input_tokens > 0, 'a follow-up after a restart', next.usage);
}

try {
  const model = (await client.models.list()).data[0].id;
  if (phase === 'main') {
    await completions(model);
    await chat(model);
    await errors(model);
    await responses(model);
    await langchain(model);
  } else {
    await restarted(model);
  }
} catch (e) {
  console.log('not ok - client threw: ' + (e.stack || e));
  failures++;
}
process.exit(failures ? 1 : 0);
