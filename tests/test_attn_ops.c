/*
 * test_attn_ops.c — the layout-specific attention loops: the vector version (when this CPU has
 * it) and the portable one agree with a naive float64 computation of tile scores and maxima; the
 * exp-sum of a tile is accurate; whole-model logits do not depend on which versions run.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "attn_ops.h"
#include "engine_fixture.h"
#include "kv_layout.h"
#include "quant.h"

static void fill(float *x, int n, uint64_t seed, float a) {
    for (int i = 0; i < n; i++) x[i] = tiny_uniform(&seed, a);
}

Test(attn_ops, scores_and_max_match_naive_for_full_and_short_tiles) {
    enum { HD = 40 }; /* not a multiple of 16: remainder paths */
    float q[HD], KT[HD * KV_BLOCK];
    fill(q, HD, 1, 1), fill(KT, HD * KV_BLOCK, 2, 1);
    double naive[KV_BLOCK];
    for (int j = 0; j < KV_BLOCK; j++) {
        double d = 0;
        for (int i = 0; i < HD; i++) d += (double)q[i] * KT[i * KV_BLOCK + j];
        naive[j] = d * 0.3;
    }
    const int cnts[] = {1, 7, 8, 31, 33, 37, KV_BLOCK};
    for (int pass = 0; pass < 2; pass++) {
        quant_isa saved = quant_isa_force(pass == 0 ? quant_isa_best() : QUANT_ISA_PORTABLE);
        const char *name = quant_isa_name(quant_isa_active());
        for (size_t c = 0; c < ATTND_ARRAY_LEN(cnts); c++) {
            int cnt = cnts[c];
            float s[KV_BLOCK];
            attn_scores_t(s, q, KT, cnt, HD, 0.3f);
            double want_max = -INFINITY;
            for (int j = 0; j < cnt; j++) {
                cr_assert_lt(fabs(s[j] - naive[j]), 1e-5, "%s cnt %d score %d: %g vs %g", name, cnt, j,
                             s[j], naive[j]);
                want_max = fmax(want_max, s[j]);
            }
            cr_assert_eq(attn_max(s, cnt), (float)want_max, "%s cnt %d: max", name, cnt);
        }
        quant_isa_force(saved);
    }
}

Test(attn_ops, exp_sum_subtracts_the_max_and_sums_accurately) {
    float s[KV_BLOCK];
    double want = 0;
    for (int j = 0; j < KV_BLOCK; j++) {
        s[j] = -0.37f * (float)j + 2.0f;
        want += exp((double)s[j] - 2.0);
    }
    float x9 = s[9];
    float sum = attn_exp_sum(s, KV_BLOCK, 2.0f);
    cr_assert_lt(fabs(sum - want) / want, 1e-6, "sum %g vs %g", sum, want);
    cr_assert_lt(fabs(s[9] - exp((double)x9 - 2.0)), 1e-7);
    cr_assert_eq(s[0], 1.0f, "exp(0) is exactly 1");
}

Test(attn_ops, model_logits_do_not_depend_on_the_instruction_set) {
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
    quant_isa best = quant_isa_best();
    for (int pass = 0; pass < 2; pass++) {
        quant_isa_force(pass == 0 ? best : QUANT_ISA_PORTABLE); /* matmuls and attention loops */
        kv_seq *s;
        cr_assert_eq(kv_seq_create(&s, pool, NULL), ATTND_OK);
        for (int i = 0; i < n; i++) b[i] = (batch_entry){s, tok[i], i, true};
        cr_assert_eq(engine_eval(e, b, n, lg[pass], &err), ATTND_OK, "%s", err.msg);
        kv_seq_destroy(s);
    }
    quant_isa_force(best);
    for (int i = 0; i < n * V; i++) cr_assert_lt(fabsf(lg[0][i] - lg[1][i]), 1e-3f, "logit %d", i);
    free(lg[0]), free(lg[1]);
    kv_pool_destroy(pool);
    engine_destroy(e);
    model_destroy(m);
    unlink(path);
}
