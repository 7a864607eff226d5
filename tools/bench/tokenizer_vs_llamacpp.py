#!/usr/bin/env python3
"""tokenizer_vs_llamacpp.py — fuzz attnd's tokenizers against llama.cpp, side by side.

Generates random texts from a pool of tricky pieces (mixed scripts, combining marks, digits of
several kinds, Unicode white space, contractions, emoji sequences, special-token strings), then
tokenizes them with `attnd tokenize` and with llama.cpp (node-llama-cpp, see
tools/peers/llamacpp; `tools/peers/llamacpp/install.sh` installs it and prints the folder to pass) and prints the
disagreements. Qwen texts are NFC-normalised first, because attnd (like HF) normalises Qwen input
to NFC and llama.cpp does not; with --parse-special, Qwen's `</s>` is expected to differ
(llama.cpp retypes that normal token as control).

With --pre-variants, it also writes copies of gpt2-bpe.gguf whose tokenizer.ggml.pre says
`default`, `smollm`, `llama-bpe` and `qwen2`, to check pre-tokenizers no fixture uses.

usage: tokenizer_vs_llamacpp.py --attnd build/attnd --peer /tmp/peer [--shared ../shared]
                                [--n 2000] [--seed 7] [--parse-special] [--pre-variants]
"""
import argparse, json, os, random, struct, subprocess, sys, tempfile, unicodedata

POOL = list("abcXYZ  \t\n\r'sStTdDmMlLvVeErR0123456789.,;:!?-_()[]{}<>|/\\\"$+=^~@#%&*`") + [
    "'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t", " ", "  ", "\r\n", "\n\n", "\u00a0", "\u3000",
    "\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\u200b", "\u2009", "é", "e\u0301", "ñ", "ß", "İ", "ı",
    "ǅ", "ʰ", "ー", "々", "日本語", "中文", "한국어", "ㄱ", "ア", "Привет", "Ελλάδα", "עברית", "العربية", "\u064b",
    "हिन्दी", "\u093e", "ไทย", "½", "²", "³", "Ⅻ", "٣", "۴", "०", "𝟘", "①", "🙂", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷",
    "1\ufe0f\u20e3", "\ufffd", "\u00ad", "\u0300", "𝒜", "𐍈", "\U00020000", "©", "®", "™", "€", "£", "¥", "°", "±",
    "×", "÷", "§", "¶", "•", "…", "—", "–", "‘", "’", "“", "”", "«", "»", "¿", "¡", "<s>", "</s>",
    "<|endoftext|>", "<|im_start|>", "hello", "Hello", "WORLD", "don't", "I'M", "123456", "3.14159",
    "1,000,000", "http://x.io/a?b=c", "def f(x):\n    return x"]


def rewrite_pre(src, dst, pre):
    """Copies a tensor-less GGUF, replacing the string value of tokenizer.ggml.pre."""
    b = open(src, "rb").read()
    ver, n_tensors, n_kv = struct.unpack_from("<IQQ", b, 4)
    assert n_tensors == 0, "only vocabulary-only GGUFs"
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    o = 24

    def skip(t):
        nonlocal o
        if t == 8:
            o += 8 + struct.unpack_from("<Q", b, o)[0]
        elif t == 9:
            et, n = struct.unpack_from("<IQ", b, o)
            o += 12
            if et in sizes:
                o += n * sizes[et]
            else:
                for _ in range(n):
                    skip(et)
        else:
            o += sizes[t]

    out = bytearray(b[:24])
    for _ in range(n_kv):
        start = o
        n = struct.unpack_from("<Q", b, o)[0]
        key = b[o + 8:o + 8 + n].decode()
        o += 8 + n
        t = struct.unpack_from("<I", b, o)[0]
        o += 4
        skip(t)
        if key == "tokenizer.ggml.pre":
            out += struct.pack("<Q", n) + key.encode() + struct.pack("<IQ", 8, len(pre)) + pre.encode()
        else:
            out += b[start:o]
    out += b"\0" * (-len(out) % 32)
    open(dst, "wb").write(out)


def lines(b):
    return [json.loads(l) for l in b.decode().split("\n") if l]  # not splitlines: U+2028 is data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", required=True)
    ap.add_argument("--peer", required=True, help="folder with node-llama-cpp installed (tokenize.mjs)")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "../../tests/data"))
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--parse-special", action="store_true")
    ap.add_argument("--pre-variants", action="store_true")
    ap.add_argument("--vocabs", default="llama-spm,llama3-bpe,gpt2-bpe,qwen2-bpe",
                    help="comma-separated fixtures of tests/data/tokenizers (also gemma3-spm, gpt-oss-bpe)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    texts = ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 25))) for _ in range(a.n)]
    total_bad = 0
    tmp = tempfile.mkdtemp()
    models = [(v, os.path.join(a.shared, "tokenizers", v + ".gguf"))
              for v in a.vocabs.split(",")]
    if a.pre_variants:
        for pre in ["default", "smollm", "llama-bpe", "qwen2"]:
            path = os.path.join(tmp, f"gpt2-pre-{pre}.gguf")
            rewrite_pre(os.path.join(a.shared, "tokenizers", "gpt2-bpe.gguf"), path, pre)
            models.append((f"gpt2-bpe with pre={pre}", path))
    for vocab, model in models:
        # NFC first wherever attnd normalises (pre qwen2) so both sides see the same text
        ts = [unicodedata.normalize("NFC", t) for t in texts] if "qwen2" in vocab else texts
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for t in ts:
                f.write(json.dumps({"text": t}) + "\n")
            path = f.name
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for t in ts:  # attnd tokenize --jsonl takes /tokenize bodies
                f.write(json.dumps({"content": t, "add_special": a.parse_special, "parse_special": a.parse_special}) + "\n")
            ours_path = f.name
        peer_args = ["node", os.path.join(a.peer, "tokenize.mjs"), "--model", model, "--in", path]
        ours_args = [a.attnd, "tokenize", "--model", model, "--jsonl"]
        ref = subprocess.run(peer_args, capture_output=True, cwd=a.peer)
        ours = subprocess.run(ours_args, stdin=open(ours_path, "rb"), capture_output=True)
        os.unlink(path)
        os.unlink(ours_path)
        # the peer (tools/peers/llamacpp/tokenize.mjs): ids = no specials, ids_with_special = BOS + parsed
        key = "ids_with_special" if a.parse_special else "ids"
        refd = {r["text"]: r[key] for r in lines(ref.stdout)}  # the peer skips blank lines
        got = lines(ours.stdout)
        bad = [(t, refd[t], o["tokens"]) for t, o in zip(ts, got) if t in refd and refd[t] != o["tokens"]]
        # documented: llama.cpp retypes Qwen's normal and Gemma's user-defined </s> as control
        expected = [b for b in bad if "</s>" in b[0] and (vocab == "gemma3-spm" or
                                                          (vocab == "qwen2-bpe" and a.parse_special))]
        print(f"{vocab}: {sum(t in refd for t in ts)} texts compared, {len(bad)} differ"
              + (f" ({len(expected)} of them the documented </s> retype)" if expected else ""))
        for t, r, o in [b for b in bad if b not in expected][:5]:
            print(f"  {t!r}\n    llama.cpp {r}\n    attnd     {o}")
        total_bad += len(bad) - len(expected)
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
