/*
 * test_mla_kernels.c — the latent attention's tile kernels (engine/mla_kernels.c): blocks of query
 * rows attend over cached rows tile after tile (scores, online softmax, weighted sums), with
 * causal limits per row, and every instruction set this CPU has gives the float64 attention and
 * the portable kernels' result within float32 error, at the released widths (latent 576, values
 * 512) and at widths that are not whole vectors, for partial tiles and odd numbers of rows; and a
 * row attended alone over only the rows it sees (a decode step) gets the same bits as inside a
 * block whose tiles hold more rows (a prefill): what makes a prompt's logits those of decoding.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine_rig.h"
#include "kv_layout.h"
#include "mla_kernels.h"
#include "quant.h"

enum { MAXM = 24, MAXL = 576, MAXN = 2 * KV_BLOCK + 3 };

static void fill(float *x, size_t n, uint64_t seed, float a) {
    for (size_t i = 0; i < n; i++) x[i] = tiny_uniform(&seed, a);
}

/* out (m, C): row i of q attends over rows 0..vis[i]-1 of rows (n_keys, L) and takes the
 * softmax-weighted sum of their first C values, tile after tile as mla.c does. */
static void run_block(const mla_kernels *k, float *out, const float *const *q, int m, const int *vis,
                      const float *rows, int n_keys, int L, int C, float scale) {
    static float p[MAXM * KV_BLOCK], acc[MAXM * MAXL], run_max[MAXM], run_sum[MAXM], corr[MAXM];
    int lim[MAXM];
    for (int i = 0; i < m; i++) run_max[i] = -INFINITY, run_sum[i] = 0;
    memset(acc, 0, sizeof(float) * (size_t)m * C);
    for (int base = 0; base < n_keys; base += KV_BLOCK) {
        int cnt = n_keys - base < KV_BLOCK ? n_keys - base : KV_BLOCK;
        for (int i = 0; i < m; i++) lim[i] = vis[i] - base < 0 ? 0 : vis[i] - base < cnt ? vis[i] - base : cnt;
        k->scores(p, q, m, rows + (size_t)base * L, cnt, L);
        k->softmax(p, m, lim, scale, run_max, run_sum, corr);
        k->values(acc, p, corr, m, rows + (size_t)base * L, cnt, L, C);
    }
    for (int i = 0; i < m; i++)
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = acc[(size_t)i * C + c] / run_sum[i];
}

/* The same in float64, one row at a time. */
static void ref_block(double *out, const float *const *q, int m, const int *vis, const float *rows, int L, int C,
                      float scale) {
    static double s[MAXN];
    for (int i = 0; i < m; i++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < vis[i]; j++) {
            double d = 0;
            for (int k = 0; k < L; k++) d += (double)q[i][k] * rows[(size_t)j * L + k];
            s[j] = d * scale;
            mx = fmax(mx, s[j]);
        }
        for (int j = 0; j < vis[i]; j++) sum += s[j] = exp(s[j] - mx);
        for (int c = 0; c < C; c++) {
            double a = 0;
            for (int j = 0; j < vis[i]; j++) a += s[j] * rows[(size_t)j * L + c];
            out[(size_t)i * C + c] = a / sum;
        }
    }
}

typedef struct shape {
    int L, C, m, n_keys;
} shape;

/* Every shape: the released widths, widths of a vector and a bit (40, 24) and of less than one
 * (23, 17); one row (decode of one head), 5, 20 (GLM's heads) and 23 (odd tails); one cached row,
 * a partial tile, a whole one, and two tiles and a bit. */
static const shape SHAPES[] = {
    {576, 512, 20, 130}, {576, 512, 23, 64}, {576, 512, 1, 1}, {576, 512, 5, 37},
    {40, 24, 23, 130},   {40, 24, 20, 65},   {23, 17, 5, 130}, {23, 17, 1, 3},
};

/* Rows: prompt-like causal limits (each later group of rows sees more: the tokens of a block,
 * the heads of a token) ending at n_keys, at least 1 each. */
static void limits(int *vis, int m, int n_keys) {
    for (int i = 0; i < m; i++) {
        int v = n_keys - (m - 1 - i) / 4 * 9;
        vis[i] = v < 1 ? 1 : v;
    }
}

static float Q[MAXM * MAXL], ROWS[MAXN * MAXL], OUT[MAXM * MAXL], PORT[MAXM * MAXL], ONE[MAXL];
static double REF[MAXM * MAXL];

