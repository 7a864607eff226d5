#!/usr/bin/env python3
"""tokenizer_vs_llamacpp.py — fuzz attnd's tokenizers against llama.cpp, side by side.

Generates random texts from a pool of tricky pieces (mixed scripts, combining marks, digits of
several kinds, Unicode white space, contractions, emoji sequences, special-token strings), then
tokenizes them with `attnd tokenize` and with llama.cpp (node-llama-cpp, see
../shared/peers/llamacpp/README.md; install it once and pass its folder) and prints the
disagreements. Qwen texts are NFC-normalised first, because attnd (like HF) normalises Qwen input
to NFC and llama.cpp does not; with --parse-special, Qwen's `</s>` is expected to differ
(llama.cpp retypes that normal token as control).

usage: tokenizer_vs_llamacpp.py --attnd build/attnd --peer /tmp/peer [--shared ../shared]
                                [--n 2000] [--seed 7] [--parse-special]
"""
import argparse, json, os, random, subprocess, sys, tempfile, unicodedata

POOL = list("abcXYZ  \t\n\r'sStTdDmMlLvVeErR0123456789.,;:!?-_()[]{}<>|/\\\"$+=^~@#%&*`") + [
    "'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t", " ", "  ", "\r\n", "\n\n", "\u00a0", "\u3000",
    "\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\u200b", "\u2009", "é", "e\u0301", "ñ", "ß", "İ", "ı",
    "ǅ", "ʰ", "ー", "々", "日本語", "中文", "한국어", "ㄱ", "ア", "Привет", "Ελλάδα", "עברית", "العربية", "\u064b",
    "हिन्दी", "\u093e", "ไทย", "½", "²", "³", "Ⅻ", "٣", "۴", "०", "𝟘", "①", "🙂", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷",
    "1\ufe0f\u20e3", "\ufffd", "\u00ad", "\u0300", "𝒜", "𐍈", "\U00020000", "©", "®", "™", "€", "£", "¥", "°", "±",
    "×", "÷", "§", "¶", "•", "…", "—", "–", "‘", "’", "“", "”", "«", "»", "¿", "¡", "<s>", "</s>",
    "<|endoftext|>", "<|im_start|>", "hello", "Hello", "WORLD", "don't", "I'M", "123456", "3.14159",
    "1,000,000", "http://x.io/a?b=c", "def f(x):\n    return x"]


def lines(b):
    return [json.loads(l) for l in b.decode().split("\n") if l]  # not splitlines: U+2028 is data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", required=True)
    ap.add_argument("--peer", required=True, help="folder with node-llama-cpp installed (tokenize.mjs)")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "../../../shared"))
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--parse-special", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    texts = ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 25))) for _ in range(a.n)]
    total_bad = 0
    for vocab in ["llama-spm", "llama3-bpe", "gpt2-bpe", "qwen2-bpe"]:
        model = os.path.join(a.shared, "tokenizers", vocab + ".gguf")
        ts = [unicodedata.normalize("NFC", t) for t in texts] if vocab == "qwen2-bpe" else texts
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for t in ts:
                f.write(json.dumps({"text": t}) + "\n")
            path = f.name
        peer_args = ["node", os.path.join(a.peer, "tokenize.mjs"), "--model", model, "--in", path]
        ours_args = [a.attnd, "tokenize", "--model", model]
        if a.parse_special:
            ours_args.append("--parse-special")
        else:
            peer_args.append("--no-parse-special")
            ours_args.append("--no-bos")
        ref = subprocess.run(peer_args, capture_output=True, cwd=a.peer)
        ours = subprocess.run(ours_args, stdin=open(path, "rb"), capture_output=True)
        os.unlink(path)
        key = "ids" if a.parse_special else "ids_nobos"
        refd = {r["text"]: r[key] for r in lines(ref.stdout)}  # the peer skips blank lines
        got = lines(ours.stdout)
        bad = [(t, refd[t], o["ids"]) for t, o in zip(ts, got) if t in refd and refd[t] != o["ids"]]
        expected = [b for b in bad if vocab == "qwen2-bpe" and a.parse_special and "</s>" in b[0]]
        print(f"{vocab}: {sum(t in refd for t in ts)} texts compared, {len(bad)} differ"
              + (f" ({len(expected)} of them the documented Qwen </s> retype)" if expected else ""))
        for t, r, o in [b for b in bad if b not in expected][:5]:
            print(f"  {t!r}\n    llama.cpp {r}\n    attnd     {o}")
        total_bad += len(bad) - len(expected)
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
