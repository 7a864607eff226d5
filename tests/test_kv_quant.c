/*
 * test_kv_quant.c — quantized KV caches (Q8_0, Q4_0): a tile's rows are GGUF's blocks (the
 * project's GGUF dequantizer reads the value rows, and keys hold the same values transposed),
 * within half a quantization step of what was stored; the attention tile step of every
 * instruction set over quantized tiles gives bit for bit what it gives over the same tiles
 * converted to F32 first (AVX2 and AVX-512 read them directly, the portable step converts), and
 * the softmax the portable step gives,
 * for head dims and tile lengths that are not multiples of the vector or block widths; pools
 * count the real bytes and refuse models whose head_dim is not a multiple of 32; non-finite
 * values stay in their block; attention capture reads quantized values.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "attn_ops.h"
#include "attn_tile_fixture.h"
#include "attnd/attn_capture.h"
#include "attnd/gguf.h"
#include "engine_fixture.h"
#include "engine_rig.h"
#include "kv_layout.h"
#include "kv_quant.h"
#include "quant.h"

static const kv_type QTYPES[] = {KV_Q8_0, KV_Q4_0};

/* hd floats of position j: varied magnitudes per block, one block all zero (d = 0) */
static void row_fill(float *x, int hd, uint64_t seed) {
    for (int i = 0; i < hd; i++) x[i] = tiny_uniform(&seed, 1) * (float)(1 + (i / 32) * 3);
    if (hd >= 64) memset(x + 32, 0, sizeof(float) * 32);
}

Test(kv_quant, rows_are_gguf_blocks_within_half_a_step_and_keys_equal_values) {
    enum { HD = 96 };
    static uint8_t kt[KV_BLOCK * HD * 2], vt[KV_BLOCK * HD * 2];
    static float x[KV_BLOCK][HD], kf[HD * KV_BLOCK], vf[KV_BLOCK * HD], g[HD];
    for (size_t ti = 0; ti < ATTND_ARRAY_LEN(QTYPES); ti++) {
        kv_type t = QTYPES[ti];
        memset(kt, 0xAB, sizeof kt), memset(vt, 0xAB, sizeof vt);
        for (int j = 0; j < KV_BLOCK; j++) { /* out of order: the nibble writes must not disturb neighbours */
            int pos = (j * 37) % KV_BLOCK;
            row_fill(x[pos], HD, 1000 + (uint64_t)pos);
            kv_quant_store_k(kt, t, HD, pos, x[pos]);
            kv_quant_store_v(vt, t, HD, pos, x[pos]);
        }
        kv_quant_k_to_f32(kf, kt, t, HD);
        kv_quant_v_to_f32(vf, vt, t, HD, KV_BLOCK);
        size_t rb = kv_quant_row_bytes(t, HD);
        cr_assert_eq(rb, (size_t)HD / 32 * (t == KV_Q8_0 ? 34 : 18));
        for (int j = 0; j < KV_BLOCK; j++) {
            quant_dequantize_row(g, vt + (size_t)j * rb, t == KV_Q8_0 ? GGUF_TYPE_Q8_0 : GGUF_TYPE_Q4_0, HD);
            for (int b = 0; b < HD / 32; b++) {
                float amax = 0;
                for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[j][32 * b + i]));
                /* half a step (Q4_0: a whole one at the end its 16 levels do not reach), plus the
                 * scale's F16 rounding (2^-11 relative) times the largest quant */
                float step = t == KV_Q8_0 ? amax / 127 : amax / 8, bound = step * (t == KV_Q8_0 ? 0.5f + 127.f / 2048 : 1 + 8.f / 2048);
                for (int i = 32 * b; i < 32 * b + 32; i++) {
                    cr_assert_eq(vf[j * HD + i], g[i], "%s pos %d elt %d: not the GGUF block's value", kv_type_name(t), j, i);
                    cr_assert_eq(kf[i * KV_BLOCK + j], vf[j * HD + i], "%s pos %d elt %d: key != value", kv_type_name(t), j, i);
                    cr_assert_leq(fabsf(vf[j * HD + i] - x[j][i]), bound * 1.001f,
                                  "%s pos %d elt %d: %g stored as %g", kv_type_name(t), j, i, x[j][i], vf[j * HD + i]);
                }
            }
        }
    }
}

/* One tile's operands as a quantized cache holds them, a running state from earlier tiles, and
 * the same tiles converted to F32. */
