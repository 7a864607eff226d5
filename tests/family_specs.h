/*
 * family_specs.h — (tests only) the generated models of each family that attnd is compared on:
 * small ones with a vocabulary that llama.cpp loads (greedy references in
 * tests/data/reference-families.json, made by tests/data/regenerate.sh through tests/tiny_model.c),
 * and ones with a released model's real attention and FFN shape at reduced depth (checked against
 * the float64 reference in test_model.c). Shared by test_model.c and tiny_model.c so both write
 * the very same files.
 */
#ifndef ATTND_TEST_FAMILY_SPECS_H
#define ATTND_TEST_FAMILY_SPECS_H

#include <string.h>

#include "engine_fixture.h"
#include "gemma4_fixture.h"
#include "hybrid_fixture.h"
#include "mla_fixture.h"

/* The families of the llama.cpp comparison, in the order of reference-families.json. */
static const char *const FAMILY_NAMES[] = {"qwen3", "smollm3", "gemma2", "gemma3", "phi3", "qwen3moe", "gpt-oss"};
#define N_FAMILIES (sizeof(FAMILY_NAMES) / sizeof(FAMILY_NAMES[0]))

/* Prompt of the llama.cpp comparison (ids; no BOS added) and the tokens generated after it. */
static const int32_t FAMILY_PROMPT[7] = {1, 300, 301, 302, 260, 270, 280};
#define FAMILY_N_GEN 100

/* The small model of family `arch` that llama.cpp runs: 64 wide, vocabulary of 320. llama.cpp
 * wants rope.dimension_count = head size for these families. Windows are short, so that the
 * 107 positions cross them. */
static inline tiny_spec family_small(const char *arch) {
    tiny_spec sp = tiny_default(arch);
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 512, sp.n_embd = 64, sp.n_head = 4, sp.n_head_kv = 2;
    sp.n_ff = 96, sp.rope_dims = 16;
    if (!strcmp(arch, "qwen3")) sp.head_dim = 32, sp.rope_dims = 32, sp.rope_base = 1e6f, sp.rms_eps = 1e-6f;
    if (!strcmp(arch, "smollm3")) sp.n_layer = 4;
    if (!strcmp(arch, "gemma2"))
        sp.n_layer = 4, sp.window = 24, sp.attn_softcap = 50.0f, sp.final_softcap = 30.0f, sp.tied = true,
        sp.rms_eps = 1e-6f;
    if (!strcmp(arch, "gemma3"))
        sp.n_layer = 6, sp.window = 24, sp.head_dim = 32, sp.rope_dims = 32, sp.rope_base = 1e6f, sp.tied = true,
        sp.rms_eps = 1e-6f, sp.rope_base_swa = 10000.0f; /* the converter writes the local base */
    if (!strcmp(arch, "gpt-oss"))
        sp.head_dim = 32, sp.rope_dims = 32, sp.rope_base = 150000.0f, sp.rms_eps = 1e-5f, sp.n_expert = 8,
        sp.n_expert_used = 4, sp.n_ff_exp = 32, sp.window = 16, sp.rope_yarn = 32.0f, sp.yarn_orig_ctx = 64;
    if (!strcmp(arch, "phi3")) /* Phi-3 128k's LongRoPE; the context (512) is beyond the original: long factors */
        sp.longrope_orig_ctx = 128, sp.longrope_attn = 1.1902f, sp.window = 2047; /* as the converter writes */
    if (!strcmp(arch, "qwen3moe"))
        sp.head_dim = 32, sp.rope_dims = 32, sp.rope_base = 1e6f, sp.rms_eps = 1e-6f, sp.n_expert = 8,
        sp.n_expert_used = 2, sp.n_ff_exp = 32;
    return sp;
}

/* A released model's shape, fewer layers and a vocabulary of 512. F16 weights keep the files
 * small (up to 250 MB); the depth is what the test machine can afford under ASan. */
