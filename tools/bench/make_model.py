#!/usr/bin/env python3
"""make_model.py — writes a Llama-architecture GGUF with random weights of a given shape and
weight type, for speed measurements (the text such a model produces is meaningless; the time it
takes is that of a real model of that shape).

    python3 tools/bench/make_model.py --type Q4_K_M OUT.gguf           # TinyLlama-1.1B shape
    python3 tools/bench/make_model.py --type Q8_0 --layers 2 OUT.gguf  # smaller, same widths

Types: F32, Q8_0, Q4_0, Q4_K_M (Q4_K everywhere but output and ffn_down, which are Q6_K, as
llama.cpp's Q4_K_M mix does for those two). Quantized blocks are random bytes whose scale fields
are set so that weights have a standard deviation of roughly 0.02 (no NaN or infinity can occur).
The vocabulary is a SentencePiece-style one: <unk>, <s>, </s>, 256 byte tokens, then "w<i>".

GGUF layout (v3, little endian): magic, version, tensor count, key-value count; the key-values;
the tensor infos (name, dims innermost first, type, offset); padding to the alignment (32); data.
Needs python3 and numpy only.
"""
import argparse
import struct
import sys

import numpy as np

ALIGN = 32

# GGUF value types
VT_U32, VT_I32, VT_F32, VT_BOOL, VT_STR, VT_ARR = 4, 5, 6, 7, 8, 9

# ggml tensor types: (type id, elements per block, bytes per block,
#                     [(byte offset of an f16 scale field, its value)])
QTYPES = {
    "F32": (0, 1, 4, []),
    "F16": (1, 1, 2, []),
    "Q4_0": (2, 32, 18, [(0, 0.02 / 4.6)]),
    "Q8_0": (8, 32, 34, [(0, 0.02 / 74.0)]),
    # Q4_K: d, dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles per 256 weights
    "Q4_K": (12, 256, 144, [(0, 0.02 / (32 * 4.6)), (2, 0.02 / (32 * 8.0))]),
    # Q6_K: 128 low nibbles, 64 high bit pairs, 16 int8 scales, then d
    "Q6_K": (14, 256, 210, [(208, 0.02 / (74 * 18.0))]),
}


