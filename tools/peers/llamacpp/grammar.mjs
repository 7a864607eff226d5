// grammar.mjs — llama.cpp's greedy decode speed with and without a GBNF grammar, for
// tools/bench/grammar_vs_llamacpp.sh. The grammar is llama.cpp's own sampler grammar (the text
// given, compiled by llama.cpp), so the same GBNF can be timed in attnd and here.
//   node grammar.mjs --model M.gguf --prompt TEXT [--grammar FILE.gbnf] [--n 64] [--threads 2] [--ctx 512]
// One JSON line out: tokens (generated, up to n; the grammar may end sooner), decode_ms (first
// token to last), decode_tok_per_s, grammar (true / false), text.
import {readFileSync} from "node:fs";
import {performance} from "node:perf_hooks";
import {LlamaGrammarEvaluationState} from "node-llama-cpp";
import {parseOptions, runMain, openLlama, tokenizeText} from "./peer.mjs";

const SPEC = {model: "str", prompt: "str", grammar: "str", n: "int", threads: "int", ctx: "int", verbose: "flag"};

runMain(async () => {
    const o = parseOptions(process.argv.slice(2), SPEC);
    if (!o.model || o.prompt === undefined) throw new Error("need --model and --prompt");
    const n = o.n ?? 64, threads = o.threads ?? 2, ctx = o.ctx ?? 512;
    const {llama} = await openLlama({threads, verbose: o.verbose});
    const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0});
    const prompt = tokenizeText(model, o.prompt, {addSpecial: true, parseSpecial: false});
    const context = await model.createContext({contextSize: ctx, batchSize: Math.min(ctx, 512), sequences: 1,
                                               threads: {ideal: threads, min: threads}});
    const grammar = o.grammar ? await llama.createGrammar({grammar: readFileSync(o.grammar, "utf8")}) : null;
    const state = grammar ? new LlamaGrammarEvaluationState({model, grammar}) : undefined;
    const steps = context.getSequence().evaluate(prompt, {temperature: 0, yieldEogToken: true, grammarEvaluationState: state});
    const tokens = [];
    let tFirst = 0, tLast = 0;
    while (tokens.length < n) {
        const r = await steps.next();
        if (r.done || model.isEogToken(r.value)) break;
        tLast = performance.now();
        if (tokens.length === 0) tFirst = tLast;
        tokens.push(r.value);
    }
    await steps.return();
    const decodeMs = tLast - tFirst;
    process.stdout.write(JSON.stringify({
        tokens: tokens.length, decode_ms: Number(decodeMs.toFixed(3)),
        decode_tok_per_s: tokens.length > 1 ? Number(((tokens.length - 1) / (decodeMs / 1000)).toFixed(2)) : null,
        grammar: !!grammar, text: model.detokenize(tokens)
    }) + "\n");
    await context.dispose();
    await model.dispose();
    await llama.dispose();
});
