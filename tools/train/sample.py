#!/usr/bin/python3
"""sample.py - unedited samples from the exported GGUF, generated with the PyTorch model
(float32, weights as stored in the GGUF), for models/README.md.

Part of the attnd default-model pipeline (see tools/train/README.md).

Prompt ids = [BOS] + sentencepiece.encode(prompt).  Temperature 0 is greedy argmax;
temperature 0.8 samples from softmax(logits / 0.8) with a fixed torch seed (full
vocabulary, no top-k/top-p).  Generation stops at EOS or after --n tokens.
"""
import argparse
import json
import os

# sleep, don't spin, in OpenMP waits (the CPU is shared); set before numpy/torch load
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import sentencepiece as spm
import torch

from export import model_from_gguf

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")

PROMPTS = ["Fellow citizens of the Senate and House of Representatives:",
           "The state of the Union is",
           "Tonight, I ask the Congress to",
           "Our economy"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "attnd-sotu.gguf"))
    ap.add_argument("--tok", default=os.path.join(WORK, "tok.model"))
    ap.add_argument("--n", type=int, default=80)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(WORK, "samples.md"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    sp = spm.SentencePieceProcessor(model_file=args.tok)
    model, _ = model_from_gguf(args.model)
    lines = []
    for temp in (0.0, 0.8):
        for i, p in enumerate(PROMPTS):
            ids = [sp.bos_id()] + sp.encode(p)
            n = min(args.n, model.cfg.ctx - len(ids))
            out = model.generate(ids, n, temperature=temp, seed=args.seed + i)
            if sp.eos_id() in out:
                out = out[:out.index(sp.eos_id())]
            text = sp.decode(ids[1:] + out)
            hdr = f"temperature {temp}" + ("" if temp == 0 else f", seed {args.seed + i}")
            lines.append(f"* {hdr}, prompt {json.dumps(p)}:\n\n  > {text}\n")
            print(f"[{hdr}] {text}\n", flush=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
