#!/usr/bin/env node
// tokenize.mjs — llama.cpp's token ids for texts, one JSON line out per line in.
//
//   node tokenize.mjs --model M.gguf [--in FILE|-] [--verbose]
//
// Each input line is {"text": "..."} (blank lines are skipped). Each output line is
//   {"text": ..., "ids": [...], "ids_with_special": [...]}
// ids              = llama.cpp tokenize(add_special=false, parse_special=false): special-token text
//                    such as "<s>" stays plain text, no BOS/EOS;
// ids_with_special = tokenize(add_special=true, parse_special=true): BOS/EOS as the vocabulary's
//                    add_bos/add_eos flags say, special-token text becomes the special token.
// Only the vocabulary is loaded (vocab-only), so a file with no tensors works too.
import {createReadStream} from "node:fs";
import {createInterface} from "node:readline";
import {parseOptions, runMain, openLlama, tokenizeText} from "./peer.mjs";

runMain(async () => {
    const o = parseOptions(process.argv.slice(2), {model: "str", in: "str", verbose: "flag"});
    if (!o.model) throw new Error("need --model");
    const src = o.in ?? "-";
    const {llama} = await openLlama({verbose: o.verbose});
    const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0, vocabOnly: true});
    const lines = createInterface({input: src === "-" ? process.stdin : createReadStream(src, "utf8"),
        crlfDelay: Infinity});
    let n = 0;
    const out = [];
    for await (const line of lines) {
        n++;
        if (line.trim() === "") continue;
        let text;
        try {
            text = JSON.parse(line).text;
        } catch (e) {
            throw new Error(`${src}:${n}: not JSON (${e.message})`);
        }
        if (typeof text !== "string") throw new Error(`${src}:${n}: no string field "text"`);
        out.push(JSON.stringify({
            text,
            ids: tokenizeText(model, text, {addSpecial: false, parseSpecial: false}),
            ids_with_special: tokenizeText(model, text, {addSpecial: true, parseSpecial: true})
        }) + "\n");
        if (out.length >= 256) process.stdout.write(out.splice(0).join(""));
    }
    process.stdout.write(out.join(""));
    await model.dispose();
    await llama.dispose();
});
