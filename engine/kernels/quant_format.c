/*
 * quant_format.c — the weight formats themselves: half/bfloat conversions, row sizes, and the
 * dequantization of every computable type (block layouts as in the GGUF/ggml spec), with the
 * type-traits table built from QUANT_TYPE_LIST (quant_types.h). Shared by the kernels, the model
 * loader (norms, embeddings) and `attnd quantize` (quantize.c re-encodes dequantized rows).
 *
 * Everything here is exact: the dequantizers compute d * q (or d * q - m) in float as the format
 * definitions state, and the tests compare them bit for bit with values built by hand.
 */
#include <string.h>

#include "attnd/common.h"
#include "attnd/gguf.h"
#include "quant.h"
#include "quant_impl.h"
#include "quant_iq.h"
#include "quant_types.h"

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

// ---- sizes -------------------------------------------------------------------------------------

size_t quant_row_bytes(uint32_t type, int64_t n_cols) {
    uint32_t be = gguf_type_block_elems(type), bb = gguf_type_block_bytes(type);
    if (be == 0 || n_cols < 0) return 0;
    return (size_t)(n_cols / be) * bb;
}

// ---- dequantization ----------------------------------------------------------------------------

/* F32/F16/BF16 have blocks of one element: nb is the element count. */
static void dequant_f32(float *y, const uint8_t *src, int64_t nb) { memcpy(y, src, (size_t)nb * sizeof(float)); }

static void dequant_f16(float *y, const uint8_t *src, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) y[i] = quant_f16_to_f32(quant_ld16(src + 2 * i));
}

static void dequant_bf16(float *y, const uint8_t *src, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) y[i] = quant_bf16_to_f32(quant_ld16(src + 2 * i));
}

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

void quant_q6k_values(uint8_t v[QK_K], const uint8_t *blk) {
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
        quant_q6k_values(v, src);
        for (int e = 0; e < QK_K; e++) y[e] = d * (float)(sc[e / 16] * (v[e] - 32));
    }
}

const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Q4_1/Q5_1/Q5_0/IQ4_NL/MXFP4 share the 16 bytes of nibbles of Q4_0: element j is the low
 * nibble of byte j, element j + 16 its high nibble; Q5's fifth bits are bit j of qh. */
static void nibbles32(uint8_t v[32], const uint8_t *qs, uint32_t qh) {
    for (int j = 0; j < 16; j++) {
        v[j] = (uint8_t)((qs[j] & 0xF) | ((qh >> j) & 1) << 4);
        v[j + 16] = (uint8_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
}

static void dequant_q4_1(float *y, const uint8_t *src, int64_t nb) {
    uint8_t v[32];
    for (int64_t b = 0; b < nb; b++, src += Q4_1_BYTES, y += 32) {
        float d = quant_f16_to_f32(quant_ld16(src)), m = quant_f16_to_f32(quant_ld16(src + 2));
        nibbles32(v, src + 4, 0);
        for (int j = 0; j < 32; j++) y[j] = (float)v[j] * d + m;
    }
}

static void dequant_q5_0(float *y, const uint8_t *src, int64_t nb) {
    uint8_t v[32];
    for (int64_t b = 0; b < nb; b++, src += Q5_0_BYTES, y += 32) {
        float d = quant_f16_to_f32(quant_ld16(src));
        nibbles32(v, src + 6, ld32(src + 2));
        for (int j = 0; j < 32; j++) y[j] = (float)(v[j] - 16) * d;
    }
}

static void dequant_q5_1(float *y, const uint8_t *src, int64_t nb) {
    uint8_t v[32];
    for (int64_t b = 0; b < nb; b++, src += Q5_1_BYTES, y += 32) {
        float d = quant_f16_to_f32(quant_ld16(src)), m = quant_f16_to_f32(quant_ld16(src + 2));
        nibbles32(v, src + 8, ld32(src + 4));
        for (int j = 0; j < 32; j++) y[j] = (float)v[j] * d + m;
    }
}

static void dequant_iq4_nl(float *y, const uint8_t *src, int64_t nb) {
    uint8_t v[32];
    for (int64_t b = 0; b < nb; b++, src += IQ4_NL_BYTES, y += 32) {
        float d = quant_f16_to_f32(quant_ld16(src));
        nibbles32(v, src + 2, 0);
        for (int j = 0; j < 32; j++) y[j] = d * (float)quant_iq4nl_values[v[j]];
    }
}

static void dequant_mxfp4(float *y, const uint8_t *src, int64_t nb) {
    uint8_t v[32];
    for (int64_t b = 0; b < nb; b++, src += MXFP4_BYTES, y += 32) {
        float d = quant_e8m0_half(src[0]);
        nibbles32(v, src + 1, 0);
        for (int j = 0; j < 32; j++) y[j] = (float)quant_mxfp4_values[v[j]] * d;
    }
}

/* Q2_K: element 128h + 32k + l (h < 2, k < 4, l < 32) is bits 2k, 2k + 1 of qs[32h + l]; its
 * sub-block of 16 is 8h + 2k + l / 16, whose scales byte holds the scale (low nibble) and the
 * min (high nibble): x = d * sc * q - dmin * mn. */
static void dequant_q2_k(float *y, const uint8_t *src, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += Q2_K_BYTES, y += QK_K) {
        const uint8_t *sc = src, *qs = src + 16;
        float d = quant_f16_to_f32(quant_ld16(src + 80)), dmin = quant_f16_to_f32(quant_ld16(src + 82));
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, k = e % 128 / 32, l = e % 32, s = sc[e / 16];
            int q = (qs[32 * h + l] >> (2 * k)) & 3;
            y[e] = d * (float)(s & 0xF) * (float)q - dmin * (float)(s >> 4);
        }
    }
}

