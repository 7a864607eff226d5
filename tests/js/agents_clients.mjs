// agents_clients.mjs — tool calling and structured output through the official `openai` client,
// against attnd with only baseURL changed; every output is checked with a real JSON Schema
// validator (ajv). Driven by tests/test_agents_clients.sh.
//   node agents_clients.mjs INSTALL_DIR BASE_URL
import { createRequire } from 'node:module';

const [installDir, baseURL] = process.argv.slice(2);
const require = createRequire(installDir + '/package.json');
const OpenAIPkg = require('openai');
const OpenAI = OpenAIPkg.default || OpenAIPkg.OpenAI || OpenAIPkg;
const { zodResponseFormat } = require('openai/helpers/zod');
const { z } = require('zod');
const AjvPkg = require('ajv');
const Ajv = AjvPkg.default || AjvPkg;
const client = new OpenAI({ baseURL, apiKey: 'sk-test-not-checked', maxRetries: 0 });
const ajv = new Ajv({ allErrors: true, strict: false });

let failures = 0;
function check(cond, name, detail) {
  if (cond) console.log(`ok - ${name}`);
  else { console.log(`not ok - ${name}: ${JSON.stringify(detail).slice(0, 800)}`); failures++; }
}

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
  { type: 'function', function: { name: 'get_weather', description: 'Weather forecast for a city', parameters: weather } },
  { type: 'function', function: { name: 'get_time', description: 'Local time', parameters: { type: 'object', properties: { tz: { type: 'string', maxLength: 8 } }, required: ['tz'] } } },
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const messages = [{ role: 'user', content: 'What is the weather in Paris this week?' }];

function validCall(call) {
  if (!call || call.type !== 'function' || !/^call_/.test(call.id) || !validators[call.function.name]) return false;
  try { return validators[call.function.name](JSON.parse(call.function.arguments)); } catch { return false; }
}

async function forcedCalls(model) {
  let good = 0;
  const bad = [];
  for (let seed = 1; seed <= 20; seed++) {
    // one tool for the single calls: this model's context is 512 tokens, and the tools' description is in the prompt
    const r = await client.chat.completions.create({ model, messages, tools: seed > 15 ? tools : [tools[0]], tool_choice: 'required',
                                                     parallel_tool_calls: seed > 15,
                                                     temperature: 1, seed, max_tokens: 180 });
    const c = r.choices[0];
    // parallel calls may fill this 512-token model's context: then the calls that completed count
    const finished = c.finish_reason === 'tool_calls' || (seed > 15 && c.finish_reason === 'length');
    if (finished && c.message.tool_calls?.length >= 1 && c.message.tool_calls.every(validCall)) good++;
    else bad.push(c);
  }
  check(good === 20, `20 forced tool calls at temperature 1 (5 of them parallel) all parse and validate (${good})`, bad[0]);
  const named = await client.chat.completions.create({ model, messages, tools, tool_choice: { type: 'function', function: { name: 'get_time' } },
                                                      parallel_tool_calls: false, temperature: 1, seed: 5, max_tokens: 120 });
  const calls = named.choices[0].message.tool_calls || [];
  check(calls.length === 1 && calls[0].function.name === 'get_time' && validCall(calls[0]), 'a named tool_choice calls that function once', named.choices[0]);
  const none = await client.chat.completions.create({ model, messages, tools, tool_choice: 'none', temperature: 0, max_tokens: 8 });
  check(!none.choices[0].message.tool_calls && typeof none.choices[0].message.content === 'string', "tool_choice 'none' answers in text", none.choices[0]);
}

