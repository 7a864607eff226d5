/*
 * test_quant.c — the weight-type kernels (engine/kernels/quant.h).
 *
 * Dequantization is checked against hand-built blocks whose values follow from the GGUF block
 * layouts as the spec states them (built here from element index → byte/bit position, not by
 * re-running the decoder's loops), and against real tensors: the stories260K re-encodings must
 * dequantize close to the F32 originals. quant_matmul is checked against a float64 reference
 * computed from the dequantized rows, for every instruction set this CPU has (portable included),
 * n_tok 1 and > 1, odd row counts, and 1 and 2 threads.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sys/wait.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "quant.h"
#include "quant_impl.h"
#include "test_models.h"

// ---- helpers -----------------------------------------------------------------------------------

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "test_rng.h"

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static const uint32_t ALL_TYPES[] = {GGUF_TYPE_F32,  GGUF_TYPE_F16,  GGUF_TYPE_BF16, GGUF_TYPE_Q8_0,
                                     GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K};

/* The f16 field at byte off of each of n blocks of `bytes`: base + spread * rndf() (|rndf()| with abs). */
static void f16_fields(uint8_t *w, int64_t n, size_t bytes, size_t off, float base, float spread, int abs) {
    for (int64_t b = 0; b < n; b++) {
        float r = rndf();
        put16(w + bytes * (size_t)b + off, quant_f32_to_f16(base + spread * (abs ? fabsf(r) : r)));
    }
}

/* Two such fields side by side (d and dmin, d and m) at off and off + 2. */
static void f16_pair(uint8_t *w, int64_t n, size_t bytes, size_t off, float base0, float spread0, float base1,
                     float spread1) {
    f16_fields(w, n, bytes, off, base0, spread0, 0);
    f16_fields(w, n, bytes, off + 2, base1, spread1, 0);
}

/* Fills n_rows rows of random but well-formed weights of `type` (scales kept finite and small). */
static void random_weights(uint8_t *w, uint32_t type, int64_t n_rows, int64_t n_cols) {
    size_t rb = quant_row_bytes(type, n_cols);
    for (size_t i = 0; i < rb * (size_t)n_rows; i++) w[i] = (uint8_t)rnd();
    int64_t n = n_rows * n_cols;
    switch (type) {
    case GGUF_TYPE_F32:
        for (int64_t i = 0; i < n; i++) ((float *)w)[i] = rndf();
        break;
    case GGUF_TYPE_F16:
        for (int64_t i = 0; i < n; i++) put16(w + 2 * i, quant_f32_to_f16(rndf()));
        break;
    case GGUF_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) put16(w + 2 * i, quant_f32_to_bf16(rndf()));
        break;
    /* the f16 scales (and d / dmin, d / m pairs) of each block, kept finite and small */
    case GGUF_TYPE_Q8_0: f16_fields(w, n / 32, 34, 0, 0.01f, 0.01f, 1); break;
    case GGUF_TYPE_Q4_0: f16_fields(w, n / 32, 18, 0, 0.1f, 0.1f, 0); break;
    case GGUF_TYPE_Q4_K: f16_pair(w, n / 256, 144, 0, 0.002f, 0.001f, 0.004f, 0.001f); break;
    case GGUF_TYPE_Q6_K: f16_fields(w, n / 256, 210, 208, 0.0005f, 0.0002f, 0); break;
    case GGUF_TYPE_Q4_1: f16_pair(w, n / 32, 20, 0, 0.1f, 0.05f, -0.8f, 0.5f); break;
    case GGUF_TYPE_Q5_1: f16_pair(w, n / 32, 24, 0, 0.05f, 0.02f, -0.8f, 0.5f); break;
    case GGUF_TYPE_Q5_0: f16_fields(w, n / 32, 22, 0, 0.05f, 0.05f, 0); break;
    case GGUF_TYPE_IQ4_NL: f16_fields(w, n / 32, 18, 0, 0.005f, 0.002f, 0); break;
    case GGUF_TYPE_MXFP4:
        for (int64_t b = 0; b < n / 32; b++) w[17 * b] = (uint8_t)(118 + rnd() % 8); /* 2^-10 .. 2^-3 */
        break;
    case GGUF_TYPE_Q2_K: f16_pair(w, n / 256, 84, 80, 0.01f, 0.004f, 0.01f, 0.004f); break;
    case GGUF_TYPE_Q3_K: f16_fields(w, n / 256, 110, 108, 0.004f, 0.002f, 0); break;
    case GGUF_TYPE_Q5_K: f16_pair(w, n / 256, 176, 0, 0.001f, 0.0005f, 0.004f, 0.001f); break;
    case GGUF_TYPE_IQ4_XS: f16_fields(w, n / 256, 136, 0, 0.0002f, 0.0001f, 0); break;
    /* issue 47's types: any index and sign byte is valid; d kept finite */
    case GGUF_TYPE_IQ2_XXS: f16_fields(w, n / 256, 66, 0, 0.002f, 0.001f, 0); break;
    case GGUF_TYPE_IQ2_XS: f16_fields(w, n / 256, 74, 0, 0.002f, 0.001f, 0); break;
    case GGUF_TYPE_IQ2_S: f16_fields(w, n / 256, 82, 0, 0.002f, 0.001f, 0); break;
    case GGUF_TYPE_IQ3_XXS: f16_fields(w, n / 256, 98, 0, 0.001f, 0.0005f, 0); break;
    case GGUF_TYPE_IQ3_S: f16_fields(w, n / 256, 110, 0, 0.001f, 0.0005f, 0); break;
    case GGUF_TYPE_IQ1_S: f16_fields(w, n / 256, 50, 0, 0.02f, 0.01f, 0); break;
    case GGUF_TYPE_IQ1_M: /* d's four nibbles are the top nibbles of the four scale words (bytes 48..55) */
        for (int64_t b = 0; b < n / 256; b++) {
            uint16_t d = quant_f32_to_f16(0.02f + 0.01f * rndf());
            for (int k = 0; k < 4; k++) w[56 * b + 49 + 2 * k] = (uint8_t)((w[56 * b + 49 + 2 * k] & 0x0F) | ((d >> (4 * k)) & 15) << 4);
        }
        break;
    case GGUF_TYPE_TQ1_0: f16_fields(w, n / 256, 54, 52, 0.02f, 0.01f, 0); break;
    case GGUF_TYPE_TQ2_0: f16_fields(w, n / 256, 66, 64, 0.02f, 0.01f, 0); break;
    case GGUF_TYPE_NVFP4: /* four E4M3 scales a block: 2^-2 .. 2^1 (halved) */
        for (int64_t b = 0; b < n / 64; b++)
            for (int k = 0; k < 4; k++) w[36 * b + k] = (uint8_t)(0x30 + rnd() % 24);
        break;
    default: cr_assert_fail("type %u", type);
    }
}

/* The types added after the first seven (issue 27): kept apart so the tests above that pin
 * behaviour of the first seven (bit-exact float sums with exactly representable activations,
 * register tiles) stay as they were. */
static const uint32_t NEW_TYPES[] = {GGUF_TYPE_Q4_1,   GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1, GGUF_TYPE_IQ4_NL, GGUF_TYPE_MXFP4,
                                     GGUF_TYPE_Q2_K,   GGUF_TYPE_Q3_K, GGUF_TYPE_Q5_K, GGUF_TYPE_IQ4_XS};
#define N_NEW_TYPES (sizeof NEW_TYPES / sizeof *NEW_TYPES)
/* issue 47's low-bit types (engine/quant_iq.c; their dequantization: test_quant_iq.c) */
static const uint32_t LOWBIT_TYPES[] = {GGUF_TYPE_IQ2_XXS, GGUF_TYPE_IQ2_XS, GGUF_TYPE_IQ2_S, GGUF_TYPE_IQ3_XXS,
                                        GGUF_TYPE_IQ3_S,   GGUF_TYPE_IQ1_S,  GGUF_TYPE_IQ1_M, GGUF_TYPE_TQ1_0,
                                        GGUF_TYPE_TQ2_0,   GGUF_TYPE_NVFP4};
#define N_LOWBIT_TYPES (sizeof LOWBIT_TYPES / sizeof *LOWBIT_TYPES)

// ---- float64 floors: the exact quantized dot product ---------------------------------------------
//
// What a kernel computes, exactly, in float64: the weights as stored (d * q, each product exact)
// times the activations as the type's form rounds them (d_x * q_x; Q8_1's block sums s for the
// minimums), summed. A kernel's float32 arithmetic differs from it by rounding only: at most one
// float term per 16 columns (a block's or sub-block's exact integer sum, a minimum's term), each
// through at most three roundings, summed in any order, so |kernel - exact| <= gamma(n_cols / 16
// + 4) * sum |terms| (gamma_k = k u / (1 - k u), u = 2^-24; Higham, Accuracy and Stability of
// Numerical Algorithms, 3.1-3.2). Against the unrounded activations the rounding of the form is
// the floor: |x - d_x q_x| <= (1/2 + 2^-20 + 127 * 2^-11) amax / 127 per element (half a step,
// the float product x * 127 / amax, and Q8_0's step kept at f16 precision; Q8_K's f32 step is
// closer), and Q8_1's s = f16(d_x * sum q) adds its rounding 2^-11 |s| and 32 half steps of the
// unrounded step per block (ref is d * q + m times the unrounded x, summed in float64).
#define ACT_STEP_ERR (0.5 + 0x1p-20 + 127 * 0x1p-11)

/* A type's f16 fields that scale its codes (d) and its minimum (m, dmin), 0 where it has none. */
static int min_fields(uint32_t type, size_t *bytes, size_t *d_off, size_t *m_off) {
    switch (type) {
    case GGUF_TYPE_Q4_1: *bytes = 20, *d_off = 0, *m_off = 2; return 1;
    case GGUF_TYPE_Q5_1: *bytes = 24, *d_off = 0, *m_off = 2; return 1;
    case GGUF_TYPE_Q4_K: *bytes = 144, *d_off = 0, *m_off = 2; return 1;
    case GGUF_TYPE_Q5_K: *bytes = 176, *d_off = 0, *m_off = 2; return 1;
    case GGUF_TYPE_Q2_K: *bytes = 84, *d_off = 80, *m_off = 82; return 1;
    default: return 0;
    }
}

/* Row `row` in float64, exactly, as wd (the codes' part) + wm (the minimums' part). Dequantizing
 * is exact in float (an f16 times small integers) but for adding the minimum, so each part is
 * dequantized with the other's scale set to zero; the whole row then is their sum rounded once. */
static void exact_row(double *wd, double *wm, const uint8_t *row, uint32_t type, int64_t n_cols) {
    size_t rb = quant_row_bytes(type, n_cols), bytes = rb, d_off = 0, m_off = 0;
    int has_min = min_fields(type, &bytes, &d_off, &m_off);
    uint8_t *tmp = malloc(rb);
    float *f = malloc((size_t)n_cols * sizeof(float));
    for (int part = 0; part < 2; part++) {
        memcpy(tmp, row, rb);
        for (size_t b = 0; has_min && b < rb / bytes; b++) put16(tmp + b * bytes + (part ? d_off : m_off), 0);
        quant_dequantize_row(f, tmp, type, n_cols);
        for (int64_t c = 0; c < n_cols; c++) (part ? wm : wd)[c] = part && !has_min ? 0.0 : f[c];
    }
    quant_dequantize_row(f, row, type, n_cols);
    for (int64_t c = 0; c < n_cols; c++)
        cr_assert(f[c] == (float)(wd[c] + wm[c]), "%s col %ld: the parts do not sum to the row", gguf_type_name(type),
                  (long)c); /* == : a zero code gives -0 where d < 0 */
    free(tmp);
    free(f);
}

/* Token t's activations in the form of `type` (quant_kernels_portable's preparation, which every
 * instruction set matches bit for bit): dxq[c] = d_x * q_x exactly, amax per block, Q8_1's s. */
static int act_form_of(uint32_t type, const float *x, int64_t n, double *dxq, double *amax, double *s) {
    const quant_act_form form = quant_traits_of(type)->act;
    const int bs = form == QUANT_ACT_Q8_K ? 256 : 32;
    float *d = malloc((size_t)(n / bs) * sizeof(float)), *sf = malloc((size_t)(n / 32) * sizeof(float));
    int8_t *q = malloc((size_t)n);
    int16_t *bsums = malloc((size_t)(n / 16) * sizeof(int16_t));
    int32_t *xsum = calloc((size_t)(n / 32), sizeof(int32_t));
    if (form == QUANT_ACT_Q8_K) quant_kernels_portable.prep_q8_k(d, q, bsums, x, n);
    else quant_kernels_portable.prep_q8_0(d, q, x, n);
    for (int64_t c = 0; c < n; c++) {
        dxq[c] = (double)d[c / bs] * q[c];
        xsum[c / 32] += q[c];
        if (c % bs == 0) amax[c / bs] = 0;
        amax[c / bs] = fmax(amax[c / bs], fabs(x[c]));
    }
    if (form == QUANT_ACT_Q8_1) quant_act_q8_1_sums(sf, xsum, x, n);
    for (int64_t b = 0; b < n / 32; b++) s[b] = form == QUANT_ACT_Q8_1 ? sf[b] : 0;
    free(d), free(sf), free(q), free(bsums), free(xsum);
    return bs;
}

/* For tokens t < n_tok and rows r < R of w: exact[t R + r] (the exact quantized dot product),
 * bound[...] (the float32 rounding a kernel may add to it), and checks the exact values against
 * float64 with the unrounded activations within the activation floor. */
