/*
 * quant_iq.c — the portable reference of the low-bit types of issue 47 (quant_iq.h): the
 * codebooks expanded from their compact codes, one decoder per super-block layout, and the
 * dequantizers and row kernels built on those decoders.
 *
 * A decoder turns one super-block into what both consumers need: the 256 signed small integers
 * v (grid values with their signs, or trits), an integer scale per 16 weights, the f16 d, and for
 * IQ1 the sign of each 8 weights' shift of 1/8. A weight is then
 *     x = (d * K) * (ls * v)            (K: 1/8 for IQ2, 1/4 for IQ3_XXS, 1 for IQ3_S and TQ)
 *     x = (d * ls) * (v + delta / 8)    (IQ1_S, IQ1_M)
 * each product exact in float (at most 22 significant bits), so the value is the definition's
 * whatever the order of the factors. The dot product of a row with Q8_K activations (d_y, q) is
 * per super-block K * ((d * d_y) * sum_j ls_j (v . q)_j), the integer sum exact; IQ1 adds its
 * shifts as (d * d_y) * (isum + isum_delta / 8): llama.cpp's reference order. The row kernels
 * decode each super-block once for all tokens of the call.
 */
#include <pthread.h>
#include <string.h>

#include "attnd/common.h"
#include "quant.h"
#include "quant_impl.h"
#include "quant_iq.h"

// ---- the codebooks ------------------------------------------------------------------------------

static const uint8_t IQ_LEVELS_2[3] = {8, 25, 43};                       /* IQ2_XXS, IQ2_XS, IQ2_S */
static const uint8_t IQ_LEVELS_3XXS[8] = {4, 12, 20, 28, 36, 44, 52, 62}; /* IQ3_XXS */
static const uint8_t IQ_LEVELS_3S[8] = {1, 3, 5, 7, 9, 11, 13, 15};       /* IQ3_S */
static const int8_t IQ_LEVELS_1[3] = {-1, 0, 1};                          /* IQ1_S, IQ1_M */

static quant_iq_grids g_grids;
static pthread_once_t g_grids_once = PTHREAD_ONCE_INIT;

/* n entries of `width` values: value k of entry i is levels[code_i >> (bits k) & mask] */
static void expand(uint8_t *dst, const uint16_t *codes, int n, int width, int bits, const uint8_t *levels) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < width; k++) dst[i * width + k] = levels[(codes[i] >> (bits * k)) & ((1 << bits) - 1)];
}

static void grids_build(void) {
    quant_iq_grids *g = &g_grids;
    expand(&g->iq2xxs[0][0], quant_iq2xxs_codes, 256, 8, 2, IQ_LEVELS_2);
    expand(&g->iq2xs[0][0], quant_iq2xs_codes, 512, 8, 2, IQ_LEVELS_2);
    expand(&g->iq2s[0][0], quant_iq2s_codes, 1024, 8, 2, IQ_LEVELS_2);
    expand(&g->iq3xxs[0][0], quant_iq3xxs_codes, 256, 4, 3, IQ_LEVELS_3XXS);
    expand(&g->iq3s[0][0], quant_iq3s_codes, 512, 4, 3, IQ_LEVELS_3S);
    for (int i = 0; i < 2048; i++)
        for (int k = 0; k < 8; k++) {
            g->iq1s[i][k] = IQ_LEVELS_1[(quant_iq1s_codes[i] >> (2 * k)) & 3];
            g->iq1s8[0][i][k] = (int8_t)(8 * g->iq1s[i][k] + 1);
            g->iq1s8[1][i][k] = (int8_t)(8 * g->iq1s[i][k] - 1);
        }
    for (int i = 0; i < 1024; i++) g->iq2s32[i] = quant_iq2s_codes[i];
    for (int i = 0; i < 2048; i++) g->iq1s32[i] = quant_iq1s_codes[i];
    for (int i = 0; i < 128; i++) g->signs[i] = (uint8_t)(i | (__builtin_popcount((unsigned)i) & 1) << 7);
}

const quant_iq_grids *quant_iq_grids_get(void) {
    pthread_once(&g_grids_once, grids_build);
    return &g_grids;
}

float quant_ue4m3_half(uint8_t x) {
    if (x == 0x7F) return 0.f;
    int e = (x >> 3) & 0xF, m = x & 7;
    /* e = 0: m 2^-9, else (1 + m/8) 2^(e-7); halved: m 2^-10 or (8 + m) 2^(e-11), exact */
    uint32_t bits = (uint32_t)(e == 0 ? 127 - 10 : 127 + e - 11) << 23;
    float p;
    memcpy(&p, &bits, sizeof p);
    return (float)(e == 0 ? m : 8 + m) * p;
}

