#!/usr/bin/env python3
"""hf_tokenizer_gguf.py — a vocabulary-only GGUF from a Hugging Face tokenizer.json.

    tools/vocab/hf_tokenizer_gguf.py gemma3 tokenizer.json tokenizer_config.json OUT.gguf
    tools/vocab/hf_tokenizer_gguf.py gpt-oss tokenizer.json tokenizer_config.json OUT.gguf

Writes the tokenizer.* keys the way llama.cpp's convert_hf_to_gguf.py lays them out for these
families (GGUF v3, zero tensors, the llama.* hyper-parameters a vocab-only load wants):

gemma3   SentencePiece ("llama"), pre "default", add_space_prefix false, byte fallback. The
         tokenizer.json is HF's BPE rendering of the SentencePiece model: its merges list every
         way to cut each piece in two, in piece order, so a piece's score is minus the rank of
         the first merge that makes it. Added tokens: special or special-looking (<mask>,
         <unusedN>) ones are control, the others user-defined with U+2581 written as a space,
         score -1000, as the converter does. 262144 tokens (<image_soft_token> = 262144 is a
         vision-side id and is left out, as in released GGUFs).
gpt-oss  byte-level BPE ("gpt2"), pre "gpt-4o": o200k_base from tokenizer.json (200000 ids) grown
         to o200k_harmony's 201088 with its special tokens (control).
"""
import json
import struct
import sys

GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STR, GGUF_ARR = 4, 5, 6, 7, 8, 9
NORMAL, UNKNOWN, CONTROL, USER, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class Writer:
    def __init__(self):
        self.kv = []

    def add(self, key, kind, value, elem=None):
        self.kv.append((key, kind, value, elem))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8") if isinstance(s, str) else s
        return struct.pack("<Q", len(b)) + b

    def _val(self, kind, v, elem):
        if kind == GGUF_STR:
            return self._str(v)
        if kind == GGUF_ARR:
            head = struct.pack("<IQ", elem, len(v))
            if elem == GGUF_STR:
                return head + b"".join(self._str(x) for x in v)
            fmt = {GGUF_I32: "i", GGUF_F32: "f"}[elem]
            return head + struct.pack("<%d%s" % (len(v), fmt), *v)
        return struct.pack({GGUF_U32: "<I", GGUF_F32: "<f", GGUF_BOOL: "<?"}[kind], v)

    def write(self, path):
        out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(self.kv))]
        for key, kind, v, elem in self.kv:
            out += [self._str(key), struct.pack("<I", kind), self._val(kind, v, elem)]
        data = b"".join(out)
        data += b"\0" * (-len(data) % 32)
        with open(path, "wb") as f:
            f.write(data)


def vocab_writer(name, hp, model, pre, tokens):
    """A writer holding the llama header every vocab-only file carries (hp: its hyperparameters)
    and the vocabulary's model, pre-tokenizer and tokens."""
    w = Writer()
    w.add("general.architecture", GGUF_STR, "llama")
    w.add("general.name", GGUF_STR, name)
    w.add("general.alignment", GGUF_U32, 32)
    for k in ("context_length", "embedding_length", "block_count", "feed_forward_length",
              "rope.dimension_count", "attention.head_count", "attention.head_count_kv"):
        w.add("llama." + k, GGUF_U32, hp[k])
    w.add("llama.attention.layer_norm_rms_epsilon", GGUF_F32, 1e-6)
    w.add("llama.rope.freq_base", GGUF_F32, 10000.0)
    w.add("llama.vocab_size", GGUF_U32, len(tokens))
    w.add("tokenizer.ggml.model", GGUF_STR, model)
    w.add("tokenizer.ggml.pre", GGUF_STR, pre)
    w.add("tokenizer.ggml.tokens", GGUF_ARR, tokens, GGUF_STR)
    return w


def looks_special(s):
    # the converter's does_token_look_special, as far as these vocabularies reach
    return (s in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (s.startswith("<|") and s.endswith("|>"))
            or (s.startswith("<unused") and s.endswith(">")))