/* The 3-bit values (-4..3) of one Q3_K super-block, in element order: the low 2 bits as Q2_K's,
 * the third bit is bit 4h + k of hmask[l] (set: +0, clear: -4). */
static void q3_k_values(int8_t v[QK_K], const uint8_t *blk) {
    const uint8_t *hm = blk, *qs = blk + 32;
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, k = e % 128 / 32, l = e % 32;
        int q = (qs[32 * h + l] >> (2 * k)) & 3;
        v[e] = (int8_t)(q - ((hm[l] >> (4 * h + k)) & 1 ? 0 : 4));
    }
}

static void dequant_q3_k(float *y, const uint8_t *src, int64_t nb) {
    int8_t v[QK_K], sc[16];
    for (int64_t b = 0; b < nb; b++, src += Q3_K_BYTES, y += QK_K) {
        float d = quant_f16_to_f32(quant_ld16(src + 108));
        q3_k_values(v, src);
        quant_q3k_scales(src + 96, sc);
        for (int e = 0; e < QK_K; e++) y[e] = d * (float)sc[e / 16] * (float)v[e];
    }
}

/* Q5_K: Q4_K's layout with a fifth bit per element, bit 2p + (high nibble) of qh[l] for element
 * 64p + 32 (high nibble) + l. */
static void dequant_q5_k(float *y, const uint8_t *src, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, src += Q5_K_BYTES) {
        float d = quant_f16_to_f32(quant_ld16(src)), dmin = quant_f16_to_f32(quant_ld16(src + 2));
        uint8_t sc[8], mn[8];
        quant_q4k_scales(src + 4, sc, mn);
        const uint8_t *qh = src + 16, *q = src + 48;
        for (int p = 0; p < 4; p++, q += 32, y += 64) {
            float d1 = d * sc[2 * p], m1 = dmin * mn[2 * p], d2 = d * sc[2 * p + 1], m2 = dmin * mn[2 * p + 1];
            for (int l = 0; l < 32; l++) y[l] = d1 * (float)((q[l] & 0xF) | ((qh[l] >> (2 * p)) & 1) << 4) - m1;
            for (int l = 0; l < 32; l++) y[32 + l] = d2 * (float)((q[l] >> 4) | ((qh[l] >> (2 * p + 1)) & 1) << 4) - m2;
        }
    }
}

/* IQ4_XS: sub-block j of 32 (scale sc[j]) keeps its nibbles in qs[16j .. 16j + 16), as IQ4_NL. */
static void dequant_iq4_xs(float *y, const uint8_t *src, int64_t nb) {
    int8_t sc[8];
    uint8_t v[32];
    for (int64_t b = 0; b < nb; b++, src += IQ4_XS_BYTES) {
        float d = quant_f16_to_f32(quant_ld16(src));
        quant_iq4xs_scales(src, sc);
        for (int j = 0; j < 8; j++, y += 32) {
            float dl = d * (float)sc[j];
            nibbles32(v, src + 8 + 16 * j, 0);
            for (int i = 0; i < 32; i++) y[i] = dl * (float)quant_iq4nl_values[v[i]];
        }
    }
}

// ---- the type-traits table ---------------------------------------------------------------------

const quant_traits quant_traits_table[QT_COUNT] = {
#define QT_TRAITS_(N, n, A) [QT_##N] = {GGUF_TYPE_##N, QUANT_ACT_##A, dequant_##n},
    QUANT_TYPE_LIST(QT_TRAITS_)
#undef QT_TRAITS_
};

int quant_type_index(uint32_t gguf_type) {
    for (int i = 0; i < QT_COUNT; i++)
        if (quant_traits_table[i].type == gguf_type) return i;
    return -1;
}

const quant_traits *quant_traits_of(uint32_t gguf_type) {
    int i = quant_type_index(gguf_type);
    return i < 0 ? NULL : &quant_traits_table[i];
}

bool gguf_type_computable(uint32_t type) { return quant_type_index(type) >= 0; }
