/*
 * model_internal.h — (engine-private) the loaded model's layout, shared by model.c (loading and
 * validation) and engine.c (evaluation). Weight matrices stay in their GGUF type inside the
 * mmap; only the small vectors (norm weights, biases) are copied out as F32 at load.
 */
#ifndef ATTND_MODEL_INTERNAL_H
#define ATTND_MODEL_INTERNAL_H

#include "arch.h"
#include "attnd/engine.h"
#include "deltanet.h"
#include "mla.h"

/* A weight matrix in the mapping: (rows, cols) with rows contiguous, elements of `type`. */
typedef struct weight {
    const void *data;
    uint32_t type;
    int64_t rows, cols;
    struct quant_packed *packed; /* owned: a decode kernel's copy made at load (quant_pack), or NULL */
    const char *name;            /* the GGUF tensor's name (the file's, valid while the model lives) */
} weight;

/* A rotary table: position p rotates pair i by p * inv_freq[i], and cos and sin are scaled by
 * mscale (YaRN's attention factor; 1 otherwise). */
typedef struct rope_table {
    double *inv_freq;        /* (rope_dims / 2): base^(-2i / rope_dims), with the file's scaling */
    float mscale;
} rope_table;

/* Which rotary table a layer uses. */
enum { ROPE_GLOBAL = 0, ROPE_LOCAL = 1, ROPE_TABLES = 2 };

/* What a layer's token mixer is (arch recurrent_interval). */
enum { LAYER_ATTENTION = 0, LAYER_DELTANET = 1 };