typedef struct q_case {
    kv_type type;
    int hd, cnt, cnt0, group, R;
    uint8_t KQ[KV_BLOCK * 128 * 2], VQ[KV_BLOCK * 128 * 2];
    float kt[128 * KV_BLOCK], v[KV_BLOCK * 128];
    float q[16 * 128], acc[16 * 128], run_max[16], run_sum[16];
} q_case;

static void q_case_fill(q_case *c, uint64_t seed) {
    float x[128];
    memset(c->KQ, 0, sizeof c->KQ), memset(c->VQ, 0x77, sizeof c->VQ); /* past cnt: garbage values no step may use */
    for (int j = 0; j < KV_BLOCK; j++) {
        row_fill(x, c->hd, seed * 131 + (uint64_t)j);
        kv_quant_store_k(c->KQ, c->type, c->hd, j, x);
        if (j < c->cnt) kv_quant_store_v(c->VQ, c->type, c->hd, j, x);
    }
    kv_quant_k_to_f32(c->kt, c->KQ, c->type, c->hd);
    kv_quant_v_to_f32(c->v, c->VQ, c->type, c->hd, c->cnt);
    for (int i = 0; i < c->R * c->hd; i++) c->q[i] = tiny_uniform(&seed, 0.5f), c->acc[i] = tiny_uniform(&seed, 1);
    tile_fixture_running(c->run_max, c->run_sum, c->acc, c->R, c->hd);
}

/* attn_tile_step of the active instruction set on c's state into out (acc, max, sum per row), over
 * the quantized tiles (scratch NULL when the step must not need it) or the F32 conversion. */
static void q_case_step(const q_case *c, float *out, bool f32, bool scratch) {
    static float p[16 * KV_BLOCK];
    tile_fixture_shape sh = {.R = c->R, .hd = c->hd, .cnt = c->cnt, .cnt0 = c->cnt0, .group = c->group};
    attn_tile t = tile_fixture_begin(out, p, c->q, c->acc, c->run_max, c->run_sum, sh);
    if (f32) {
        t.KT = c->kt, t.V = c->v;
    } else {
        t.KQ = c->KQ, t.VQ = c->VQ, t.kvq = (int)c->type;
        tile_fixture_scratch(&t, scratch);
    }
    attn_tile_step(&t);
}

/* Every instruction set on c: quantized tiles give what their F32 conversion gives, bit for bit,
 * and the softmax output of the portable step within 2e-5 (relative; values reach 10); returns 1 if a
 * vector step (AVX2, AVX-512) read them directly. */
static int q_case_check(const q_case *c) {
    static float want[16 * 128 + 32], got[16 * 128 + 32], ref[16 * 128 + 32];
    size_t n = (size_t)c->R * (c->hd + 2);
    int direct_runs = 0;
    quant_isa_force(QUANT_ISA_PORTABLE);
    q_case_step(c, ref, true, true);
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        bool direct = isa >= QUANT_ISA_AVX2 && quant_isa_active() >= QUANT_ISA_AVX2; /* handed no scratch */
        direct_runs |= direct;
        q_case_step(c, want, true, true);
        q_case_step(c, got, false, !direct);
        const char *name = quant_isa_name(quant_isa_active());
        cr_assert_eq(memcmp(got, want, sizeof(float) * n), 0, "%s %s hd %d cnt %d group %d R %d: differs from F32 tiles",
                     name, kv_type_name(c->type), c->hd, c->cnt, c->group, c->R);
        for (int r = 0; r < c->R; r++)
            for (int i = 0; i < c->hd; i++) {
                float a = got[r * c->hd + i] / got[c->R * c->hd + c->R + r];
                float b = ref[r * c->hd + i] / ref[c->R * c->hd + c->R + r];
                cr_assert_lt(fabsf(a - b), 2e-5f * fmaxf(1, fabsf(b)), "%s %s hd %d cnt %d R %d row %d col %d: %g vs %g",
                             name, kv_type_name(c->type), c->hd, c->cnt, c->R, r, i, a, b);
            }
    }
    return direct_runs;
}

