"""family_shapes.py — the tensors and keys of released models' shapes of the newer families, for
tools/bench/make_model.py (which imports it; run that, not this): Qwen3.6-35B-A3B (qwen35moe),
Qwen3.6-27B (qwen35), Gemma-4-26B-A4B and Gemma-4-E4B (gemma4), GLM-4.7-Flash (deepseek2), with
their real widths, head sizes, expert layouts, state sizes and latent ranks; the depth is the
caller's (--layers; default: 4 at reduced depth, each keeping its layer kinds).

Shapes, as llama.cpp's converter writes them (src/models/*.cpp, conversion/*.py) and as
tests/family_specs.h checks them at small depth:
- qwen3.6-35b-a3b: qwen35moe, 40 layers, 2048 wide; every 4th layer gated attention (16 query
  heads and 2 KV heads of 256, 64 rotary dims, base 1e7, sections 11/11/10), the others Gated
  DeltaNet (16 key heads and 32 value heads of 128, conv kernel 4); 256 experts of 512, 8 per
  token, a shared expert of 512; vocabulary 248320, untied head.
- qwen3.6-27b: qwen35, 64 layers, 5120 wide; attention 24/4 heads of 256; DeltaNet 16 key heads
  and 48 value heads of 128; SwiGLU of 17408; vocabulary 248320, untied.
- gemma4-26b-a4b: gemma4, 30 layers, 2816 wide, 16 heads; local layers 8 KV heads of 256 (window
  1024, base 1e4), every 6th global: 2 KV heads of 512, K as V, a quarter of the dims rotating at
  1e6; a dense GeGLU of 2112 beside 128 experts of 704 (gate and up fused), 8 per token; tied,
  vocabulary 262144, final soft-cap 30. At reduced depth the last layer is the global one.
- gemma4-e4b: gemma4, 42 layers, 2560 wide, 8 heads; local 2 KV heads of 256 (window 512), global
  2 KV heads of 512; GeGLU of 10240; per-layer embeddings of 256; the last 18 layers read earlier
  layers' caches; tied, vocabulary 262144.
- glm-4.7-flash: deepseek2, 47 layers (the MTP block not written), 2048 wide, 20 heads; queries
  through a rank-768 LoRA, a 512-rank latent plus 64 rotary dims, key parts 192 + 64, values of
  256; the first layer a SwiGLU of 10240, the others 64 experts of 1536, 4 per token, plus one
  shared expert; sigmoid router with its bias, normed, scaled 1.8; vocabulary 154880, untied.
- bge-base: bert (an encoder: BGE, E5 base), 12 layers, 768 wide, 12 heads, GELU FFN of 3072,
  post-LayerNorm layers with biases, absolute positions (512) and 2 token types; CLS pooling;
  vocabulary 30522 (a SentencePiece-style list: the bench gives token ids, never text).
- bge-reranker-base: bge-base with a cross-encoder's head (`cls` 768 x 768, tanh, `cls.output`
  1 x 768), pooling rank.

Each builder also returns what one decode token reads of the file (bytes_read): every tensor in
full but the unselected experts (n_expert - used of each layer), the rows of token_embd (when a
separate head exists) and per_layer_token_embd that are not the token's; plus the recurrent state
(f32, read once per token) of each DeltaNet layer. The KV cache is not in it (the bench adds it).
"""
import numpy as np

FAMILY_SHAPES = {
    "qwen3.6-35b-a3b": dict(arch="qwen35moe", dim=2048, layers=40, reduced=4, heads=16, kv_heads=2, head_dim=256,
                            rope_dims=64, rope_base=1e7, hk=16, hv=32, dk=128, conv_k=4, interval=4, experts=256,
                            experts_used=8, expert_ffn=512, shexp_ffn=512, vocab=248320, ctx=262144),
    "qwen3.6-27b": dict(arch="qwen35", dim=5120, layers=64, reduced=4, heads=24, kv_heads=4, head_dim=256,
                        rope_dims=64, rope_base=1e7, hk=16, hv=48, dk=128, conv_k=4, interval=4, ffn=17408,
                        vocab=248320, ctx=262144),
    "gemma4-26b-a4b": dict(arch="gemma4", dim=2816, layers=30, reduced=4, heads=16, kv_heads=8, head_dim=256,
                           kv_full=2, hd_full=512, swa_every=6, window=1024, ffn=2112, experts=128, experts_used=8,
                           expert_ffn=704, ple=0, shared_kv=0, vocab=262144, ctx=262144),
    "gemma4-e4b": dict(arch="gemma4", dim=2560, layers=42, reduced=42, heads=8, kv_heads=2, head_dim=256, kv_full=2,
                       hd_full=512, swa_every=6, window=512, ffn=10240, experts=0, ple=256, shared_kv=18,
                       vocab=262144, ctx=131072),
    "glm-4.7-flash": dict(arch="deepseek2", dim=2048, layers=47, reduced=4, heads=20, q_lora=768, kv_lora=512,
                          nope=192, rope_dims=64, v_head=256, ffn=10240, n_dense=1, experts=64, experts_used=4,
                          expert_ffn=1536, n_shared=1, vocab=154880, ctx=202752),
    "bge-base": dict(arch="bert", dim=768, layers=12, reduced=12, heads=12, ffn=3072, vocab=30522, ctx=512,
                     types=2),
    "bge-reranker-base": dict(arch="bert", dim=768, layers=12, reduced=12, heads=12, ffn=3072, vocab=30522,
                              ctx=512, types=2, rank=True),
}


