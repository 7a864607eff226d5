/*
 * quant_ref.c — the portable C kernels (the reference every instruction set is tested against),
 * the activation preparations and the portable vector primitives, gathered in the portable
 * table, quant_kernels_portable. Instruction-set specific kernels live in x86/ and amx/;
 * quant_dispatch.c picks among the tables at run time, so one binary runs on any x86-64.
 *
 * Arithmetic follows llama.cpp's CPU backend, so that the engine agrees with it token for token
 * as far as possible: activations are rounded to what the weight type's dot product consumes
 * (its activation form, quant_types.h) and the quantized dot products are exact integer sums
 * scaled once per block. Every instruction set computes the same integers; only the order in
 * which the per-block float terms are summed differs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/common.h"
#include "quant.h"
#include "quant_impl.h"
#include "quant_iq.h"
#include "quant_types.h"

/* Round to nearest, ties to even, for |f| < 2^22, without a libm call (the magic-number trick). */
static inline int32_t round_nearest(float f) {
    float v = f + 12582912.f; /* 1.5 * 2^23 */
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007FFFFF) - 0x00400000;
}

// ---- activation preparation --------------------------------------------------------------------

/* Q8_0 form: per 32 values d = amax/127 (kept at f16 precision, as llama.cpp stores it) and
 * q = round(x * 127/amax). */
static void act_q8_0(float *d, int8_t *q, const float *x, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0, q += QK8_0) {
        float amax = 0.f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        float id = amax != 0.f ? 127.f / amax : 0.f;
        d[b] = quant_f16_to_f32(quant_f32_to_f16(amax / 127.f));
        for (int j = 0; j < QK8_0; j++) q[j] = (int8_t)round_nearest(x[j] * id);
    }
}

/* Q8_K form: per 256 values the scale maps the value of largest magnitude to -127 (as ggml's
 * quantize_row_q8_K does), d is an f32, and bsums hold sums of each 16 consecutive q (they let
 * Q4_K apply its per-sub-block minimums without touching the values again). */
static void act_q8_k(float *d, int8_t *q, int16_t *bsums, const float *x, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K, q += QK_K, bsums += QK_K / 16) {
        float amax = 0.f, max = 0.f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.f) {
            d[b] = 0.f;
            memset(q, 0, QK_K);
            memset(bsums, 0, QK_K / 16 * sizeof(int16_t));
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int32_t v = round_nearest(iscale * x[j]);
            q[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += q[16 * g + j];
            bsums[g] = (int16_t)s;
        }
        d[b] = 1.f / iscale;
    }
}

static void act_f16(float *xr, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) xr[i] = quant_f16_to_f32(quant_f32_to_f16(x[i]));
}

void quant_act_bf16(float *xr, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) xr[i] = quant_bf16_to_f32(quant_f32_to_bf16(x[i]));
}

// ---- portable kernels --------------------------------------------------------------------------

