/*
 * test_attn_ops.c — the layout-specific attention loops: the vector version (when this CPU has
 * it) and the portable one agree with a naive float64 computation of tile scores and maxima; the
 * exp-sum of a tile is accurate; the grouped tile step of every instruction set gives the float64
 * softmax, tile edges and causal masks included, and F16 tiles (read directly by AVX-512) give
 * bit for bit what the same tiles converted to F32 give; whole-model logits do not depend on
 * which versions run.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "attn_ops.h"
#include "attn_tile_fixture.h"
#include "engine_rig.h"
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

/*
 * Runs attention of nq consecutive queries at positions pos0.. (group query heads each, sharing
 * one kv head) over keys/values 0..pos0+nq-1 tile by tile through attn_tile_step, as the engine
 * does, and checks each output row against a float64 softmax. K is (n, hd), V (n, hd). window > 0:
 * each query sees only its last `window` positions; cap > 0: scores soft-capped (cap tanh(s/cap)).
 */
static void check_grouped_wc(const float *q, const float *K, const float *V, int hd, int group, int nq, int pos0,
                             double tol, const char *what, int window, float cap) {
    int R = nq * group, n_keys_max = pos0 + nq;
    float *acc = calloc((size_t)R * hd, sizeof(float)), *p = malloc(sizeof(float) * (size_t)R * KV_BLOCK);
    float *mx = malloc(sizeof(float) * (size_t)R), *sum = calloc((size_t)R, sizeof(float));
    float *KT = malloc(sizeof(float) * (size_t)hd * KV_BLOCK);
    for (int r = 0; r < R; r++) mx[r] = -INFINITY;
    float scale = 1.0f / sqrtf((float)hd);
    for (int base = 0; base < n_keys_max; base += KV_BLOCK) {
        int cnt = n_keys_max - base < KV_BLOCK ? n_keys_max - base : KV_BLOCK;
        for (int i = 0; i < hd; i++) /* columns past cnt hold garbage-like values: never used */
            for (int j = 0; j < KV_BLOCK; j++) KT[i * KV_BLOCK + j] = j < cnt ? K[(size_t)(base + j) * hd + i] : 1e30f;
        int qi0 = base > pos0 ? base - pos0 : 0;
        attn_tile t = {.acc = acc + (size_t)qi0 * group * hd, .run_max = mx + qi0 * group, .run_sum = sum + qi0 * group,
                       .p = p, .q = q + (size_t)qi0 * group * hd, .KT = KT, .V = V + (size_t)base * hd,
                       .R = (nq - qi0) * group, .hd = hd, .cnt = cnt, .group = group, .v_stride = hd, .scale = scale,
                       .softcap = cap, .window = window, .qrel0 = pos0 + qi0 - base};
        t.cnt0 = pos0 + qi0 + 1 - base < cnt ? pos0 + qi0 + 1 - base : cnt;
        attn_tile_step(&t);
    }
    double *w = malloc(sizeof(double) * (size_t)n_keys_max);
    for (int r = 0; r < R; r++) {
        int n_keys = pos0 + r / group + 1, j0 = window && n_keys > window ? n_keys - window : 0;
        double m = -INFINITY, z = 0;
        for (int j = j0; j < n_keys; j++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[(size_t)r * hd + i] * K[(size_t)j * hd + i];
            w[j] = d * scale;
            if (cap > 0) w[j] = cap * tanh(w[j] / cap);
            m = fmax(m, w[j]);
        }
        for (int j = j0; j < n_keys; j++) z += w[j] = exp(w[j] - m);
        for (int i = 0; i < hd; i++) {
            double want = 0;
            for (int j = j0; j < n_keys; j++) want += w[j] / z * V[(size_t)j * hd + i];
            float got = acc[(size_t)r * hd + i] / sum[r];
            cr_assert_lt(fabs(got - want), tol, "%s %s hd %d group %d nq %d pos0 %d row %d col %d: %g vs %g",
                         what, quant_isa_name(quant_isa_active()), hd, group, nq, pos0, r, i, got, want);
        }
    }
    free(acc), free(p), free(mx), free(sum), free(KT), free(w);
}