class Writer:
    """Adds a shape's tensors to a Gguf and counts the bytes a decode token reads of them."""

    def __init__(self, g, rng, mm, main, head):
        self.g, self.rng, self.mm, self.main, self.head = g, rng, mm, main, head
        self.read = 0.0

    def mat(self, name, rows, cols, n_expert=0, tname=None, share=1.0):
        """A weight matrix (rows x cols, n_expert of them) in tname (default: the main type);
        share: the part of it that a token reads."""
        before = len(self.g.tensors)
        self.mm.mat(self.g, self.rng, name, tname or self.main, rows, cols, n_expert)
        self.read += share * len(self.g.tensors[before][3])

    def f32(self, name, values, dims=None):
        v = np.asarray(values, np.float32)
        self.g.tensor(name, dims or [v.size], "F32", v.tobytes())
        self.read += v.nbytes

    def norm(self, name, n):
        self.f32(name, np.ones(n, np.float32))

    def rand(self, name, dims, scale, offset=0.0):
        n = int(np.prod(dims))
        self.f32(name, self.rng.standard_normal(n, dtype=np.float32) * scale + offset, dims)


def common_keys(g, mm, a, arch, kv):
    g.add("general.architecture", mm.VT_STR, arch)
    g.add("general.name", mm.VT_STR, f"random-{a.shape}-{a.type}")
    g.add("general.alignment", mm.VT_U32, mm.ALIGN)
    for key, val in kv:
        vt = mm.VT_F32 if isinstance(val, float) else mm.VT_U32
        g.add(f"{arch}.{key}", vt, val)
    if getattr(a, "tok_records", None):  # make_model.py --tokenizer: a real vocabulary
        g.kv.extend(a.tok_records)
        return
    toks, scores, types = mm.vocabulary(a.vocab)
    g.add("tokenizer.ggml.model", mm.VT_STR, "llama")
    g.add_array("tokenizer.ggml.tokens", mm.VT_STR, toks)
    g.add_array("tokenizer.ggml.scores", mm.VT_F32, scores)
    g.add_array("tokenizer.ggml.token_type", mm.VT_I32, types)
    for key, val in [("bos_token_id", 1), ("eos_token_id", 2), ("unknown_token_id", 0)]:
        g.add("tokenizer.ggml." + key, mm.VT_U32, val)


def embeddings(w, s, tied):
    """token_embd (the head's type when tied: it is the output head too) and output_norm."""
    if tied:
        w.mat("token_embd.weight", s["vocab"], s["dim"], tname=w.head)
    else:
        w.mat("token_embd.weight", s["vocab"], s["dim"], share=1.0 / s["vocab"])
        w.mat("output.weight", s["vocab"], s["dim"], tname=w.head)
    w.norm("output_norm.weight", s["dim"])


