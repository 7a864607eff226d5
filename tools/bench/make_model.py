#!/usr/bin/env python3
"""make_model.py — writes a GGUF with random weights of a given shape and weight type, for speed
measurements (the text such a model produces is meaningless; the time it takes is that of a real
model of that shape).

    python3 tools/bench/make_model.py --type Q4_K_M OUT.gguf           # TinyLlama-1.1B shape
    python3 tools/bench/make_model.py --type Q8_0 --layers 2 OUT.gguf  # smaller, same widths
    python3 tools/bench/make_model.py --shape qwen3-1.7b OUT.gguf      # a released model's shape
    python3 tools/bench/make_model.py --shape qwen3-30b-a3b --layers 12 OUT.gguf   # MoE, 5 GB

Shapes (--shape; the other options override its values): tinyllama (llama, the default),
qwen2.5-0.5b (qwen2: 24 layers, 896 wide, 14/2 heads of 64, q/k/v biases, FFN 4864, tied, vocab
151936; 896 is no multiple of 256, so K-quant mixes take their fallbacks), qwen3-1.7b (qwen3: 28
layers, 2048 wide, 16/8 heads of 128, QK-norm, FFN 6144, tied, vocab 151936), gemma3-1b (gemma3: 26
layers, 1152 wide, 4/1 heads of 256, window 512 on 5 of 6 layers, FFN 6912, tied, vocab 262144),
qwen3-30b-a3b (qwen3moe: 48 layers, 2048 wide, 32/4 heads of 128, 128 experts of 768, 8 per token,
vocab 151936; about 390 MB a layer in Q4_K_M, so fewer layers fit this machine). --experts,
--experts-used and --expert-ffn override a MoE shape's experts (and --head-dim the head width), e.g.
for a smaller file of the same widths.

The newer families' released shapes (tools/bench/family_shapes.py writes them; only --type,
--layers and --seed apply, and --reads FILE writes the bytes one decode token reads of the file):
qwen3.6-35b-a3b (qwen35moe), qwen3.6-27b (qwen35), gemma4-26b-a4b, gemma4-e4b (gemma4) and
glm-4.7-flash (deepseek2), 4 layers unless --layers says otherwise (E4B: its 42), e.g.

    python3 tools/bench/make_model.py --shape glm-4.7-flash --reads glm.reads glm.gguf   # 1.7 GB

Types: F32, Q8_0, Q4_0, Q4_K_M (Q4_K everywhere but output and ffn_down, which are Q6_K, as
llama.cpp's Q4_K_M mix does for those two; a matrix whose rows are not whole 256-blocks takes
llama.cpp's fallback, Q5_0 for Q4_K and Q8_0 for Q6_K; norms and the MoE router stay F32). Quantized blocks are random bytes whose scale fields
are set so that weights have a standard deviation of roughly 0.02 (no NaN or infinity can occur).
The vocabulary is a SentencePiece-style one: <unk>, <s>, </s>, 256 byte tokens, then "w<i>";
--tokenizer TOK.gguf takes a real one instead (every tokenizer.* key of that GGUF, e.g. the 32k
SentencePiece or the 151,936-token qwen2 BPE vocabularies of tests/data/tokenizers), so that text
such as JSON tokenizes as it would for a real model (tools/bench/grammar_vs_llamacpp.sh).

--successors "0,0.5,0.9" (F16 or F32 only; the built-in vocabulary) writes a synthetic stand-in
for a real model and its quantized copies, for speculative decoding (tools/bench/spec.sh): a model
whose greedy output a quantized copy reproduces about as often as the share asked. The normal
tokens (259 on) are cut into one region per share, in order. The width is split in two halves:
the output rows read only the second. Region r has a direction v_r (second half, orthonormal),
which every embedding of the region carries (8 per element) and every output row of the region
reads (0.5 v_r): the next token stays in the region. A share s of the region's tokens is
"structured": its embedding carries a direction u_i of its own in the second half (16 per element;
orthogonal to every v_r), and the output row of its successor pi(i) (pi: a random permutation of
the region) reads it (1.0 u_i). After a structured token its successor wins by ~39 logits, far
above what quantization moves. The other tokens carry a direction of their own in the first half
(8 per element), which makes the 22 random layers' input theirs but which no output row reads:
every row of the region gets the same boost, and the argmax is decided by what the layers add, a
near-tie that a Q4_0 or Q2_K copy breaks another way almost always (as for a random model). So a
quantized draft agrees with the target on about a share s of the tokens after a prompt in that
region (plus a few % by chance), and the layers cost what a real model's do. Output rows are
random (0.02) in the second half, off every v_r; tokens outside the regions have random (0.02)
embeddings. It is not a language model: its text means nothing.

GGUF layout (v3, little endian): magic, version, tensor count, key-value count; the key-values;
the tensor infos (name, dims innermost first, type, offset); padding to the alignment (32); data.
Needs python3 and numpy only.
"""
import argparse
import struct
import sys

