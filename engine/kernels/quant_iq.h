/*
 * quant_iq.h — (private to engine/quant*.c) the low-bit weight types of issue 47: the lattice
 * types IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, the ternary TQ1_0 / TQ2_0, and
 * NVFP4. Their block layouts (the GGUF/ggml format definitions), the codebooks expanded from
 * quant_iq_tables.c, and the dequantizers and portable row kernels that QUANT_TYPE_LIST's tables
 * (quant_format.c, quant_ref.c) take by the names dequant_<name> and rows_<name>.
 *
 * Every lattice type stores a super-block of 256 weights as small integers (a grid entry with its
 * signs, or trits) times an integer scale per 16 or 32 weights, times the block's f16 d, times a
 * power of two fixed by the type; all those products are exact in float, so dequantization is
 * exact, and the dot products against Q8_K activations are exact integer sums scaled once per
 * super-block, in llama.cpp's order (ggml_vec_dot_<type>_q8_K). NVFP4 reads Q8_0 activations:
 * blocks of 64 weights, four sub-blocks of 16 with an unsigned E4M3 scale each.
 */
#ifndef ATTND_QUANT_IQ_H
#define ATTND_QUANT_IQ_H

#include <stddef.h>
#include <stdint.h>

#include "quant_impl.h"

/* Block bytes (256 weights; NVFP4 64): where each field sits, offsets from the block's start. */
#define IQ2_XXS_BYTES 66 /* f16 d; per 32 weights 8 bytes: 4 grid indices (8 bits), then a dword of
                            4 x 7 sign bits and the 4-bit scale s (bits 28-31): (2s + 1) / 8       */
#define IQ2_XS_BYTES 74  /* f16 d; 32 uint16 (9-bit grid index, 7 sign bits); 8 bytes of two 4-bit
                            scales (per 16 weights, (2s + 1) / 8)                                   */
#define IQ2_S_BYTES 82   /* f16 d; 32 grid index low bytes; 32 sign bytes; 8 bytes of 2 high index
                            bits x 4; 8 bytes of scales as IQ2_XS                                  */
#define IQ3_XXS_BYTES 98 /* f16 d; 64 grid indices (4 weights each); per 32 weights a dword of
                            4 x 7 sign bits and the 4-bit scale s: (2s + 1) / 4                     */
#define IQ3_S_BYTES 110  /* f16 d; 64 grid index low bytes; 8 bytes of high bits (9th bit of each
                            of 8 indices); 32 sign bytes; 4 bytes of 4-bit scales: 2s + 1 per 32    */
#define IQ1_S_BYTES 50   /* f16 d; 32 grid index low bytes; 8 uint16: 4 x 3 high index bits, a 3-bit
                            scale (2s + 1) and the sign of the shift +-1/8, per 32 weights         */
#define IQ1_M_BYTES 56   /* 32 grid index low bytes; 16 bytes, a nibble per 8 weights (3 high index
                            bits, the shift's sign); 8 bytes: 3-bit scales per 16 weights, and the
                            f16 d in the top nibble of each of the four uint16                     */
#define TQ1_0_BYTES 54   /* 48 bytes of 5 trits; 4 bytes of 4 trits; f16 d                          */
#define TQ2_0_BYTES 66   /* 64 bytes of 4 x 2-bit (value - 1); f16 d                                */
#define QK_NVFP4 64
#define NVFP4_BYTES 36   /* 4 UE4M3 scales (one per 16 weights); 32 bytes of E2M1 nibbles: per 16
                            weights 8 bytes, weight j low nibble of byte j, weight 8 + j high       */

/* The codebooks, expanded: entry i of a grid is its 8 (IQ1, IQ2) or 4 (IQ3) values. signs[i]:
 * the 7 stored sign bits i and an eighth that makes their parity even (bit j set: value j is
 * negated). iq1s8[s][i]: IQ1's entry i as 8 v + 1 (s 0) or 8 v - 1 (s 1), the weight with its
 * shift of +-1/8 in eighths (for the SIMD kernels: one signed byte a weight); *32: the compact codes
 * as 32-bit words. Built once, on
 * first use (thread-safe); valid for the life of the process. */
typedef struct quant_iq_grids {
    uint8_t iq2xxs[256][8], iq2xs[512][8], iq2s[1024][8];
    uint8_t iq3xxs[256][4], iq3s[512][4];
    int8_t iq1s[2048][8];
    int8_t iq1s8[2][2048][8];
    uint8_t signs[128];
    /* the compact codes of the larger grids widened to 32 bits, for dword gathers */
    uint32_t iq2s32[1024], iq1s32[2048];
} quant_iq_grids;
const quant_iq_grids *quant_iq_grids_get(void);

/* The compact codes (quant_iq_tables.c, written by tools/quant/gen_iq_grids.py). */
extern const uint16_t quant_iq2xxs_codes[256], quant_iq2xs_codes[512], quant_iq2s_codes[1024];
extern const uint16_t quant_iq3xxs_codes[256], quant_iq3s_codes[512], quant_iq1s_codes[2048];

/* NVFP4's UE4M3 scale with the codebook's halving (the E2M1 values are stored doubled): exact.
 * Bit 7 is not read; 0x7F (E4M3's NaN) is 0, as the format's reference decoder has it. */
float quant_ue4m3_half(uint8_t x);

/* TQ1_0: the 256 trits (-1, 0, 1) of one block, in weight order. */
void quant_tq1_0_values(int8_t v[256], const uint8_t *blk);

/* QUANT_TYPE_LIST's entries (names fixed by the list's X-macro): dequantizers of nb blocks and the
 * portable row-range kernels (quant_impl.h's quant_rows_fn). */
#define QUANT_IQ_DECLARE_(n)                                                                             \
    void dequant_##n(float *y, const uint8_t *src, int64_t nb);                                          \
    void rows_##n(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows, \
                  const quant_act *a, int n_tok);
QUANT_IQ_DECLARE_(iq2_xxs)
QUANT_IQ_DECLARE_(iq2_xs)
QUANT_IQ_DECLARE_(iq2_s)
QUANT_IQ_DECLARE_(iq3_xxs)
QUANT_IQ_DECLARE_(iq3_s)
QUANT_IQ_DECLARE_(iq1_s)
QUANT_IQ_DECLARE_(iq1_m)
QUANT_IQ_DECLARE_(tq1_0)
QUANT_IQ_DECLARE_(tq2_0)
QUANT_IQ_DECLARE_(nvfp4)
#undef QUANT_IQ_DECLARE_

#endif /* ATTND_QUANT_IQ_H */