typedef struct layer_weights {
    int kind;                /* LAYER_ATTENTION or LAYER_DELTANET */
    int dn_slot;             /* LAYER_DELTANET: the layer's index among them (its state in a kv_seq) */
    float *attn_norm;        /* (n_embd) */
    weight wq, wk, wv, wo;   /* (q_dim, n_embd), (kv_dim, n_embd) x2, (n_embd, q_dim); wq..wv empty when fused;
                                arch q_gate: wq is (2 q_dim, n_embd), each head's query rows then its gate's */
    weight wqkv;             /* (q_dim + 2 kv_dim, n_embd): q, k, v rows fused (arch fused_qkv), or empty;
                                LAYER_DELTANET: attn_qkv (conv_dim, n_embd) */
    /* LAYER_DELTANET (deltanet.h): attn_gate (z), ssm_beta, ssm_alpha, ssm_out; the rest as F32 */
    weight dn_z, dn_beta, dn_alpha, dn_out; /* (hv dv, E), (hv, E), (hv, E), (E, hv dv) */
    weight dn_ba;            /* (2 hv, E) arch dn_fused_ba, instead of dn_beta and dn_alpha: key head g's
                                r = hv / hk beta rows, then its r alpha rows, g after g */
    float *dn_conv;          /* (conv_dim, K) ssm_conv1d */
    float *dn_dt_bias, *dn_a; /* (hv) ssm_dt.bias, ssm_a (= -exp(A_log)) */
    float *dn_norm;          /* (dv) ssm_norm */
    float *bq, *bk, *bv;     /* (q_dim), (kv_dim), (kv_dim), or NULL when the file has none */
    float *bo;               /* (n_embd) attn_output.bias (arch attn_out_bias), or NULL */
    float *sinks;            /* (n_head) attention sink logits (arch sinks), or NULL */
    float *q_norm, *k_norm;  /* (head_dim) per-head RMSNorm before RoPE (arch qk_norm), or NULL */
    float *post_attn_norm;   /* (n_embd) RMSNorm of the attention output (arch post_norms), or NULL */
    float *ffn_norm;         /* (n_embd) */
    float *post_ffn_norm;    /* (n_embd) RMSNorm of the FFN output, or NULL */
    weight w_gate, w_up;     /* (n_ff, n_embd); fused (arch fused_gate_up): w_up (2 n_ff, n_embd), gate
                                rows first, and w_gate empty */
    weight w_down;           /* (n_embd, n_ff) */
    weight router;           /* (n_expert, n_embd) ffn_gate_inp (arch moe), or empty; then no dense FFN */
    weight gate_exps, up_exps; /* (n_expert * n_ff_exp, n_embd): expert x's rows from x * n_ff_exp */
    weight down_exps;        /* (n_expert * n_embd, n_ff_exp): expert x's rows from x * n_embd */
    float *router_b;         /* (n_expert) (arch moe_biases), or NULL */
    float *gate_exps_b, *up_exps_b; /* (n_expert, n_ff_exp), or NULL */
    float *down_exps_b;      /* (n_expert, n_embd), or NULL */
    weight gate_shexp, up_shexp, down_shexp; /* (n_ff_shexp, E) x2, (E, n_ff_shexp) (arch shared_expert) */
    float *shexp_gate;       /* (n_embd) ffn_gate_inp_shexp: the shared expert's weight is sigmoid(. xn) */
    /* arch mla (mla.h; wq is a plain attn_q (H qk, E) when the file has no q LoRA) */
    weight wq_a, wq_b;       /* (q_lora, E) attn_q_a, (H qk, q_lora) attn_q_b, or empty */
    weight wkv_a;            /* (kv_lora + rope, E) attn_kv_a_mqa */
    float *q_a_norm;         /* (q_lora) attn_q_a_norm, or NULL */
    float *kv_a_norm;        /* (kv_lora) attn_kv_a_norm */
    mla_heads k_b, v_b;      /* W_UK,h (kv_lora, nope), W_UV,h (v_head, kv_lora) per head */
    float *k_b_own;          /* a legacy attn_kv_b's W_UK,h transposed, as F32 (owned; k_b.data), or NULL */
    float *exp_probs_b;      /* (n_expert) ffn_exp_probs_b (arch ds_router): added for the choice only, or NULL */
    bool rope;               /* false: a NoPE layer (no rotation of q and k) */
    int window;              /* 0: global attention; W > 0: sees positions pos - W + 1 .. pos */
    /* arch post_ln (encoder.c): attn_norm is attn_output_norm and ffn_norm layer_output_norm, with
     * these biases; the FFN's biases (NULL when the file has none) */
    float *attn_norm_b, *ffn_norm_b; /* (n_embd) */
    float *b_up, *b_down;    /* (n_ff), (n_embd) */
    float *b_qkv;            /* (q_dim + 2 kv_dim) attn_qkv.bias of a fused encoder projection, or NULL */
    int rope_table;          /* ROPE_GLOBAL or ROPE_LOCAL */
    /* The layer's attention geometry (arch layer_geometry: per layer kind; else the model's):
     * q_dim = n_head head_dim, kv_dim = n_head_kv head_dim, rotating rope_dims of each head. */
    int head_dim, n_head_kv, q_dim, kv_dim, rope_dims;
    int n_ff;                /* the dense FFN's width (feed_forward_length, per layer when an array) */
    int kv_source;           /* the layer whose cache this one reads: itself, or an earlier one
                                (arch layer_geometry: attention.shared_kv_layers); then no wk, wv */
    float out_scale;         /* the layer's output (the whole residual) times this; 1 = none */
    /* arch moe_beside_dense, layers with a router: the dense FFN (ffn_norm, post_ffw_norm_1) and
     * the experts (pre_ffw_norm_2, post_ffw_norm_2) side by side, their outputs summed */
    float *ffn_post_norm_1, *ffn_pre_norm_2, *ffn_post_norm_2; /* (n_embd) */
    float *router_scale;     /* (n_embd) the router reads rmsnorm(x) / sqrt(n_embd) * this */
    float *down_exps_scale;  /* (n_expert) each expert's output times this, or NULL */
    int exp_stride;          /* rows of one expert in gate_exps / up_exps: n_ff_exp, or 2 n_ff_exp when
                                fused (ffn_gate_up_exps: each expert's gate rows, then its up rows) */
    /* per-layer embeddings (model n_ple > 0): xn_ple = gelu(x W_inp_gate) * ple_row, then
     * x += rmsnorm(xn_ple W_proj) post_norm */
    weight ple_gate;         /* (n_ple, n_embd) blk.N.inp_gate */
    weight ple_proj;         /* (n_embd, n_ple) blk.N.proj */
    float *ple_post_norm;    /* (n_embd) blk.N.post_norm */
} layer_weights;

