// anthropic_client.mjs — the official `@anthropic-ai/sdk` client against attnd's /v1/messages,
// with only baseURL changed (the key goes as the SDK sends it, x-api-key); every tool input is
// checked against its input_schema with a real JSON Schema validator (ajv).
//   node anthropic_client.mjs INSTALL_DIR BASE_URL API_KEY [wide]
// wide: only the tool and thinking checks, every tool offered at once, for a model with a long
// context and a tool-capable Jinja template (make_tiny's chat model under Qwen3's template).
// Exits 1 on any failure.
import { createRequire } from 'node:module';

const [installDir, baseURL, apiKey, mode] = process.argv.slice(2);
const wide = mode === 'wide';
const require = createRequire(installDir + '/package.json');
const SDK = require('@anthropic-ai/sdk');
const Anthropic = SDK.default || SDK.Anthropic || SDK;
const AjvPkg = require('ajv');
const Ajv = AjvPkg.default || AjvPkg;
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });
const ajv = new Ajv({ allErrors: true, strict: false });

let failures = 0;
function check(cond, name, detail) {
  const tag = wide ? '[wide] ' : '';
  if (cond) console.log(`ok - ${tag}${name}`);
  else { console.log(`not ok - ${tag}${name}: ${JSON.stringify(detail).slice(0, 800)}`); failures++; }
}
const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

const model = 'attnd';
const weather = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1, maxLength: 16 },
    unit: { enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'unit', 'days'],
  additionalProperties: false,
};
const tools = [
  { name: 'get_weather', description: 'Weather forecast for a city', input_schema: weather },
  { name: 'get_time', description: 'Local time', input_schema: { type: 'object', properties: { tz: { type: 'string', maxLength: 8 } }, required: ['tz'] } },
];
const validators = Object.fromEntries(tools.map((t) => [t.name, ajv.compile(t.input_schema)]));
const validUse = (b) => b?.type === 'tool_use' && typeof b.id === 'string' && validators[b.name]?.(b.input);
const ask = [{ role: 'user', content: 'What is the weather in Paris this week?' }];
// the default model's context is 512 tokens, and the tools' description is in the prompt
const offered = wide ? tools : [tools[0]];

async function basics() {
  const params = { model, max_tokens: 24, temperature: 0, system: 'You are terse.', messages: [{ role: 'user', content: 'Say hello.' }] };
  const m = await client.messages.create(params);
  check(m.type === 'message' && m.role === 'assistant' && m.id.startsWith('msg_') && m.content[0]?.type === 'text' &&
        textOf(m).length > 0 && ['end_turn', 'max_tokens'].includes(m.stop_reason) && m.usage.input_tokens > 0 &&
        m.usage.output_tokens > 0 && typeof m.usage.cache_read_input_tokens === 'number', 'messages.create', m);

  // the SDK's own stream helper: text events, and the final message it accumulates
  let texts = '', events = 0;
  const stream = client.messages.stream(params);
  stream.on('text', (t) => { texts += t; });
  stream.on('streamEvent', () => { events++; });
  const f = await stream.finalMessage();
  check(textOf(f) === textOf(m) && texts === textOf(m) && f.stop_reason === m.stop_reason &&
        f.usage.output_tokens === m.usage.output_tokens && events >= 5,
        'messages.stream: the streamed text and final message equal the whole answer at temperature 0', { texts, whole: textOf(m), f });

  // the raw events in their documented order
  const raw = await client.messages.create({ ...params, stream: true });
  const types = [];
  for await (const ev of raw) types.push(ev.type);
  const order = ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'];
  check(order.every((t) => types.includes(t)) && types[0] === 'message_start' && types.at(-1) === 'message_stop' &&
        types.at(-2) === 'message_delta' && types.indexOf('content_block_start') < types.indexOf('content_block_stop'),
        'a raw stream has the documented event order', types);

  const counted = await client.messages.countTokens({ model, system: params.system, messages: params.messages });
  check(counted.input_tokens === m.usage.input_tokens + m.usage.cache_read_input_tokens,
        'count_tokens equals the prompt tokens the answer reports (computed + read from the cache)', { counted, usage: m.usage });

  const cut = await client.messages.create({ model, max_tokens: 5, temperature: 0, messages: [{ role: 'user', content: 'Tell me a long story.' }] });
  check(cut.stop_reason === 'max_tokens' && cut.usage.output_tokens === 5, 'max_tokens cuts the reply: stop_reason max_tokens', cut);

  // the SDK itself streams a request this large (it would refuse to wait for a whole one)
  const big = await client.messages.stream({ model, max_tokens: 32000, temperature: 0, messages: [{ role: 'user', content: 'Hi.' }] }).finalMessage();
  check(big.type === 'message' && big.stop_reason !== null, 'max_tokens 32000 (what agent CLIs send) is clamped, not refused', big);
}

