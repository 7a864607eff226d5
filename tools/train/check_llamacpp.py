#!/usr/bin/python3
"""check_llamacpp.py - independent check of the exported GGUF against llama.cpp.

Part of the attnd default-model pipeline (see tools/train/README.md).

1. Tokenizer: llama.cpp's tokenization (node tokenize.mjs) of the held-out speeches and
   a few edge-case strings must equal [BOS] + sentencepiece.encode(text).
2. Model: greedy continuations from the same prompt ids, computed by our PyTorch model
   (float32, weights loaded from the GGUF as stored) and by llama.cpp (node generate.mjs
   --flash-attn off --kv-type f32), must agree; at a divergence the PyTorch top-1/top-2
   logit gap is printed (a near-tie explains a divergence, a large gap is a bug).

Needs the llama.cpp peer installed (tools/peers/llamacpp/install.sh prints its folder);
pass its folder with --peer or LLAMACPP_PEER.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# sleep, don't spin, in OpenMP waits (the CPU is shared); set before numpy/torch load
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import sentencepiece as spm
import torch

import chat
from export import model_from_gguf

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")

PROMPTS = ["Fellow citizens", "The state of the Union is",
           "We must continue to strengthen our economy and",
           "In 1999, the Congress appropriated $12,000,000 for"]
CHATS = [[{"role": "user", "content": "What is the state of the Union?"}],
         [{"role": "system", "content": "You are a helpful assistant."},
          {"role": "user", "content": "Tell me about the tariff."},
          {"role": "assistant", "content": "The tariff is  high.\nIt is."},
          {"role": "user", "content": "and  the Navy?"}]]
EDGE = ["Hello  world", "  leading spaces", "tabs\there", "line one\nline two\n\nend",
        "Zürich — “quoted” café 😀", "1234567890", "a.b,c;d:e!f?g", "", " "]


def node(peer, script, *args):
    r = subprocess.run(["node", os.path.join(peer, script), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{script} failed: {r.stderr[-2000:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "attnd-sotu.gguf"))
    ap.add_argument("--tok", default=os.path.join(WORK, "tok.model"))
    ap.add_argument("--peer", default=os.environ.get("LLAMACPP_PEER", "/tmp/llpeer"))
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--out", default=None, help="write the result as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(2)
    sp = spm.SentencePieceProcessor(model_file=args.tok)
    model, kv = model_from_gguf(args.model)
    ctx = model.cfg.ctx
    result = {"tokenizer": [], "greedy": []}
    ok = True

    # 1. tokenizer
    split = json.load(open(os.path.join(WORK, "split.json")))
    texts = [open(os.path.join(WORK, "package", "data", n), encoding="utf-8").read() for n in split["test"]]
    texts += EDGE + PROMPTS
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
        path = f.name
    out = [json.loads(l) for l in node(args.peer, "tokenize.mjs", "--model", args.model, "--in", path).splitlines() if l.strip()]
    os.unlink(path)
    # tokenize.mjs skips blank input lines; match by text
    by_text = {o["text"]: o for o in out}
    n_same = 0
    for t in texts:
        if t not in by_text:
            continue
        ours = [sp.bos_id()] + sp.encode(t)
        same = by_text[t]["ids_with_special"] == ours
        n_same += same
        if not same:
            ok = False
            a, b = by_text[t]["ids_with_special"], ours
            i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            print(f"TOKENIZER MISMATCH on {t[:40]!r}: first diff at {i}: llama.cpp {a[i:i + 8]} ours {b[i:i + 8]}")
    print(f"tokenizer: {n_same}/{len(by_text)} texts tokenized identically "
          f"({sum(len(o['ids_with_special']) for o in out)} tokens)")
    result["tokenizer"] = {"texts": len(by_text), "identical": n_same}

    # 1b. a rendered ChatML conversation (v2): llama.cpp with parse_special must produce the
    # ids the training dialogues were made with (chat.encode_chat)
    prompts = [[sp.bos_id()] + sp.encode(p) for p in PROMPTS]
    if model.cfg.vocab == sp.get_piece_size() + len(chat.SPECIALS):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for c in CHATS:
                f.write(json.dumps({"text": chat.render(c, add_generation_prompt=True)}) + "\n")
            path = f.name
        out = [json.loads(l) for l in node(args.peer, "tokenize.mjs", "--model", args.model, "--in", path).splitlines() if l.strip()]
        os.unlink(path)
        n_chat = 0
        for c, o in zip(CHATS, out):
            ours, _ = chat.encode_chat(sp, c, add_generation_prompt=True)
            n_chat += o["ids_with_special"] == ours
            if o["ids_with_special"] != ours:
                ok = False
                print(f"CHAT TOKENIZER MISMATCH: llama.cpp {o['ids_with_special']}\n  ours {ours}")
            prompts.append(ours)
        print(f"chat tokenizer: {n_chat}/{len(CHATS)} rendered ChatML conversations tokenized identically")
        result["chat_tokenizer"] = {"texts": len(CHATS), "identical": n_chat}

    # 2. greedy agreement
    for ids in prompts:
        p = chat.decode(sp, ids[1:])
        ours = model.generate(ids, args.n)
        js = json.loads(node(args.peer, "generate.mjs", "--model", args.model, "--tokens",
                             ",".join(map(str, ids)), "--n", str(args.n), "--threads", "1",
                             "--ctx", str(ctx), "--flash-attn", "off", "--kv-type", "f32", "--json"))
        theirs = js["tokens"]
        agree = 0
        while agree < min(len(ours), len(theirs)) and ours[agree] == theirs[agree]:
            agree += 1
        rec = {"prompt": p, "prompt_ids": ids, "n": args.n, "agree": agree, "torch": ours, "llamacpp": theirs}
        msg = f"greedy {p!r}: {agree}/{args.n} tokens agree"
        if agree < args.n:
            with torch.no_grad():
                logits = model(torch.tensor([(ids + ours[:agree])[-ctx:]]))[0, -1]
            top = torch.topk(logits, 2).values
            rec["gap_at_divergence"] = float(top[0] - top[1])
            msg += f"; diverge at {agree}, torch top1-top2 gap {rec['gap_at_divergence']:.4f}"
            if rec["gap_at_divergence"] > 0.05:
                ok = False
        print(msg)
        print("   torch :", repr(chat.decode(sp, ours)))
        print("   llama :", repr(js["text"]))
        result["greedy"].append(rec)
    result["ok"] = ok
    if args.out:
        json.dump(result, open(args.out, "w"), indent=1)
    print("CHECK", "PASSED" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
