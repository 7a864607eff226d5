/*
 * quant.c — weight-type kernels: half/bfloat conversions, row dequantization, and the matmul
 * driver with its portable C kernels. Instruction-set specific kernels live in quant_avx2.c and
 * quant_avx512.c and are picked at run time (quant_isa_*), so one binary runs on any x86-64.
 *
 * Arithmetic follows llama.cpp's CPU backend, so that the engine agrees with it token for token
 * as far as possible: activations are rounded to what the weight type's dot product consumes
 * (Q8_0 blocks for Q8_0/Q4_0 weights, Q8_K super-blocks for Q4_K/Q6_K, f16 for F16, bf16 for
 * BF16, nothing for F32) and the quantized dot products are exact integer sums scaled once per
 * block. Every instruction set computes the same integers; only the order in which the
 * per-block float terms are summed differs.
 */
#include "quant.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "attnd/common.h"
#include "attnd/gguf.h"
#include "quant_impl.h"
#include "threads.h"

// ---- scalar conversions ------------------------------------------------------------------------

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float quant_f16_to_f32(uint16_t h) {
    /* Branch-free: with the half's exponent and mantissa shifted into place, adding 224 to the
     * exponent and scaling by 2^-112 rebiases normals, and keeps inf/nan at exponent 255; a
     * subnormal's value mant * 2^-24 is taken from the float 2^-1 * (1 + mant * 2^-23) - 0.5. */
    uint32_t w = (uint32_t)h << 16;
    uint32_t sign = w & 0x80000000u, two_w = w + w; /* exponent and mantissa, sign shifted out */
    float normal = bits_f32((two_w >> 4) + (0xE0u << 23)) * 0x1p-112f;
    float subnormal = bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
    uint32_t r = two_w < (1u << 27) ? f32_bits(subnormal) : f32_bits(normal);
    return bits_f32(sign | r);
}

uint16_t quant_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7FFFFFFF;
    if (ax > 0x7F800000) return sign | 0x7E00 | (uint16_t)((ax >> 13) & 0x3FF); /* nan stays (quiet) nan */
    if (ax >= 0x477FF000) return sign | 0x7C00; /* >= 65520 rounds to inf; inf stays inf */
    if (ax >= 0x38800000) {                    /* normal half: rebias exponent, round the 13 dropped bits */
        uint32_t r = (ax - 0x38000000) >> 13;
        uint32_t rem = ax & 0x1FFF;
        if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    if (ax < 0x33000000) return sign; /* below 2^-25: rounds to zero */
    /* subnormal half: value / 2^-24, rounded to nearest even (may round up to the smallest normal) */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7FFFFF) | 0x800000;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return sign | (uint16_t)r;
}

float quant_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t quant_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    return (uint16_t)((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

/* Round to nearest, ties to even, for |f| < 2^22, without a libm call (the magic-number trick). */
static inline int32_t round_nearest(float f) {
    float v = f + 12582912.f; /* 1.5 * 2^23 */
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007FFFFF) - 0x00400000;
}

// ---- sizes -------------------------------------------------------------------------------------

size_t quant_row_bytes(uint32_t type, int64_t n_cols) {
    uint32_t be = gguf_type_block_elems(type), bb = gguf_type_block_bytes(type);
    if (be == 0 || n_cols < 0) return 0;
    return (size_t)(n_cols / be) * bb;
}

#define SCRATCH_ALIGN 64

static size_t round_up(size_t n) { return (n + SCRATCH_ALIGN - 1) & ~(size_t)(SCRATCH_ALIGN - 1); }

size_t quant_scratch_bytes(uint32_t wtype, int n_tok, int64_t n_cols) {
    if (n_tok <= 0 || n_cols <= 0) return 0;
    size_t n = (size_t)n_tok * (size_t)n_cols;
    switch (wtype) {
    case GGUF_TYPE_F16:
    case GGUF_TYPE_BF16: return SCRATCH_ALIGN + round_up(n * sizeof(float));
    case GGUF_TYPE_Q8_0:
    case GGUF_TYPE_Q4_0:
        return SCRATCH_ALIGN + 2 * round_up((size_t)n_tok * (size_t)(n_cols / QK8_0) * sizeof(float)) + round_up(n);
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_Q6_K:
        return SCRATCH_ALIGN + round_up((size_t)n_tok * (size_t)(n_cols / QK_K) * sizeof(float)) + round_up(n) +
               round_up((size_t)n_tok * (size_t)(n_cols / 16) * sizeof(int16_t)) +
               round_up((size_t)n_tok * (size_t)(n_cols / 32) * sizeof(int16_t));
    default: return 0; /* F32 reads the activations in place */
    }
}

// ---- dequantization ----------------------------------------------------------------------------

static void dequant_q8_0(float *y, const uint8_t *src, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += Q8_0_BYTES, y += QK8_0) {
        float d = quant_f16_to_f32(quant_ld16(src));
        const int8_t *q = (const int8_t *)(src + 2);
        for (int j = 0; j < QK8_0; j++) y[j] = d * (float)q[j];
    }
}

