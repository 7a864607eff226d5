/*
 * arch.h — (engine-private) what each supported architecture computes, in one table (arch.c).
 *
 * model.c reads a family's description to know which tensors and keys to expect; engine.c reads
 * the per-layer facts model.c derives from it (layer_weights: NoPE, window, RoPE table) and the
 * model-wide ones (model: norms, activation, scales). Neither branches on a family's name: a new
 * family that combines known pieces is a new row of the table.
 */
#ifndef ATTND_ARCH_H
#define ATTND_ARCH_H

#include <stdbool.h>
#include <stdint.h>

/* Which elements RoPE rotates together: (2i, 2i+1) (llama's converter permutes Q/K for it), or
 * (i, i + rope_dims/2) ("NEOX"). */
typedef enum arch_rope_pairs { ROPE_ADJACENT = 0, ROPE_NEOX = 1 } arch_rope_pairs;

/* The gated feed-forward's activation on the gate: silu (SwiGLU) or gelu, tanh form (GeGLU). */
/* ACT_SWIGLU_OAI (gpt-oss): gate g clamped above at 7, up u to [-7, 7], then g sigmoid(1.702 g) (u + 1). */
typedef enum arch_act { ACT_SILU = 0, ACT_GELU_TANH = 1, ACT_SWIGLU_OAI = 2 } arch_act;

/* Whether a tensor of every layer is absent, optional or required. */
typedef enum arch_need { NEED_NO = 0, NEED_OPTIONAL = 1, NEED_YES = 2 } arch_need;

