/*
 * test_quantize.c — weight re-encoding (engine/kernels/quantize.c, `attnd quantize`).
 *
 * Encoders are checked through the kernels' own decoder (quant_dequantize_row): the error of a
 * round trip must stay under a bound per type. The type-choice rules (Q4_K_M mix, fallbacks)
 * are checked by name; whole files by re-reading them: metadata equal, norms untouched, every
 * weight close to its source. Agreement with llama.cpp on quantized default models is in
 * test_model.c (teacher_forced_agreement_with_llama_cpp_meets_floors).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "attnd/gguf.h"
#include "attnd/quantize.h"
#include "quant.h"
#include "test_models.h"

#define MODEL ATTND_SOURCE_DIR "/models/attnd-sotu.gguf"
#define STORIES ATTND_DATA_DIR "/models/stories260K.gguf"

static uint64_t rng = 0x243F6A8885A308D3ull;

/* roughly normal, sd 1: sum of 4 uniforms, scaled */
static float randn(void) {
    float s = 0.f;
    for (int k = 0; k < 4; k++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        s += (float)((double)(rng >> 11) / 9007199254740992.0) - 0.5f;
    }
    return s * 1.7320508f;
}

/* Relative RMS error of x -> type -> float over n values. */
static double roundtrip_rel_rms(uint32_t type, const float *x, int64_t n) {
    void *q = malloc(quant_row_bytes(type, n));
    float *y = malloc(sizeof(float) * (size_t)n);
    quantize_row(q, x, type, n);
    quant_dequantize_row(y, q, type, n);
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) e += (double)(y[i] - x[i]) * (y[i] - x[i]), s += (double)x[i] * x[i];
    free(q);
    free(y);
    return sqrt(e / s);
}

Test(quantize, round_trips_stay_within_each_types_error_bound) {
    enum { N = 256 * 64 };
    static float x[N];
    for (int i = 0; i < N; i++) x[i] = randn() * (i % 256 < 16 ? 4.f : 1.f); /* uneven blocks */
    static const struct {
        uint32_t type;
        double bound; /* relative RMS error: about a third of a step of the type's grid */
    } CASES[] = {
        {GGUF_TYPE_F32, 0.0},     {GGUF_TYPE_F16, 0.0005}, {GGUF_TYPE_BF16, 0.004}, {GGUF_TYPE_Q8_0, 0.009},
        {GGUF_TYPE_Q6_K, 0.035},  {GGUF_TYPE_Q4_K, 0.11},  {GGUF_TYPE_Q4_0, 0.13},
        /* the types of issue 27 */
        {GGUF_TYPE_Q5_K, 0.055},  {GGUF_TYPE_Q5_0, 0.065}, {GGUF_TYPE_Q5_1, 0.06},  {GGUF_TYPE_Q4_1, 0.12},
        {GGUF_TYPE_IQ4_NL, 0.11}, {GGUF_TYPE_IQ4_XS, 0.11}, {GGUF_TYPE_Q3_K, 0.22}, {GGUF_TYPE_Q2_K, 0.45},
        {GGUF_TYPE_MXFP4, 0.2},
    };
    for (size_t c = 0; c < ATTND_ARRAY_LEN(CASES); c++) {
        double e = roundtrip_rel_rms(CASES[c].type, x, N);
        printf("round trip %-5s relative RMS error %.5f (bound %.4f)\n", gguf_type_name(CASES[c].type), e,
               CASES[c].bound);
        cr_expect(e <= CASES[c].bound, "%s: relative RMS error %.5f above %.4f", gguf_type_name(CASES[c].type), e,
                  CASES[c].bound);
    }
}