static void exact_products(double *exact, double *bound, const uint8_t *w, uint32_t type, int64_t R, int64_t C,
                           const float *x, int n_tok) {
    const int q8_1 = quant_traits_of(type)->act == QUANT_ACT_Q8_1;
    const double k = (double)(C / 16 + 4), gamma = k * 0x1p-24 / (1 - k * 0x1p-24);
    double *wd = malloc((size_t)C * sizeof(double)), *wm = malloc((size_t)C * sizeof(double));
    double *dxq = malloc((size_t)C * sizeof(double)), *amax = malloc((size_t)(C / 32) * sizeof(double));
    double *s = malloc((size_t)(C / 32) * sizeof(double));
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + t * C;
        int bs = act_form_of(type, xt, C, dxq, amax, s);
        for (int64_t r = 0; r < R; r++) {
            exact_row(wd, wm, w + (size_t)r * quant_row_bytes(type, C), type, C);
            double ex = 0, mag = 0, ref = 0, floor = 0;
            for (int64_t c = 0; c < C; c++) {
                double main = wd[c] + (q8_1 ? 0 : wm[c]);
                ex += main * dxq[c], mag += fabs(wd[c] * dxq[c]) + (q8_1 ? 0 : fabs(wm[c] * dxq[c]));
                ref += (wd[c] + wm[c]) * xt[c];
                floor += fabs(main) * ACT_STEP_ERR * amax[c / bs] / 127;
            }
            for (int64_t b = 0; q8_1 && b < C / 32; b++) { /* the minimums: m s against m sum(x) */
                ex += wm[32 * b] * s[b], mag += fabs(wm[32 * b] * s[b]);
                floor += fabs(wm[32 * b]) * (0x1p-11 * 1.01 * fabs(s[b]) + 32 * (0.5 + 0x1p-20) * amax[b] / 127);
            }
            cr_assert(fabs(ex - ref) <= floor, "%s row %ld tok %d: exact %.12g vs float64 %.12g beyond the floor %.3g",
                      gguf_type_name(type), (long)r, t, ex, ref, floor);
            exact[t * R + r] = ex, bound[t * R + r] = gamma * mag;
        }
    }
    free(wd), free(wm), free(dxq), free(amax), free(s);
}

/* out (n_tok x R) within the float32 rounding bound of the exact quantized products */
static void check_exact(const float *out, const double *exact, const double *bound, int64_t R, int n_tok, uint32_t type,
                        const char *what, int n) {
    for (int64_t k = 0; k < (int64_t)n_tok * R; k++)
        cr_assert(fabs(out[k] - exact[k]) <= bound[k], "%s %s (%d) [%ld]: %.9g vs exact %.12g (bound %.3g)", what,
                  gguf_type_name(type), n, (long)k, out[k], exact[k], bound[k]);
}

/* Largest error the activation rounding of a float type may add to element i: f16 / bf16
 * rounding of |x_i| (the quantized types' floors are exact_products'). */
static double act_err(uint32_t type, const float *x, int64_t i) {
    switch (type) {
    case GGUF_TYPE_F16: return fabs(x[i]) * 0x1p-11 + 0x1p-25;
    case GGUF_TYPE_BF16: return fabs(x[i]) * 0x1p-8;
    default: return 0; /* F32 */
    }
}

/* Checks out (n_tok, n_rows) against float64 sums over the dequantized weights. With exact_act,
 * x is known to be representable in the activation form, so only float summation may differ. */
static void check_matmul(const float *out, const uint8_t *w, uint32_t type, int64_t n_rows, int64_t n_cols,
                         const float *x, int n_tok, int exact_act, const char *what) {
    if (quant_traits_of(type)->act >= QUANT_ACT_Q8_0) { /* the float64 floors of a quantized type */
        double *exact = malloc((size_t)n_tok * (size_t)n_rows * sizeof(double));
        double *bound = malloc((size_t)n_tok * (size_t)n_rows * sizeof(double));
        exact_products(exact, bound, w, type, n_rows, n_cols, x, n_tok);
        check_exact(out, exact, bound, n_rows, n_tok, type, what, n_tok);
        free(exact);
        free(bound);
        return;
    }
    size_t rb = quant_row_bytes(type, n_cols);
    float *row = malloc((size_t)n_cols * sizeof(float));
    for (int64_t r = 0; r < n_rows; r++) {
        quant_dequantize_row(row, w + r * rb, type, n_cols);
        for (int t = 0; t < n_tok; t++) {
            const float *xt = x + t * n_cols;
            double ref = 0, mag = 0, bound = 0;
            for (int64_t c = 0; c < n_cols; c++) {
                ref += (double)row[c] * xt[c];
                mag += fabs((double)row[c] * xt[c]);
                if (!exact_act) bound += fabs(row[c]) * act_err(type, xt, c);
            }
            double tol = bound + 2e-6 * mag + 1e-6;
            double got = out[t * n_rows + r];
            cr_assert(fabs(got - ref) <= tol, "%s: %s row %ld tok %d: got %.9g want %.9g (tol %.3g)", what,
                      gguf_type_name(type), (long)r, t, got, ref, tol);
        }
    }
    free(row);
}

static void *scratch_for(uint32_t type, int n_tok, int64_t n_cols, size_t *bytes) {
    *bytes = quant_scratch_bytes(type, n_tok, n_cols);
    /* one byte of slack: the kernels are handed a deliberately misaligned pointer (p + 1) and
     * may use exactly `bytes` from there; ASan would see any overrun */
    return malloc(*bytes + 1);
}

/* Random weights of `type` (R x C), T rows of activations (element j scaled by 1 + j % mod; mod 1:
 * plain rndf()) and scratch for T tokens: the inputs of the matmul tests below. */
typedef struct mm_inputs {
    uint8_t *w, *scratch;
    float *x;
} mm_inputs;

static mm_inputs mm_inputs_make(uint32_t type, int64_t R, int64_t C, int T, int mod) {
    mm_inputs in = {malloc(quant_row_bytes(type, C) * (size_t)R), NULL, malloc((size_t)T * (size_t)C * sizeof(float))};
    random_weights(in.w, type, R, C);
    for (int64_t j = 0; j < T * C; j++) in.x[j] = rndf() * (1.0f + (float)(j % mod));
    size_t sb;
    in.scratch = scratch_for(type, T, C, &sb);
    return in;
}

static void mm_inputs_free(mm_inputs *in) {
    free(in->w);
    free(in->x);
    free(in->scratch);
}

// ---- conversions -------------------------------------------------------------------------------

Test(quant, f16_known_values_convert_exactly) {
    cr_assert_eq(quant_f16_to_f32(0x3C00), 1.0f);
    cr_assert_eq(quant_f16_to_f32(0xC000), -2.0f);
    cr_assert_eq(quant_f16_to_f32(0x7BFF), 65504.0f);
    cr_assert_eq(quant_f16_to_f32(0x0001), 0x1p-24f);  /* smallest subnormal */
    cr_assert_eq(quant_f16_to_f32(0x03FF), 1023 * 0x1p-24f); /* largest subnormal */
    cr_assert_eq(quant_f16_to_f32(0x0400), 0x1p-14f);  /* smallest normal */
    cr_assert(isinf(quant_f16_to_f32(0x7C00)) && quant_f16_to_f32(0x7C00) > 0);
    cr_assert(isinf(quant_f16_to_f32(0xFC00)) && quant_f16_to_f32(0xFC00) < 0);
    cr_assert(isnan(quant_f16_to_f32(0x7E00)));
    cr_assert(signbit(quant_f16_to_f32(0x8000)) && quant_f16_to_f32(0x8000) == 0.0f);

    cr_assert_eq(quant_f32_to_f16(1.0f), 0x3C00);
    cr_assert_eq(quant_f32_to_f16(65504.0f), 0x7BFF);
    cr_assert_eq(quant_f32_to_f16(65519.0f), 0x7BFF); /* just below the halfway point */
    cr_assert_eq(quant_f32_to_f16(65520.0f), 0x7C00); /* ties to even = overflow to inf */
    cr_assert_eq(quant_f32_to_f16(1e10f), 0x7C00);
    cr_assert_eq(quant_f32_to_f16(-INFINITY), 0xFC00);
    cr_assert_eq(quant_f32_to_f16(0x1p-24f), 0x0001);
    cr_assert_eq(quant_f32_to_f16(0x1p-25f), 0x0000);           /* tie to even: 0 */
    cr_assert_eq(quant_f32_to_f16(0x1.8p-25f), 0x0001);         /* above the tie */
    cr_assert_eq(quant_f32_to_f16(3 * 0x1p-25f), 0x0002);       /* 1.5 ulp ties to 2 */
    cr_assert_eq(quant_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);     /* tie, even stays */
    cr_assert_eq(quant_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02); /* tie, odd rounds up */
    cr_assert_eq(quant_f32_to_f16(-0.0f), 0x8000);
    uint16_t n = quant_f32_to_f16(NAN);
    cr_assert((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0, "nan -> %04x", n);
}

Test(quant, f16_round_trips_every_half_value) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = quant_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            cr_assert((h & 0x7C00) == 0x7C00 && (h & 0x3FF), "%04x", h);
            continue;
        }
        cr_assert_eq(quant_f32_to_f16(f), h, "half %04x -> %g -> %04x", h, f, quant_f32_to_f16(f));
    }
}

#ifdef __FLT16_MAX__
/* The compiler's _Float16 conversions are an independent implementation of the same IEEE rules. */
Test(quant, f16_conversion_matches_compiler_float16) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t hh = (uint16_t)h;
        _Float16 v;
        memcpy(&v, &hh, 2);
        float want = (float)v, got = quant_f16_to_f32(hh);
        if (isnan(want)) cr_assert(isnan(got));
        else cr_assert_eq(f32_bits(got), f32_bits(want), "%04x", h);
    }
    for (int i = 0; i < 2000000; i++) {
        /* random bit patterns, biased towards the half range so subnormals and ties are hit */
        uint32_t u = rnd() << 1 ^ rnd();
        if (i & 1) u = (u & 0x80FFFFFF) | ((uint32_t)(100 + rnd() % 50) << 23);
        float f = bits_f32(u);
        _Float16 v = (_Float16)f;
        uint16_t want;
        memcpy(&want, &v, 2);
        uint16_t got = quant_f32_to_f16(f);
        if (isnan(f)) cr_assert((got & 0x7C00) == 0x7C00 && (got & 0x3FF));
        else cr_assert_eq(got, want, "%a (%08x): got %04x want %04x", f, u, got, want);
    }
}
#endif

Test(quant, bf16_converts_with_round_to_nearest_even) {
    cr_assert_eq(quant_bf16_to_f32(0x3F80), 1.0f);
    cr_assert_eq(quant_bf16_to_f32(0xC040), -3.0f);
    cr_assert_eq(quant_f32_to_bf16(1.0f), 0x3F80);
    cr_assert_eq(quant_f32_to_bf16(bits_f32(0x3F808000)), 0x3F80); /* tie, even stays */
    cr_assert_eq(quant_f32_to_bf16(bits_f32(0x3F818000)), 0x3F82); /* tie, odd rounds up */
    cr_assert_eq(quant_f32_to_bf16(bits_f32(0x3F808001)), 0x3F81); /* above the tie */
    cr_assert_eq(quant_f32_to_bf16(INFINITY), 0x7F80);
    uint16_t n = quant_f32_to_bf16(NAN);
    cr_assert((n & 0x7F80) == 0x7F80 && (n & 0x7F));
}

// ---- sizes -------------------------------------------------------------------------------------

Test(quant, row_bytes_follow_block_sizes) {
    cr_assert_eq(quant_row_bytes(GGUF_TYPE_F32, 172), 688);
    cr_assert_eq(quant_row_bytes(GGUF_TYPE_F16, 172), 344);
    cr_assert_eq(quant_row_bytes(GGUF_TYPE_BF16, 64), 128);
    cr_assert_eq(quant_row_bytes(GGUF_TYPE_Q8_0, 256), 8 * 34);
    cr_assert_eq(quant_row_bytes(GGUF_TYPE_Q4_0, 64), 2 * 18);
    cr_assert_eq(quant_row_bytes(GGUF_TYPE_Q4_K, 512), 2 * 144);
    cr_assert_eq(quant_row_bytes(GGUF_TYPE_Q6_K, 768), 3 * 210);
    cr_assert_eq(quant_row_bytes(999, 256), 0);
    cr_assert_eq(quant_scratch_bytes(GGUF_TYPE_F32, 4, 256), 0);
    cr_assert_geq(quant_scratch_bytes(GGUF_TYPE_Q8_0, 4, 256), 4 * 256 + 4 * 8 * sizeof(float));
}

// ---- dequantization of hand-built blocks -------------------------------------------------------

Test(quant, q8_0_block_dequantizes_to_d_times_q) {
    uint8_t blk[2 * 34];
    for (int b = 0; b < 2; b++) {
        put16(blk + 34 * b, b ? 0xB800 /* -0.5 */ : 0x4000 /* 2 */);
        for (int j = 0; j < 32; j++) blk[34 * b + 2 + j] = (uint8_t)(int8_t)(j * 8 - 128);
    }
    float y[64];
    quant_dequantize_row(y, blk, GGUF_TYPE_Q8_0, 64);
    for (int j = 0; j < 32; j++) {
        cr_assert_eq(y[j], 2.0f * (j * 8 - 128));
        cr_assert_eq(y[32 + j], -0.5f * (j * 8 - 128));
    }
}

