// embed_clients.mjs — embedding and rerank clients against attnd with only the base URL changed:
// the `openai` package's embeddings.create (its default base64 transport, floats, dimensions,
// token ids), LangChain's OpenAIEmbeddings (embedDocuments, embedQuery), the `ollama` package's
// embed and embeddings, and Cohere- and Jina-style rerank calls through fetch. Every vector is
// compared with the server's own float answer. Driven by tests/test_embed_clients.sh.
//   node embed_clients.mjs INSTALL_DIR EMBED_URL RANK_URL
import { createRequire } from 'node:module';

const [installDir, embedURL, rankURL] = process.argv.slice(2);
const require = createRequire(installDir + '/package.json');
const OpenAIPkg = require('openai');
const OpenAI = OpenAIPkg.default || OpenAIPkg.OpenAI || OpenAIPkg;
const { OpenAIEmbeddings } = require('@langchain/openai');
const { Ollama } = require('ollama');

let failures = 0;
function check(cond, name, detail) {
  if (cond) console.log(`ok - ${name}`);
  else { console.log(`not ok - ${name}: ${JSON.stringify(detail).slice(0, 600)}`); failures++; }
}
const close = (a, b, tol = 1e-6) => a.length === b.length && a.every((x, i) => Math.abs(x - b[i]) <= tol);
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
async function post(url, body) {
  const r = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

const texts = ['Once upon a time', 'a little cat', 'the sun was bright'];
const want = (await post(`${embedURL}/v1/embeddings`, { input: texts, encoding_format: 'float' })).body.data.map((d) => d.embedding);
check(want.length === 3 && want.every((v) => v.length === 64 && Math.abs(norm(v) - 1) < 1e-5), 'the server: 3 unit vectors', want.map((v) => v.length));

// ---- the openai package ----
const client = new OpenAI({ baseURL: `${embedURL}/v1`, apiKey: 'sk-test-not-checked', maxRetries: 0 });
const e = await client.embeddings.create({ model: 'text-embedding-3-small', input: texts });
check(e.data.length === 3 && e.data.every((d, i) => d.index === i && close(d.embedding, want[i])),
      'openai embeddings.create (its base64 transport) gives the server\'s vectors', e.data.map((d) => d.embedding.slice(0, 3)));
check(e.usage.prompt_tokens > 3 && e.usage.total_tokens === e.usage.prompt_tokens, 'openai: usage', e.usage);
const f = await client.embeddings.create({ model: 'm', input: 'a little cat', encoding_format: 'float' });
check(close(f.data[0].embedding, want[1]), 'openai: encoding_format float', f.data[0].embedding.slice(0, 3));
const d = await client.embeddings.create({ model: 'm', input: 'a little cat', dimensions: 16 });
const cut = want[1].slice(0, 16).map((x) => x / norm(want[1].slice(0, 16)));
check(d.data[0].embedding.length === 16 && close(d.data[0].embedding, cut, 1e-5), 'openai: dimensions 16, renormalised', d.data[0].embedding.length);
const tok = (await post(`${embedURL}/tokenize`, { content: 'a little cat', add_special: true })).body.tokens;
const ids = await client.embeddings.create({ model: 'm', input: [tok, tok] });
check(ids.data.length === 2 && close(ids.data[1].embedding, want[1]), 'openai: arrays of token ids', ids.data.length);
let err = null;
try { await client.embeddings.create({ model: 'm', input: 'x', dimensions: 4096 }); } catch (x) { err = x; }
check(err && err.status === 400 && /dimensions/.test(err.message), 'openai: dimensions above the model\'s is a 400 the client raises', err && err.message);

// ---- LangChain ----
const lc = new OpenAIEmbeddings({ model: 'text-embedding-3-small', apiKey: 'sk-test', configuration: { baseURL: `${embedURL}/v1` } });
const docs = await lc.embedDocuments(texts);
check(docs.length === 3 && docs.every((v, i) => close(v, want[i])), 'LangChain OpenAIEmbeddings.embedDocuments', docs.map((v) => v.length));
const q = await lc.embedQuery('a little cat');
check(close(q, want[1]), 'LangChain OpenAIEmbeddings.embedQuery', q.slice(0, 3));

// ---- ollama ----
const ollama = new Ollama({ host: embedURL });
const oe = await ollama.embed({ model: 'stories260K', input: texts });
check(oe.embeddings.length === 3 && oe.embeddings.every((v, i) => close(v, want[i])) && oe.prompt_eval_count > 0,
      'ollama embed: normalised vectors, prompt_eval_count', { n: oe.embeddings.length, c: oe.prompt_eval_count });
const ol = await ollama.embeddings({ model: 'stories260K', prompt: 'a little cat' });
check(close(ol.embedding.map((x) => x / norm(ol.embedding)), want[1], 1e-5), 'ollama embeddings (legacy): the raw vector', ol.embedding.slice(0, 3));

// ---- rerank, as Cohere's and Jina's clients send it ----
const documents = ['Once upon a time', 'a little cat', 'the sun was bright', 'a big dog'];
const cohere = await post(`${rankURL}/v1/rerank`, { model: 'rerank-v3.5', query: 'a cat', documents, top_n: 3 });
const rs = cohere.body.results || [];
check(cohere.status === 200 && rs.length === 3 && rs.every((r, i) => i === 0 || rs[i - 1].relevance_score >= r.relevance_score) &&
      new Set(rs.map((r) => r.index)).size === 3, 'Cohere-style rerank: top 3, sorted, distinct indices', cohere.body);
const jina = await post(`${rankURL}/v1/rerank`, { model: 'jina-reranker-v2', query: 'a cat', documents: documents.map((text) => ({ text })), return_documents: true });
const js = jina.body.results || [];
check(jina.status === 200 && js.length === 4 && js.every((r) => r.document.text === documents[r.index]) &&
      js.slice(0, 3).every((r, i) => r.index === rs[i].index && Math.abs(r.relevance_score - rs[i].relevance_score) < 1e-6),
      'Jina-style rerank: documents as objects, returned, the same order and scores', jina.body);
check(jina.body.usage && jina.body.usage.total_tokens > 0, 'rerank: usage', jina.body.usage);
const bad = await post(`${rankURL}/v1/rerank`, { model: 'x', query: 'a cat' });
check(bad.status === 400 && bad.body.error && bad.body.error.param === 'documents', 'rerank without documents: a 400 naming the field', bad.body);

process.exit(failures ? 1 : 0);
