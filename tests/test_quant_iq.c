/*
 * test_quant_iq.c — the low-bit weight types of issue 47 (engine/quant_iq.c): IQ1_S, IQ1_M,
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0, NVFP4.
 *
 * The codebooks are checked against the format definitions by a hash of every table and a few
 * entries (computed from ggml-common.h's tables when these tests were written). Dequantization
 * is checked bit for bit against a float64 decoder written here from the block layouts, one
 * weight at a time (which bytes and bits hold its index, signs and scales), on random block bytes
 * with every f16 scale pattern (inf, nan and subnormals included). The dot products are checked in
 * test_quant.c with the other types (float64 floors, every instruction set, tile edges).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gguf.h"
#include "quant.h"
#include "quant_impl.h"
#include "quant_iq.h"

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "test_rng.h"

// ---- the codebooks -------------------------------------------------------------------------------

static uint64_t fnv1a(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* entry i of a table as the format's little-endian integer */
static uint64_t entry_le(const void *row, int width) {
    uint64_t v = 0;
    for (int k = width - 1; k >= 0; k--) v = v << 8 | ((const uint8_t *)row)[k];
    return v;
}

Test(quant_iq, codebooks_are_the_format_definitions) {
    const quant_iq_grids *g = quant_iq_grids_get();
    /* FNV-1a of each table's bytes as the definitions lay them out (entries in order, each
     * little-endian), and entries 0, 100 and the last */
    const struct {
        const char *name;
        const void *t;
        int n, width;
        uint64_t hash, e0, e100, last;
    } T[] = {
        {"iq2xxs", g->iq2xxs, 256, 8, 0xbb4ee025b5ac6e8eull, 0x0808080808080808ull, 0x08192b0808081908ull, 0x2b2b2b1908081908ull},
        {"iq2xs", g->iq2xs, 512, 8, 0xc9b1ee61e79909bdull, 0x0808080808080808ull, 0x0808192b08081908ull, 0x2b2b2b2b2b2b2b2bull},
        {"iq2s", g->iq2s, 1024, 8, 0x123edd38a3b62b90ull, 0x0808080808080808ull, 0x080819081919192bull, 0x2b2b2b2b2b2b2b2bull},
        {"iq3xxs", g->iq3xxs, 256, 4, 0xdfa5dc83d6a155d5ull, 0x04040404ull, 0x14040c1cull, 0x3e341c04ull},
        {"iq3s", g->iq3s, 512, 4, 0xfa37020c25b44829ull, 0x01010101ull, 0x010f0101ull, 0x0f0f0101ull},
        {"iq1s", g->iq1s, 2048, 8, 0x6703ed863501ae2eull, 0xffffffffffffffffull, 0xffff000000000000ull, 0x0101010101010101ull},
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        const uint8_t *t = T[i].t;
        cr_expect_eq(fnv1a(t, (size_t)T[i].n * (size_t)T[i].width), T[i].hash, "%s: table hash", T[i].name);
        cr_expect_eq(entry_le(t, T[i].width), T[i].e0, "%s[0]", T[i].name);
        cr_expect_eq(entry_le(t + 100 * T[i].width, T[i].width), T[i].e100, "%s[100]", T[i].name);
        cr_expect_eq(entry_le(t + (T[i].n - 1) * T[i].width, T[i].width), T[i].last, "%s[last]", T[i].name);
    }
    cr_expect_eq(fnv1a(g->signs, 128), 0xf19ba8f8c3292ba5ull, "sign table hash");
}

Test(quant_iq, sign_table_completes_seven_bits_to_even_parity) {
    const quant_iq_grids *g = quant_iq_grids_get();
    for (int i = 0; i < 128; i++) {
        cr_assert_eq(g->signs[i] & 127, i);
        cr_assert_eq(__builtin_popcount(g->signs[i]) % 2, 0, "signs[%d] = %d", i, g->signs[i]);
    }
}

// ---- a float64 decoder from the block layouts, one weight at a time ----------------------------

