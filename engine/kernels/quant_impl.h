/*
 * quant_impl.h — (private to engine/kernels/) what the driver (quant.c), the reference kernels
 * (quant_ref.c), the choice of instruction set (quant_dispatch.c), the packing (quant_pack.c) and
 * the instruction-set specific kernel files (x86/, amx/) share: the prepared activation view, block
 * layouts, the packed layouts, the row-range kernel signature and the dispatch table.
 *
 * A row-range kernel computes out[t * n_rows + r] for r0 <= r < r1 and every token t, reading
 * each weight row once and reusing it (hot in L1) for all n_tok activation rows.
 */
#ifndef ATTND_QUANT_IMPL_H
#define ATTND_QUANT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant_types.h"

/* Block geometry (GGUF/ggml spec). */
#define QK8_0 32   /* Q8_0: f16 d; int8 qs[32]                                         34 bytes */
#define QK4_0 32   /* Q4_0: f16 d; uint8 qs[16]                                        18 bytes */
#define QK_K 256   /* Q4_K: f16 d, dmin; uint8 scales[12]; uint8 qs[128]              144 bytes */
               /* Q6_K: uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d      210 bytes */
#define Q8_0_BYTES 34
#define Q4_0_BYTES 18
#define Q4_K_BYTES 144
#define Q6_K_BYTES 210
/* 32-element blocks */
#define Q4_1_BYTES 20   /* f16 d, m; uint8 qs[16]; x = d * q + m                                  */
#define Q5_0_BYTES 22   /* f16 d; uint8 qh[4] (bit j: element j's fifth bit); qs[16]; d * (q - 16) */
#define Q5_1_BYTES 24   /* f16 d, m; uint8 qh[4]; qs[16]; x = d * q + m                            */
#define IQ4_NL_BYTES 18 /* f16 d; uint8 qs[16]; x = d * quant_iq4nl_values[q]                      */
#define MXFP4_BYTES 17  /* uint8 e (E8M0); qs[16]; x = 2^(e - 128) * quant_mxfp4_values[q]         */
/* 256-element super-blocks */
#define Q2_K_BYTES 84   /* uint8 scales[16] (low: scale, high: min); qs[64]; f16 d, dmin          */
#define Q3_K_BYTES 110  /* uint8 hmask[32]; qs[64]; scales[12] (16 x 6 bits, minus 32); f16 d      */
#define Q5_K_BYTES 176  /* f16 d, dmin; scales[12] (as Q4_K); qh[32]; qs[128]                      */
#define IQ4_XS_BYTES 136 /* f16 d; uint16 scales_h; uint8 scales_l[4]; qs[128] (8 x 6-bit scales) */

/*
 * Activations prepared once per quant_matmul call (in the caller's scratch), in whatever form
 * the weight type's dot product consumes. Structure-of-arrays so SIMD loads stay aligned.
 */
typedef struct quant_act {
    int64_t n_cols;
    int64_t nb;            /* blocks per activation row (Q8 forms) */
    const float *x;        /* F32: (n_tok, n_cols) the caller's floats; F16/BF16: the same values
                              rounded to f16/bf16 precision (kept as floats: no conversion per row) */
    const float *d;        /* Q8_0/Q4_0/K:   (n_tok, nb) block scales */
    const int8_t *q;       /* Q8_0/Q4_0/K:   (n_tok, n_cols) quantized values */
    const int16_t *bsums;  /* Q4_K/Q6_K:     (n_tok, n_cols / 16) sums of 16 consecutive q */
    const int16_t *bsum32; /* Q4_K/Q6_K:     (n_tok, n_cols / 32) sums of 32 consecutive q (Q4_K's
                              sub-blocks: a dword holds two, for its minimums two at a time) */
    const int32_t *xsum;   /* Q8_0/Q4_0:     (n_tok, nb) sums of each block's 32 q (lets a kernel
                              multiply unsigned-biased weights and subtract the bias once) */
    const float *s;        /* Q8_1 form:     (n_tok, nb) d * (sum of the block's q), rounded to f16
                              precision as llama.cpp's block_q8_1.s (Q4_1/Q5_1 minimums) */
    const int32_t *off3;   /* Q8_K form:     (n_tok, n_cols / 16) -4 bsums as int32: Q3_K's offset
                              (u = q + 4) per sub-block, where packed Q3_K's sums start */
    const uint16_t *xb;    /* bf16 tiles:    the floats rounded to bf16 (nearest even) in tiles of 16
                              tokens x 32 columns (1 KB, contiguous: one tile load of 16 lines in
                              one page), token t's column c at QUANT_XB_AT(t, c, n_cols); for the
                              AMX bf16 kernels. NULL unless the table asks (bf16_from) */
    bool gemm;             /* F16/BF16 from GM_MIN_TOK tokens: the float GEMM may run (its sums in
                              another order than the dot-product tiles': quant_mm.gemm) */
} quant_act;