async function streamedCalls(model) {
  const body = { model, messages, tools: [tools[0]], tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed: 11, max_tokens: 150 };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    if (ch.finish_reason) finish = ch.finish_reason;
    for (const d of ch.delta.tool_calls || []) {
      calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
      if (d.id) calls[d.index].id = d.id;
      if (d.function?.name) calls[d.index].function.name += d.function.name;
      if (d.function?.arguments) calls[d.index].function.arguments += d.function.arguments;
    }
  }
  const want = whole.choices[0].message.tool_calls;
  check(finish === 'tool_calls' && calls.length === want.length && calls.every(validCall), 'streamed tool calls reassemble to valid calls', { calls, finish });
  check(calls.every((c, i) => c.function.name === want[i].function.name && c.function.arguments === want[i].function.arguments),
        'streamed tool calls equal the non-streamed answer (same seed)', { calls, want });
  // the runner the SDK ships: the result of a call goes back as a tool message
  const history = [...messages, whole.choices[0].message,
                   ...want.map((c) => ({ role: 'tool', tool_call_id: c.id, content: '{"forecast": "sunny, 22 C"}' }))];
  const after = await client.chat.completions.create({ model, messages: history, tools, tool_choice: 'none', temperature: 0, max_tokens: 16 });
  check(after.choices[0].message.role === 'assistant', 'a conversation with tool results continues', after.choices[0]);
}

const Person = z.object({
  name: z.string().max(20),
  age: z.number().int().min(0).max(120),
  address: z.object({ city: z.string().max(16), zip: z.string().regex(/^[0-9]{5}$/) }),
  tags: z.array(z.enum(['admin', 'user', 'guest'])).max(3),
  manager: z.object({ name: z.string().max(20), since: z.string().max(10) }).nullable(),
});

async function structured(model) {
  const fmt = zodResponseFormat(Person, 'person');
  const parsed = await client.chat.completions.parse({ model, messages: [{ role: 'user', content: 'Describe a person.' }], response_format: fmt,
                                                       temperature: 1, seed: 2, max_tokens: 400 });
  const p = parsed.choices[0].message.parsed;
  check(p && typeof p.name === 'string' && Person.safeParse(p).success, 'chat.completions.parse with a zod schema gives a parsed object', parsed.choices[0].message);
  const validate = ajv.compile(fmt.json_schema.schema);
  let good = 0;
  const bad = [];
  // under the sanitizers (a server ~10x slower) 30 samples of the same check instead of 100
  const rounds = process.env.ATTND_SANITIZED ? 3 : 10;
  for (let i = 0; i < rounds; i++) {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Describe a person.' }], response_format: fmt,
                                                     temperature: 1, seed: 100 + i, n: 10, max_tokens: 400 });
    for (const c of r.choices) {
      let v = null;
      try { v = JSON.parse(c.message.content); } catch { /* counted below */ }
      if (v !== null && validate(v)) good++;
      else bad.push({ content: c.message.content, finish: c.finish_reason, errors: validate.errors });
    }
  }
  check(good === rounds * 10, `${rounds * 10} outputs at temperature 1 under a nested schema parse and validate with ajv (${good})`, bad[0]);
  const obj = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'JSON please' }], response_format: { type: 'json_object' },
                                                   temperature: 1, seed: 4, max_tokens: 300 });
  let o = null;
  try { o = JSON.parse(obj.choices[0].message.content); } catch { /* checked */ }
  check(o !== null && typeof o === 'object' && !Array.isArray(o) || obj.choices[0].finish_reason === 'length', 'json_object mode gives a JSON object', obj.choices[0]);
  const bad400 = await client.chat.completions.create({ model, messages, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'number', multipleOf: 0.3 } } } })
    .then(() => null, (e) => e);
  check(bad400 && bad400.status === 400 && /multipleOf/.test(bad400.message), 'an unsupported schema keyword is a 400 naming it', bad400 && bad400.message);
}