Test(quant, q4_0_low_nibbles_come_first_then_high_nibbles) {
    uint8_t blk[18];
    put16(blk, 0x3800); /* d = 0.5 */
    for (int j = 0; j < 16; j++) blk[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    quant_dequantize_row(y, blk, GGUF_TYPE_Q4_0, 32);
    for (int j = 0; j < 16; j++) {
        cr_assert_eq(y[j], 0.5f * (j - 8), "elem %d", j);
        cr_assert_eq(y[j + 16], 0.5f * (15 - j - 8), "elem %d", j + 16);
    }
}

/* Packs 8 six-bit scales and mins into Q4_K's 12 bytes: bytes 0-3 hold sc[0..3] in their low 6
 * bits and the top 2 bits of sc[4..7]; bytes 4-7 the same for the mins; bytes 8-11 the low
 * nibbles of sc[4..7] (low half) and of mn[4..7] (high half). */
static void pack_q4k_scales(uint8_t s[12], const uint8_t sc[8], const uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
}

Test(quant, q4_k_superblock_dequantizes_with_six_bit_scales_and_mins) {
    const uint8_t sc[8] = {1, 63, 17, 32, 5, 48, 62, 33};
    const uint8_t mn[8] = {0, 7, 63, 16, 40, 1, 31, 59};
    uint8_t blk[144];
    put16(blk, 0x3400);     /* d = 0.25 */
    put16(blk + 2, 0x3000); /* dmin = 0.125 */
    pack_q4k_scales(blk + 4, sc, mn);
    uint8_t q[256];
    memset(blk + 16, 0, 128);
    for (int i = 0; i < 256; i++) {
        q[i] = (uint8_t)((i * 7 + i / 64) & 15);
        /* element i: chunk i/64; its first 32 are low nibbles of bytes 32*chunk.., next 32 high */
        int chunk = i / 64, in = i % 64, byte = 32 * chunk + in % 32;
        blk[16 + byte] |= (uint8_t)(in < 32 ? q[i] : q[i] << 4);
    }
    float y[256];
    quant_dequantize_row(y, blk, GGUF_TYPE_Q4_K, 256);
    for (int i = 0; i < 256; i++) {
        int sub = i / 32;
        float want = 0.25f * sc[sub] * q[i] - 0.125f * mn[sub];
        cr_assert_eq(y[i], want, "elem %d: got %g want %g", i, y[i], want);
    }
}

Test(quant, q6_k_superblock_dequantizes_in_ggml_interleaved_order) {
    int8_t sc[16];
    for (int k = 0; k < 16; k++) sc[k] = (int8_t)(k * 17 - 128 + (k == 15 ? 3 : 0)); /* -128..127 */
    uint8_t blk[210];
    memset(blk, 0, sizeof blk);
    memcpy(blk + 192, sc, 16);
    put16(blk + 208, 0x2C00); /* d = 1/16 */
    uint8_t q[256];
    for (int i = 0; i < 256; i++) {
        q[i] = (uint8_t)((i * 37 + 11) & 63);
        /* element i = 128*n + 32*g + l: low 4 bits in ql[64n + 32*(g&1) + l] (low nibble for
         * g < 2, high for g >= 2), top 2 bits in qh[32n + l] at bit 2g */
        int n = i / 128, g = (i % 128) / 32, l = i % 32;
        int qlb = 64 * n + 32 * (g & 1) + l;
        blk[qlb] |= (uint8_t)((q[i] & 15) << (g < 2 ? 0 : 4));
        blk[128 + 32 * n + l] |= (uint8_t)((q[i] >> 4) << (2 * g));
    }
    float y[256];
    quant_dequantize_row(y, blk, GGUF_TYPE_Q6_K, 256);
    for (int i = 0; i < 256; i++) {
        int s = i / 16; /* sub-blocks of 16 in element order */
        float want = 0.0625f * (float)(sc[s] * (q[i] - 32));
        cr_assert_eq(y[i], want, "elem %d: got %g want %g", i, y[i], want);
    }
}

Test(quant, f16_and_bf16_rows_dequantize_elementwise) {
    uint16_t h[4] = {0x3C00, 0xC200, 0x0001, 0x7BFF};
    float y[4];
    quant_dequantize_row(y, h, GGUF_TYPE_F16, 4);
    cr_assert(y[0] == 1.0f && y[1] == -3.0f && y[2] == 0x1p-24f && y[3] == 65504.0f);
    uint16_t b[2] = {0x4049, 0xBF80};
    quant_dequantize_row(y, b, GGUF_TYPE_BF16, 2);
    cr_assert(y[0] == bits_f32(0x40490000) && y[1] == -1.0f);
}

// ---- dequantization of real tensors ------------------------------------------------------------

/* Every tensor of the re-encoded file dequantizes within the type's rounding of the F32 original. */
static void compare_with_f32(const char *file, uint32_t want_type) {
    char p32[1024], pq[1024];
    test_model_path("stories260K.gguf", p32, sizeof p32);
    test_model_path(file, pq, sizeof pq);
    gguf_file *f32 = NULL, *fq = NULL;
    attnd_err err;
    cr_assert_eq(gguf_open(&f32, p32, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(gguf_open(&fq, pq, &err), ATTND_OK, "%s", err.msg);
    int checked = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(fq); i++) {
        const gguf_tensor *tq = gguf_tensor_at(fq, i);
        if (tq->type != want_type) continue;
        const gguf_tensor *to = gguf_find_tensor(f32, tq->name);
        cr_assert(to && to->type == GGUF_TYPE_F32 && to->n_elems == tq->n_elems, "%s", tq->name);
        int64_t n = (int64_t)tq->ne[0], rows = (int64_t)(tq->n_elems / tq->ne[0]);
        size_t rb = quant_row_bytes(tq->type, n);
        float *y = malloc((size_t)n * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            quant_dequantize_row(y, (const uint8_t *)tq->data + r * rb, tq->type, n);
            const float *x = (const float *)to->data + r * n;
            for (int64_t c = 0; c < n; c++) {
                double tol;
                if (want_type == GGUF_TYPE_F16) tol = fabs(x[c]) * 0x1p-11 + 0x1p-25;
                else if (want_type == GGUF_TYPE_BF16) tol = fabs(x[c]) * 0x1p-8;
                else {
                    double amax = 0;
                    for (int64_t j = c / 32 * 32; j < c / 32 * 32 + 32; j++) amax = fmax(amax, fabs(x[j]));
                    /* Q8_0: half a step of amax/127. Q4_0: half a step of the block's own
                     * scale d inside its grid d * [-8, 7] (d may be negative), plus the distance to the grid's end for
                     * values outside it (the encoder may pick d below amax/8 and clamp) */
                    if (want_type == GGUF_TYPE_Q8_0) {
                        tol = amax / 127 * 0.51;
                    } else {
                        uint16_t dh;
                        memcpy(&dh, (const uint8_t *)tq->data + r * rb + (size_t)(c / 32) * 18, 2);
                        double d = quant_f16_to_f32(dh), lo = fmin(-8 * d, 7 * d), hi = fmax(-8 * d, 7 * d);
                        tol = fabs(d) * 0.51 + fmax(0.0, fmax(x[c] - hi, lo - x[c]));
                    }
                    tol += amax * 1e-3; /* the block scale is stored as f16 */
                }
                cr_assert(fabs(y[c] - x[c]) <= tol, "%s[%ld][%ld]: %g vs %g", tq->name, (long)r, (long)c, y[c], x[c]);
            }
        }
        free(y);
        checked++;
    }
    cr_assert_gt(checked, 0, "no %s tensors in %s", gguf_type_name(want_type), file);
    gguf_close(f32);
    gguf_close(fq);
}

Test(quant, stories_f16_tensors_match_f32_originals) { compare_with_f32("stories260K-F16.gguf", GGUF_TYPE_F16); }
Test(quant, stories_bf16_tensors_match_f32_originals) { compare_with_f32("stories260K-BF16.gguf", GGUF_TYPE_BF16); }
Test(quant, stories_q8_0_tensors_match_f32_originals) { compare_with_f32("stories260K-Q8_0.gguf", GGUF_TYPE_Q8_0); }
Test(quant, stories_q4_0_tensors_match_f32_originals) { compare_with_f32("stories260K-Q4_0.gguf", GGUF_TYPE_Q4_0); }

// ---- matmul ------------------------------------------------------------------------------------

/* Runs quant_matmul on random data for every ISA, thread count and n_tok given, checking each
 * result against the float64 reference and every ISA/thread result against the others. */
static void matmul_case(uint32_t type, int64_t n_rows, int64_t n_cols, int n_tok, int exact_act) {
    size_t rb = quant_row_bytes(type, n_cols);
    uint8_t *w = malloc(rb * (size_t)n_rows);
    float *x = malloc((size_t)n_tok * (size_t)n_cols * sizeof(float));
    float *out = malloc((size_t)n_tok * (size_t)n_rows * sizeof(float));
    float *first = malloc((size_t)n_tok * (size_t)n_rows * sizeof(float));
    random_weights(w, type, n_rows, n_cols);
    for (int64_t i = 0; i < n_tok * n_cols; i++) {
        if (!exact_act) {
            x[i] = rndf() * (1.0f + (float)(i % 7)); /* uneven magnitudes across blocks */
        } else {
            /* integers in [-127, 127] with 127 in every 32-block (and hence every 256-block):
             * exactly representable in Q8_0 (d = 1), Q8_K (d = -1), f16 and bf16 */
            x[i] = (i % 32 == 5) ? 127.0f : (float)((int)(rnd() % 255) - 127);
        }
    }
    size_t sb;
    uint8_t *scratch = scratch_for(type, n_tok, n_cols, &sb);
    quant_isa saved = quant_isa_active();
    int have_first = 0;
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        for (int threads = 1; threads <= 2; threads++) {
            char what[96];
            snprintf(what, sizeof what, "%s, %d thread(s), n_tok %d, %ldx%ld", quant_isa_name((quant_isa)isa),
                     threads, n_tok, (long)n_rows, (long)n_cols);
            memset(out, 0xFF, (size_t)n_tok * (size_t)n_rows * sizeof(float)); /* nan: unwritten shows */
            quant_matmul(out, w, type, n_rows, n_cols, x, n_tok, scratch + 1, threads);
            check_matmul(out, w, type, n_rows, n_cols, x, n_tok, exact_act, what);
            if (!have_first) {
                memcpy(first, out, (size_t)n_tok * (size_t)n_rows * sizeof(float));
                have_first = 1;
                continue;
            }
            /* same integers, only the float order of block terms may differ between ISAs */
            for (int64_t i = 0; i < n_tok * n_rows; i++)
                cr_assert(fabsf(out[i] - first[i]) <= 1e-4f * (fabsf(first[i]) + 1.0f), "%s: [%ld] %g vs %g", what,
                          (long)i, out[i], first[i]);
        }
    }
    quant_isa_force(saved);
    free(scratch);
    free(w);
    free(x);
    free(out);
    free(first);
}

static int64_t cols_for(uint32_t type) {
    switch (type) {
    case GGUF_TYPE_F32:
    case GGUF_TYPE_F16:
    case GGUF_TYPE_BF16: return 172; /* not a multiple of any vector width: tails get exercised */
    case GGUF_TYPE_Q8_0:
    case GGUF_TYPE_Q4_0: return 352; /* 11 blocks */
    default: return gguf_type_block_elems(type) == 32 ? 352 : 768; /* 3 super-blocks */
    }
}

Test(quant, matmul_single_token_matches_float64_reference) {
    for (size_t i = 0; i < sizeof ALL_TYPES / sizeof *ALL_TYPES; i++) matmul_case(ALL_TYPES[i], 37, cols_for(ALL_TYPES[i]), 1, 0);
}

Test(quant, matmul_many_tokens_matches_float64_reference) {
    for (size_t i = 0; i < sizeof ALL_TYPES / sizeof *ALL_TYPES; i++) matmul_case(ALL_TYPES[i], 29, cols_for(ALL_TYPES[i]), 7, 0);
}

Test(quant, matmul_large_enough_to_run_parallel_matches_reference) {
    /* above quant.c's parallel threshold (2^20 multiply-adds) at n_tok 1, odd rows so the last
     * chunk is partial */
    for (size_t i = 0; i < sizeof ALL_TYPES / sizeof *ALL_TYPES; i++) {
        int64_t cols = cols_for(ALL_TYPES[i]);
        matmul_case(ALL_TYPES[i], ((1 << 20) / cols + 40) | 1, cols, 1, 0);
    }
    matmul_case(GGUF_TYPE_Q4_K, 1371, 256, 3, 0); /* 3 tokens: 1.05M multiply-adds */
}

Test(quant, matmul_with_exactly_representable_activations_is_float_exact) {
    for (size_t i = 0; i < sizeof ALL_TYPES / sizeof *ALL_TYPES; i++) {
        matmul_case(ALL_TYPES[i], 23, cols_for(ALL_TYPES[i]), 1, 1);
        matmul_case(ALL_TYPES[i], 19, cols_for(ALL_TYPES[i]), 6, 1);
    }
}

/* The batch size from which `isa` runs `type` through register tiles (0: never): AVX-512 from 4
 * tokens for every quantized type (G_MIN_TOK); AVX2 for the types of quant_gemm256_tiles.inc
 * from its T2_MIN_* thresholds. There decode and the tiles add the block terms in different
 * float orders, so a token alone and in a batch past the threshold agree within rounding;
 * elsewhere (portable, the dense types, AVX2's other types) they are bit-identical. */
static int tile_min_tok(int isa, uint32_t type) {
    if (type == GGUF_TYPE_F32 || type == GGUF_TYPE_F16 || type == GGUF_TYPE_BF16) return 0;
    if (isa >= QUANT_ISA_AVX512) return 4;
    if (isa != QUANT_ISA_AVX2) return 0;
    switch (type) {
    case GGUF_TYPE_Q4_0: return 4;
    case GGUF_TYPE_Q8_0: return 8;
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_Q5_K:
    case GGUF_TYPE_Q6_K: return 12;
    default: return 0;
    }
}

Test(quant, matmul_prefill_equals_token_by_token_decode) {
    for (size_t i = 0; i < sizeof ALL_TYPES / sizeof *ALL_TYPES; i++) {
        uint32_t type = ALL_TYPES[i];
        int64_t n_rows = 45, n_cols = cols_for(type);
        enum { T = 13 }; /* past every threshold of tile_min_tok */
        uint8_t *w = malloc(quant_row_bytes(type, n_cols) * (size_t)n_rows);
        random_weights(w, type, n_rows, n_cols);
        float *x = malloc(T * (size_t)n_cols * sizeof(float));
        for (int64_t j = 0; j < T * n_cols; j++) x[j] = rndf();
        float *all = malloc(T * (size_t)n_rows * sizeof(float)), *one = malloc((size_t)n_rows * sizeof(float));
        size_t sb;
        uint8_t *scratch = scratch_for(type, T, n_cols, &sb);
        quant_isa saved = quant_isa_active();
        for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
            quant_isa_force((quant_isa)isa);
            int exact = tile_min_tok(isa, type) == 0;
            quant_matmul(all, w, type, n_rows, n_cols, x, T, scratch, 2);
            for (int t = 0; t < T; t++) {
                quant_matmul(one, w, type, n_rows, n_cols, x + t * n_cols, 1, scratch, 1);
                for (int64_t r = 0; r < n_rows; r++) {
                    float b = all[t * n_rows + r];
                    if (exact)
                        cr_assert_eq(f32_bits(one[r]), f32_bits(b), "%s %s tok %d row %ld: %g vs %g",
                                     quant_isa_name((quant_isa)isa), gguf_type_name(type), t, (long)r, one[r], b);
                    else
                        cr_assert(fabsf(one[r] - b) <= 1e-5f * (fabsf(b) + 1.0f), "%s %s tok %d row %ld: %g vs %g",
                                  quant_isa_name((quant_isa)isa), gguf_type_name(type), t, (long)r, one[r], b);
                }
            }
        }
        quant_isa_force(saved);
        free(scratch);
        free(w);
        free(x);
        free(all);
        free(one);
    }
}

