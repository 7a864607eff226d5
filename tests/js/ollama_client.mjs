// ollama_client.mjs — the official `ollama` npm client against attnd's /api, with only the host
// changed; structured outputs are checked with a real JSON Schema validator (ajv).
//   node ollama_client.mjs INSTALL_DIR HOST [wide|fim]
// wide: only the tool and think checks, for a model with a long context and a tool-capable Jinja
// template (make_tiny's chat model under Qwen3's template): the tools and the tool turns are
// in the prompt the template writes, and think switches its thinking block.
// fim: only generate with a suffix (fill-in-the-middle), for a model with FIM tokens (make_tiny's
// fim model), as code-completion plugins call it.
// Exits 1 on any failure.
import { createRequire } from 'node:module';

const [installDir, host, mode] = process.argv.slice(2);
const wide = mode === 'wide';
const fimMode = mode === 'fim';
const require = createRequire(installDir + '/package.json');
const { Ollama } = require('ollama');
const AjvPkg = require('ajv');
const Ajv = AjvPkg.default || AjvPkg;
const ollama = new Ollama({ host });
const ajv = new Ajv({ allErrors: true, strict: false });

let failures = 0;
function check(cond, name, detail) {
  const tag = mode ? `[${mode}] ` : '';
  if (cond) console.log(`ok - ${tag}${name}`);
  else { console.log(`not ok - ${tag}${name}: ${JSON.stringify(detail).slice(0, 800)}`); failures++; }
}

async function models() {
  const list = await ollama.list();
  const model = list.models[0]?.name;
  check(list.models.length === 1 && /:latest$/.test(model) && list.models[0].details.format === 'gguf' && list.models[0].size > 0,
        'list (GET /api/tags) names the served model', list);
  const show = await ollama.show({ model });
  check(typeof show.parameters === 'string' && /temperature/.test(show.parameters) && typeof show.template === 'string' &&
        typeof show.model_info['general.architecture'] === 'string' && show.capabilities.includes('completion'),
        'show (POST /api/show): parameters, template, model_info', show);
  const ps = await ollama.ps();
  check(ps.models.length === 1 && ps.models[0].name === model, 'ps (GET /api/ps) lists the loaded model', ps);
  const v = await ollama.version();
  check(/^\d+\.\d+\.\d+$/.test(v.version), 'version (GET /api/version)', v);
  return model;
}

async function chat(model) {
  const params = { model, messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }],
                   options: { num_predict: 24, temperature: 0 } };
  const whole = await ollama.chat({ ...params, stream: false });
  check(whole.done && whole.message.role === 'assistant' && whole.message.content.length > 0 && ['stop', 'length'].includes(whole.done_reason) &&
        whole.eval_count > 0 && whole.total_duration > 0 && whole.eval_duration > 0 && whole.prompt_eval_count > 0,
        'chat, stream false: the message, done_reason and the timings', whole);
  let text = '', last = null, parts = 0;
  for await (const part of await ollama.chat({ ...params, stream: true })) { text += part.message.content; last = part; parts++; }
  check(text === whole.message.content && last?.done === true && last.done_reason === whole.done_reason && last.eval_count === whole.eval_count && parts >= 2,
        'chat streamed (NDJSON): the pieces join to the whole answer at temperature 0', { text, whole: whole.message.content, last, parts });
  const cut = await ollama.chat({ model, messages: [{ role: 'user', content: 'Tell me a long story.' }], options: { num_predict: 5, temperature: 0 }, stream: false });
  check(cut.done_reason === 'length' && cut.eval_count === 5, 'options.num_predict cuts the reply: done_reason length', cut);
  const free = (await ollama.chat({ ...params, stream: false, options: { num_predict: 40, temperature: 0 } })).message.content;
  let stop;
  for (let i = 4; i + 3 <= free.length && !stop; i++) {
    const w = free.slice(i, i + 3);
    if (w.trim().length === 3 && !free.slice(0, i + 2).includes(w)) stop = w;
  }
  const stopped = await ollama.chat({ ...params, stream: false, options: { num_predict: 40, temperature: 0, stop: [stop] } });
  check(stop && stopped.done_reason === 'stop' && free.startsWith(stopped.message.content) && !stopped.message.content.includes(stop),
        `options.stop ends the reply at "${stop}"`, { free, stopped });
}

