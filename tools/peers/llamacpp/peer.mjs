// peer.mjs — what generate.mjs, tokenize.mjs and batch.mjs share: option parsing and loading llama.cpp.
//
// llama.cpp comes from node-llama-cpp's prebuilt CPU libraries. Nothing is downloaded or compiled
// here, ever: build "never", skipDownload, gpu false. If the prebuilt library does not load, the
// scripts fail instead of trying to build one.
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= "true";

import {getLlama, LlamaLogLevel, LlamaLogLevelGreaterThanOrEqual} from "node-llama-cpp";

// Parses --name value / --name=value / --flag. `spec` maps each name to "str", "int" or "flag".
// Throws on unknown names and missing or malformed values.
export function parseOptions(argv, spec) {
    const opts = {};
    for (let i = 0; i < argv.length; i++) {
        const m = /^--([a-z0-9-]+)(?:=(.*))?$/.exec(argv[i]);
        if (!m) throw new Error(`unexpected argument '${argv[i]}'`);
        const [, name, inline] = m;
        const kind = spec[name];
        if (!kind) throw new Error(`unknown option --${name}`);
        if (kind === "flag") {
            if (inline !== undefined) throw new Error(`--${name} takes no value`);
            opts[name] = true;
            continue;
        }
        let value = inline;
        if (value === undefined) {
            if (i + 1 >= argv.length) throw new Error(`--${name} needs a value`);
            value = argv[++i];
        }
        if (kind === "int") {
            if (!/^\d+$/.test(value)) throw new Error(`--${name} wants a non-negative integer, got '${value}'`);
            value = Number(value);
        }
        opts[name] = value;
    }
    return opts;
}

// Runs main(); any thrown error becomes one line on stderr and exit status 1.
export function runMain(main) {
    main().catch((e) => {
        process.stderr.write(`${process.argv[1].split("/").pop()}: ${e.message}\n`);
        process.exit(1);
    });
}

// Loads llama.cpp on the CPU. llama.cpp's own log goes to stderr: everything with `verbose`,
// otherwise warnings and errors only. Returns {llama, info}; info.cpuBackend names the ggml-cpu
// variant that was loaded (e.g. the AVX-512 one), once a model has been loaded.
export async function openLlama({threads, verbose = false} = {}) {
    const info = {cpuBackend: null};
    const llama = await getLlama({
        build: "never",
        gpu: false,
        usePrebuiltBinaries: true,
        skipDownload: true,
        progressLogs: false,
        existingPrebuiltBinaryMustMatchBuildOptions: false,
        ...(threads ? {maxThreads: threads} : {}),
        logLevel: LlamaLogLevel.log,
        logger(level, message) {
            const m = /loaded CPU backend from (\S+)/.exec(message);
            if (m) info.cpuBackend = m[1].split("/").pop();
            if (verbose || LlamaLogLevelGreaterThanOrEqual(level, LlamaLogLevel.warn))
                process.stderr.write(`llama.cpp: ${message.replace(/\n$/, "")}\n`);
        }
    });
    if (llama.gpu !== false) throw new Error(`llama.cpp came up with gpu=${llama.gpu}, want the CPU`);
    return {llama, info};
}

// llama.cpp's common_tokenize(text, add_special, parse_special): with addSpecial, BOS goes first
// when the vocabulary's add_bos flag says so and EOS last when add_eos does. SentencePiece's
// leading-space prefix is llama.cpp's own business and happens either way.
export function tokenizeText(model, text, {addSpecial, parseSpecial}) {
    const ids = [];
    const t = model.tokens;
    if (addSpecial && t.shouldPrependBosToken && t.bos != null) ids.push(t.bos);
    if (text !== "") ids.push(...model.tokenize(text, parseSpecial));
    if (addSpecial && t.shouldAppendEosToken && t.eos != null) ids.push(t.eos);
    return ids;
}

// "1,2,3" -> [1, 2, 3]; throws on anything that is not a non-negative integer.
export function parseIds(s) {
    const ids = s.split(",").map((x) => x.trim()).filter((x) => x !== "");
    return ids.map((x) => {
        if (!/^\d+$/.test(x)) throw new Error(`'${x}' is not a token id`);
        return Number(x);
    });
}
