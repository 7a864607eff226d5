"""model.py - the llama-architecture transformer, exactly as attnd (and llama.cpp) run it.

Part of the attnd default-model pipeline (see tools/train/README.md).

  x = tok_embeddings[ids]
  per layer:
    h = rmsnorm(x) * attn_norm
    q, k, v = h Wq, h Wk, h Wv           (no bias; k/v may have fewer heads: GQA)
    rope on ADJACENT pairs (2i, 2i+1) of each head, angle = pos * base^(-2i/head_dim)
    a = softmax(q k^T / sqrt(head_dim) + causal mask) v
    x = x + a Wo
    h = rmsnorm(x) * ffn_norm
    x = x + W_down(silu(W_gate h) * W_up h)
  logits = rmsnorm(x) * output_norm  @ W_out   (W_out tied to tok_embeddings if tie=True)

The model is trained directly in the GGUF "llama" rope layout (adjacent pairs,
llama.cpp's NORM rope), so export needs no q/k permutation.
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int = 4096
    dim: int = 256
    n_layers: int = 6
    n_heads: int = 4
    n_kv_heads: int = 4
    ffn_dim: int = 704
    ctx: int = 256
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    tie: bool = True
    dropout: float = 0.0

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).type_as(x)


def rope_tables(head_dim, ctx, base):
    """cos/sin of shape [ctx, head_dim]; pair i (columns 2i, 2i+1) uses angle pos * base^(-2i/head_dim)."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(ctx, dtype=torch.float64)[:, None] * inv[None, :]
    ang = ang.repeat_interleave(2, dim=1)   # [ctx, head_dim]: pair i -> columns 2i, 2i+1
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope_pair_matrix(head_dim):
    """R with (x @ R)[2i] = -x[2i+1], (x @ R)[2i+1] = x[2i]  (a matmul is much cheaper than
    strided neg/stack on this CPU, forward and backward)."""
    r = torch.zeros(head_dim, head_dim)
    for i in range(0, head_dim, 2):
        r[i + 1, i] = -1.0
        r[i, i + 1] = 1.0
    return r


def apply_rope(x, cos, sin, rot):
    """x: [B, H, T, D]; rotate adjacent pairs (x[2i], x[2i+1]) by angle[i]:
    y[2i] = x[2i] cos - x[2i+1] sin,  y[2i+1] = x[2i] sin + x[2i+1] cos.
    cos/sin: [ctx, D] tables with each pair's value repeated twice; rot = rope_pair_matrix."""
    T = x.shape[2]
    return (x * cos[:T] + (x @ rot.to(x.dtype)) * sin[:T]).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)

    def forward(self, x, cos, sin, rot, mask):
        cfg = self.cfg
        B, T, _ = x.shape
        hd = cfg.head_dim
        q = self.wq(x).view(B, T, cfg.n_heads, hd).transpose(1, 2)
        k = self.wk(x).view(B, T, cfg.n_kv_heads, hd).transpose(1, 2)
        v = self.wv(x).view(B, T, cfg.n_kv_heads, hd).transpose(1, 2)
        q = apply_rope(q, cos, sin, rot) * (1.0 / math.sqrt(hd))
        k = apply_rope(k, cos, sin, rot)
        rep = cfg.n_heads // cfg.n_kv_heads
        if rep > 1:   # query head h uses kv head h // rep
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        # scores = mask + q k^T / sqrt(hd) in one fused op (elementwise passes over the
        # [T, T] scores dominate CPU training time, so keep them few)
        q3 = q.reshape(B * cfg.n_heads, T, hd)
        k3 = k.reshape(B * cfg.n_heads, T, hd)
        att = torch.baddbmm(mask[:T, :T].to(q3.dtype), q3, k3.transpose(1, 2))
        att = torch.softmax(att, dim=-1).view(B, cfg.n_heads, T, T).type_as(v)
        y = (att @ v).transpose(1, 2).reshape(B, T, cfg.n_heads * hd)
        return self.wo(y)


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w_gate = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_down = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = FeedForward(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, cos, sin, rot, mask):
        x = x + self.drop(self.attn(self.attn_norm(x), cos, sin, rot, mask))
        x = x + self.drop(self.ffn(self.ffn_norm(x)))
        return x


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        if not cfg.tie:
            self.output = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        cos, sin = rope_tables(cfg.head_dim, cfg.ctx, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.register_buffer("rope_rot", rope_pair_matrix(cfg.head_dim), persistent=False)
        mask = torch.full((cfg.ctx, cfg.ctx), float("-inf")).triu(1)
        self.register_buffer("causal_mask", mask, persistent=False)
        self.apply(self._init)
        for n, p in self.named_parameters():
            if n.endswith("wo.weight") or n.endswith("w_down.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, ids):
        x = self.tok_embeddings(ids)
        for layer in self.layers:
            x = layer(x, self.rope_cos, self.rope_sin, self.rope_rot, self.causal_mask)
        x = self.norm(x)
        if self.cfg.tie:
            return x @ self.tok_embeddings.weight.t().to(x.dtype)
        return self.output(x)

    @torch.no_grad()
    def generate(self, ids, n, temperature=0.0, seed=0):
        """Plain generation without KV cache (recomputes the window each step)."""
        g = torch.Generator().manual_seed(seed)
        ids = list(ids)
        out = []
        for _ in range(n):
            ctx = torch.tensor([ids[-self.cfg.ctx:]])
            logits = self(ctx)[0, -1].float()
            if temperature <= 0:
                t = int(torch.argmax(logits))
            else:
                p = torch.softmax(logits / temperature, dim=-1)
                t = int(torch.multinomial(p, 1, generator=g))
            ids.append(t)
            out.append(t)
        return out