async function stopSequences() {
  const params = { model, max_tokens: 40, temperature: 0, messages: [{ role: 'user', content: 'Tell me about the states.' }] };
  const free = textOf(await client.messages.create(params));
  // the first stretch of 3 non-blank characters, from the 5th on, not met earlier in the reply
  let word;
  for (let i = 4; i + 3 <= free.length && !word; i++) {
    const w = free.slice(i, i + 3);
    if (w.trim().length === 3 && !free.slice(0, i + 2).includes(w)) word = w;
  }
  const m = await client.messages.create({ ...params, stop_sequences: ['zzzqqq', word] });
  check(word && m.stop_reason === 'stop_sequence' && m.stop_sequence === word && free.startsWith(textOf(m)) &&
        !textOf(m).includes(word), `stop_sequences end the reply at "${word}" and name it`, { free, m });
}

async function toolUse() {
  let good = 0;
  const bad = [];
  for (let seed = 1; seed <= 6; seed++) {
    const m = await client.messages.create({ model, max_tokens: 180, temperature: 1, seed, messages: ask, tools: offered,
                                             tool_choice: { type: 'any', disable_parallel_tool_use: true } });
    const uses = m.content.filter((b) => b.type === 'tool_use');
    if (m.stop_reason === 'tool_use' && uses.length === 1 && validUse(uses[0])) good++;
    else bad.push(m);
  }
  check(good === 6, `tool_choice any: 6 of 6 tool_use blocks parse against input_schema (${good})`, bad[0]);

  const named = await client.messages.create({ model, max_tokens: 120, temperature: 1, seed: 5, messages: ask, tools,
                                               tool_choice: { type: 'tool', name: 'get_time', disable_parallel_tool_use: true } });
  const use = named.content.find((b) => b.type === 'tool_use');
  check(use?.name === 'get_time' && validUse(use) && named.stop_reason === 'tool_use', 'tool_choice tool calls that tool', named);

  const none = await client.messages.create({ model, max_tokens: 8, temperature: 0, messages: ask, tools, tool_choice: { type: 'none' } });
  check(none.content.every((b) => b.type === 'text') && none.stop_reason !== 'tool_use', 'tool_choice none answers in text', none);

  // parallel tool uses: this small model writes one call at a time, so a GBNF grammar (attnd's
  // extension of the body) has it write two; they become two tool_use blocks, whole and streamed
  const time = '"<tool_call>\\n{\\"name\\": \\"get_time\\", \\"arguments\\": {\\"tz\\": \\"" [A-Z]{2,4} "\\"}}\\n</tool_call>"';
  const weatherCall = '"<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"" [A-Z] [a-z]{2,8} ' +
                      '"\\", \\"unit\\": \\"celsius\\", \\"days\\": " [1-7] "}}\\n</tool_call>"';
  const two = `root ::= ${wide ? weatherCall : time} "\\n" ${time}`;
  // one small tool on the default model (its 512-token context); both, of two kinds, on a wide one
  const par = { model, max_tokens: 200, temperature: 0, messages: [{ role: 'user', content: 'Time in Paris and Tokyo?' }],
                tools: wide ? tools : [tools[1]], grammar: two };
  const pw = await client.messages.create(par);
  const pf = await client.messages.stream(par).finalMessage();
  const pu = pw.content.filter((b) => b.type === 'tool_use');
  check(pw.content.length === 2 && pu.length === 2 && pu.every(validUse) && pu[0].id !== pu[1].id && pw.stop_reason === 'tool_use' &&
        pu[0].name === (wide ? 'get_weather' : 'get_time') &&
        JSON.stringify(pf.content.map((b) => b.input)) === JSON.stringify(pw.content.map((b) => b.input)),
        'parallel tool uses: two tool_use blocks that validate, whole and streamed alike', { pw, pf });

  // streamed: the SDK joins the partial_json fragments and parses them itself
  const params = { model, max_tokens: 180, temperature: 1, seed: 11, messages: ask, tools: [tools[0]],
                   tool_choice: { type: 'any', disable_parallel_tool_use: true } };
  const whole = await client.messages.create(params);
  let json = '';
  const stream = client.messages.stream(params);
  stream.on('inputJson', (partial) => { json += partial; });
  const f = await stream.finalMessage();
  const su = f.content.find((b) => b.type === 'tool_use'), wu = whole.content.find((b) => b.type === 'tool_use');
  check(validUse(su) && JSON.stringify(su.input) === JSON.stringify(wu?.input) && JSON.stringify(JSON.parse(json)) === JSON.stringify(su.input) &&
        su.id === wu.id.replace(whole.id, f.id) && f.stop_reason === 'tool_use',
        'a streamed tool_use: its partial_json joins to the input the whole answer has', { json, f, whole });

  // the round trip: the call and its result go back, and the model answers
  const result = { role: 'user', content: [{ type: 'tool_result', tool_use_id: wu.id, content: [{ type: 'text', text: '18 C, sunny' }] }] };
  const next = await client.messages.create({ model, max_tokens: 16, temperature: 0, tools: [tools[0]],
                                              messages: [...ask, { role: 'assistant', content: whole.content }, result] });
  check(next.type === 'message' && next.content.length >= 0 && next.stop_reason !== null, 'a tool_result goes back and the model answers', next);
  const failed = await client.messages.create({ model, max_tokens: 8, temperature: 0, tools: [tools[0]],
                                                messages: [...ask, { role: 'assistant', content: whole.content },
                                                           { role: 'user', content: [{ type: 'tool_result', tool_use_id: wu.id, is_error: true, content: 'timeout' }] }] });
  check(failed.type === 'message', 'a tool_result with is_error is accepted', failed);
}

