/*
 * test_model.c — the transformer engine: loading (and refusing) models, the forward pass against
 * an independent float64 reference on generated llama/qwen2 models, consistency of prefill,
 * decode and batched decode, attention inspection, and agreement with llama.cpp's reference
 * outputs (tests/data/reference-greedy.json) on stories260K, the default model and their
 * quantized variants.
 */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <jansson.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/engine.h"
#include "attnd/gguf_writer.h"
#include "attnd/sampler.h"
#include "attnd/tokenizer.h"
#include "engine_rig.h"
#include "family_specs.h"
#include "attnd/quantize.h"
#include "kv_layout.h"
#include "model_internal.h"
#include "quant.h"
#include "quant_impl.h"
#include "test_files.h"
#include "test_models.h"
#include "test_scale.h"

// ---- helpers ----------------------------------------------------------------------------------

/* The default fixture of arch; returns its vocabulary size. */
static int open_default(tiny_rig *r, const char *arch, kv_type kv, int max_batch) {
    tiny_spec sp = tiny_default(arch);
    tiny_rig_open(r, &sp, kv, max_batch);
    return sp.n_vocab;
}

/* Evaluates tokens[0..n) as one prefill of s, logits for every entry into logits (n, n_vocab). */
static void prefill(engine *e, kv_seq *s, const int32_t *tokens, int n, float *logits) {
    batch_entry *b = malloc(sizeof(*b) * (size_t)n);
    int pos0 = kv_seq_len(s);
    for (int i = 0; i < n; i++) b[i] = (batch_entry){s, tokens[i], pos0 + i, true};
    attnd_err err;
    cr_assert_eq(engine_eval(e, b, n, logits, &err), ATTND_OK, "%s", err.msg);
    free(b);
}