async function generate(model) {
  const params = { model, prompt: 'Once upon a time', options: { num_predict: 16, temperature: 0, seed: 3, top_k: 40, top_p: 0.9, min_p: 0.05, repeat_penalty: 1.1, num_ctx: 512 } };
  const whole = await ollama.generate({ ...params, stream: false });
  check(whole.done && typeof whole.response === 'string' && whole.response.length > 0 && whole.eval_count > 0,
        'generate, stream false (the options are taken)', whole);
  let text = '', last = null;
  for await (const part of await ollama.generate({ ...params, stream: true })) { text += part.response; last = part; }
  check(text === whole.response && last?.done === true, 'generate streamed: the pieces join to the whole answer', { text, whole: whole.response });
  const raw = await ollama.generate({ ...params, raw: true, system: 'ignored in raw mode', stream: false, keep_alive: '5m' });
  check(raw.done && typeof raw.response === 'string', 'generate raw, with keep_alive', raw);
  const opts = { num_predict: 4, temperature: 0 };
  const tmpl = await ollama.generate({ model, prompt: 'Once', system: 'Tell a story.', stream: false, options: opts,
                                       template: '{{ if .System }}{{ .System }} {{ end }}{{ .Prompt }} upon a time{{ .Response }} THE END' });
  const same = await ollama.generate({ model, prompt: 'Tell a story. Once upon a time', raw: true, stream: false, options: opts });
  check(tmpl.done && tmpl.response === same.response, 'generate with a template (Go): the prompt it writes, as raw text', { tmpl, same });
  try {
    await ollama.generate({ model, prompt: 'x', template: '{{ range .Messages }}{{ end }}', stream: false });
    check(false, 'a template action attnd does not render: refused', 'accepted');
  } catch (e) {
    check(e.status_code === 400 && /range/.test(e.error), 'a template action attnd does not render: 400 quoting it', { status: e.status_code, error: e.error });
  }
}

async function formats(model) {
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, count: { type: 'integer', minimum: 0, maximum: 99 } },
                   required: ['name', 'count'], additionalProperties: false };
  const validate = ajv.compile(schema);
  let good = 0;
  const bad = [];
  for (let seed = 1; seed <= 10; seed++) {
    const r = await ollama.chat({ model, messages: [{ role: 'user', content: 'Name a state and a number.' }], format: schema, stream: false,
                                  options: { temperature: 1, seed, num_predict: 120 } });
    let ok = false;
    try { ok = validate(JSON.parse(r.message.content)); } catch { ok = false; }
    if (ok) good++; else bad.push(r.message.content);
  }
  check(good === 10, `format with a JSON schema: 10 of 10 answers at temperature 1 parse and validate (${good})`, bad[0]);
  const j = await ollama.generate({ model, prompt: 'A JSON object:', format: 'json', stream: false, options: { num_predict: 60, temperature: 0 } });
  let parsed = null;
  try { parsed = JSON.parse(j.response); } catch { parsed = null; }
  check(parsed !== null && typeof parsed === 'object', 'format "json" answers a JSON object', j.response);
}

async function tools(model) {
  const weather = { type: 'object', properties: { city: { type: 'string', maxLength: 16 } }, required: ['city'] };
  const validate = ajv.compile(weather);
  const toolset = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: weather } }];
  const ask = { role: 'user', content: 'Weather in Paris?' };
  const r = await ollama.chat({ model, messages: [ask], tools: toolset, stream: false, options: { num_predict: 60, temperature: 0 } });
  const calls = r.message.tool_calls || [];
  check(r.done && calls.every((c) => c.function.name === 'get_weather' && validate(c.function.arguments)),
        'chat with tools: any tool_calls name the tool and their arguments validate', r.message);
  // the round trip: a call and its result go back, Ollama's shape (arguments an object, tool_name)
  const next = await ollama.chat({ model, tools: toolset, stream: false, options: { num_predict: 12, temperature: 0 },
                                   messages: [ask, { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
                                              { role: 'tool', content: '18 C, sunny', tool_name: 'get_weather' }] });
  check(next.done && typeof next.message.content === 'string', 'tool_calls and a tool result go back and the model answers', next);
  const think = await ollama.chat({ model, messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello', thinking: 'greet back' }, ask],
                                    think: true, stream: false, options: { num_predict: 8 } });
  check(think.done, 'think and a thinking message are accepted', think);
  if (!wide) return;
  // Qwen3's template: the tools' JSON Schema and the tool turns are in the prompt it writes, and
  // think false closes an empty think block there (none of that fits the default model's 512
  // tokens). prompt_eval_count counts what the prefix cache did not hold; every vocabulary token
  // of this model is one byte.
  const tide = { type: 'function', function: { name: 'get_tide', description: 'Tide tables for a harbour',
                                               parameters: { type: 'object', properties: { harbour: { type: 'string' } } } } };
  const fresh = await ollama.chat({ model, messages: [{ role: 'user', content: 'Tides in Oslo?' }], tools: [tide], stream: false,
                                    options: { num_predict: 1 } });
  check(fresh.prompt_eval_count > JSON.stringify(tide.function).length,
        'the template writes the tools into the prompt', fresh.prompt_eval_count);
  check(next.prompt_eval_count >= '18 C, sunny'.length + 'get_weather'.length,
        'the template writes the call and its result into the prompt', next.prompt_eval_count);
  const q = [{ role: 'user', content: 'Think of Rome.' }];
  const on = await ollama.chat({ model, messages: q, think: true, stream: false, options: { num_predict: 1 } });
  const off = await ollama.chat({ model, messages: q, think: false, stream: false, options: { num_predict: 1 } });
  check(on.done && off.prompt_eval_count >= '<think>\n\n</think>\n\n'.length && off.prompt_eval_count <= 20,
        "think false is the template's enable_thinking false: an empty think block after the cached prompt",
        { on: on.prompt_eval_count, off: off.prompt_eval_count });
}