Test(kv_quant, tile_step_over_quantized_tiles_equals_the_step_over_their_f32_conversion) {
    static q_case c;
    const int hds[] = {64, 32, 96, 128}, cnts[] = {1, 15, 16, 17, 31, 33, 63, 64};
    const struct { int group, R, prefill; } shapes[] = {{8, 8, 0}, {8, 16, 1}, {1, 5, 1}, {3, 9, 0}, {5, 15, 1}};
    quant_isa saved = quant_isa_active();
    int n_direct = 0;
    for (size_t ti = 0; ti < ATTND_ARRAY_LEN(QTYPES); ti++)
        for (size_t h = 0; h < ATTND_ARRAY_LEN(hds); h++)
            for (size_t k = 0; k < ATTND_ARRAY_LEN(cnts); k++)
                for (size_t sh = 0; sh < ATTND_ARRAY_LEN(shapes); sh++) {
                    c.type = QTYPES[ti], c.hd = hds[h], c.cnt = cnts[k], c.group = shapes[sh].group, c.R = shapes[sh].R;
                    int nq = c.R / c.group;
                    c.cnt0 = shapes[sh].prefill && c.cnt > nq ? c.cnt - nq + 1 : c.cnt;
                    q_case_fill(&c, 1000 * ti + 100 * h + 10 * k + sh);
                    n_direct += q_case_check(&c);
                }
    quant_isa_force(saved);
    cr_assert_eq(n_direct > 0, quant_isa_best() >= QUANT_ISA_AVX2, "the direct paths ran where the CPU has them");
}