/* Largest |a - b| over n outputs (they are weighted averages of values in [-1, 1]). */
static double worst_f(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

/* Each instruction set against float64 and the portable kernels; each row alone against its
 * place in the block, bit for bit. Scores mild (scale 1 / sqrt(192 + 64), as GLM's heads) or
 * sharp (scale 1: most weights far below the max, under the exp floor). */
static void check_shapes(float scale, double tol, uint64_t seed) {
    quant_isa saved = quant_isa_active();
    for (size_t si = 0; si < ATTND_ARRAY_LEN(SHAPES); si++) {
        shape sh = SHAPES[si];
        const float *q[MAXM];
        int vis[MAXM];
        fill(Q, (size_t)sh.m * sh.L, seed + si, 1), fill(ROWS, (size_t)sh.n_keys * sh.L, seed + 100 + si, 1);
        for (int i = 0; i < sh.m; i++) q[i] = Q + (size_t)i * sh.L;
        limits(vis, sh.m, sh.n_keys);
        ref_block(REF, q, sh.m, vis, ROWS, sh.L, sh.C, scale);
        run_block(mla_kernels_for(QUANT_ISA_PORTABLE), PORT, q, sh.m, vis, ROWS, sh.n_keys, sh.L, sh.C, scale);
        for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
            const mla_kernels *k = mla_kernels_for((quant_isa)isa);
            size_t n = (size_t)sh.m * sh.C;
            run_block(k, OUT, q, sh.m, vis, ROWS, sh.n_keys, sh.L, sh.C, scale);
            double e = 0;
            for (size_t i = 0; i < n; i++) e = fmax(e, fabs(OUT[i] - REF[i]));
            cr_expect(e <= tol, "%s, L %d C %d m %d n %d scale %g: %g from float64", quant_isa_name((quant_isa)isa),
                      sh.L, sh.C, sh.m, sh.n_keys, scale, e);
            double ep = worst_f(OUT, PORT, n);
            if (getenv("ATTND_TEST_VERBOSE"))
                fprintf(stderr, "%s L %d C %d m %d n %d scale %g: float64 %g, portable %g\n",
                        quant_isa_name((quant_isa)isa), sh.L, sh.C, sh.m, sh.n_keys, scale, e, ep);
            cr_expect(ep <= tol, "%s, L %d C %d m %d n %d: %g from the portable kernels",
                      quant_isa_name((quant_isa)isa), sh.L, sh.C, sh.m, sh.n_keys, ep);
            for (int i = 0; i < sh.m; i++) { /* decode: the row alone, only the rows it sees exist */
                run_block(k, ONE, &q[i], 1, &vis[i], ROWS, vis[i], sh.L, sh.C, scale);
                cr_expect(memcmp(ONE, OUT + (size_t)i * sh.C, sizeof(float) * (size_t)sh.C) == 0,
                          "%s, L %d C %d m %d n %d: row %d alone differs from its place in the block by %g",
                          quant_isa_name((quant_isa)isa), sh.L, sh.C, sh.m, sh.n_keys, i,
                          worst_f(ONE, OUT + (size_t)i * sh.C, (size_t)sh.C));
            }
        }
    }
    quant_isa_force(saved);
}

/* float32 dot products of up to 576 products of values in [-1, 1] (scores near 1 after the
 * scale), exp within 2 ulp and float32 weighted sums of up to 130 rows: measured at most 1.6e-7
 * from float64 and 1.9e-7 between instruction sets; 5e-6 leaves 25x and stays far under a wrong
 * mask or a missed rescaling (~1e-2). */
Test(mla_kernels, mild_scores_match_float64_and_portable_and_rows_alone) {
    check_shapes(1.0f / 16, 5e-6, 1);
}

/* Scores of size ~8 (scale 1): a score's float32 error is ~1e-6 of it and moves its weight by
 * as much; measured at most 7.7e-6 from float64 (the portable kernels' sequential sums; the vector
 * ones 9e-7) and 7.9e-6 between instruction sets; 5e-5 leaves 6x. */
Test(mla_kernels, sharp_scores_match_float64_and_portable_and_rows_alone) {
    check_shapes(1.0f, 5e-5, 7);
}

/* A row's last tile may hold rows it does not see yet (a prefill's later tokens): they get
 * weight 0, and the rescaling of a later tile that the row sees none of is exactly 1. */
Test(mla_kernels, rows_out_of_view_get_weight_zero_and_keep_the_running_sums) {
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        const mla_kernels *k = mla_kernels_for((quant_isa)isa);
        float p[2 * KV_BLOCK], run_max[2] = {0.5f, -INFINITY}, run_sum[2] = {3, 0}, corr[2];
        int lim[2] = {0, 5};
        for (int j = 0; j < 2 * KV_BLOCK; j++) p[j] = (float)(j % 7) - 3; /* huge scores past lim too */
        p[KV_BLOCK + 10] = 1e30f;
        k->softmax(p, 2, lim, 1.0f, run_max, run_sum, corr);
        cr_expect_eq(corr[0], 1.0f, "%s", quant_isa_name((quant_isa)isa));
        cr_expect_eq(run_sum[0], 3.0f);
        cr_expect_eq(run_max[0], 0.5f);
        for (int j = 0; j < KV_BLOCK; j++) cr_expect_eq(p[j], 0.0f, "row 0 position %d", j);
        cr_expect_eq(run_max[1], 2.0f, "the max of the 5 in view (-2, -1, 0, 1, 2): %g", run_max[1]);
        double s = 0;
        for (int j = 0; j < KV_BLOCK; j++) {
            if (j >= 5) cr_expect_eq(p[KV_BLOCK + j], 0.0f, "row 1 position %d", j);
            s += p[KV_BLOCK + j];
        }
        cr_expect(fabs(s - run_sum[1]) < 1e-6 && fabs(p[KV_BLOCK + 4] - 1.0) < 1e-6, "%s: sum %g, run_sum %g",
                  quant_isa_name((quant_isa)isa), s, run_sum[1]);
    }
}