// fill-in-the-middle as editor plugins ask for it: prompt (the code before the cursor) + suffix,
// whole and streamed alike at temperature 0, with the done fields
async function fim(model) {
  const params = { model, prompt: 'def add(a, b):\n    return ', suffix: '\n\nprint(add(1, 2))\n',
                   options: { num_predict: 6, temperature: 0, stop: ['\n\n'] } };
  const whole = await ollama.generate({ ...params, stream: false });
  check(whole.done && typeof whole.response === 'string' && ['stop', 'length'].includes(whole.done_reason) &&
        whole.prompt_eval_count > 'def add(a, b):'.length && whole.eval_count > 0 && whole.total_duration > 0,
        'generate with a suffix (fill-in-the-middle), stream false: the done fields', whole);
  let text = '', last = null;
  for await (const part of await ollama.generate({ ...params, stream: true })) { text += part.response; last = part; }
  check(text === whole.response && last?.done === true && last.done_reason === whole.done_reason && last.eval_count === whole.eval_count,
        'generate with a suffix streamed: the pieces join to the whole answer', { text, whole: whole.response, last });
}

async function errors(model) {
  const tries = [
    ['another model name', { model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }, 404],
    ['an image', { model, messages: [{ role: 'user', content: 'x', images: ['iVBORw0KGgo='] }] }, 400],
    ['a bad format', { model, messages: [{ role: 'user', content: 'x' }], format: 'yaml' }, 400],
  ];
  for (const [what, body, status] of tries) {
    try {
      await ollama.chat({ ...body, stream: false });
      check(false, `${what}: refused`, 'accepted');
    } catch (e) {
      check(e.name === 'ResponseError' && e.status_code === status && typeof e.error === 'string' && e.error.length > 0,
            `${what}: ${status} with Ollama's {"error"}`, { name: e.name, status: e.status_code, error: e.error });
    }
  }
  try {
    await ollama.generate({ model, prompt: 'x = ', suffix: '\n', stream: false });
    check(false, 'a suffix on a model without FIM tokens: refused', 'accepted');
  } catch (e) {
    check(e.status_code === 400 && /fill in the middle/.test(e.error), "a suffix on a model without FIM tokens: 400 naming them, Ollama's {\"error\"}",
          { status: e.status_code, error: e.error });
  }
}

// The served decoder embeds too (the server runs with --embeddings, as llama-server's flag).
async function embed(model) {
  const e = await ollama.embed({ model, input: ['Once upon a time', 'a little cat'] });
  const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  check(e.embeddings?.length === 2 && e.embeddings[0].length > 0 && e.embeddings[0].length === e.embeddings[1].length &&
        e.embeddings.every((v) => Math.abs(norm(v) - 1) < 1e-4) && e.prompt_eval_count > 0,
        'embed (POST /api/embed): one L2-normalised vector per input', e);
  const one = await ollama.embed({ model, input: 'a little cat' });
  check(one.embeddings?.length === 1 && one.embeddings[0].every((x, i) => Math.abs(x - e.embeddings[1][i]) < 1e-5),
        'embed of one string equals its place in a batch', { one: one.embeddings?.[0]?.slice(0, 4), batch: e.embeddings[1].slice(0, 4) });
}

try {
  const model = mode ? (await ollama.list()).models[0].name : await models();
  if (fimMode) {
    await fim(model);
    console.log(failures ? `# ${failures} failed` : '# all passed');
    process.exit(failures ? 1 : 0);
  }
  if (!wide) await chat(model);
  if (!wide) await generate(model);
  if (!wide) await formats(model);
  await tools(model);
  if (!wide) await errors(model);
  if (!wide) await embed(model);
} catch (e) {
  console.log(`not ok - unexpected error: ${e.stack || e}`);
  failures++;
}
console.log(failures ? `# ${failures} failed` : '# all passed');
process.exit(failures ? 1 : 0);
