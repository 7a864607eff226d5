#!/usr/bin/python3
"""train.py - train the llama-architecture model from scratch on CPU.

Part of the attnd default-model pipeline (see tools/train/README.md).

Reads tools/train/work/{train,dev}.bin (written by prepare.py).  Samples random
ctx+1 token windows from the training stream (with --chat-frac, that share of each batch's rows
are instead ctx+1 windows of the dialogue stream chat_train.* (dialogues.py) starting at a random
dialogue's BOS, and only their assistant tokens count in the loss), trains with AdamW under bf16 autocast
(CPU AMX), and schedules the learning rate by ELAPSED WALL TIME (linear warmup, then
cosine down to 10 % of the peak at --minutes), because this machine's speed varies.
Every --eval-every seconds the loss on the dev speeches (2017+, never trained on) is
measured and the best checkpoint is kept (<out>/best.pt); <out>/last.pt is the final
state.  Progress (step, loss, tokens/s, elapsed, ETA) is printed as it goes.

The machine is shared with other jobs, so the thread count adapts: training runs in
20-second windows, tokens/s is tracked per thread count (1 .. --threads), and each window
uses the best count so far, trying another one every 6th window.

--init-gguf continues from a released GGUF (model v1): its weights are loaded as stored, the
token embedding grows to --vocab rows (new rows -- the chat markers -- start at the mean
embedding plus a little noise), and the context may grow (RoPE has no learned positions).
"""
import argparse
import copy
import json
import math
import os
import time

# OpenMP threads that spin while waiting collapse throughput when other jobs share the
# two cores (measured: ~5x slower); make them sleep instead.  Must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn.functional as F

from model import Config, Llama

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")


def dev_windows(dev, ctx):
    n = (len(dev) - 1) // ctx
    x = np.stack([dev[i * ctx:i * ctx + ctx + 1] for i in range(n)]).astype(np.int64)
    return torch.from_numpy(x)


@torch.no_grad()
def dev_loss(model, windows, bs=16):
    model.eval()
    tot = cnt = 0.0
    for i in range(0, len(windows), bs):
        w = windows[i:i + bs]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                               reduction="sum")
        tot += float(loss)
        cnt += w[:, 1:].numel()
    model.train()
    return tot / cnt


