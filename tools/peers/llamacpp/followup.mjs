#!/usr/bin/env node
// followup.mjs — how many prompt tokens llama.cpp evaluates on each turn of a chat, when one
// sequence carries the conversation from turn to turn. The peer of tools/bench/followup_turns.py.
//
//   node followup.mjs --model M.gguf --turns turns.json [--threads 2] [--ctx 8192] [--verbose]
//
// turns.json: [{"prompt": [ids...], "reply": [ids...]}, ...], the token ids of each turn's
// rendered prompt and of the answer that followed it (as attnd produced them). Each turn aligns
// the sequence's state to the prompt as a server would (adaptStateToTokens without shifting:
// llama.cpp keeps the longest prefix its memory can be cut back to, and clears the rest), then
// evaluates what is left of the prompt, then the reply's tokens as if they had been generated.
// The evaluated prompt tokens of each turn come from the sequence's token meter, counted from
// before the alignment: on a recurrent (hybrid) model the alignment restores node-llama-cpp's
// newest state checkpoint at or before the cut (its defaults) and re-evaluates from there, or
// clears the sequence when it has none.
//
// Output: one JSON line {turns: [{prompt_tokens, kept, evaluated}], model, threads}.
import {readFileSync} from "node:fs";
import {parseOptions, runMain, openLlama} from "./peer.mjs";

const SPEC = {model: "str", turns: "str", threads: "int", ctx: "int", verbose: "flag"};

runMain(async () => {
    const o = parseOptions(process.argv.slice(2), SPEC);
    if (!o.model || !o.turns) throw new Error("--model and --turns are needed");
    const turns = JSON.parse(readFileSync(o.turns, "utf8"));
    const threads = o.threads ?? 2;
    const {llama} = await openLlama({threads, verbose: o.verbose});
    const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0});
    const context = await model.createContext({contextSize: o.ctx ?? 8192, threads, sequences: 1});
    const seq = context.getSequence();
    const out = [];
    for (const t of turns) {
        // aligning may itself evaluate: node-llama-cpp restores its newest state checkpoint before
        // the first differing token (or clears the sequence) and re-evaluates from there
        const before = seq.tokenMeter.usedInputTokens;
        await seq.adaptStateToTokens(t.prompt, false);
        await seq.evaluateWithoutGeneratingNewTokens(t.prompt.slice(seq.nextTokenIndex));
        const evaluated = seq.tokenMeter.usedInputTokens - before;
        if (t.reply.length) await seq.evaluateWithoutGeneratingNewTokens(t.reply);
        out.push({prompt_tokens: t.prompt.length, kept: t.prompt.length - evaluated, evaluated,
            checkpoint_bytes: seq.checkpointsMemoryUsage});
    }
    process.stdout.write(JSON.stringify({turns: out, model: o.model, threads}) + "\n");
    await context.dispose();
    await model.dispose();
});