static void check_grouped(const float *q, const float *K, const float *V, int hd, int group, int nq, int pos0,
                          double tol, const char *what) {
    check_grouped_wc(q, K, V, hd, group, nq, pos0, tol, what, 0, 0);
}

/* A grouped step case: group query heads share a KV head, nq query positions from pos0 on, a
 * sliding window (0: none) and a soft-cap (0: none). */
typedef struct grouped_case {
    int group, nq, pos0, window;
    float cap;
} grouped_case;

enum { GROUPED_MAXN = 3 * KV_BLOCK + 40, GROUPED_MAXR = 40 * 8, GROUPED_MAXHD = 128 };

/* Operands as large as the largest case needs; check fills and checks them for case c (index ci,
 * for seeds) at head dimension hd. */
typedef struct grouped_operands {
    float q[GROUPED_MAXR * GROUPED_MAXHD], K[GROUPED_MAXN * GROUPED_MAXHD], V[GROUPED_MAXN * GROUPED_MAXHD];
} grouped_operands;
typedef void grouped_check(grouped_operands *o, const grouped_case *c, int ci, int hd);

/* Runs check on every case at every head dimension, with every instruction set this CPU has. */
static void each_isa_head_dim_and_case(const grouped_case *cases, size_t n_cases, grouped_check *check) {
    static grouped_operands o;
    const int hds[] = {16, 40, 64, 128}; /* 40: not whole 16-float vectors */
    quant_isa saved = quant_isa_active();
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        for (size_t h = 0; h < ATTND_ARRAY_LEN(hds); h++)
            for (size_t c = 0; c < n_cases; c++) {
                cr_assert(cases[c].pos0 + cases[c].nq <= GROUPED_MAXN && cases[c].nq * cases[c].group <= GROUPED_MAXR);
                check(&o, &cases[c], (int)c, hds[h]);
            }
    }
    quant_isa_force(saved);
}

static void check_mild_and_sharp(grouped_operands *o, const grouped_case *c, int ci, int hd) {
    int n = c->pos0 + c->nq, rows = c->nq * c->group;
    /* keys growing with position: the running max rises tile after tile (rescaling) */
    fill(o->q, rows * hd, 11 + ci, 1), fill(o->V, n * hd, 13 + ci, 1);
    fill(o->K, n * hd, 12 + ci, 1);
    for (int j = 0; j < n; j++) o->K[(size_t)j * hd] += 0.02f * (float)j;
    check_grouped(o->q, o->K, o->V, hd, c->group, c->nq, c->pos0, 2e-6, "mild");
    /* sharp scores: most weights far below the max (the exp floor), some rows one-hot */
    fill(o->q, rows * hd, 21 + ci, 40), fill(o->K, n * hd, 22 + ci, 4);
    /* scores near +-50 carry float32 rounding of ~5e-5, which the weights inherit */
    check_grouped(o->q, o->K, o->V, hd, c->group, c->nq, c->pos0, 2e-4, "sharp");
}

Test(attn_ops, grouped_tile_step_matches_float64_softmax_for_every_isa) {
    const grouped_case cases[] = { /* no window, no cap */
        /* decode */
        {8, 1, 0, 0, 0}, {8, 1, 63, 0, 0}, {8, 1, 64, 0, 0}, {8, 1, 150, 0, 0}, {8, 1, 3 * KV_BLOCK + 39, 0, 0},
        /* prefill */
        {8, 16, 0, 0, 0}, {8, 16, 56, 0, 0}, {8, 5, 100, 0, 0}, {4, 9, 30, 0, 0}, {1, 33, 0, 0, 0}, {1, 33, 47, 0, 0},
        {1, 2, 129, 0, 0},
    };
    each_isa_head_dim_and_case(cases, ATTND_ARRAY_LEN(cases), check_mild_and_sharp);
}