class Gguf:
    """Collects key-values and tensors, then writes them in one pass."""

    def __init__(self):
        self.kv = []       # encoded key-value records
        self.tensors = []  # (name, dims, type name, data as bytes-like)

    @staticmethod
    def _str(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    def add(self, key, vtype, value):
        enc = {VT_U32: "<I", VT_I32: "<i", VT_F32: "<f", VT_BOOL: "<?"}
        body = self._str(value) if vtype == VT_STR else struct.pack(enc[vtype], value)
        self.kv.append(self._str(key) + struct.pack("<I", vtype) + body)

    def add_array(self, key, vtype, values):
        head = self._str(key) + struct.pack("<IIQ", VT_ARR, vtype, len(values))
        if vtype == VT_STR:
            body = b"".join(self._str(v) for v in values)
        else:
            body = np.asarray(values, dtype={VT_I32: "<i4", VT_F32: "<f4"}[vtype]).tobytes()
        self.kv.append(head + body)

    def tensor(self, name, dims, tname, data):
        self.tensors.append((name, dims, tname, data))

    def write(self, path):
        infos, offset = [], 0
        for name, dims, tname, data in self.tensors:
            info = self._str(name) + struct.pack("<I", len(dims))
            info += struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", QTYPES[tname][0], offset)
            infos.append(info)
            offset += (len(data) + ALIGN - 1) // ALIGN * ALIGN
        with open(path, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
            for rec in self.kv + infos:
                f.write(rec)
            f.write(b"\0" * (-f.tell() % ALIGN))
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * (-len(data) % ALIGN))


def random_tensor(rng, tname, rows, cols):
    """(rows, cols) weights of type tname as bytes: random blocks with fixed, small scales."""
    _, elems, nbytes, scales = QTYPES[tname]
    if tname in ("F32", "F16"):
        w = rng.standard_normal((rows, cols), dtype=np.float32) * 0.02
        return (w if tname == "F32" else w.astype(np.float16)).tobytes()
    assert cols % elems == 0, f"{cols} columns are not whole {tname} blocks"
    blocks = rng.integers(0, 256, size=(rows * cols // elems, nbytes), dtype=np.uint8)
    for off, value in scales:
        blocks[:, off:off + 2] = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)
    return blocks.tobytes()


def vocabulary(n):
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    toks += [f"w{i}" for i in range(n - len(toks))]
    types = [2, 3, 3] + [6] * 256 + [1] * (n - 259)      # unknown, control, byte, normal
    scores = [0.0] * 259 + [-float(i) for i in range(n - 259)]
    return toks, scores, types


def build(a):
    rng = np.random.default_rng(a.seed)
    g = Gguf()
    hd = a.dim // a.heads
    g.add("general.architecture", VT_STR, "llama")
    g.add("general.name", VT_STR, f"random-{a.type}")
    g.add("general.alignment", VT_U32, ALIGN)
    for key, val in [("context_length", a.ctx), ("embedding_length", a.dim), ("block_count", a.layers),
                     ("feed_forward_length", a.ffn), ("attention.head_count", a.heads),
                     ("attention.head_count_kv", a.kv_heads), ("rope.dimension_count", hd)]:
        g.add("llama." + key, VT_U32, val)
    g.add("llama.attention.layer_norm_rms_epsilon", VT_F32, 1e-5)
    g.add("llama.rope.freq_base", VT_F32, 10000.0)
    toks, scores, types = vocabulary(a.vocab)
    g.add("tokenizer.ggml.model", VT_STR, "llama")
    g.add_array("tokenizer.ggml.tokens", VT_STR, toks)
    g.add_array("tokenizer.ggml.scores", VT_F32, scores)
    g.add_array("tokenizer.ggml.token_type", VT_I32, types)
    for key, val in [("bos_token_id", 1), ("eos_token_id", 2), ("unknown_token_id", 0)]:
        g.add("tokenizer.ggml." + key, VT_U32, val)

    main = "Q4_K" if a.type == "Q4_K_M" else a.type
    head = "Q6_K" if a.type == "Q4_K_M" else a.type
    ones = np.ones(a.dim, np.float32).tobytes()
    kvd = a.kv_heads * hd
    g.tensor("token_embd.weight", [a.dim, a.vocab], main, random_tensor(rng, main, a.vocab, a.dim))
    for l in range(a.layers):
        p = f"blk.{l}."
        g.tensor(p + "attn_norm.weight", [a.dim], "F32", ones)
        for name, rows in [("attn_q", a.dim), ("attn_k", kvd), ("attn_v", kvd), ("attn_output", a.dim)]:
            g.tensor(p + name + ".weight", [a.dim, rows], main, random_tensor(rng, main, rows, a.dim))
        g.tensor(p + "ffn_norm.weight", [a.dim], "F32", ones)
        g.tensor(p + "ffn_gate.weight", [a.dim, a.ffn], main, random_tensor(rng, main, a.ffn, a.dim))
        g.tensor(p + "ffn_up.weight", [a.dim, a.ffn], main, random_tensor(rng, main, a.ffn, a.dim))
        g.tensor(p + "ffn_down.weight", [a.ffn, a.dim], head, random_tensor(rng, head, a.dim, a.ffn))
    g.tensor("output_norm.weight", [a.dim], "F32", ones)
    g.tensor("output.weight", [a.dim, a.vocab], head, random_tensor(rng, head, a.vocab, a.dim))
    return g


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--type", default="Q4_K_M", choices=["F32", "F16", "Q8_0", "Q4_0", "Q4_K_M"])
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.dim % a.heads or a.heads % a.kv_heads:
        sys.exit("make_model.py: --dim must divide by --heads, and --heads by --kv-heads")
    build(a).write(a.out)


if __name__ == "__main__":
    main()
