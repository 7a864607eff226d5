/*
 * test_quant_amx.c — the AMX tile layer (engine/kernels/amx/amx_tile.h) and the AMX tile GEMM
 * (engine/kernels/amx/quant_amx.inc): the emulated tile instructions against a direct computation everywhere
 * and against the real instructions wherever this CPU and OS allow AMX; the emulated kernels
 * against the portable path on every CPU, at tile edges (rows, columns, depth and token counts
 * that are not multiples of 16 / 64 / the 1024-column chunks), and bit for bit against the AVX-512
 * kernels they follow where the CPU has AVX-512; the real kernels the same way where it has AMX.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amx/amx_tile.h"
#include "attnd/gguf.h"
#include "quant.h"

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "test_rng.h"
#include "test_scale.h"

static int amx_real(void) { return amx_probe() == AMX_USABLE; }

// ---- the tile layer ----------------------------------------------------------------------------

/* C (m x n int32, stride sc bytes) += A (m x 4k bytes) . B (k x 4n bytes), bytes signed or not:
 * the instruction's definition written out directly */
static void dp_direct(uint8_t *c, size_t sc, const uint8_t *a, size_t sa, const uint8_t *b, size_t sb, int m, int n,
                      int k, int as, int bs) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            uint32_t acc;
            memcpy(&acc, c + i * sc + 4 * j, 4);
            for (int l = 0; l < 4 * k; l++) {
                int32_t x = as ? (int8_t)a[i * sa + l] : a[i * sa + l];
                int32_t y = bs ? (int8_t)b[(l / 4) * sb + 4 * j + l % 4] : b[(l / 4) * sb + 4 * j + l % 4];
                acc += (uint32_t)(x * y);
            }
            memcpy(c + i * sc + 4 * j, &acc, 4);
        }
}

Test(amx_tile, emulated_instructions_match_their_definition_and_the_hardware_on_random_tiles) {
    enum { BUF = 24 * 128 };
    uint8_t *a = malloc(BUF), *b = malloc(BUF), *c0 = malloc(BUF), *emu = malloc(BUF), *want = malloc(BUF),
            *real = malloc(BUF);
    for (int trial = 0; trial < 300; trial++) {
        int op = trial % 6, m = 1 + (int)(rnd() % 16), n = 1 + (int)(rnd() % 16), k = 1 + (int)(rnd() % 16);
        size_t sc = 4 * (size_t)n + 4 * (rnd() % 8), sa = 4 * (size_t)k + rnd() % 40, sb = 4 * (size_t)n + rnd() % 40;
        if (trial % 11 == 0) m = n = k = 16, sc = 64, sa = 64, sb = 64; /* the largest tiles */
        for (int i = 0; i < BUF; i++) a[i] = (uint8_t)rnd(), b[i] = (uint8_t)rnd(), c0[i] = (uint8_t)rnd();
        if (trial % 7 == 0) memset(a, 0x80, BUF), memset(b, 0x80, BUF), memset(c0, 0x7F, BUF); /* extremes, wrap-around */
        amx_tilecfg cfg;
        amx_cfg_init(&cfg);
        amx_cfg_tile(&cfg, 0, m, 4 * n);
        amx_cfg_tile(&cfg, 1, m, 4 * k);
        amx_cfg_tile(&cfg, 2, k, 4 * n);
        memcpy(emu, c0, BUF);
        memcpy(want, c0, BUF);
        amx_tile_run_op(0, op, &cfg, emu, sc, a, sa, b, sb);
        if (op == 1)
            for (int i = 0; i < m; i++) memset(want + i * sc, 0, 4 * (size_t)n);
        if (op >= 2) dp_direct(want, sc, a, sa, b, sb, m, n, k, op == 2 || op == 3, op == 2 || op == 4);
        cr_assert(memcmp(emu, want, BUF) == 0, "trial %d op %d %dx%dx%d: emulation differs from the definition", trial,
                  op, m, n, k);
        if (amx_real()) {
            memcpy(real, c0, BUF);
            amx_tile_run_op(1, op, &cfg, real, sc, a, sa, b, sb);
            cr_assert(memcmp(emu, real, BUF) == 0, "trial %d op %d %dx%dx%d: emulation differs from the hardware", trial,
                      op, m, n, k);
        }
    }
    free(a), free(b), free(c0), free(emu), free(want), free(real);
}