static void check_window_and_cap(grouped_operands *o, const grouped_case *c, int ci, int hd) {
    int n = c->pos0 + c->nq;
    fill(o->q, c->nq * c->group * hd, 31 + ci, 3), fill(o->K, n * hd, 32 + ci, 1), fill(o->V, n * hd, 33 + ci, 1);
    check_grouped_wc(o->q, o->K, o->V, hd, c->group, c->nq, c->pos0, 2e-5, "window/cap", c->window, c->cap);
}

/* Sliding windows (rows that see part of a tile, all of it, or none) and soft-capping (which the
 * AVX-512 step hands to the AVX2 one), every instruction set. */
Test(attn_ops, window_and_softcap_match_float64_softmax_for_every_isa) {
    const grouped_case cases[] = {
        {8, 1, 150, 70, 0}, {8, 1, 150, 1, 0}, {8, 16, 56, 40, 0}, {4, 9, 100, 20, 0}, {1, 33, 47, 5, 0},
        {1, 33, 100, 64, 0}, {8, 1, 150, 0, 5.0f}, {4, 9, 100, 20, 3.0f}, {2, 16, 60, 200, 1.0f},
    };
    each_isa_head_dim_and_case(cases, ATTND_ARRAY_LEN(cases), check_window_and_cap);
}

/* One tile's operands as an F16 cache holds them, and a running state from earlier tiles. */
typedef struct f16_case {
    int hd, cnt, cnt0, group, R;
    uint16_t KT16[128 * KV_BLOCK], V16[KV_BLOCK * 128];
    float q[16 * 128], acc[16 * 128], run_max[16], run_sum[16];
} f16_case;

static void f16_case_fill(f16_case *c, uint64_t seed) {
    float x;
    for (int i = 0; i < c->hd * KV_BLOCK; i++) { /* past cnt: NaN, which no step may read */
        x = tiny_uniform(&seed, 2);
        c->KT16[i] = i % KV_BLOCK < c->cnt ? quant_f32_to_f16(x) : 0x7E00;
        x = tiny_uniform(&seed, 1);
        c->V16[i] = i / c->hd < c->cnt ? quant_f32_to_f16(x) : 0x7E00;
    }
    fill(c->q, c->R * c->hd, seed + 1, 1);
    fill(c->acc, c->R * c->hd, seed + 2, 1);
    tile_fixture_running(c->run_max, c->run_sum, c->acc, c->R, c->hd);
}

/* Runs attn_tile_step of the active instruction set on c's state, out (acc, then max, then sum per
 * row), over the F16 tiles as they are (kt_buf and v_buf NULL when the step must not need them),
 * or over them converted to F32 first (f32). */
static void f16_case_step(const f16_case *c, float *out, bool f32, bool scratch) {
    static float kt[128 * KV_BLOCK], v[KV_BLOCK * 128], p[16 * KV_BLOCK];
    tile_fixture_shape sh = {.R = c->R, .hd = c->hd, .cnt = c->cnt, .cnt0 = c->cnt0, .group = c->group};
    attn_tile t = tile_fixture_begin(out, p, c->q, c->acc, c->run_max, c->run_sum, sh);
    if (f32) {
        for (int i = 0; i < c->hd * KV_BLOCK; i++) {
            kt[i] = quant_f16_to_f32(c->KT16[i]);
            v[i] = quant_f16_to_f32(c->V16[i]);
        }
        t.KT = kt, t.V = v;
    } else {
        t.KT16 = c->KT16, t.V16 = c->V16;
        tile_fixture_scratch(&t, scratch);
    }
    attn_tile_step(&t);
}