typedef void (*quant_rows_fn)(float *out, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                              int64_t n_rows, const quant_act *a, int n_tok);

/* Activation preparation (see quant_ref.c): Q8_0 form, Q8_K form, f16 rounding; n a block multiple. */
typedef void (*quant_prep_q8_0_fn)(float *d, int8_t *q, const float *x, int64_t n);
typedef void (*quant_prep_q8_k_fn)(float *d, int8_t *q, int16_t *bsums, const float *x, int64_t n);
typedef void (*quant_prep_f16_fn)(float *xr, const float *x, int64_t n);
/* The bf16 form's layout: tiles of 16 tokens x 32 columns, token-block-major (n % 32 == 0) */
#define QUANT_XB_AT(t, c, n) ((((int64_t)(t) / 16) * ((n) / 32) + (c) / 32) * 512 + ((t) % 16) * 32 + (c) % 32)
/* One token's n values into the bf16 form: 32 at xb, the next 32 at xb + 512, ... */
typedef void (*quant_prep_bf16_fn)(uint16_t *xb, const float *x, int64_t n);
/* The vector primitives of quant.h, per instruction set. */
typedef void (*quant_dot_rows_fn)(float *scores, const float *q, const float *K, int64_t k_stride, int n, int hd,
                                  float scale);
typedef void (*quant_axpy_rows_fn)(float *acc, const float *p, const float *V, int64_t v_stride, int n, int hd);
typedef void (*quant_exp_fn)(float *y, const float *x, int64_t n);
typedef void (*quant_h2f_fn)(float *dst, const uint16_t *src, int64_t n);
typedef void (*quant_f2h_fn)(uint16_t *dst, const float *src, int64_t n);
typedef void (*quant_gemm_fn)(float *C, int64_t ldc, const float *A, int64_t lda, const float *B, int64_t ldb, int m,
                              int n, int k, int acc);
typedef void (*quant_softmax_fn)(float *s, int n, float scale);
typedef void (*quant_gelu_fn)(float *y, const float *x, int64_t n);

/* Packed weights (quant.h): 16-row groups of PACK_ROWS rows, group g at data + g * group_bytes. A
 * packed row-range kernel takes (data, group_bytes) for (w, row_bytes), r0 a multiple of 16. */
#define PACK_ROWS 16
/* Q8_0, per 16-row group and pair of blocks: 2 x 8 x 64 bytes of weights made unsigned (q ^ 0x80,
 * i.e. q + 128; vector k of a block holds bytes 4k..4k+3 of each row, row i at 4i), then 2 x 16
 * f16 scales: 34 bytes per row and block, as mapped. */
#define PACK_Q80_PAIR (2 * 8 * 64 + 64)
/* Q4_0, per 16-row group and pair of blocks: 2 x 4 x 64 bytes of nibbles, then 2 x 16 f16 scales
 * (one run: the scales travel with their nibbles). 18 bytes per row and block, as mapped. */
#define PACK_Q40_PAIR (2 * 4 * 64 + 64)
/* Q4_K, per 16-row group and super-block: 32 x 64 bytes of nibbles (bytes 4k..4k+3 of each row's
 * 128, side by side), then 2 x 64 bytes of scales and 2 x 64 of mins (the 6-bit values unpacked
 * to bytes, 4 per row per vector), then 16 d and 16 dmin as f16: 148 bytes per row, 144 mapped. */