/* a random bf16 of either sign, magnitude 2^-8 .. 2^8 */
static uint16_t rnd_bf16(void) {
    uint32_t e = 127 - 8 + rnd() % 17, u = (rnd() & 1u) << 31 | e << 23 | (rnd() & 0x7Fu) << 16;
    return (uint16_t)(u >> 16);
}

/* tdpbf16ps: C (float32) += A . B (bf16 pairs). The SDM defines the products and their order but
 * not the hardware's internal rounding to the bit (on a Sapphire Rapids Xeon about a third of the
 * results differ from a one-rounding-per-addition model in the last bits), so the emulation and,
 * where the CPU has it, the hardware are each held within float32 rounding of the float64 sum:
 * (2k + 1) roundings of at most 2^-24 of the sum of magnitudes. A wrong pairing or index is off by
 * whole terms, far beyond that. */
static void check_bf16_tile(const float *got, const float *c0, const uint16_t *a, const uint16_t *b, int m, int n, int k,
                            const char *who, int trial) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double want = c0[i * n + j], mag = fabs(want);
            for (int l = 0; l < 2 * k; l++) {
                double p = (double)quant_bf16_to_f32(a[i * 2 * k + l]) * quant_bf16_to_f32(b[(l / 2) * 2 * n + 2 * j + l % 2]);
                want += p, mag += fabs(p);
            }
            cr_assert(fabs(got[i * n + j] - want) <= (2 * k + 1) * 0x1p-24 * mag, "trial %d %dx%dx%d [%d][%d]: %s %g float64 %g",
                      trial, m, n, k, i, j, who, got[i * n + j], want);
        }
}

Test(amx_tile, bf16_products_stay_within_float32_rounding_of_float64_emulated_and_real) {
    enum { BUF = 24 * 128 };
    uint16_t *a = malloc(BUF), *b = malloc(BUF);
    float *c0 = malloc(BUF), *got = malloc(BUF);
    for (int trial = 0; trial < 200; trial++) {
        int m = 1 + (int)(rnd() % 16), n = 1 + (int)(rnd() % 16), k = 1 + (int)(rnd() % 16);
        if (trial % 11 == 0) m = n = k = 16;
        for (int i = 0; i < BUF / 2; i++) a[i] = rnd_bf16(), b[i] = rnd_bf16();
        for (int i = 0; i < BUF / 4; i++) c0[i] = rndf();
        amx_tilecfg cfg;
        amx_cfg_init(&cfg);
        amx_cfg_tile(&cfg, 0, m, 4 * n);
        amx_cfg_tile(&cfg, 1, m, 4 * k);
        amx_cfg_tile(&cfg, 2, k, 4 * n);
        for (int real = 0; real <= amx_has_bf16(); real++) {
            memcpy(got, c0, BUF);
            amx_tile_run_op(real, 6, &cfg, got, 4 * (size_t)n, a, 4 * (size_t)k, b, 4 * (size_t)n);
            check_bf16_tile(got, c0, a, b, m, n, k, real ? "hardware" : "emulation", trial);
        }
    }
    free(a), free(b), free(c0), free(got);
}