static void dequant_q4_0(float *y, const uint8_t *src, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += Q4_0_BYTES, y += QK4_0) {
        float d = quant_f16_to_f32(quant_ld16(src));
        const uint8_t *q = src + 2;
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = d * (float)((q[j] & 0xF) - 8);
            y[j + QK4_0 / 2] = d * (float)((q[j] >> 4) - 8);
        }
    }
}

static void dequant_q4_k(float *y, const uint8_t *src, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += Q4_K_BYTES) {
        float d = quant_f16_to_f32(quant_ld16(src));
        float dmin = quant_f16_to_f32(quant_ld16(src + 2));
        uint8_t sc[8], mn[8];
        quant_q4k_scales(src + 4, sc, mn);
        const uint8_t *q = src + 16;
        /* each 64-element chunk: 32 low nibbles, then the 32 high nibbles of the same bytes */
        for (int j = 0; j < 4; j++, q += 32, y += 64) {
            float d1 = d * sc[2 * j], m1 = dmin * mn[2 * j];
            float d2 = d * sc[2 * j + 1], m2 = dmin * mn[2 * j + 1];
            for (int l = 0; l < 32; l++) y[l] = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) y[32 + l] = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* The 6-bit values (0..63, without the -32) of one Q6_K super-block, in column order. */
static void q6_k_values(uint8_t v[QK_K], const uint8_t *blk) {
    const uint8_t *ql = blk, *qh = blk + 128;
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 32; l++) {
            uint8_t lo = ql[64 * n + l], hi = ql[64 * n + 32 + l], h = qh[32 * n + l];
            v[128 * n + l] = (uint8_t)((lo & 0xF) | (h & 3) << 4);
            v[128 * n + 32 + l] = (uint8_t)((hi & 0xF) | (h >> 2 & 3) << 4);
            v[128 * n + 64 + l] = (uint8_t)((lo >> 4) | (h >> 4 & 3) << 4);
            v[128 * n + 96 + l] = (uint8_t)((hi >> 4) | (h >> 6 & 3) << 4);
        }
}

static void dequant_q6_k(float *y, const uint8_t *src, int64_t nb) {
    uint8_t v[QK_K];
    for (int64_t b = 0; b < nb; b++, src += Q6_K_BYTES, y += QK_K) {
        const int8_t *sc = (const int8_t *)(src + 192); /* one per 16 elements */
        float d = quant_f16_to_f32(quant_ld16(src + 208));
        q6_k_values(v, src);
        for (int e = 0; e < QK_K; e++) y[e] = d * (float)(sc[e / 16] * (v[e] - 32));
    }
}

void quant_dequantize_row(float *dst, const void *src, uint32_t type, int64_t n) {
    uint32_t be = gguf_type_block_elems(type);
    ATTND_ASSERT(gguf_type_computable(type) && be > 0 && n >= 0 && n % be == 0);
    const uint8_t *s = src;
    switch (type) {
    case GGUF_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case GGUF_TYPE_F16:
        if (((uintptr_t)src & 1) == 0) quant_f16_to_f32_row(dst, src, n); /* tensor data is aligned */
        else for (int64_t i = 0; i < n; i++) dst[i] = quant_f16_to_f32(quant_ld16(s + 2 * i));
        break;
    case GGUF_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_bf16_to_f32(quant_ld16(s + 2 * i));
        break;
    case GGUF_TYPE_Q8_0: dequant_q8_0(dst, s, n / QK8_0); break;
    case GGUF_TYPE_Q4_0: dequant_q4_0(dst, s, n / QK4_0); break;
    case GGUF_TYPE_Q4_K: dequant_q4_k(dst, s, n / QK_K); break;
    case GGUF_TYPE_Q6_K: dequant_q6_k(dst, s, n / QK_K); break;
    default: ATTND_ASSERT(!"computable type without a dequantizer");
    }
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

static void act_bf16(float *xr, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) xr[i] = quant_bf16_to_f32(quant_f32_to_bf16(x[i]));
}

/* How one call prepares its activations: where each form lives in scratch and which function
 * fills it, so that the rows can be filled token by token (by one thread, or by the team). */
typedef struct act_plan {
    quant_act a;
    uint32_t wtype;
    const float *x;    /* (n_tok, n_cols) the caller's activations */
    float *xr;         /* F16/BF16: (n_tok, n_cols) rounded copies (a.x points here) */
    float *d;          /* Q8 forms: (n_tok, nb) */
    int8_t *q;         /* Q8 forms: (n_tok, n_cols) */
    int16_t *bs;       /* Q8_K form: (n_tok, n_cols / 16) */
    int16_t *bs32;     /* Q8_K form: (n_tok, n_cols / 32) */
    int32_t *xsum;     /* Q8_0 form: (n_tok, nb) */
    quant_prep_f16_fn f16;
    quant_prep_q8_0_fn q8_0;
    quant_prep_q8_k_fn q8_k;
} act_plan;

