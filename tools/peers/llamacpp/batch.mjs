#!/usr/bin/env node
// batch.mjs — llama.cpp's batched greedy decode: aggregate decode tokens/s of B sequences decoded
// together in one context (one llama_decode of B tokens per step), for B = 1, 2, 4, 8, and each B's
// ratio to B = 1 measured in the same process. The peer of attnd's tools/bench/bench_batch.c.
//
//   node batch.mjs --model M.gguf [--threads 2] [--n 64] [--batches "1 2 4 8"] [--reps 3]
//                  [--ctx CELLS_PER_SEQUENCE] [--prompt-len 64] [--flash-attn auto|on|off] [--verbose]
//
// For each B: a context with B sequences (node-llama-cpp gives each --ctx cells; default: the
// prompt + n + 1, rounded up to 64), a distinct --prompt-len-token prompt in each (token ids 1..64
// of the vocabulary cycled, shifted by 7 per sequence, like bench_batch.c's synthetic prompt),
// prefilled together; then all B sequences decode greedily (argmax, end-of-generation tokens do not
// stop them) in lock step: every step asks each sequence's evaluate() generator for its next token
// in the same tick, and node-llama-cpp's batching dispatcher puts the B pending one-token decodes
// into one llama_decode. llama.cpp runs such a context with kv_unified = false (its log with
// --verbose): each sequence has its own KV stream and attends only to its own cells, as attnd's
// sequences do. Only the decode phase is timed: from the moment every sequence has its
// first token (that one comes from the prefill) to the moment every sequence has n more, i.e.
// exactly n batched steps; aggregate tokens/s = B * n / that time. The process CPU time of the same
// span (all llama.cpp threads, spin-waits included, and node's own) is reported per token too: on
// a shared machine wall time mostly measures the neighbours.
// One untimed warm-up run (the first batch size, 4 steps) first; then rounds alternate the batch
// sizes (rep 1: 1 2 4 8, rep 2: 1 2 4 8, ...); medians over the reps.
//
// How batching is verified, on every run: the context's native initBatch(size) and decodeBatch()
// are wrapped to count, during the timed phase, the decode calls and the tokens in each. A run
// that batched fully has exactly n decode calls of exactly B tokens each; the table prints the
// decode calls and the smallest/largest batch, the JSON line carries them and `batched` (true only
// when every step was one decode of B tokens), and a warning goes to stderr otherwise.
// (Checked both ways: stepping the generators one after another instead of in the same tick
// gives 4 n decodes of 1 token at B = 4, and the warning.)
//
// Output: a table on stdout (batch, tokens/s, x batch1, ms/step, cpu ms/token, x batch1, decode
// calls, tokens per decode), then one JSON line with the same per B (medians) and the settings.
// A benchmark, not a test: it prints numbers and ratios, asserts nothing.
import {performance} from "node:perf_hooks";
import {parseOptions, runMain, openLlama} from "./peer.mjs";

const SPEC = {model: "str", threads: "int", n: "int", batches: "str", reps: "int", ctx: "int",
    "prompt-len": "int", "flash-attn": "str", verbose: "flag"};

const median = (v) => {
    const s = [...v].sort((a, b) => a - b), h = s.length >> 1;
    return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
};
const round = (x, d) => Number(x.toFixed(d));
const cpuSeconds = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e6;
};

// The synthetic prompt of sequence i: ids 1..64 cycled, shifted by 7 i (7 is prime to 64, so up to
// 64 sequences all differ).
function promptOf(i, len) {
    const ids = [];
    for (let p = 0; p < len; p++) ids.push(1 + (p + 7 * i) % 64);
    return ids;
}

// Counts the native decodes of `context` while `counter.on`: counter.sizes gets one entry (tokens
// in the batch) per decodeBatch() call.
function instrument(context, counter) {
    const ctx = context._ctx;
    if (!ctx || typeof ctx.initBatch !== "function" || typeof ctx.decodeBatch !== "function")
        throw new Error("node-llama-cpp's context has no initBatch/decodeBatch to count decodes with");
    const initBatch = ctx.initBatch.bind(ctx), decodeBatch = ctx.decodeBatch.bind(ctx);
    let pending = 0;
    // the native methods are read-only properties of the prototype: shadow them on the instance
    const shadow = (name, fn) => Object.defineProperty(ctx, name, {value: fn, configurable: true, writable: true});
    shadow("initBatch", (size) => {
        pending = size;
        return initBatch(size);
    });
    shadow("decodeBatch", (...args) => {
        if (counter.on) counter.sizes.push(pending);
        return decodeBatch(...args);
    });
}

// One measurement of batch size B: {seconds, cpu, sizes}.
async function runBatch(model, o, B) {
    const context = await model.createContext({
        contextSize: o.ctx, batchSize: Math.max(B * o.promptLen, B), sequences: B,
        threads: {ideal: o.threads, min: o.threads}, flashAttention: o.flash
    });
    const counter = {on: false, sizes: []};
    instrument(context, counter);
    const gens = [];
    for (let i = 0; i < B; i++)
        gens.push(context.getSequence().evaluate(promptOf(i, o.promptLen),
            {temperature: 0, yieldEogToken: true}));
    const step = async () => {
        const r = await Promise.all(gens.map((g) => g.next()));
        if (r.some((x) => x.done)) throw new Error("a sequence stopped generating");
    };
    await step(); // prefill + each sequence's first token
    counter.on = true;
    const t0 = performance.now(), c0 = cpuSeconds();
    for (let s = 0; s < o.n; s++) await step();
    const seconds = (performance.now() - t0) / 1000, cpu = cpuSeconds() - c0;
    counter.on = false;
    await Promise.all(gens.map((g) => g.return()));
    await context.dispose();
    return {seconds, cpu, sizes: counter.sizes};
}