Test(amx_tile, loads_zero_what_lies_beyond_the_configured_rows_and_columns) {
    /* a 3 x 8-byte tile loaded from a 16-byte stride, then multiplied by a 2 x 16 B: only the
     * configured bytes of A count, the rest of the tile is zero */
    uint8_t a[3 * 16], b[2 * 16];
    int32_t c[3][4];
    memset(a, 1, sizeof a);
    memset(b, 1, sizeof b);
    memset(c, 0, sizeof c);
    amx_tilecfg cfg;
    amx_cfg_init(&cfg);
    amx_cfg_tile(&cfg, 0, 3, 16);
    amx_cfg_tile(&cfg, 1, 3, 8);
    amx_cfg_tile(&cfg, 2, 2, 16);
    for (int real = 0; real <= amx_real(); real++) {
        memset(c, 0, sizeof c);
        amx_tile_run_op(real, 2, &cfg, c, 16, a, 16, b, 16);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) cr_assert_eq(c[i][j], 8, "%s: c[%d][%d] = %d", real ? "real" : "emulated", i, j, c[i][j]);
    }
}

Test(amx_tile, probe_answers_once_and_names_its_state) {
    amx_state s = amx_probe();
    cr_assert_eq(amx_probe(), s);
    cr_assert_str_neq(amx_state_name(s), "?");
    /* the matmul path follows the probe: AMX is the best set exactly when it is usable */
    if (s != AMX_USABLE) cr_assert_neq(quant_isa_best(), QUANT_ISA_AMX);
    cr_assert_str_eq(quant_isa_name(QUANT_ISA_AMX), "amx");
    cr_assert_str_eq(quant_isa_name(QUANT_ISA_AMX_EMU), "amx-emu");
}

// ---- the kernels --------------------------------------------------------------------------------

static const uint32_t AMX_TYPES[] = {GGUF_TYPE_Q8_0,   GGUF_TYPE_Q4_0,  GGUF_TYPE_Q4_K,  GGUF_TYPE_Q5_K,
                                     GGUF_TYPE_Q6_K,   GGUF_TYPE_Q4_1,  GGUF_TYPE_Q5_0,  GGUF_TYPE_Q5_1,
                                     GGUF_TYPE_IQ4_NL, GGUF_TYPE_MXFP4, GGUF_TYPE_IQ4_XS};

/* The start-up line's list of tile types comes from the tiles' table: exactly AMX_TYPES, every
 * name whole, and a short buffer cut at a name's end. */
Test(quant_amx, the_type_names_are_those_of_the_tile_table) {
    char names[256];
    size_t need = quant_amx_type_names(names, sizeof names);
    cr_assert_eq(need, strlen(names), "the whole list fits in 256 bytes");
    size_t n_amx = sizeof AMX_TYPES / sizeof AMX_TYPES[0], n_listed = 1;
    for (const char *c = names; *c; c++) n_listed += *c == ',';
    cr_assert_eq(n_listed, n_amx, "%s: one name per tile type", names);
    for (size_t i = 0; i < n_amx; i++) {
        const char *name = gguf_type_name(AMX_TYPES[i]), *at = strstr(names, name);
        size_t n = strlen(name);
        while (at && !((at == names || at[-1] == ' ') && (at[n] == ',' || at[n] == '\0'))) at = strstr(at + 1, name);
        cr_assert(at, "%s lists %s", names, name);
    }
    cr_assert_null(strstr(names, "Q2_K"), "Q2_K runs on avx512's packed kernel, not on the tiles");
    char small[12];
    cr_assert_eq(quant_amx_type_names(small, sizeof small), need, "the length the whole list needs");
    cr_assert_str_eq(small, "Q8_0, Q4_0", "cut at a name's end");
    cr_assert_eq(quant_amx_type_names(NULL, 0), need);
}