def build_qwen35(g, mm, a, s, w):
    E, L, hd, H, HK = s["dim"], a.layers, s["head_dim"], s["heads"], s["kv_heads"]
    hk, hv, dk, K = s["hk"], s["hv"], s["dk"], s["conv_k"]
    C, VD = 2 * hk * dk + hv * dk, hv * dk
    kv = [("context_length", s["ctx"]), ("embedding_length", E), ("block_count", L),
          ("feed_forward_length", s.get("ffn", 0)), ("attention.head_count", H), ("attention.head_count_kv", HK),
          ("attention.key_length", hd), ("attention.value_length", hd), ("rope.dimension_count", s["rope_dims"]),
          ("attention.layer_norm_rms_epsilon", 1e-6), ("rope.freq_base", s["rope_base"]),
          ("full_attention_interval", s["interval"]), ("ssm.conv_kernel", K), ("ssm.state_size", dk),
          ("ssm.group_count", hk), ("ssm.time_step_rank", hv), ("ssm.inner_size", VD)]
    if s.get("experts"):
        kv += [("expert_count", s["experts"]), ("expert_used_count", s["experts_used"]),
               ("expert_feed_forward_length", s["expert_ffn"]),
               ("expert_shared_feed_forward_length", s["shexp_ffn"])]
    common_keys(g, mm, a, s["arch"], kv)
    g.add_array(f"{s['arch']}.rope.dimension_sections", mm.VT_I32, [11, 11, 10, 0])
    embeddings(w, s, False)
    for l in range(L):
        p = f"blk.{l}."
        w.norm(p + "attn_norm.weight", E)
        if (l + 1) % s["interval"] == 0:  # gated attention: [query | gate] per head
            w.mat(p + "attn_q.weight", 2 * H * hd, E)
            w.mat(p + "attn_k.weight", HK * hd, E)
            w.mat(p + "attn_v.weight", HK * hd, E)
            w.norm(p + "attn_q_norm.weight", hd)
            w.norm(p + "attn_k_norm.weight", hd)
            w.mat(p + "attn_output.weight", E, H * hd)
        else:  # Gated DeltaNet
            w.mat(p + "attn_qkv.weight", C, E)
            w.mat(p + "attn_gate.weight", VD, E)
            w.rand(p + "ssm_conv1d.weight", [K, C], 0.3)
            w.f32(p + "ssm_dt.bias", np.ones(hv, np.float32))
            w.f32(p + "ssm_a", -np.exp(w.rng.uniform(0, 1.5, hv)))  # stored as -exp(A_log)
            w.mat(p + "ssm_beta.weight", hv, E)
            w.mat(p + "ssm_alpha.weight", hv, E)
            w.norm(p + "ssm_norm.weight", dk)
            w.mat(p + "ssm_out.weight", E, VD)
            w.read += 4.0 * ((K - 1) * C + hv * dk * dk)  # the f32 state: conv tail and S
        w.norm(p + "post_attention_norm.weight", E)  # the FFN's pre-norm
        if not s.get("experts"):
            w.mat(p + "ffn_gate.weight", s["ffn"], E)
            w.mat(p + "ffn_up.weight", s["ffn"], E)
            w.mat(p + "ffn_down.weight", E, s["ffn"], tname=w.head)
            continue
        NE, FE, FS, used = s["experts"], s["expert_ffn"], s["shexp_ffn"], s["experts_used"] / s["experts"]
        w.rand(p + "ffn_gate_inp.weight", [E, NE], 0.02)
        w.mat(p + "ffn_gate_exps.weight", FE, E, NE, share=used)
        w.mat(p + "ffn_up_exps.weight", FE, E, NE, share=used)
        w.mat(p + "ffn_down_exps.weight", E, FE, NE, tname=w.head, share=used)
        w.rand(p + "ffn_gate_inp_shexp.weight", [E], 0.02)
        w.mat(p + "ffn_gate_shexp.weight", FS, E)
        w.mat(p + "ffn_up_shexp.weight", FS, E)
        w.mat(p + "ffn_down_shexp.weight", E, FS, tname=w.head)


def gemma4_global(s, L, l):
    return l % s["swa_every"] == s["swa_every"] - 1 or l == L - 1