/* Columns spanning several of the tiles' repacking chunks (16 blocks / 2 super-blocks) with a
 * partial last one: 33 Q8_0/Q4_0 blocks, 5 super-blocks. */
static int64_t long_cols_for(uint32_t type) { return gguf_type_block_elems(type) == 32 ? 33 * 32 : 5 * 256; }

/* the quantized types with AVX-512 register tiles (the 32-element ones of issue 27 included) */
static const uint32_t Q_TYPES[] = {GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_K,  GGUF_TYPE_Q6_K,
                                   GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1,  GGUF_TYPE_IQ4_NL,
                                   GGUF_TYPE_MXFP4, GGUF_TYPE_Q2_K, GGUF_TYPE_Q3_K, GGUF_TYPE_Q5_K,
                                   GGUF_TYPE_IQ4_XS};

/* Every batch size from 1 to 33 (token tiles of 8 with every remainder, the decode / tile switch
 * at 4), rows not a multiple of the 16-row tile, several blocks per row: each instruction set and
 * thread count against the portable path (which is checked against the float64 reference). */
static void batch_sizes_agree_with_portable(uint32_t type) {
    enum { T = 33, R = 37 };
    int64_t n_cols = long_cols_for(type);
    uint8_t *w = malloc(quant_row_bytes(type, n_cols) * R);
    random_weights(w, type, R, n_cols);
    float *x = malloc(T * (size_t)n_cols * sizeof(float));
    for (int64_t j = 0; j < T * n_cols; j++) x[j] = rndf() * (1.0f + (float)(j % 7));
    float *ref = malloc(T * R * sizeof(float)), *out = malloc(T * R * sizeof(float));
    size_t sb;
    uint8_t *scratch = scratch_for(type, T, n_cols, &sb);
    quant_isa saved = quant_isa_force(QUANT_ISA_PORTABLE);
    quant_matmul(ref, w, type, R, n_cols, x, T, scratch + 1, 1);
    check_matmul(ref, w, type, R, n_cols, x, T, 0, "portable, 33 tokens");
    double *exact = malloc(T * R * sizeof(double)), *bound = malloc(T * R * sizeof(double));
    exact_products(exact, bound, w, type, R, n_cols, x, T);
    check_exact(ref, exact, bound, R, T, type, "portable", T);
    for (int isa = QUANT_ISA_PORTABLE + 1; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        for (int n_tok = 1; n_tok <= T; n_tok++)
            for (int threads = 1; threads <= 2; threads++) {
                memset(out, 0xFF, T * R * sizeof(float)); /* nan: unwritten shows */
                quant_matmul(out, w, type, R, n_cols, x, n_tok, scratch + 1, threads);
                check_exact(out, exact, bound, R, n_tok, type, quant_isa_name((quant_isa)isa), n_tok);
            }
    }
    quant_isa_force(saved);
    free(exact);
    free(bound);
    free(scratch);
    free(w);
    free(x);
    free(ref);
    free(out);
}

Test(quant, matmul_every_batch_size_to_33_at_tile_edges_agrees_with_portable) {
    for (size_t i = 0; i < sizeof Q_TYPES / sizeof *Q_TYPES; i++) batch_sizes_agree_with_portable(Q_TYPES[i]);
}

/* Weights packed at load (quant_pack): where the instruction set has a packed
 * kernel, every batch size and thread count, row counts around the 16-row groups and a matrix
 * large enough to split between threads, against the portable path on the original rows and
 * bit for bit against the same tokens in the largest batch;
 * elsewhere no copy. Several blocks / super-blocks per row. */
static void check_packed(uint32_t type) {
    enum { T = 33 };
    const int64_t rows[] = {1, 16, 37, 1029};
    const int64_t n_cols = long_cols_for(type);
    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
        int64_t R = rows[ri];
        int max_tok = R > 100 ? 5 : T;
        uint8_t *w = malloc(quant_row_bytes(type, n_cols) * (size_t)R);
        random_weights(w, type, R, n_cols);
        float *x = malloc(T * (size_t)n_cols * sizeof(float));
        for (int64_t j = 0; j < T * n_cols; j++) x[j] = rndf() * (1.0f + (float)(j % 7));
        float *ref = malloc(T * (size_t)R * sizeof(float)), *out = malloc(T * (size_t)R * sizeof(float));
        float *full = malloc(T * (size_t)R * sizeof(float));
        size_t sb;
        uint8_t *scratch = scratch_for(type, T, n_cols, &sb);
        quant_isa saved = quant_isa_force(QUANT_ISA_PORTABLE);
        quant_matmul(ref, w, type, R, n_cols, x, max_tok, scratch, 1);
        double *exact = malloc(T * (size_t)R * sizeof(double)), *bound = malloc(T * (size_t)R * sizeof(double));
        exact_products(exact, bound, w, type, R, n_cols, x, max_tok);
        check_exact(ref, exact, bound, R, max_tok, type, "portable", max_tok);
        for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
            quant_isa_force((quant_isa)isa);
            quant_packed *pk = quant_pack(w, type, R, n_cols);
            if (isa >= QUANT_ISA_AVX512) cr_assert(pk && quant_packed_bytes(pk) >= quant_row_bytes(type, n_cols) * (size_t)R);
            else cr_assert_null(pk, "%s has no packed kernel", quant_isa_name((quant_isa)isa));
            if (pk) quant_matmul_packed(full, w, pk, type, R, n_cols, x, max_tok, scratch, 1);
            for (int n_tok = 1; n_tok <= max_tok; n_tok++)
                for (int threads = 1; threads <= 2; threads++) {
                    memset(out, 0xFF, T * (size_t)R * sizeof(float)); /* nan: unwritten shows */
                    quant_matmul_packed(out, w, pk, type, R, n_cols, x, n_tok, scratch, threads);
                    check_exact(out, exact, bound, R, n_tok, type, quant_isa_name((quant_isa)isa), n_tok);
                    /* packed: the same bits whatever the batch and the thread count */
                    cr_assert(!pk || memcmp(out, full, (size_t)n_tok * (size_t)R * sizeof(float)) == 0,
                              "packed %s, %ld rows: %d tokens, %d threads differ from the same tokens in a batch of %d",
                              gguf_type_name(type), (long)R, n_tok, threads, max_tok);
                }
            quant_packed_destroy(pk);
        }
        free(exact);
        free(bound);
        setenv("ATTND_NO_REPACK", "1", 1);
        cr_assert_null(quant_pack(w, type, R, n_cols), "ATTND_NO_REPACK=1 turns packing off");
        setenv("ATTND_NO_REPACK", gguf_type_name(type), 1);
        cr_assert_null(quant_pack(w, type, R, n_cols), "ATTND_NO_REPACK=%s turns its packing off", gguf_type_name(type));
        setenv("ATTND_NO_REPACK", type == GGUF_TYPE_F16 ? "Q8_0" : "F16", 1); /* another type's name */
        quant_packed *other = quant_pack(w, type, R, n_cols);
        cr_assert(quant_isa_active() >= QUANT_ISA_AVX512 ? other != NULL : other == NULL,
                  "ATTND_NO_REPACK naming another type leaves %s packed", gguf_type_name(type));
        quant_packed_destroy(other);
        unsetenv("ATTND_NO_REPACK");
        quant_isa_force(saved);
        free(scratch);
        free(w);
        free(x);
        free(ref);
        free(out);
        free(full);
    }
}

Test(quant, q8_0_packed_at_load_agrees_with_portable_at_group_edges) { check_packed(GGUF_TYPE_Q8_0); }
Test(quant, q4_0_packed_at_load_agrees_with_portable_at_group_edges) { check_packed(GGUF_TYPE_Q4_0); }
Test(quant, q4_k_packed_at_load_agrees_with_portable_at_group_edges) { check_packed(GGUF_TYPE_Q4_K); }
Test(quant, q6_k_packed_at_load_agrees_with_portable_at_group_edges) { check_packed(GGUF_TYPE_Q6_K); }
Test(quant, q5_k_packed_at_load_agrees_with_portable_at_group_edges) { check_packed(GGUF_TYPE_Q5_K); }
Test(quant, iq4_xs_packed_at_load_agrees_with_portable_at_group_edges) { check_packed(GGUF_TYPE_IQ4_XS); }
Test(quant, q2_k_packed_at_load_agrees_with_portable_at_group_edges) { check_packed(GGUF_TYPE_Q2_K); }
Test(quant, q3_k_packed_at_load_agrees_with_portable_at_group_edges) { check_packed(GGUF_TYPE_Q3_K); }

/* quant_mm.pk_row0: rows [r0, r0 + n) of a packed matrix (one expert's of a MoE tensor, moe.c) are
 * bit for bit those rows of the whole matrix's product, for slices that end inside a 16-row group
 * (the group's next rows are another expert's: computed, never written) and at the matrix's end,
 * at every batch size and thread count; the packed slice lies beside the mapped rows' result. */
static void check_packed_slices(uint32_t type) {
    enum { T = 5, R = 4 * 48 };
    const int64_t n_cols = long_cols_for(type), r0s[] = {0, 48, 64, 176}, ns[] = {48, 21, 112, 16};
    uint8_t *w = malloc(quant_row_bytes(type, n_cols) * R);
    random_weights(w, type, R, n_cols);
    float *x = malloc(T * (size_t)n_cols * sizeof(float));
    for (int64_t j = 0; j < T * n_cols; j++) x[j] = rndf() * (1.0f + (float)(j % 5));
    float *full = malloc(T * R * sizeof(float)), *out = malloc(T * R * sizeof(float));
    float *mapped = malloc(T * R * sizeof(float));
    size_t sb;
    uint8_t *scratch = scratch_for(type, T, n_cols, &sb);
    quant_packed *pk = quant_pack(w, type, R, n_cols);
    cr_assert(quant_isa_active() < QUANT_ISA_AVX512 || pk, "%s is packed on %s", gguf_type_name(type),
              quant_isa_name(quant_isa_active()));
    for (int n_tok = 1; pk && n_tok <= T; n_tok += 2) {
        quant_matmul_packed(full, w, pk, type, R, n_cols, x, n_tok, scratch, 1);
        for (size_t s = 0; s < sizeof r0s / sizeof *r0s; s++)
            for (int threads = 1; threads <= 2; threads++) {
                int64_t r0 = r0s[s], n = ns[s];
                const uint8_t *wr = w + quant_row_bytes(type, n_cols) * (size_t)r0;
                memset(out, 0xFF, T * R * sizeof(float)); /* nan: unwritten shows */
                quant_mm mm = {out, wr, pk, type, n, false, r0};
                quant_matmul_many(&mm, 1, n_cols, x, n_tok, scratch, threads);
                quant_matmul(mapped, wr, type, n, n_cols, x, n_tok, scratch, threads);
                for (int t = 0; t < n_tok; t++)
                    for (int64_t r = 0; r < n; r++) {
                        float got = out[t * n + r], want = full[t * R + r0 + r];
                        cr_assert(memcmp(&got, &want, sizeof got) == 0, "%s rows [%ld, +%ld) token %d row %ld: %.9g, whole %.9g",
                                  gguf_type_name(type), (long)r0, (long)n, t, (long)r, got, want);
                        cr_assert(fabsf(got - mapped[t * n + r]) <= 1e-3f * (1.0f + fabsf(got)),
                                  "%s row %ld: packed %.9g, mapped %.9g", gguf_type_name(type), (long)(r0 + r), got,
                                  mapped[t * n + r]);
                    }
            }
    }
    quant_packed_destroy(pk);
    free(scratch);
    free(w);
    free(x);
    free(full);
    free(out);
    free(mapped);
}

Test(quant, packed_row_slices_give_the_whole_matrix_rows_bit_for_bit) {
    const uint32_t types[] = {GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K, GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_0, GGUF_TYPE_Q5_K};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) check_packed_slices(types[i]);
}

/* the 32-element types of issue 27, packed at load (PACK_B32_PAIR) */
static const uint32_t B32_TYPES[] = {GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1, GGUF_TYPE_IQ4_NL, GGUF_TYPE_MXFP4};
#define N_B32_TYPES (sizeof B32_TYPES / sizeof *B32_TYPES)

Test(quant, b32_types_packed_at_load_agree_with_portable_at_group_edges) {
    for (size_t i = 0; i < N_B32_TYPES; i++) check_packed(B32_TYPES[i]);
}

/* From G_MIN_TOK (4) tokens the packed copy of a 32-element type runs the register tiles'
 * operations in their order: bit for bit what the mapping gives, on a row count and a block count
 * (33: two chunks of 16 and one) that are not multiples of the tile. */
static void check_packed_tile_bits(const uint32_t *types, size_t n_types) {
    enum { T = 19, R = 37 };
    const int has512 = quant_isa_best() >= QUANT_ISA_AVX512;
    quant_isa saved = quant_isa_force(has512 ? QUANT_ISA_AVX512 : quant_isa_best());
    for (size_t i = 0; i < n_types; i++) {
        uint32_t type = types[i];
        int64_t n_cols = long_cols_for(type);
        uint8_t *w = malloc(quant_row_bytes(type, n_cols) * R);
        random_weights(w, type, R, n_cols);
        float *x = malloc(T * (size_t)n_cols * sizeof(float));
        float *a = malloc(T * R * sizeof(float)), *b = malloc(T * R * sizeof(float));
        for (int64_t j = 0; j < T * n_cols; j++) x[j] = rndf() * (1.0f + (float)(j % 5));
        size_t sb;
        uint8_t *scratch = scratch_for(type, T, n_cols, &sb);
        quant_packed *pk = quant_pack(w, type, R, n_cols);
        cr_assert(has512 ? pk != NULL : pk == NULL, "%s: a copy exactly where AVX-512 packs", gguf_type_name(type));
        for (int n_tok = 4; pk && n_tok <= T; n_tok += 5) {
            quant_matmul(a, w, type, R, n_cols, x, n_tok, scratch, 1);
            quant_matmul_packed(b, w, pk, type, R, n_cols, x, n_tok, scratch, 2);
            cr_assert(memcmp(a, b, (size_t)n_tok * R * sizeof(float)) == 0, "%s, %d tokens: packed and mapped differ",
                      gguf_type_name(type), n_tok);
        }
        quant_packed_destroy(pk);
        free(scratch);
        free(w);
        free(x);
        free(a);
        free(b);
    }
    quant_isa_force(saved);
}