static void random_weights(uint8_t *w, uint32_t type, int64_t n_rows, int64_t n_cols) {
    size_t rb = quant_row_bytes(type, n_cols);
    for (size_t i = 0; i < rb * (size_t)n_rows; i++) w[i] = (uint8_t)rnd();
    const int64_t n = n_rows * n_cols;
    const size_t bytes = gguf_type_block_bytes(type);
    for (int64_t b = 0; b < n / gguf_type_block_elems(type); b++) {
        uint8_t *blk = w + bytes * (size_t)b;
        switch (type) { /* finite, small scales (and minimums) */
        case GGUF_TYPE_Q8_0: put16(blk, quant_f32_to_f16(0.01f + 0.01f * fabsf(rndf()))); break;
        case GGUF_TYPE_Q4_0: put16(blk, quant_f32_to_f16(0.1f + 0.1f * rndf())); break;
        case GGUF_TYPE_Q4_K:
        case GGUF_TYPE_Q5_K:
            put16(blk, quant_f32_to_f16(0.002f + 0.001f * rndf()));
            put16(blk + 2, quant_f32_to_f16(0.004f + 0.001f * rndf()));
            break;
        case GGUF_TYPE_Q6_K: put16(blk + 208, quant_f32_to_f16(0.0005f + 0.0002f * rndf())); break;
        case GGUF_TYPE_Q4_1:
        case GGUF_TYPE_Q5_1:
            put16(blk, quant_f32_to_f16(0.05f + 0.02f * rndf()));
            put16(blk + 2, quant_f32_to_f16(-0.8f + 0.5f * rndf()));
            break;
        case GGUF_TYPE_Q5_0: put16(blk, quant_f32_to_f16(0.05f + 0.05f * rndf())); break;
        case GGUF_TYPE_IQ4_NL: put16(blk, quant_f32_to_f16(0.005f + 0.002f * rndf())); break;
        case GGUF_TYPE_IQ4_XS: put16(blk, quant_f32_to_f16(0.0002f + 0.0001f * rndf())); break;
        default: blk[0] = (uint8_t)(118 + rnd() % 8); break; /* MXFP4: 2^-10 .. 2^-3 */
        }
    }
}

/* out (n_tok, R) under `isa`, reading the copy packed under that set when it makes one */
static void run(float *out, quant_isa isa, const uint8_t *w, uint32_t type, int64_t R, int64_t C, const float *x,
                int n_tok, void *scratch, int threads) {
    quant_isa saved = quant_isa_force(isa);
    quant_packed *pk = quant_pack(w, type, R, C);
    memset(out, 0xFF, (size_t)n_tok * (size_t)R * sizeof(float)); /* nan: unwritten shows */
    quant_matmul_packed(out, w, pk, type, R, C, x, n_tok, scratch, threads);
    quant_packed_destroy(pk);
    quant_isa_force(saved);
}

/* The real tiles' first batch size (AX_MIN_TOK, quant_amx.c): below it the AVX-512 kernels run */
#define AMX_FROM 128

/* The bf16 tiles (QUANT_AMX_BF16) against float64 math of the format's dequantized weights and
 * the float activations: each weight and activation rounded once to bf16 (2^-9 each), float32
 * sums (a rounding of 2^-24 per term): |got - exact| <= (2^-8 + (C + 2) 2^-24) sum |w x|. A wrong
 * scale, minimum, index or tile edge is off by whole terms. */
static void check_bf16(const float *got, const float *wf, const float *x, int64_t R, int64_t C, int n, const char *who,
                       uint32_t type) {
    const double tol = 0x1p-8 + (double)(C + 2) * 0x1p-24;
    for (int t = 0; t < n; t++)
        for (int64_t r = 0; r < R; r++) {
            double want = 0, mag = 0;
            for (int64_t c = 0; c < C; c++) {
                double p = (double)wf[r * C + c] * x[t * C + c];
                want += p, mag += fabs(p);
            }
            double e = fabs(got[t * R + r] - want);
            cr_assert(e <= tol * mag + 1e-30, "%s %ldx%ld n_tok %d [%d][%ld]: %s %g float64 %g (error %.3g of sum |wx| %.3g)",
                      gguf_type_name(type), (long)R, (long)C, n, t, (long)r, who, got[t * R + r], want, e, mag);
        }
}