def build_gemma4(g, mm, a, s, w):
    E, L, H, P = s["dim"], a.layers, s["heads"], s["ple"]
    shared = min(s["shared_kv"], L - 2) if s["shared_kv"] else 0
    glob = [gemma4_global(s, L, l) for l in range(L)]
    kv = [("context_length", s["ctx"]), ("embedding_length", E), ("block_count", L), ("feed_forward_length", s["ffn"]),
          ("attention.head_count", H), ("attention.layer_norm_rms_epsilon", 1e-6), ("rope.freq_base", 1e6),
          ("rope.freq_base_swa", 1e4), ("attention.key_length", s["hd_full"]),
          ("attention.value_length", s["hd_full"]), ("attention.key_length_swa", s["head_dim"]),
          ("attention.value_length_swa", s["head_dim"]), ("rope.dimension_count", s["hd_full"]),
          ("rope.dimension_count_swa", s["head_dim"]), ("attention.sliding_window", s["window"]),
          ("attention.shared_kv_layers", shared), ("embedding_length_per_layer_input", P),
          ("final_logit_softcapping", 30.0)]
    if s["experts"]:
        kv += [("expert_count", s["experts"]), ("expert_used_count", s["experts_used"]),
               ("expert_feed_forward_length", s["expert_ffn"])]
    common_keys(g, mm, a, "gemma4", kv)
    g.add_array("gemma4.attention.head_count_kv", mm.VT_I32, [s["kv_full"] if x else s["kv_heads"] for x in glob])
    g.add_array("gemma4.attention.sliding_window_pattern", mm.VT_BOOL, [not x for x in glob])
    embeddings(w, s, True)
    pairs, turning = s["hd_full"] // 2, s["hd_full"] // 8  # a quarter of the dims rotate
    w.f32("rope_freqs.weight", [1.0] * turning + [1e30] * (pairs - turning))
    if P:
        w.mat("per_layer_token_embd.weight", s["vocab"], P * L, share=1.0 / s["vocab"])
        w.mat("per_layer_model_proj.weight", P * L, E)
        w.norm("per_layer_proj_norm.weight", P)
    for l in range(L):
        p, hd = f"blk.{l}.", s["hd_full"] if glob[l] else s["head_dim"]
        kvd = hd * (s["kv_full"] if glob[l] else s["kv_heads"])
        w.norm(p + "attn_norm.weight", E)
        w.mat(p + "attn_q.weight", H * hd, E)
        w.mat(p + "attn_k.weight", kvd, E, share=0.0 if l >= L - shared else 1.0)  # shared: unused
        if not glob[l]:  # global layers: V is K's projection
            w.mat(p + "attn_v.weight", kvd, E, share=0.0 if l >= L - shared else 1.0)
        w.f32(p + "attn_q_norm.weight", np.full(hd, hd ** -0.5, np.float32))  # the query scale is 1
        w.norm(p + "attn_k_norm.weight", hd)
        w.mat(p + "attn_output.weight", E, H * hd)
        w.norm(p + "post_attention_norm.weight", E)
        w.norm(p + "ffn_norm.weight", E)
        w.mat(p + "ffn_gate.weight", s["ffn"], E)
        w.mat(p + "ffn_up.weight", s["ffn"], E)
        w.mat(p + "ffn_down.weight", E, s["ffn"], tname=w.head)
        w.norm(p + "post_ffw_norm.weight", E)
        if s["experts"]:
            NE, FE, used = s["experts"], s["expert_ffn"], s["experts_used"] / s["experts"]
            w.rand(p + "ffn_gate_inp.weight", [E, NE], 0.02)
            w.f32(p + "ffn_gate_inp.scale", np.ones(E, np.float32))
            for name in ("pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"):
                w.norm(p + name + ".weight", E)
            w.mat(p + "ffn_gate_up_exps.weight", 2 * FE, E, NE, share=used)
            w.mat(p + "ffn_down_exps.weight", E, FE, NE, tname=w.head, share=used)
            w.f32(p + "ffn_down_exps.scale", np.ones(NE, np.float32))
        if P:
            w.mat(p + "inp_gate.weight", P, E)
            w.mat(p + "proj.weight", E, P)
            w.norm(p + "post_norm.weight", E)
        w.f32(p + "layer_output_scale.weight", [0.8])