// A thinking block: a GBNF grammar (attnd's extension of the body) holds the model to a <think>
// block and an answer, as a reasoning model writes them; the block goes back as thinking.
async function thinking() {
  const params = { model, max_tokens: 60, temperature: 0, messages: [{ role: 'user', content: 'Think first.' }],
                   grammar: 'root ::= "<think>" [a-z ]{4,24} "</think>" [a-z]{2,12}' };
  const m = await client.messages.create(params);
  check(m.content.length === 2 && m.content[0].type === 'thinking' && m.content[0].thinking.length >= 4 &&
        m.content[1].type === 'text' && !m.content[1].text.includes('think'), 'a <think> block is a thinking block before the text', m);
  let thoughts = '';
  const stream = client.messages.stream(params);
  stream.on('thinking', (t) => { thoughts += t; });
  const f = await stream.finalMessage();
  check(thoughts === m.content[0].thinking && JSON.stringify(f.content) === JSON.stringify(m.content),
        'streamed thinking_delta events: the SDK accumulates the same blocks', { thoughts, f: f.content });
  const next = await client.messages.create({ model, max_tokens: 8, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 },
                                              messages: [...params.messages, { role: 'assistant', content: m.content },
                                                         { role: 'user', content: 'And?' }] });
  check(next.type === 'message', 'thinking blocks and thinking.enabled go back as a request', next);
}

async function errors() {
  const tries = [
    ['max_tokens missing', { model, messages: [{ role: 'user', content: 'x' }] }, 400, 'invalid_request_error'],
    ['an image block', { model, max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] }, 400, 'invalid_request_error'],
    ['a bad role', { model, max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }, 400, 'invalid_request_error'],
  ];
  for (const [what, body, status, type] of tries) {
    try {
      await client.messages.create(body);
      check(false, `${what}: refused`, 'accepted');
    } catch (e) {
      check(e instanceof Anthropic.APIError && e.status === status && e.error?.type === 'error' && e.error?.error?.type === type &&
            (status !== 400 || e instanceof Anthropic.BadRequestError), `${what}: ${status} ${type}`, { status: e.status, error: e.error, msg: e.message });
    }
  }
  const wrong = new Anthropic({ baseURL, apiKey: 'not-the-key', maxRetries: 0 });
  try {
    await wrong.messages.create({ model, max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
    check(false, 'a wrong x-api-key is refused', 'accepted');
  } catch (e) {
    check(e instanceof Anthropic.AuthenticationError && e.error?.error?.type === 'authentication_error', 'a wrong x-api-key: 401 authentication_error',
          { status: e.status, error: e.error });
  }
}

try {
  if (!wide) await basics();
  if (!wide) await stopSequences();
  await toolUse();
  await thinking();
  if (!wide) await errors();
} catch (e) {
  console.log(`not ok - unexpected error: ${e.stack || e}`);
  failures++;
}
console.log(failures ? `# ${failures} failed` : '# all passed');
process.exit(failures ? 1 : 0);