typedef struct arch_desc {
    const char *name;          /* general.architecture */
    arch_rope_pairs rope;
    arch_need qkv_bias;        /* attn_{q,k,v}.bias */
    bool qk_norm;              /* attn_q_norm, attn_k_norm: RMSNorm of each head (head_dim) before RoPE */
    bool post_norms;           /* post_attention_norm, post_ffw_norm: RMSNorm of each sub-layer's output */
    bool embd_scale;           /* embeddings times sqrt(n_embd) */
    arch_act act;
    bool fused_qkv;            /* attn_qkv (q_dim + 2 kv_dim rows) instead of attn_q/k/v */
    bool fused_gate_up;        /* ffn_up holds the gate's n_ff rows, then up's; no ffn_gate */
    bool moe;                  /* router ffn_gate_inp and experts ffn_{gate,up,down}_exps; no dense FFN */
    bool moe_biases;           /* ffn_gate_inp.bias and ffn_{gate,up,down}_exps.bias */
    /* Expert weights: false = softmax over every expert, the top k renormalised to 1 (Qwen3-MoE);
     * true = the top k logits, then a softmax over those k (gpt-oss). */
    bool moe_softmax_topk;
    bool attn_out_bias;        /* attn_output.bias */
    bool sinks;                /* attn_sinks (n_head): a per-head logit in every softmax's denominator */
    const char *ffn_norm;      /* the FFN's input norm tensor ("blk.N.<name>.weight"); NULL = ffn_norm */
    /* Sliding-window attention: with swa_pattern n > 0, layer l is local (sees the last `window`
     * positions) unless l % n == n - 1; with swa_every_layer, every layer is. The window is
     * <arch>.attention.sliding_window, or swa_default when the file has none (0: the key is
     * required, unless swa_optional: then no key, or 0, means no local layers, as llama.cpp reads
     * Gemma 3 and Phi-3 files). */
    int swa_pattern, swa_default;
    bool swa_every_layer, swa_optional;
    /* With swa_pattern: layer l is global when l % n == 0 instead (the first of each period), n
     * being <arch>.attention.sliding_window_pattern (one integer) when the file has it (ModernBERT). */
    bool swa_dense_first;
    /* Local layers' RoPE: base <arch>.rope.freq_base_swa, or swa_rope_base when the file has none
     * (0: the global base); unscaled, or with the global layers' scaling when swa_rope_scaled. */
    float swa_rope_base;
    bool swa_rope_scaled;
    int nope_step;             /* n > 0: layer l skips RoPE when (l + 1) % n == 0 */
    bool softcap;              /* attn_logit_softcapping, final_logit_softcapping keys */
    /* Query scale 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim) at this depth (Gemma's
     * 27B: llama.cpp keys it on the layer count, the file carries no scale); 0 = never. */
    int wide_scale_layers;
    /* Hybrid Gated DeltaNet (Qwen3.5, Qwen3-Next): layer l is a Gated DeltaNet layer (deltanet.h,
     * the <arch>.ssm.* keys) unless (l + 1) % <arch>.full_attention_interval == 0 (this when the
     * file has no interval); 0 = every layer is attention. The last <arch>.nextn_predict_layers
     * blocks (multi-token prediction) are not run by the main pass. */
    int recurrent_interval;
    /* The family's nextn block (Qwen3.5's MTP, one gated-attention block after the main ones) is
     * run as the model's own draft when the file has exactly one (engine.h engine_mtp_step). */
    bool mtp;
    /* Gated DeltaNet value head h reads key head h / (H_v / H_k) (Qwen3-Next's files keep the
     * checkpoint's grouped order); false: h mod H_k (Qwen3.5's converter reorders the V heads). */
    bool dn_grouped;
    bool dn_fused_ba;          /* ssm_ba: per key head its value heads' beta rows, then their alpha rows */
    bool q_gate;               /* attn_q holds [query | gate] per head; the output is times sigmoid(gate) */
    bool shared_expert;        /* ffn_{gate,up,down}_shexp beside the experts, gated by sigmoid(ffn_gate_inp_shexp x) */
    /* Gemma 4's per-layer attention (model.c read_geometry): attention.sliding_window_pattern (one
     * bool per layer) says which layers are local; local layers have their own head size
     * (attention.key_length_swa) and RoPE dims (rope.dimension_count_swa), and their own RoPE table
     * (rope.freq_base_swa, else the global base); head_count_kv and feed_forward_length may be
     * per-layer arrays; the last attention.shared_kv_layers layers keep no cache and read an
     * earlier layer's (llama.cpp's rule: the last layer with a cache for a global layer, the one
     * before it for a local one). */
    bool layer_geometry;
    bool v_optional;           /* attn_v may be absent: then V is K's projection, before k-norm and RoPE */
    bool v_norm;               /* each V head RMS-normalised, with no weight */
    bool unit_attn_scale;      /* query scale 1 (the q-norm's weight carries the scale) */
    bool out_scale;            /* layer_output_scale (optional, one value): the layer's output times it */
    bool per_layer_embd;       /* embedding_length_per_layer_input > 0: per-layer embeddings (model.h) */
    /* Layers with a router (ffn_gate_inp, optional per layer) run the dense FFN and the experts side
     * by side and add them, each with its own norms; the router reads its own scaled input. */
    bool moe_beside_dense;
    /* Multi-head latent attention (mla.h): attn_q or attn_q_a / attn_q_a_norm / attn_q_b,
     * attn_kv_a_mqa, attn_kv_a_norm, attn_k_b and attn_v_b (or a legacy attn_kv_b); the cache holds
     * the latent and the rotated key part per token. */
    bool mla;
    /* DeepSeek's router: expert_gating_func (softmax or sigmoid) with exp_probs_b added for the
     * choice only, grouped top-k (expert_group_count, expert_group_used_count), expert_weights_norm
     * and expert_weights_scale; the first leading_dense_block_count layers are dense, and
     * expert_shared_count shared experts of the experts' width run ungated beside the routed ones. */
    bool ds_router;
    /* Attention both ways (an encoder): every position of an input sees every other position of
     * the same input, and no KV is kept (attnd/embed.h evaluates it; no generation). A local
     * layer's window is then symmetric: keys within window / 2 positions on either side. */
    bool bidirectional;
    /* BERT's layer (encoder.c): x = LayerNorm(x + attention(x)), x = LayerNorm(x + ffn(x)), LayerNorms
     * with weight and bias (<arch>.attention.layer_norm_epsilon; attn_output_norm, layer_output_norm),
     * the embeddings LayerNorm'd first (token_embd_norm), token types added (token_types, row 0
     * without types); projections with optional biases; no final norm. */
    bool post_ln;
    bool abs_pos;              /* position_embd rows (n_ctx, n_embd) added to the embeddings; no RoPE */
    bool ffn_ungated;          /* the FFN is W_down act(W_up x + b) + b (no gate) */
    /* ModernBERT's layer (encoder.c): x += attention(LN(x)), x += ffn(LN(x)), LayerNorms with a
     * weight and no bias (<arch>.attention.layer_norm_epsilon): attn_norm (absent on the first layer:
     * the identity), ffn_norm, the embeddings' token_embd_norm and the final output_norm. */
    bool pre_ln;
    /* <arch>.hidden_activation picks the gated FFN's activation, as llama.cpp maps it: "gelu",
     * "geglu" GeGLU; "silu", "swish", "swiglu" SwiGLU; "relu", "reglu" refused; others act. */
    bool act_key;
    /* The rank head as llama.cpp builds it for ModernBERT (its cross-encoders: gte-reranker-modernbert):
     * the mean of the input's rows (not the first), cls, then GELU (not tanh), then a LayerNorm of
     * weight cls.norm (optional, no bias), then cls.output. */
    bool rank_mean_gelu;
    const char *const *keys;   /* the family's own "<arch>." keys beyond the common ones, NULL-ended */
} arch_desc;

/* The description of general.architecture `name`, or NULL when attnd does not run it. */
const arch_desc *arch_find(const char *name);
/* "llama, qwen2, ..." for messages. */
const char *arch_names(void);
/* Whether "<arch>.<suffix>" is a key attnd reads and applies for d (common or the family's), or
 * one known to change nothing. */
bool arch_key_known(const arch_desc *d, const char *suffix);

/* A key converters write that attnd accepts with one value only, the one that means what it
 * computes (attention.causal true; Qwen3-MoE's expert_gating_func 1, softmax); any other value is
 * refused by name. */
typedef struct arch_fixed_key {
    const char *suffix;
    int64_t value;     /* as an integer (bool: 0 / 1) */
    const char *means; /* what that value means, for the refusal */
} arch_fixed_key;
/* d's fixed-value key "<arch>.<suffix>", or NULL. */
const arch_fixed_key *arch_fixed_key_find(const arch_desc *d, const char *suffix);

#endif /* ATTND_ARCH_H */
