#!/usr/bin/env python3
"""gemma4_bpe_from_spm.py — a Gemma 4 style vocabulary (tokenizer.ggml.model "gemma4": BPE over
raw UTF-8 with U+2581 for spaces and <0xXX> byte fallback) from a SentencePiece vocabulary GGUF.

    tools/vocab/gemma4_bpe_from_spm.py tests/data/tokenizers/gemma3-spm.gguf N OUT.gguf

Gemma 4's converter writes the checkpoint's tokenizer.json (HF's BPE rendering of Gemma's
SentencePiece model) as merges. This rebuilds such a vocabulary from Gemma 3's: its first N ids
(the specials, the 256 byte tokens, then the pieces in score order), then every single-character
piece of the rest (SentencePiece ranks most characters last; BPE starts from them), Gemma 4's
chat tokens appended (control; the ones its converter keeps visible user-defined), and as merges, piece by
piece in id order, every cut of a piece into two kept tokens ("left right"), as HF's extractor
lists them. The test suite compares attnd's tokenizer with llama.cpp's on this file
(tests/data/tokenizers/regenerate-gemma4.sh); the released 262k-token file is not needed.
"""
import struct
import sys
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_tokenizer_gguf import (Writer, GGUF_U32, GGUF_F32, GGUF_BOOL, GGUF_STR, GGUF_ARR, GGUF_I32,  # noqa: E402
                               NORMAL, CONTROL, USER, BYTE)

GEMMA4_CONTROL = ["<|turn>", "<turn|>", "<|think|>", "<|tool>", "<tool|>", "<|image|>", "<|audio|>"]
GEMMA4_VISIBLE = ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                  "<tool_response|>", '<|"|>']


def read_kv(path):
    d = open(path, "rb").read()
    o = 4
    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def take(fmt):
        nonlocal o
        v = struct.unpack_from("<" + fmt, d, o)[0]
        o += struct.calcsize("<" + fmt)
        return v

    def text():
        nonlocal o
        n = take("Q")
        o += n
        return d[o - n:o].decode("utf-8")

    def value(t):
        if t == 8:
            return text()
        if t == 9:
            et, n = take("I"), take("Q")
            return [text() if et == 8 else take(scal[et]) for _ in range(n)]
        return take(scal[t])

    assert d[:4] == b"GGUF"
    take("I"), take("Q")
    return {text(): value(take("I")) for _ in range(take("Q"))}


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    kv = read_kv(argv[1])
    n = int(argv[2])
    all_tokens, all_types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    tokens, types = all_tokens[:n], all_types[:n]
    for t, ty in zip(all_tokens[n:], all_types[n:]):
        if ty == NORMAL and len(t) == 1:
            tokens.append(t)
            types.append(ty)
    for t in GEMMA4_CONTROL + GEMMA4_VISIBLE:
        tokens.append(t)
        types.append(CONTROL if t in GEMMA4_CONTROL else USER)
    ids = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, t in enumerate(tokens):
        if types[i] != NORMAL or len(t) < 2:
            continue
        for k in range(1, len(t)):
            if t[:k] in ids and t[k:] in ids:
                merges.append(t[:k] + " " + t[k:])
    w = Writer()
    w.add("general.architecture", GGUF_STR, "llama")
    w.add("general.name", GGUF_STR, "gemma4-bpe (Gemma 3's first %d pieces as a Gemma 4 BPE vocabulary)" % n)
    w.add("general.alignment", GGUF_U32, 32)
    for k, v in (("context_length", 32768), ("embedding_length", 1024), ("block_count", 26),
                 ("feed_forward_length", 6912), ("rope.dimension_count", 256), ("attention.head_count", 4),
                 ("attention.head_count_kv", 1)):
        w.add("llama." + k, GGUF_U32, v)
    w.add("llama.attention.layer_norm_rms_epsilon", GGUF_F32, 1e-6)
    w.add("llama.rope.freq_base", GGUF_F32, 10000.0)
    w.add("llama.vocab_size", GGUF_U32, len(tokens))
    w.add("tokenizer.ggml.model", GGUF_STR, "gemma4")
    w.add("tokenizer.ggml.tokens", GGUF_ARR, tokens, GGUF_STR)
    w.add("tokenizer.ggml.token_type", GGUF_ARR, types, GGUF_I32)
    w.add("tokenizer.ggml.merges", GGUF_ARR, merges, GGUF_STR)
    w.add("tokenizer.ggml.bos_token_id", GGUF_U32, 2)
    w.add("tokenizer.ggml.eos_token_id", GGUF_U32, 1)
    w.add("tokenizer.ggml.unknown_token_id", GGUF_U32, 3)
    w.add("tokenizer.ggml.padding_token_id", GGUF_U32, 0)
    w.add("tokenizer.ggml.add_bos_token", GGUF_BOOL, True)
    w.add("tokenizer.ggml.add_space_prefix", GGUF_BOOL, False)
    w.write(argv[3])
    sys.stderr.write("%s: %d tokens, %d merges\n" % (argv[3], len(tokens), len(merges)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