Test(attn_ops, f16_tiles_give_the_step_of_tiles_converted_to_f32_first) {
    static f16_case c;
    static float want[16 * 128 + 32], got[16 * 128 + 32], ref[16 * 128 + 32];
    const int hds[] = {64, 128, 40}, cnts[] = {1, 15, 16, 17, 63, 64}; /* 40: AVX-512 hands over to AVX2 */
    const struct { int group, R, prefill; } shapes[] = {
        {8, 8, 0}, {8, 16, 1}, {1, 5, 1}, {3, 9, 0}, {2, 6, 1}, {5, 15, 1}, {1, 7, 0}, /* R % 4 != 0 mostly */
    };
    quant_isa saved = quant_isa_active();
    int n_direct = 0;
    for (size_t h = 0; h < ATTND_ARRAY_LEN(hds); h++)
        for (size_t k = 0; k < ATTND_ARRAY_LEN(cnts); k++)
            for (size_t sh = 0; sh < ATTND_ARRAY_LEN(shapes); sh++) {
                c.hd = hds[h], c.cnt = cnts[k], c.group = shapes[sh].group, c.R = shapes[sh].R;
                int nq = c.R / c.group; /* a prefill's last query sees all cnt, its first cnt - nq + 1 */
                c.cnt0 = shapes[sh].prefill && c.cnt > nq ? c.cnt - nq + 1 : c.cnt;
                f16_case_fill(&c, 100 * h + 10 * k + sh);
                size_t n = (size_t)c.R * (c.hd + 2);
                quant_isa_force(QUANT_ISA_PORTABLE);
                f16_case_step(&c, ref, true, true);
                for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
                    quant_isa_force((quant_isa)isa);
                    /* AVX-512 reads F16 tiles directly: it is handed no scratch to convert them into */
                    bool direct = isa == QUANT_ISA_AVX512 && c.hd % 16 == 0;
                    n_direct += direct;
                    f16_case_step(&c, want, true, true);
                    f16_case_step(&c, got, false, !direct);
                    cr_assert_eq(memcmp(got, want, sizeof(float) * n), 0,
                                 "%s hd %d cnt %d group %d R %d: F16 tiles differ from F32 ones",
                                 quant_isa_name((quant_isa)isa), c.hd, c.cnt, c.group, c.R);
                    for (int r = 0; r < c.R; r++) /* the softmax output agrees with the portable one's */
                        for (int i = 0; i < c.hd; i++) {
                            float a = got[r * c.hd + i] / got[c.R * c.hd + c.R + r];
                            float b = ref[r * c.hd + i] / ref[c.R * c.hd + c.R + r];
                            cr_assert_lt(fabsf(a - b), 2e-6f, "%s hd %d cnt %d group %d R %d row %d col %d: %g vs %g",
                                         quant_isa_name((quant_isa)isa), c.hd, c.cnt, c.group, c.R, r, i, a, b);
                        }
                }
            }
    quant_isa_force(saved);
    cr_assert_eq(n_direct > 0, quant_isa_best() >= QUANT_ISA_AVX512, "the direct F16 path ran where the CPU has it");
}

Test(attn_ops, model_logits_do_not_depend_on_the_instruction_set) {
    tiny_spec sp = tiny_default("qwen2");
    tiny_rig r;
    tiny_rig_open_with(&r, &sp, KV_F16, 100, 1, 16);
    attnd_err err;
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
        cr_assert_eq(kv_seq_create(&s, r.pool, NULL), ATTND_OK);
        for (int i = 0; i < n; i++) b[i] = (batch_entry){s, tok[i], i, true};
        cr_assert_eq(engine_eval(r.e, b, n, lg[pass], &err), ATTND_OK, "%s", err.msg);
        kv_seq_destroy(s);
    }
    quant_isa_force(best);
    for (int i = 0; i < n * V; i++) cr_assert_lt(fabsf(lg[0][i] - lg[1][i]), 1e-3f, "logit %d", i);
    free(lg[0]), free(lg[1]);
    tiny_rig_close(&r);
}