/* Lays out wtype's activation form in scratch (nothing is computed yet). */
static void act_plan_init(act_plan *pl, const quant_kernels *k, uint32_t wtype, const float *x, int n_tok, int64_t n_cols,
                          void *scratch) {
    memset(pl, 0, sizeof *pl);
    pl->wtype = wtype;
    pl->x = x;
    pl->a.n_cols = n_cols;
    pl->a.x = x;
    if (wtype == GGUF_TYPE_F32) return;
    ATTND_ASSERT(scratch != NULL);
    uint8_t *p = (uint8_t *)(((uintptr_t)scratch + SCRATCH_ALIGN - 1) & ~(uintptr_t)(SCRATCH_ALIGN - 1));
    switch (wtype) {
    case GGUF_TYPE_F16:
    case GGUF_TYPE_BF16:
        pl->xr = (float *)p;
        pl->a.x = pl->xr;
        pl->f16 = wtype == GGUF_TYPE_F16 ? k->prep_f16 : act_bf16;
        return;
    case GGUF_TYPE_Q8_0:
    case GGUF_TYPE_Q4_0:
        pl->a.nb = n_cols / QK8_0;
        pl->d = (float *)p;
        pl->xsum = (int32_t *)(p + round_up((size_t)n_tok * (size_t)pl->a.nb * sizeof(float)));
        pl->q = (int8_t *)(p + 2 * round_up((size_t)n_tok * (size_t)pl->a.nb * sizeof(float)));
        pl->q8_0 = k->prep_q8_0;
        break;
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_Q6_K:
        pl->a.nb = n_cols / QK_K;
        pl->d = (float *)p;
        p += round_up((size_t)n_tok * (size_t)pl->a.nb * sizeof(float));
        pl->q = (int8_t *)p;
        p += round_up((size_t)n_tok * (size_t)n_cols);
        pl->bs = (int16_t *)p;
        p += round_up((size_t)n_tok * (size_t)(n_cols / 16) * sizeof(int16_t));
        pl->bs32 = (int16_t *)p;
        pl->q8_k = k->prep_q8_k;
        break;
    default: ATTND_ASSERT(!"unsupported weight type");
    }
    pl->a.d = pl->d;
    pl->a.q = pl->q;
    pl->a.bsums = pl->bs;
    pl->a.bsum32 = pl->bs32;
    pl->a.xsum = pl->xsum;
}

/* Prepares the activations of token t. */
static void act_fill(const act_plan *pl, int t) {
    int64_t n = pl->a.n_cols, nb = pl->a.nb;
    const float *x = pl->x + t * n;
    if (pl->f16) pl->f16(pl->xr + t * n, x, n);
    else if (pl->q8_0) {
        const int8_t *q = pl->q + t * n;
        pl->q8_0(pl->d + t * nb, pl->q + t * n, x, n);
        for (int64_t b = 0; b < nb; b++, q += QK8_0) {
            int32_t s = 0;
            for (int j = 0; j < QK8_0; j++) s += q[j];
            pl->xsum[t * nb + b] = s;
        }
    }
    else if (pl->q8_k) {
        int16_t *bs = pl->bs + t * (n / 16);
        pl->q8_k(pl->d + t * nb, pl->q + t * n, bs, x, n);
        for (int64_t j = 0; j < n / 32; j++) pl->bs32[t * (n / 32) + j] = (int16_t)(bs[2 * j] + bs[2 * j + 1]); /* |.| <= 4096 */
    }
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

const quant_kernels quant_kernels_portable = {
    .f32 = rows_f32,
    .f16 = rows_f16,
    .bf16 = rows_bf16,
    .q8_0 = rows_q8_0,
    .q4_0 = rows_q4_0,
    .q4_k = rows_q4_k,
    .q6_k = rows_q6_k,
    .prep_q8_0 = act_q8_0,
    .prep_q8_k = act_q8_k,
    .prep_f16 = act_f16,
    .dot_rows = dot_rows_portable,
    .axpy_rows = axpy_rows_portable,
    .exp = exp_portable,
    .h2f = h2f_portable,
    .f2h = f2h_portable,
    .attn_scores_t = attn_scores_t_portable,
    .attn_max = attn_max_portable,
    .attn_tile = attn_tile_portable,
};

// ---- instruction-set selection -----------------------------------------------------------------

static _Atomic int g_isa = -1; /* -1: not chosen yet */

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

/* Best instruction set from CPUID, counting a feature only when the OS also saves the registers
 * it needs (XCR0: YMM state for AVX2; opmask and ZMM state for AVX-512). Bit positions are the
 * Intel SDM's: leaf 1 ECX 12 FMA, 27 OSXSAVE, 28 AVX, 29 F16C; leaf 7 EBX 5 AVX2, 16 AVX512F,
 * 30 AVX512BW, 31 AVX512VL; leaf 7 ECX 11 AVX512_VNNI. */
static quant_isa detect_isa(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return QUANT_ISA_PORTABLE;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx || !fma || !f16c) return QUANT_ISA_PORTABLE;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    if ((xlo & 0x6) != 0x6) return QUANT_ISA_PORTABLE; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return QUANT_ISA_PORTABLE;
    if (!((b >> 5) & 1)) return QUANT_ISA_PORTABLE; /* AVX2 */
    int avx512 = ((b >> 16) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1) && ((c >> 11) & 1);
    if (avx512 && (xlo & 0xE0) == 0xE0) return QUANT_ISA_AVX512; /* opmask, ZMM_Hi256, Hi16_ZMM state */
    return QUANT_ISA_AVX2;
}
#endif