runMain(async () => {
    const a = parseOptions(process.argv.slice(2), SPEC);
    if (!a.model) throw new Error("need --model");
    const o = {threads: a.threads ?? 2, n: a.n ?? 64, reps: a.reps ?? 3, promptLen: a["prompt-len"] ?? 64,
        flash: {auto: "auto", on: true, off: false}[a["flash-attn"] ?? "auto"]};
    const batches = (a.batches ?? "1 2 4 8").split(/[\s,]+/).filter((x) => x !== "").map((x) => {
        if (!/^\d+$/.test(x) || Number(x) < 1) throw new Error(`--batches wants positive integers, got '${x}'`);
        return Number(x);
    });
    if (batches.length === 0) throw new Error("--batches is empty");
    if (new Set(batches).size !== batches.length) throw new Error("--batches names a size twice");
    if (o.threads < 1 || o.n < 1 || o.reps < 1 || o.promptLen < 1)
        throw new Error("--threads, --n, --reps and --prompt-len must be at least 1");
    if (o.flash === undefined) throw new Error("--flash-attn is auto, on or off");
    o.ctx = a.ctx ?? Math.ceil((o.promptLen + o.n + 1) / 64) * 64;
    if (o.promptLen + o.n + 1 > o.ctx)
        throw new Error(`--prompt-len (${o.promptLen}) + --n (${o.n}) + 1 does not fit --ctx (${o.ctx})`);

    const {llama, info} = await openLlama({threads: o.threads, verbose: a.verbose});
    const model = await llama.loadModel({modelPath: a.model, gpuLayers: 0});
    await runBatch(model, {...o, n: Math.min(o.n, 4)}, batches[0]); // warm-up, untimed: first touch of the weights
    const runs = new Map(batches.map((B) => [B, []]));
    for (let r = 0; r < o.reps; r++)
        for (const B of batches) runs.get(B).push(await runBatch(model, o, B));

    const rows = batches.map((B) => {
        const v = runs.get(B), sizes = v.flatMap((x) => x.sizes);
        const calls = median(v.map((x) => x.sizes.length));
        return {
            batch: B,
            tok_per_s: median(v.map((x) => B * o.n / x.seconds)),
            cpu_ms_per_tok: median(v.map((x) => x.cpu * 1e3 / (B * o.n))),
            decode_calls: calls,
            min_tokens_per_decode: Math.min(...sizes),
            max_tokens_per_decode: Math.max(...sizes),
            batched: v.every((x) => x.sizes.length === o.n && x.sizes.every((s) => s === B))
        };
    });
    const base = rows[0];
    console.log(`# llama.cpp ${llama.llamaCppRelease.release} (node-llama-cpp, ${info.cpuBackend}), ${a.model}, ` +
        `${o.threads} threads, ${o.reps} alternating reps of ${o.n} decode steps after a ${o.promptLen}-token ` +
        `prompt; medians; ratios to batch ${base.batch}`);
    console.log("  batch   tokens/s  x batch1   ms/step  cpu ms/token  x batch1  decodes  tok/decode");
    for (const x of rows) {
        x.ratio = x.tok_per_s / base.tok_per_s;
        x.cpu_ratio = base.cpu_ms_per_tok / x.cpu_ms_per_tok;
        const span = x.min_tokens_per_decode === x.max_tokens_per_decode ? `${x.min_tokens_per_decode}`
            : `${x.min_tokens_per_decode}-${x.max_tokens_per_decode}`;
        console.log(`  ${String(x.batch).padEnd(6)}${x.tok_per_s.toFixed(1).padStart(9)}${x.ratio.toFixed(2).padStart(10)}` +
            `${(x.batch * 1e3 / x.tok_per_s).toFixed(2).padStart(10)}${x.cpu_ms_per_tok.toFixed(2).padStart(14)}` +
            `${x.cpu_ratio.toFixed(2).padStart(10)}${String(x.decode_calls).padStart(9)}${span.padStart(12)}`);
        if (!x.batched)
            process.stderr.write(`batch.mjs: batch ${x.batch} was not one decode of ${x.batch} tokens per step ` +
                `(${x.decode_calls} decodes of ${span} tokens for ${o.n} steps)\n`);
    }
    console.log(JSON.stringify({
        peer: "llama.cpp", llama_cpp_release: llama.llamaCppRelease.release, cpu_backend: info.cpuBackend,
        model: a.model, threads: o.threads, n: o.n, reps: o.reps, prompt_len: o.promptLen, ctx_per_seq: o.ctx,
        rows: rows.map((x) => ({...x, tok_per_s: round(x.tok_per_s, 2), ratio: round(x.ratio, 3),
            cpu_ms_per_tok: round(x.cpu_ms_per_tok, 3), cpu_ratio: round(x.cpu_ratio, 3)}))
    }));
    await model.dispose();
    await llama.dispose();
});
