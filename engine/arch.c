/*
 * arch.c — the architectures attnd runs, one row each (see arch.h). The facts are those of
 * llama.cpp's GGUF conventions: tensor and key names, which RoPE pairing, which norms; where
 * llama.cpp takes a fact from its own code rather than from the file (Gemma's window patterns,
 * Gemma 3's local RoPE base, SmolLM3's NoPE step), the row carries it.
 *
 * Gemma's norms: the GGUF converter stores Gemma's RMSNorm weights as 1 + w (the checkpoint's
 * convention is x * (1 + w)), so every family's norm is the same x / rms(x) * weight here.
 */
#include "arch.h"

#include <string.h>

#include "attnd/common.h"

static const char *const KEYS_NONE[] = {NULL};
static const char *const KEYS_GEMMA2[] = {"attention.sliding_window", "attn_logit_softcapping",
                                          "final_logit_softcapping", "rope.freq_base_swa", NULL};
static const char *const KEYS_GEMMA3[] = {"attention.sliding_window", "final_logit_softcapping",
                                          "rope.freq_base_swa", NULL};
static const char *const KEYS_GEMMA4[] = {"attention.sliding_window", "attention.sliding_window_pattern",
                                          "attention.key_length_swa", "attention.value_length_swa",
                                          "rope.dimension_count_swa", "rope.freq_base_swa",
                                          "attention.shared_kv_layers", "embedding_length_per_layer_input",
                                          "final_logit_softcapping", "expert_count", "expert_used_count",
                                          "expert_feed_forward_length", NULL};
static const char *const KEYS_PHI3[] = {"attention.sliding_window", NULL};
static const char *const KEYS_MOE[] = {"expert_count", "expert_used_count", "expert_feed_forward_length", NULL};
static const char *const KEYS_GPT_OSS[] = {"expert_count", "expert_used_count", "expert_feed_forward_length",
                                           "attention.sliding_window", "rope.freq_base_swa", NULL};

/* rope.dimension_sections: multi-section RoPE gives every section the same position for text, so
 * for text it is NEOX over rope.dimension_count dimensions (llama.cpp's batches broadcast a token's
 * position to every section). */
#define KEYS_HYBRID_COMMON "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", \
    "ssm.group_count", "full_attention_interval", "rope.dimension_sections", "nextn_predict_layers"
static const char *const KEYS_QWEN35[] = {KEYS_HYBRID_COMMON, NULL};
static const char *const KEYS_QWEN35MOE[] = {KEYS_HYBRID_COMMON, "expert_count", "expert_used_count",
                                             "expert_feed_forward_length", "expert_shared_feed_forward_length", NULL};

/* deepseek2: the MLA sizes, DeepSeek's router, YaRN's attention-scale term; nextn_predict_layers
 * (GLM-4.7-Flash's MTP block, not run) */
static const char *const KEYS_DEEPSEEK2[] = {
    "expert_count", "expert_used_count", "expert_feed_forward_length", "expert_shared_count",
    "leading_dense_block_count", "attention.q_lora_rank", "attention.kv_lora_rank", "attention.key_length_mla",
    "attention.value_length_mla", "expert_weights_scale", "expert_weights_norm", "expert_gating_func",
    "expert_group_count", "expert_group_used_count", "rope.scaling.yarn_log_multiplier", "nextn_predict_layers",
    NULL};
static const char *const KEYS_BERT[] = {"attention.layer_norm_epsilon", NULL};
static const char *const KEYS_GEMMA_EMB[] = {"attention.sliding_window", "rope.freq_base_swa", "dense_2_feat_in",
                                             "dense_2_feat_out", "dense_3_feat_in", "dense_3_feat_out", NULL};

static const char *const KEYS_MODERN_BERT[] = {"attention.layer_norm_epsilon", "attention.sliding_window",
                                               "attention.sliding_window_pattern", "rope.freq_base_swa",
                                               "hidden_activation", NULL};