quant_isa quant_isa_best(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    static _Atomic int best = -1; /* CPUID is slow under some hypervisors: ask once */
    int v = atomic_load_explicit(&best, memory_order_relaxed);
    if (v < 0) {
        v = (int)detect_isa();
        atomic_store_explicit(&best, v, memory_order_relaxed);
    }
    return (quant_isa)v;
#else
    return QUANT_ISA_PORTABLE;
#endif
}

quant_isa quant_isa_active(void) {
    int isa = atomic_load_explicit(&g_isa, memory_order_relaxed);
    if (isa < 0) {
        const char *no = getenv("ATTND_NO_SIMD");
        isa = (no && *no && strcmp(no, "0") != 0) ? QUANT_ISA_PORTABLE : (int)quant_isa_best();
        atomic_store_explicit(&g_isa, isa, memory_order_relaxed);
    }
    return (quant_isa)isa;
}

quant_isa quant_isa_force(quant_isa isa) {
    quant_isa prev = quant_isa_active();
    quant_isa best = quant_isa_best();
    if ((int)isa < 0) isa = QUANT_ISA_PORTABLE;
    if (isa > best) isa = best;
    atomic_store_explicit(&g_isa, (int)isa, memory_order_relaxed);
    return prev;
}

const char *quant_isa_name(quant_isa isa) {
    switch (isa) {
    case QUANT_ISA_PORTABLE: return "portable";
    case QUANT_ISA_AVX2: return "avx2";
    case QUANT_ISA_AVX512: return "avx512";
    }
    return "?";
}

static const quant_kernels *kernels_at(int isa) {
#if defined(__x86_64__)
    if (isa == QUANT_ISA_AVX512) return &quant_kernels_avx512;
    if (isa == QUANT_ISA_AVX2) return &quant_kernels_avx2;
#endif
    (void)isa;
    return &quant_kernels_portable;
}

/* The first non-NULL entry `field` of the kernel tables, from instruction set `isa` down. */
#define RESOLVE(dst, isa, field)                                                              \
    do {                                                                                      \
        (dst)->field = NULL;                                                                  \
        for (int i_ = (isa); i_ >= 0 && !(dst)->field; i_--) (dst)->field = kernels_at(i_)->field; \
    } while (0)

static quant_kernels g_resolved[QUANT_ISA_AVX512 + 1];
static pthread_once_t g_resolved_once = PTHREAD_ONCE_INIT;

static void resolve_tables(void) {
    for (int isa = 0; isa <= QUANT_ISA_AVX512; isa++) {
        quant_kernels *k = &g_resolved[isa];
        RESOLVE(k, isa, f32); RESOLVE(k, isa, f16); RESOLVE(k, isa, bf16); RESOLVE(k, isa, q8_0);
        RESOLVE(k, isa, q4_0); RESOLVE(k, isa, q4_k); RESOLVE(k, isa, q6_k); RESOLVE(k, isa, q4_0_packed);
        RESOLVE(k, isa, q4_k_packed); RESOLVE(k, isa, q6_k_packed);
        RESOLVE(k, isa, prep_q8_0); RESOLVE(k, isa, prep_q8_k); RESOLVE(k, isa, prep_f16);
        RESOLVE(k, isa, dot_rows); RESOLVE(k, isa, axpy_rows); RESOLVE(k, isa, exp); RESOLVE(k, isa, h2f);
        RESOLVE(k, isa, f2h); RESOLVE(k, isa, attn_scores_t); RESOLVE(k, isa, attn_max);
        RESOLVE(k, isa, attn_tile);
    }
}

const quant_kernels *quant_kernels_active(void) {
    pthread_once(&g_resolved_once, resolve_tables);
    return &g_resolved[quant_isa_active()];
}

static quant_rows_fn pick_kernel(const quant_kernels *k, uint32_t wtype) {
    switch (wtype) {
    case GGUF_TYPE_F32: return k->f32;
    case GGUF_TYPE_F16: return k->f16;
    case GGUF_TYPE_BF16: return k->bf16;
    case GGUF_TYPE_Q8_0: return k->q8_0;
    case GGUF_TYPE_Q4_0: return k->q4_0;
    case GGUF_TYPE_Q4_K: return k->q4_k;
    case GGUF_TYPE_Q6_K: return k->q6_k;
    default: return NULL;
    }
}