static float dot_f32(const float *w, const float *x, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += w[i + k] * x[i + k];
    for (; i < n; i++) acc[0] += w[i] * x[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* always inlined, so each call site gets a loop specialised for its constant `bf16` */
static inline __attribute__((always_inline)) float dot_f16(const uint8_t *w, const float *x, int64_t n, const int bf16) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float wv[8];
        for (int k = 0; k < 8; k++) {
            uint16_t h = quant_ld16(w + 2 * (i + k));
            wv[k] = bf16 ? quant_bf16_to_f32(h) : quant_f16_to_f32(h);
        }
        for (int k = 0; k < 8; k++) acc[k] += wv[k] * x[i + k];
    }
    for (; i < n; i++) {
        uint16_t h = quant_ld16(w + 2 * i);
        acc[0] += (bf16 ? quant_bf16_to_f32(h) : quant_f16_to_f32(h)) * x[i];
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static float dot_q8_0(const uint8_t *w, const float *xd, const int8_t *xq, int64_t nb) {
    float sum = 0.f;
    for (int64_t b = 0; b < nb; b++, w += Q8_0_BYTES, xq += QK8_0) {
        const int8_t *q = (const int8_t *)(w + 2);
        int32_t s = 0;
        for (int j = 0; j < QK8_0; j++) s += q[j] * xq[j];
        sum += (float)s * (quant_f16_to_f32(quant_ld16(w)) * xd[b]);
    }
    return sum;
}

static float dot_q4_0(const uint8_t *w, const float *xd, const int8_t *xq, int64_t nb) {
    float sum = 0.f;
    for (int64_t b = 0; b < nb; b++, w += Q4_0_BYTES, xq += QK4_0) {
        const uint8_t *q = w + 2;
        int32_t s = 0;
        for (int j = 0; j < QK4_0 / 2; j++) s += ((q[j] & 0xF) - 8) * xq[j] + ((q[j] >> 4) - 8) * xq[j + QK4_0 / 2];
        sum += (float)s * (quant_f16_to_f32(quant_ld16(w)) * xd[b]);
    }
    return sum;
}

static float dot_q4_k(const uint8_t *w, const float *xd, const int8_t *xq, const int16_t *bsums, int64_t nb) {
    float sum = 0.f;
    for (int64_t b = 0; b < nb; b++, w += Q4_K_BYTES, xq += QK_K, bsums += QK_K / 16) {
        uint8_t sc[8], mn[8];
        quant_q4k_scales(w + 4, sc, mn);
        int32_t summins = 0;
        for (int j = 0; j < 8; j++) summins += mn[j] * (bsums[2 * j] + bsums[2 * j + 1]);
        const uint8_t *q = w + 16;
        const int8_t *y = xq;
        int32_t sumi = 0;
        for (int j = 0; j < 4; j++, q += 32, y += 64) {
            int32_t s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                s1 += (q[l] & 0xF) * y[l];
                s2 += (q[l] >> 4) * y[l + 32];
            }
            sumi += sc[2 * j] * s1 + sc[2 * j + 1] * s2;
        }
        float d = quant_f16_to_f32(quant_ld16(w)) * xd[b];
        float dmin = quant_f16_to_f32(quant_ld16(w + 2)) * xd[b];
        sum += d * (float)sumi - dmin * (float)summins;
    }
    return sum;
}

static float dot_q6_k(const uint8_t *w, const float *xd, const int8_t *xq, int64_t nb) {
    float sum = 0.f;
    for (int64_t b = 0; b < nb; b++, w += Q6_K_BYTES) {
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *sc = (const int8_t *)(w + 192);
        const int8_t *y = xq + b * QK_K;
        int32_t sumi = 0;
        for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, y += 128) {
            /* l in [16 * is, 16 * is + 16) uses scales is, is + 2, is + 4, is + 6 */
            for (int is = 0; is < 2; is++) {
                int32_t s1 = 0, s2 = 0, s3 = 0, s4 = 0;
                for (int l = 16 * is; l < 16 * is + 16; l++) {
                    int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    s1 += q1 * y[l];
                    s2 += q2 * y[l + 32];
                    s3 += q3 * y[l + 64];
                    s4 += q4 * y[l + 96];
                }
                sumi += sc[is] * s1 + sc[is + 2] * s2 + sc[is + 4] * s3 + sc[is + 6] * s4;
            }
        }
        sum += quant_f16_to_f32(quant_ld16(w + 208)) * xd[b] * (float)sumi;
    }
    return sum;
}

static void rows_f32(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,
                     const quant_act *a, int n_tok) {
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++)
            out[t * n_rows + r] = dot_f32((const float *)(w + r * rb), a->x + t * a->n_cols, a->n_cols);
}

static void rows_f16(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,
                     const quant_act *a, int n_tok) {
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++) out[t * n_rows + r] = dot_f16(w + r * rb, a->x + t * a->n_cols, a->n_cols, 0);
}

static void rows_bf16(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,
                      const quant_act *a, int n_tok) {
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++) out[t * n_rows + r] = dot_f16(w + r * rb, a->x + t * a->n_cols, a->n_cols, 1);
}

static void rows_q8_0(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,
                      const quant_act *a, int n_tok) {
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++)
            out[t * n_rows + r] = dot_q8_0(w + r * rb, a->d + t * a->nb, a->q + t * a->n_cols, a->nb);
}