static const arch_desc ARCHS[] = {
    {.name = "llama", .rope = ROPE_ADJACENT, .qkv_bias = NEED_OPTIONAL, .keys = KEYS_NONE},
    {.name = "qwen2", .rope = ROPE_NEOX, .qkv_bias = NEED_YES, .keys = KEYS_NONE},
    {.name = "qwen3", .rope = ROPE_NEOX, .qk_norm = true, .keys = KEYS_NONE},
    {.name = "smollm3", .rope = ROPE_ADJACENT, .nope_step = 4, .keys = KEYS_NONE},
    {.name = "gemma2", .rope = ROPE_NEOX, .post_norms = true, .embd_scale = true, .act = ACT_GELU_TANH,
     .swa_pattern = 2, .swa_default = 4096, .swa_rope_scaled = true, .softcap = true, .wide_scale_layers = 46,
     .keys = KEYS_GEMMA2},
    /* no window key (or 0): every layer global, as llama.cpp reads it; final soft-capping only when
     * the file says */
    {.name = "gemma3", .rope = ROPE_NEOX, .qk_norm = true, .post_norms = true, .embd_scale = true,
     .act = ACT_GELU_TANH, .swa_pattern = 6, .swa_optional = true, .swa_rope_base = 10000.0f, .softcap = true,
     .wide_scale_layers = 62, .keys = KEYS_GEMMA3},
    /* Gemma 4 (E2B, E4B, 26B-A4B, 31B): per-layer geometry, K as V where attn_v is absent, V
     * normed, query scale 1, proportional RoPE on global layers (rope_freqs), a per-layer output
     * scale, per-layer embeddings (E models), experts beside the dense FFN (26B-A4B) */
    {.name = "gemma4", .rope = ROPE_NEOX, .qk_norm = true, .post_norms = true, .embd_scale = true,
     .act = ACT_GELU_TANH, .softcap = true, .layer_geometry = true, .v_optional = true, .v_norm = true,
     .unit_attn_scale = true, .out_scale = true, .per_layer_embd = true, .moe_beside_dense = true,
     .keys = KEYS_GEMMA4},
    /* the converter writes sliding_window (2047 in Phi-3-mini-4k, 0 or none meaning none): every
     * layer sees that window, as the checkpoint's own attention does; llama.cpp ignores it, which
     * only differs beyond the window */
    {.name = "phi3", .rope = ROPE_NEOX, .fused_qkv = true, .fused_gate_up = true, .swa_every_layer = true,
     .swa_optional = true, .keys = KEYS_PHI3},
    /* router softmax over all experts, top expert_used_count, their weights renormalised to sum 1 */
    {.name = "qwen3moe", .rope = ROPE_NEOX, .qk_norm = true, .moe = true, .keys = KEYS_MOE},
    /* biases everywhere, sinks, even layers local (window required), the FFN's input norm is
     * post_attention_norm; the experts are MXFP4 in released files (attnd: not yet) */
    {.name = "gpt-oss", .rope = ROPE_NEOX, .qkv_bias = NEED_YES, .attn_out_bias = true, .sinks = true,
     .act = ACT_SWIGLU_OAI, .moe = true, .moe_biases = true, .moe_softmax_topk = true, .swa_pattern = 2,
     .swa_rope_scaled = true, .ffn_norm = "post_attention_norm", .keys = KEYS_GPT_OSS},
    /* three Gated DeltaNet layers to one gated attention layer; no ffn_norm: post_attention_norm is
     * the FFN's input norm; the converter stores every RMSNorm weight but ssm_norm's as 1 + w */
    {.name = "qwen35", .rope = ROPE_NEOX, .qk_norm = true, .recurrent_interval = 4, .q_gate = true, .mtp = true,
     .ffn_norm = "post_attention_norm", .keys = KEYS_QWEN35},
    {.name = "qwen35moe", .rope = ROPE_NEOX, .qk_norm = true, .recurrent_interval = 4, .q_gate = true, .moe = true,
     .shared_expert = true, .mtp = true, .ffn_norm = "post_attention_norm", .keys = KEYS_QWEN35MOE},
    /* Qwen3-Next: qwen35moe with the DeltaNet's V heads in grouped order and beta, alpha fused */
    {.name = "qwen3next", .rope = ROPE_NEOX, .qk_norm = true, .recurrent_interval = 4, .dn_grouped = true,
     .dn_fused_ba = true, .q_gate = true, .moe = true, .shared_expert = true, .mtp = true,
     .ffn_norm = "post_attention_norm", .keys = KEYS_QWEN35MOE},
    /* DeepSeek-V2/V3, Kimi-K2, GLM-4.7-Flash: latent attention, adjacent-pair RoPE on its rotated
     * part only, DeepSeek's router */
    {.name = "deepseek2", .rope = ROPE_ADJACENT, .mla = true, .moe = true, .ds_router = true,
     .shared_expert = true, .keys = KEYS_DEEPSEEK2},
    /* encoders (attnd/embed.h: embeddings and ranking, no generation) */
    {.name = "bert", .bidirectional = true, .post_ln = true, .abs_pos = true, .ffn_ungated = true,
     .act = ACT_GELU_TANH, .qkv_bias = NEED_OPTIONAL, .attn_out_bias = true, .keys = KEYS_BERT},
    /* nomic-embed-text v1/v1.5: bert's layer with NEOX RoPE instead of positions, fused attn_qkv,
     * a SwiGLU FFN without biases */
    {.name = "nomic-bert", .bidirectional = true, .post_ln = true, .rope = ROPE_NEOX, .fused_qkv = true,
     .act = ACT_SILU, .qkv_bias = NEED_OPTIONAL, .attn_out_bias = true, .keys = KEYS_BERT},
    /* EmbeddingGemma: gemma3's layers attending both ways, local layers (five of six, the window
     * required) seeing window / 2 positions on either side; local RoPE base 10000 unless the file
     * says; optional dense_2 / dense_3 projections after pooling (embed.c) */
    {.name = "gemma-embedding", .bidirectional = true, .rope = ROPE_NEOX, .qk_norm = true, .post_norms = true,
     .embd_scale = true, .act = ACT_GELU_TANH, .swa_pattern = 6, .swa_rope_base = 10000.0f, .keys = KEYS_GEMMA_EMB},
    /* ModernBERT (gte-modernbert, granite-embedding-r2, nomic's ModernBERT embedders): pre-LayerNorm
     * layers without biases, fused attn_qkv, GeGLU (or SwiGLU, as hidden_activation says) over a fused
     * ffn_up, NEOX RoPE with the global and local layers' own bases; with a window, every layer local
     * but the first of each period of sliding_window_pattern (3 without the key), seeing window / 2
     * positions either side; no window key: every layer global, as llama.cpp reads it; its rank
     * head pools the mean, then cls, GELU and cls.norm */
    {.name = "modern-bert", .bidirectional = true, .pre_ln = true, .rope = ROPE_NEOX, .fused_qkv = true,
     .fused_gate_up = true, .act = ACT_GELU_TANH, .act_key = true, .swa_pattern = 3, .swa_dense_first = true,
     .swa_optional = true, .swa_rope_base = 10000.0f, .rank_mean_gelu = true, .keys = KEYS_MODERN_BERT},
};