def gemma3(tj, cfg, out):
    n = 262144
    vocab = tj["model"]["vocab"]
    tokens = [None] * n
    for s, i in vocab.items():
        if i < n:
            tokens[i] = s
    assert all(t is not None for t in tokens), "gemma3: holes in the vocabulary"
    first = {}
    for r, m in enumerate(tj["model"]["merges"]):
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        first.setdefault(a + b, r)
    scores = [0.0] * n
    types = [NORMAL] * n
    for i, s in enumerate(tokens):
        if s in first:
            scores[i] = -float(first[s])
        if len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
            types[i] = BYTE
    for a in tj["added_tokens"]:
        i, s = a["id"], a["content"]
        if i >= n:
            continue
        if a["special"] or looks_special(s):
            types[i] = CONTROL
        else:
            types[i] = USER
            tokens[i] = s.replace("\u2581", " ")
        scores[i] = -1000.0
    w = vocab_writer("gemma3-spm (Gemma 3 tokenizer, vocab only)",
                     {"context_length": 32768, "embedding_length": 1024, "block_count": 26,
                      "feed_forward_length": 6912, "rope.dimension_count": 256, "attention.head_count": 4,
                      "attention.head_count_kv": 1},
                     "llama", "default", tokens)
    w.add("tokenizer.ggml.scores", GGUF_ARR, scores, GGUF_F32)
    w.add("tokenizer.ggml.token_type", GGUF_ARR, types, GGUF_I32)
    ids = {s: i for i, s in enumerate(tokens)}
    w.add("tokenizer.ggml.bos_token_id", GGUF_U32, ids[cfg["bos_token"]])
    w.add("tokenizer.ggml.eos_token_id", GGUF_U32, ids["<eos>"])
    w.add("tokenizer.ggml.unknown_token_id", GGUF_U32, ids[cfg["unk_token"]])
    w.add("tokenizer.ggml.padding_token_id", GGUF_U32, ids[cfg["pad_token"]])
    w.add("tokenizer.ggml.add_bos_token", GGUF_BOOL, bool(cfg.get("add_bos_token", True)))
    w.add("tokenizer.ggml.add_eos_token", GGUF_BOOL, bool(cfg.get("add_eos_token", False)))
    w.add("tokenizer.ggml.add_space_prefix", GGUF_BOOL, False)
    w.write(out)


# o200k_harmony's special tokens above o200k_base (ids 199998..201087); the rest are reserved.
HARMONY = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200003: "<|constrain|>",
           200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>",
           200012: "<|call|>", 200018: "<|endofprompt|>"}


def gpt_oss(tj, cfg, out):
    n = 201088
    tokens = [None] * n
    for s, i in tj["model"]["vocab"].items():
        tokens[i] = s
    types = [NORMAL] * n
    for i in range(199998, n):
        tokens[i] = HARMONY.get(i, "<|reserved_%d|>" % i)
        types[i] = CONTROL
    assert all(t is not None for t in tokens), "gpt-oss: holes in the vocabulary"
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w = vocab_writer("gpt-oss-bpe (o200k_harmony tokenizer, vocab only)",
                     {"context_length": 131072, "embedding_length": 4096, "block_count": 24,
                      "feed_forward_length": 2880, "rope.dimension_count": 64, "attention.head_count": 64,
                      "attention.head_count_kv": 8},
                     "gpt2", "gpt-4o", tokens)
    w.add("tokenizer.ggml.token_type", GGUF_ARR, types, GGUF_I32)
    w.add("tokenizer.ggml.merges", GGUF_ARR, merges, GGUF_STR)
    w.add("tokenizer.ggml.bos_token_id", GGUF_U32, 199998)
    w.add("tokenizer.ggml.eos_token_id", GGUF_U32, 200002)
    w.add("tokenizer.ggml.padding_token_id", GGUF_U32, 199999)
    w.add("tokenizer.ggml.add_bos_token", GGUF_BOOL, False)
    w.write(out)


def main(argv):
    if len(argv) != 5 or argv[1] not in ("gemma3", "gpt-oss"):
        sys.stderr.write(__doc__)
        return 2
    with open(argv[2], encoding="utf-8") as f:
        tj = json.load(f)
    with open(argv[3], encoding="utf-8") as f:
        cfg = json.load(f)
    (gemma3 if argv[1] == "gemma3" else gpt_oss)(tj, cfg, argv[4])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