// ---- decoders: one super-block into integers ----------------------------------------------------

typedef struct iq_dec {
    int8_t v[QK_K];  /* the small integers, in weight order */
    int8_t ls[16];   /* integer scale of each 16 weights */
    int8_t dl[32];   /* IQ1: the sign of each 8 weights' shift of 1/8 (+1 / -1) */
    float d;         /* the block's f16 scale */
} iq_dec;

typedef void (*iq_decode_fn)(iq_dec *o, const uint8_t *blk, const quant_iq_grids *g);

static uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static float f16_at(const uint8_t *p) { return quant_f16_to_f32(quant_ld16(p)); }

/* 8 values of grid entry `e` (n of them, 8 or 4) into v, negated where `signs` has the bit */
static void put_signed(int8_t *v, const uint8_t *e, int n, unsigned signs) {
    for (int j = 0; j < n; j++) v[j] = (int8_t)((signs >> j) & 1 ? -(int)e[j] : (int)e[j]);
}

/* the scale of 32 weights, twice (two sub-blocks of 16) */
static void ls32(int8_t *ls, int ib, int s) { ls[2 * ib] = ls[2 * ib + 1] = (int8_t)s; }

static void dec_iq2_xxs(iq_dec *o, const uint8_t *b, const quant_iq_grids *g) {
    o->d = f16_at(b);
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *idx = b + 2 + 8 * ib;
        uint32_t aux = ld32(idx + 4);
        for (int l = 0; l < 4; l++) put_signed(o->v + 32 * ib + 8 * l, g->iq2xxs[idx[l]], 8, g->signs[(aux >> (7 * l)) & 127]);
        ls32(o->ls, ib, (int)(2 * (aux >> 28) + 1));
    }
}

static void dec_iq2_xs(iq_dec *o, const uint8_t *b, const quant_iq_grids *g) {
    o->d = f16_at(b);
    for (int k = 0; k < 32; k++) {
        uint16_t q = quant_ld16(b + 2 + 2 * k);
        put_signed(o->v + 8 * k, g->iq2xs[q & 511], 8, g->signs[q >> 9]);
    }
    for (int j = 0; j < 16; j++) o->ls[j] = (int8_t)(2 * ((b[66 + j / 2] >> (4 * (j % 2))) & 15) + 1);
}

static void dec_iq2_s(iq_dec *o, const uint8_t *b, const quant_iq_grids *g) {
    const uint8_t *qs = b + 2, *sg = b + 34, *qh = b + 66, *sc = b + 74;
    o->d = f16_at(b);
    for (int k = 0; k < 32; k++) {
        int idx = qs[k] | ((qh[k / 4] >> (2 * (k % 4))) & 3) << 8;
        put_signed(o->v + 8 * k, g->iq2s[idx], 8, sg[k]);
    }
    for (int j = 0; j < 16; j++) o->ls[j] = (int8_t)(2 * ((sc[j / 2] >> (4 * (j % 2))) & 15) + 1);
}

static void dec_iq3_xxs(iq_dec *o, const uint8_t *b, const quant_iq_grids *g) {
    const uint8_t *qs = b + 2;
    o->d = f16_at(b);
    for (int ib = 0; ib < 8; ib++) {
        uint32_t aux = ld32(b + 66 + 4 * ib);
        for (int l = 0; l < 4; l++) {
            unsigned s = g->signs[(aux >> (7 * l)) & 127];
            put_signed(o->v + 32 * ib + 8 * l, g->iq3xxs[qs[8 * ib + 2 * l]], 4, s);
            put_signed(o->v + 32 * ib + 8 * l + 4, g->iq3xxs[qs[8 * ib + 2 * l + 1]], 4, s >> 4);
        }
        ls32(o->ls, ib, (int)(2 * (aux >> 28) + 1));
    }
}

static void dec_iq3_s(iq_dec *o, const uint8_t *b, const quant_iq_grids *g) {
    const uint8_t *qs = b + 2, *qh = b + 66, *sg = b + 74, *sc = b + 106;
    o->d = f16_at(b);
    for (int k = 0; k < 64; k++) { /* index k: 4 weights, its ninth bit is bit k % 8 of qh[k / 8] */
        int idx = qs[k] | ((qh[k / 8] >> (k % 8)) & 1) << 8;
        put_signed(o->v + 4 * k, g->iq3s[idx], 4, sg[k / 2] >> (4 * (k % 2)));
    }
    for (int ib = 0; ib < 8; ib++) ls32(o->ls, ib, 2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 15) + 1);
}