/* Keys every family reads (model.c) or that change nothing attnd computes. */
static const char *const KEYS_COMMON[] = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
    "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.scaling.type", "rope.scaling.factor",
    "rope.scaling.original_context_length", "rope.scaling.attn_factor", "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    /* embeddings and ranking (embed.c): */
    "pooling_type", "classifier.output_labels",
    /* informational: */
    "vocab_size", "rope.scaling.finetuned", NULL};

const arch_desc *arch_find(const char *name) {
    for (size_t i = 0; i < ATTND_ARRAY_LEN(ARCHS); i++)
        if (!strcmp(ARCHS[i].name, name)) return &ARCHS[i];
    return NULL;
}

const char *arch_names(void) {
    return "llama, qwen2, qwen3, qwen3moe, smollm3, gemma2, gemma3, gemma4, phi3, gpt-oss, qwen35, qwen35moe, qwen3next, "
           "deepseek2, bert, nomic-bert, gemma-embedding, modern-bert";
}

static bool in_list(const char *const *list, const char *s) {
    for (; *list; list++)
        if (!strcmp(*list, s)) return true;
    return false;
}

bool arch_key_known(const arch_desc *d, const char *suffix) {
    return in_list(KEYS_COMMON, suffix) || in_list(d->keys, suffix);
}

static const arch_fixed_key FIXED_COMMON[] = {{"attention.causal", 1, "causal (decoder) attention"}};
static const arch_fixed_key FIXED_ENCODER[] = {{"attention.causal", 0, "bidirectional (encoder) attention"}};
static const arch_fixed_key FIXED_SOFTMAX_GATE[] = {{"expert_gating_func", 1, "softmax expert gating"}};

const arch_fixed_key *arch_fixed_key_find(const arch_desc *d, const char *suffix) {
    const arch_fixed_key *common = d->bidirectional ? FIXED_ENCODER : FIXED_COMMON;
    if (!strcmp(common->suffix, suffix)) return common;
    /* the families whose router is a softmax over every expert (gpt-oss's softmax of the top k
     * has no gating value of its own in GGUF) */
    if (d->moe && !d->moe_softmax_topk && !d->ds_router && !strcmp(FIXED_SOFTMAX_GATE[0].suffix, suffix)) return &FIXED_SOFTMAX_GATE[0];
    return NULL;
}