static void rows_q4_0(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,
                      const quant_act *a, int n_tok) {
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++)
            out[t * n_rows + r] = dot_q4_0(w + r * rb, a->d + t * a->nb, a->q + t * a->n_cols, a->nb);
}

static void rows_q4_k(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,
                      const quant_act *a, int n_tok) {
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++)
            out[t * n_rows + r] = dot_q4_k(w + r * rb, a->d + t * a->nb, a->q + t * a->n_cols,
                                           a->bsums + t * (a->n_cols / 16), a->nb);
}

static void rows_q6_k(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,
                      const quant_act *a, int n_tok) {
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++)
            out[t * n_rows + r] = dot_q6_k(w + r * rb, a->d + t * a->nb, a->q + t * a->n_cols, a->nb);
}

/* The Q8_1 form's block sums (quant_impl.h). */
void quant_act_q8_1_sums(float *s, const int32_t *xsum, const float *x, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        float amax = 0.f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        s[b] = quant_f16_to_f32(quant_f32_to_f16(amax / 127.f * (float)xsum[b]));
    }
}

// ---- portable kernels of the types added after the first seven ---------------------------------
//
// One signature: the dot product of weight row w with token t's prepared activations. Integer
// sums are exact; the float terms follow llama.cpp's reference dot products (ggml_vec_dot_*).

static uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Token t's share of the prepared activations (the arrays its form has; the others NULL). */
typedef struct act_tok {
    const float *d, *s;  /* block scales; Q8_1: d * sum(q) per block */
    const int8_t *q;     /* quantized values */
    const int32_t *xsum; /* sums of each 32-block's q */
    const int16_t *bs;   /* Q8_K: sums of 16 */
} act_tok;

static act_tok act_at(const quant_act *a, int t) {
    act_tok x = {a->d + t * a->nb, a->s ? a->s + t * a->nb : NULL, a->q + t * a->n_cols,
                 a->xsum ? a->xsum + t * a->nb : NULL, a->bsums ? a->bsums + t * (a->n_cols / 16) : NULL};
    return x;
}

/* sum over a 32-block of (nibble j [+ 16 * qh bit j]) * y[j], with Q4_0's element order */
static int32_t dot_nib32(const uint8_t *qs, uint32_t qh, const int8_t *y, const int8_t *map) {
    int32_t s = 0;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0xF) | ((qh >> j) & 1) << 4, hi = (qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
        s += (map ? map[lo] : lo) * y[j] + (map ? map[hi] : hi) * y[j + 16];
    }
    return s;
}

// Each type's term of one block b (weights at w) for one token x; a row's dot product is the sum
// of its blocks' terms in block order (ROWS_OF_BLOCKS), as llama.cpp's reference dot products.

static float f16_at(const uint8_t *p) { return quant_f16_to_f32(quant_ld16(p)); }

/* Q4_1 (qs at 4) and Q5_1 (qh at 4, qs at 8): d (q . y) + m s */
static float blk_q4_1(const uint8_t *w, const act_tok *x, int64_t b) {
    return f16_at(w) * x->d[b] * (float)dot_nib32(w + 4, 0, x->q + 32 * b, NULL) + f16_at(w + 2) * x->s[b];
}

static float blk_q5_1(const uint8_t *w, const act_tok *x, int64_t b) {
    return f16_at(w) * x->d[b] * (float)dot_nib32(w + 8, ld32(w + 4), x->q + 32 * b, NULL) + f16_at(w + 2) * x->s[b];
}

/* Q5_0: (q - 16) . y, times d */
static float blk_q5_0(const uint8_t *w, const act_tok *x, int64_t b) {
    int32_t si = dot_nib32(w + 6, ld32(w + 2), x->q + 32 * b, NULL) - 16 * x->xsum[b];
    return (float)si * (f16_at(w) * x->d[b]);
}

static float blk_iq4_nl(const uint8_t *w, const act_tok *x, int64_t b) {
    return (float)dot_nib32(w + 2, 0, x->q + 32 * b, quant_iq4nl_values) * (f16_at(w) * x->d[b]);
}