/* The kernel over quant_pack's layout of wtype; NULL: wtype is not packed on this instruction set. */
static quant_rows_fn packed_kernel(const quant_kernels *k, uint32_t wtype) {
    switch (wtype) {
    case GGUF_TYPE_Q4_0: return k->q4_0_packed;
    case GGUF_TYPE_Q4_K: return k->q4_k_packed;
    case GGUF_TYPE_Q6_K: return k->q6_k_packed;
    default: return NULL;
    }
}

// ---- vector primitives (dispatch) --------------------------------------------------------------

void quant_dot_rows(float *scores, const float *q, const float *K, int64_t k_stride, int n, int hd, float scale) {
    quant_kernels_active()->dot_rows(scores, q, K, k_stride, n, hd, scale);
}

void quant_axpy_rows(float *acc, const float *p, const float *V, int64_t v_stride, int n, int hd) {
    quant_kernels_active()->axpy_rows(acc, p, V, v_stride, n, hd);
}

void quant_exp(float *y, const float *x, int64_t n) { quant_kernels_active()->exp(y, x, n); }

void quant_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n) { quant_kernels_active()->h2f(dst, src, n); }

void quant_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n) { quant_kernels_active()->f2h(dst, src, n); }

// ---- weights repacked at load -------------------------------------------------------------------

/* Q4_0 rows -> quant_pack's layout (quant_impl.h): per 16-row group, pairs of blocks of
 * PACK_Q40_PAIR bytes; block b's nibbles at PACK_Q40_PAIR (b / 2) + 256 (b % 2), the 16 bytes of
 * each row split in four dwords, dword k of row i at 64 k + 4 i; its rows' 16 f16 scales at
 * PACK_Q40_PAIR (b / 2) + 512 + 32 (b % 2). Rows past n_rows (and an odd last block's partner)
 * stay zero (scale 0). */
static void pack_q4_0(uint8_t *dst, const uint8_t *w, size_t rb, int64_t n_rows, int64_t nb, size_t group_bytes) {
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *g = dst + (size_t)(r / PACK_ROWS) * group_bytes;
        int i = (int)(r % PACK_ROWS);
        const uint8_t *src = w + (size_t)r * rb;
        for (int64_t b = 0; b < nb; b++, src += Q4_0_BYTES) {
            uint8_t *pair = g + (size_t)(b / 2) * PACK_Q40_PAIR;
            memcpy(pair + 512 + 32 * (b % 2) + 2 * i, src, 2);
            for (int k = 0; k < 4; k++) memcpy(pair + 256 * (b % 2) + 64 * k + 4 * i, src + 2 + 4 * k, 4);
        }
    }
}

/* Q4_K rows -> quant_pack's layout (PACK_Q4K_BYTES per group and super-block, quant_impl.h). */
static void pack_q4_k(uint8_t *dst, const uint8_t *w, size_t rb, int64_t n_rows, int64_t nsb, size_t group_bytes) {
    for (int64_t r = 0; r < n_rows; r++) {
        int i = (int)(r % PACK_ROWS);
        const uint8_t *src = w + (size_t)r * rb;
        for (int64_t b = 0; b < nsb; b++, src += Q4_K_BYTES) {
            uint8_t *q = dst + (size_t)(r / PACK_ROWS) * group_bytes + (size_t)b * PACK_Q4K_BYTES;
            for (int k = 0; k < 32; k++) memcpy(q + 64 * k + 4 * i, src + 16 + 4 * k, 4);
            uint8_t sc[8], mn[8];
            quant_q4k_scales(src + 4, sc, mn);
            uint8_t *s = q + 32 * 64;
            for (int h = 0; h < 2; h++) {
                memcpy(s + 64 * h + 4 * i, sc + 4 * h, 4);
                memcpy(s + 128 + 64 * h + 4 * i, mn + 4 * h, 4);
            }
            memcpy(s + 256 + 2 * i, src, 2);      /* d */
            memcpy(s + 256 + 32 + 2 * i, src + 2, 2); /* dmin */
        }
    }
}

/* 2-bit field f (bits 2f, 2f + 1) of x */
#define F2(x, f) ((unsigned)((x) >> (2 * (f))) & 3u)

/* One 16-bit word of L0, L1 and H (PACK_Q6K_BYTES, quant_impl.h): the bytes whose unpacking gives
 * the 6-bit values p[0..1] (in W0), q (W1), r (W2), s (W3). Written as 2-bit fields a0..h1 (4 per
 * byte), each equation of the unpack solved in turn: every step uses fields set before it. */