static inline tiny_spec family_real(const char *name) {
    tiny_spec sp = tiny_default("llama");
    sp.n_vocab = 512, sp.wtype = GGUF_TYPE_F16, sp.n_ctx = 4096, sp.rms_eps = 1e-6f;
    if (!strcmp(name, "qwen3-0.6b")) { /* Qwen3-0.6B */
        sp.arch = "qwen3", sp.n_embd = 1024, sp.n_head = 16, sp.n_head_kv = 8, sp.head_dim = 128, sp.rope_dims = 128;
        sp.n_ff = 3072, sp.rope_base = 1e6f, sp.n_layer = 2, sp.tied = true;
    } else if (!strcmp(name, "gemma3-1b")) { /* Gemma-3-1B: its first 2 layers, local (window 512); the
                                                global layer and local base are checked at small size */
        sp.arch = "gemma3", sp.n_embd = 1152, sp.n_head = 4, sp.n_head_kv = 1, sp.head_dim = 256, sp.rope_dims = 256;
        sp.n_ff = 6912, sp.rope_base = 1e6f, sp.n_layer = 2, sp.window = 512, sp.tied = true;
    } else if (!strcmp(name, "phi3-mini")) { /* Phi-3-mini: head_dim 96, no GQA */
        sp.arch = "phi3", sp.n_embd = 3072, sp.n_head = 32, sp.n_head_kv = 32, sp.rope_dims = 96, sp.n_ff = 8192;
        sp.n_layer = 1, sp.rms_eps = 1e-5f;
    } else if (!strcmp(name, "qwen3-30b-a3b")) { /* Qwen3-30B-A3B's dims, top-8 experts of width 768, but 16
                                                    experts instead of 128 (the file stays at 150 MB) */
        sp.arch = "qwen3moe", sp.n_embd = 2048, sp.n_head = 32, sp.n_head_kv = 4, sp.head_dim = 128;
        sp.rope_dims = 128, sp.n_ff = 6144, sp.rope_base = 1e6f, sp.n_layer = 1, sp.n_expert = 16;
        sp.n_expert_used = 8, sp.n_ff_exp = 768;
    } else if (!strcmp(name, "gpt-oss-20b")) { /* gpt-oss-20b's dims (64/8 heads of 64, width 2880, window
                                                  128, top 4), 4 experts of its 32, F16 instead of MXFP4 */
        sp.arch = "gpt-oss", sp.n_embd = 2880, sp.n_head = 64, sp.n_head_kv = 8, sp.head_dim = 64, sp.rope_dims = 64;
        sp.n_ff = 2880, sp.rope_base = 150000.0f, sp.n_layer = 1, sp.n_expert = 4, sp.n_expert_used = 4;
        sp.n_ff_exp = 2880, sp.window = 128, sp.rope_yarn = 32.0f, sp.yarn_orig_ctx = 4096, sp.rms_eps = 1e-5f;
    }
    return sp;
}

/* The hybrid Gated DeltaNet families of the llama.cpp comparison (tests/data/reference-hybrid.json),
 * in its order. */
static const char *const HYBRID_NAMES[] = {"qwen35", "qwen35moe", "qwen3next"};
#define N_HYBRID (sizeof(HYBRID_NAMES) / sizeof(HYBRID_NAMES[0]))

/* Qwen3.6-35B-A3B's token mixers (DeltaNet: 16 key heads, 32 value heads of 128, kernel 4;
 * attention: 16 query heads and 2 KV heads of 256, 64 rotary dims of 10^7) at a width of 256, 4
 * layers (3 DeltaNet + 1 attention), a vocabulary of 320 that llama.cpp loads; dense (SwiGLU of
 * 192, qwen35) or with 16 experts of 64, top 4, and a shared expert of 96 (qwen35moe, and
 * qwen3next with its own DeltaNet conventions: hybrid_fixture.h). */
static inline hy_spec hybrid_small(const char *arch) {
    hy_spec hs = {.base = tiny_default(arch), .interval = 4, .conv_k = 4, .hk = 16, .hv = 32, .dk = 128};
    tiny_spec *sp = &hs.base;
    sp->vocab = true, sp->n_vocab = 320, sp->n_ctx = 512, sp->seed = 11;
    sp->n_embd = 256, sp->n_layer = 4, sp->n_head = 16, sp->n_head_kv = 2, sp->head_dim = 256, sp->rope_dims = 64;
    sp->n_ff = 192, sp->rope_base = 1e7f, sp->rms_eps = 1e-6f;
    if (strcmp(arch, "qwen35")) sp->n_expert = 16, sp->n_expert_used = 4, sp->n_ff_exp = 64, hs.n_ff_shexp = 96;
    return hs;
}

/* The prompt of the hybrid comparison: HYBRID_N_PROMPT ids (no BOS), long enough that the conv
 * and the recurrent state carry far, and the tokens generated after it. */
