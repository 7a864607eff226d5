// agents_frameworks.mjs — the agent frameworks people build on, against attnd with only the base
// URL changed: LangChain's ChatOpenAI (bindTools, withStructuredOutput by function calling and by
// JSON schema) and the Vercel AI SDK through @ai-sdk/openai-compatible (generateObject,
// generateText with a tool it executes). Every result is checked with the schema's own zod
// validator. Driven by tests/test_agents_frameworks.sh.
//   node agents_frameworks.mjs INSTALL_DIR BASE_URL MODEL_ID
import { createRequire } from 'node:module';

const [installDir, baseURL, modelId] = process.argv.slice(2);
const require = createRequire(installDir + '/package.json');
const { z } = require('zod');
const { ChatOpenAI } = require('@langchain/openai');
const { generateObject, generateText, tool } = require('ai');
const { createOpenAICompatible } = require('@ai-sdk/openai-compatible');

let failures = 0;
function check(cond, name, detail) {
  if (cond) console.log(`ok - ${name}`);
  else { console.log(`not ok - ${name}: ${JSON.stringify(detail).slice(0, 800)}`); failures++; }
}
async function attempt(name, fn) {
  try { await fn(); } catch (e) { check(false, name, String(e && e.stack || e)); }
}

// small bounds: this model's context is 512 tokens
const Weather = z.object({ city: z.string().min(1).max(16), days: z.number().int().min(1).max(7) });
const Person = z.object({ name: z.string().max(20), age: z.number().int().min(0).max(120),
                          tags: z.array(z.enum(['admin', 'user', 'guest'])).max(3) });
// zod's .int() writes minimum -(2^53 - 1) beside its own bounds; .number().min().max() bounds a
// decimal, which the grammar holds exactly
const Rating = z.object({ stars: z.number().int().min(1).max(5), weight: z.number().min(0.5).max(2.5) });
const weatherTool = { type: 'function', function: { name: 'get_weather', description: 'Weather forecast for a city',
  parameters: { type: 'object', properties: { city: { type: 'string', minLength: 1, maxLength: 16 },
                                              days: { type: 'integer', minimum: 1, maximum: 7 } },
                required: ['city', 'days'], additionalProperties: false } } };

// ---- LangChain ----
const llm = new ChatOpenAI({ model: modelId, apiKey: 'sk-test-not-checked', configuration: { baseURL },
                             temperature: 1, maxTokens: 150, maxRetries: 0, modelKwargs: { seed: 7 } });

await attempt('LangChain bindTools', async () => {
  const msg = await llm.bindTools([weatherTool], { tool_choice: 'required' }).invoke('What is the weather in Paris?');
  const c = msg.tool_calls?.[0];
  check(msg.tool_calls?.length === 1 && c.name === 'get_weather' && Weather.safeParse(c.args).success && /^call_/.test(c.id),
        'LangChain bindTools with tool_choice required: one call, its args parsed and valid', msg.tool_calls);
});

for (const method of ['functionCalling', 'jsonSchema']) {
  await attempt(`LangChain withStructuredOutput (${method})`, async () => {
    const out = await llm.withStructuredOutput(Person, { name: 'person', method }).invoke('Describe a person.');
    check(Person.safeParse(out).success, `LangChain withStructuredOutput (${method}) gives a valid object`, out);
  });
}

for (const method of ['functionCalling', 'jsonSchema']) {
  await attempt(`LangChain withStructuredOutput with number bounds (${method})`, async () => {
    let good = 0, last = null;
    for (const seed of [1, 2, 3]) {
      const seeded = new ChatOpenAI({ model: modelId, apiKey: 'sk-test-not-checked', configuration: { baseURL },
                                      temperature: 1, maxTokens: 100, maxRetries: 0, modelKwargs: { seed } });
      const rated = seeded.withStructuredOutput(Rating, { name: 'rating', method });
      last = await rated.invoke('Rate a melon.');
      if (Rating.safeParse(last).success) good++;
    }
    check(good === 3, `LangChain withStructuredOutput (${method}): .int().min(1).max(5) and .number().min(0.5).max(2.5) hold, 3 of 3 (${good})`, last);
  });
}

// ---- Vercel AI SDK ----
const provider = createOpenAICompatible({ name: 'attnd', baseURL, apiKey: 'sk-test-not-checked', supportsStructuredOutputs: true });
const model = provider(modelId);

await attempt('AI SDK generateObject', async () => {
  const { object } = await generateObject({ model, schema: Person, prompt: 'Describe a person.', temperature: 1, seed: 3,
                                            maxOutputTokens: 200, maxRetries: 0 });
  check(Person.safeParse(object).success, 'AI SDK generateObject gives an object valid under its zod schema', object);
});

await attempt('AI SDK generateText with a tool', async () => {
  let ran = null;
  const r = await generateText({
    model, prompt: 'What is the weather in Paris?', toolChoice: 'required', temperature: 1, seed: 5, maxOutputTokens: 150,
    maxRetries: 0,
    tools: { get_weather: tool({ description: 'Weather forecast for a city', inputSchema: Weather,
                                 execute: async (input) => { ran = input; return { sky: 'clear', c: 22 }; } }) },
  });
  const c = r.toolCalls?.[0];
  check(r.toolCalls?.length === 1 && c.toolName === 'get_weather' && Weather.safeParse(c.input).success,
        'AI SDK generateText: the forced call parses and validates', r.toolCalls);
  check(ran && Weather.safeParse(ran).success && r.toolResults?.[0]?.output?.sky === 'clear',
        'AI SDK generateText: the SDK ran the tool with those arguments', { ran, results: r.toolResults });
  check(r.finishReason === 'tool-calls', "AI SDK generateText: finishReason 'tool-calls'", r.finishReason);
});

process.exit(failures ? 1 : 0);