#define PACK_Q4K_BYTES (32 * 64 + 4 * 64 + 64)
/* Q5_K, per 16-row group and super-block: Q4_K's PACK_Q4K_BYTES (its nibbles, scales, mins, d and
 * dmin at the same offsets), then 8 x 64 bytes of fifth bits: vector kk holds qh bytes 4kk..4kk+3
 * of each row (row i at 4i), so the byte beside nibble vector 8p + kk's byte holds in bit 2p the
 * fifth bit of its low nibble and in bit 2p + 1 that of its high one (sub-block s's bit is bit s:
 * one 16-bit shift and a mask per vector). 180 bytes per row and super-block, 176 mapped. */
#define PACK_Q5K_BYTES (PACK_Q4K_BYTES + 8 * 64)
/* IQ4_XS, per 16-row group and super-block: 32 x 64 bytes of nibbles as Q4_K's (vector k: qs bytes
 * 4k..4k+3 of each row, so sub-block j is vectors 4j..4j+3, weights 4kk.. in the low nibbles and
 * 16 + 4kk.. in the high ones, as IQ4_NL's blocks), then the signed sub-block scales (-32..31) as
 * bytes, byte 16j + i row i's scale j (128 bytes), then 16 f16 d, padded to 64: 140 bytes per row
 * and super-block, 136 mapped. */
#define PACK_IQ4XS_BYTES (32 * 64 + 3 * 64)
/* Q2_K, per 16-row group and super-block: 16 x 64 bytes of 2-bit fields (vector v: qs bytes
 * 4v..4v+3 of each row, row i at 4i; bits 2k of vector 8h + 4 half + kk are weights 4 kk.. of
 * sub-block 8h + 2k + half), then the raw scale bytes (low nibble the scale, high the minimum)
 * pair by pair, byte 32p + 2i + h row i's byte 2p + h (256 bytes: one vpmovzxbw gives a pair's
 * two as the words of each lane), then 16 f16 d and 16 f16 dmin: 84 bytes per row and
 * super-block, as mapped. */
#define PACK_Q2K_BYTES (16 * 64 + 256 + 64)
/* Q3_K, per 16-row group: first each super-block's 16 d (f16; PACK_Q3K_HEAD bytes, as Q6_K's),
 * then per super-block 8 triples of 64-byte vectors A, B, C (4 bytes per row, row i at 4i), triple
 * p holding sub-blocks 2p and 2p + 1. Its eight weight vectors (u = q + 4, 0..7; vector kk of a
 * sub-block: weights 16j + 4kk..) are, with 16-bit shifts and 7 = 0x07 in every byte, sub-block
 * 2p: 7 & A, 7 & (A >> 3), 7 & B, 7 & (B >> 3); sub-block 2p + 1: 7 & C, 7 & (C >> 3),
 * 7 & ((A >> 6) ^ (B >> 4)), 7 & ((C >> 6) ^ (B >> 5)) (the stored bits are the one solution,
 * pack_q3_k); then the signed 6-bit scales as bytes, byte 32p + 2i + h row i's scale 2p + h (so
 * that one vpmovsxbw gives a pair's scales as the two words of each lane): 114 bytes per row and
 * super-block, 110 mapped. */
#define PACK_Q3K_BYTES (24 * 64 + 256)
#define PACK_Q3K_HEAD(nb) (((size_t)(nb) * 32 + 63) / 64 * 64)
/* Q6_K, per 16-row group and super-block: 16 x 16 bytes of scales (byte 16j + i: row i's sc[j]),
 * then per sub-block j (weights 16j..16j+15) three 64-byte vectors L0, L1, H, 4 bytes per row
 * (row i at 4i). Its four weight vectors (weights 16j + 4k.., k < 4) are, per byte, W0 = 63 & (L0 ^ H), W1 = 63 & ((L0 >> 4) ^ (H >> 2)), W2 = 63 & (L1 ^ (H << 2)),
 * W3 = 63 & ((L1 >> 4) ^ (H << 4)) with 16-bit shifts: the 6-bit values are stored as the one
 * solution of those XOR equations (pack_q6_k), so each vector costs one vpternlogd (plus 5 shifts
 * per 4). The group starts with its d (16 f16 per super-block, PACK_Q6K_HEAD bytes), so that it is
 * one sequential run: 210 bytes per row and super-block, as mapped. */