class ThreadPicker:
    """Choose torch's thread count by measured throughput (shared, noisy machine)."""

    def __init__(self, max_threads, window=20.0):
        self.choices = list(range(1, max_threads + 1))
        self.rate = {n: None for n in self.choices}
        self.window = window
        self.count = 0
        self.cur = max_threads
        self.start = time.time()
        self.tokens = 0
        torch.set_num_threads(self.cur)

    def update(self, ntok):
        self.tokens += ntok
        now = time.time()
        if now - self.start < self.window or len(self.choices) == 1:
            return
        r = self.tokens / (now - self.start)
        old = self.rate[self.cur]
        self.rate[self.cur] = r if old is None else 0.5 * old + 0.5 * r
        self.count += 1
        untried = [n for n in self.choices if self.rate[n] is None]
        best = max((n for n in self.choices if self.rate[n] is not None), key=lambda n: self.rate[n])
        if untried:
            nxt = untried[0]
        elif self.count % 6 == 0:
            others = [n for n in self.choices if n != best]
            nxt = others[(self.count // 6) % len(others)]
        else:
            nxt = best
        self.cur = nxt
        torch.set_num_threads(nxt)
        self.start = now
        self.tokens = 0

    def __str__(self):
        return "threads %d (%s)" % (self.cur, ", ".join(
            f"{n}:{'-' if r is None else int(r)}" for n, r in self.rate.items()))


def chat_windows(ids, msk, starts, ctx, n=None):
    """[n, ctx+1] windows starting at dialogue starts (with room for ctx+1 tokens), and masks."""
    st = starts[starts + ctx + 1 <= len(ids)]
    if n is not None:
        st = st[:n]
    x = np.stack([ids[s:s + ctx + 1] for s in st]).astype(np.int64)
    m = np.stack([msk[s:s + ctx + 1] for s in st]).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(m)


@torch.no_grad()
def chat_dev_loss(model, x, m, bs=8):
    """Mean loss over the dev dialogues' assistant tokens (the trained part)."""
    model.eval()
    tot = cnt = 0.0
    for i in range(0, len(x), bs):
        w, k = x[i:i + bs], m[i:i + bs, 1:]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                               reduction="none")
        tot += float((loss * k.reshape(-1)).sum())
        cnt += float(k.sum())
    model.train()
    return tot / max(cnt, 1.0)


def init_from_gguf(model, path, seed):
    """Copy a GGUF model's weights into model (which may have a larger vocabulary and context)."""
    from export import model_from_gguf
    old, _ = model_from_gguf(path)
    sd = old.state_dict()
    emb = sd["tok_embeddings.weight"]
    n_old, n_new = emb.shape[0], model.cfg.vocab
    if n_new > n_old:
        g = torch.Generator().manual_seed(seed)
        extra = emb.mean(0, keepdim=True) + 0.02 * torch.randn(n_new - n_old, emb.shape[1], generator=g)
        sd["tok_embeddings.weight"] = torch.cat([emb, extra])
    model.load_state_dict(sd, strict=True)
    print(f"initialized from {path}: vocab {n_old} -> {n_new}, ctx {old.cfg.ctx} -> {model.cfg.ctx}")


def lr_at(frac, peak, warm):
    if frac < warm:
        return peak * frac / warm
    p = min(1.0, (frac - warm) / (1 - warm))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(WORK, "run"))
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=704)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=float, default=0.03, help="fraction of the time budget")
    ap.add_argument("--minutes", type=float, default=75)
    ap.add_argument("--eval-every", type=float, default=240, help="seconds")
    ap.add_argument("--dev-windows", type=int, default=64, help="fixed dev subset: first N windows")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-bf16", action="store_true")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="keep an exponential moving average of the weights with this per-step decay "
                         "(e.g. 0.998); dev evaluation and the saved checkpoints then use the average")
    ap.add_argument("--init-gguf", default=None, help="continue from a released GGUF's weights (see above)")
    ap.add_argument("--chat-frac", type=float, default=0.0,
                    help="share of each batch's rows taken from the dialogue stream chat_train.*")
    ap.add_argument("--chat-dev-windows", type=int, default=48)
    ap.add_argument("--init", default=None,
                    help="start from this checkpoint's weights (a second stage; fresh optimizer)")
    args = ap.parse_args()

    picker = ThreadPicker(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)

    train = np.fromfile(os.path.join(WORK, "train.bin"), dtype=np.uint16).astype(np.int64)
    dev = np.fromfile(os.path.join(WORK, "dev.bin"), dtype=np.uint16)
    cfg = Config(vocab=args.vocab, dim=args.dim, n_layers=args.layers, n_heads=args.heads,
                 n_kv_heads=args.kv_heads, ffn_dim=args.ffn, ctx=args.ctx, tie=not args.untied,
                 dropout=args.dropout)
    model = Llama(cfg)
    if args.init:
        ck = torch.load(args.init, map_location="cpu")
        assert ck["config"] == cfg.to_dict(), (ck["config"], cfg.to_dict())
        model.load_state_dict(ck["model"])
        print(f"initialized from {args.init} ({ck.get('eval')})")
    if args.init_gguf:
        init_from_gguf(model, args.init_gguf, args.seed)
    n_chat = int(round(args.batch * args.chat_frac))
    if n_chat:
        cids = np.fromfile(os.path.join(WORK, "chat_train.bin"), dtype=np.uint16).astype(np.int64)
        cmsk = np.fromfile(os.path.join(WORK, "chat_train.msk"), dtype=np.uint8)
        cst = np.fromfile(os.path.join(WORK, "chat_train.idx"), dtype=np.int64)
        cst = cst[cst + cfg.ctx + 1 <= len(cids)]
        cdx, cdm = chat_windows(np.fromfile(os.path.join(WORK, "chat_dev.bin"), dtype=np.uint16),
                                np.fromfile(os.path.join(WORK, "chat_dev.msk"), dtype=np.uint8),
                                np.fromfile(os.path.join(WORK, "chat_dev.idx"), dtype=np.int64),
                                cfg.ctx, args.chat_dev_windows)
        print(f"chat: {n_chat}/{args.batch} rows per batch from {len(cst)} dialogues "
              f"({len(cids):,} tokens); dev {len(cdx)} dialogue windows", flush=True)
    dw = dev_windows(dev, cfg.ctx)[:args.dev_windows]
    print(f"config {cfg.to_dict()}")
    print(f"params {model.n_params():,}  train tokens {len(train):,}  dev windows {len(dw)}x{cfg.ctx}",
          flush=True)

    ema_model = copy.deepcopy(model) if args.ema > 0 else None
    if ema_model is not None:
        for p in ema_model.parameters():
            p.requires_grad_(False)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    budget = args.minutes * 60
    t0 = time.time()
    last_eval = t0
    last_log = t0
    tokens = 0
    chat_tokens = 0
    tok_since = 0
    step = 0
    ema = None
    best = float("inf")
    history = []
    hi = len(train) - cfg.ctx - 1

    def save(name, extra):
        m = ema_model if ema_model is not None else model
        torch.save({"config": cfg.to_dict(), "model": m.state_dict(), **extra},
                   os.path.join(args.out, name))

    def evaluate(elapsed):
        nonlocal best
        m = ema_model if ema_model is not None else model
        dl = dev_loss(m, dw)
        rec = {"step": step, "elapsed_s": round(elapsed, 1), "tokens": tokens,
               "epochs": round(tokens / len(train), 3), "train_loss_ema": ema, "dev_loss": dl}
        if n_chat:
            rec["chat_dev_loss"] = chat_dev_loss(m, cdx, cdm)
        history.append(rec)
        tag = ""
        if dl < best:
            best = dl
            save("best.pt", {"eval": rec})
            tag = "  (best, saved)"
        print(f"EVAL step {step} elapsed {elapsed / 60:.1f}m epochs {rec['epochs']:.2f} "
              f"dev_loss {dl:.4f}" + (f" chat_dev_loss {rec['chat_dev_loss']:.4f}" if n_chat else "") +
              tag, flush=True)

    while True:
        elapsed = time.time() - t0
        if elapsed >= budget:
            break
        lr = lr_at(elapsed / budget, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, hi, size=args.batch - n_chat)
        rows = [train[s:s + cfg.ctx + 1] for s in starts]
        weights = [np.ones(cfg.ctx + 1, dtype=np.float32)] * len(rows)
        for s in rng.choice(cst, size=n_chat) if n_chat else []:
            rows.append(cids[s:s + cfg.ctx + 1])
            weights.append(cmsk[s:s + cfg.ctx + 1].astype(np.float32))
        batch = torch.from_numpy(np.stack(rows))
        wt = torch.from_numpy(np.stack(weights))[:, 1:].reshape(-1)
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not args.no_bf16):
            logits = model(x)
        nll = F.cross_entropy(logits.float().reshape(-1, cfg.vocab), y.reshape(-1), reduction="none")
        loss = (nll * wt).sum() / wt.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if ema_model is not None:
            with torch.no_grad():
                for pe, p in zip(ema_model.parameters(), model.parameters()):
                    pe.mul_(args.ema).add_(p, alpha=1.0 - args.ema)
        step += 1
        tokens += x.numel()
        chat_tokens += n_chat * cfg.ctx
        tok_since += x.numel()
        lv = float(loss)
        ema = lv if ema is None else 0.98 * ema + 0.02 * lv
        picker.update(x.numel())
        now = time.time()
        if now - last_log >= 30 or step == 1:
            el = now - t0
            print(f"step {step} loss {lv:.4f} ema {ema:.4f} lr {lr:.2e} "
                  f"tok/s {tok_since / (now - last_log + 1e-9):.0f} elapsed {el / 60:.1f}m "
                  f"ETA {(budget - el) / 60:.1f}m epochs {tokens / len(train):.2f} {picker}", flush=True)
            last_log = now
            tok_since = 0
        if now - last_eval >= args.eval_every:
            evaluate(now - t0)
            last_eval = time.time()
            picker.start = last_eval
            picker.tokens = 0
            last_log = time.time()
            tok_since = 0

    elapsed = time.time() - t0
    evaluate(elapsed)
    save("last.pt", {"eval": history[-1]})
    summary = {"config": cfg.to_dict(), "params": model.n_params(), "args": vars(args),
               "steps": step, "tokens": tokens, "chat_tokens": chat_tokens, "train_tokens": int(len(train)),
               "wall_s": round(time.time() - t0, 1), "avg_tok_per_s": round(tokens / elapsed, 1),
               "best_dev_loss": best, "history": history}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"done: {step} steps, {tokens:,} tokens, {elapsed / 60:.1f} min, "
          f"{tokens / elapsed:.0f} tok/s, best dev loss {best:.4f}", flush=True)


if __name__ == "__main__":
    main()