static void dec_iq1_s(iq_dec *o, const uint8_t *b, const quant_iq_grids *g) {
    o->d = f16_at(b);
    for (int ib = 0; ib < 8; ib++) {
        uint16_t h = quant_ld16(b + 34 + 2 * ib);
        for (int l = 0; l < 4; l++) {
            memcpy(o->v + 32 * ib + 8 * l, g->iq1s[b[2 + 4 * ib + l] | ((h >> (3 * l)) & 7) << 8], 8);
            o->dl[4 * ib + l] = h & 0x8000 ? -1 : 1;
        }
        ls32(o->ls, ib, 2 * ((h >> 12) & 7) + 1);
    }
}

static void dec_iq1_m(iq_dec *o, const uint8_t *b, const quant_iq_grids *g) {
    const uint8_t *qs = b, *qh = b + 32;
    uint16_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = quant_ld16(b + 48 + 2 * k);
    o->d = quant_f16_to_f32((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0xF0) | ((sc[2] >> 4) & 0xF00) | (sc[3] & 0xF000)));
    for (int k = 0; k < 32; k++) { /* 8 weights: nibble k % 2 of qh[k / 2] */
        int nib = (qh[k / 2] >> (4 * (k % 2))) & 15;
        memcpy(o->v + 8 * k, g->iq1s[qs[k] | (nib & 7) << 8], 8);
        o->dl[k] = nib & 8 ? -1 : 1;
    }
    for (int j = 0; j < 16; j++) o->ls[j] = (int8_t)(2 * ((sc[j / 4] >> (3 * (j % 4))) & 7) + 1);
}

/* TQ1_0: the n-th trit of a byte holding 5 (or 4) base-3 digits, scaled to 256 (the format's
 * fixed-point packing): the top digit of byte * 3^n, read as (byte * 3^n mod 256) * 3 / 256. */
static int trit(uint8_t byte, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return (((uint8_t)(byte * pow3[n])) * 3 >> 8) - 1;
}

void quant_tq1_0_values(int8_t v[QK_K], const uint8_t *b) {
    for (int e = 0; e < 160; e++) v[e] = (int8_t)trit(b[e % 32], e / 32);             /* qs[0..32): 5 x 32 */
    for (int e = 0; e < 80; e++) v[160 + e] = (int8_t)trit(b[32 + e % 16], e / 16); /* qs[32..48): 5 x 16 */
    for (int e = 0; e < 16; e++) v[240 + e] = (int8_t)trit(b[48 + e % 4], e / 4);   /* qh[0..4): 4 x 4 */
}

static void dec_tq1_0(iq_dec *o, const uint8_t *b, const quant_iq_grids *g) {
    (void)g;
    o->d = f16_at(b + 52);
    quant_tq1_0_values(o->v, b);
    memset(o->ls, 1, sizeof o->ls);
}

