// gguf_types.mjs — the type of every tensor of a GGUF file, as one JSON object {name: type} on
// stdout: what tests/data/regenerate.sh records of the files llama.cpp's quantizer writes.
//
//   node gguf_types.mjs FILE.gguf
//
// Reads the header only (GGUF v2/v3: magic, version, tensor and metadata counts, the metadata,
// then per tensor its name, dimensions, type and offset). Type numbers are ggml's.
import {openSync, readSync} from "node:fs";

const TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
               12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
               20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 29: "IQ1_M", 30: "BF16", 39: "MXFP4"};
const SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8};

const fd = openSync(process.argv[2], "r");
let pos = 0;
function bytes(n) {
    const b = Buffer.alloc(n);
    if (readSync(fd, b, 0, n, pos) !== n) throw new Error("truncated GGUF header");
    pos += n;
    return b;
}
const u32 = () => bytes(4).readUInt32LE(0);
const u64 = () => Number(bytes(8).readBigUInt64LE(0));
const str = () => bytes(u64()).toString("utf8");
function skip(type) {
    if (type in SCALAR) pos += SCALAR[type];
    else if (type === 8) str();
    else if (type === 9) {
        const et = u32(), n = u64();
        for (let i = 0; i < n; i++) skip(et);
    } else throw new Error(`unknown metadata type ${type}`);
}

if (bytes(4).toString("latin1") !== "GGUF") throw new Error("not a GGUF file");
u32();
const nTensors = u64(), nKv = u64();
for (let i = 0; i < nKv; i++) {
    str();
    skip(u32());
}
const out = {};
for (let i = 0; i < nTensors; i++) {
    const name = str(), nd = u32();
    pos += 8 * nd;
    const t = u32();
    u64();
    out[name] = TYPES[t] ?? String(t);
}
process.stdout.write(JSON.stringify(out) + "\n");