def build_deepseek2(g, mm, a, s, w):
    E, L, H, C, R = s["dim"], a.layers, s["heads"], s["kv_lora"], s["rope_dims"]
    kv = [("context_length", s["ctx"]), ("embedding_length", E), ("block_count", L), ("feed_forward_length", s["ffn"]),
          ("attention.head_count", H), ("attention.head_count_kv", 1), ("attention.layer_norm_rms_epsilon", 1e-5),
          ("rope.freq_base", 1e6), ("rope.dimension_count", R), ("attention.key_length", C + R),
          ("attention.value_length", C), ("attention.key_length_mla", s["nope"] + R),
          ("attention.value_length_mla", s["v_head"]), ("attention.q_lora_rank", s["q_lora"]),
          ("attention.kv_lora_rank", C), ("leading_dense_block_count", s["n_dense"]),
          ("expert_count", s["experts"]), ("expert_used_count", s["experts_used"]),
          ("expert_feed_forward_length", s["expert_ffn"]), ("expert_shared_count", s["n_shared"]),
          ("expert_gating_func", 2), ("vocab_size", s["vocab"]), ("expert_weights_scale", 1.8),
          ("expert_group_count", 1), ("expert_group_used_count", 1)]
    common_keys(g, mm, a, "deepseek2", kv)
    g.add("deepseek2.expert_weights_norm", mm.VT_BOOL, True)
    embeddings(w, s, False)
    QK = s["nope"] + R
    for l in range(L):
        p = f"blk.{l}."
        w.norm(p + "attn_norm.weight", E)
        w.mat(p + "attn_q_a.weight", s["q_lora"], E)
        w.norm(p + "attn_q_a_norm.weight", s["q_lora"])
        w.mat(p + "attn_q_b.weight", H * QK, s["q_lora"])
        w.mat(p + "attn_kv_a_mqa.weight", C + R, E)
        w.norm(p + "attn_kv_a_norm.weight", C)
        w.mat(p + "attn_k_b.weight", C, s["nope"], H)  # per head: kv_lora rows of nope
        w.mat(p + "attn_v_b.weight", s["v_head"], C, H)  # per head: v_head rows of kv_lora
        w.mat(p + "attn_output.weight", E, H * s["v_head"])
        w.norm(p + "ffn_norm.weight", E)
        if l < s["n_dense"]:
            w.mat(p + "ffn_gate.weight", s["ffn"], E)
            w.mat(p + "ffn_up.weight", s["ffn"], E)
            w.mat(p + "ffn_down.weight", E, s["ffn"], tname=w.head)
            continue
        NE, FE, used = s["experts"], s["expert_ffn"], s["experts_used"] / s["experts"]
        FS = FE * s["n_shared"]
        w.rand(p + "ffn_gate_inp.weight", [E, NE], 0.02)
        w.rand(p + "exp_probs_b.bias", [NE], 0.05)
        w.mat(p + "ffn_gate_exps.weight", FE, E, NE, share=used)
        w.mat(p + "ffn_up_exps.weight", FE, E, NE, share=used)
        w.mat(p + "ffn_down_exps.weight", E, FE, NE, tname=w.head, share=used)
        w.mat(p + "ffn_gate_shexp.weight", FS, E)
        w.mat(p + "ffn_up_shexp.weight", FS, E)
        w.mat(p + "ffn_down_shexp.weight", E, FS, tname=w.head)


def build_bert(g, mm, a, s, w):
    """An encoder: every tensor is read for every input; the bytes read mean nothing here."""
    d, f = s["dim"], s["ffn"]
    common_keys(g, mm, a, "bert", [("context_length", s["ctx"]), ("embedding_length", d),
                                   ("feed_forward_length", f), ("block_count", a.layers),
                                   ("attention.head_count", s["heads"]), ("attention.layer_norm_epsilon", 1e-12),
                                   ("pooling_type", 4 if s.get("rank") else 2)])
    g.add("bert.attention.causal", mm.VT_BOOL, False)
    g.add("tokenizer.ggml.token_type_count", mm.VT_U32, s["types"])
    w.mat("token_embd.weight", s["vocab"], d)
    w.rand("token_types.weight", [d, s["types"]], 0.02)
    w.rand("position_embd.weight", [d, s["ctx"]], 0.02)
    w.norm("token_embd_norm.weight", d)
    w.rand("token_embd_norm.bias", [d], 0.02)
    for L in range(a.layers):
        b = f"blk.{L}."
        for name, rows, cols in (("attn_q", d, d), ("attn_k", d, d), ("attn_v", d, d), ("attn_output", d, d),
                                 ("ffn_up", f, d), ("ffn_down", d, f)):
            w.mat(b + name + ".weight", rows, cols)
            w.rand(b + name + ".bias", [rows], 0.02)
        for name in ("attn_output_norm", "layer_output_norm"):
            w.norm(b + name + ".weight", d)
            w.rand(b + name + ".bias", [d], 0.02)
    if s.get("rank"):
        w.mat("cls.weight", d, d)
        w.rand("cls.bias", [d], 0.02)
        w.mat("cls.output.weight", 1, d)
        w.rand("cls.output.bias", [1], 0.02)


BUILDERS = {"bert": build_bert, "qwen35": build_qwen35, "qwen35moe": build_qwen35, "gemma4": build_gemma4, "deepseek2": build_deepseek2}


def build_family(mm, a, g, rng):
    """Writes a.shape's keys and tensors into g; returns the bytes one decode token reads."""
    s = dict(FAMILY_SHAPES[a.shape], vocab=a.vocab)  # a.vocab: the shape's, or --tokenizer's
    main = "Q4_K" if a.type == "Q4_K_M" else a.type
    head = "Q6_K" if a.type == "Q4_K_M" else a.type
    w = Writer(g, rng, mm, main, head)
    BUILDERS[s["arch"]](g, mm, a, s, w)
    return w.read
