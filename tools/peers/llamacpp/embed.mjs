#!/usr/bin/env node
// embed.mjs — llama.cpp's embeddings (or rerank scores) of token lists, as one JSON object on stdout.
//
//   node embed.mjs --model M.gguf --inputs "1,5,9,2;1,7,2" [--rank] [--threads 1] [--ctx N] [--kv-type f32|f16]
//
// Each input (ids separated by ",", inputs by ";"; --inputs @FILE reads them from FILE) is evaluated alone in an embedding context
// (node-llama-cpp's LlamaEmbeddingContext does the same, but it would add BOS/EOS by the
// vocabulary's rules; here the ids go in exactly as given). The pooling is the file's
// <arch>.pooling_type; --rank makes a ranking context (pooling rank: the classification head).
// Output: {"vectors": [[...], ...]} — the pooled vector of each input, raw (not normalised), or
// with --rank the head's outputs (llama.cpp's raw logit for BERT-class heads; node-llama-cpp's
// rank() would apply a sigmoid; a qwen3 reranker's softmax over its [yes, no] rows); plus n_ctx,
// threads, cpu_backend. A decoder's KV cache is F32 unless --kv-type f16 (llama.cpp's default).
import {readFileSync} from "node:fs";
import {parseOptions, runMain, openLlama, parseIds} from "./peer.mjs";

const SPEC = {model: "str", inputs: "str", rank: "flag", threads: "int", ctx: "int", "kv-type": "str", verbose: "flag"};

runMain(async () => {
    const o = parseOptions(process.argv.slice(2), SPEC);
    if (!o.model || !o.inputs) throw new Error("need --model and --inputs");
    // "@FILE": the same list read from FILE (hundreds of inputs overflow a command line)
    const list = o.inputs.startsWith("@") ? readFileSync(o.inputs.slice(1), "utf8").trim() : o.inputs;
    const inputs = list.split(";").map(parseIds);
    const threads = o.threads ?? 1, longest = Math.max(...inputs.map((x) => x.length));
    const ctx = o.ctx ?? Math.max(64, longest);
    const kvType = {f16: "F16", f32: "F32"}[o["kv-type"] ?? "f32"];
    if (kvType === undefined) throw new Error("--kv-type is f16 or f32");
    const {llama, info} = await openLlama({threads, verbose: o.verbose});
    const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0});
    // a non-causal model needs each input in one micro-batch: batch = context
    const context = await model.createContext({
        contextSize: ctx, batchSize: ctx, sequences: 1, threads: {ideal: threads, min: threads},
        flashAttention: false, experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType,
        _embeddings: true, _ranking: !!o.rank
    });
    const seq = context.getSequence();
    const vectors = [];
    for (const ids of inputs) {
        await seq.eraseContextTokenRanges([{start: 0, end: seq.nextTokenIndex}]);
        for await (const _ of seq.evaluate(ids, {_noSampling: true})) break; // eslint-disable-line no-unused-vars
        vectors.push(Array.from(context._ctx.getEmbedding(ids.length)));
    }
    process.stdout.write(JSON.stringify({vectors, n_ctx: context.contextSize, threads,
        cpu_backend: info.cpuBackend}) + "\n");
    await context.dispose();
    await model.dispose();
});