static double f16d(const uint8_t *p) { return (double)quant_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static uint32_t le16(const uint8_t *p) { return (uint32_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }

/* bit j of the 8 signs stored as 7 bits plus even parity */
static int sign7(uint32_t s7, int j) { return j < 7 ? (int)(s7 >> j) & 1 : __builtin_popcount(s7 & 127) & 1; }
static double sgn(int neg) { return neg ? -1.0 : 1.0; }

/* weight e (< 256) of a super-block b of each type */
static double ref_iq2_xxs(const uint8_t *b, int e, const quant_iq_grids *g) {
    const uint8_t *q = b + 2 + 8 * (e / 32);
    uint32_t aux = le32(q + 4);
    int l = e % 32 / 8, j = e % 8;
    return f16d(b) * (0.5 + (aux >> 28)) * 0.25 * g->iq2xxs[q[l]][j] * sgn(sign7(aux >> (7 * l), j));
}

static double ref_iq2_xs(const uint8_t *b, int e, const quant_iq_grids *g) {
    uint32_t q = le16(b + 2 + 2 * (e / 8));
    int s = (b[66 + e / 32] >> (4 * (e / 16 % 2))) & 15;
    return f16d(b) * (0.5 + s) * 0.25 * g->iq2xs[q & 511][e % 8] * sgn(sign7(q >> 9, e % 8));
}

static double ref_iq2_s(const uint8_t *b, int e, const quant_iq_grids *g) {
    int k = e / 8, idx = b[2 + k] | ((b[66 + k / 4] >> (2 * (k % 4))) & 3) << 8;
    int s = (b[74 + e / 32] >> (4 * (e / 16 % 2))) & 15;
    return f16d(b) * (0.5 + s) * 0.25 * g->iq2s[idx][e % 8] * sgn((b[34 + k] >> (e % 8)) & 1);
}

static double ref_iq3_xxs(const uint8_t *b, int e, const quant_iq_grids *g) {
    uint32_t aux = le32(b + 66 + 4 * (e / 32));
    int l = e % 32 / 8;
    return f16d(b) * (0.5 + (aux >> 28)) * 0.5 * g->iq3xxs[b[2 + e / 4]][e % 4] * sgn(sign7(aux >> (7 * l), e % 8));
}

static double ref_iq3_s(const uint8_t *b, int e, const quant_iq_grids *g) {
    int k = e / 4, idx = b[2 + k] | ((b[66 + k / 8] >> (k % 8)) & 1) << 8;
    int s = (b[106 + e / 64] >> (4 * (e / 32 % 2))) & 15;
    return f16d(b) * (1 + 2 * s) * g->iq3s[idx][e % 4] * sgn((b[74 + e / 8] >> (e % 8)) & 1);
}

static double ref_iq1_s(const uint8_t *b, int e, const quant_iq_grids *g) {
    uint32_t h = le16(b + 34 + 2 * (e / 32));
    int l = e % 32 / 8, idx = b[2 + e / 8] | ((h >> (3 * l)) & 7) << 8;
    double delta = h & 0x8000 ? -0.125 : 0.125;
    return f16d(b) * (2 * ((h >> 12) & 7) + 1) * (g->iq1s[idx][e % 8] + delta);
}

static double ref_iq1_m(const uint8_t *b, int e, const quant_iq_grids *g) {
    int g8 = e / 8, nib = (b[32 + g8 / 2] >> (4 * (g8 % 2))) & 15, idx = b[g8] | (nib & 7) << 8;
    uint32_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = le16(b + 48 + 2 * k);
    uint16_t dbits = 0; /* the f16 d: the top nibble of scale word k is its nibble k */
    for (int k = 0; k < 4; k++) dbits |= (uint16_t)((sc[k] >> 12) << (4 * k));
    int ib = e / 32, s = (sc[ib / 2] >> (6 * (ib % 2) + 3 * (e % 32 / 16))) & 7;
    double delta = nib & 8 ? -0.125 : 0.125;
    return (double)quant_f16_to_f32(dbits) * (2 * s + 1) * (g->iq1s[idx][e % 8] + delta);
}

/* TQ1_0: byte holds its base-3 digits as a fraction of 256 (q = ceil(value * 256 / 3^5)): digit n
 * is the integer part of 3 times the fraction after n digits */
static int ref_trit(uint8_t byte, int n) {
    unsigned frac = byte;
    for (int i = 0; i < n; i++) frac = (frac * 3) & 255;
    return (int)(frac * 3 / 256);
}

static double ref_tq1_0(const uint8_t *b, int e, const quant_iq_grids *g) {
    (void)g;
    int byte, n;
    if (e < 160) byte = e % 32, n = e / 32;
    else if (e < 240) byte = 32 + (e - 160) % 16, n = (e - 160) / 16;
    else byte = 48 + (e - 240) % 4, n = (e - 240) / 4;
    return (ref_trit(b[byte], n) - 1) * f16d(b + 52);
}

static double ref_tq2_0(const uint8_t *b, int e, const quant_iq_grids *g) {
    (void)g;
    return (((b[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3) - 1) * f16d(b + 64);
}

/* NVFP4's unsigned E4M3 scale (bit 7 unread; 0x7F is 0) and E2M1 values, from their bit fields */
static double ref_ue4m3(uint8_t x) {
    if (x == 0x7F) return 0;
    int e = (x >> 3) & 15, m = x & 7;
    return e == 0 ? ldexp(m, -9) : ldexp(1 + m / 8.0, e - 7);
}

static double ref_e2m1(int code) {
    int e = (code >> 1) & 3, m = code & 1;
    double mag = e == 0 ? 0.5 * m : ldexp(1 + 0.5 * m, e - 1);
    return code & 8 && mag != 0 ? -mag : mag; /* code 8, E2M1's -0, is the codebook's integer 0: +0 */
}

/* weight e of a whole 256-weight run (four NVFP4 blocks of 64) */
static double ref_nvfp4(const uint8_t *b, int e, const quant_iq_grids *g) {
    (void)g;
    const uint8_t *blk = b + NVFP4_BYTES * (e / 64);
    int s = e % 64 / 16, j = e % 16;
    return ref_ue4m3(blk[s]) * ref_e2m1((blk[4 + 8 * s + j % 8] >> (4 * (j / 8))) & 15);
}

typedef double (*ref_fn)(const uint8_t *b, int e, const quant_iq_grids *g);

static const struct {
    uint32_t type;
    ref_fn ref;
    int d_off; /* the f16 d (-1: IQ1_M's nibbles; -2: NVFP4's byte scales) */
} TYPES[] = {
    {GGUF_TYPE_IQ2_XXS, ref_iq2_xxs, 0}, {GGUF_TYPE_IQ2_XS, ref_iq2_xs, 0}, {GGUF_TYPE_IQ2_S, ref_iq2_s, 0},
    {GGUF_TYPE_IQ3_XXS, ref_iq3_xxs, 0}, {GGUF_TYPE_IQ3_S, ref_iq3_s, 0},   {GGUF_TYPE_IQ1_S, ref_iq1_s, 0},
    {GGUF_TYPE_IQ1_M, ref_iq1_m, -1},    {GGUF_TYPE_TQ1_0, ref_tq1_0, 52},  {GGUF_TYPE_TQ2_0, ref_tq2_0, 64},
    {GGUF_TYPE_NVFP4, ref_nvfp4, -2},
};

/* got is the float of want, bit for bit (nan: both nan) */
static int same_value(float got, double want) {
    if (isnan(want)) return isnan(got);
    float w = (float)want;
    return memcmp(&got, &w, sizeof w) == 0 && (double)w == want;
}

Test(quant_iq, every_type_dequantizes_bit_exactly_to_its_definition) {
    const quant_iq_grids *g = quant_iq_grids_get();
    enum { N = 1024 }; /* 4 super-blocks (16 NVFP4 blocks) a row */
    uint8_t row[4 * 4 * NVFP4_BYTES]; /* the largest row: 4 x 110 (IQ3_S), 16 x 36 (NVFP4) */
    float y[N];
    for (size_t t = 0; t < sizeof TYPES / sizeof *TYPES; t++) {
        const uint32_t type = TYPES[t].type;
        const size_t rb = quant_row_bytes(type, N), per256 = rb / 4;
        cr_assert(rb <= sizeof row && rb > 0);
        for (int trial = 0; trial < 300; trial++) {
            for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)rnd();
            /* every other trial a finite, moderate d (raw bytes give inf / nan / subnormals too) */
            for (size_t b = 0; trial % 2 && TYPES[t].d_off >= 0 && b < 4; b++)
                put16(row + b * per256 + (size_t)TYPES[t].d_off, quant_f32_to_f16(0.01f + 0.005f * rndf()));
            quant_dequantize_row(y, row, type, N);
            for (int e = 0; e < N; e++) {
                double want = TYPES[t].ref(row + per256 * (size_t)(e / 256), e % 256, g);
                cr_assert(same_value(y[e], want), "%s trial %d weight %d: %.9g, the definition gives %.17g",
                          gguf_type_name(type), trial, e, y[e], want);
            }
        }
    }
}

Test(quant_iq, nvfp4_scales_decode_as_unsigned_e4m3) {
    const struct {
        uint8_t x;
        float half; /* the value halved (the codebook is doubled) */
    } K[] = {{0x00, 0.f},     {0x7F, 0.f},          {0x80, 0.f},   {0x01, 0x1p-10f},  {0x07, 7 * 0x1p-10f},
             {0x08, 0x1p-7f}, {0x38, 0.5f},         {0x3C, 0.75f}, {0x7E, 224.f},     {0xB8, 0.5f},
             {0xFF, 240.f},   {0x77, 0.5f * 240.f}, {0x46, 1.75f}, {0x0F, 0x1.ep-7f}};
    for (size_t i = 0; i < sizeof K / sizeof *K; i++)
        cr_expect_eq(quant_ue4m3_half(K[i].x), K[i].half, "0x%02x: %g, want %g", K[i].x, quant_ue4m3_half(K[i].x), K[i].half);
    for (int x = 0; x < 256; x++) cr_assert_eq((double)quant_ue4m3_half((uint8_t)x), ref_ue4m3((uint8_t)x) / 2, "0x%02x", x);
}

Test(quant_iq, every_type_is_computable_with_its_block_geometry) {
    const struct {
        uint32_t type;
        uint32_t elems, bytes;
        quant_act_form act;
    } G[] = {
        {GGUF_TYPE_IQ2_XXS, 256, 66, QUANT_ACT_Q8_K}, {GGUF_TYPE_IQ2_XS, 256, 74, QUANT_ACT_Q8_K},
        {GGUF_TYPE_IQ2_S, 256, 82, QUANT_ACT_Q8_K},   {GGUF_TYPE_IQ3_XXS, 256, 98, QUANT_ACT_Q8_K},
        {GGUF_TYPE_IQ3_S, 256, 110, QUANT_ACT_Q8_K},  {GGUF_TYPE_IQ1_S, 256, 50, QUANT_ACT_Q8_K},
        {GGUF_TYPE_IQ1_M, 256, 56, QUANT_ACT_Q8_K},   {GGUF_TYPE_TQ1_0, 256, 54, QUANT_ACT_Q8_K},
        {GGUF_TYPE_TQ2_0, 256, 66, QUANT_ACT_Q8_K},   {GGUF_TYPE_NVFP4, 64, 36, QUANT_ACT_Q8_0},
    };
    for (size_t i = 0; i < sizeof G / sizeof *G; i++) {
        cr_expect(gguf_type_computable(G[i].type), "%s", gguf_type_name(G[i].type));
        cr_expect_eq(gguf_type_block_elems(G[i].type), G[i].elems, "%s", gguf_type_name(G[i].type));
        cr_expect_eq(gguf_type_block_bytes(G[i].type), G[i].bytes, "%s", gguf_type_name(G[i].type));
        cr_expect_eq(quant_traits_of(G[i].type)->act, G[i].act, "%s: llama.cpp's vec_dot_type", gguf_type_name(G[i].type));
    }
    cr_expect_str_eq(gguf_type_name(GGUF_TYPE_NVFP4), "NVFP4");
}

// ---- the codebooks decoded in registers (x86/quant_iq_vbmi.inc) ----------------------------------

/* The types quant_iq_vbmi.inc computes: with VBMI their AVX-512 results are the portable ones bit
 * for bit (same exact integer per super-block, same float operations in the same order). */
static const uint32_t VBMI_TYPES[] = {GGUF_TYPE_IQ2_XXS, GGUF_TYPE_IQ3_XXS, GGUF_TYPE_IQ2_XS, GGUF_TYPE_IQ2_S,
                                      GGUF_TYPE_IQ3_S,   GGUF_TYPE_IQ1_S,   GGUF_TYPE_IQ1_M};

/* Random blocks of `type` with every d a small finite f16 (any other byte is valid). */
static void vbmi_weights(uint8_t *w, uint32_t type, size_t n_blocks) {
    size_t bb = gguf_type_block_bytes(type);
    for (size_t i = 0; i < n_blocks * bb; i++) w[i] = (uint8_t)rnd();
    for (size_t b = 0; b < n_blocks; b++) {
        uint16_t d = quant_f32_to_f16(0.002f + 0.001f * rndf());
        if (type == GGUF_TYPE_IQ1_M)
            for (int k = 0; k < 4; k++) w[b * bb + 49 + 2 * k] = (uint8_t)((w[b * bb + 49 + 2 * k] & 0x0F) | ((d >> (4 * k)) & 15) << 4);
        else put16(w + b * bb, d);
    }
}

Test(quant_iq, vbmi_kernels_are_bit_identical_to_portable_at_tile_edges) {
    enum { R = 37, NB = 5, T = 33 }; /* rows past a multiple of 16; tokens: tiles of 4, the 16-row panels from 6 on */
    const int64_t n_cols = NB * 256;
    quant_isa saved = quant_isa_active();
    int saved_vbmi = quant_tune_vbmi_force(1);
    for (size_t i = 0; i < sizeof VBMI_TYPES / sizeof *VBMI_TYPES; i++) {
        const uint32_t type = VBMI_TYPES[i];
        uint8_t *w = malloc(quant_row_bytes(type, n_cols) * R);
        vbmi_weights(w, type, (size_t)R * NB);
        float *x = malloc(sizeof(float) * T * (size_t)n_cols), ref[T * R], out[T * R];
        for (int64_t j = 0; j < T * n_cols; j++) x[j] = rndf() * (float)(1 + j % 5) * (j % 97 == 0 ? 100.f : 1.f);
        void *scratch = malloc(quant_scratch_bytes(type, T, n_cols));
        for (int n_tok = 1; n_tok <= T; n_tok++) {
            quant_isa_force(QUANT_ISA_PORTABLE);
            quant_matmul(ref, w, type, R, n_cols, x, n_tok, scratch, 1);
            for (int isa = QUANT_ISA_AVX512; isa <= (int)quant_isa_best(); isa++) {
                quant_isa_force((quant_isa)isa);
                if (!quant_tune_get()->vbmi) continue; /* a CPU without VBMI runs quant_iq_x86.inc's tiles */
                for (int threads = 1; threads <= 2; threads++) {
                    memset(out, 0xFF, sizeof out);
                    quant_matmul(out, w, type, R, n_cols, x, n_tok, scratch, threads);
                    for (int k = 0; k < n_tok * R; k++)
                        cr_assert(memcmp(&out[k], &ref[k], sizeof(float)) == 0, "%s %s %d tokens, %d threads: [%d] %.9g vs %.9g",
                                  gguf_type_name(type), quant_isa_name((quant_isa)isa), n_tok, threads, k, out[k], ref[k]);
                }
            }
        }
        free(scratch);
        free(x);
        free(w);
    }
    quant_tune_vbmi_force(saved_vbmi);
    quant_isa_force(saved);
}

Test(quant_iq, vbmi_can_be_turned_off_and_on) {
    int cpu = quant_tune_vbmi_force(1);
    int on = quant_tune_get()->vbmi;
    cr_expect_eq(quant_tune_vbmi_force(0), on);
    cr_expect_eq(quant_tune_get()->vbmi, 0);
    quant_tune_vbmi_force(cpu);
}

/* NVFP4's VBMI tile decodes the UE4M3 scales in lanes: row r has every sub-block scale byte r
 * (0..255: subnormal, normal, 0x7F read as 0, 0xFF), so that a wrong scale shows in its own row;
 * against the portable kernel, 1 to 5 tokens, 1 and 2 threads, within the float sums' rounding
 * (1e-6 of the largest the sum could be: 12 scale sum |x|). */
Test(quant_iq, nvfp4_vbmi_scales_match_portable_for_every_byte) {
    enum { R = 256, T = 5, NCOL = 128 };
    const size_t rb = quant_row_bytes(GGUF_TYPE_NVFP4, NCOL);
    quant_isa saved = quant_isa_active();
    int saved_vbmi = quant_tune_vbmi_force(1);
    uint8_t *w = malloc(rb * R);
    for (size_t i = 0; i < rb * R; i++) w[i] = (uint8_t)rnd();
    for (int r = 0; r < R; r++)
        for (size_t b = 0; b < rb / NVFP4_BYTES; b++) memset(w + r * rb + b * NVFP4_BYTES, r, 4);
    float x[T * NCOL], ref[T * R], out[T * R];
    for (int j = 0; j < T * NCOL; j++) x[j] = rndf() * (float)(1 + j % 3);
    void *scratch = malloc(quant_scratch_bytes(GGUF_TYPE_NVFP4, T, NCOL));
    for (int n_tok = 1; n_tok <= T; n_tok++) {
        quant_isa_force(QUANT_ISA_PORTABLE);
        quant_matmul(ref, w, GGUF_TYPE_NVFP4, R, NCOL, x, n_tok, scratch, 1);
        for (int isa = QUANT_ISA_AVX512; isa <= (int)quant_isa_best(); isa++) {
            quant_isa_force((quant_isa)isa);
            if (!quant_tune_get()->vbmi) continue;
            for (int threads = 1; threads <= 2; threads++) {
                memset(out, 0xFF, sizeof out);
                quant_matmul(out, w, GGUF_TYPE_NVFP4, R, NCOL, x, n_tok, scratch, threads);
                for (int k = 0; k < n_tok * R; k++) {
                    int r = k % R;
                    float ax = 0.f;
                    for (int j = 0; j < NCOL; j++) ax += fabsf(x[(k / R) * NCOL + j]);
                    cr_assert(r != 0x7F || out[k] == 0.f, "scale 0x7F reads as 0: %g", out[k]);
                    cr_assert(fabsf(out[k] - ref[k]) <= 1e-6f * 12.f * quant_ue4m3_half((uint8_t)r) * ax,
                              "%s scale byte %d, %d tokens, %d threads: %.9g vs %.9g", quant_isa_name((quant_isa)isa), r,
                              n_tok, threads, out[k], ref[k]);
                }
            }
        }
    }
    free(scratch);
    free(w);
    quant_tune_vbmi_force(saved_vbmi);
    quant_isa_force(saved);
}

// ---- the AVX2 panels of the grid types (x86/quant_iq_x86.inc) ------------------------------------

/* From 8 tokens the AVX2 kernels (and AVX-512's without VBMI) take 16 rows at a time through a
 * panel decoded once per super-block: the same exact integer per super-block and the same float
 * operations as the portable kernel, so its results are the portable ones bit for bit. Rows past
 * a multiple of 16 (masked lanes) and of 8 (a half panel), every batch size across the switch
 * (the one-row tiles below 8 tokens) and the panel's 4-token tiles, 1 and 2 threads; activations
 * random with outliers, and for odd tokens all of magnitude 127 after rounding (the largest
 * vpmaddubsw pairs, 255 x 62 twice, must not saturate). */
Test(quant_iq, avx2_panels_are_bit_identical_to_portable_at_tile_edges) {
    enum { R = 45, NB = 3, T = 33 };
    const int64_t n_cols = NB * 256;
    quant_isa saved = quant_isa_active();
    int saved_vbmi = quant_tune_vbmi_force(0);
    int checked = 0;
    for (size_t i = 0; i < sizeof VBMI_TYPES / sizeof *VBMI_TYPES; i++) {
        const uint32_t type = VBMI_TYPES[i];
        uint8_t *w = malloc(quant_row_bytes(type, n_cols) * R);
        vbmi_weights(w, type, (size_t)R * NB);
        float *x = malloc(sizeof(float) * T * (size_t)n_cols), ref[T * R], out[T * R];
        for (int64_t j = 0; j < T * n_cols; j++) {
            if ((j / n_cols) % 2) x[j] = (rnd() & 1) ? 0.5f : -0.5f;
            else x[j] = rndf() * (float)(1 + j % 5) * (j % 97 == 0 ? 100.f : 1.f);
        }
        void *scratch = malloc(quant_scratch_bytes(type, T, n_cols));
        for (int n_tok = 1; n_tok <= T; n_tok++) {
            quant_isa_force(QUANT_ISA_PORTABLE);
            quant_matmul(ref, w, type, R, n_cols, x, n_tok, scratch, 1);
            for (int isa = QUANT_ISA_AVX2; isa <= (int)quant_isa_best() && isa <= QUANT_ISA_AVX512; isa++) {
                quant_isa_force((quant_isa)isa);
                cr_assert_eq(quant_tune_get()->vbmi, 0);
                for (int threads = 1; threads <= 2; threads++) {
                    memset(out, 0xFF, sizeof out);
                    quant_matmul(out, w, type, R, n_cols, x, n_tok, scratch, threads);
                    for (int k = 0; k < n_tok * R; k++)
                        cr_assert(memcmp(&out[k], &ref[k], sizeof(float)) == 0, "%s %s %d tokens, %d threads: [%d] %.9g vs %.9g",
                                  gguf_type_name(type), quant_isa_name((quant_isa)isa), n_tok, threads, k, out[k], ref[k]);
                    checked++;
                }
            }
        }
        free(scratch);
        free(x);
        free(w);
    }
#if defined(__x86_64__)
    if (quant_isa_best() >= QUANT_ISA_AVX2) cr_assert_gt(checked, 0);
#endif
    quant_tune_vbmi_force(saved_vbmi);
    quant_isa_force(saved);
}