Test(quantize, blocks_of_zeros_and_constants_round_trip_exactly) {
    static const uint32_t TYPES[] = {GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K,
                                     GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1, GGUF_TYPE_IQ4_NL,
                                     GGUF_TYPE_MXFP4, GGUF_TYPE_Q2_K, GGUF_TYPE_Q3_K, GGUF_TYPE_Q5_K, GGUF_TYPE_IQ4_XS};
    float x[256], y[256];
    uint8_t q[512];
    for (size_t t = 0; t < ATTND_ARRAY_LEN(TYPES); t++) {
        memset(x, 0, sizeof x);
        quantize_row(q, x, TYPES[t], 256);
        quant_dequantize_row(y, q, TYPES[t], 256);
        for (int i = 0; i < 256; i++) cr_assert_eq(y[i], 0.f, "%s: zero block decodes to %g", gguf_type_name(TYPES[t]), y[i]);
        for (int i = 0; i < 256; i++) x[i] = -0.5f; /* exactly representable by every type's grid */
        quantize_row(q, x, TYPES[t], 256);
        quant_dequantize_row(y, q, TYPES[t], 256);
        for (int i = 0; i < 256; i++)
            cr_assert_float_eq(y[i], -0.5f, 1e-3, "%s: constant block decodes to %g", gguf_type_name(TYPES[t]), y[i]);
    }
}

// ---- type choice ------------------------------------------------------------------------------

static uint32_t type_of(quantize_target t, const char *name, uint64_t ne0, int n_layer, bool has_output) {
    uint64_t ne[2] = {ne0, 64};
    return quantize_tensor_type(t, name, 2, ne, GGUF_TYPE_F16, n_layer, has_output);
}