#define PACK_Q6K_BYTES (16 * 16 + 16 * 3 * 64)
#define PACK_Q6K_HEAD(nb) (((size_t)(nb) * 32 + 63) / 64 * 64)
/* Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 (the 32-element types of issue 27), per 16-row group and
 * pair of blocks: per block PACK_B32_QBYTES(h) bytes, 4 x 64 of nibbles in Q4_0's order (vector k:
 * qs bytes 4k..4k+3 of each row, row i at 4i: weights 4k.. low, 16 + 4k.. high), then where the
 * type has fifth bits (h: Q5_0, Q5_1) one 64-byte vector H of them, byte 4i + j of row i holding in
 * bit k < 4 the fifth bit of weight 4k + j and in bit 4 + k that of weight 16 + 4k + j (so vector
 * k's bits are (H << (4 - k)) & 0x10 and (H >> k) & 0x10, one shift each); then the pair's
 * scales: 2 x 16 f16 d (MXFP4: 2 x 16 E8M0 bytes), and where the type has a minimum (m: Q4_1,
 * Q5_1) 2 x 16 f16 m, padded to 64 bytes. Bytes per row and block as mapped (MXFP4: 18 for 17). */
#define PACK_B32_QBYTES(h) (256 + 64 * (h))
/* Q4_1 / Q5_1: every kernel from the register tiles up (G_NB, quant_gemm512_tiles.inc; the AMX tiles)
 * adds the minimum terms m s of a run of QUANT_MIN_RUN blocks together, after the run's blocks */
#define QUANT_MIN_RUN 16
#define PACK_B32_PAIR(h, m) (2 * PACK_B32_QBYTES(h) + 64 * (1 + (m)))
struct quant_packed {
    uint32_t wtype;
    int64_t n_rows, n_cols;
    size_t group_bytes; /* Q8_0 / Q4_0: ceil(nb / 2) * PACK_Q80_PAIR / PACK_Q40_PAIR, pairs of blocks;
                           Q4_K / Q5_K / IQ4_XS / Q2_K: nb * PACK_Q4K_BYTES / PACK_Q5K_BYTES / PACK_IQ4XS_BYTES /
                           PACK_Q2K_BYTES,
                           super-block after super-block; Q6_K / Q3_K: PACK_Q6K_HEAD(nb) + nb * PACK_Q6K_BYTES
                           / PACK_Q3K_HEAD(nb) + nb * PACK_Q3K_BYTES;
                           the 32-element types: ceil(nb / 2) * PACK_B32_PAIR(h, m)
                           (a multiple of 64 in every case) */
    size_t bytes;
    uint8_t *data;      /* (ceil(n_rows / 16) * group_bytes), 64-byte aligned */
};

/* How far ahead the packed decode kernels ask for their weights (software prefetch), per CPU
 * family: one kernel per instruction set, this its parameter (quant_tune_get, quant_tune.c).
 * dist: bytes ahead of the read position (0: the hardware prefetchers alone); nta: the hint
 * (1: non-temporal, PREFETCHNTA, so the streamed weights displace less of L2/L3; 0: into L2).
 * ATTND_PF_DIST=bytes[,nta] overrides the choice (A/B runs in one binary).
 * vbmi: the CPU has AVX512_VBMI and GFNI, so the "avx512" table runs issue 47's low-bit types
 * through x86/quant_iq_vbmi.inc (the codebook types bit-identical, the ternary ones within
 * rounding; faster); ATTND_NO_VBMI=1 turns it off. */
typedef struct quant_tune {
    int pf_dist;
    int pf_nta;
    int vbmi;
} quant_tune;
const quant_tune *quant_tune_get(void);
/* For tests and benchmarks: sets quant_tune.vbmi (on only where the CPU has VBMI) and returns the
 * value it replaced; not to be called while another thread is inside quant_matmul. */
int quant_tune_vbmi_force(int on);

/* Per instruction set: one row-range kernel per computable weight type (indexed by QT_*, the
 * dense index of quant_types.h) and the activation preparations; any NULL entry falls back to the
 * next instruction set down (the portable table fills every rows[] entry). */