async function responses(model) {
  const rtools = [{ type: 'function', name: 'get_weather', description: 'Weather forecast', parameters: weather }];
  const r = await client.responses.create({ model, input: 'Weather in Oslo?', tools: rtools, tool_choice: 'required', temperature: 1, seed: 3,
                                            parallel_tool_calls: false, max_output_tokens: 100 });
  const call = r.output.find((o) => o.type === 'function_call');
  let args = null;
  try { args = JSON.parse(call.arguments); } catch { /* checked */ }
  check(call && call.name === 'get_weather' && validators.get_weather(args), 'Responses with a function tool gives a valid function_call item', r.output);
  // streamed: the call is a function_call item whose arguments come in one delta once the call is
  // whole and checked (a call is what it claims or it is text), and make the final arguments
  const stream = await client.responses.create({ model, input: 'Weather in Oslo?', tools: rtools, tool_choice: 'required', temperature: 1,
                                                 seed: 3, parallel_tool_calls: false, max_output_tokens: 100, stream: true });
  let added = null, deltas = '', n = 0, done = null, final = null;
  for await (const ev of stream) {
    if (ev.type === 'response.output_item.added' && ev.item.type === 'function_call') added = ev.item;
    if (ev.type === 'response.function_call_arguments.delta') deltas += ev.delta, n++;
    if (ev.type === 'response.function_call_arguments.done') done = ev;
    // incomplete: max_output_tokens closed the call (its JSON is whole: issue 49's budget close)
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  const fcall = final?.output.find((o) => o.type === 'function_call');
  check(added && done && fcall && n === 1 && deltas === done.arguments && deltas === fcall.arguments && added.id === fcall.id &&
        added.call_id === fcall.call_id && deltas === call.arguments,
        `streamed Responses: function_call item, ${n} argument delta(s) that make the final (and non-streamed) arguments`,
        { added, deltas, done, fcall, want: call.arguments });
  // tool_choice none: the 512-token context holds the first turn and the result, not the tools' description again
  const next = await client.responses.create({ model, previous_response_id: r.id, tools: rtools, tool_choice: 'none',
                                               input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"forecast": "snow"}' }],
                                               temperature: 0, max_output_tokens: 12 });
  check(next.status && next.output.length >= 1, 'function_call_output continues the conversation', next.output);
  const s = await client.responses.create({ model, input: 'A person', text: { format: { type: 'json_schema', name: 'p', schema: weather, strict: true } },
                                            temperature: 1, max_output_tokens: 200 });
  let v = null;
  try { v = JSON.parse(s.output_text); } catch { /* checked */ }
  check(v && validators.get_weather(v), 'Responses text.format json_schema gives valid JSON', s.output_text);
}

// Reasoning on Responses: a GBNF grammar (attnd takes llama.cpp's field) holds the model to a
// <think> block and an answer. The block is a reasoning item, never in output_text; the stream
// helper's accumulated response (which needs the reasoning_text part events) matches; the items
// go back as input to a follow-up.
async function reasoning(model) {
  const params = { model, input: 'Think first.', temperature: 0, max_output_tokens: 60, store: false,
                   grammar: 'root ::= "<think>" [a-z ]{4,24} "</think>" [a-z]{2,12}' };
  const r = await client.responses.create(params);
  const rs = r.output[0], msg = r.output[1];
  check(r.output.length === 2 && rs.type === 'reasoning' && rs.content?.[0]?.type === 'reasoning_text' &&
        rs.content[0].text.length >= 4 && Array.isArray(rs.summary) && msg.type === 'message' &&
        r.output_text.length >= 2 && !r.output_text.includes('<'),
        'a <think> block is a reasoning item before the message, and not in output_text', r.output);
  const st = client.responses.stream(params);
  const types = new Set();
  let deltas = '';
  for await (const ev of st) {
    types.add(ev.type);
    if (ev.type === 'response.reasoning_text.delta') deltas += ev.delta;
  }
  const f = await st.finalResponse();
  check(types.has('response.reasoning_text.done') && deltas === rs.content[0].text && f.output.length === 2 &&
        f.output[0].type === 'reasoning' && f.output[0].content[0].text === rs.content[0].text &&
        f.output_text === r.output_text,
        'streamed reasoning: the SDK accumulates the same reasoning item and output_text', { deltas, out: f.output });
  const next = await client.responses.create({ model, input: [{ role: 'user', content: 'Think first.' }, ...r.output,
                                                              { role: 'user', content: 'And then?' }],
                                               temperature: 0, max_output_tokens: 4, store: false });
  check(next.status === 'completed' || next.status === 'incomplete', 'the reasoning item goes back as input', next.output);
}

const model = (await client.models.list()).data[0].id;
await forcedCalls(model);
await streamedCalls(model);
await structured(model);
await responses(model);
await reasoning(model);
process.exit(failures ? 1 : 0);