Test(quantize, q4_k_m_puts_q6_k_where_llama_cpp_does) {
    /* use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2 */
    const int more[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
    for (int l = 0; l < 32; l++) {
        bool want6 = false;
        for (size_t k = 0; k < ATTND_ARRAY_LEN(more); k++) want6 |= more[k] == l;
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        cr_expect_eq(type_of(QUANTIZE_Q4_K_M, name, 4096, 32, true), want6 ? GGUF_TYPE_Q6_K : GGUF_TYPE_Q4_K, "%s", name);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        cr_expect_eq(type_of(QUANTIZE_Q4_K_M, name, 11008, 32, true), want6 ? GGUF_TYPE_Q6_K : GGUF_TYPE_Q4_K, "%s", name);
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        cr_expect_eq(type_of(QUANTIZE_Q4_K_M, name, 4096, 32, true), GGUF_TYPE_Q4_K, "%s", name);
    }
    cr_expect_eq(type_of(QUANTIZE_Q4_K_M, "output.weight", 4096, 32, true), GGUF_TYPE_Q6_K);
    cr_expect_eq(type_of(QUANTIZE_Q4_K_M, "token_embd.weight", 4096, 32, true), GGUF_TYPE_Q4_K);
    cr_expect_eq(type_of(QUANTIZE_Q4_K_M, "token_embd.weight", 4096, 32, false), GGUF_TYPE_Q6_K,
                 "a tied embedding is the output head");
    cr_expect_eq(type_of(QUANTIZE_Q4_K, "output.weight", 4096, 32, true), GGUF_TYPE_Q4_K, "plain types are pure");
}

Test(quantize, rows_the_block_does_not_divide_fall_back) {
    cr_expect_eq(type_of(QUANTIZE_Q4_K, "blk.0.ffn_down.weight", 704, 6, true), GGUF_TYPE_Q5_0, "as llama.cpp");
    cr_expect_eq(type_of(QUANTIZE_Q6_K, "blk.0.ffn_down.weight", 704, 6, true), GGUF_TYPE_Q8_0);
    cr_expect_eq(type_of(QUANTIZE_Q4_K, "blk.0.ffn_down.weight", 172, 6, true), GGUF_TYPE_F16);
    cr_expect_eq(type_of(QUANTIZE_Q8_0, "blk.0.ffn_down.weight", 172, 6, true), GGUF_TYPE_F16);
    cr_expect_eq(type_of(QUANTIZE_Q4_0, "blk.0.ffn_down.weight", 172, 6, true), GGUF_TYPE_F16);
    cr_expect_eq(type_of(QUANTIZE_BF16, "blk.0.ffn_down.weight", 172, 6, true), GGUF_TYPE_BF16);
    uint64_t ne1[1] = {256};
    cr_expect_eq(quantize_tensor_type(QUANTIZE_Q4_K, "blk.0.attn_norm.weight", 1, ne1, GGUF_TYPE_F32, 6, true),
                 GGUF_TYPE_F32, "1-D tensors stay");
}

/* The mixes on a Qwen2.5-0.5B-shaped model: 24 layers, rows 896 wide (not a multiple of 256) except
 * ffn_down's 4864, 14 query heads on 2 KV heads, tied embedding: llama.cpp's choices per tensor. */
static uint32_t qwen_type(quantize_target t, const char *tensor, int layer) {
    char name[64];
    uint64_t ne[2] = {strstr(tensor, "ffn_down") ? 4864 : 896, 128};
    if (layer >= 0) snprintf(name, sizeof name, "blk.%d.%s.weight", layer, tensor);
    else snprintf(name, sizeof name, "%s.weight", tensor);
    quantize_model m = {24, false, 7, 1, false};
    return quantize_tensor_type_for(t, name, 2, ne, GGUF_TYPE_BF16, &m);
}

Test(quantize, mixes_on_a_896_wide_model_make_llama_cpp_choices_and_fallbacks) {
    for (int l = 0; l < 24; l++) {
        bool more = l < 3 || l >= 21 || (l - 3) % 3 == 2;
        /* Q4_K_M: Q4_K -> Q5_0 and Q6_K -> Q8_0 on 896-wide rows */
        cr_expect_eq(qwen_type(QUANTIZE_Q4_K_M, "attn_q", l), GGUF_TYPE_Q5_0, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q4_K_M, "attn_v", l), more ? GGUF_TYPE_Q8_0 : GGUF_TYPE_Q5_0, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q4_K_M, "ffn_down", l), more ? GGUF_TYPE_Q6_K : GGUF_TYPE_Q4_K, "layer %d", l);
        /* Q5_K_M: Q5_K -> Q5_1 */
        cr_expect_eq(qwen_type(QUANTIZE_Q5_K_M, "ffn_up", l), GGUF_TYPE_Q5_1, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q5_K_M, "attn_v", l), more ? GGUF_TYPE_Q8_0 : GGUF_TYPE_Q5_1, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q5_K_M, "ffn_down", l), more ? GGUF_TYPE_Q6_K : GGUF_TYPE_Q5_K, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q5_K_S, "ffn_down", l), GGUF_TYPE_Q5_K, "layer %d", l);
        /* Q2_K: attn_v Q4_K (n_gqa >= 4) -> Q5_0, attn_output Q3_K -> Q4_0, ffn_down Q3_K */
        cr_expect_eq(qwen_type(QUANTIZE_Q2_K, "attn_v", l), GGUF_TYPE_Q5_0, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q2_K, "attn_output", l), GGUF_TYPE_Q4_0, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q2_K, "ffn_down", l), GGUF_TYPE_Q3_K, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q2_K, "attn_q", l), GGUF_TYPE_Q4_0, "layer %d", l);
        /* Q3_K_M: attn_v Q5_K in layers 0-1 (-> Q5_1), else Q4_K (-> Q5_0); ffn_down Q5_K below 24/16 */
        cr_expect_eq(qwen_type(QUANTIZE_Q3_K_M, "attn_v", l), l < 2 ? GGUF_TYPE_Q5_1 : GGUF_TYPE_Q5_0, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q3_K_M, "ffn_down", l), l < 1 ? GGUF_TYPE_Q5_K : GGUF_TYPE_Q4_K, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q3_K_M, "attn_output", l), GGUF_TYPE_Q5_0, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q3_K_S, "ffn_gate", l), GGUF_TYPE_Q4_0, "layer %d", l);
        /* Q4_K_S: Q5_K for attn_v of layers 0-3 and ffn_down of the first eighth */
        cr_expect_eq(qwen_type(QUANTIZE_Q4_K_S, "attn_v", l), l < 4 ? GGUF_TYPE_Q5_1 : GGUF_TYPE_Q5_0, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q4_K_S, "ffn_down", l), l < 3 ? GGUF_TYPE_Q5_K : GGUF_TYPE_Q4_K, "layer %d", l);
        /* IQ4_XS: -> IQ4_NL on 896 rows; attn_v Q5_K (n_gqa >= 4) -> Q5_1; ffn_down Q5_K in the first eighth */
        cr_expect_eq(qwen_type(QUANTIZE_IQ4_XS, "attn_k", l), GGUF_TYPE_IQ4_NL, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_IQ4_XS, "attn_v", l), GGUF_TYPE_Q5_1, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_IQ4_XS, "ffn_down", l), l < 3 ? GGUF_TYPE_Q5_K : GGUF_TYPE_IQ4_XS, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_IQ4_NL, "ffn_down", l), l < 3 ? GGUF_TYPE_Q5_K : GGUF_TYPE_IQ4_NL, "layer %d", l);
        /* the legacy mixes are their type, except the head */
        cr_expect_eq(qwen_type(QUANTIZE_Q4_1, "ffn_down", l), GGUF_TYPE_Q4_1, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q5_0, "attn_v", l), GGUF_TYPE_Q5_0, "layer %d", l);
        cr_expect_eq(qwen_type(QUANTIZE_Q5_1, "attn_q", l), GGUF_TYPE_Q5_1, "layer %d", l);
    }
    /* the tied embedding is the head: Q6_K -> Q8_0 on 896 rows, in every mix */
    const quantize_target mixes[] = {QUANTIZE_Q2_K, QUANTIZE_Q3_K_S, QUANTIZE_Q4_K_M, QUANTIZE_Q5_K_M, QUANTIZE_Q4_1,
                                     QUANTIZE_Q5_0, QUANTIZE_IQ4_NL, QUANTIZE_IQ4_XS};
    for (size_t i = 0; i < ATTND_ARRAY_LEN(mixes); i++)
        cr_expect_eq(qwen_type(mixes[i], "token_embd", -1), GGUF_TYPE_Q8_0, "%s", quantize_target_name(mixes[i]));
    /* an untied head on 1024-wide rows is Q6_K; its embedding keeps the mix's type */
    quantize_model m = {16, true, 4, 1, false};
    uint64_t ne[2] = {1024, 100};
    cr_expect_eq(quantize_tensor_type_for(QUANTIZE_Q5_0, "output.weight", 2, ne, GGUF_TYPE_F16, &m), GGUF_TYPE_Q6_K);
    cr_expect_eq(quantize_tensor_type_for(QUANTIZE_Q5_0, "token_embd.weight", 2, ne, GGUF_TYPE_F16, &m), GGUF_TYPE_Q5_0);
    cr_expect_eq(quantize_tensor_type_for(QUANTIZE_Q2_K, "token_embd.weight", 2, ne, GGUF_TYPE_F16, &m), GGUF_TYPE_Q2_K);
    /* eight experts: attn_v and attn_k Q8_0; the router is never quantized */
    quantize_model moe = {16, true, 4, 8, false};
    cr_expect_eq(quantize_tensor_type_for(QUANTIZE_Q4_K_M, "blk.3.attn_v.weight", 2, ne, GGUF_TYPE_F16, &moe), GGUF_TYPE_Q8_0);
    cr_expect_eq(quantize_tensor_type_for(QUANTIZE_Q4_K_M, "blk.3.attn_k.weight", 2, ne, GGUF_TYPE_F16, &moe), GGUF_TYPE_Q8_0);
    cr_expect_eq(quantize_tensor_type_for(QUANTIZE_Q4_K_M, "blk.3.ffn_gate_inp.weight", 2, ne, GGUF_TYPE_F32, &moe),
                 GGUF_TYPE_F32);
    /* a Gated DeltaNet layer's conv1d (kernel 4 by the qkv width) stays F32: llama.cpp reads it only so */
    uint64_t conv[2] = {4, 8192};
    cr_expect_eq(quantize_tensor_type_for(QUANTIZE_Q4_K_M, "blk.0.ssm_conv1d.weight", 2, conv, GGUF_TYPE_F32, &m),
                 GGUF_TYPE_F32);
    cr_expect_eq(quantize_tensor_type_for(QUANTIZE_F16, "blk.0.ssm_conv1d.weight", 2, conv, GGUF_TYPE_F32, &m),
                 GGUF_TYPE_F32);
    /* 32 does not divide a 1000-wide row: F16 after the fallback */
    uint64_t odd[2] = {1000, 4};
    cr_expect_eq(quantize_tensor_type_for(QUANTIZE_IQ4_XS, "blk.0.attn_q.weight", 2, odd, GGUF_TYPE_F32, &m), GGUF_TYPE_F16);
}