static void pack_q6_k_word(uint8_t l0[2], uint8_t l1[2], uint8_t h[2], const uint8_t p[2], const uint8_t q[2],
                           const uint8_t r[2], const uint8_t s[2]) {
    unsigned a0[4], a1[4], b0[4], b1[4], h0[4], h1[4];
    h1[3] = F2(q[1], 2), h1[0] = F2(s[1], 2), b0[0] = F2(r[0], 0), b0[2] = F2(s[0], 0), b0[3] = F2(s[0], 1);
    h0[1] = F2(r[0], 2) ^ b0[2], a1[0] = F2(p[1], 0) ^ h1[0], h0[3] = F2(q[0], 2) ^ a1[0];
    b1[0] = F2(r[1], 0) ^ h0[3], h0[0] = F2(s[0], 2) ^ b1[0], b0[1] = F2(r[0], 1) ^ h0[0];
    b1[1] = F2(r[1], 1) ^ h1[0], b1[3] = F2(s[1], 1) ^ h0[3], a0[2] = F2(q[0], 0) ^ h0[1];
    h0[2] = F2(p[0], 2) ^ a0[2], a0[3] = F2(q[0], 1) ^ h0[2], b1[2] = F2(s[1], 0) ^ h0[2];
    h1[1] = F2(r[1], 2) ^ b1[2], a1[1] = F2(p[1], 1) ^ h1[1], a0[0] = F2(p[0], 0) ^ h0[0];
    a0[1] = F2(p[0], 1) ^ h0[1], a1[2] = F2(q[1], 0) ^ h1[1], h1[2] = F2(p[1], 2) ^ a1[2];
    a1[3] = F2(q[1], 1) ^ h1[2];
#define JOIN(v) (uint8_t)((v)[0] | (v)[1] << 2 | (v)[2] << 4 | (v)[3] << 6)
    l0[0] = JOIN(a0), l0[1] = JOIN(a1), l1[0] = JOIN(b0), l1[1] = JOIN(b1), h[0] = JOIN(h0), h[1] = JOIN(h1);
#undef JOIN
}
#undef F2

/* The unpack is linear over GF(2), so is its solution: a word's six stored bytes are the XOR of
 * one table entry per 6-bit value (t[k][v]: the solution for value v at input k, p[0] p[1] q[0]
 * ... s[1], zeros elsewhere; bytes l0[0..1], l1[0..1], h[0..1] from the low end). */
typedef struct q6_pack_tab {
    uint64_t t[8][64];
} q6_pack_tab;

static void q6_pack_tab_init(q6_pack_tab *tab) {
    for (int k = 0; k < 8; k++)
        for (int v = 0; v < 64; v++) {
            uint8_t in[8] = {0}, l0[2], l1[2], h[2];
            in[k] = (uint8_t)v;
            pack_q6_k_word(l0, l1, h, in, in + 2, in + 4, in + 6);
            uint8_t o[6] = {l0[0], l0[1], l1[0], l1[1], h[0], h[1]};
            uint64_t u = 0;
            for (int i = 0; i < 6; i++) u |= (uint64_t)o[i] << (8 * i);
            tab->t[k][v] = u;
        }
}

/* Q6_K rows -> quant_pack's layout (the d, then PACK_Q6K_BYTES per group and super-block). */
static void pack_q6_k(uint8_t *dst, const uint8_t *w, size_t rb, int64_t n_rows, int64_t nsb, size_t group_bytes) {
    q6_pack_tab tab;
    q6_pack_tab_init(&tab);
    for (int64_t r = 0; r < n_rows; r++) {
        int i = (int)(r % PACK_ROWS);
        const uint8_t *src = w + (size_t)r * rb;
        uint8_t *g = dst + (size_t)(r / PACK_ROWS) * group_bytes, *body = g + PACK_Q6K_HEAD(nsb);
        for (int64_t b = 0; b < nsb; b++, src += Q6_K_BYTES) {
            uint8_t *sb = body + (size_t)b * PACK_Q6K_BYTES, v[QK_K];
            q6_k_values(v, src);
            for (int j = 0; j < 16; j++) sb[16 * j + i] = src[192 + j]; /* scales */
            for (int j = 0; j < 16; j++)
                for (int h = 0; h < 2; h++) { /* W0..W3 are weights 16j + 4k.., this word their bytes 2h, 2h + 1 */
                    uint8_t *q = sb + 256 + 192 * j + 4 * i + 2 * h;
                    const uint8_t *x = v + 16 * j + 2 * h;
                    uint64_t u = 0;
                    for (int k = 0; k < 8; k++) u ^= tab.t[k][x[4 * (k / 2) + k % 2]];
                    for (int o = 0; o < 6; o++) q[64 * (o / 2) + o % 2] = (uint8_t)(u >> (8 * o));
                }
            memcpy(g + 32 * (size_t)b + 2 * i, src + 208, 2); /* d */
        }
    }
}

/* Packed copies are read start to end once per token: on 4 KB pages that is a TLB miss every 64
 * lines. The whole 2 MB pages of a copy are asked to be huge pages (where the kernel's policy is
 * "madvise"; a no-op where it is "never", and already so where it is "always"); its tail stays on
 * small pages, so no memory is spent on rounding up. */