#define HYBRID_N_PROMPT 88
#define HYBRID_N_GEN 40
static inline void hybrid_prompt(int32_t *ids) {
    uint64_t s = 2026;
    for (int i = 0; i < HYBRID_N_PROMPT; i++) ids[i] = 259 + (int32_t)(tiny_rng(&s) % 61);
}

/* The Gemma 4 variants of the llama.cpp comparison (tests/data/reference-gemma4.json), in its
 * order: "dense" as the 31B is built (local and global layers, K as V on global ones, no
 * per-layer embeddings); "e" as E2B / E4B (the last layers sharing caches, per-layer embeddings,
 * a double-wide FFN on the shared layers); "moe" as 26B-A4B (experts beside the dense FFN, gate
 * and up fused). */
static const char *const GEMMA4_NAMES[] = {"gemma4-dense", "gemma4-e", "gemma4-moe"};
#define N_GEMMA4 (sizeof(GEMMA4_NAMES) / sizeof(GEMMA4_NAMES[0]))

/* Small: 64 wide, 4 heads of 32 (local: 2 KV heads, RoPE base 10^4, window 24) and of 64
 * (global: 1 KV head, a quarter of the dims turning at 10^6), a vocabulary of 320 that llama.cpp
 * loads, so that the 107 positions cross the window. */
static inline g4_spec gemma4_small(const char *name) {
    g4_spec gs = {.base = tiny_default("gemma4"), .hd_full = 64, .kv_full = 1, .swa_every = 3, .partial_full = 0.25f};
    tiny_spec *sp = &gs.base;
    sp->vocab = true, sp->n_vocab = 320, sp->n_ctx = 512, sp->seed = 7, sp->n_embd = 64, sp->n_layer = 6;
    sp->n_head = 4, sp->n_head_kv = 2, sp->head_dim = 32, sp->n_ff = 96, sp->rope_base = 1e6f;
    sp->rope_base_swa = 10000.0f, sp->window = 24, sp->rms_eps = 1e-6f, sp->final_softcap = 30.0f, sp->tied = true;
    if (!strcmp(name, "gemma4-e")) /* layers L L G L L G | L G: the last two read layers 4 and 5's caches */
        sp->n_layer = 8, gs.n_shared = 2, gs.n_ple = 16, gs.double_ff = true;
    if (!strcmp(name, "gemma4-moe"))
        sp->n_layer = 4, sp->n_expert = 16, sp->n_expert_used = 4, sp->n_ff_exp = 32, gs.fused_exps = true;
    return gs;
}

/* Released Gemma 4 shapes (as their configs give them: widths, heads, head sizes, FFN and expert
 * widths, per-layer embedding width), fewer layers and a vocabulary of 512, F16, for the float64
 * comparison: layers L G G, the last one reading layer 1's cache where the model shares (E2B);
 * one global layer for the 26B-A4B (its experts are most of the file).
 * wtype may be set to F32 by a caller that wants the engine's error without F16 rounding. */
static inline g4_spec gemma4_real(const char *name) {
    g4_spec gs = {.base = tiny_default("gemma4"), .hd_full = 512, .swa_every = 2, .partial_full = 0.25f};
    tiny_spec *sp = &gs.base;
    sp->n_vocab = 512, sp->wtype = GGUF_TYPE_F16, sp->n_ctx = 4096, sp->rms_eps = 1e-6f, sp->seed = 5;
    sp->head_dim = 256, sp->rope_base = 1e6f, sp->rope_base_swa = 10000.0f, sp->final_softcap = 30.0f;
    sp->n_layer = 3, sp->window = 512, sp->tied = true;
    if (!strcmp(name, "gemma4-e2b")) /* E2B: 1536 wide, 8 heads, 1 KV head, FFN 6144 (12288 shared), PLE 256 */
        sp->n_embd = 1536, sp->n_head = 8, sp->n_head_kv = 1, gs.kv_full = 1, sp->n_ff = 6144, gs.n_ple = 256,
        gs.n_shared = 1, gs.double_ff = true;
    if (!strcmp(name, "gemma4-26b-a4b")) /* 26B-A4B: 2816 wide, 16 heads, 8 / 2 KV heads, FFN 2112, experts
                                            of 704, top 8: 16 of its 128 experts (the file stays near
                                            300 MB) */
        sp->n_embd = 2816, sp->n_head = 16, sp->n_head_kv = 8, gs.kv_full = 2, sp->n_ff = 2112, sp->n_expert = 16,
        sp->n_expert_used = 8, sp->n_ff_exp = 704, gs.fused_exps = true, sp->n_layer = 1, sp->window = 1024;
    return gs;
}