Test(quantize, type_names_parse_case_insensitively) {
    quantize_target t;
    cr_assert_eq(quantize_target_parse("q4_k_m", &t), ATTND_OK);
    cr_expect_eq(t, QUANTIZE_Q4_K_M);
    cr_assert_eq(quantize_target_parse("Q8_0", &t), ATTND_OK);
    cr_expect_eq(t, QUANTIZE_Q8_0);
    cr_assert_eq(quantize_target_parse("q5_k_m", &t), ATTND_OK);
    cr_expect_eq(t, QUANTIZE_Q5_K_M);
    cr_assert_eq(quantize_target_parse("IQ4_XS", &t), ATTND_OK);
    cr_expect_eq(t, QUANTIZE_IQ4_XS);
    cr_expect_eq(quantize_target_parse("Q7_K", &t), ATTND_ERR_INVALID);
    cr_expect_eq(quantize_target_parse("", &t), ATTND_ERR_INVALID);
}

// ---- files ------------------------------------------------------------------------------------

static void tmpname(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/attnd-test-quantize-%d-%s.gguf", (int)getpid(), tag);
}

/* Every metadata entry of a is in b with the same type and value (file_type and
 * quantization_version excepted). */
static void expect_same_metadata(const gguf_file *a, const gguf_file *b) {
    for (uint64_t i = 0; i < gguf_kv_count(a); i++) {
        const gguf_kv *ka = gguf_kv_at(a, i);
        if (!strcmp(ka->key, "general.file_type") || !strcmp(ka->key, "general.quantization_version")) continue;
        const gguf_kv *kb = gguf_find_kv(b, ka->key);
        cr_assert(kb, "metadata %s not copied", ka->key);
        cr_assert_eq(ka->value.type, kb->value.type, "%s: type changed", ka->key);
        const gguf_value *va = &ka->value, *vb = &kb->value;
        if (va->type == GGUF_VT_STRING) {
            cr_expect(va->v.str.len == vb->v.str.len && !memcmp(va->v.str.str, vb->v.str.str, va->v.str.len), "%s",
                      ka->key);
        } else if (va->type == GGUF_VT_ARRAY) {
            cr_assert_eq(va->v.arr.type, vb->v.arr.type, "%s", ka->key);
            cr_assert_eq(va->v.arr.n, vb->v.arr.n, "%s", ka->key);
            for (uint64_t k = 0; va->v.arr.type == GGUF_VT_STRING && k < va->v.arr.n; k++)
                cr_assert_str_eq(va->v.arr.strings[k].str, vb->v.arr.strings[k].str, "%s[%lu]", ka->key,
                                 (unsigned long)k);
        } else {
            cr_expect_eq(va->v.u64, vb->v.u64, "%s: value changed", ka->key);
        }
    }
}