#define HUGE_PAGE ((size_t)2 << 20)

static void *packed_alloc(size_t bytes) {
    if (bytes < HUGE_PAGE) return aligned_alloc(SCRATCH_ALIGN, bytes);
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice only: failure changes nothing */
#endif
    return p;
}

quant_packed *quant_pack(const void *w, uint32_t wtype, int64_t n_rows, int64_t n_cols) {
    const char *no = getenv("ATTND_NO_REPACK");
    if (no && *no && strcmp(no, "0") != 0) return NULL;
    const quant_kernels *k = quant_kernels_active();
    int q4_0 = wtype == GGUF_TYPE_Q4_0, q4_k = wtype == GGUF_TYPE_Q4_K;
    uint32_t be = gguf_type_block_elems(wtype);
    if (!packed_kernel(k, wtype) || n_rows <= 0 || n_cols <= 0 || n_cols % be != 0) return NULL;
    quant_packed *pk = calloc(1, sizeof *pk);
    if (!pk) return NULL;
    int64_t nb = n_cols / be, n_groups = (n_rows + PACK_ROWS - 1) / PACK_ROWS;
    *pk = (quant_packed){.wtype = wtype, .n_rows = n_rows, .n_cols = n_cols};
    /* round_up keeps every group 64-byte aligned */
    pk->group_bytes = q4_0 ? (size_t)(nb + 1) / 2 * PACK_Q40_PAIR
                      : q4_k ? (size_t)nb * PACK_Q4K_BYTES
                             : PACK_Q6K_HEAD(nb) + (size_t)nb * PACK_Q6K_BYTES;
    pk->bytes = (size_t)n_groups * pk->group_bytes;
    pk->data = packed_alloc(pk->bytes);
    if (!pk->data) {
        free(pk);
        return NULL;
    }
    memset(pk->data + (size_t)(n_groups - 1) * pk->group_bytes, 0, pk->group_bytes); /* padding rows */
    if (q4_0 && nb % 2) /* an odd last block's partner */
        for (int64_t g = 0; g < n_groups; g++)
            memset(pk->data + (size_t)g * pk->group_bytes + (size_t)(nb / 2) * PACK_Q40_PAIR + 256, 0, PACK_Q40_PAIR - 256);
    size_t rb = quant_row_bytes(wtype, n_cols);
    if (q4_0) pack_q4_0(pk->data, w, rb, n_rows, nb, pk->group_bytes);
    else if (q4_k) pack_q4_k(pk->data, w, rb, n_rows, nb, pk->group_bytes);
    else pack_q6_k(pk->data, w, rb, n_rows, nb, pk->group_bytes);
    return pk;
}

void quant_packed_destroy(quant_packed *pk) {
    if (!pk) return;
    free(pk->data);
    free(pk);
}

size_t quant_packed_bytes(const quant_packed *pk) { return pk ? pk->bytes : 0; }

// ---- matmul driver -----------------------------------------------------------------------------

/* Below this many multiply-adds (~30 us of one-thread work) a parallel region is not worth its
 * cost: ~1-5 us to wake the team on an idle machine, but up to ~0.5 ms when the cores are shared
 * with other work (measured: rand-Q4_K decode at 2 threads fell from 3700 to 164 tok/s with a
 * 2^17 threshold). Decode on small models stays serial; prefill and large matrices split. */
#define MATMUL_PAR_MIN_MACS (1 << 20)
/* Rows handed out per scheduling unit: a multiple of the kernels' row tiles (AVX-512: 16). */
#define ROW_GRAIN 16
/* Row chunks per thread: small enough that a thread descheduled in the middle of one (the cores
 * are shared with other work) holds back little; large enough that claiming costs nothing. */
#define CHUNKS_PER_THREAD 16

/* One weight of a matmul job: its rows in chunks of `per`. */
typedef struct matmul_part {
    float *out;
    const uint8_t *w; /* the mapping, or the packed copy (rb = its group bytes) */
    size_t rb;
    int64_t n_rows, per, n_chunks;
    quant_rows_fn fn;
} matmul_part;

/* One matmul call as pool tasks: first the activations of each token, then every part's row
 * chunks, numbered part after part. */
typedef struct matmul_job {
    matmul_part part[QUANT_MM_MAX];
    int n_part;
    act_plan *pl;
    int n_tok;
} matmul_job;

static void matmul_fill_task(void *ctx, int t, int worker) {
    (void)worker;
    act_fill(((matmul_job *)ctx)->pl, t);
}

static void matmul_rows_task(void *ctx, int c, int worker) {
    (void)worker;
    const matmul_job *j = ctx;
    const matmul_part *p = j->part;
    while (c >= p->n_chunks) c -= (int)(p++)->n_chunks;
    int64_t r0 = c * p->per, r1 = r0 + p->per < p->n_rows ? r0 + p->per : p->n_rows;
    p->fn(p->out, p->w, p->rb, r0, r1, p->n_rows, &j->pl->a, j->n_tok);
}