Test(quant, b32_types_packed_give_the_register_tiles_bits_from_four_tokens) { check_packed_tile_bits(B32_TYPES, N_B32_TYPES); }

/* Q3_K's packed kernel sums each super-block as the register tiles do (exact integers, then one
 * fmadd by d_w d_x), so from 4 tokens the copy gives the mapping's bits. */
Test(quant, q3_k_packed_gives_the_register_tiles_bits_from_four_tokens) {
    const uint32_t t = GGUF_TYPE_Q3_K;
    check_packed_tile_bits(&t, 1);
}

/* Q2_K's packed kernel too (its sub-block pairs scaled as integers by vpdpwssd). */
Test(quant, q2_k_packed_gives_the_register_tiles_bits_from_four_tokens) {
    const uint32_t t = GGUF_TYPE_Q2_K;
    check_packed_tile_bits(&t, 1);
}

/* The inputs and floors of an extremes test over w (R rows, C columns): T tokens of activations
 * +-1 in runs of `run` columns (+-127 once rounded), alternating in sign per token and run; out
 * to fill, the float64 products and their bounds, and the activations' scratch. */
typedef struct extremes {
    float *x, *out;
    double *exact, *bound;
    uint8_t *scratch;
} extremes;

static extremes extremes_make(const uint8_t *w, uint32_t type, int R, int C, int T, int run) {
    extremes e = {malloc((size_t)T * C * sizeof(float)), malloc((size_t)T * R * sizeof(float)),
                  malloc((size_t)T * R * sizeof(double)), malloc((size_t)T * R * sizeof(double)), NULL};
    for (int t = 0; t < T; t++)
        for (int j = 0; j < C; j++) e.x[t * C + j] = (t % 2 ? -1.0f : 1.0f) * ((j / run + t) % 4 ? 1.0f : -1.0f);
    exact_products(e.exact, e.bound, w, type, R, C, e.x, T);
    size_t sb;
    e.scratch = scratch_for(type, T, C, &sb);
    return e;
}

static void extremes_free(extremes *e) { free(e->x), free(e->out), free(e->exact), free(e->bound), free(e->scratch); }

/* The packed Q3_K kernel holds each pair of sub-block sums of q y as the two int16 words of a
 * dword: at the extremes (every |q| and scale at its largest, activations at +-127 rounded from
 * +-amax) the results still equal the portable path's integers, to the float64 floors. */
Test(quant, q3_k_packed_sums_hold_at_the_extremes) {
    enum { R = 21, C = 512, T = 5 };
    size_t rb = quant_row_bytes(GGUF_TYPE_Q3_K, C);
    uint8_t *w = malloc(rb * R);
    for (int64_t r = 0; r < R; r++)
        for (int b = 0; b < C / 256; b++) {
            uint8_t *blk = w + (size_t)r * rb + 110 * (size_t)b;
            int low = (int)((r + b) % 3); /* 0: every q = -4; 1: every q = 3; 2: alternating */
            memset(blk, low == 0 ? 0x00 : low == 1 ? 0xFF : 0x55, 96); /* hmask and qs */
            for (int j = 0; j < 12; j++) blk[96 + j] = (r % 2) ? 0x00 : 0xFF; /* scales -32 or 31 */
            put16(blk + 108, 0x3C00);                                         /* d = 1 */
        }
    extremes e = extremes_make(w, GGUF_TYPE_Q3_K, R, C, T, 16);
    quant_isa saved = quant_isa_force(QUANT_ISA_PORTABLE);
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        quant_packed *pk = quant_pack(w, GGUF_TYPE_Q3_K, R, C);
        cr_assert(isa < QUANT_ISA_AVX512 || pk, "%s packs Q3_K", quant_isa_name((quant_isa)isa));
        for (int n_tok = 1; n_tok <= T; n_tok++) {
            quant_matmul_packed(e.out, w, pk, GGUF_TYPE_Q3_K, R, C, e.x, n_tok, e.scratch, 1);
            check_exact(e.out, e.exact, e.bound, R, n_tok, GGUF_TYPE_Q3_K, quant_isa_name((quant_isa)isa), n_tok);
        }
        quant_packed_destroy(pk);
    }
    quant_isa_force(saved);
    extremes_free(&e);
    free(w);
}

/* The register tiles add vpmaddubsw's int16 pairs in int16 before widening them (AVX2: a Q4_0 /
 * Q4_K block's 8 vectors, Q5_K's four, Q6_K's two; Q8_0 |w| up to 128): at the extremes (every code at its
 * largest or smallest, scales at their limits, activations +-127 in runs of 32) the sums still
 * equal the portable path's integers, to the float64 floors, on every ISA and batch size. */
static void extreme_row(uint8_t *blk, uint32_t type, int hi, int sc_hi) {
    switch (type) {
    case GGUF_TYPE_Q8_0:
        put16(blk, 0x3C00);
        memset(blk + 2, hi ? 0x7F : 0x80, 32); /* every w = 127 or -128 */
        break;
    case GGUF_TYPE_Q4_0:
        put16(blk, 0x3C00);
        memset(blk + 2, hi ? 0xFF : 0x00, 16); /* every nibble 15 or 0 */
        break;
    case GGUF_TYPE_Q4_K:
        put16(blk, 0x3C00);
        put16(blk + 2, 0x3C00);
        memset(blk + 4, sc_hi ? 0xFF : 0x00, 12); /* scales and minimums 63 or 0 */
        memset(blk + 16, hi ? 0xFF : 0x00, 128);
        break;
    case GGUF_TYPE_Q5_K:
        put16(blk, 0x3C00);
        put16(blk + 2, 0x3C00);
        memset(blk + 4, sc_hi ? 0xFF : 0x00, 12); /* scales and minimums 63 or 0 */
        memset(blk + 16, hi ? 0xFF : 0x00, 160);  /* every code 31 or 0 */
        break;
    case GGUF_TYPE_Q6_K:
        memset(blk, hi ? 0xFF : 0x00, 192);          /* every code 63 or 0 */
        memset(blk + 192, sc_hi ? 0x7F : 0x80, 16); /* scales 127 or -128 */
        put16(blk + 208, 0x3C00);
        break;
    default: cr_assert_fail("no extreme row for %s", gguf_type_name(type));
    }
}

Test(quant, tile_sums_hold_at_the_extremes) {
    const uint32_t types[] = {GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_K, GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K};
    enum { R = 21, C = 512, T = 13 };
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        uint32_t type = types[ti];
        size_t rb = quant_row_bytes(type, C), bb = quant_row_bytes(type, gguf_type_block_elems(type));
        uint8_t *w = malloc(rb * R);
        for (int64_t r = 0; r < R; r++)
            for (int64_t b = 0; b < C / (int64_t)gguf_type_block_elems(type); b++)
                extreme_row(w + (size_t)r * rb + bb * (size_t)b, type, (int)((r + b) % 2), (int)(r % 3 != 0));
        extremes e = extremes_make(w, type, R, C, T, 32);
        quant_isa saved = quant_isa_active();
        for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
            quant_isa_force((quant_isa)isa);
            for (int n_tok = 1; n_tok <= T; n_tok++) {
                memset(e.out, 0xFF, T * R * sizeof(float));
                quant_matmul(e.out, w, type, R, C, e.x, n_tok, e.scratch, 1);
                check_exact(e.out, e.exact, e.bound, R, n_tok, type, quant_isa_name((quant_isa)isa), n_tok);
            }
        }
        quant_isa_force(saved);
        extremes_free(&e);
        free(w);
    }
}

Test(quant, packing_a_type_without_packed_kernel_gives_no_copy) {
    uint8_t *w = malloc(quant_row_bytes(GGUF_TYPE_F16, 256) * 16);
    random_weights(w, GGUF_TYPE_F16, 16, 256);
    cr_assert_null(quant_pack(w, GGUF_TYPE_F16, 16, 256));
    free(w);
    quant_packed_destroy(NULL);
    cr_assert_eq(quant_packed_bytes(NULL), 0);
}

/* From 4 tokens on (from the tiles' threshold where it is higher, tile_min_tok), every
 * instruction set gives a token the same bits whatever the batch size and however the rows are
 * split: the first n tokens of a 33-token call, for n = 4..33. */
/* quant_matmul_many against one quant_matmul_packed per weight: bit-identical, whether the weights
 * share their activations (Q4_K packed, Q6_K, Q4_K mapped) or not (Q4_0 beside Q4_K). */
static void check_many(const uint32_t *types, const int64_t *rows, int n_mm, int pack) {
    enum { T = 9, C = 512 };
    uint8_t *w[QUANT_MM_MAX];
    quant_packed *pk[QUANT_MM_MAX];
    float *want[QUANT_MM_MAX], *got[QUANT_MM_MAX];
    float *x = malloc(T * C * sizeof(float));
    for (int64_t j = 0; j < T * C; j++) x[j] = rndf() * (1.0f + (float)(j % 5));
    size_t sb = 0, b;
    for (int i = 0; i < n_mm; i++) {
        w[i] = malloc(quant_row_bytes(types[i], C) * (size_t)rows[i]);
        random_weights(w[i], types[i], rows[i], C);
        pk[i] = pack && i == 0 ? quant_pack(w[i], types[i], rows[i], C) : NULL;
        want[i] = malloc(T * (size_t)rows[i] * sizeof(float));
        got[i] = malloc(T * (size_t)rows[i] * sizeof(float));
        free(scratch_for(types[i], T, C, &b));
        if (b > sb) sb = b;
    }
    uint8_t *scratch = malloc(sb + 1);
    for (int n_tok = 1; n_tok <= T; n_tok += 4)
        for (int threads = 1; threads <= 2; threads++) {
            quant_mm mm[QUANT_MM_MAX];
            for (int i = 0; i < n_mm; i++) {
                quant_matmul_packed(want[i], w[i], pk[i], types[i], rows[i], C, x, n_tok, scratch + 1, threads);
                memset(got[i], 0xFF, T * (size_t)rows[i] * sizeof(float));
                mm[i] = (quant_mm){got[i], w[i], pk[i], types[i], rows[i], false, 0};
            }
            quant_matmul_many(mm, n_mm, C, x, n_tok, scratch + 1, threads);
            for (int i = 0; i < n_mm; i++)
                cr_assert(memcmp(got[i], want[i], (size_t)n_tok * (size_t)rows[i] * sizeof(float)) == 0,
                          "weight %d (%s, %ld rows), %d tokens, %d threads: not what it gives alone", i,
                          gguf_type_name(types[i]), (long)rows[i], n_tok, threads);
        }
    for (int i = 0; i < n_mm; i++) {
        quant_packed_destroy(pk[i]);
        free(w[i]);
        free(want[i]);
        free(got[i]);
    }
    free(scratch);
    free(x);
}

Test(quant, matmul_many_equals_one_matmul_per_weight) {
    const uint32_t shared[] = {GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K, GGUF_TYPE_Q4_K};
    const int64_t shared_rows[] = {300, 64, 17};
    check_many(shared, shared_rows, 3, 1);
    const uint32_t mixed[] = {GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_K};
    const int64_t mixed_rows[] = {48, 100};
    check_many(mixed, mixed_rows, 2, 1);
    const uint32_t tiny[] = {GGUF_TYPE_Q8_0, GGUF_TYPE_F32};
    const int64_t tiny_rows[] = {5, 3};
    check_many(tiny, tiny_rows, 2, 0);
}

Test(quant, matmul_results_from_four_tokens_do_not_depend_on_batch_size) {
    enum { T = 33 };
    for (size_t i = 0; i < sizeof Q_TYPES / sizeof *Q_TYPES; i++) {
        uint32_t type = Q_TYPES[i];
        int64_t n_rows = 53, n_cols = long_cols_for(type);
        mm_inputs in = mm_inputs_make(type, n_rows, n_cols, T, 5);
        float *all = malloc(T * (size_t)n_rows * sizeof(float)), *part = malloc(T * (size_t)n_rows * sizeof(float));
        quant_isa saved = quant_isa_active();
        for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
            quant_isa_force((quant_isa)isa);
            quant_matmul(all, in.w, type, n_rows, n_cols, in.x, T, in.scratch, 1);
            int from = tile_min_tok(isa, type) > 4 ? tile_min_tok(isa, type) : 4;
            for (int n = from; n < T; n++) {
                quant_matmul(part, in.w, type, n_rows, n_cols, in.x, n, in.scratch, 2);
                for (int64_t k = 0; k < (int64_t)n * n_rows; k++)
                    cr_assert_eq(f32_bits(part[k]), f32_bits(all[k]), "%s %s n_tok %d [%ld]: %g vs %g",
                                 quant_isa_name((quant_isa)isa), gguf_type_name(type), n, (long)k, part[k], all[k]);
            }
        }
        quant_isa_force(saved);
        mm_inputs_free(&in);
        free(all);
        free(part);
    }
}

/* Below the register tiles' threshold (tile_min_tok; 8 tokens where there is none) a quantized
 * weight's result for a token is the same bits in a batch as alone: the decode kernels add a
 * token's block terms in one order whatever the batch (a speculative verify's few rows against
 * plain decoding's one). 33 blocks / 5 super-blocks: AVX2's decode groups of 8 blocks with a
 * partial last one. Every instruction set, both thread counts. */