/* One shape, for each token count in toks. int8 tiles (QUANT_AMX_INT8): the emulated kernels
 * against the portable path (within float rounding: the portable kernels add the block terms in
 * another order), and bit for bit against AVX-512 and real AMX where the CPU has them (the
 * AVX-512 kernels of the same layout: the packed Q8_0/Q4_0/Q4_K/Q5_K/Q6_K and 32-element
 * (Q4_1/Q5_0/Q5_1/IQ4_NL/MXFP4) kernels always, mapped Q8_0's register tiles from 4 tokens).
 * bf16 tiles: emulated and real (from AMX_FROM tokens) within check_bf16's bound. */
static void check_shape(uint32_t type, int64_t R, int64_t C, const int *toks, int n_toks) {
    int T = 0;
    for (int i = 0; i < n_toks; i++) T = toks[i] > T ? toks[i] : T;
    uint8_t *w = malloc(quant_row_bytes(type, C) * (size_t)R);
    random_weights(w, type, R, C);
    float *wf = malloc((size_t)R * (size_t)C * sizeof(float));
    for (int64_t r = 0; r < R; r++) quant_dequantize_row(wf + r * C, w + quant_row_bytes(type, C) * (size_t)r, type, C);
    float *x = malloc((size_t)T * (size_t)C * sizeof(float));
    for (int64_t j = 0; j < T * C; j++) x[j] = rndf() * (1.0f + (float)(j % 7));
    size_t n_out = (size_t)T * (size_t)R;
    float *ref = malloc(n_out * sizeof(float)), *emu = malloc(n_out * sizeof(float)), *simd = malloc(n_out * sizeof(float));
    void *scratch = malloc(quant_scratch_bytes(type, T, C));
    /* Q8_0 twice: packed at load, and as mapped (ATTND_NO_REPACK, the tiles' other unpacking) */
    for (int pass = 0; pass < (type == GGUF_TYPE_Q8_0 ? 2 : 1); pass++)
    for (int i = 0; i < n_toks; i++) {
        int n = toks[i], threads = 1 + i % 2;
        if (pass) setenv("ATTND_NO_REPACK", "1", 1);
        quant_amx_math saved = quant_amx_math_force(QUANT_AMX_INT8);
        run(ref, QUANT_ISA_PORTABLE, w, type, R, C, x, n, scratch, 1);
        run(emu, QUANT_ISA_AMX_EMU, w, type, R, C, x, n, scratch, threads);
        for (size_t k = 0; k < (size_t)n * (size_t)R; k++)
            cr_assert(fabsf(emu[k] - ref[k]) <= 1e-4f * (fabsf(ref[k]) + 1.0f), "%s %ldx%ld n_tok %d [%zu]: amx-emu %g portable %g",
                      gguf_type_name(type), (long)R, (long)C, n, k, emu[k], ref[k]);
        /* AVX-512 runs mapped Q8_0 below 4 tokens row by row, in another float order */
        int exact = !pass || n >= 4;
        if (exact && quant_isa_best() >= QUANT_ISA_AVX512) {
            run(simd, QUANT_ISA_AVX512, w, type, R, C, x, n, scratch, 1);
            cr_assert(memcmp(emu, simd, (size_t)n * (size_t)R * sizeof(float)) == 0, "%s %ldx%ld n_tok %d: amx-emu != avx512",
                      gguf_type_name(type), (long)R, (long)C, n);
        }
        if (exact && quant_isa_best() == QUANT_ISA_AMX) {
            run(simd, QUANT_ISA_AMX, w, type, R, C, x, n, scratch, threads);
            cr_assert(memcmp(emu, simd, (size_t)n * (size_t)R * sizeof(float)) == 0, "%s %ldx%ld n_tok %d: amx-emu != amx",
                      gguf_type_name(type), (long)R, (long)C, n);
        }
        quant_amx_math_force(QUANT_AMX_BF16);
        run(emu, QUANT_ISA_AMX_EMU, w, type, R, C, x, n, scratch, threads);
        check_bf16(emu, wf, x, R, C, n, "amx-emu bf16", type);
        if (quant_isa_best() == QUANT_ISA_AMX && amx_has_bf16() && n >= AMX_FROM) {
            run(simd, QUANT_ISA_AMX, w, type, R, C, x, n, scratch, threads);
            check_bf16(simd, wf, x, R, C, n, "amx bf16", type);
        }
        quant_amx_math_force(saved);
        unsetenv("ATTND_NO_REPACK");
    }
    free(w), free(wf), free(x), free(ref), free(emu), free(simd), free(scratch);
}