/* Which activation form wtype's kernels read: weights of one form can share it. */
static int act_form(uint32_t wtype) {
    switch (wtype) {
    case GGUF_TYPE_Q8_0:
    case GGUF_TYPE_Q4_0: return GGUF_TYPE_Q8_0;
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_Q6_K: return GGUF_TYPE_Q4_K;
    default: return (int)wtype;
    }
}

/* m's kernel and the bytes it reads (the packed copy where the instruction set has a kernel for it). */
static matmul_part matmul_part_of(const quant_kernels *k, const quant_mm *m, int64_t n_cols) {
    uint32_t be = gguf_type_block_elems(m->wtype);
    ATTND_ASSERT(gguf_type_computable(m->wtype) && be > 0);
    ATTND_ASSERT(m->n_rows >= 0 && n_cols > 0 && n_cols % be == 0);
    matmul_part p = {m->out, m->w, quant_row_bytes(m->wtype, n_cols), m->n_rows, m->n_rows, 1, pick_kernel(k, m->wtype)};
    ATTND_ASSERT(p.fn != NULL);
    quant_rows_fn pfn = packed_kernel(k, m->wtype);
    if (m->pk && pfn) {
        ATTND_ASSERT(m->pk->wtype == m->wtype && m->pk->n_rows == m->n_rows && m->pk->n_cols == n_cols);
        p.fn = pfn;
        p.w = m->pk->data;
        p.rb = m->pk->group_bytes;
    }
    return p;
}

/* Splits p's rows into chunks for n_threads: a multiple of ROW_GRAIN each, CHUNKS_PER_THREAD a thread. */
static void matmul_part_split(matmul_part *p, int n_threads) {
    int64_t n_units = (p->n_rows + ROW_GRAIN - 1) / ROW_GRAIN;
    int64_t n_chunks = (int64_t)n_threads * CHUNKS_PER_THREAD;
    if (n_chunks > n_units) n_chunks = n_units;
    p->per = (n_units + n_chunks - 1) / n_chunks * ROW_GRAIN;
    p->n_chunks = (p->n_rows + p->per - 1) / p->per;
}

void quant_matmul(float *out, const void *w, uint32_t wtype, int64_t n_rows, int64_t n_cols, const float *x,
                  int n_tok, void *scratch, int n_threads) {
    quant_matmul_packed(out, w, NULL, wtype, n_rows, n_cols, x, n_tok, scratch, n_threads);
}

void quant_matmul_packed(float *out, const void *w, const quant_packed *pk, uint32_t wtype, int64_t n_rows,
                         int64_t n_cols, const float *x, int n_tok, void *scratch, int n_threads) {
    quant_mm m = {out, w, pk, wtype, n_rows};
    quant_matmul_many(&m, 1, n_cols, x, n_tok, scratch, n_threads);
}

void quant_matmul_many(const quant_mm *mm, int n_mm, int64_t n_cols, const float *x, int n_tok, void *scratch,
                       int n_threads) {
    ATTND_ASSERT(n_mm >= 1 && n_mm <= QUANT_MM_MAX && n_tok >= 0);
    for (int i = 1; i < n_mm; i++)
        if (act_form(mm[i].wtype) != act_form(mm[0].wtype)) { /* activations rounded differently: one by one */
            for (int m = 0; m < n_mm; m++) quant_matmul_many(&mm[m], 1, n_cols, x, n_tok, scratch, n_threads);
            return;
        }
    const quant_kernels *k = quant_kernels_active();
    matmul_job j = {.n_tok = n_tok};
    double work = 0;
    int64_t rows = 0;
    for (int i = 0; i < n_mm; i++) {
        matmul_part p = matmul_part_of(k, &mm[i], n_cols);
        if (p.n_rows == 0) continue;
        j.part[j.n_part++] = p;
        work += (double)p.n_rows * (double)n_cols * (double)n_tok;
        rows += p.n_rows;
    }
    if (j.n_part == 0 || n_tok == 0) return;

    act_plan pl;
    act_plan_init(&pl, k, mm[0].wtype, x, n_tok, n_cols, scratch);
    j.pl = &pl;
    if (n_threads <= 1 || work < MATMUL_PAR_MIN_MACS || rows < 2 * ROW_GRAIN) {
        for (int t = 0; t < n_tok; t++) act_fill(&pl, t);
        for (int i = 0; i < j.n_part; i++) matmul_rows_task(&j, i, 0); /* chunk i: all of part i's rows */
        return;
    }
    /* chunks claimed one at a time by the engine's pool (threads.h) */
    int64_t n_chunks = 0;
    for (int i = 0; i < j.n_part; i++) {
        matmul_part_split(&j.part[i], n_threads);
        n_chunks += j.part[i].n_chunks;
    }
    threads_run(n_threads, n_tok, matmul_fill_task, &j);
    threads_run(n_threads, (int)n_chunks, matmul_rows_task, &j);
}