/* The latent-attention (deepseek2) models of the llama.cpp comparison (tests/data/reference-mla.json),
 * in its order: DeepSeek-V2-Lite's, GLM-4.7-Flash's and a DeepSeek-V3-class attention and router
 * (heads, ranks, head parts, experts and their routing, YaRN) at a width of 256, one dense and one
 * MoE layer, 64 experts of 32, a vocabulary of 320 that llama.cpp loads. The V3-class one is a
 * legacy file (attn_kv_b) with grouped top-k. */
static const char *const MLA_NAMES[] = {"deepseek2-lite", "glm47-flash", "deepseek3"};
#define N_MLA (sizeof(MLA_NAMES) / sizeof(MLA_NAMES[0]))

static inline ml_spec mla_small(const char *name) {
    ml_spec ms = {.base = tiny_default("deepseek2"), .kv_lora = 512, .nope = 128, .v_head = 128, .n_dense = 1};
    tiny_spec *sp = &ms.base;
    sp->vocab = true, sp->n_vocab = 320, sp->n_ctx = 512, sp->seed = 13, sp->n_embd = 256, sp->n_layer = 2;
    sp->n_head = 16, sp->rope_dims = 64, sp->n_ff = 192, sp->rms_eps = 1e-6f, sp->n_expert = 64, sp->n_ff_exp = 32;
    if (!strcmp(name, "deepseek2-lite")) { /* plain attn_q, softmax router, YaRN x40 */
        sp->n_expert_used = 6, ms.n_shared = 2, ms.gating = 1, sp->rope_yarn = 40.0f, sp->yarn_orig_ctx = 4096;
        ms.log_mul = 0.0707f;
    } else if (!strcmp(name, "glm47-flash")) { /* q LoRA, sigmoid router with its bias, normed, scaled */
        sp->n_head = 20, ms.q_lora = 768, ms.nope = 192, ms.v_head = 256, sp->n_expert_used = 4, ms.n_shared = 1;
        ms.gating = 2, ms.probs_b = true, ms.w_norm = true, ms.w_scale = 1.8f, ms.n_group = 1, ms.n_group_used = 1;
        sp->rope_base = 1e6f, sp->rms_eps = 1e-5f;
    } else { /* deepseek3: q LoRA, grouped sigmoid router, YaRN, a legacy attn_kv_b */
        sp->n_head = 8, ms.q_lora = 96, sp->n_expert_used = 8, ms.n_shared = 1, ms.gating = 2, ms.probs_b = true;
        ms.w_norm = true, ms.w_scale = 2.5f, ms.n_group = 8, ms.n_group_used = 4, sp->rope_yarn = 40.0f;
        sp->yarn_orig_ctx = 4096, ms.log_mul = 0.1f, ms.legacy_kv_b = true;
    }
    return ms;
}

/* The released attention at reduced depth (one dense and one MoE layer) for the float64
 * reference: DeepSeek-V2-Lite's (2048 wide, 16 heads, plain queries, kv_lora 512, nope 128, rope
 * 64, v 128, experts of 1408, 2 shared) and GLM-4.7-Flash's (2048 wide, 20 heads, q_lora 768,
 * kv_lora 512, nope 192, rope 64, v 256, experts of 1536, 1 shared), F16, vocabulary 512. Only as
 * many experts as a token uses (6, 4: the routing is the small models') and a dense FFN of the
 * experts' width keep the files near 200 MB. */
static inline ml_spec mla_real(const char *name) {
    ml_spec ms = mla_small(!strcmp(name, "deepseek-v2-lite") ? "deepseek2-lite" : "glm47-flash");
    tiny_spec *sp = &ms.base;
    sp->vocab = false, sp->n_vocab = 512, sp->n_ctx = 4096, sp->wtype = GGUF_TYPE_F16, sp->n_embd = 2048;
    sp->n_expert = sp->n_expert_used;
    sp->n_ff = sp->n_ff_exp = !strcmp(name, "deepseek-v2-lite") ? 1408 : 1536;
    return ms;
}

#endif
