/*
 * test_attn_ops.c — the attention inner loops: the vector version (when this CPU has it) agrees
 * with the portable one on every operation, the vectorised exp is accurate to a few ulp over the
 * range softmax uses, and whole-model logits do not depend on which version runs.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "attn_ops.h"
#include "engine_fixture.h"
#include "kv.h"

static void fill(float *x, int n, uint64_t seed, float a) {
    for (int i = 0; i < n; i++) x[i] = tiny_uniform(&seed, a);
}

static float rel_err(float a, float b) { return fabsf(a - b) / fmaxf(fabsf(b), 1e-30f); }

Test(attn_ops, vector_and_portable_versions_agree) {
    if (!attn_ops_select(true)) {
        attn_ops_select(false);
        cr_skip_test("no AVX2/FMA/F16C on this CPU: only the portable version exists");
    }
    enum { HD = 40, CNT = 37 }; /* odd sizes: remainder paths */
    float q[HD], K[KV_BLOCK * HD], V[KV_BLOCK * HD], KT[HD * KV_BLOCK], p[KV_BLOCK];
    fill(q, HD, 1, 1), fill(K, KV_BLOCK * HD, 2, 1), fill(V, KV_BLOCK * HD, 3, 1), fill(p, KV_BLOCK, 4, 1);
    for (int j = 0; j < KV_BLOCK; j++)
        for (int i = 0; i < HD; i++) KT[i * KV_BLOCK + j] = K[j * HD + i];
    float s_v[KV_BLOCK], s_p[KV_BLOCK], st_v[KV_BLOCK], st_p[KV_BLOCK], a_v[HD] = {0}, a_p[HD] = {0};
    float e_v[KV_BLOCK], e_p[KV_BLOCK];
    uint16_t h_v[HD], h_p[HD];
    float f_v[HD], f_p[HD];
    for (int pass = 0; pass < 2; pass++) {
        bool simd = pass == 0;
        attn_ops_select(simd);
        attn_scores(simd ? s_v : s_p, q, K, HD, CNT, HD, 0.3f);
        attn_scores_t(simd ? st_v : st_p, q, KT, HD, 0.3f);
        attn_accum(simd ? a_v : a_p, p, V, HD, CNT, 32); /* 32 of 40 columns: stride != width */
        float *e = simd ? e_v : e_p;
        for (int j = 0; j < CNT; j++) e[j] = -(float)j * 0.7f;
        float sum = attn_exp_sum(e, CNT, 0.5f);
        e[CNT] = sum;
        attn_f16_store(simd ? h_v : h_p, q, HD);
        attn_f16_row(simd ? f_v : f_p, simd ? h_v : h_p, HD);
    }
    attn_ops_select(true);
    for (int j = 0; j < CNT; j++) cr_assert_lt(rel_err(s_v[j], s_p[j]), 1e-5f, "score %d", j);
    for (int j = 0; j < KV_BLOCK; j++) cr_assert_lt(rel_err(st_v[j], st_p[j]), 1e-5f, "transposed score %d", j);
    for (int j = 0; j < CNT; j++) cr_assert_lt(fabsf(s_v[j] - st_v[j]), 1e-5f, "row and column scores %d", j);
    for (int i = 0; i < 32; i++) cr_assert_lt(fabsf(a_v[i] - a_p[i]), 1e-4f, "accum %d", i);
    for (int i = 32; i < HD; i++) cr_assert_eq(a_v[i], 0.0f, "accum wrote past hd");
    for (int j = 0; j <= CNT; j++) cr_assert_lt(rel_err(e_v[j], e_p[j]), 1e-6f, "exp %d: %g vs %g", j, e_v[j], e_p[j]);
    cr_assert_eq(memcmp(h_v, h_p, sizeof(h_v)), 0, "F16 rounding differs");
    cr_assert_eq(memcmp(f_v, f_p, sizeof(f_v)), 0, "F16 widening differs");
}

Test(attn_ops, vector_exp_is_accurate_over_the_softmax_range) {
    attn_ops_select(true);
    float x[KV_BLOCK];
    float worst = 0;
    for (int k = 0; k < 2000; k++) {
        for (int j = 0; j < KV_BLOCK; j++) x[j] = -87.0f * (float)(k * KV_BLOCK + j) / (2000 * KV_BLOCK);
        float y[KV_BLOCK];
        memcpy(y, x, sizeof(x));
        attn_exp_sum(y, KV_BLOCK, 0.0f);
        for (int j = 0; j < KV_BLOCK; j++) worst = fmaxf(worst, rel_err(y[j], (float)exp((double)x[j])));
    }
    cr_assert_lt(worst, 5e-7f, "worst relative error %g", worst);
}

Test(attn_ops, model_logits_do_not_depend_on_the_version) {
    tiny_spec sp = tiny_default("qwen2");
    char path[256];
    tiny_tmpname(path, sizeof(path), "ops");
    cr_assert_eq(tiny_write(path, &sp), 0);
    model *m;
    engine *e;
    kv_pool *pool;
    attnd_err err;
    cr_assert_eq(model_load(&m, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(&e, m, 100, 1, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_pool_create(&pool, m, (size_t)16 << 20, KV_F16, &err), ATTND_OK, "%s", err.msg);
    int V = sp.n_vocab, n = 100;
    batch_entry b[100];
    float *lg[2] = {malloc(sizeof(float) * n * V), malloc(sizeof(float) * n * V)};
    uint64_t seed = 9;
    int32_t tok[100];
    for (int i = 0; i < n; i++) tok[i] = (int32_t)(tiny_rng(&seed) % (uint64_t)V);
    for (int pass = 0; pass < 2; pass++) {
        attn_ops_select(pass == 0);
        kv_seq *s;
        cr_assert_eq(kv_seq_create(&s, pool, NULL), ATTND_OK);
        for (int i = 0; i < n; i++) b[i] = (batch_entry){s, tok[i], i, true};
        cr_assert_eq(engine_eval(e, b, n, lg[pass], &err), ATTND_OK, "%s", err.msg);
        kv_seq_destroy(s);
    }
    attn_ops_select(true);
    for (int i = 0; i < n * V; i++) cr_assert_lt(fabsf(lg[0][i] - lg[1][i]), 1e-3f, "logit %d", i);
    free(lg[0]), free(lg[1]);
    kv_pool_destroy(pool);
    engine_destroy(e);
    model_destroy(m);
    unlink(path);
}