struct model {
    gguf_file *f;
    model_info info;
    const arch_desc *arch;
    int q_dim, kv_dim;       /* n_head * head_dim, n_head_kv * head_dim */
    weight tok_embd;         /* (n_vocab, n_embd) */
    float *output_norm;      /* (n_embd) */
    weight output;           /* (n_vocab, n_embd); token_embd when the file has no output.weight */
    layer_weights *layers;   /* (n_layer) */
    rope_table rope[ROPE_TABLES]; /* global layers', local layers' (inv_freq NULL when no layer is local) */
    float swa_rope_base;          /* local layers' RoPE base (rope.freq_base_swa or the family's); 0: global */
    float attn_scale;        /* query scale: 1/sqrt(head_dim) unless the family says otherwise */
    float attn_softcap;      /* > 0: scores become cap * tanh(score / cap) before the softmax */
    float final_softcap;     /* > 0: the same for the output logits */
    float embd_scale;        /* embeddings times this (1 unless the family scales them) */
    arch_act ffn_act;        /* the gated FFN's activation (arch act, or the file's hidden_activation: arch act_key) */
    int max_window;          /* the widest sliding window of any layer; 0 when all are global */
    int n_expert, n_expert_used, n_ff_exp; /* Mixture of Experts (arch moe); 0 otherwise */
    int n_ff_shexp;          /* the shared expert's width (arch shared_expert); 0 otherwise */
    int max_head_dim, max_group; /* the largest head_dim, n_head / n_head_kv of any layer (scratch) */
    int max_ff;              /* the largest dense FFN width of any layer */
    int max_rope_dims;       /* the largest rope_dims of any rotary table */
    int rope_dims[ROPE_TABLES]; /* each rotary table's dimensions (rope.dimension_count[_swa]) */
    bool v_norm;             /* arch v_norm: V heads RMS-normalised with no weight */
    /* Per-layer embeddings (Gemma 4 E2B / E4B): n_ple values per layer and token */
    int n_ple;               /* embedding_length_per_layer_input; 0 = none */
    weight ple_embd;         /* (n_vocab, n_layer n_ple) per_layer_token_embd, looked up by row */
    weight ple_model_proj;   /* (n_layer n_ple, n_embd) per_layer_model_proj */
    float *ple_proj_norm;    /* (n_ple) per_layer_proj_norm */
    dn_dims dn;              /* the Gated DeltaNet layers' sizes (all zero without them) */
    mla_dims mla;            /* the latent attention's sizes (arch mla; all zero otherwise) */
    /* arch ds_router: the gating (1 softmax, 2 sigmoid), the weights' normalisation and scale, the
     * expert groups (n_group 0 or 1: no grouping) and the leading dense layers */
    int moe_gating, n_group, n_group_used, n_dense_lead;
    bool moe_w_norm;
    float moe_w_scale;       /* 0 or 1: unscaled */
    float mla_log_mul;       /* YaRN's mscale_all_dim (rope.scaling.yarn_log_multiplier / 0.1), or 0 */
    int n_dn_layers;         /* LAYER_DELTANET layers */
    /* The multi-token-prediction block (arch mtp, info.mtp): layers[n_layer], a gated-attention
     * block, fed eh_proj [rmsnorm(embd(token)) enorm | rmsnorm(h) hnorm] (h: the main model's
     * final-normed hidden state of the position before); its output goes through head_norm and
     * head (llama.cpp's qwen35 graph_mtp). */
    weight mtp_eh_proj;      /* (n_embd, 2 n_embd) nextn.eh_proj */
    weight mtp_embd;         /* (n_vocab, n_embd) nextn.embed_tokens, or token_embd */
    weight mtp_head;         /* (n_vocab, n_embd) nextn.shared_head_head, or output */
    float *mtp_enorm, *mtp_hnorm; /* (n_embd), owned */
    float *mtp_head_norm;    /* (n_embd) nextn.shared_head_norm (owned), or NULL: output_norm */
    size_t packed_bytes;     /* memory of the weights' packed copies (weight.packed) */
    int run_ctx;             /* the context it is run at (model_set_context): n_ctx or less */
    uint8_t *tensor_read;    /* load scratch: (gguf_tensor_count) 1 = a step reads the tensor */
    /* embeddings and ranking (embed.c, attnd/embed.h) */
    int pooling;             /* model_pooling: the file's <arch>.pooling_type, or the default */
    weight cls, cls_out;     /* (n_embd, n_embd) cls.weight, (n_cls_out, n_embd) cls.output.weight; or empty */
    float *cls_b, *cls_out_b; /* (n_embd), (n_cls_out), or NULL */
    float *cls_norm;         /* (n_embd) cls.norm (arch rank_mean_gelu), or NULL */
    int n_cls_out;           /* cls.output's rows; 0 without a head */
    weight dense_2, dense_3; /* (D, n_embd), (n_embd, D): projections after pooling (EmbeddingGemma), or empty */
    /* encoders (arch post_ln, abs_pos; encoder.c) */
    weight pos_embd;         /* (n_ctx, n_embd) position_embd (arch abs_pos), or empty */
    weight type_embd;        /* (n_types, n_embd) token_types, or empty */
    int n_types;             /* token_types' rows (0 without) */
    float *tok_norm, *tok_norm_b; /* (n_embd) token_embd_norm weight and bias, or NULL */
};

#endif /* ATTND_MODEL_INTERNAL_H */