typedef struct quant_kernels {
    quant_rows_fn rows[QT_COUNT];
    quant_rows_fn packed[QT_COUNT]; /* over quant_pack's layouts; NULL: the type is not packed */
    quant_prep_q8_0_fn prep_q8_0;
    quant_prep_q8_k_fn prep_q8_k;
    quant_prep_f16_fn prep_f16;
    quant_prep_bf16_fn prep_bf16; /* the bf16 form (quant_act.xb) */
    /* The types whose kernels multiply bf16 tiles, and from how many tokens (0: never): the driver
     * then also fills quant_act.xb (when quant_amx_math_active() is QUANT_AMX_BF16) */
    int bf16_from[QT_COUNT];
    quant_dot_rows_fn dot_rows;
    quant_axpy_rows_fn axpy_rows;
    quant_exp_fn exp;
    quant_h2f_fn h2f;
    quant_f2h_fn f2h;
    quant_gemm_fn gemm;
    quant_softmax_fn softmax;
    quant_gelu_fn gelu;
} quant_kernels;

extern const quant_kernels quant_kernels_portable;
#if defined(__x86_64__)
extern const quant_kernels quant_kernels_avx2;
extern const quant_kernels quant_kernels_avx512;
extern const quant_kernels quant_kernels_amx; /* quant_amx.c: only the tile GEMM entries */
#endif
extern const quant_kernels quant_kernels_amx_emu; /* quant_amx_emu.c: the same over emulated tiles */

/* The one dispatch table (quant_dispatch.c): the kernels of the active instruction set
 * (quant_isa_active), every entry filled (a NULL entry of an instruction set's table is taken
 * from the next one down). Built once, thread-safely; the pointer stays valid for the life of the
 * process. */
const quant_kernels *quant_kernels_active(void);

/* Little-endian unaligned loads from the mapping (GGUF is little-endian, so is x86/arm64). */
static inline uint16_t quant_ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The kernel over quant_pack's layout of wtype in table k; NULL: wtype is not packed there. */
static inline quant_rows_fn quant_packed_kernel(const quant_kernels *k, uint32_t wtype) {
    int qt = quant_type_index(wtype);
    return qt < 0 ? NULL : k->packed[qt];
}

/* The 6-bit values (0..63, without the -32) of one Q6_K super-block, in column order (quant_format.c). */
void quant_q6k_values(uint8_t v[QK_K], const uint8_t *blk);
/* bf16 rounding of activations (quant_ref.c; one version for every instruction set). */
void quant_act_bf16(float *xr, const float *x, int64_t n);
/* The Q8_1 form's s[b] = f16(amax_b / 127 * xsum[b]) for the n values x (as llama.cpp's
 * quantize_row_q8_1: the unrounded scale times the sum of the block's q, stored as f16). */
void quant_act_q8_1_sums(float *s, const int32_t *xsum, const float *x, int64_t n);

/* The 4-bit codebooks of IQ4_NL/IQ4_XS and of MXFP4 (E2M1 values doubled; quant_format.c). */
extern const int8_t quant_iq4nl_values[16];
extern const int8_t quant_mxfp4_values[16];

/* MXFP4's E8M0 block scale halved: 2^(e - 128) (the codebook is doubled), exact for every e. */
static inline float quant_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Q3_K: the 16 six-bit scales of the 12 packed bytes, less 32 (-32..31). Scale j's low 4 bits are
 * nibble j / 8 of byte j % 8, its high 2 bits the 2-bit field j / 4 of byte 8 + j % 4. */
static inline void quant_q3k_scales(const uint8_t *s, int8_t sc[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = (s[j % 8] >> (4 * (j / 8))) & 0xF, hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (int8_t)((lo | hi << 4) - 32);
    }
}

/* IQ4_XS: the 8 six-bit sub-block scales, less 32 (-32..31). */
static inline void quant_iq4xs_scales(const uint8_t *blk, int8_t sc[8]) {
    uint16_t h = quant_ld16(blk + 2);
    for (int j = 0; j < 8; j++) sc[j] = (int8_t)((((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | ((h >> (2 * j)) & 3) << 4) - 32);
}

/* Q4_K: unpacks the 8 six-bit scales and 8 six-bit mins from the 12 packed bytes. */
static inline void quant_q4k_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        mn[j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

#endif /* ATTND_QUANT_IMPL_H */