/* Rows around the 16-row groups, depth around the 1024-column chunks (Q8_0/Q4_0: 1 block, 11,
 * 16 and 33 blocks; K-quants: 1, 2 and 5 super-blocks), every token count from 1 to 33 */
Test(quant_amx, emulated_kernels_agree_with_portable_at_tile_edges_for_every_batch_to_33) {
    int toks[33], n_edge = 33;
    for (int i = 0; i < 33; i++) toks[i] = i + 1;
    if (test_sanitized()) { /* under ASan only the counts at the 16-token tiles' edges */
        static const int edges[] = {1, 2, 15, 16, 17, 31, 32, 33};
        n_edge = (int)(sizeof edges / sizeof *edges);
        memcpy(toks, edges, sizeof edges);
    }
    static const int MID[] = {15, 16, 17, 18}; /* the other depths' counts */
    const int64_t rows[] = {1, 16, 37};
    for (size_t t = 0; t < sizeof AMX_TYPES / sizeof *AMX_TYPES; t++) {
        int q32 = gguf_type_block_elems(AMX_TYPES[t]) == 32;
        const int64_t cols[] = {q32 ? 32 : 256, q32 ? 352 : 512, q32 ? 512 : 1280, q32 ? 1056 : 1280};
        for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
            for (size_t c = 0; c < sizeof cols / sizeof *cols; c++)
                check_shape(AMX_TYPES[t], rows[r], cols[c], c == 3 ? toks : MID, c == 3 ? n_edge : 4);
    }
}

/* larger batches (several 16-token tiles and a remainder) on a matrix the pool splits; 130 and 145
 * are past AX_MIN_TOK (128, quant_amx.c), below which the real amx set hands over to avx512, so
 * there the real tiles run too */
Test(quant_amx, emulated_kernels_agree_with_portable_on_larger_batches) {
    const int toks[] = {65, 145, 48, 100, 130}; /* the first two under ASan */
    for (size_t t = 0; t < sizeof AMX_TYPES / sizeof *AMX_TYPES; t++) {
        int q32 = gguf_type_block_elems(AMX_TYPES[t]) == 32;
        check_shape(AMX_TYPES[t], 301, q32 ? 544 : 768, toks, test_size(5, 2));
    }
}

Test(quant_amx, emulated_path_is_forced_on_any_cpu_and_keeps_the_rest_portable) {
    quant_isa saved = quant_isa_force(QUANT_ISA_AMX_EMU);
    cr_assert_eq(quant_isa_active(), QUANT_ISA_AMX_EMU);
    /* F32 weights are not tile work: they give the portable path's bits */
    enum { R = 5, C = 40, T = 3 };
    float w[R * C], x[T * C], a[T * R], b[T * R];
    for (int i = 0; i < R * C; i++) w[i] = rndf();
    for (int i = 0; i < T * C; i++) x[i] = rndf();
    quant_matmul(a, w, GGUF_TYPE_F32, R, C, x, T, NULL, 1);
    quant_isa_force(QUANT_ISA_PORTABLE);
    quant_matmul(b, w, GGUF_TYPE_F32, R, C, x, T, NULL, 1);
    cr_assert(memcmp(a, b, sizeof a) == 0);
    quant_isa_force(saved);
}