import numpy as np

import family_shapes

ALIGN = 32

# GGUF value types
VT_U32, VT_I32, VT_F32, VT_BOOL, VT_STR, VT_ARR = 4, 5, 6, 7, 8, 9

# ggml tensor types: (type id, elements per block, bytes per block,
#                     [(byte offset of an f16 scale field, its value)])
QTYPES = {
    "F32": (0, 1, 4, []),
    "F16": (1, 1, 2, []),
    "Q4_0": (2, 32, 18, [(0, 0.02 / 4.6)]),
    # Q5_0: d, 4 bytes of high bits, 16 bytes of nibbles per 32 weights
    "Q5_0": (6, 32, 22, [(0, 0.02 / 9.2)]),
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
            body = np.asarray(values, dtype={VT_I32: "<i4", VT_F32: "<f4", VT_BOOL: "u1"}[vtype]).tobytes()
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


# GGUF scalar value types and their struct formats (8: string, 9: array)
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def tokenizer_records(path):
    """The raw key-value records of path whose key starts with "tokenizer.", and the token count."""
    data = open(path, "rb").read()
    if data[:4] != b"GGUF":
        sys.exit(f"make_model.py: {path} is not a GGUF file")
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    pos, records, n_tokens = 24, [], 0

    def skip(vtype, pos, count_out=None):
        if vtype == VT_STR:
            return pos + 8 + struct.unpack_from("<Q", data, pos)[0]
        if vtype == VT_ARR:
            etype, n = struct.unpack_from("<IQ", data, pos)
            if count_out is not None:
                count_out.append(n)
            pos += 12
            if etype in SCALARS:
                return pos + n * struct.calcsize(SCALARS[etype])
            for _ in range(n):
                pos = skip(etype, pos)
            return pos
        return pos + struct.calcsize(SCALARS[vtype])

    for _ in range(n_kv):
        start = pos
        klen = struct.unpack_from("<Q", data, pos)[0]
        key = data[pos + 8:pos + 8 + klen].decode()
        vtype = struct.unpack_from("<I", data, pos + 8 + klen)[0]
        count = []
        pos = skip(vtype, pos + 12 + klen, count)
        if key.startswith("tokenizer."):
            records.append(data[start:pos])
            if key == "tokenizer.ggml.tokens":
                n_tokens = count[0]
    if not n_tokens:
        sys.exit(f"make_model.py: {path} has no tokenizer.ggml.tokens")
    return records, n_tokens


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


SHAPES = {
    "tinyllama": dict(arch="llama", dim=2048, ffn=5632, layers=22, heads=32, kv_heads=4, vocab=32000, ctx=2048),
    "qwen3-1.7b": dict(arch="qwen3", dim=2048, ffn=6144, layers=28, heads=16, kv_heads=8, head_dim=128,
                       vocab=151936, ctx=40960, rope_base=1e6, tied=True),
    "qwen2.5-0.5b": dict(arch="qwen2", dim=896, ffn=4864, layers=24, heads=14, kv_heads=2, head_dim=64,
                         vocab=151936, ctx=32768, rope_base=1e6, tied=True),
    "gemma3-1b": dict(arch="gemma3", dim=1152, ffn=6912, layers=26, heads=4, kv_heads=1, head_dim=256,
                      vocab=262144, ctx=32768, rope_base=1e6, tied=True, window=512),
    "qwen3-30b-a3b": dict(arch="qwen3moe", dim=2048, ffn=6144, layers=48, heads=32, kv_heads=4, head_dim=128,
                          vocab=151936, ctx=40960, rope_base=1e6, experts=128, experts_used=8, expert_ffn=768),
}


def qtype(tname, cols):
    """llama.cpp's fallback for a matrix whose rows are not whole 256-element blocks."""
    if cols % 256 == 0:
        return tname
    return {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}.get(tname, tname)


def mat(g, rng, name, tname, rows, cols, n_expert=0):
    t = qtype(tname, cols)
    if n_expert:
        g.tensor(name, [cols, rows, n_expert], t, random_tensor(rng, t, rows * n_expert, cols))
    else:
        g.tensor(name, [cols, rows], t, random_tensor(rng, t, rows, cols))


def keys(g, a, hd):
    arch = a.arch
    g.add("general.architecture", VT_STR, arch)
    g.add("general.name", VT_STR, f"random-{a.shape}-{a.type}")
    g.add("general.alignment", VT_U32, ALIGN)
    kv = [("context_length", a.ctx), ("embedding_length", a.dim), ("block_count", a.layers),
          ("feed_forward_length", a.ffn), ("attention.head_count", a.heads),
          ("attention.head_count_kv", a.kv_heads), ("rope.dimension_count", hd)]
    if a.head_dim:
        kv += [("attention.key_length", hd), ("attention.value_length", hd)]
    if a.window:
        kv += [("attention.sliding_window", a.window)]
    if a.experts:
        kv += [("expert_count", a.experts), ("expert_used_count", a.experts_used),
               ("expert_feed_forward_length", a.expert_ffn)]
    for key, val in kv:
        g.add(f"{arch}.{key}", VT_U32, val)
    g.add(f"{arch}.attention.layer_norm_rms_epsilon", VT_F32, 1e-6 if arch != "llama" else 1e-5)
    g.add(f"{arch}.rope.freq_base", VT_F32, a.rope_base)
    if a.tokenizer:
        records, a.vocab = tokenizer_records(a.tokenizer)
        g.kv.extend(records)
    else:
        toks, scores, types = vocabulary(a.vocab)
        g.add("tokenizer.ggml.model", VT_STR, "llama")
        g.add_array("tokenizer.ggml.tokens", VT_STR, toks)
        g.add_array("tokenizer.ggml.scores", VT_F32, scores)
        g.add_array("tokenizer.ggml.token_type", VT_I32, types)
        for key, val in [("bos_token_id", 1), ("eos_token_id", 2), ("unknown_token_id", 0)]:
            g.add("tokenizer.ggml." + key, VT_U32, val)


SUCC_FIRST = 259  # the first normal token of vocabulary(): <unk>, <s>, </s>, 256 bytes before it
SUCC_EMBD_REGION, SUCC_EMBD_OWN = 0.5, 4.0  # per element, in units of the layers' residual: v_r, own direction
SUCC_OUT_REGION, SUCC_OUT_OWN = 4.0, 1.0    # norm of v_r and u_i in an output row


def successor_heads(a, rng):
    """token_embd and output (vocab, dim) float32 of --successors (the docstring above)."""
    shares = a.successors
    n, d, half = a.vocab, a.dim, a.dim // 2
    resid = 0.02 * np.sqrt(d * a.layers)  # roughly what the random layers add to the residual, per element
    width = (n - SUCC_FIRST) // len(shares)
    v = np.zeros((len(shares), d), np.float32)  # (regions, dim): orthonormal, second half
    v[:, half:] = np.linalg.qr(rng.standard_normal((d - half, len(shares))))[0].T

    def unit_second_half(rows):  # random unit rows in the second half, off every v_r
        x = np.zeros((rows, d), np.float32)
        x[:, half:] = rng.standard_normal((rows, d - half), dtype=np.float32)
        x -= (x @ v.T) @ v
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    embd = rng.standard_normal((n, d), dtype=np.float32) * 0.02
    out = unit_second_half(n) * (0.02 * np.sqrt(d - half))
    for r, share in enumerate(shares):
        ids = SUCC_FIRST + r * width + np.arange(width)
        structured = rng.random(width) < share
        own = unit_second_half(width)
        first = rng.standard_normal((width, half), dtype=np.float32)
        own[~structured] = 0
        own[~structured, :half] = (first / np.linalg.norm(first, axis=1, keepdims=True))[~structured]
        embd[ids] = np.sqrt(d) * resid * (SUCC_EMBD_REGION * v[r] + SUCC_EMBD_OWN * own)
        out[ids] += SUCC_OUT_REGION * v[r]
        succ = ids[rng.permutation(width)]
        out[succ[structured]] += SUCC_OUT_OWN * own[structured]
        print(f"make_model.py: region {r}: tokens {ids[0]}..{ids[-1]}, {structured.mean():.3f} structured",
              file=sys.stderr)
    return embd, out


def head_tensor(g, name, tname, w):
    g.tensor(name, [w.shape[1], w.shape[0]], tname, (w if tname == "F32" else w.astype(np.float16)).tobytes())


def build(a):
    rng = np.random.default_rng(a.seed)
    g = Gguf()
    hd = a.head_dim or a.dim // a.heads
    keys(g, a, hd)
    main = "Q4_K" if a.type == "Q4_K_M" else a.type
    head = "Q6_K" if a.type == "Q4_K_M" else a.type
    ones = np.ones(a.dim, np.float32).tobytes()
    qd, kvd = a.heads * hd, a.kv_heads * hd
    qk_norm = a.arch in ("qwen3", "gemma3", "qwen3moe")
    heads = successor_heads(a, np.random.default_rng(a.seed + 1)) if a.successors else None
    # tied: the embedding is also the output head, so it takes the head's type
    if heads:
        head_tensor(g, "token_embd.weight", main, heads[0])
    else:
        mat(g, rng, "token_embd.weight", head if a.tied else main, a.vocab, a.dim)
    for l in range(a.layers):
        p = f"blk.{l}."
        g.tensor(p + "attn_norm.weight", [a.dim], "F32", ones)
        for name, rows, cols in [("attn_q", qd, a.dim), ("attn_k", kvd, a.dim), ("attn_v", kvd, a.dim),
                                 ("attn_output", a.dim, qd)]:
            mat(g, rng, p + name + ".weight", main, rows, cols)
            if a.arch == "qwen2" and name != "attn_output":  # qwen2's q, k and v carry a bias
                bias = (rng.standard_normal(rows, dtype=np.float32) * 0.02).tobytes()
                g.tensor(p + name + ".bias", [rows], "F32", bias)
        if qk_norm:
            for name in ("attn_q_norm", "attn_k_norm"):
                g.tensor(p + name + ".weight", [hd], "F32", np.ones(hd, np.float32).tobytes())
        if a.arch == "gemma3":
            g.tensor(p + "post_attention_norm.weight", [a.dim], "F32", ones)
            g.tensor(p + "post_ffw_norm.weight", [a.dim], "F32", ones)
        g.tensor(p + "ffn_norm.weight", [a.dim], "F32", ones)
        if a.experts:
            router = (rng.standard_normal((a.experts, a.dim), dtype=np.float32) * 0.02).tobytes()
            g.tensor(p + "ffn_gate_inp.weight", [a.dim, a.experts], "F32", router)
            mat(g, rng, p + "ffn_gate_exps.weight", main, a.expert_ffn, a.dim, a.experts)
            mat(g, rng, p + "ffn_up_exps.weight", main, a.expert_ffn, a.dim, a.experts)
            mat(g, rng, p + "ffn_down_exps.weight", head, a.dim, a.expert_ffn, a.experts)
        else:
            mat(g, rng, p + "ffn_gate.weight", main, a.ffn, a.dim)
            mat(g, rng, p + "ffn_up.weight", main, a.ffn, a.dim)
            mat(g, rng, p + "ffn_down.weight", head, a.dim, a.ffn)
    g.tensor("output_norm.weight", [a.dim], "F32", ones)
    if heads:
        head_tensor(g, "output.weight", head, heads[1])
    elif not a.tied:
        mat(g, rng, "output.weight", head, a.vocab, a.dim)
    return g


def family(a):
    """A shape of family_shapes.py: only --type, --layers, --seed, --tokenizer and --reads apply."""
    shape = family_shapes.FAMILY_SHAPES[a.shape]
    a.layers = a.layers or shape["reduced"]
    a.vocab = shape["vocab"]
    if a.tokenizer:
        a.tok_records, a.vocab = tokenizer_records(a.tokenizer)
    if a.layers < 2 or a.layers > shape["layers"]:
        sys.exit(f"make_model.py: --layers for {a.shape} takes 2..{shape['layers']}")
    g = Gguf()
    read = family_shapes.build_family(sys.modules[__name__], a, g, np.random.default_rng(a.seed))
    g.write(a.out)
    if a.reads:
        with open(a.reads, "w") as f:
            f.write(f"{read:.0f}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--type", default="Q4_K_M", choices=["F32", "F16", "Q8_0", "Q4_0", "Q4_K_M"])
    ap.add_argument("--shape", default="tinyllama", choices=sorted(SHAPES) + sorted(family_shapes.FAMILY_SHAPES))
    for opt in ("dim", "ffn", "layers", "heads", "kv-heads", "head-dim", "vocab", "ctx", "experts", "experts-used",
                "expert-ffn"):
        ap.add_argument("--" + opt, type=int)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tokenizer", help="take the vocabulary (every tokenizer.* key) of this GGUF; sets --vocab")
    ap.add_argument("--successors", help="comma-separated shares of structured tokens, one region each (see above)")
    ap.add_argument("--reads", help="(newer families' shapes) write the bytes a decode token reads to this file")
    a = ap.parse_args()
    if a.shape in family_shapes.FAMILY_SHAPES:
        family(a)
        return
    shape = dict(head_dim=0, rope_base=10000.0, tied=False, window=0, experts=0, experts_used=0, expert_ffn=0)
    shape.update(SHAPES[a.shape])
    for k, v in shape.items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    if a.dim % a.heads or a.heads % a.kv_heads:
        sys.exit("make_model.py: --dim must divide by --heads, and --heads by --kv-heads")
    if a.experts and not 0 < a.experts_used <= a.experts:
        sys.exit("make_model.py: --experts-used must be 1..--experts")
    if a.successors:
        try:
            a.successors = [float(x) for x in a.successors.split(",")]
        except ValueError:
            sys.exit(f"make_model.py: --successors {a.successors!r} is not a list of numbers")
        if not all(0 <= x <= 1 for x in a.successors) or len(a.successors) > 64:
            sys.exit("make_model.py: --successors takes 1..64 shares within 0..1")
        if a.type not in ("F16", "F32") or a.tied or a.tokenizer or a.vocab - SUCC_FIRST < 64 * len(a.successors):
            sys.exit("make_model.py: --successors needs --type F16 or F32, an untied head, the built-in vocabulary "
                     "and 64+ normal tokens a region")
    build(a).write(a.out)


if __name__ == "__main__":
    main()
