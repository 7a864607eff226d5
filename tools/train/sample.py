#!/usr/bin/python3
"""sample.py - unedited samples from the exported GGUF, generated with the PyTorch model
(float32, weights as stored in the GGUF), for models/README.md.

Part of the attnd default-model pipeline (see tools/train/README.md).

Prompt ids = [BOS] + sentencepiece.encode(prompt).  Temperature 0 is greedy argmax;
temperature 0.8 samples from softmax(logits / 0.8) with a fixed torch seed (full
vocabulary, no top-k/top-p).  Generation stops at EOS or after --n tokens.
For a model with the ChatML markers (v2), chat samples too: the prompt is the conversation
rendered and tokenized as attnd and llama.cpp do (chat.py, with the assistant-turn opening),
and generation stops at <|im_end|> (or EOS).
"""
import argparse
import json
import os

# sleep, don't spin, in OpenMP waits (the CPU is shared); set before numpy/torch load
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import sentencepiece as spm
import torch

import chat
from export import model_from_gguf

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")

PROMPTS = ["Fellow citizens of the Senate and House of Representatives:",
           "The state of the Union is",
           "Tonight, I ask the Congress to",
           "Our economy"]
QUESTIONS = ["What is the state of the Union?",
             "What should we do about education?",
             "Tell me about the tariff.",
             "What can you tell me about the Navy?"]


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
            text = chat.decode(sp, ids[1:] + out)
            hdr = f"temperature {temp}" + ("" if temp == 0 else f", seed {args.seed + i}")
            lines.append(f"* {hdr}, prompt {json.dumps(p)}:\n\n  > {text}\n")
            print(f"[{hdr}] {text}\n", flush=True)
    if model.cfg.vocab == sp.get_piece_size() + len(chat.SPECIALS):
        _, im_end = chat.special_ids(sp)
        for temp in (0.0, 0.8):
            for i, q in enumerate(QUESTIONS):
                ids, _ = chat.encode_chat(sp, [{"role": "user", "content": q}], add_generation_prompt=True)
                out = model.generate(ids, min(args.n, model.cfg.ctx - len(ids)), temperature=temp,
                                     seed=args.seed + i)
                stop = [k for k, t in enumerate(out) if t in (im_end, sp.eos_id())]
                out = out[:stop[0]] if stop else out
                text = sp.decode(out)
                hdr = f"chat, temperature {temp}" + ("" if temp == 0 else f", seed {args.seed + i}")
                lines.append(f"* {hdr}, user {json.dumps(q)}:\n\n  > {text}\n")
                print(f"[{hdr}] {q} -> {text}\n", flush=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