Test(quantize, a_quantized_file_keeps_metadata_and_norms_and_stays_close) {
    char out[256];
    tmpname(out, sizeof out, "q4km");
    attnd_err err = {{0}};
    cr_assert_eq(quantize_file(MODEL, out, QUANTIZE_Q4_K_M, NULL, NULL, &err), ATTND_OK, "%s", err.msg);
    gguf_file *a, *b;
    cr_assert_eq(gguf_open(&a, MODEL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(gguf_open(&b, out, &err), ATTND_OK, "%s", err.msg);
    expect_same_metadata(a, b);
    uint32_t ft = 0;
    cr_expect_eq(gguf_get_u32(b, "general.file_type", &ft, NULL), ATTND_OK);
    cr_expect_eq(ft, 15, "LLAMA_FTYPE_MOSTLY_Q4_K_M");
    cr_assert_eq(gguf_tensor_count(a), gguf_tensor_count(b));
    int n6 = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(a); i++) {
        const gguf_tensor *ta = gguf_tensor_at(a, i), *tb = gguf_find_tensor(b, ta->name);
        cr_assert(tb, "%s missing", ta->name);
        cr_assert_eq(memcmp(ta->ne, tb->ne, sizeof ta->ne), 0, "%s: shape changed", ta->name);
        if (ta->n_dims == 1) {
            cr_expect_eq(tb->type, ta->type);
            cr_expect_eq(memcmp(ta->data, tb->data, ta->n_bytes), 0, "%s: a norm changed", ta->name);
            continue;
        }
        n6 += tb->type == GGUF_TYPE_Q6_K;
        int64_t nc = (int64_t)ta->ne[0];
        float *ra = malloc(sizeof(float) * (size_t)nc), *rb = malloc(sizeof(float) * (size_t)nc);
        double e = 0, s = 0;
        for (uint64_t r = 0; r < ta->n_elems / ta->ne[0]; r++) {
            quant_dequantize_row(ra, (const uint8_t *)ta->data + r * quant_row_bytes(ta->type, nc), ta->type, nc);
            quant_dequantize_row(rb, (const uint8_t *)tb->data + r * quant_row_bytes(tb->type, nc), tb->type, nc);
            for (int64_t k = 0; k < nc; k++) e += (double)(ra[k] - rb[k]) * (ra[k] - rb[k]), s += (double)ra[k] * ra[k];
        }
        cr_expect_lt(sqrt(e / s), 0.12, "%s (%s): relative RMS error %.4f", ta->name, gguf_type_name(tb->type),
                     sqrt(e / s));
        free(ra);
        free(rb);
    }
    /* tied head (token_embd) + attn_v and ffn_down of layers 2 and 5; ffn_down rows (704) fall
     * back to Q8_0, so: token_embd, blk.2.attn_v, blk.5.attn_v */
    cr_expect_eq(n6, 3, "%d Q6_K tensors", n6);
    gguf_close(a);
    gguf_close(b);
    unlink(out);
}

Test(quantize, bad_inputs_get_clear_errors_and_leave_no_file) {
    char out[256];
    tmpname(out, sizeof out, "bad");
    attnd_err err = {{0}};
    cr_expect_eq(quantize_file("/nonexistent/in.gguf", out, QUANTIZE_Q8_0, NULL, NULL, &err), ATTND_ERR_IO);
    cr_expect(strstr(err.msg, "/nonexistent/in.gguf"), "%s", err.msg);
    cr_expect_eq(quantize_file(ATTND_SOURCE_DIR "/README.md", out, QUANTIZE_Q8_0, NULL, NULL, &err), ATTND_ERR_FORMAT);
    cr_expect_eq(access(out, F_OK), -1, "no output after a failure");
    /* an already-quantized input is refused, naming the tensor and its type */
    char q8[256];
    tmpname(q8, sizeof q8, "q8");
    cr_assert_eq(quantize_file(MODEL, q8, QUANTIZE_Q8_0, NULL, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(quantize_file(q8, out, QUANTIZE_Q4_K, NULL, NULL, &err), ATTND_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "already quantized") && strstr(err.msg, "Q8_0"), "%s", err.msg);
    cr_expect_eq(access(out, F_OK), -1);
    /* an unwritable destination: an I/O error, and no temporary file left behind */
    cr_expect_eq(quantize_file(STORIES, "/nonexistent-dir/out.gguf", QUANTIZE_Q8_0, NULL, NULL, &err), ATTND_ERR_IO);
    cr_expect(strstr(err.msg, "/nonexistent-dir/out.gguf"), "%s", err.msg);
    unlink(q8);
}

Test(quantize, cli_quantizes_and_refuses_unknown_types) {
    char out[256], cmd[1024];
    tmpname(out, sizeof out, "cli");
    snprintf(cmd, sizeof cmd, "'%s' quantize --quiet '%s' '%s' Q8_0 2>/dev/null", ATTND_BINARY, STORIES, out);
    cr_assert_eq(system(cmd), 0);
    gguf_file *f;
    attnd_err err;
    cr_assert_eq(gguf_open(&f, out, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(gguf_find_tensor(f, "blk.0.attn_q.weight")->type, GGUF_TYPE_Q8_0);
    cr_expect_eq(gguf_find_tensor(f, "blk.0.ffn_down.weight")->type, GGUF_TYPE_F16, "172-wide rows fall back");
    gguf_close(f);
    unlink(out);
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' Q7_K 2>&1 | grep -q \"unknown TYPE 'Q7_K'\"", ATTND_BINARY,
             STORIES, out);
    cr_expect_eq(system(cmd), 0, "an unknown type is named in the error");
    cr_expect_eq(access(out, F_OK), -1);
}

/* A Q4_K_M and a Q5_K_M file of the generated 896-wide qwen2 model (tests/make_tiny.c, 2 layers,
 * ffn_down rows 1024): the types per tensor llama.cpp's mix gives it, fallbacks included. */
Test(quantize, k_quant_mixes_of_a_896_wide_file_hold_llama_cpps_types_per_tensor) {
    static const struct {
        const char *file, *tensor;
        uint32_t type;
    } WANT[] = {
        {"qwen896-Q4_K_M.gguf", "token_embd.weight", GGUF_TYPE_Q5_0},
        {"qwen896-Q4_K_M.gguf", "output.weight", GGUF_TYPE_Q8_0},
        {"qwen896-Q4_K_M.gguf", "blk.0.attn_q.weight", GGUF_TYPE_Q5_0},
        {"qwen896-Q4_K_M.gguf", "blk.0.attn_v.weight", GGUF_TYPE_Q5_0},
        {"qwen896-Q4_K_M.gguf", "blk.1.attn_v.weight", GGUF_TYPE_Q8_0}, /* use_more_bits(1, 2) */
        {"qwen896-Q4_K_M.gguf", "blk.0.ffn_down.weight", GGUF_TYPE_Q4_K},
        {"qwen896-Q4_K_M.gguf", "blk.1.ffn_down.weight", GGUF_TYPE_Q6_K},
        {"qwen896-Q4_K_M.gguf", "blk.1.attn_q.bias", GGUF_TYPE_F32},
        {"qwen896-Q5_K_M.gguf", "blk.0.ffn_gate.weight", GGUF_TYPE_Q5_1},
        {"qwen896-Q5_K_M.gguf", "blk.0.ffn_down.weight", GGUF_TYPE_Q5_K},
        {"qwen896-Q5_K_M.gguf", "blk.1.ffn_down.weight", GGUF_TYPE_Q6_K},
        {"qwen896-Q5_K_M.gguf", "blk.1.attn_v.weight", GGUF_TYPE_Q8_0},
        {"qwen896-Q5_K_M.gguf", "output.weight", GGUF_TYPE_Q8_0},
    };
    for (size_t i = 0; i < ATTND_ARRAY_LEN(WANT); i++) {
        char path[1024];
        test_model_path(WANT[i].file, path, sizeof path);
        gguf_file *f;
        attnd_err err;
        cr_assert_eq(gguf_open(&f, path, &err), ATTND_OK, "%s", err.msg);
        const gguf_tensor *t = gguf_find_tensor(f, WANT[i].tensor);
        cr_assert(t, "%s: no %s", WANT[i].file, WANT[i].tensor);
        cr_expect_eq(t->type, WANT[i].type, "%s %s: %s, want %s", WANT[i].file, WANT[i].tensor, gguf_type_name(t->type),
                     gguf_type_name(WANT[i].type));
        gguf_close(f);
    }
}

/* Every tensor of every mix, on the three models, against the type llama.cpp's own quantizer gave
 * it (tests/data/reference-quant-types.json, made by regenerate.sh with llama_model_quantize of
 * the peer): attnd quantize writes the file a llama.cpp user would have. */
static size_t check_types_against(const char *model, const char *mix, json_t *want) {
    char name[128], path[1024];
    snprintf(name, sizeof name, "%.*s-%s.gguf", (int)(strlen(model) - 5), model, mix);
    test_model_path(name, path, sizeof path);
    gguf_file *f;
    attnd_err err;
    cr_assert_eq(gguf_open(&f, path, &err), ATTND_OK, "%s: %s", name, err.msg);
    cr_expect_eq(json_object_size(want), gguf_tensor_count(f), "%s: tensor count", name);
    size_t differ = 0;
    const char *tensor;
    json_t *type;
    json_object_foreach(want, tensor, type) {
        const gguf_tensor *t = gguf_find_tensor(f, tensor);
        cr_assert(t, "%s: no %s", name, tensor);
        bool same = !strcmp(gguf_type_name(t->type), json_string_value(type));
        cr_expect(same, "%s %s: attnd wrote %s, llama.cpp %s", name, tensor, gguf_type_name(t->type),
                  json_string_value(type));
        differ += !same;
    }
    gguf_close(f);
    return differ;
}

/* The IQ1–IQ3 mixes, which llama.cpp makes only with an importance matrix (the reference's case
 * names it: tests/data/attnd-sotu.imatrix.gguf, from `attnd imatrix`): the types attnd quantize
 * would give every tensor of `model` with a matrix, from the same rules and model description
 * quantize_file uses, without encoding (the lattice encoders take seconds per file). */
static size_t check_imatrix_types_against(const char *model, const char *mix, json_t *want) {
    char path[1024];
    test_model_path(model, path, sizeof path);
    quantize_target t;
    cr_assert_eq(quantize_target_parse(mix, &t), ATTND_OK, "%s: not a mix attnd knows", mix);
    gguf_file *f;
    attnd_err err;
    cr_assert_eq(gguf_open(&f, path, &err), ATTND_OK, "%s: %s", model, err.msg);
    cr_expect_eq(json_object_size(want), gguf_tensor_count(f), "%s %s: tensor count", model, mix);
    quantize_model m = quantize_model_of(f, true);
    size_t differ = 0;
    const char *tensor;
    json_t *type;
    json_object_foreach(want, tensor, type) {
        const gguf_tensor *ti = gguf_find_tensor(f, tensor);
        cr_assert(ti, "%s: no %s", model, tensor);
        uint32_t got = quantize_tensor_type_for(t, ti->name, ti->n_dims, ti->ne, ti->type, &m);
        bool same = !strcmp(gguf_type_name(got), json_string_value(type));
        cr_expect(same, "%s %s %s: attnd gives %s, llama.cpp %s", model, mix, tensor, gguf_type_name(got),
                  json_string_value(type));
        differ += !same;
    }
    gguf_close(f);
    return differ;
}

Test(quantize, every_mix_gives_every_tensor_the_type_llama_cpp_s_quantizer_gives) {
    json_error_t je;
    json_t *ref = json_load_file(ATTND_DATA_DIR "/reference-quant-types.json", 0, &je);
    cr_assert(ref, "reference-quant-types.json: %s", je.text);
    json_t *cases = json_object_get(ref, "cases");
    cr_assert_geq(json_array_size(cases), 3 * 14 + 10, "three models, fourteen mixes; ten IQ mixes");
    size_t i, differ = 0, with_imatrix = 0;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *model = json_string_value(json_object_get(c, "model"));
        const char *mix = json_string_value(json_object_get(c, "mix"));
        if (json_object_get(c, "imatrix")) {
            differ += check_imatrix_types_against(model, mix, json_object_get(c, "types"));
            with_imatrix++;
        } else
            differ += check_types_against(model, mix, json_object_get(c, "types"));
    }
    cr_expect_eq(with_imatrix, 10, "IQ1_S ... IQ3_M with an importance matrix");
    cr_expect_eq(differ, 0, "%zu tensors differ", differ);
    json_decref(ref);
}
