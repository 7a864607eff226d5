// openai_client.mjs — the official `openai` npm client against attnd, with only baseURL changed.
//   node openai_client.mjs OPENAI_INSTALL_DIR BASE_URL
// Runs completions and chat completions, streamed and not; exits 1 on any failure.
import { createRequire } from 'node:module';

const [installDir, baseURL] = process.argv.slice(2);
const require = createRequire(installDir + '/package.json');
const OpenAI = require('openai');
const Client = OpenAI.default || OpenAI.OpenAI || OpenAI;
const client = new Client({ baseURL, apiKey: 'sk-test-not-checked' });

let failures = 0;
function check(cond, name, detail) {
  if (cond) console.log(`ok - ${name}`);
  else { console.log(`not ok - ${name}: ${JSON.stringify(detail).slice(0, 500)}`); failures++; }
}

try {
  const models = await client.models.list();
  const model = models.data[0].id;
  check(typeof model === 'string' && model.length > 0, 'models.list returns the loaded model', models.data);

  const c = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0 });
  check(c.object === 'text_completion' && typeof c.choices[0].text === 'string' && c.usage.completion_tokens > 0 &&
        ['stop', 'length'].includes(c.choices[0].finish_reason), 'completions.create', c);

  let streamed = '', finish = null, chunks = 0;
  const cs = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0, stream: true });
  for await (const chunk of cs) {
    chunks++;
    streamed += chunk.choices[0]?.text ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  check(streamed === c.choices[0].text && finish === c.choices[0].finish_reason && chunks >= 2,
        'streamed completion equals the non-streamed one', { streamed, want: c.choices[0].text, finish, chunks });

  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
  check(chat.object === 'chat.completion' && chat.choices[0].message.role === 'assistant' &&
        typeof chat.choices[0].message.content === 'string' && chat.usage.total_tokens > 0, 'chat.completions.create', chat);

  let content = '', role = null, cfinish = null, usage = null;
  const chs = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, stream: true,
                                                     stream_options: { include_usage: true } });
  for await (const chunk of chs) {
    if (chunk.usage) usage = chunk.usage;
    const d = chunk.choices[0]?.delta;
    if (d?.role) role = d.role;
    content += d?.content ?? '';
    cfinish = chunk.choices[0]?.finish_reason ?? cfinish;
  }
  check(role === 'assistant' && content === chat.choices[0].message.content && cfinish && usage && usage.total_tokens === chat.usage.total_tokens,
        'streamed chat equals the non-streamed one, with usage', { content, want: chat.choices[0].message.content, cfinish, usage });

  try {
    await client.completions.create({ model, prompt: 'x', max_tokens: -5 });
    check(false, 'a bad request raises', 'no error');
  } catch (e) {
    check(e.status === 400 && /max_tokens/.test(e.message), 'a bad request raises a 400 APIError naming the field', { status: e.status, message: e.message });
  }
} catch (e) {
  console.log('not ok - client threw: ' + (e.stack || e));
  failures++;
}
process.exit(failures ? 1 : 0);