static float blk_mxfp4(const uint8_t *w, const act_tok *x, int64_t b) {
    return (float)dot_nib32(w + 1, 0, x->q + 32 * b, quant_mxfp4_values) * (x->d[b] * quant_e8m0_half(w[0]));
}

/* sum over the 16 sub-blocks of 16 of sc_j (v . y)_j: v a super-block's weights decoded to integers */
static int32_t dot_sub16(const int8_t v[QK_K], const int8_t sc[16], const int8_t *y) {
    int32_t isum = 0;
    for (int j = 0; j < 16; j++) {
        int32_t si = 0;
        for (int e = 16 * j; e < 16 * j + 16; e++) si += v[e] * y[e];
        isum += sc[j] * si;
    }
    return isum;
}

/* Q2_K: d sc_j (q . y)_j - dmin mn_j (sum y)_j over the 16 sub-blocks of 16; weight e is bits
 * 2 (e % 128 / 32) of qs[32 (e / 128) + e % 32] */
static float blk_q2_k(const uint8_t *w, const act_tok *x, int64_t b) {
    int8_t v[QK_K], sc[16];
    int32_t summs = 0;
    for (int j = 0; j < 16; j++) {
        sc[j] = (int8_t)(w[j] & 0xF);
        summs += x->bs[16 * b + j] * (w[j] >> 4);
    }
    for (int e = 0; e < QK_K; e++) v[e] = (int8_t)((w[16 + 32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3);
    float dall = x->d[b] * f16_at(w + 80), dmin = x->d[b] * f16_at(w + 82);
    return dall * (float)dot_sub16(v, sc, x->q + QK_K * b) - dmin * (float)summs;
}

/* Q3_K: Q2_K's two bits, less 4 where the hmask bit (bit 4 (e / 128) + e % 128 / 32 of hm[e % 32]) is clear */
static float blk_q3_k(const uint8_t *w, const act_tok *x, int64_t b) {
    int8_t v[QK_K], sc[16];
    quant_q3k_scales(w + 96, sc);
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, k = e % 128 / 32, l = e % 32;
        v[e] = (int8_t)(((w[32 + 32 * h + l] >> (2 * k)) & 3) - ((w[l] >> (4 * h + k)) & 1 ? 0 : 4));
    }
    return f16_at(w + 108) * x->d[b] * (float)dot_sub16(v, sc, x->q + QK_K * b);
}

/* Q5_K: Q4_K with the fifth bit of weight 64p + 32 hi + l at bit 2p + hi of qh[l] */
static float blk_q5_k(const uint8_t *w, const act_tok *x, int64_t b) {
    const int8_t *xq = x->q + QK_K * b;
    const int16_t *bs = x->bs + 16 * b;
    uint8_t sc[8], mn[8];
    quant_q4k_scales(w + 4, sc, mn);
    int32_t summins = 0, sumi = 0;
    for (int j = 0; j < 8; j++) summins += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
    const uint8_t *qh = w + 16, *q = w + 48;
    for (int p = 0; p < 4; p++, q += 32) {
        int32_t s1 = 0, s2 = 0;
        for (int l = 0; l < 32; l++) {
            s1 += ((q[l] & 0xF) | ((qh[l] >> (2 * p)) & 1) << 4) * xq[64 * p + l];
            s2 += ((q[l] >> 4) | ((qh[l] >> (2 * p + 1)) & 1) << 4) * xq[64 * p + 32 + l];
        }
        sumi += sc[2 * p] * s1 + sc[2 * p + 1] * s2;
    }
    float d = f16_at(w) * x->d[b], dmin = f16_at(w + 2) * x->d[b];
    return d * (float)sumi - dmin * (float)summins;
}

/* IQ4_XS: per sub-block of 32, the IQ4_NL codebook's values times its 6-bit scale */
static float blk_iq4_xs(const uint8_t *w, const act_tok *x, int64_t b) {
    int8_t sc[8];
    quant_iq4xs_scales(w, sc);
    int32_t isum = 0;
    for (int j = 0; j < 8; j++)
        isum += sc[j] * dot_nib32(w + 8 + 16 * j, 0, x->q + QK_K * b + 32 * j, quant_iq4nl_values);
    return f16_at(w) * x->d[b] * (float)isum;
}

#define ROWS_OF_BLOCKS(NAME, BLK, BYTES)                                                                               \
    static void NAME(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,                  \
                     const quant_act *a, int n_tok) {                                                                  \
        for (int t = 0; t < n_tok; t++) {                                                                              \
            const act_tok x = act_at(a, t);                                                                            \
            for (int64_t r = r0; r < r1; r++) {                                                                        \
                float sum = 0.f;                                                                                       \
                for (int64_t b = 0; b < a->nb; b++) sum += BLK(w + r * rb + (size_t)b * (BYTES), &x, b);               \
                out[t * n_rows + r] = sum;                                                                             \
            }                                                                                                          \
        }                                                                                                              \
    }

ROWS_OF_BLOCKS(rows_q4_1, blk_q4_1, Q4_1_BYTES)
ROWS_OF_BLOCKS(rows_q5_0, blk_q5_0, Q5_0_BYTES)
ROWS_OF_BLOCKS(rows_q5_1, blk_q5_1, Q5_1_BYTES)
ROWS_OF_BLOCKS(rows_iq4_nl, blk_iq4_nl, IQ4_NL_BYTES)
ROWS_OF_BLOCKS(rows_mxfp4, blk_mxfp4, MXFP4_BYTES)
ROWS_OF_BLOCKS(rows_q2_k, blk_q2_k, Q2_K_BYTES)
ROWS_OF_BLOCKS(rows_q3_k, blk_q3_k, Q3_K_BYTES)
ROWS_OF_BLOCKS(rows_q5_k, blk_q5_k, Q5_K_BYTES)
ROWS_OF_BLOCKS(rows_iq4_xs, blk_iq4_xs, IQ4_XS_BYTES)

// ---- portable vector primitives ----------------------------------------------------------------

static void dot_rows_portable(float *scores, const float *q, const float *K, int64_t ks, int n, int hd, float scale) {
    for (int j = 0; j < n; j++) scores[j] = dot_f32(q, K + (int64_t)j * ks, hd) * scale;
}

static void axpy_rows_portable(float *acc, const float *p, const float *V, int64_t vs, int n, int hd) {
    for (int j = 0; j < n; j++) {
        const float *v = V + (int64_t)j * vs;
        for (int i = 0; i < hd; i++) acc[i] += p[j] * v[i];
    }
}

static void exp_portable(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

static void h2f_portable(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = quant_f16_to_f32(src[i]);
}

static void f2h_portable(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

/* Each C element one chain over c in order (k may be split across calls with acc). */
static void gemm_portable(float *C, int64_t ldc, const float *A, int64_t lda, const float *B, int64_t ldb, int m, int n,
                          int k, int acc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = acc ? C[i * ldc + j] : 0.0f;
            for (int c = 0; c < k; c++) s += A[i * lda + c] * B[c * ldb + j];
            C[i * ldc + j] = s;
        }
}

static void softmax_portable(float *s, int n, float scale) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) s[j] *= scale, mx = s[j] > mx ? s[j] : mx;
    double sum = 0;
    for (int j = 0; j < n; j++) {
        float d = s[j] - mx;
        sum += s[j] = d < -87.f ? 0.0f : expf(d);
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < n; j++) s[j] *= inv;
}

static void gelu_portable(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * v * (1.0f + 0.044715f * v * v)));
    }
}

const quant_kernels quant_kernels_portable = {
    .rows = {
#define QT_ROWS_(N, n, A) [QT_##N] = rows_##n,
        QUANT_TYPE_LIST(QT_ROWS_)
#undef QT_ROWS_
    },
    .prep_q8_0 = act_q8_0,
    .prep_q8_k = act_q8_k,
    .prep_f16 = act_f16,
    .dot_rows = dot_rows_portable,
    .axpy_rows = axpy_rows_portable,
    .exp = exp_portable,
    .h2f = h2f_portable,
    .f2h = f2h_portable,
    .gemm = gemm_portable,
    .softmax = softmax_portable,
    .gelu = gelu_portable,
};
