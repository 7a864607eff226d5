#!/usr/bin/env node
// generate.mjs — llama.cpp's greedy continuation of a prompt, as one JSON object on stdout.
//
//   node generate.mjs --model M.gguf (--prompt TEXT | --tokens 1,2,3) [--n 64] [--threads 1]
//                     [--ctx 512] [--kv-type f16|f32] [--flash-attn auto|on|off] [--raw-text] [--verbose]
//                     [--json]  (accepted and ignored: the output is always one JSON line)
//
// Greedy means the argmax at every step: temperature 0 gives node-llama-cpp's sampler chain with
// only llama.cpp's greedy sampler (no penalties, no top-k/p). End-of-generation tokens are returned
// like any other token and do not stop it, so exactly --n tokens come out.
// --prompt is tokenized as llama.cpp does (BOS per the vocabulary, special-token text parsed unless
// --raw-text); --tokens are used as given. llama.cpp's defaults are flash attention auto and an F16
// KV cache; `--flash-attn off --kv-type f32` is the closest to exact F32 arithmetic (the reference
// files under tests/data are made that way).
// Output: prompt_tokens, tokens, text, prefill_ms, decode_ms, prefill_tok_per_s, decode_tok_per_s,
// threads, n_ctx, flash_attention, kv_type, cpu_backend, llama_cpp_release.
import {performance} from "node:perf_hooks";
import {parseOptions, runMain, openLlama, tokenizeText, parseIds} from "./peer.mjs";

const SPEC = {model: "str", prompt: "str", tokens: "str", n: "int", threads: "int", ctx: "int",
    "kv-type": "str", "flash-attn": "str", "raw-text": "flag", verbose: "flag",
    json: "flag" /* accepted for older callers: the output is always one JSON line */};

runMain(async () => {
    const o = parseOptions(process.argv.slice(2), SPEC);
    if (!o.model || (o.prompt === undefined) === (o.tokens === undefined))
        throw new Error("need --model and exactly one of --prompt / --tokens");
    const n = o.n ?? 64, threads = o.threads ?? 1, ctx = o.ctx ?? 512;
    const kvType = {f16: "F16", f32: "F32"}[o["kv-type"] ?? "f16"];
    const flash = {auto: "auto", on: true, off: false}[o["flash-attn"] ?? "auto"];
    if (n < 1 || threads < 1 || ctx < 1) throw new Error("--n, --threads and --ctx must be at least 1");
    if (kvType === undefined) throw new Error("--kv-type is f16 or f32");
    if (flash === undefined) throw new Error("--flash-attn is auto, on or off");

    const {llama, info} = await openLlama({threads, verbose: o.verbose});
    const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0});
    const prompt = o.tokens !== undefined ? parseIds(o.tokens)
        : tokenizeText(model, o.prompt, {addSpecial: true, parseSpecial: !o["raw-text"]});
    if (prompt.length === 0) throw new Error("the prompt has no tokens");
    const context = await model.createContext({
        contextSize: ctx, batchSize: Math.min(ctx, 512), sequences: 1,
        threads: {ideal: threads, min: threads}, flashAttention: flash,
        experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType
    });
    // the last token is never fed back: prompt + n - 1 positions are evaluated. Past the context
    // node-llama-cpp would shift it silently, which no reference should contain.
    if (prompt.length + n - 1 > context.contextSize)
        throw new Error(`prompt (${prompt.length}) + n (${n}) - 1 does not fit the context (${context.contextSize})`);

    const steps = context.getSequence().evaluate(prompt, {temperature: 0, yieldEogToken: true});
    const tokens = [];
    const t0 = performance.now();
    let tFirst = t0;
    while (tokens.length < n) {
        const r = await steps.next();
        if (r.done) throw new Error(`generation ended after ${tokens.length} tokens`);
        tokens.push(r.value);
        if (tokens.length === 1) tFirst = performance.now();
    }
    const tEnd = performance.now();
    await steps.return();

    const prefillMs = tFirst - t0, decodeMs = tEnd - tFirst;
    const round = (x, d) => Number(x.toFixed(d));
    process.stdout.write(JSON.stringify({
        prompt_tokens: prompt,
        tokens,
        text: model.detokenize(tokens, false, prompt),
        prefill_ms: round(prefillMs, 3),
        decode_ms: round(decodeMs, 3),
        prefill_tok_per_s: round(prompt.length / (prefillMs / 1000), 2),
        decode_tok_per_s: n > 1 ? round((n - 1) / (decodeMs / 1000), 2) : null,
        threads: context.currentThreads,
        n_ctx: context.contextSize,
        flash_attention: context.flashAttention,
        kv_type: kvType,
        cpu_backend: info.cpuBackend,
        llama_cpp_release: llama.llamaCppRelease.release
    }) + "\n");
    await context.dispose();
    await model.dispose();
    await llama.dispose();
});