static void dec_tq2_0(iq_dec *o, const uint8_t *b, const quant_iq_grids *g) {
    (void)g;
    o->d = f16_at(b + 64);
    for (int e = 0; e < QK_K; e++) o->v[e] = (int8_t)(((b[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3) - 1);
    memset(o->ls, 1, sizeof o->ls);
}

// ---- dequantization and row kernels of the super-block types ------------------------------------

/* One super-block's weights into y, as the header's formulas (K = k; iq1: with the shifts). */
static void dec_to_floats(float *y, const iq_dec *o, float k, int iq1) {
    if (iq1)
        for (int e = 0; e < QK_K; e++) y[e] = (o->d * (float)o->ls[e / 16]) * ((float)o->v[e] + 0.125f * (float)o->dl[e / 8]);
    else
        for (int e = 0; e < QK_K; e++) y[e] = (o->d * k) * (float)(o->ls[e / 16] * o->v[e]);
}

/* One super-block's term of a dot product with one token's Q8_K values q (256) and scale dy. */
static float dec_dot(const iq_dec *o, const int8_t *q, float dy, float k, int iq1) {
    int32_t isum = 0, isum_dl = 0;
    for (int j = 0; j < 16; j++) {
        int32_t s = 0;
        for (int e = 16 * j; e < 16 * j + 16; e++) s += o->v[e] * q[e];
        isum += o->ls[j] * s;
    }
    if (!iq1) return k * ((o->d * dy) * (float)isum);
    for (int g8 = 0; g8 < 32; g8++) {
        int32_t s = 0;
        for (int e = 8 * g8; e < 8 * g8 + 8; e++) s += q[e];
        isum_dl += o->ls[g8 / 2] * o->dl[g8] * s;
    }
    return (o->d * dy) * ((float)isum + 0.125f * (float)isum_dl);
}

static void dequant_blocks(float *y, const uint8_t *src, int64_t nb, size_t bytes, iq_decode_fn decode, float k, int iq1) {
    const quant_iq_grids *g = quant_iq_grids_get();
    iq_dec o;
    for (int64_t b = 0; b < nb; b++, src += bytes, y += QK_K) {
        decode(&o, src, g);
        dec_to_floats(y, &o, k, iq1);
    }
}

/* Rows r0..r1 for every token: each super-block decoded once, its term added for every token in
 * block order (the float sum of a token is the same whatever n_tok). */
static void rows_blocks(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,
                        const quant_act *a, int n_tok, size_t bytes, iq_decode_fn decode, float k, int iq1) {
    const quant_iq_grids *g = quant_iq_grids_get();
    iq_dec o;
    for (int64_t r = r0; r < r1; r++) {
        for (int t = 0; t < n_tok; t++) out[t * n_rows + r] = 0.f;
        for (int64_t b = 0; b < a->nb; b++) {
            decode(&o, w + (size_t)r * rb + (size_t)b * bytes, g);
            for (int t = 0; t < n_tok; t++)
                out[t * n_rows + r] += dec_dot(&o, a->q + t * a->n_cols + b * QK_K, a->d[t * a->nb + b], k, iq1);
        }
    }
}

#define IQ_TYPE(n, BYTES, K, IQ1)                                                                            \
    void dequant_##n(float *y, const uint8_t *src, int64_t nb) { dequant_blocks(y, src, nb, BYTES, dec_##n, K, IQ1); } \
    void rows_##n(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,                \
                  const quant_act *a, int n_tok) {                                                              \
        rows_blocks(out, w, rb, r0, r1, n_rows, a, n_tok, BYTES, dec_##n, K, IQ1);                              \
    }

IQ_TYPE(iq2_xxs, IQ2_XXS_BYTES, 0.125f, 0)
IQ_TYPE(iq2_xs, IQ2_XS_BYTES, 0.125f, 0)
IQ_TYPE(iq2_s, IQ2_S_BYTES, 0.125f, 0)
IQ_TYPE(iq3_xxs, IQ3_XXS_BYTES, 0.25f, 0)
IQ_TYPE(iq3_s, IQ3_S_BYTES, 1.0f, 0)
IQ_TYPE(iq1_s, IQ1_S_BYTES, 1.0f, 1)
IQ_TYPE(iq1_m, IQ1_M_BYTES, 1.0f, 1)
IQ_TYPE(tq1_0, TQ1_0_BYTES, 1.0f, 0)
IQ_TYPE(tq2_0, TQ2_0_BYTES, 1.0f, 0)

// ---- NVFP4: blocks of 64 against Q8_0 activations ------------------------------------------------

/* the E2M1 code of weight j (< 16) of sub-block s */
static int nvfp4_code(const uint8_t *blk, int s, int j) { return (blk[4 + 8 * s + j % 8] >> (4 * (j / 8))) & 15; }

void dequant_nvfp4(float *y, const uint8_t *src, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += NVFP4_BYTES)
        for (int s = 0; s < 4; s++) {
            float d = quant_ue4m3_half(src[s]);
            for (int j = 0; j < 16; j++) *y++ = (float)quant_mxfp4_values[nvfp4_code(src, s, j)] * d;
        }
}

/* Sub-block s of a block reads half of Q8_0 block s / 2: sum += (d_y d) (v . q) per sub-block, one
 * running sum over the row, in order (llama.cpp's ggml_vec_dot_nvfp4_q8_0). */
static float nvfp4_dot(float sum, const uint8_t *blk, const int8_t *q, const float *dy) {
    for (int s = 0; s < 4; s++) {
        int32_t si = 0;
        for (int j = 0; j < 16; j++) si += quant_mxfp4_values[nvfp4_code(blk, s, j)] * q[16 * s + j];
        sum += dy[s / 2] * quant_ue4m3_half(blk[s]) * (float)si;
    }
    return sum;
}

void rows_nvfp4(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows, const quant_act *a,
                int n_tok) {
    const int64_t nb = a->n_cols / QK_NVFP4;
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++) {
            float sum = 0.f;
            for (int64_t b = 0; b < nb; b++)
                sum = nvfp4_dot(sum, w + (size_t)r * rb + (size_t)b * NVFP4_BYTES, a->q + t * a->n_cols + b * QK_NVFP4,
                                a->d + t * a->nb + 2 * b);
            out[t * n_rows + r] = sum;
        }
}