Test(quant, quantized_rows_of_few_tokens_equal_each_token_alone) {
    enum { T = 8, R = 29 };
    for (size_t i = 0; i < sizeof Q_TYPES / sizeof *Q_TYPES; i++) {
        uint32_t type = Q_TYPES[i];
        int64_t C = long_cols_for(type);
        mm_inputs in = mm_inputs_make(type, R, C, T, 3);
        float *one = malloc(T * (size_t)R * sizeof(float)), *many = malloc(T * (size_t)R * sizeof(float));
        quant_isa saved = quant_isa_active();
        for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
            quant_isa_force((quant_isa)isa);
            int below = tile_min_tok(isa, type) ? tile_min_tok(isa, type) - 1 : T;
            if (below > T) below = T;
            for (int t = 0; t < below; t++)
                quant_matmul(one + (size_t)t * R, in.w, type, R, C, in.x + (size_t)t * C, 1, in.scratch, 1);
            for (int n = 2; n <= below; n++)
                for (int threads = 1; threads <= 2; threads++) {
                    quant_matmul(many, in.w, type, R, C, in.x, n, in.scratch, threads);
                    for (int64_t k = 0; k < (int64_t)n * R; k++)
                        cr_assert_eq(f32_bits(many[k]), f32_bits(one[k]), "%s %s, %d tokens: [%ld] %g vs %g alone",
                                     quant_isa_name((quant_isa)isa), gguf_type_name(type), n, (long)k, many[k], one[k]);
                }
        }
        quant_isa_force(saved);
        mm_inputs_free(&in);
        free(one), free(many);
    }
}

/* A dense weight's result for a token is the same bits in a batch of any size below the GEMM's
 * (a speculative verify's few rows against plain decoding's one): the tiles of 2 to 4 tokens
 * split the row into two passes, and must keep the one-token sums. 1003 columns take the 32-wide
 * body, the 8-wide rest and the scalar tail. Every instruction set, both thread counts. */
Test(quant, dense_rows_of_few_tokens_equal_each_token_alone) {
    enum { T = 15, R = 37, C = 1003 };
    const uint32_t types[] = {GGUF_TYPE_F32, GGUF_TYPE_F16, GGUF_TYPE_BF16};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        mm_inputs in = mm_inputs_make(types[i], R, C, T, 7);
        float *one = malloc(T * (size_t)R * sizeof(float)), *many = malloc(T * (size_t)R * sizeof(float));
        quant_isa saved = quant_isa_active();
        for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
            quant_isa_force((quant_isa)isa);
            for (int t = 0; t < T; t++)
                quant_matmul(one + (size_t)t * R, in.w, types[i], R, C, in.x + (size_t)t * C, 1, in.scratch, 1);
            for (int n = 2; n <= T; n++)
                for (int threads = 1; threads <= 2; threads++) {
                    quant_matmul(many, in.w, types[i], R, C, in.x, n, in.scratch, threads);
                    for (int64_t k = 0; k < (int64_t)n * R; k++)
                        cr_assert_eq(f32_bits(many[k]), f32_bits(one[k]), "%s %s, %d tokens: [%ld] %g vs %g alone",
                                     quant_isa_name((quant_isa)isa), gguf_type_name(types[i]), n, (long)k, many[k],
                                     one[k]);
                }
        }
        quant_isa_force(saved);
        mm_inputs_free(&in);
        free(one), free(many);
    }
}

Test(quant, matmul_of_zero_activations_is_zero) {
    for (size_t i = 0; i < sizeof ALL_TYPES / sizeof *ALL_TYPES; i++) {
        uint32_t type = ALL_TYPES[i];
        int64_t n_rows = 9, n_cols = cols_for(type);
        uint8_t *w = malloc(quant_row_bytes(type, n_cols) * (size_t)n_rows);
        random_weights(w, type, n_rows, n_cols);
        float *x = calloc((size_t)n_cols, sizeof(float)), out[9];
        size_t sb;
        uint8_t *scratch = scratch_for(type, 1, n_cols, &sb);
        quant_matmul(out, w, type, n_rows, n_cols, x, 1, scratch, 1);
        for (int r = 0; r < n_rows; r++) cr_assert_eq(out[r], 0.0f, "%s row %d: %g", gguf_type_name(type), r, out[r]);
        free(scratch);
        free(w);
        free(x);
    }
}

/* Real Q4_K_M tensors of the default model (Q4_K, Q6_K, Q8_0 from `attnd quantize`): matmul agrees
 * with the reference over their dequantized rows. */
Test(quant, matmul_on_real_k_quant_tensors_matches_reference) {
    char path[1024];
    test_model_path("attnd-sotu-Q4_K_M.gguf", path, sizeof path);
    gguf_file *f = NULL;
    attnd_err err;
    cr_assert_eq(gguf_open(&f, path, &err), ATTND_OK, "%s", err.msg);
    uint32_t seen = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->n_dims != 2 || t->type == GGUF_TYPE_F32 || (seen & (1u << t->type))) continue;
        seen |= 1u << t->type;
        int64_t n_cols = (int64_t)t->ne[0], n_rows = (int64_t)t->ne[1] < 64 ? (int64_t)t->ne[1] : 64;
        enum { T = 3 };
        float *x = malloc(T * (size_t)n_cols * sizeof(float)), *out = malloc(T * (size_t)n_rows * sizeof(float));
        for (int64_t j = 0; j < T * n_cols; j++) x[j] = rndf();
        size_t sb;
        uint8_t *scratch = scratch_for(t->type, T, n_cols, &sb);
        quant_isa saved = quant_isa_active();
        for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
            quant_isa_force((quant_isa)isa);
            quant_matmul(out, t->data, t->type, n_rows, n_cols, x, T, scratch, 1);
            check_matmul(out, t->data, t->type, n_rows, n_cols, x, T, 0, t->name);
        }
        quant_isa_force(saved);
        free(scratch);
        free(x);
        free(out);
    }
    cr_assert(seen & (1u << GGUF_TYPE_Q4_K) && seen & (1u << GGUF_TYPE_Q6_K) && seen & (1u << GGUF_TYPE_Q8_0));
    gguf_close(f);
}

Test(quant, isa_can_be_forced_to_portable_and_back) {
    quant_isa best = quant_isa_best(), saved = quant_isa_force(QUANT_ISA_PORTABLE);
    cr_assert_eq(quant_isa_active(), QUANT_ISA_PORTABLE);
    quant_isa_force(QUANT_ISA_AMX);
    cr_assert_eq(quant_isa_active(), best, "forcing more than the CPU has clamps to the best");
    quant_isa_force(saved);
    cr_assert_str_eq(quant_isa_name(QUANT_ISA_PORTABLE), "portable");
}

Test(quant, no_simd_environment_variable_selects_the_portable_path) {
    /* the choice is made once per process, so make it in a fresh one */
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        setenv("ATTND_NO_SIMD", "1", 1);
        _exit(quant_isa_active() == QUANT_ISA_PORTABLE ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "ATTND_NO_SIMD=1 did not force the portable path");
}

/* The SIMD activation preparations must produce exactly the portable bytes (same rounding,
 * same choice of scale sign), or results would depend on the CPU beyond summation order. */
Test(quant, simd_activation_quantization_is_bit_identical_to_portable) {
    enum { N = 1024 };
    float x[N];
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < N; i++) {
            switch (round % 4) {
            case 0: x[i] = rndf() * (float)(1 + i % 9); break;
            case 1: /* 127 in every block makes the scale exactly 1, so the halves are rounding ties */
                x[i] = i % 32 == 7 ? 127.0f : (float)((int)(rnd() % 253) - 126) + 0.5f;
                break;
            case 2: x[i] = (i % 256 == 17) ? -3.0f : (i % 256 == 200 ? 3.0f : rndf()); break; /* +-max tie */
            default: x[i] = (i / 64) % 3 == 0 ? 0.0f : rndf() * 1e-3f; break; /* all-zero blocks */
            }
        }
        const quant_kernels *p = &quant_kernels_portable;
        float d0[N / 32], d1[N / 32], r0[N], r1[N];
        int8_t q0[N], q1[N];
        int16_t b0[N / 16], b1[N / 16];
        p->prep_q8_0(d0, q0, x, N);
        p->prep_q8_k(d1, q1, b0, x, N);
        p->prep_f16(r0, x, N);
        for (int isa = QUANT_ISA_AVX2; isa <= (int)quant_isa_best(); isa++) {
#if defined(__x86_64__)
            const quant_kernels *k = isa == QUANT_ISA_AVX2 ? &quant_kernels_avx2 : &quant_kernels_avx512;
            float dd[N / 32];
            int8_t qq[N];
            if (k->prep_q8_0) {
                k->prep_q8_0(dd, qq, x, N);
                cr_assert(memcmp(dd, d0, sizeof d0) == 0 && memcmp(qq, q0, sizeof q0) == 0, "%s q8_0 round %d",
                          quant_isa_name((quant_isa)isa), round);
            }
            if (k->prep_q8_k) {
                k->prep_q8_k(dd, qq, b1, x, N);
                cr_assert(memcmp(dd, d1, N / 256 * sizeof(float)) == 0 && memcmp(qq, q1, sizeof q1) == 0 &&
                              memcmp(b1, b0, sizeof b0) == 0,
                          "%s q8_k round %d", quant_isa_name((quant_isa)isa), round);
            }
            if (k->prep_f16) {
                k->prep_f16(r1, x, N);
                cr_assert(memcmp(r1, r0, sizeof r0) == 0, "%s f16 round %d", quant_isa_name((quant_isa)isa), round);
            }
#endif
        }
    }
}

// ---- vector primitives -------------------------------------------------------------------------

Test(quant, dot_rows_and_axpy_rows_match_float64_for_every_isa) {
    const int hds[] = {32, 45, 64, 128};
    enum { N = 37, MAXHD = 128, STRIDE = 140 };
    static float K[N * STRIDE], q[MAXHD], p[N], scores[N], acc[MAXHD], acc0[MAXHD];
    for (int i = 0; i < N * STRIDE; i++) K[i] = rndf();
    for (int i = 0; i < MAXHD; i++) q[i] = rndf();
    for (int j = 0; j < N; j++) p[j] = fabsf(rndf());
    for (int i = 0; i < MAXHD; i++) acc0[i] = rndf();
    quant_isa saved = quant_isa_active();
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        for (size_t h = 0; h < sizeof hds / sizeof *hds; h++) {
            int hd = hds[h];
            quant_dot_rows(scores, q, K, STRIDE, N, hd, 0.125f);
            memcpy(acc, acc0, sizeof acc);
            quant_axpy_rows(acc, p, K, STRIDE, N, hd);
            for (int j = 0; j < N; j++) {
                double ref = 0, mag = 0;
                for (int i = 0; i < hd; i++) {
                    ref += (double)q[i] * K[j * STRIDE + i];
                    mag += fabs((double)q[i] * K[j * STRIDE + i]);
                }
                cr_assert(fabs(scores[j] - 0.125 * ref) <= 1e-6 * mag + 1e-7, "%s hd %d score %d: %g vs %g",
                          quant_isa_name((quant_isa)isa), hd, j, scores[j], 0.125 * ref);
            }
            for (int i = 0; i < MAXHD; i++) {
                double ref = acc0[i], mag = fabs(acc0[i]);
                if (i < hd)
                    for (int j = 0; j < N; j++) {
                        ref += (double)p[j] * K[j * STRIDE + i];
                        mag += fabs((double)p[j] * K[j * STRIDE + i]);
                    }
                cr_assert(fabs(acc[i] - ref) <= 1e-6 * mag + 1e-7, "%s hd %d acc[%d]: %g vs %g (columns past hd untouched)",
                          quant_isa_name((quant_isa)isa), hd, i, acc[i], ref);
            }
        }
    }
    quant_isa_force(saved);
}

/* Distance in units in the last place between two finite floats of the same sign. */
static double ulps(float got, double want) {
    double u = want == 0 ? 0x1p-149 : fmax(0x1p-149, ldexp(1.0, ilogb(want) - 23));
    return fabs(got - want) / u;
}

Test(quant, exp_is_within_two_ulp_and_handles_specials_for_every_isa) {
    enum { N = 20000 };
    static float x[N], y[N];
    const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 88.0f, 88.5f, 88.72f, 88.73f, 89.0f, 1000.0f, -87.0f,
                             -87.5f, -100.0f, -103.0f, -104.0f, -1000.0f, 1e-10f, -1e-10f, INFINITY, -INFINITY, NAN};
    const int ns = (int)(sizeof special / sizeof *special);
    for (int i = 0; i < N; i++) x[i] = i < ns ? special[i] : (i % 2 ? rndf() * 100.0f : rndf() * 10.0f);
    /* the edges of the vector path's range, all in one 8-lane group so it takes that path */
    const float edge[8] = {88.0f, -87.0f, 87.99f, -86.99f, -0.0f, 1e-10f, 0.34657359f, -0.34657359f};
    memcpy(x + 24, edge, sizeof edge);
    quant_isa saved = quant_isa_active();
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        quant_exp(y, x, N);
        for (int i = 0; i < N; i++) {
            double want = exp((double)x[i]);
            if (isnan(x[i])) cr_assert(isnan(y[i]), "%s exp(nan)", quant_isa_name((quant_isa)isa));
            else if (want > 3.4028234663852886e38) cr_assert(isinf(y[i]) && y[i] > 0, "%s exp(%g) = %g", quant_isa_name((quant_isa)isa), x[i], y[i]);
            else cr_assert(ulps(y[i], want) <= 2.0, "%s exp(%.9g) = %.9g, want %.9g (%.2f ulp)",
                           quant_isa_name((quant_isa)isa), x[i], y[i], want, ulps(y[i], want));
        }
        /* in place */
        float z[9] = {0, 1, 2, 3, 4, 5, 6, 7, -2};
        quant_exp(z, z, 9);
        cr_assert(z[0] == 1.0f && fabs(z[8] - exp(-2.0)) < 1e-7);
    }
    quant_isa_force(saved);
}