static float max_abs_diff(const float *a, const float *b, size_t n) {
    float d = 0;
    for (size_t i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}


// ---- forward pass against the float64 reference ------------------------------------------------

/* Engine logits (F32 KV) of every position vs. the reference, relative to the logit scale.
 * rel_tol: 2e-4 for F32 weights (float32 sums); F16 weights get more, because the kernels round
 * activations to F16 as llama.cpp does (relative error 2^-11 per element). */
static void check_against_reference(const tiny_spec *sp, int n_tok, double rel_tol) {
    tiny_rig r;
    tiny_rig_open(&r, sp, KV_F32, n_tok);
    int V = sp->n_vocab;
    int32_t *tok = malloc(sizeof(int32_t) * n_tok);
    tiny_random_tokens(tok, n_tok, V, 99);
    float *lg = malloc(sizeof(float) * (size_t)n_tok * V);
    double *ref = malloc(sizeof(double) * (size_t)n_tok * V);
    prefill(r.e, tiny_rig_seq(&r), tok, n_tok, lg);
    ref_forward(sp, r.path, tok, n_tok, ref);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < (size_t)n_tok * V; i++) {
        worst = fmax(worst, fabs(lg[i] - ref[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    cr_assert(scale > 0.1, "degenerate fixture: logits all near zero");
    cr_assert(worst <= rel_tol * scale, "%s: max |engine - reference| = %g (logit scale %g)", sp->arch, worst, scale);
    free(tok), free(lg), free(ref);
    tiny_rig_close(&r);
}

Test(model, llama_prefill_matches_float64_reference) {
    tiny_spec sp = tiny_default("llama");
    check_against_reference(&sp, 150, 2e-4); /* > 2 KV blocks, so attention crosses tiles */
}

Test(model, qwen2_biases_and_neox_rope_match_float64_reference) {
    tiny_spec sp = tiny_default("qwen2");
    check_against_reference(&sp, 80, 2e-4);
}

Test(model, partial_rotary_dims_and_tied_output_match_reference) {
    tiny_spec sp = tiny_default("llama");
    sp.rope_dims = 4; /* rotate only the first 4 of 8 dims per head */
    sp.tied = true;
    sp.n_head_kv = 1; /* every query head shares one KV head */
    check_against_reference(&sp, 70, 2e-4);
}

Test(model, f16_weights_match_reference) {
    tiny_spec sp = tiny_default("qwen2");
    sp.wtype = GGUF_TYPE_F16;
    check_against_reference(&sp, 40, 2e-3);
}

/* Writes sp, loads it and expects ATTND_ERR_UNSUPPORTED whose message contains want. */
static void expect_unsupported(const tiny_spec *sp, const char *tag, const char *want) {
    char path[256];
    tiny_tmpname(path, sizeof(path), tag);
    cr_assert_eq(tiny_write(path, sp), 0);
    model *m = NULL;
    attnd_err err = {{0}};
    cr_expect_eq(model_load(&m, path, &err), ATTND_ERR_UNSUPPORTED, "%s: %s", tag, err.msg);
    cr_expect(strstr(err.msg, want), "%s: %s", tag, err.msg);
    cr_expect_null(m);
    unlink(path);
}

// ---- the other families against the float64 reference ---------------------------------------------

Test(model, qwen3_qk_norm_and_explicit_head_dim_match_reference) {
    tiny_spec sp = tiny_default("qwen3");
    sp.head_dim = 16, sp.rope_dims = 16; /* q_dim 64 != n_embd 32, as Qwen3's head_dim 128 */
    check_against_reference(&sp, 80, 2e-4);
}

Test(model, smollm3_skips_rope_on_every_fourth_layer) {
    tiny_spec sp = tiny_default("smollm3");
    sp.n_layer = 4; /* layer 3 has no RoPE */
    check_against_reference(&sp, 70, 2e-4);
    /* The same weights as llama (the fixture writes them alike): the NoPE layer must change the result. */
    tiny_rig a, b;
    tiny_rig_open(&a, &sp, KV_F32, 16);
    sp.arch = "llama";
    tiny_rig_open(&b, &sp, KV_F32, 16);
    int32_t tok[16];
    tiny_random_tokens(tok, 16, sp.n_vocab, 5);
    float la[16 * 48], lb[16 * 48];
    prefill(a.e, tiny_rig_seq(&a), tok, 16, la);
    prefill(b.e, tiny_rig_seq(&b), tok, 16, lb);
    cr_assert_gt(max_abs_diff(la + 48, lb + 48, 15 * 48), 1e-3f, "NoPE layer computed as a RoPE layer");
    cr_assert_eq(memcmp(la, lb, 48 * sizeof(float)), 0, "position 0 rotates by nothing either way");
    tiny_rig_close(&a), tiny_rig_close(&b);
}

Test(model, gemma2_softcaps_window_and_post_norms_match_reference) {
    tiny_spec sp = tiny_default("gemma2");
    sp.window = 70, sp.attn_softcap = 2.0f, sp.final_softcap = 3.0f; /* small caps, so they bite */
    sp.n_layer = 3, sp.tied = true;
    check_against_reference(&sp, 150, 2e-4); /* the local layers' window crosses tiles */
}

Test(model, gemma3_local_and_global_layers_match_reference) {
    tiny_spec sp = tiny_default("gemma3");
    sp.n_layer = 7, sp.window = 40, sp.head_dim = 16, sp.rope_dims = 16, sp.rope_base = 1e6f;
    sp.rope_linear = 8.0f; /* global layers only; the local ones use base 10000 unscaled */
    check_against_reference(&sp, 150, 2e-4);
}

/* rope.freq_base_swa, as converters write it: the local layers' base (unscaled on Gemma 3; with
 * the global YaRN on gpt-oss). A base other than the family's default proves it is applied. */
Test(model, rope_freq_base_swa_is_the_local_layers_base) {
    tiny_spec sp = tiny_default("gemma3");
    sp.n_layer = 7, sp.window = 40, sp.head_dim = 16, sp.rope_dims = 16, sp.rope_base = 1e6f;
    sp.rope_linear = 8.0f, sp.rope_base_swa = 500.0f;
    check_against_reference(&sp, 150, 2e-4);
    sp = tiny_default("gpt-oss");
    sp.head_dim = 16, sp.rope_dims = 16, sp.rope_base = 150000.0f, sp.n_expert = 4, sp.n_expert_used = 2,
    sp.n_ff_exp = 16, sp.window = 16, sp.rope_yarn = 32.0f, sp.yarn_orig_ctx = 64, sp.rope_base_swa = 300.0f;
    check_against_reference(&sp, 70, 2e-4);
    sp.rope_base_swa = 0; /* none: the global base and scaling */
    check_against_reference(&sp, 70, 2e-4);
}

/* Gemma 3 files of all-global checkpoints carry no window (or 0): every layer is global, with the
 * global base and scaling, as llama.cpp reads them. */
Test(model, gemma3_without_a_window_has_only_global_layers) {
    tiny_spec sp = tiny_default("gemma3");
    sp.n_layer = 7, sp.head_dim = 16, sp.rope_dims = 16, sp.rope_base = 1e6f, sp.rope_linear = 8.0f;
    check_against_reference(&sp, 150, 2e-4);
    sp.window = -1; /* the key, 0 */
    check_against_reference(&sp, 150, 2e-4);
}

/* Phi-3 files carry attention.sliding_window (2047 in Phi-3-mini-4k; 0 meaning none): 0 runs
 * without a window, a real one windows every layer. */
Test(model, phi3_sliding_window_zero_is_none_and_a_window_covers_every_layer) {
    tiny_spec sp = tiny_default("phi3");
    sp.window = -1;
    check_against_reference(&sp, 70, 2e-4);
    sp.window = 24, sp.n_layer = 3; /* 70 positions cross it on every layer */
    check_against_reference(&sp, 70, 2e-4);
    model *m = NULL;
    char path[256];
    tiny_tmpname(path, sizeof(path), "phi3w");
    cr_assert_eq(tiny_write(path, &sp), 0);
    attnd_err err = {{0}};
    cr_assert_eq(model_load(&m, path, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(model_info_get(m)->n_local_layers, 3);
    cr_expect_eq(model_info_get(m)->window, 24);
    model_destroy(m);
    unlink(path);
}

Test(model, phi3_fused_qkv_and_gate_up_match_reference) {
    tiny_spec sp = tiny_default("phi3");
    check_against_reference(&sp, 70, 2e-4);
}

/* Phi-3 128k's LongRoPE: short factors while the context is within the original one, long factors
 * (and the attention factor on cos and sin) beyond it. */
Test(model, phi3_longrope_short_and_long_factors_match_reference) {
    tiny_spec sp = tiny_default("phi3");
    sp.longrope_orig_ctx = 512, sp.longrope_attn = 1.19f; /* n_ctx 320: within, short factors */
    check_against_reference(&sp, 70, 2e-4);
    sp.longrope_orig_ctx = 64; /* beyond: long factors */
    check_against_reference(&sp, 70, 2e-4);
    sp.longrope_attn = 0; /* no attention factor key: 1 */
    check_against_reference(&sp, 70, 2e-4);
}

/* Logits of n_tok random tokens of sp's file run at a context of cap (model_set_context), against
 * the float64 reference of ref_sp (whose n_ctx picks its LongRoPE factors); returns the largest
 * difference relative to the logits' scale. */
static double capped_vs_reference(const tiny_spec *sp, int cap, const tiny_spec *ref_sp, int n_tok, bool *rope_long) {
    char path[256];
    tiny_tmpname(path, sizeof(path), "phi3cap");
    cr_assert_eq(tiny_write(path, sp), 0);
    attnd_err err;
    model *m;
    engine *e;
    kv_pool *pool;
    kv_seq *s;
    cr_assert_eq(model_load(&m, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(model_set_context(m, cap, &err), ATTND_OK, "%s", err.msg);
    *rope_long = model_info_get(m)->rope_long;
    cr_assert_eq(engine_create(&e, m, n_tok, 1, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_pool_create(&pool, m, (size_t)16 << 20, KV_F32, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_seq_create(&s, pool, &err), ATTND_OK, "%s", err.msg);
    int V = sp->n_vocab;
    int32_t *tok = malloc(sizeof(int32_t) * n_tok);
    tiny_random_tokens(tok, n_tok, V, 99);
    float *lg = malloc(sizeof(float) * (size_t)n_tok * V);
    double *ref = malloc(sizeof(double) * (size_t)n_tok * V), worst = 0, scale = 0;
    prefill(e, s, tok, n_tok, lg);
    ref_forward(ref_sp, path, tok, n_tok, ref);
    for (size_t i = 0; i < (size_t)n_tok * V; i++) worst = fmax(worst, fabs(lg[i] - ref[i])), scale = fmax(scale, fabs(ref[i]));
    free(tok), free(lg), free(ref);
    kv_seq_destroy(s), kv_pool_destroy(pool), engine_destroy(e), model_destroy(m);
    unlink(path);
    return worst / scale;
}

/* LongRoPE under a served context cap (ctx_size): a file whose context_length (320) is beyond
 * its original context (64) takes the short factors when run at 64 or less, as llama.cpp does
 * for n_ctx <= the original, and the long ones at 65; float64 reference both ways, and each
 * choice measurably differs from the other. */
Test(model, longrope_takes_the_short_factors_under_a_context_cap) {
    tiny_spec sp = tiny_default("phi3");
    sp.longrope_orig_ctx = 64, sp.longrope_attn = 1.19f;
    tiny_spec short_ref = sp;
    short_ref.n_ctx = 64; /* the reference picks its factors from its n_ctx */
    bool lng;
    cr_assert_leq(capped_vs_reference(&sp, 64, &short_ref, 60, &lng), 2e-4);
    cr_assert(!lng, "a cap at the original context: the short factors");
    cr_assert_gt(capped_vs_reference(&sp, 64, &sp, 60, &lng), 1e-3, "the short and long factors give other logits");
    cr_assert_leq(capped_vs_reference(&sp, 65, &sp, 60, &lng), 2e-4);
    cr_assert(lng, "a cap beyond the original context: the long factors");
    cr_assert_leq(capped_vs_reference(&sp, 0, &sp, 60, &lng), 2e-4);
    cr_assert(lng, "no cap: the file's context, beyond the original");
}

Test(model, llama3_rope_freqs_and_rope_scaling_match_reference) {
    tiny_spec sp = tiny_default("llama");
    sp.rope_freqs = true;
    check_against_reference(&sp, 100, 2e-4);
    sp.rope_freqs = false, sp.rope_linear = 4.0f;
    check_against_reference(&sp, 100, 2e-4);
    sp.rope_linear = 0, sp.rope_yarn = 4.0f, sp.yarn_orig_ctx = 64;
    check_against_reference(&sp, 100, 2e-4);
    sp.arch = "qwen2", sp.rope_yarn = 0, sp.rope_freqs = true;
    check_against_reference(&sp, 60, 2e-4);
}

Test(model, qwen3moe_routing_and_experts_match_reference) {
    tiny_spec sp = tiny_default("qwen3moe");
    sp.n_expert = 8, sp.n_expert_used = 3, sp.n_ff_exp = 24, sp.head_dim = 16, sp.rope_dims = 16;
    check_against_reference(&sp, 70, 2e-4); /* a prefill: tokens grouped by expert */
    sp.wtype = GGUF_TYPE_F16;
    check_against_reference(&sp, 20, 2e-3);
}

/* What the expert callback saw: (entry, layer) -> the experts and weights, and how many calls. */
typedef struct expert_log {
    int calls, k, n_layer;
    int pos[40];
    int experts[40][4][8];
    float weights[40][4][8];
} expert_log;

static void log_experts(void *user, int entry, int layer, int pos, const int *experts, const float *weights, int k) {
    expert_log *g = user;
    g->pos[entry] = pos;
    g->calls++;
    g->k = k;
    cr_assert(entry >= 0 && entry < 40 && layer >= 0 && layer < g->n_layer && k <= 8);
    memcpy(g->experts[entry][layer], experts, sizeof(int) * (size_t)k);
    memcpy(g->weights[entry][layer], weights, sizeof(float) * (size_t)k);
}

/* engine_set_expert_cb: every (MoE layer, entry) reports its K distinct experts, most probable
 * first, weights summing to 1; a token decoded alone (one pass for all its experts' rows) gets the
 * experts, weights and logits it gets inside a prefill (grouped by expert). */
Test(model, expert_callback_reports_each_tokens_experts_alike_in_prefill_and_decode) {
    tiny_spec sp = tiny_default("qwen3moe");
    sp.n_expert = 8, sp.n_expert_used = 3, sp.n_ff_exp = 24, sp.head_dim = 16, sp.rope_dims = 16, sp.n_layer = 3;
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, 64);
    expert_log *pre = calloc(2, sizeof(*pre)), *dec = pre + 1;
    pre->n_layer = dec->n_layer = sp.n_layer;
    int32_t tok[30];
    tiny_random_tokens(tok, 30, sp.n_vocab, 5);
    float *lg = malloc(sizeof(float) * 30 * (size_t)sp.n_vocab), one[48];
    kv_seq *a = tiny_rig_seq(&r), *b = tiny_rig_seq(&r);
    engine_set_attention_cb(r.e, NULL, pre);
    engine_set_expert_cb(r.e, log_experts);
    prefill(r.e, a, tok, 30, lg);
    cr_assert_eq(pre->calls, 30 * sp.n_layer);
    cr_assert_eq(pre->k, 3);
    engine_set_attention_cb(r.e, NULL, dec);
    float *lg2 = malloc(sizeof(float) * 29 * (size_t)sp.n_vocab);
    prefill(r.e, b, tok, 29, lg2);
    free(lg2);
    dec->calls = 0;
    prefill(r.e, b, tok + 29, 1, one); /* the last token alone: its entry is 0 */
    cr_assert_eq(dec->calls, sp.n_layer);
    cr_assert_eq(pre->pos[29], 29);
    cr_assert_eq(dec->pos[0], 29);
    for (int l = 0; l < sp.n_layer; l++) {
        float sum = 0;
        for (int k = 0; k < 3; k++) {
            int x = pre->experts[29][l][k];
            cr_assert(x >= 0 && x < sp.n_expert, "layer %d: expert %d", l, x);
            for (int j = 0; j < k; j++) cr_assert_neq(pre->experts[29][l][j], x, "layer %d: expert twice", l);
            if (k) cr_assert_geq(pre->weights[29][l][k - 1], pre->weights[29][l][k], "layer %d: not by weight", l);
            sum += pre->weights[29][l][k];
            cr_assert_eq(dec->experts[0][l][k], x, "layer %d: decode routed to another expert", l);
            cr_assert_float_eq(dec->weights[0][l][k], pre->weights[29][l][k], 1e-5f);
        }
        cr_assert_float_eq(sum, 1.0f, 1e-5f);
    }
    cr_assert_lt(max_abs_diff(one, lg + 29 * (size_t)sp.n_vocab, (size_t)sp.n_vocab), 1e-4f);
    engine_set_expert_cb(r.e, NULL);
    free(pre);
    free(lg);
    tiny_rig_close(&r);
}

/* Decoding sp's model one token at a time after a prefill of n0 (F16 and F32 caches) gives the
 * logits of the whole sequence's prefill, position by position. */
/* Decoding one token at a time from position n0 gives the logits of one whole prefill, with a
 * kv-typed cache. A quantized cache agrees as closely: a prefill writes (and quantizes) each
 * position before attention reads it, as decode does. */
static void decode_equals_prefill_kv(const tiny_spec *sp, kv_type kv, int n0) {
    tiny_rig r;
    tiny_rig_open(&r, sp, kv, 256);
    int n = 230, V = sp->n_vocab;
    int32_t tok[230];
    tiny_random_tokens(tok, n, V, 9);
    float *ref = malloc(sizeof(float) * (size_t)n * V), *step = malloc(sizeof(float) * V);
    float *head = malloc(sizeof(float) * (size_t)n0 * V);
    prefill(r.e, tiny_rig_seq(&r), tok, n, ref);
    kv_seq *b = tiny_rig_seq(&r);
    prefill(r.e, b, tok, n0, head);
    for (int i = n0; i < n; i++) {
        prefill(r.e, b, &tok[i], 1, step);
        float d = max_abs_diff(step, ref + (size_t)i * V, (size_t)V);
        cr_assert(d < 1e-4f, "%s %s: position %d: decode differs from prefill by %g", sp->arch, kv_type_name(kv), i, d);
    }
    free(ref), free(step), free(head);
    tiny_rig_close(&r);
}

static void decode_equals_prefill(const tiny_spec *spec, int n0) {
    for (int kv = 0; kv < 2; kv++) decode_equals_prefill_kv(spec, kv ? KV_F32 : KV_F16, n0);
}

Test(model, gpt_oss_sinks_biases_window_and_clamped_experts_match_reference) {
    tiny_spec sp = tiny_default("gpt-oss");
    sp.n_expert = 8, sp.n_expert_used = 4, sp.n_ff_exp = 24, sp.head_dim = 16, sp.rope_dims = 16;
    sp.window = 40, sp.n_layer = 3, sp.rope_yarn = 8.0f, sp.yarn_orig_ctx = 64;
    check_against_reference(&sp, 120, 2e-4);
}

/* Gemma 3's decode over a sliding window that crosses several blocks. */
Test(model, sliding_window_decode_equals_prefill) {
    tiny_spec sp = tiny_default("gemma3");
    sp.n_layer = 6, sp.window = 72, sp.head_dim = 16, sp.rope_dims = 16;
    decode_equals_prefill(&sp, 150);
}

/* MoE: several sequences decoded in one batch (their tokens grouped by expert) give each one's
 * logits alone. */
Test(model, moe_batched_decode_equals_each_alone) {
    tiny_spec sp = tiny_default("qwen3moe");
    sp.n_expert = 8, sp.n_expert_used = 2, sp.n_ff_exp = 24;
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, 64);
    enum { NS = 4 };
    int V = sp.n_vocab;
    kv_seq *s[NS], *solo[NS];
    int32_t tok[NS][40];
    float lg[40 * 48], batch_lg[NS * 48];
    for (int i = 0; i < NS; i++) {
        tiny_random_tokens(tok[i], 40, V, 50 + i);
        s[i] = tiny_rig_seq(&r), solo[i] = tiny_rig_seq(&r);
        prefill(r.e, s[i], tok[i], 30 + i, lg);
        prefill(r.e, solo[i], tok[i], 30 + i, lg);
    }
    batch_entry b[NS];
    for (int i = 0; i < NS; i++) b[i] = (batch_entry){s[i], tok[i][30 + i], 30 + i, true};
    cr_assert_eq(engine_eval(r.e, b, NS, batch_lg, NULL), ATTND_OK);
    for (int i = 0; i < NS; i++) {
        prefill(r.e, solo[i], &tok[i][30 + i], 1, lg);
        cr_assert_lt(max_abs_diff(lg, batch_lg + (size_t)i * V, (size_t)V), 1e-4f, "sequence %d", i);
    }
    tiny_rig_close(&r);
}

/* MoE decode (one token, its own experts) against the prefill (tokens grouped by expert). */
Test(model, moe_decode_equals_prefill) {
    tiny_spec sp = tiny_default("qwen3moe");
    sp.n_expert = 8, sp.n_expert_used = 2, sp.n_ff_exp = 24;
    decode_equals_prefill(&sp, 200);
}

/* The logits of one run over a MoE model: a prefill of 6 tokens, 2 single-token decodes, then a
 * batch of 3 sequences' decodes (6 + 2 + 3 rows of n_vocab into out, which has room for 12). */
static void moe_run(engine *e, kv_pool *pool, int V, float *out) {
    kv_seq *s[3];
    int32_t tok[8];
    tiny_random_tokens(tok, 8, V, 21);
    for (int i = 0; i < 3; i++) cr_assert_eq(kv_seq_create(&s[i], pool, NULL), ATTND_OK);
    prefill(e, s[0], tok, 6, out);
    for (int i = 0; i < 2; i++) prefill(e, s[0], &tok[6 + i], 1, out + (size_t)(6 + i) * V);
    prefill(e, s[1], tok, 3, out + (size_t)8 * V); /* overwritten below: their logits are not kept */
    prefill(e, s[2], tok + 2, 4, out + (size_t)8 * V);
    batch_entry b[3] = {{s[0], tok[0], 8, true}, {s[1], tok[7], 3, true}, {s[2], tok[3], 4, true}};
    attnd_err err;
    cr_assert_eq(engine_eval(e, b, 3, out + (size_t)8 * V, &err), ATTND_OK, "%s", err.msg);
    for (int i = 0; i < 3; i++) kv_seq_destroy(s[i]);
}

/* The experts' passes (moe.h) split (expert, row block) tasks across threads: the logits of 1 and
 * 4 threads are bit-identical (decode, prefill and batched decode), on Q4_K_M experts (Q4_K gate
 * and up, Q6_K or Q8_0 down: activations rounded per task) wide enough that every pass goes to the
 * pool, and they agree with the portable kernels within rounding: every row's top token is the
 * same, and each row is within 2e-3 of the portable one or, where the two instruction sets' sums
 * put a hidden value on either side of a rounding boundary of the Q8_K activations (one
 * quantization step of one element, which moves every logit of that row), within 2 % of the
 * row's largest logit. Seen on AMD Zen 3 (AVX2 attention sums in another order than portable):
 * one row of 11 at 0.165 of logits up to 24, the other rows within 6e-6. */
Test(model, moe_expert_passes_give_the_same_logits_on_any_number_of_threads) {
    tiny_spec sp = tiny_default("qwen3moe");
    sp.n_embd = 1024, sp.n_head = 8, sp.n_head_kv = 2, sp.head_dim = 64, sp.rope_dims = 64, sp.n_layer = 1;
    sp.n_expert = 8, sp.n_expert_used = 4, sp.n_ff_exp = 512, sp.wtype = GGUF_TYPE_F16;
    char f16[256], q[300];
    tiny_tmpname(f16, sizeof(f16), "moe");
    snprintf(q, sizeof(q), "%s-Q4_K_M.gguf", f16);
    cr_assert_eq(tiny_write(f16, &sp), 0);
    attnd_err err;
    cr_assert_eq(quantize_file(f16, q, QUANTIZE_Q4_K_M, NULL, NULL, &err), ATTND_OK, "%s", err.msg);
    tiny_rig r; /* 4 threads, batches of up to 8, a 16 MiB pool */
    tiny_rig_load(&r, q, KV_F32, 8, 4, 16);
    int V = sp.n_vocab;
    size_t n = (size_t)11 * V, room = (size_t)12 * V;
    float *one = malloc(sizeof(float) * room * 3), *four = one + room, *port = four + room;
    engine_set_threads(r.e, 1);
    moe_run(r.e, r.pool, V, one);
    engine_set_threads(r.e, 4);
    moe_run(r.e, r.pool, V, four);
    for (size_t i = 0; i < n; i++) cr_assert_eq(one[i], four[i], "logit %zu: %.9g at 1 thread, %.9g at 4", i, one[i], four[i]);
    quant_isa saved = quant_isa_force(QUANT_ISA_PORTABLE);
    moe_run(r.e, r.pool, V, port);
    quant_isa_force(saved);
    for (int row = 0; row < 11; row++) {
        const float *a = one + (size_t)row * V, *b = port + (size_t)row * V;
        float d = max_abs_diff(a, b, (size_t)V), top = 0;
        int ta = 0, tb = 0;
        for (int j = 0; j < V; j++) {
            top = fabsf(a[j]) > top ? fabsf(a[j]) : top;
            ta = a[j] > a[ta] ? j : ta, tb = b[j] > b[tb] ? j : tb;
        }
        cr_assert_eq(ta, tb, "row %d: top token %d, portable %d", row, ta, tb);
        cr_assert(d < 2e-3f || d < 0.02f * top, "row %d: portable kernels differ by %g (largest logit %g)", row, d, top);
    }
    tiny_rig_close(&r);
    unlink(f16), unlink(q);
    free(one);
}

// ---- sliding-window memory ---------------------------------------------------------------------------

/* Gemma 3 shaped: 5 local layers (window 72) and 1 global one, F16 cache. */
static tiny_spec swa_spec(void) {
    tiny_spec sp = tiny_default("gemma3");
    sp.n_layer = 6, sp.window = 72, sp.head_dim = 16, sp.rope_dims = 16, sp.n_ctx = 1024;
    return sp;
}

/* Blocks of s whose local part is still held. */
static int local_blocks(const kv_seq *s) {
    int n = 0;
    for (int b = 0; b < s->n_blocks; b++) n += s->blocks[b]->local != NULL;
    return n;
}

Test(model, sliding_window_layers_hold_a_bounded_number_of_blocks_and_compute_the_same) {
    tiny_spec sp = swa_spec();
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F16, 600);
    int V = sp.n_vocab, n = 600;
    int32_t tok[610];
    tiny_random_tokens(tok, 610, V, 17);
    float *whole = malloc(sizeof(float) * (size_t)n * V), *part = malloc(sizeof(float) * 100 * (size_t)V);
    kv_seq *a = tiny_rig_seq(&r), *b = tiny_rig_seq(&r);
    prefill(r.e, b, tok, n, whole); /* one batch: nothing freed while it runs */
    const kv_pool *p = r.pool;
    cr_assert_gt(p->local_bytes, 4 * p->global_bytes, "5 local layers for 1 global");
    for (int done = 0; done < n; done += 100) {
        prefill(r.e, a, tok + done, 100, part);
        cr_assert_leq(local_blocks(a), (72 + 63) / 64 + 1, "at %d: %d local parts held", done + 100, local_blocks(a));
        cr_assert_eq(kv_seq_bytes(a), (size_t)a->n_blocks * p->global_bytes + (size_t)local_blocks(a) * p->local_bytes);
    }
    cr_assert_eq(a->n_blocks, 10);
    cr_assert_lt(max_abs_diff(part, whole + 500 * (size_t)V, 100 * (size_t)V), 1e-4f, "chunked differs from whole");
    /* a's memory: 10 global parts and at most 3 local ones; b still holds all 10 of each until trimmed */
    cr_assert_leq(kv_seq_bytes(a), kv_context_bytes(r.m, n, KV_F16));
    cr_assert_lt(kv_seq_bytes(a), kv_pool_bytes_for(r.pool, n) / 2);
    /* decode on: a and b agree */
    float la[48], lb[48];
    for (int i = n; i < n + 10; i++) {
        prefill(r.e, a, &tok[i], 1, la);
        prefill(r.e, b, &tok[i], 1, lb);
        cr_assert_lt(max_abs_diff(la, lb, (size_t)V), 1e-4f, "position %d", i);
    }
    cr_assert_eq(kv_pool_bytes_used(r.pool), kv_seq_bytes(a) + kv_seq_bytes(b));
    free(whole), free(part);
    tiny_rig_close(&r);
}

/* One 600-token prefill frees the local parts of all but the last blocks at once (more than one
 * round of kv_seq_trim_window's 16). */
Test(model, a_long_prefill_frees_every_block_out_of_the_window) {
    tiny_spec sp = swa_spec();
    sp.window = 8, sp.n_ctx = 2048;
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F16, 1200);
    int32_t *tok = malloc(sizeof(int32_t) * 1200);
    tiny_random_tokens(tok, 1200, sp.n_vocab, 3);
    batch_entry *b = malloc(sizeof(*b) * 1200);
    kv_seq *s = tiny_rig_seq(&r);
    for (int i = 0; i < 1200; i++) b[i] = (batch_entry){s, tok[i], i, false};
    cr_assert_eq(engine_eval(r.e, b, 1200, NULL, NULL), ATTND_OK);
    cr_assert_eq(s->n_blocks, 19);
    cr_assert_leq(local_blocks(s), 2, "%d local parts held", local_blocks(s));
    free(tok), free(b);
    tiny_rig_close(&r);
}

/* Opens r on sp with a kv-typed cache and fills tok with 600 random tokens; prefills them in one
 * piece into whole (600, V), then into a second sequence, which it returns, in chunks of 100, the
 * last chunk's logits left in part (100, V). The caller frees whole and part. */
static kv_seq *prefill_whole_and_chunked(tiny_rig *r, const tiny_spec *sp, kv_type kv, int32_t tok[600],
                                         float **whole, float **part) {
    tiny_rig_open(r, sp, kv, 600);
    int V = sp->n_vocab, n = 600;
    tiny_random_tokens(tok, n, V, 23);
    *whole = malloc(sizeof(float) * (size_t)n * V), *part = malloc(sizeof(float) * 100 * (size_t)V);
    prefill(r->e, tiny_rig_seq(r), tok, n, *whole);
    kv_seq *a = tiny_rig_seq(r);
    for (int done = 0; done < n; done += 100) prefill(r->e, a, tok + done, 100, *part);
    return a;
}

/* a holds the first 600 tokens of tok, whose whole prefill gave whole (n, V). Truncated to 590 and
 * re-extended it gives whole's logits again; then a fork of it, and a itself, continue from 595
 * (both writing into their shared, partly filled block) as whole did. */
static void truncate_and_fork_stay_exact(tiny_rig *r, kv_seq *a, const int32_t *tok, const float *whole,
                                         float *part) {
    int V = r->sp.n_vocab;
    kv_seq_truncate(a, 590);
    cr_assert_eq(kv_seq_len(a), 590);
    prefill(r->e, a, tok + 590, 10, part);
    cr_assert_lt(max_abs_diff(part, whole + 590 * (size_t)V, 10 * (size_t)V), 1e-4f, "re-extended after truncation");
    kv_seq *f;
    cr_assert_eq(kv_seq_fork(&f, a, NULL), ATTND_OK);
    kv_seq_truncate(a, 595), kv_seq_truncate(f, 595);
    prefill(r->e, f, tok + 595, 5, part);
    cr_assert_lt(max_abs_diff(part, whole + 595 * (size_t)V, 5 * (size_t)V), 1e-4f, "fork");
    prefill(r->e, a, tok + 595, 5, part);
    cr_assert_lt(max_abs_diff(part, whole + 595 * (size_t)V, 5 * (size_t)V), 1e-4f, "parent after fork");
    kv_seq_destroy(f);
}

Test(model, sliding_window_truncation_and_forks_stay_exact) {
    tiny_spec sp = swa_spec();
    tiny_rig r;
    int n = 600, V = sp.n_vocab;
    int32_t tok[600];
    float *whole, *part;
    kv_seq *a = prefill_whole_and_chunked(&r, &sp, KV_F32, tok, &whole, &part);
    cr_assert_eq(a->lmin, 512, "blocks 0..7 are out of every window at 600 (72 back: 529)");
    /* the window of position 590 starts at 519, still held: kept */
    truncate_and_fork_stay_exact(&r, a, tok, whole, part);
    /* the window of position 560 would start at 489, freed: nothing is kept, and a refill is exact */
    kv_seq_truncate(a, 560);
    cr_assert_eq(kv_seq_len(a), 0);
    cr_assert_eq(a->lmin, 0);
    for (int done = 0; done < n; done += 100) prefill(r.e, a, tok + done, 100, part);
    cr_assert_lt(max_abs_diff(part, whole + 500 * (size_t)V, 100 * (size_t)V), 1e-4f, "refilled");
    free(whole), free(part);
    tiny_rig_close(&r);
}

// ---- split sets ------------------------------------------------------------------------------------

/* A model written as a 3-file split set (as llama.cpp's gguf-split writes them) loads from its
 * first file as one model and computes the same logits, bit for bit. */
Test(model, a_split_set_loads_as_one_model_with_the_same_logits) {
    tiny_spec sp = tiny_default("qwen3");
    sp.n_layer = 3;
    tiny_rig whole, split;
    tiny_rig_open(&whole, &sp, KV_F32, 40);
    gguf_file *f = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(gguf_open(&f, whole.path, &err), ATTND_OK, "%s", err.msg);
    char prefix[300], first[340];
    snprintf(prefix, sizeof prefix, "%s.set", whole.path);
    cr_assert_eq(gguf_split_write(f, prefix, 3, &err), ATTND_OK, "%s", err.msg);
    snprintf(first, sizeof first, "%s-00001-of-00003.gguf", prefix);
    tiny_rig_load(&split, first, KV_F32, 40, 2, 64);
    gguf_close(f);
    int32_t tok[40];
    tiny_random_tokens(tok, 40, sp.n_vocab, 5);
    float *a = malloc(sizeof(float) * 40 * (size_t)sp.n_vocab), *b = malloc(sizeof(float) * 40 * (size_t)sp.n_vocab);
    prefill(whole.e, tiny_rig_seq(&whole), tok, 40, a);
    prefill(split.e, tiny_rig_seq(&split), tok, 40, b);
    cr_expect_eq(memcmp(a, b, sizeof(float) * 40 * (size_t)sp.n_vocab), 0, "logits differ: %g", max_abs_diff(a, b, 40));
    free(a), free(b);
    tiny_rig_close(&split);
    tiny_rig_close(&whole);
    for (int i = 1; i <= 3; i++) {
        snprintf(first, sizeof first, "%s-%05d-of-00003.gguf", prefix, i);
        unlink(first);
    }
}

// ---- refusing what attnd would not compute ----------------------------------------------------------

Test(model, unapplied_keys_and_unread_tensors_refuse_the_file_by_name) {
    tiny_spec sp = tiny_default("llama");
    sp.extra_key = "attention.sliding_window"; /* llama.cpp's llama has no window: attnd would ignore it */
    expect_unsupported(&sp, "key", "llama.attention.sliding_window");
    sp.extra_key = "rope.scaling.type_x";
    expect_unsupported(&sp, "key2", "llama.rope.scaling.type_x");
    sp.extra_key = NULL, sp.extra_tensor = "blk.0.attn_q_norm.weight"; /* qwen3's, in a llama file */
    expect_unsupported(&sp, "tensor", "blk.0.attn_q_norm.weight");
    sp = tiny_default("qwen3moe");
    sp.n_expert = 4, sp.n_expert_used = 2, sp.n_ff_exp = 16, sp.extra_key = "expert_gating_func", sp.extra_value = 1;
    expect_unsupported(&sp, "moe", "qwen3moe.expert_gating_func' = 2"); /* sigmoid gating, named */
    sp.extra_key = "attention.causal", sp.extra_value = -1; /* false: a bidirectional encoder */
    expect_unsupported(&sp, "causal", "qwen3moe.attention.causal' = 0");
}

/* Keys converters write with the value that means what attnd computes load and change nothing. */
Test(model, converter_keys_with_the_computed_value_are_accepted) {
    tiny_spec sp = tiny_default("qwen3moe");
    sp.n_expert = 4, sp.n_expert_used = 2, sp.n_ff_exp = 16, sp.extra_key = "expert_gating_func"; /* 1: softmax */
    check_against_reference(&sp, 40, 2e-4);
    sp.extra_key = "attention.causal"; /* 1: true */
    check_against_reference(&sp, 40, 2e-4);
}

// ---- prefill / decode / batch consistency ---------------------------------------------------------

Test(model, decode_after_prefill_equals_prefill_of_whole_sequence) {
    for (int kv = 0; kv < 2; kv++) {
        tiny_rig r;
        int n = 100, V = open_default(&r, "llama", kv ? KV_F32 : KV_F16, 128);
        int32_t tok[100];
        tiny_random_tokens(tok, n, V, 5);
        float *whole = malloc(sizeof(float) * (size_t)n * V), *step = malloc(sizeof(float) * V);
        kv_seq *b = tiny_rig_seq(&r);
        prefill(r.e, b, tok, 70, whole); /* b now holds the first 70 positions */
        float *ref = malloc(sizeof(float) * (size_t)n * V);
        prefill(r.e, tiny_rig_seq(&r), tok, n, ref);
        for (int i = 70; i < n; i++) {
            prefill(r.e, b, &tok[i], 1, step);
            float d = max_abs_diff(step, ref + (size_t)i * V, (size_t)V);
            cr_assert(d < 1e-4f, "kv %s: position %d: decode differs from prefill by %g", kv ? "f32" : "f16", i, d);
        }
        cr_assert_eq(kv_seq_len(b), n);
        free(whole), free(step), free(ref);
        tiny_rig_close(&r);
    }
}

Test(model, batched_decode_of_several_sequences_equals_each_alone) {
    tiny_rig r;
    int V = open_default(&r, "qwen2", KV_F16, 64);
    enum { NS = 4 };
    int lens[NS] = {3, 64, 17, 90};
    kv_seq *s[NS], *solo[NS];
    int32_t tok[NS][100];
    float *lg = malloc(sizeof(float) * 100 * V), *batch_lg = malloc(sizeof(float) * NS * V);
    for (int i = 0; i < NS; i++) {
        tiny_random_tokens(tok[i], 100, V, 11 + i);
        s[i] = tiny_rig_seq(&r);
        solo[i] = tiny_rig_seq(&r);
        for (int done = 0; done < lens[i]; done += 64) {
            int c = lens[i] - done < 64 ? lens[i] - done : 64;
            prefill(r.e, s[i], tok[i] + done, c, lg);
            prefill(r.e, solo[i], tok[i] + done, c, lg);
        }
    }
    for (int step = 0; step < 3; step++) {
        batch_entry b[NS];
        for (int i = 0; i < NS; i++) b[i] = (batch_entry){s[i], tok[i][lens[i] + step], lens[i] + step, true};
        attnd_err err;
        cr_assert_eq(engine_eval(r.e, b, NS, batch_lg, &err), ATTND_OK, "%s", err.msg);
        for (int i = 0; i < NS; i++) {
            prefill(r.e, solo[i], &tok[i][lens[i] + step], 1, lg);
            float d = max_abs_diff(lg, batch_lg + (size_t)i * V, (size_t)V);
            cr_assert(d < 1e-5f, "sequence %d step %d: batched decode differs from solo by %g", i, step, d);
        }
    }
    free(lg), free(batch_lg);
    tiny_rig_close(&r);
}

/* One batch holding a 40-token prefill of a new sequence, single decode tokens of two others,
 * and a sequence whose entries are interleaved with another's: each entry's logits equal those of
 * evaluating its sequence alone. */
Test(model, mixed_prefill_decode_and_interleaved_batch_equals_separate_evals) {
    tiny_rig r;
    int V = open_default(&r, "llama", KV_F16, 64);
    int32_t ta[40], tb[30], tc[30], td[6];
    tiny_random_tokens(ta, 40, V, 31), tiny_random_tokens(tb, 30, V, 32), tiny_random_tokens(tc, 30, V, 33);
    tiny_random_tokens(td, 6, V, 34);
    kv_seq *a = tiny_rig_seq(&r), *b = tiny_rig_seq(&r), *c = tiny_rig_seq(&r), *d = tiny_rig_seq(&r);
    kv_seq *ra = tiny_rig_seq(&r), *rb = tiny_rig_seq(&r), *rc = tiny_rig_seq(&r), *rd = tiny_rig_seq(&r);
    float *lg = malloc(sizeof(float) * 64 * V), *ref = malloc(sizeof(float) * 64 * V);
    /* history: b and c hold 29 tokens, d holds 2 */
    prefill(r.e, b, tb, 29, lg), prefill(r.e, rb, tb, 29, lg);
    prefill(r.e, c, tc, 29, lg), prefill(r.e, rc, tc, 29, lg);
    prefill(r.e, d, td, 2, lg), prefill(r.e, rd, td, 2, lg);
    batch_entry be[64];
    int n = 0;
    for (int i = 0; i < 20; i++) be[n++] = (batch_entry){a, ta[i], i, true};
    be[n++] = (batch_entry){b, tb[29], 29, true};
    for (int i = 0; i < 4; i++) {
        be[n++] = (batch_entry){d, td[2 + i], 2 + i, true}; /* d interleaved with a's tail */
        be[n++] = (batch_entry){a, ta[20 + i], 20 + i, true};
    }
    for (int i = 24; i < 40; i++) be[n++] = (batch_entry){a, ta[i], i, true};
    be[n++] = (batch_entry){c, tc[29], 29, true};
    attnd_err err;
    cr_assert_eq(engine_eval(r.e, be, n, lg, &err), ATTND_OK, "%s", err.msg);
    float *ra_lg = malloc(sizeof(float) * 40 * V), *rd_lg = malloc(sizeof(float) * 4 * V);
    float rb_lg[48], rc_lg[48];
    prefill(r.e, ra, ta, 40, ra_lg);
    prefill(r.e, rb, &tb[29], 1, rb_lg);
    prefill(r.e, rc, &tc[29], 1, rc_lg);
    prefill(r.e, rd, &td[2], 4, rd_lg);
    for (int t = 0; t < n; t++) {
        const float *want = be[t].seq == a ? ra_lg + (size_t)be[t].pos * V
                            : be[t].seq == b ? rb_lg
                            : be[t].seq == c ? rc_lg
                                             : rd_lg + (size_t)(be[t].pos - 2) * V;
        float diff = max_abs_diff(lg + (size_t)t * V, want, (size_t)V);
        cr_assert(diff < 1e-4f, "entry %d (pos %d): batched logits differ by %g", t, be[t].pos, diff);
    }
    cr_assert_eq(kv_seq_len(a), 40);
    cr_assert_eq(kv_seq_len(d), 6);
    free(lg), free(ref), free(ra_lg), free(rd_lg);
    tiny_rig_close(&r);
}

Test(model, logits_only_for_entries_that_want_them) {
    tiny_rig r;
    int V = open_default(&r, "llama", KV_F32, 16);
    int32_t tok[10];
    tiny_random_tokens(tok, 10, V, 3);
    float all[10 * 48], some[2 * 48];
    kv_seq *b = tiny_rig_seq(&r);
    prefill(r.e, tiny_rig_seq(&r), tok, 10, all);
    batch_entry be[10];
    for (int i = 0; i < 10; i++) be[i] = (batch_entry){b, tok[i], i, i == 4 || i == 9};
    cr_assert_eq(engine_eval(r.e, be, 10, some, NULL), ATTND_OK);
    cr_assert(max_abs_diff(some, all + 4 * V, (size_t)V) < 1e-5f);
    cr_assert(max_abs_diff(some + V, all + 9 * V, (size_t)V) < 1e-5f);
    tiny_rig_close(&r);
}

Test(model, results_do_not_depend_on_thread_count) {
    tiny_rig r;
    int V = open_default(&r, "llama", KV_F16, 64);
    int32_t tok[50];
    tiny_random_tokens(tok, 50, V, 8);
    float *one = malloc(sizeof(float) * 50 * V), *two = malloc(sizeof(float) * 50 * V);
    engine_set_threads(r.e, 1);
    cr_assert_eq(engine_threads(r.e), 1);
    prefill(r.e, tiny_rig_seq(&r), tok, 50, one);
    engine_set_threads(r.e, 2);
    prefill(r.e, tiny_rig_seq(&r), tok, 50, two);
    cr_assert_eq(memcmp(one, two, sizeof(float) * 50 * V), 0, "1 and 2 threads give different logits");
    free(one), free(two);
    tiny_rig_close(&r);
}

// ---- bad input ------------------------------------------------------------------------------------

Test(model, invalid_batches_are_refused_and_change_nothing) {
    tiny_spec sp = tiny_default("llama");
    sp.n_ctx = 8;
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F16, 16);
    kv_seq *s = tiny_rig_seq(&r);
    float lg[48 * 16];
    attnd_err err;
    batch_entry bad_tok[1] = {{s, 48, 0, true}};
    cr_assert_eq(engine_eval(r.e, bad_tok, 1, lg, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "48"), "message names the id: %s", err.msg);
    batch_entry bad_pos[2] = {{s, 1, 0, false}, {s, 2, 2, true}};
    cr_assert_eq(engine_eval(r.e, bad_pos, 2, lg, &err), ATTND_ERR_INVALID);
    cr_assert_eq(kv_seq_len(s), 0);
    batch_entry too_many[17];
    for (int i = 0; i < 17; i++) too_many[i] = (batch_entry){s, 1, i, false};
    cr_assert_eq(engine_eval(r.e, too_many, 17, lg, &err), ATTND_ERR_INVALID);
    batch_entry ctx[9];
    for (int i = 0; i < 9; i++) ctx[i] = (batch_entry){s, 1, i, false};
    cr_assert_eq(engine_eval(r.e, ctx, 9, lg, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "context"), "%s", err.msg);
    cr_assert_eq(engine_eval(r.e, ctx, 8, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_seq_len(s), 8);
    batch_entry want_no_buf[1] = {{s, 1, 8, true}};
    cr_assert_eq(engine_eval(r.e, want_no_buf, 1, NULL, &err), ATTND_ERR_INVALID);
    tiny_rig_close(&r);
}

/* Loads the default llama fixture with the first occurrence of `from` in its file replaced by
 * `to` (len bytes): the load must fail with `want`, leave *out NULL, and say why in err. */
static void load_patched_spec(const tiny_spec *spec, const void *from, const void *to, size_t len, attnd_status want,
                              attnd_err *err) {
    tiny_spec sp = *spec;
    char path[256];
    tiny_tmpname(path, sizeof(path), "patched");
    cr_assert_eq(tiny_write(path, &sp), 0);
    size_t n;
    char *buf = test_read_file(path, &n);
    char *hit = memmem(buf, n, from, len);
    cr_assert(hit, "pattern not found in the fixture");
    memcpy(hit, to, len);
    FILE *f = fopen(path, "wb");
    cr_assert_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
    free(buf);
    model *m = (model *)1;
    cr_assert_eq(model_load(&m, path, err), want, "%s", err->msg);
    cr_assert_null(m);
    unlink(path);
}

static void load_patched(const void *from, const void *to, size_t len, attnd_status want, attnd_err *err) {
    tiny_spec sp = tiny_default("llama");
    load_patched_spec(&sp, from, to, len, want, err);
}

/* The tensor info of `name` as the fixture writes it: name, n_dims 2, ne (ne0, ne1), type F32;
 * *len its bytes (the type is the last 4). */
static void tensor_info_bytes(uint8_t *buf, size_t *len, const char *name, uint64_t ne0, uint64_t ne1) {
    size_t nl = strlen(name);
    uint32_t nd = 2, ty = GGUF_TYPE_F32;
    memcpy(buf, name, nl), *len = nl;
    memcpy(buf + *len, &nd, 4), *len += 4;
    memcpy(buf + *len, &ne0, 8), *len += 8;
    memcpy(buf + *len, &ne1, 8), *len += 8;
    memcpy(buf + *len, &ty, 4), *len += 4;
}

Test(model, unsupported_architecture_is_refused_by_name) {
    /* the value of general.architecture: u64 length 5, then the bytes */
    uint8_t from[13] = {5, 0, 0, 0, 0, 0, 0, 0, 'l', 'l', 'a', 'm', 'a'}, to[13];
    memcpy(to, from, 8);
    memcpy(to + 8, "bloom", 5);
    attnd_err err;
    load_patched(from, to, sizeof(from), ATTND_ERR_UNSUPPORTED, &err);
    cr_assert(strstr(err.msg, "bloom"), "message names the architecture: %s", err.msg);
}

Test(model, unsupported_tensor_type_is_refused_by_name) {
    /* tensor info of blk.1.attn_v.weight: (32, 16) F32 -> Q8_1 (an activation type, never a weight) */
    const char *name = "blk.1.attn_v.weight";
    uint8_t from[64], to[64];
    size_t len;
    tensor_info_bytes(from, &len, name, 32, 16);
    memcpy(to, from, len);
    uint32_t ty = GGUF_TYPE_Q8_1;
    memcpy(to + len - 4, &ty, 4);
    attnd_err err;
    load_patched(from, to, len, ATTND_ERR_UNSUPPORTED, &err);
    cr_assert(strstr(err.msg, "Q8_1") && strstr(err.msg, name), "message names type and tensor: %s", err.msg);
}

Test(model, weights_of_a_type_without_kernels_are_refused_with_what_to_do_instead) {
    /* rows of 256 so that the Q8_K super-blocks fit: attn_q (256, 256) F32 -> Q8_K (a GGUF type
     * that only ever holds activations; until issue 47 this test used IQ2_XS, which now runs) */
    tiny_spec sp = tiny_default("llama");
    sp.n_embd = 256, sp.n_head = 4, sp.n_head_kv = 4, sp.n_ff = 256;
    const char *name = "blk.0.attn_q.weight";
    uint8_t from[64], to[64];
    size_t len;
    tensor_info_bytes(from, &len, name, 256, 256);
    memcpy(to, from, len);
    uint32_t ty = GGUF_TYPE_Q8_K;
    memcpy(to + len - 4, &ty, 4);
    attnd_err err;
    load_patched_spec(&sp, from, to, len, ATTND_ERR_UNSUPPORTED, &err);
    cr_assert(strstr(err.msg, "Q8_K") && strstr(err.msg, name) && strstr(err.msg, "attnd quantize"),
              "names the type and the tensor, and says what to do: %s", err.msg);
}

Test(model, missing_tensor_and_bad_file_are_refused_with_a_message) {
    attnd_err err;
    load_patched("blk.1.ffn_up.weight", "blk.1.ffn_uq.weight", 19, ATTND_ERR_FORMAT, &err);
    cr_assert(strstr(err.msg, "blk.1.ffn_up.weight"), "%s", err.msg);
    model *m;
    cr_assert_neq(model_load(&m, "/nonexistent/model.gguf", &err), ATTND_OK);
    cr_assert(err.msg[0]);
}

// ---- a paced load (model_load_with: a server's loader beside serving models) ----------------------

typedef struct pace_log {
    int calls;
    size_t done, total; /* the last call's */
    bool increasing;    /* every call's done above the previous one's */
} pace_log;

static void pace_record(void *user, size_t done, size_t total) {
    pace_log *l = user;
    if (l->calls > 0 && done <= l->done) l->increasing = false;
    if (l->calls > 0 && total != l->total) l->increasing = false;
    l->calls++, l->done = done, l->total = total;
}

/* The rows slices of 16 (slice_bytes 1: one 16-row group per slice) of a packed copy. */
static int groups_of(const weight *w) {
    return w->packed ? (int)((w->rows + QUANT_PACK_ROWS - 1) / QUANT_PACK_ROWS) : 0;
}

/* a and b's copies of one matrix: both packed to the same bytes, or neither; returns its groups. */
static int same_packing(const weight *a, const weight *b, const char *what, int l) {
    cr_assert_eq(a->packed == NULL, b->packed == NULL, "%s of layer %d: packed in one load only", what, l);
    if (!a->packed) return 0;
    cr_assert_eq(a->packed->bytes, b->packed->bytes, "%s of layer %d", what, l);
    size_t d = 0;
    while (d < a->packed->bytes && a->packed->data[d] == b->packed->data[d]) d++;
    cr_assert(d == a->packed->bytes,
              "%s of layer %d: other bytes at %zu of %zu (rows %lld cols %lld type %u group %zu)", what, l, d,
              a->packed->bytes, (long long)a->rows, (long long)a->cols, a->type, a->packed->group_bytes);
    return groups_of(b);
}

/* A load packing on its own thread in slices, its hook called before each, makes the same copies
 * as model_load's pool, byte for byte (so the same outputs), and calls the hook once per slice
 * with the bytes done so far rising; on a machine without a packed kernel for the type neither
 * load packs and the hook is not called. */
static void check_paced_load(const char *name) {
    char path[1024];
    test_model_path(name, path, sizeof(path));
    model *a = NULL, *b = NULL;
    attnd_err err;
    cr_assert_eq(model_load(&a, path, &err), ATTND_OK, "%s", err.msg);
    pace_log log = {.increasing = true};
    model_load_opts o = {.pack_alone = true, .slice_bytes = 1, .pace = pace_record, .pace_user = &log};
    cr_assert_eq(model_load_with(&b, path, &o, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(a->packed_bytes, b->packed_bytes, "%s", name);
    int groups = same_packing(&a->output, &b->output, "output", -1), matrices = b->output.packed != NULL;
    for (int l = 0; l < a->info.n_layer; l++) {
        const layer_weights *x = &a->layers[l], *y = &b->layers[l];
        const weight *wx[] = {&x->wq, &x->wk, &x->wv, &x->wo, &x->w_gate, &x->w_up, &x->w_down};
        const weight *wy[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->w_gate, &y->w_up, &y->w_down};
        for (int i = 0; i < 7; i++) {
            groups += same_packing(wx[i], wy[i], "a matrix", l);
            matrices += wy[i]->packed != NULL;
        }
    }
    if (b->packed_bytes == 0) cr_assert_eq(log.calls, 0, "%s: nothing packed, yet the hook was called", name);
    else {
        cr_assert_eq(log.calls, groups, "%s: one call per 16-row slice (%d matrices)", name, matrices);
        cr_assert(log.calls > matrices, "%s: matrices packed in several slices", name);
        cr_assert(log.increasing, "%s: done rises call after call, total stays", name);
        cr_assert(log.done < log.total, "%s: the last call comes before the last slice", name);
    }
    model_destroy(a);
    model_destroy(b);
}

Test(model, a_paced_load_packs_the_same_bytes_in_slices_calling_its_hook) {
    check_paced_load("attnd-sotu-Q8_0.gguf");
    check_paced_load("attnd-sotu-Q4_K_M.gguf"); /* super-block packers: Q4_K, Q6_K */
}

/* Writes sp, loads it and expects a format error whose message contains want. */
static void expect_refused(const tiny_spec *sp, const char *tag, const char *want) {
    char path[256];
    tiny_tmpname(path, sizeof(path), tag);
    cr_assert_eq(tiny_write(path, sp), 0);
    model *m = NULL;
    attnd_err err = {{0}};
    cr_expect_eq(model_load(&m, path, &err), ATTND_ERR_FORMAT, "%s: loaded", tag);
    cr_expect(strstr(err.msg, want), "%s: %s", tag, err.msg);
    cr_expect_null(m);
    unlink(path);
}

Test(model, longrope_factors_mixed_with_rope_freqs_or_misshapen_are_refused) {
    tiny_spec sp = tiny_default("phi3");
    sp.longrope_orig_ctx = 64, sp.rope_freqs = true;
    expect_refused(&sp, "longrope_mix", "not another mix");
    sp = tiny_default("phi3");
    sp.extra_tensor = "rope_factors_long.weight"; /* n_embd values, not rope_dims / 2 */
    expect_refused(&sp, "longrope_shape", "rope_factors_long.weight");
}

Test(model, broken_tokenizer_metadata_is_refused_at_load) {
    tiny_spec sp = tiny_default("llama");
    sp.vocab = true, sp.n_vocab = 300;
    char path[256];
    tiny_tmpname(path, sizeof(path), "goodvocab");
    cr_assert_eq(tiny_write(path, &sp), 0);
    model *m = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(model_load(&m, path, &err), ATTND_OK, "%s", err.msg);
    model_destroy(m);
    unlink(path);

    sp.bos_id = 300; /* one past the last token */
    expect_refused(&sp, "bos300", "bos_token_id");
    sp.bos_id = 0, sp.vocab_extra = 5; /* ids 300..304 would index past the embedding rows */
    expect_refused(&sp, "extra5", "305 entries but token_embd.weight has 300 rows");
    sp.vocab_extra = -1;
    expect_refused(&sp, "short1", "299 entries");
}

Test(model, info_reports_hyperparameters) {
    tiny_rig r;
    open_default(&r, "qwen2", KV_F16, 4);
    const model_info *mi = model_info_get(r.m);
    cr_assert_str_eq(mi->arch, "qwen2");
    cr_assert_eq(mi->n_vocab, 48);
    cr_assert_eq(mi->n_head_kv, 2);
    cr_assert_eq(mi->head_dim, 8);
    cr_assert_eq(mi->rope_dims, 8);
    cr_assert_float_eq(mi->rms_eps, 1e-5f, 1e-9f);
    cr_assert_eq(engine_max_batch(r.e), 4);
    cr_assert_eq(engine_model(r.e), r.m);
    tiny_rig_close(&r);
}

// ---- attention inspection ---------------------------------------------------------------------------

typedef struct attn_log {
    int calls, bad_len, bad_sum;
    int n_layer, n_head;
    float first_row_first; /* weight of position 0 for the query at position 0 */
} attn_log;

static void on_attn(void *user, int entry, int layer, int head, const float *w, int n_keys) {
    attn_log *lg = user;
    lg->calls++;
    if (n_keys != entry + 1) lg->bad_len++;
    double s = 0;
    for (int j = 0; j < n_keys; j++) s += w[j];
    if (fabs(s - 1) > 1e-5) lg->bad_sum++;
    if (entry == 0 && layer == 0 && head == 0) lg->first_row_first = w[0];
}

Test(model, attention_callback_sees_normalised_weights_per_layer_head_entry) {
    tiny_rig r;
    open_default(&r, "llama", KV_F16, 32);
    const tiny_spec sp = r.sp;
    int32_t tok[20];
    tiny_random_tokens(tok, 20, sp.n_vocab, 4);
    float *lg = malloc(sizeof(float) * 20 * sp.n_vocab), *lg2 = malloc(sizeof(float) * 20 * sp.n_vocab);
    attn_log log = {0};
    engine_set_attention_cb(r.e, on_attn, &log);
    prefill(r.e, tiny_rig_seq(&r), tok, 20, lg);
    engine_set_attention_cb(r.e, NULL, NULL);
    prefill(r.e, tiny_rig_seq(&r), tok, 20, lg2);
    cr_assert_eq(log.calls, 20 * sp.n_layer * sp.n_head);
    cr_assert_eq(log.bad_len, 0);
    cr_assert_eq(log.bad_sum, 0);
    cr_assert_float_eq(log.first_row_first, 1.0f, 1e-6f);
    cr_assert_eq(memcmp(lg, lg2, sizeof(float) * 20 * sp.n_vocab), 0, "inspection changed the results");
    free(lg), free(lg2);
    tiny_rig_close(&r);
}

// ---- generation loop -----------------------------------------------------------------------------

static bool stop_at_third(void *user, int32_t id) {
    (void)id;
    return ++*(int *)user < 3;
}

Test(model, generate_is_greedy_and_stops_when_asked) {
    tiny_rig r;
    open_default(&r, "llama", KV_F32, 8);
    const tiny_spec sp = r.sp;
    kv_seq *s = tiny_rig_seq(&r);
    int32_t prompt[12];
    tiny_random_tokens(prompt, 12, sp.n_vocab, 21); /* 12 > max_batch 8: prefill in two chunks */
    int32_t out[10];
    int n_out;
    engine_gen g = {.n_predict = 10};
    engine_timings tm;
    attnd_err err;
    cr_assert_eq(engine_generate(r.e, s, prompt, 12, &g, out, &n_out, &tm, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(n_out, 10);
    cr_assert_eq(tm.n_prefill, 12);
    cr_assert_eq(tm.n_decode, 9);
    cr_assert_eq(kv_seq_len(s), 12 + 9);
    /* Each token is the argmax of the reference logits of the sequence before it. */
    int32_t all[22];
    memcpy(all, prompt, sizeof(prompt));
    memcpy(all + 12, out, sizeof(out));
    double *ref = malloc(sizeof(double) * 22 * sp.n_vocab);
    ref_forward(&sp, r.path, all, 22, ref);
    for (int i = 0; i < 10; i++) {
        const double *row = ref + (size_t)(11 + i) * sp.n_vocab;
        int best = 0;
        for (int v = 1; v < sp.n_vocab; v++)
            if (row[v] > row[best]) best = v;
        cr_assert_eq(out[i], best, "token %d: engine %d, reference argmax %d", i, out[i], best);
    }
    int count = 0;
    g.on_token = stop_at_third;
    g.token_user = &count;
    cr_assert_eq(engine_generate(r.e, tiny_rig_seq(&r), prompt, 12, &g, out, &n_out, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(n_out, 3);
    free(ref);
    tiny_rig_close(&r);
}

Test(model, argmax_ties_go_to_lowest_id) {
    float l[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    cr_assert_eq(sampler_argmax(l, 5), 1);
}

// ---- generated models against llama.cpp ---------------------------------------------------------

/*
 * llama.cpp's greedy continuations for two generated models (no shared files needed): the
 * fixture below written by tiny_write with a vocabulary, as `llama` and as `qwen2` (q/k/v biases,
 * NEOX RoPE), prompt {1,300,301,302,260,270,280}. Produced once with
 *   node generate.mjs --model M.gguf --tokens 1,300,301,302,260,270,280   (tools/peers/llamacpp)
 *        --n 100 --flash-attn off --kv-type f32 --threads 1 --json
 * (node-llama-cpp 3.21.1, llama.cpp release v0.4.0). If tiny_write or the fixture spec changes,
 * these must be regenerated the same way.
 */
static const int32_t LLAMACPP_QWEN2[100] = {
    195, 73,  74,  166, 203, 274, 180, 214, 97,  147, 155, 53,  73,  175, 21,  73,  74,  79,  155, 120,
    73,  310, 107, 258, 73,  153, 53,  73,  132, 180, 195, 73,  219, 118, 165, 154, 149, 210, 285, 154,
    149, 195, 73,  199, 73,  199, 73,  260, 203, 21,  16,  147, 203, 21,  16,  147, 154, 149, 195, 73,
    199, 73,  199, 279, 192, 147, 154, 149, 195, 73,  199, 279, 192, 147, 154, 149, 195, 73,  199, 279,
    192, 147, 154, 149, 195, 73,  199, 279, 192, 104, 250, 51,  151, 250, 51,  151, 250, 51,  151, 250};
static const int32_t LLAMACPP_LLAMA[100] = {
    201, 96,  113, 36,  82,  224, 96,  104, 272, 201, 96,  113, 36,  36,  36,  32,  73,  297, 261, 60,
    243, 123, 29,  203, 82,  128, 265, 50,  205, 309, 207, 123, 119, 14,  205, 309, 207, 123, 29,  203,
    242, 75,  160, 226, 296, 213, 217, 192, 112, 36,  32,  73,  36,  166, 203, 82,  128, 265, 268, 116,
    116, 116, 116, 51,  289, 6,   150, 144, 14,  212, 36,  36,  36,  36,  36,  36,  36,  36,  36,  36,
    32,  214, 6,   150, 144, 14,  212, 98,  63,  161, 116, 51,  289, 27,  293, 298, 208, 226, 240, 261};

static void greedy_matches_llama_cpp(const char *arch, const int32_t *want) {
    tiny_spec sp = tiny_default(arch);
    sp.vocab = true, sp.n_vocab = 320, sp.n_ctx = 512, sp.n_embd = 64, sp.n_head = 4, sp.n_head_kv = 2;
    sp.n_ff = 96, sp.rope_dims = 16;
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F32, 8);
    const int32_t prompt[7] = {1, 300, 301, 302, 260, 270, 280};
    int32_t out[100];
    int n_out;
    engine_gen g = {.n_predict = 100};
    attnd_err err;
    cr_assert_eq(engine_generate(r.e, tiny_rig_seq(&r), prompt, 7, &g, out, &n_out, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(n_out, 100);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(out[i], want[i], "%s: token %d: attnd %d, llama.cpp %d", arch, i, out[i], want[i]);
    tiny_rig_close(&r);
}

Test(model, qwen2_greedy_reproduces_llama_cpp_on_generated_model) { greedy_matches_llama_cpp("qwen2", LLAMACPP_QWEN2); }

Test(model, llama_greedy_reproduces_llama_cpp_on_generated_model) { greedy_matches_llama_cpp("llama", LLAMACPP_LLAMA); }

/* tests/data/reference-families.json: llama.cpp's 100 greedy tokens for the small generated model
 * of each family (tests/family_specs.h; tests/data/regenerate.sh writes them with tiny_model, the
 * same files as here). attnd reproduces every token: qwen3's QK-norm and head_dim, smollm3's NoPE
 * layers, gemma2's soft-caps and windows, gemma3's local/global layers and bases, phi3's fused
 * matrices, all as llama.cpp computes them. */
Test(model, every_family_greedy_reproduces_llama_cpp_on_generated_model) {
    json_error_t je;
    json_t *refj = json_load_file(ATTND_DATA_DIR "/reference-families.json", 0, &je);
    cr_assert(refj, "tests/data/reference-families.json: %s", je.text);
    json_t *cases = json_object_get(refj, "cases");
    cr_assert_eq(json_array_size(cases), N_FAMILIES + 1); /* + gpt-oss in MXFP4, below */
    for (size_t i = 0; i < N_FAMILIES; i++) {
        json_t *c = json_array_get(cases, i);
        cr_assert_str_eq(json_string_value(json_object_get(c, "family")), FAMILY_NAMES[i]);
        json_t *want = json_object_get(c, "tokens");
        cr_assert_eq(json_array_size(want), FAMILY_N_GEN);
        tiny_spec sp = family_small(FAMILY_NAMES[i]);
        tiny_rig r;
        tiny_rig_open(&r, &sp, KV_F32, 8);
        int32_t out[FAMILY_N_GEN];
        int n_out;
        engine_gen g = {.n_predict = FAMILY_N_GEN};
        attnd_err err;
        cr_assert_eq(engine_generate(r.e, tiny_rig_seq(&r), FAMILY_PROMPT, 7, &g, out, &n_out, NULL, &err), ATTND_OK,
                     "%s", err.msg);
        cr_assert_eq(n_out, FAMILY_N_GEN);
        for (int t = 0; t < FAMILY_N_GEN; t++)
            cr_assert_eq(out[t], json_integer_value(json_array_get(want, (size_t)t)), "%s: token %d: attnd %d, llama.cpp %lld",
                         FAMILY_NAMES[i], t, out[t], (long long)json_integer_value(json_array_get(want, (size_t)t)));
        tiny_rig_close(&r);
    }
    json_decref(refj);
}

/* gpt-oss with every 2-D and expert weight in MXFP4 (`attnd quantize ... MXFP4`, as
 * regenerate.sh made llama.cpp's reference): the 100 greedy tokens of llama.cpp. */
Test(model, gpt_oss_mxfp4_greedy_reproduces_llama_cpp) {
    json_error_t je;
    json_t *refj = json_load_file(ATTND_DATA_DIR "/reference-families.json", 0, &je);
    cr_assert(refj, "tests/data/reference-families.json: %s", je.text);
    json_t *c = json_array_get(json_object_get(refj, "cases"), N_FAMILIES);
    cr_assert_str_eq(json_string_value(json_object_get(c, "family")), "gpt-oss-MXFP4");
    json_t *want = json_object_get(c, "tokens");
    tiny_spec sp = family_small("gpt-oss");
    char f32[256], mx[300], cmd[1024];
    tiny_tmpname(f32, sizeof(f32), "oss");
    snprintf(mx, sizeof(mx), "%s-MXFP4.gguf", f32);
    cr_assert_eq(tiny_write(f32, &sp), 0);
    snprintf(cmd, sizeof(cmd), "'%s' quantize --quiet '%s' '%s' MXFP4 >/dev/null 2>&1", ATTND_BINARY, f32, mx);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    tiny_rig r;
    tiny_rig_load(&r, mx, KV_F32, 8, 1, 16);
    kv_seq *s;
    attnd_err err;
    cr_assert_eq(kv_seq_create(&s, r.pool, &err), ATTND_OK, "%s", err.msg);
    int32_t out[FAMILY_N_GEN];
    int n_out;
    engine_gen g = {.n_predict = FAMILY_N_GEN};
    cr_assert_eq(engine_generate(r.e, s, FAMILY_PROMPT, 7, &g, out, &n_out, NULL, &err), ATTND_OK, "%s", err.msg);
    for (int t = 0; t < FAMILY_N_GEN; t++)
        cr_assert_eq(out[t], json_integer_value(json_array_get(want, (size_t)t)), "token %d: attnd %d, llama.cpp %lld", t,
                     out[t], (long long)json_integer_value(json_array_get(want, (size_t)t)));
    kv_seq_destroy(s);
    tiny_rig_close(&r);
    unlink(f32), unlink(mx);
    json_decref(refj);
}

/* Released models' shapes (tests/family_specs.h: Qwen3-0.6B's 16/8 heads of 128, Gemma-3-1B's
 * 4/1 heads of 256 and window 512, Phi-3-mini's 32 heads of 96, fused, Qwen3-30B-A3B's 32/4 heads
 * and top-8 experts of 768, gpt-oss-20b's 64/8 heads of 64 and top 4 of width 2880), fewer layers
 * (and experts), F16 weights, 4 positions, against the float64 reference. */
static void real_shape(const char *name) {
    tiny_spec sp = family_real(name);
    check_against_reference(&sp, 4, 2e-3);
}

Test(model, qwen3_0_6b_shape_matches_float64_reference) { real_shape("qwen3-0.6b"); }
Test(model, gemma3_1b_shape_matches_float64_reference) { real_shape("gemma3-1b"); }
Test(model, phi3_mini_shape_matches_float64_reference) { real_shape("phi3-mini"); }
Test(model, qwen3_30b_a3b_shape_matches_float64_reference) { real_shape("qwen3-30b-a3b"); }
Test(model, gpt_oss_20b_shape_matches_float64_reference) { real_shape("gpt-oss-20b"); }

// ---- agreement with llama.cpp on the test models -------------------------------------------------

/* tests/data/reference-greedy.json: llama.cpp's greedy continuations (tests/data/regenerate.sh);
 * the quantized variants are made by `attnd quantize` (test_models.h), as the script made them. */
static const struct {
    const char *model;
    double floor; /* teacher-forced top-1 agreement (stories260K floors from issue 3, Q8_0 / Q4_K of
                     the default model from issue 14) */
} FLOORS[] = {
    {"stories260K.gguf", 1.00},         {"stories260K-F16.gguf", 0.99},     {"stories260K-BF16.gguf", 0.97},
    {"stories260K-Q8_0.gguf", 0.93},    {"stories260K-Q4_0.gguf", 0.90},    {"attnd-sotu.gguf", 0.97},
    {"attnd-sotu-Q8_0.gguf", 0.90},     {"attnd-sotu-Q4_K.gguf", 0.85},     {"attnd-sotu-Q4_K_M.gguf", 0.85},
    /* issue 27: every new type and mix, on the default model (256 wide: k-quants except the 704-wide
     * ffn_down, which falls back) and on generated 896 / 960-wide models (the fallbacks). Measured
     * 97.7-99.8 % when the references were made (one thread, this build); floors 90 %. */
    {"attnd-sotu-Q2_K.gguf", 0.90},     {"attnd-sotu-Q3_K_S.gguf", 0.90},   {"attnd-sotu-Q3_K_M.gguf", 0.90},
    {"attnd-sotu-Q4_K_S.gguf", 0.90},   {"attnd-sotu-Q5_K_S.gguf", 0.90},   {"attnd-sotu-Q5_K_M.gguf", 0.90},
    {"attnd-sotu-Q4_1.gguf", 0.90},     {"attnd-sotu-Q5_0.gguf", 0.90},     {"attnd-sotu-Q5_1.gguf", 0.90},
    {"attnd-sotu-IQ4_NL.gguf", 0.90},   {"attnd-sotu-IQ4_XS.gguf", 0.90},   {"attnd-sotu-MXFP4.gguf", 0.90},
    {"qwen896-Q4_K_M.gguf", 0.90},      {"qwen896-Q5_K_M.gguf", 0.90},      {"qwen896-Q2_K.gguf", 0.90},
    {"qwen896-IQ4_XS.gguf", 0.90},      {"llama960-Q4_K_M.gguf", 0.90},     {"llama960-Q5_K_M.gguf", 0.90},
    {"llama960-Q3_K_M.gguf", 0.90},
    /* files llama.cpp's own quantizer wrote (tests/data/models/llamacpp): its blocks, its metadata */
    {"llamacpp/attnd-sotu-Q2_K.gguf", 0.90}, {"llamacpp/attnd-sotu-Q3_K_M.gguf", 0.90},
    {"llamacpp/attnd-sotu-IQ4_XS.gguf", 0.90},
};

static json_t *load_reference(void) {
    json_error_t je;
    json_t *j = json_load_file(ATTND_DATA_DIR "/reference-greedy.json", 0, &je);
    cr_assert(j, "tests/data/reference-greedy.json: %s", je.text);
    return j;
}

static int32_t *case_ids(json_t *c, int *n_prompt, int *n_total) {
    json_t *p = json_object_get(c, "prompt_tokens"), *t = json_object_get(c, "tokens");
    *n_prompt = (int)json_array_size(p);
    *n_total = *n_prompt + (int)json_array_size(t);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)*n_total);
    for (int i = 0; i < *n_prompt; i++) ids[i] = (int32_t)json_integer_value(json_array_get(p, (size_t)i));
    for (int i = *n_prompt; i < *n_total; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(t, (size_t)(i - *n_prompt)));
    return ids;
}

/* Teacher-forced top-1 agreement with llama.cpp's references (F32 cache) of `name` evaluated with
 * a kv-typed cache, over every reference case of the model; *n_tokens gets how many were scored. */
/* Teacher-forced top-1 agreement with llama.cpp's greedy tokens over the first max_cases cases of
 * the file name (8 in the reference). */
static double ref_agreement_of(json_t *cases, const char *name, kv_type kv, int max_cases, int *n_tokens) {
    char path[1024];
    test_model_path(name, path, sizeof(path));
    model *m;
    attnd_err err;
    cr_assert_eq(model_load(&m, path, &err), ATTND_OK, "%s", err.msg);
    const model_info *mi = model_info_get(m);
    engine *e;
    kv_pool *pool;
    cr_assert_eq(kv_pool_create(&pool, m, (size_t)256 << 20, kv, &err), ATTND_OK, "%s", err.msg);
    /* One thread: these models are tiny, and the test machine may be busy. */
    cr_assert_eq(engine_create(&e, m, 512, 1, &err), ATTND_OK, "%s", err.msg);
    float *lg = malloc(sizeof(float) * 512 * (size_t)mi->n_vocab);
    int agree = 0, total = 0, n_cases = 0;
    for (size_t ci = 0; ci < json_array_size(cases) && n_cases < max_cases; ci++) {
        json_t *c = json_array_get(cases, ci);
        if (strcmp(json_string_value(json_object_get(c, "model")), name)) continue;
        n_cases++;
        int np, nt;
        int32_t *ids = case_ids(c, &np, &nt);
        cr_assert(nt - 1 <= 512 && nt <= mi->n_ctx);
        kv_seq *s;
        cr_assert_eq(kv_seq_create(&s, pool, NULL), ATTND_OK);
        prefill(e, s, ids, nt - 1, lg); /* position i predicts token i + 1 */
        for (int i = np - 1; i < nt - 1; i++, total++)
            agree += sampler_argmax(lg + (size_t)i * mi->n_vocab, mi->n_vocab) == ids[i + 1];
        kv_seq_destroy(s);
        free(ids);
    }
    cr_assert_gt(total, 0, "no reference cases for %s", name);
    free(lg);
    engine_destroy(e);
    kv_pool_destroy(pool);
    model_destroy(m);
    if (n_tokens) *n_tokens = total;
    return (double)agree / total;
}

/* The floors' figure: every case, or the first 3 under the sanitizers (192 tokens). */
static double ref_agreement(json_t *cases, const char *name, kv_type kv, int *n_tokens) {
    return ref_agreement_of(cases, name, kv, test_size(1 << 30, 3), n_tokens);
}

Test(model, teacher_forced_agreement_with_llama_cpp_meets_floors) {
    json_t *refj = load_reference();
    json_t *cases = json_object_get(refj, "cases");
    for (size_t fi = 0; fi < ATTND_ARRAY_LEN(FLOORS); fi++) {
        int total;
        /* F32 KV: the reference was made with llama.cpp's F32 cache. */
        double frac = ref_agreement(cases, FLOORS[fi].model, KV_F32, &total);
        printf("agreement %-24s %4d tokens = %6.2f %% (floor %.0f %%)\n", FLOORS[fi].model, total, 100 * frac,
               100 * FLOORS[fi].floor);
        fflush(stdout);
        cr_expect(frac >= FLOORS[fi].floor, "%s: agreement %.2f %% is below the floor %.0f %%", FLOORS[fi].model,
                  100 * frac, 100 * FLOORS[fi].floor);
    }
    json_decref(refj);
}

/* Issue 47's low-bit types: a 2-layer llama 256 wide whose every 2-D weight is random blocks of the
 * type (`make_tiny OUT lowbit TYPE`: any index, sign and sub-scale byte is valid, so these are the
 * blocks a quantizer could write), against llama.cpp's greedy tokens on the same file. Measured
 * 99.2-100 % when the references were made (one thread; 3.5 % for IQ3_XXS with the sign table's
 * parity bit left out, so a wrong decoder cannot pass); floors 95 %. */
static const struct {
    const char *model;
    double floor;
} LOWBIT_FLOORS[] = {
    {"lowbit-IQ2_XXS.gguf", 0.95}, {"lowbit-IQ2_XS.gguf", 0.95}, {"lowbit-IQ2_S.gguf", 0.95},
    {"lowbit-IQ3_XXS.gguf", 0.95}, {"lowbit-IQ3_S.gguf", 0.95},  {"lowbit-IQ1_S.gguf", 0.95},
    {"lowbit-IQ1_M.gguf", 0.95},   {"lowbit-TQ1_0.gguf", 0.95},  {"lowbit-TQ2_0.gguf", 0.95},
    {"lowbit-NVFP4.gguf", 0.95},
};

Test(model, lowbit_types_teacher_forced_agreement_with_llama_cpp_meets_floors) {
    json_t *refj = load_reference();
    json_t *cases = json_object_get(refj, "cases");
    for (size_t fi = 0; fi < ATTND_ARRAY_LEN(LOWBIT_FLOORS); fi++) {
        int total;
        double frac = ref_agreement(cases, LOWBIT_FLOORS[fi].model, KV_F32, &total);
        printf("agreement %-24s %4d tokens = %6.2f %% (floor %.0f %%)\n", LOWBIT_FLOORS[fi].model, total, 100 * frac,
               100 * LOWBIT_FLOORS[fi].floor);
        fflush(stdout);
        cr_expect(frac >= LOWBIT_FLOORS[fi].floor, "%s: agreement %.2f %% is below the floor %.0f %%",
                  LOWBIT_FLOORS[fi].model, 100 * frac, 100 * LOWBIT_FLOORS[fi].floor);
    }
    json_decref(refj);
}

/* The CLI end to end: `attnd generate --temp 0 --json` reproduces llama.cpp's 64 greedy tokens of
 * every stories260K.gguf (F32) case. */
Test(model, cli_generate_greedy_reproduces_llama_cpp_on_f32_model) {
    json_t *refj = load_reference();
    json_t *cases = json_object_get(refj, "cases");
    int n_cases = 0;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *c = json_array_get(cases, ci);
        if (strcmp(json_string_value(json_object_get(c, "model")), "stories260K.gguf")) continue;
        int np, nt;
        int32_t *ids = case_ids(c, &np, &nt);
        char cmd[8192];
        int k = snprintf(cmd, sizeof(cmd),
                         "'%s' generate --model '%s/models/stories260K.gguf' --n %d --temp 0 --kv-type f32 --ignore-eos --json "
                         "--threads 1 --tokens ",
                         ATTND_BINARY, ATTND_DATA_DIR, nt - np);
        for (int i = 0; i < np; i++) k += snprintf(cmd + k, sizeof(cmd) - (size_t)k, "%s%d", i ? "," : "", ids[i]);
        FILE *p = popen(cmd, "r");
        cr_assert(p);
        json_error_t je;
        json_t *out = json_loadf(p, JSON_DISABLE_EOF_CHECK, &je);
        cr_assert_eq(pclose(p), 0, "attnd generate failed");
        cr_assert(out, "output is not JSON: %s", je.text);
        json_t *toks = json_object_get(out, "tokens");
        cr_assert_eq((int)json_array_size(toks), nt - np);
        cr_assert_eq((int)json_array_size(json_object_get(out, "prompt_tokens")), np);
        cr_assert(json_is_object(json_object_get(out, "timings")));
        for (int i = 0; i < nt - np; i++)
            cr_assert_eq(json_integer_value(json_array_get(toks, (size_t)i)), ids[np + i],
                         "case %zu token %d: attnd %lld, llama.cpp %d", ci, i,
                         (long long)json_integer_value(json_array_get(toks, (size_t)i)), ids[np + i]);
        json_decref(out);
        free(ids);
        n_cases++;
    }
    cr_assert_gt(n_cases, 0);
    printf("stories260K.gguf: attnd generate reproduced all %d greedy cases of llama.cpp\n", n_cases);
    json_decref(refj);
}

/*
 * llama2.c's run.c on stories260K (reference-llama2c.json holds its stdout). run.c evaluates
 * positions 0..steps-1, printing the token that follows each one (prompt tokens first, then its
 * greedy choices; it stops early if it picks BOS), drops the leading space of the piece after
 * BOS, and skips single-byte pieces that are neither printable nor space. Rebuilding that text
 * from attnd's greedy ids (prompt tokenized by attnd) compares the token ids of the two engines.
 */
Test(model, greedy_generation_reproduces_llama2c_run_c) {
    char path[512];
    snprintf(path, sizeof(path), "%s/models/reference-llama2c.json", ATTND_DATA_DIR);
    json_t *refj = json_load_file(path, 0, NULL);
    cr_assert(refj, "cannot read %s", path);
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", ATTND_DATA_DIR);
    model *m;
    tokenizer *tok;
    engine *e;
    kv_pool *pool;
    attnd_err err;
    cr_assert_eq(model_load(&m, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&tok, model_gguf(m), &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(&e, m, 512, 1, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_pool_create(&pool, m, (size_t)64 << 20, KV_F32, &err), ATTND_OK, "%s", err.msg);
    json_t *cases = json_object_get(refj, "cases");
    int same = 0, n_cases = (int)json_array_size(cases);
    for (int ci = 0; ci < n_cases; ci++) {
        json_t *c = json_array_get(cases, (size_t)ci);
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        const char *want = json_string_value(json_object_get(c, "stdout"));
        int steps = (int)json_integer_value(json_object_get(c, "steps"));
        int32_t *ids;
        size_t np;
        cr_assert_eq(tok_encode(tok, prompt, strlen(prompt), true, false, &ids, &np, &err), ATTND_OK, "%s", err.msg);
        int n_gen = steps + 1 - (int)np > 0 ? steps + 1 - (int)np : 0;
        int32_t *all = malloc(sizeof(int32_t) * (np + (size_t)n_gen + 1));
        memcpy(all, ids, sizeof(int32_t) * np);
        int n_out = 0;
        if (n_gen > 0) {
            kv_seq *s;
            cr_assert_eq(kv_seq_create(&s, pool, NULL), ATTND_OK);
            engine_gen g = {.n_predict = n_gen};
            cr_assert_eq(engine_generate(e, s, ids, (int)np, &g, all + np, &n_out, NULL, &err), ATTND_OK, "%s",
                         err.msg);
            kv_seq_destroy(s);
        }
        size_t cap = 8192, len = 0;
        char *text = malloc(cap);
        int end = (int)np + n_out < steps + 1 ? (int)np + n_out : steps + 1;
        for (int i = 1; i < end; i++) {
            if (i >= (int)np && all[i] == 1) break; /* run.c stops when it generates BOS */
            const char *b;
            size_t bl;
            cr_assert(tok_token_bytes(tok, all[i], false, &b, &bl));
            if (all[i - 1] == 1 && bl && b[0] == ' ') b++, bl--;
            if (bl == 1 && !(isprint((unsigned char)b[0]) || isspace((unsigned char)b[0]))) continue;
            cr_assert(len + bl + 2 < cap);
            memcpy(text + len, b, bl);
            len += bl;
        }
        text[len++] = '\n';
        text[len] = 0;
        if (!strcmp(text, want)) same++;
        else printf("llama2.c case %d (%s): texts differ\n  attnd:    %s  llama2.c: %s", ci, prompt, text, want);
        free(text), free(all), free(ids);
    }
    printf("stories260K.gguf: %d/%d prompts reproduce llama2.c run.c's output exactly\n", same, n_cases);
    fflush(stdout);
    cr_expect_eq(same, n_cases);
    kv_pool_destroy(pool);
    engine_destroy(e);
    tok_destroy(tok);
    model_destroy(m);
    json_decref(refj);
}

// ---- quantized KV caches (issue 30) ------------------------------------------------------------
//
// Kept apart from the tests above: Q8_0 / Q4_0 caches need head_dim a multiple of 32, so these
// use generated models with head_dim 32 and the test models with head_dim 64.


/* Sliding windows across blocks (Gemma 2 with soft-capping, Gemma 3, gpt-oss with sinks) and a
 * plain llama, each with Q8_0 and Q4_0 caches. */
Test(model, quantized_kv_decode_equals_prefill_with_windows_sinks_and_softcap) {
    const char *archs[] = {"llama", "gemma2", "gemma3", "gpt-oss"};
    const kv_type types[] = {KV_Q8_0, KV_Q4_0};
    for (size_t a = 0; a < ATTND_ARRAY_LEN(archs); a++) {
        tiny_spec sp = tiny_default(archs[a]);
        sp.head_dim = 32, sp.rope_dims = 32;
        if (strcmp(archs[a], "llama")) sp.window = 72, sp.n_layer = 4;
        if (!strcmp(archs[a], "gpt-oss")) sp.n_expert = 8, sp.n_expert_used = 4, sp.n_ff_exp = 24;
        for (size_t t = 0; t < ATTND_ARRAY_LEN(types); t++) decode_equals_prefill_kv(&sp, types[t], 150);
    }
}

/* With a Q8_0 cache: a fork continues exactly as its parent (sharing, then copying, quantized
 * blocks), truncation inside the window re-extends exactly, and both match one whole prefill. */
Test(model, quantized_kv_forks_and_window_truncation_stay_exact) {
    tiny_spec sp = tiny_default("gemma3");
    sp.n_layer = 4, sp.window = 72, sp.head_dim = 32, sp.rope_dims = 32, sp.n_ctx = 1024;
    tiny_rig r;
    int V = sp.n_vocab;
    int32_t tok[600];
    float *whole, *part;
    kv_seq *a = prefill_whole_and_chunked(&r, &sp, KV_Q8_0, tok, &whole, &part);
    cr_assert_lt(max_abs_diff(part, whole + 500 * (size_t)V, 100 * (size_t)V), 1e-4f, "chunked differs from whole");
    truncate_and_fork_stay_exact(&r, a, tok, whole, part);
    free(whole), free(part);
    tiny_rig_close(&r);
}

/* Q8_0 and Q4_0 caches on the head_dim-64 test models (stories260K's head_dim is 8). Q8_0 stays within KVQ_SLACK of the F16
 * cache's agreement and above the F16 floors of FLOORS. Measured (one thread, this build):
 *                      f16      q8_0     q4_0
 *   attnd-sotu        100.00   100.00    94.92
 *   attnd-sotu-Q8_0    99.22    99.02    95.12
 *   attnd-sotu-Q4_K_M  98.24    98.05    95.90
 *   qwen896-Q4_K_M     97.46    97.07    91.99
 *   llama960-Q4_K_M    97.07    97.27    87.50
 * Q4_0 falls 3-10 points below F16 (not within a point): its floors are the measurement less
 * about 2 points, a guard against regressions rather than a claim of parity.
 * "Within a point" is judged over the files' tokens together: one file's 512 tokens are too few.
 * At ~2 % disagreement, each cache type's count of misses on one file varies by about +-3 tokens
 * (0.6 points) with the CPU's rounding, so one file's q8_0 - f16 gap moves by ~0.9 points on its
 * own; AMD Zen 3 (AVX2 kernels) measured qwen896-Q4_K_M at f16 98.05 / q8_0 96.88 (-1.17), while
 * over all five files q8_0 is 0.3 points below f16 there (98.20 vs 98.48). */
#define KVQ_SLACK 0.01
Test(model, quantized_kv_agreement_with_llama_cpp_stays_within_a_point_of_f16) {
    static const struct {
        const char *model;
        double q8_floor, q4_floor;
    } KVQ_FLOORS[] = {
        /* the first two (F32 weights at head size 32; GQA at 64) are the sanitizers' */
        {"attnd-sotu.gguf", 0.97, 0.93},        {"qwen896-Q4_K_M.gguf", 0.90, 0.90},
        {"attnd-sotu-Q8_0.gguf", 0.90, 0.93},   {"attnd-sotu-Q4_K_M.gguf", 0.85, 0.93},
        {"llama960-Q4_K_M.gguf", 0.90, 0.85},
    };
    json_t *refj = load_reference(), *cases = json_object_get(refj, "cases");
    size_t n_models = (size_t)test_size((int)ATTND_ARRAY_LEN(KVQ_FLOORS), 2);
    double f16_all = 0, q8_all = 0;
    for (size_t i = 0; i < n_models; i++) {
        const char *name = KVQ_FLOORS[i].model;
        /* every case: "within a point" needs all 512 tokens (one token is 0.2 points) */
        double f16 = ref_agreement_of(cases, name, KV_F16, 1 << 30, NULL),
               q8 = ref_agreement_of(cases, name, KV_Q8_0, 1 << 30, NULL),
               q4 = ref_agreement_of(cases, name, KV_Q4_0, 1 << 30, NULL);
        printf("kv agreement %-24s f16 %6.2f %%  q8_0 %6.2f %%  q4_0 %6.2f %%\n", name, 100 * f16, 100 * q8, 100 * q4);
        fflush(stdout);
        f16_all += f16 / (double)n_models, q8_all += q8 / (double)n_models; /* every file has 512 tokens */
        cr_expect(q8 >= KVQ_FLOORS[i].q8_floor, "%s: q8_0 KV agreement %.2f %% is below its floor", name, 100 * q8);
        cr_expect(q4 >= KVQ_FLOORS[i].q4_floor, "%s: q4_0 KV agreement %.2f %% is below its floor", name, 100 * q4);
    }
    printf("kv agreement over %zu files          f16 %6.2f %%  q8_0 %6.2f %%\n", n_models, 100 * f16_all, 100 * q8_all);
    cr_expect(q8_all >= f16_all - KVQ_SLACK, "q8_0 KV agreement %.2f %% over %zu files is more than a point below f16's %.2f %%",
              100 * q8_all, n_models, 100 * f16_all);
    json_decref(refj);
}