Test(kv_quant, pools_count_real_bytes_and_refuse_head_dims_off_the_block) {
    tiny_spec sp = tiny_default("llama"); /* head_dim 8 */
    tiny_rig r;
    tiny_rig_open(&r, &sp, KV_F16, 4);
    kv_pool *p = NULL;
    attnd_err err;
    cr_assert_eq(kv_pool_create(&p, r.m, (size_t)16 << 20, KV_Q8_0, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "multiple of 32"), "%s", err.msg);
    cr_assert_not_null(kv_type_unsupported(r.m, KV_Q4_0));
    cr_assert_null(kv_type_unsupported(r.m, KV_F16));
    tiny_rig_close(&r);

    sp.n_embd = 128, sp.n_head = 2, sp.n_head_kv = 1; /* head_dim 64 */
    tiny_rig_open(&r, &sp, KV_F16, 4);
    size_t f16 = kv_bytes_per_token(r.m, KV_F16);
    cr_assert_eq(f16, (size_t)2 * sp.n_layer * 64 * 2);
    cr_assert_eq(kv_bytes_per_token(r.m, KV_Q8_0), f16 * 34 / 64);
    cr_assert_eq(kv_bytes_per_token(r.m, KV_Q4_0), f16 * 18 / 64);
    for (size_t ti = 0; ti < ATTND_ARRAY_LEN(QTYPES); ti++) {
        cr_assert_eq(kv_pool_create(&p, r.m, (size_t)16 << 20, QTYPES[ti], &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(kv_pool_bytes_per_token(p), kv_bytes_per_token(r.m, QTYPES[ti]));
        cr_assert_eq(kv_pool_bytes_for(p, 1), KV_BLOCK * kv_bytes_per_token(r.m, QTYPES[ti]));
        kv_seq *s;
        cr_assert_eq(kv_seq_create(&s, p, &err), ATTND_OK);
        kv_seq *seqs[] = {s};
        s->pending = KV_BLOCK + 1;
        cr_assert_eq(kv_reserve(seqs, 1, &err), ATTND_OK, "%s", err.msg);
        s->pending = 0;
        cr_assert_eq(kv_pool_bytes_used(p), 2 * kv_pool_bytes_for(p, 1));
        kv_seq_destroy(s);
        kv_pool_destroy(p);
    }
    kv_type t;
    cr_assert_eq(kv_type_parse("Q8_0", &t), ATTND_OK);
    cr_assert_eq(t, KV_Q8_0);
    cr_assert_eq(kv_type_parse("q5_0", &t), ATTND_ERR_INVALID);
    cr_assert_str_eq(kv_type_name(KV_Q4_0), "q4_0");
    tiny_rig_close(&r);
}

/* An inf or NaN in a key or value (a diverging model) makes its block's scale infinite and its
 * quants defined values (Q8_0: 0; Q4_0: 8, NaN ones 0; no out-of-range float-to-int cast, which
 * UBSan would flag), and leaves the other blocks of the row as they would be. */
Test(kv_quant, a_non_finite_value_spoils_only_its_own_block) {
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = 0.25f * (float)(i - 30);
    x[3] = INFINITY, x[9] = NAN;
    static uint8_t kt[KV_BLOCK * 64 * 2], vt[KV_BLOCK * 64 * 2];
    float out[64];
    for (size_t ti = 0; ti < ATTND_ARRAY_LEN(QTYPES); ti++) {
        kv_type t = QTYPES[ti];
        kv_quant_store_k(kt, t, 64, 5, x);
        kv_quant_store_v(vt, t, 64, 0, x);
        for (int i = 0; i < 32; i++) {
            int want = t == KV_Q8_0 ? 0 : i == 3 || i == 9 ? 0 : 8;
            int got = t == KV_Q8_0 ? (int8_t)vt[2 + i] : i < 16 ? vt[2 + i] & 0xF : vt[2 + i - 16] >> 4;
            cr_assert_eq(got, want, "%s quant %d: %d", kv_type_name(t), i, got);
        }
        kv_quant_v_to_f32(out, vt, t, 64, 1);
        float step = t == KV_Q8_0 ? 8.25f / 127 : 8.25f / 8;
        for (int i = 32; i < 64; i++)
            cr_assert_leq(fabsf(out[i] - x[i]), step * (t == KV_Q8_0 ? 0.57f : 1.01f), "%s elt %d", kv_type_name(t), i);
    }
}

/* Norm-weighted attention capture of N prefilled tokens (head_dim 32, heads 3 and 1) with a
 * kv-typed cache: rows into w (n_layer, 2, N, N), zero past each row's end. */
static void captured_norm_rows(float *w, kv_type kv, int N) {
    tiny_spec sp = tiny_default("qwen2");
    sp.head_dim = 32, sp.rope_dims = 32, sp.n_layer = 2;
    tiny_rig r;
    tiny_rig_open(&r, &sp, kv, 32);
    int32_t tok[128];
    tiny_random_tokens(tok, N, sp.n_vocab, 5);
    int heads[] = {3, 1};
    attn_capture_params p = {.heads = heads, .n_heads = 2, .n_positions = N, .weights = ATTN_WEIGHTS_NORM};
    attn_capture *c;
    attnd_err err;
    cr_assert_eq(attn_capture_create(&c, r.m, &p, &err), ATTND_OK, "%s", err.msg);
    kv_seq *s = tiny_rig_seq(&r);
    attn_capture_bind(c, s);
    attn_hook h;
    attn_hook_install(&h, r.e, c, NULL, 0);
    batch_entry b[32];
    for (int done = 0; done < N; done += 32) {
        int n = N - done < 32 ? N - done : 32;
        for (int i = 0; i < n; i++) b[i] = (batch_entry){s, tok[done + i], done + i, false};
        cr_assert_eq(engine_eval(r.e, b, n, NULL, &err), ATTND_OK, "%s", err.msg);
    }
    attn_hook_remove(&h);
    memset(w, 0, sizeof(float) * (size_t)sp.n_layer * 2 * N * N);
    for (int li = 0; li < sp.n_layer; li++)
        for (int hi = 0; hi < 2; hi++)
            for (int q = 0; q < N; q++) {
                const float *row;
                cr_assert_eq(attn_capture_row(c, li, hi, q, &row, NULL), q + 1);
                memcpy(w + (((size_t)li * 2 + hi) * N + q) * N, row, sizeof(float) * (size_t)(q + 1));
            }
    attn_capture_destroy(c);
    tiny_rig_close(&r);
}

/* attn_capture's norm weights read the cached values: from a Q8_0 cache they are the F32
 * cache's up to the quantization (measured 4.8e-3 at most), and rows still sum to 1. */
Test(kv_quant, norm_weighted_capture_reads_quantized_values) {
    enum { N = 90 };
    static float f32[2 * 2 * N * N], q8[2 * 2 * N * N];
    captured_norm_rows(f32, KV_F32, N);
    captured_norm_rows(q8, KV_Q8_0, N);
    float worst = 0;
    for (int r = 0; r < 2 * 2 * N; r++) {
        double sum = 0;
        for (int j = 0; j < N; j++) {
            sum += q8[(size_t)r * N + j];
            worst = fmaxf(worst, fabsf(q8[(size_t)r * N + j] - f32[(size_t)r * N + j]));
        }
        cr_assert(fabs(sum - 1) < 1e-5, "row %d sums to %.8f", r, sum);
    }
    cr_assert(worst < 1e-2f, "q8_0 norm weights differ from f32 ones by %g", worst);
}