Test(quant, f16_row_conversions_match_scalar_for_every_isa) {
    enum { N = 65536 + 7 };
    static uint16_t h[N], h2[N];
    static float f[N], g[N];
    for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
    for (int i = 0; i < N; i++) g[i] = i % 3 ? bits_f32(rnd() << 1 ^ rnd()) : rndf() * 70000.0f;
    quant_isa saved = quant_isa_active();
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        quant_f16_to_f32_row(f, h, N);
        for (int i = 0; i < N; i++) {
            float want = quant_f16_to_f32(h[i]);
            if (isnan(want)) cr_assert(isnan(f[i]));
            else cr_assert_eq(f32_bits(f[i]), f32_bits(want), "%s half %04x", quant_isa_name((quant_isa)isa), h[i]);
        }
        quant_f32_to_f16_row(h2, g, N);
        for (int i = 0; i < N; i++) {
            uint16_t want = quant_f32_to_f16(g[i]);
            if (isnan(g[i])) cr_assert((h2[i] & 0x7C00) == 0x7C00 && (h2[i] & 0x3FF));
            else cr_assert_eq(h2[i], want, "%s %a: %04x vs %04x", quant_isa_name((quant_isa)isa), g[i], h2[i], want);
        }
    }
    quant_isa_force(saved);
}

// ---- the types of issue 27: hand-built blocks, bit for bit -------------------------------------

/* Q4_1 / Q5_1 / Q5_0 / IQ4_NL / MXFP4 keep element j of a 32-block in the low nibble of byte j
 * and element j + 16 in its high nibble; Q5's fifth bit of element j is bit j of the 32-bit qh. */
static void pack_nibbles32(uint8_t *qs, uint8_t *qh, const uint8_t v[32]) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((v[j] & 15) | (v[j + 16] & 15) << 4);
    for (int j = 0; j < 32; j++) h |= (uint32_t)(v[j] >> 4) << j;
    if (qh) memcpy(qh, &h, 4);
}

Test(quant, q4_1_and_q5_1_blocks_dequantize_to_d_times_q_plus_m) {
    uint8_t v[32], b41[20], b51[24];
    for (int j = 0; j < 32; j++) v[j] = (uint8_t)((j * 11 + 3) & 31);
    put16(b41, 0x3800), put16(b41 + 2, 0xC100); /* d = 0.5, m = -2.5 */
    uint8_t v4[32];
    for (int j = 0; j < 32; j++) v4[j] = v[j] & 15;
    pack_nibbles32(b41 + 4, NULL, v4);
    put16(b51, 0x3400), put16(b51 + 2, 0x3C00); /* d = 0.25, m = 1 */
    pack_nibbles32(b51 + 8, b51 + 4, v);
    float y[32];
    quant_dequantize_row(y, b41, GGUF_TYPE_Q4_1, 32);
    for (int j = 0; j < 32; j++) cr_assert_eq(y[j], 0.5f * v4[j] - 2.5f, "Q4_1 elem %d: %g", j, y[j]);
    quant_dequantize_row(y, b51, GGUF_TYPE_Q5_1, 32);
    for (int j = 0; j < 32; j++) cr_assert_eq(y[j], 0.25f * v[j] + 1.0f, "Q5_1 elem %d: %g", j, y[j]);
}

Test(quant, q5_0_block_dequantizes_with_its_fifth_bits_from_qh) {
    uint8_t v[32], blk[22];
    for (int j = 0; j < 32; j++) v[j] = (uint8_t)((j * 7 + 5) & 31);
    put16(blk, 0xB800); /* d = -0.5 */
    pack_nibbles32(blk + 6, blk + 2, v);
    float y[32];
    quant_dequantize_row(y, blk, GGUF_TYPE_Q5_0, 32);
    for (int j = 0; j < 32; j++) cr_assert_eq(y[j], -0.5f * (v[j] - 16), "elem %d: %g", j, y[j]);
}

Test(quant, iq4_nl_and_mxfp4_blocks_decode_through_their_codebooks) {
    static const int iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    static const float e2m1[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.f, -.5f, -1, -1.5f, -2, -3, -4, -6};
    uint8_t v[32], bnl[18], bmx[17];
    for (int j = 0; j < 32; j++) v[j] = (uint8_t)((j * 5 + 1) & 15);
    put16(bnl, 0x2C00); /* d = 1/16 */
    pack_nibbles32(bnl + 2, NULL, v);
    float y[32];
    quant_dequantize_row(y, bnl, GGUF_TYPE_IQ4_NL, 32);
    for (int j = 0; j < 32; j++) cr_assert_eq(y[j], iq4nl[v[j]] / 16.0f, "IQ4_NL elem %d: %g", j, y[j]);
    /* MXFP4: E8M0 scale 2^(e - 127) times the E2M1 value; e = 130: x8; e = 0 and 1: tiny, still exact */
    const uint8_t es[3] = {130, 0, 1};
    const float scale[3] = {8.0f, 0x1p-127f, 0x1p-126f};
    for (int k = 0; k < 3; k++) {
        bmx[0] = es[k];
        pack_nibbles32(bmx + 1, NULL, v);
        quant_dequantize_row(y, bmx, GGUF_TYPE_MXFP4, 32);
        for (int j = 0; j < 32; j++)
            cr_assert_eq(y[j], e2m1[v[j]] * scale[k], "MXFP4 e=%d elem %d: %g want %g", es[k], j, y[j], e2m1[v[j]] * scale[k]);
    }
}

/* Element e = 128h + 32k + l of a Q2_K/Q3_K super-block: bits 2k, 2k + 1 of qs[32h + l]; Q3_K's
 * third bit (set: value as is, clear: minus 4) is bit 4h + k of hmask[l]. Sub-block e / 16. */
static void pack_2bit(uint8_t *qs, const uint8_t v[256]) {
    memset(qs, 0, 64);
    for (int e = 0; e < 256; e++) qs[32 * (e / 128) + e % 32] |= (uint8_t)((v[e] & 3) << (2 * (e % 128 / 32)));
}

Test(quant, q2_k_superblock_dequantizes_with_four_bit_scales_and_mins) {
    uint8_t blk[84], v[256];
    for (int j = 0; j < 16; j++) blk[j] = (uint8_t)(((j * 5) & 15) | ((15 - j) << 4));
    for (int e = 0; e < 256; e++) v[e] = (uint8_t)((e * 3 + e / 7) & 3);
    pack_2bit(blk + 16, v);
    put16(blk + 80, 0x3400), put16(blk + 82, 0x3000); /* d = 0.25, dmin = 0.125 */
    float y[256];
    quant_dequantize_row(y, blk, GGUF_TYPE_Q2_K, 256);
    for (int e = 0; e < 256; e++) {
        float want = 0.25f * (blk[e / 16] & 15) * v[e] - 0.125f * (blk[e / 16] >> 4);
        cr_assert_eq(y[e], want, "elem %d: %g want %g", e, y[e], want);
    }
}

Test(quant, q3_k_superblock_dequantizes_with_hmask_and_six_bit_scales) {
    uint8_t blk[110], v[256];
    int sc[16];
    memset(blk, 0, sizeof blk);
    for (int e = 0; e < 256; e++) v[e] = (uint8_t)((e * 5 + e / 9) & 7); /* 3 bits: value v - 4 */
    pack_2bit(blk + 32, v);
    for (int e = 0; e < 256; e++)
        if (v[e] & 4) blk[e % 32] |= (uint8_t)(1u << (4 * (e / 128) + e % 128 / 32));
    /* 16 six-bit scales: low nibble of scale j in byte j % 8 (nibble j / 8), top 2 bits in byte
     * 8 + j % 4 (field j / 4) */
    for (int j = 0; j < 16; j++) {
        sc[j] = (j * 23 + 7) & 63;
        blk[96 + j % 8] |= (uint8_t)((sc[j] & 15) << (4 * (j / 8)));
        blk[96 + 8 + j % 4] |= (uint8_t)((sc[j] >> 4) << (2 * (j / 4)));
    }
    put16(blk + 108, 0x2C00); /* d = 1/16 */
    float y[256];
    quant_dequantize_row(y, blk, GGUF_TYPE_Q3_K, 256);
    for (int e = 0; e < 256; e++) {
        float want = 0.0625f * (float)(sc[e / 16] - 32) * (float)((int)v[e] - 4);
        cr_assert_eq(y[e], want, "elem %d: %g want %g", e, y[e], want);
    }
}

Test(quant, q5_k_superblock_dequantizes_like_q4_k_with_a_fifth_bit) {
    const uint8_t sc[8] = {3, 63, 17, 40, 5, 48, 1, 33}, mn[8] = {0, 9, 63, 16, 41, 2, 31, 58};
    uint8_t blk[176], v[256];
    memset(blk, 0, sizeof blk);
    put16(blk, 0x3400), put16(blk + 2, 0x3000);
    pack_q4k_scales(blk + 4, sc, mn);
    for (int e = 0; e < 256; e++) {
        v[e] = (uint8_t)((e * 13 + e / 5) & 31);
        /* chunk p = e / 64 of 64: its first 32 in the low nibbles of qs[32p..], the next 32 high;
         * the fifth bit in qh[e % 32] at bit 2p (low) or 2p + 1 (high) */
        int p = e / 64, hi = e % 64 >= 32;
        blk[48 + 32 * p + e % 32] |= (uint8_t)((v[e] & 15) << (4 * hi));
        blk[16 + e % 32] |= (uint8_t)((v[e] >> 4) << (2 * p + hi));
    }
    float y[256];
    quant_dequantize_row(y, blk, GGUF_TYPE_Q5_K, 256);
    for (int e = 0; e < 256; e++) {
        float want = 0.25f * sc[e / 32] * v[e] - 0.125f * mn[e / 32];
        cr_assert_eq(y[e], want, "elem %d: %g want %g", e, y[e], want);
    }
}

Test(quant, iq4_xs_superblock_dequantizes_with_six_bit_scales_and_the_iq4_nl_codebook) {
    static const int iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    uint8_t blk[136], v[256];
    int sc[8];
    memset(blk, 0, sizeof blk);
    put16(blk, 0x2400); /* d = 1/64 */
    uint16_t h = 0;
    for (int j = 0; j < 8; j++) {
        sc[j] = (j * 29 + 3) & 63;
        blk[4 + j / 2] |= (uint8_t)((sc[j] & 15) << (4 * (j % 2)));
        h |= (uint16_t)((sc[j] >> 4) << (2 * j));
    }
    put16(blk + 2, h);
    for (int e = 0; e < 256; e++) v[e] = (uint8_t)((e * 7 + e / 3) & 15);
    for (int j = 0; j < 8; j++) pack_nibbles32(blk + 8 + 16 * j, NULL, v + 32 * j);
    float y[256];
    quant_dequantize_row(y, blk, GGUF_TYPE_IQ4_XS, 256);
    for (int e = 0; e < 256; e++) {
        float want = (1.0f / 64) * (float)(sc[e / 32] - 32) * (float)iq4nl[v[e]];
        cr_assert_eq(y[e], want, "elem %d: %g want %g", e, y[e], want);
    }
}

Test(quant, new_types_are_computable_and_types_without_kernels_are_not) {
    for (size_t i = 0; i < N_NEW_TYPES; i++) cr_assert(gguf_type_computable(NEW_TYPES[i]), "%s", gguf_type_name(NEW_TYPES[i]));
    for (size_t i = 0; i < N_LOWBIT_TYPES; i++) cr_assert(gguf_type_computable(LOWBIT_TYPES[i]), "%s", gguf_type_name(LOWBIT_TYPES[i]));
    const uint32_t refused[] = {9, 15, 24, 28, 41}; /* Q8_1, Q8_K (activation forms), I8, F64, an unknown id */
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) cr_assert(!gguf_type_computable(refused[i]));
    cr_assert_eq(quant_row_bytes(GGUF_TYPE_Q5_K, 512), 2 * 176);
    cr_assert_eq(quant_row_bytes(GGUF_TYPE_MXFP4, 64), 2 * 17);
    cr_assert_geq(quant_scratch_bytes(GGUF_TYPE_Q4_1, 2, 64), 2 * 64 + 3 * 2 * 2 * sizeof(float));
}

// ---- the types of issue 27: matmul -------------------------------------------------------------

Test(quant, new_types_matmul_matches_float64_reference) {
    for (size_t i = 0; i < N_NEW_TYPES; i++) {
        uint32_t type = NEW_TYPES[i];
        matmul_case(type, 37, cols_for(type), 1, 0);
        matmul_case(type, 29, cols_for(type), 7, 0);
        matmul_case(type, 23, cols_for(type), 1, 1); /* exactly representable activations */
    }
    /* above the parallel threshold: the activation forms filled by the pool (Q8_1 and Q8_0; Q8_K
     * is covered by Q4_K above, and the row split does not depend on the type) */
    matmul_case(GGUF_TYPE_Q4_1, ((1 << 20) / 352 + 40) | 1, 352, 1, 0);
    matmul_case(GGUF_TYPE_Q5_0, ((1 << 20) / 352 + 40) | 1, 352, 1, 0);
}

Test(quant, new_types_every_batch_size_to_33_at_tile_edges_agrees_with_portable) {
    for (size_t i = 0; i < N_NEW_TYPES; i++) batch_sizes_agree_with_portable(NEW_TYPES[i]);
}

Test(quant, new_types_give_a_token_the_same_result_alone_or_in_a_batch) {
    enum { T = 6 };
    for (size_t i = 0; i < N_NEW_TYPES; i++) {
        uint32_t type = NEW_TYPES[i];
        int64_t n_rows = 45, n_cols = cols_for(type);
        mm_inputs in = mm_inputs_make(type, n_rows, n_cols, T, 1);
        float *all = malloc(T * (size_t)n_rows * sizeof(float)), *one = malloc((size_t)n_rows * sizeof(float));
        quant_isa saved = quant_isa_active();
        for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
            quant_isa_force((quant_isa)isa);
            quant_matmul(all, in.w, type, n_rows, n_cols, in.x, T, in.scratch, 2);
            for (int t = 0; t < T; t++) {
                quant_matmul(one, in.w, type, n_rows, n_cols, in.x + t * n_cols, 1, in.scratch, 1);
                for (int64_t r = 0; r < n_rows; r++)
                    cr_assert(fabsf(one[r] - all[t * n_rows + r]) <= 1e-5f * (fabsf(one[r]) + 1.0f), "%s %s tok %d row %ld",
                              quant_isa_name((quant_isa)isa), gguf_type_name(type), t, (long)r);
            }
        }
        quant_isa_force(saved);
        mm_inputs_free(&in);
        free(all);
        free(one);
    }
}

Test(quant, new_types_matmul_of_zero_activations_is_zero) {
    for (size_t i = 0; i < N_NEW_TYPES; i++) {
        uint32_t type = NEW_TYPES[i];
        int64_t n_cols = cols_for(type);
        uint8_t *w = malloc(quant_row_bytes(type, n_cols) * 9);
        random_weights(w, type, 9, n_cols);
        float *x = calloc((size_t)n_cols, sizeof(float)), out[9];
        size_t sb;
        uint8_t *scratch = scratch_for(type, 1, n_cols, &sb);
        quant_matmul(out, w, type, 9, n_cols, x, 1, scratch, 1);
        for (int r = 0; r < 9; r++) cr_assert_eq(out[r], 0.0f, "%s row %d: %g", gguf_type_name(type), r, out[r]);
        free(scratch);
        free(w);
        free(x);
    }
}

// ---- the low-bit types of issue 47: matmul -------------------------------------------------------

/* cols_for gives 3 super-blocks (12 NVFP4 blocks); long_cols_for 5 (20) */
Test(quant, lowbit_types_matmul_matches_float64_reference) {
    for (size_t i = 0; i < N_LOWBIT_TYPES; i++) {
        uint32_t type = LOWBIT_TYPES[i];
        matmul_case(type, 37, cols_for(type), 1, 0);
        matmul_case(type, 29, cols_for(type), 7, 0);
        matmul_case(type, 23, cols_for(type), 1, 1); /* exactly representable activations */
    }
    /* above the parallel threshold, both activation forms (Q8_K, Q8_0) */
    matmul_case(GGUF_TYPE_IQ2_XXS, ((1 << 20) / 768 + 40) | 1, 768, 1, 0);
    matmul_case(GGUF_TYPE_NVFP4, ((1 << 20) / 768 + 40) | 1, 768, 1, 0);
}

Test(quant, lowbit_types_every_batch_size_to_33_at_tile_edges_agrees_with_portable) {
    for (size_t i = 0; i < N_LOWBIT_TYPES; i++) batch_sizes_agree_with_portable(LOWBIT_TYPES[i]);
}

/* The same with the VBMI codebook kernels off (x86/quant_iq_vbmi.inc): the AVX-512 table then runs
 * quant_iq_x86.inc's tiles, as on a CPU without VBMI. */
Test(quant, lowbit_types_without_vbmi_agree_with_portable) {
    int saved = quant_tune_vbmi_force(0);
    for (size_t i = 0; i < N_LOWBIT_TYPES; i++) batch_sizes_agree_with_portable(LOWBIT_TYPES[i]);
    quant_tune_vbmi_force(saved);
}

Test(quant, lowbit_types_matmul_of_zero_activations_is_zero) {
    for (size_t i = 0; i < N_LOWBIT_TYPES; i++) {
        uint32_t type = LOWBIT_TYPES[i];
        int64_t n_cols = cols_for(type);
        uint8_t *w = malloc(quant_row_bytes(type, n_cols) * 9);
        random_weights(w, type, 9, n_cols);
        float *x = calloc((size_t)n_cols, sizeof(float)), out[9];
        size_t sb;
        uint8_t *scratch = scratch_for(type, 1, n_cols, &sb);
        quant_matmul(out, w, type, 9, n_cols, x, 1, scratch, 1);
        for (int r = 0; r < 9; r++) cr_assert_eq(out[r], 0.0f, "%s row %d: %g", gguf_type_name(type), r, out[r]);
        free(scratch);
        free(w);
        free(x);
    }
}

// ---- the float GEMM and the dense weights' register tiles (x86/quant_x86_gemm.inc) ----------------

/* quant_gemm_f32 at every row count around the tiles (AVX-512 12, AVX2 6), column counts around
 * the 32/16-column tiles and depths not a multiple of anything, with strides wider than the
 * matrices: every instruction set within float rounding of the float64 product, nothing written
 * past column n, acc adding to C, and k split in two calls with acc giving the same bits as one. */
Test(quant, gemm_f32_matches_float64_at_tile_edges_for_every_isa) {
    const int ms[] = {1, 5, 6, 7, 11, 12, 13, 25}, ns[] = {1, 8, 15, 16, 17, 31, 32, 33, 50}, ks[] = {1, 7, 64, 130};
    enum { LDA = 131, LDB = 53, LDC = 57, MAXM = 25, MAXK = 130 };
    static float A[MAXM * LDA], B[MAXK * LDB], C[MAXM * LDC], C2[MAXM * LDC], C0[MAXM * LDC];
    for (int i = 0; i < MAXM * LDA; i++) A[i] = rndf();
    for (int i = 0; i < MAXK * LDB; i++) B[i] = rndf();
    for (int i = 0; i < MAXM * LDC; i++) C0[i] = rndf();
    quant_isa saved = quant_isa_active();
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        const char *name = quant_isa_name((quant_isa)isa);
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
                    for (int acc = 0; acc <= 1; acc++) {
                        int m = ms[mi], n = ns[ni], k = ks[ki];
                        memcpy(C, C0, sizeof C);
                        quant_gemm_f32(C, LDC, A, LDA, B, LDB, m, n, k, acc);
                        for (int i = 0; i < m; i++)
                            for (int j = 0; j < LDC; j++) {
                                float got = C[i * LDC + j];
                                if (j >= n) {
                                    cr_assert_eq(f32_bits(got), f32_bits(C0[i * LDC + j]), "%s m %d n %d k %d: C[%d][%d] written",
                                                 name, m, n, k, i, j);
                                    continue;
                                }
                                double ref = acc ? C0[i * LDC + j] : 0, mag = fabs(ref);
                                for (int c = 0; c < k; c++) {
                                    ref += (double)A[i * LDA + c] * B[c * LDB + j];
                                    mag += fabs((double)A[i * LDA + c] * B[c * LDB + j]);
                                }
                                cr_assert(fabs(got - ref) <= 1e-6 * mag + 1e-30, "%s m %d n %d k %d acc %d C[%d][%d]: %g vs %g",
                                          name, m, n, k, acc, i, j, got, ref);
                            }
                        for (int i = m; i < MAXM; i++) /* rows past m untouched */
                            cr_assert_eq(f32_bits(C[i * LDC]), f32_bits(C0[i * LDC]), "%s m %d: row %d written", name, m, i);
                        if (k < 2) continue;
                        memcpy(C2, C0, sizeof C2); /* k split at k / 2: the same chains, the same bits */
                        quant_gemm_f32(C2, LDC, A, LDA, B, LDB, m, n, k / 2, acc);
                        quant_gemm_f32(C2, LDC, A + k / 2, LDA, B + (k / 2) * LDB, LDB, m, n, k - k / 2, 1);
                        for (int i = 0; i < m * LDC; i++)
                            cr_assert_eq(f32_bits(C2[i]), f32_bits(C[i]), "%s m %d n %d k %d: split at %d differs at %d",
                                         name, m, n, k, k / 2, i);
                    }
    }
    quant_isa_force(saved);
}

/* quant_matmul with the float GEMM allowed (quant_mm.gemm, as the encoder asks). */
static void matmul_gemm(float *out, const void *w, uint32_t type, int64_t R, int64_t n_cols, const float *x, int n,
                        void *scratch, int threads) {
    quant_mm mm = {out, w, NULL, type, R, true, 0};
    quant_matmul_many(&mm, 1, n_cols, x, n, scratch, threads);
}

/* F16 and BF16 weights from 16 tokens go through the register tiles where the caller allows it
 * (quant_mm.gemm), their rows converted a panel (32 rows x 128 columns on AVX-512) at a time: row
 * counts and columns that are not multiples of the panel or of the 16 x 16 transposes, batch sizes
 * around the switch and the tiles, 1 and 2 threads, against the portable dot products (within
 * float rounding); and a token's result the same bits at every batch size from 16 on. Without
 * the flag (decoders) a token's result is the same bits at every batch size, 1 included. */
Test(quant, dense_matmul_from_sixteen_tokens_agrees_with_portable_at_panel_edges) {
    const uint32_t types[] = {GGUF_TYPE_F16, GGUF_TYPE_BF16};
    const int64_t shapes[][2] = {{37, 257}, {70, 131}, {16, 16}, {33, 5}};
    const int toks[] = {15, 16, 17, 25, 40};
    enum { T = 40 };
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            uint32_t type = types[ti];
            int64_t R = shapes[si][0], n_cols = shapes[si][1];
            uint8_t *w = malloc(quant_row_bytes(type, n_cols) * (size_t)R);
            random_weights(w, type, R, n_cols);
            float *x = malloc(sizeof(float) * T * (size_t)n_cols), *ref = malloc(sizeof(float) * T * (size_t)R),
                  *out = malloc(sizeof(float) * T * (size_t)R), *all = malloc(sizeof(float) * T * (size_t)R);
            float *row = malloc(sizeof(float) * (size_t)n_cols);
            for (int64_t j = 0; j < T * n_cols; j++) x[j] = rndf();
            size_t sb;
            uint8_t *scratch = scratch_for(type, T, n_cols, &sb);
            quant_isa saved = quant_isa_force(QUANT_ISA_PORTABLE);
            quant_matmul(ref, w, type, R, n_cols, x, T, scratch, 1);
            for (int isa = QUANT_ISA_PORTABLE + 1; isa <= (int)quant_isa_best(); isa++) {
                quant_isa_force((quant_isa)isa);
                const char *name = quant_isa_name((quant_isa)isa);
                float *dot = malloc(sizeof(float) * T * (size_t)R);
                quant_matmul(dot, w, type, R, n_cols, x, T, scratch, 1);
                for (int n = 1; n <= T; n += 13) { /* decoders: the same bits at any batch size */
                    memset(out, 0xFF, sizeof(float) * T * (size_t)R);
                    quant_matmul(out, w, type, R, n_cols, x, n, scratch, 2);
                    for (int64_t i = 0; i < n * R; i++)
                        cr_assert_eq(f32_bits(out[i]), f32_bits(dot[i]), "%s %s without gemm: n_tok %d differs at %ld from 40",
                                     name, gguf_type_name(type), n, (long)i);
                }
                free(dot);
                matmul_gemm(all, w, type, R, n_cols, x, T, scratch, 1);
                for (size_t k = 0; k < sizeof toks / sizeof *toks; k++)
                    for (int threads = 1; threads <= 2; threads++) {
                        int n = toks[k];
                        memset(out, 0xFF, sizeof(float) * T * (size_t)R);
                        matmul_gemm(out, w, type, R, n_cols, x, n, scratch, threads);
                        for (int t = 0; t < n; t++)
                            for (int64_t r = 0; r < R; r++) {
                                quant_dequantize_row(row, w + quant_row_bytes(type, n_cols) * (size_t)r, type, n_cols);
                                double mag = 0;
                                for (int64_t c = 0; c < n_cols; c++) mag += fabs((double)row[c] * x[t * n_cols + c]);
                                float got = out[t * R + r], want = ref[t * R + r];
                                cr_assert(fabsf(got - want) <= 2e-6 * mag + 1e-30, "%s %s %ldx%ld n_tok %d tok %d row %ld: %g vs %g",
                                          name, gguf_type_name(type), (long)R, (long)n_cols, n, t, (long)r, got, want);
                                if (n >= 16)
                                    cr_assert_eq(f32_bits(got), f32_bits(all[t * R + r]), "%s %s n_tok %d tok %d row %ld: %g vs %g at 40",
                                                 name, gguf_type_name(type), n, t, (long)r, got, all[t * R + r]);
                            }
                    }
            }
            quant_isa_force(saved);
            free(w), free(x), free(ref), free(out), free(all), free(row), free(scratch);
        }
}

/* quant_softmax and quant_gelu against float64 for every instruction set: rows of every length
 * around the vectors, -inf scores weighing 0, scores far below the largest giving 0; GELU over
 * [-12, 12] within 1e-6 absolute + 4 ulp-ish relative, 0 far left, x far right, in place. */
Test(quant, softmax_and_gelu_match_float64_for_every_isa) {
    enum { N = 71 };
    float s[N], s0[N];
    enum { G = 4099 };
    static float gx[G], gy[G];
    for (int i = 0; i < G; i++) gx[i] = -12.0f + 24.0f * (float)i / (G - 1);
    gx[0] = -60.0f, gx[1] = 60.0f, gx[2] = 0.0f, gx[3] = -1e-20f;
    quant_isa saved = quant_isa_active();
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        const char *name = quant_isa_name((quant_isa)isa);
        for (int n = 1; n <= N; n++) {
            for (int j = 0; j < n; j++) s0[j] = 8.0f * rndf();
            if (n > 3) s0[1] = -INFINITY, s0[n - 1] = -1000.0f;
            memcpy(s, s0, sizeof(float) * (size_t)n);
            quant_softmax(s, n, 0.7f);
            double mx = -INFINITY, sum = 0, tot = 0;
            for (int j = 0; j < n; j++) mx = fmax(mx, 0.7 * s0[j]);
            for (int j = 0; j < n; j++) sum += exp(0.7 * s0[j] - mx);
            for (int j = 0; j < n; j++) {
                double want = exp(0.7 * s0[j] - mx) / sum;
                cr_assert(fabs(s[j] - want) <= 1e-6 * want + 1e-30, "%s n %d s[%d]: %g vs %g", name, n, j, s[j], want);
                tot += s[j];
            }
            cr_assert(fabs(tot - 1) < 1e-5, "%s n %d: weights sum to %g", name, n, tot);
        }
        memcpy(gy, gx, sizeof gy);
        quant_gelu(gy, gy, G);
        for (int i = 0; i < G; i++) {
            double v = gx[i], want = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
            cr_assert(fabs(gy[i] - want) <= 1e-6 + 4e-7 * fabs(want), "%s gelu(%g) = %.9g, want %.9g", name, gx[i],
                      gy[i], want);
        }
    }
    quant_isa_force(saved);
}
