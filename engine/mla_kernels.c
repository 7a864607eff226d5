/*
 * mla_kernels.c — the latent attention's float32 tile kernels (mla_kernels.h): scores of a block
 * of query rows against a tile of cached rows, the online softmax of a tile, and the weighted
 * sums of the rows' latents. The build targets baseline x86-64 (or any other CPU), so the vector
 * versions are compiled for their instruction set region by region (isa_target.h) and picked by
 * the matmul kernels' instruction set at run time; the portable versions are the reference.
 *
 * Register blocking: the scores are dot products of two row-major operands (the queries and the
 * cached rows both hold their L values contiguously), so a block of 4 queries x 4 rows keeps 16
 * vector sums in registers, each query and row vector loaded once per block; the edges reuse the
 * block with clamped rows (the extra sums are dropped), so every score takes the same
 * instructions wherever it sits. The values broadcast a weight and multiply whole vectors of a
 * row's latent: 4 queries x 64 latent columns in registers across the tile's rows.
 */
#include "mla_kernels.h"
#include "isa_target.h"

#include <math.h>
#include <stddef.h>

#include "kv_layout.h"

/* Below this, e^x counts as 0 (e^-87 < 2^-125: nothing next to the row's max weight of 1). */
#define MLA_EXP_FLOOR -87.0f

static inline int min_i(int a, int b) { return a < b ? a : b; }

/* The end of a row's softmax step, shared by every version: corr, run_sum, run_max. */
static inline void softmax_finish(int i, float mx, float sum, float *run_max, float *run_sum, float *corr) {
    float c = mx == run_max[i] ? 1.0f : expf(run_max[i] - mx);
    corr[i] = c;
    run_sum[i] = run_sum[i] * c + sum;
    run_max[i] = mx;
}

// ---- portable -------------------------------------------------------------------------------

static void scores_portable(float *s, const float *const *q, int m, const float *rows, int cnt, int L) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < cnt; j++) {
            const float *r = rows + (size_t)j * L;
            float a = 0;
            for (int k = 0; k < L; k++) a += q[i][k] * r[k];
            s[(size_t)i * KV_BLOCK + j] = a;
        }
}

static void softmax_portable(float *p, int m, const int *lim, float scale, float *run_max, float *run_sum,
                             float *corr) {
    for (int i = 0; i < m; i++) {
        float *r = p + (size_t)i * KV_BLOCK, mx = run_max[i], sum = 0;
        for (int j = 0; j < lim[i]; j++) {
            r[j] *= scale;
            mx = r[j] > mx ? r[j] : mx;
        }
        for (int j = 0; j < KV_BLOCK; j++) {
            r[j] = j < lim[i] ? expf(r[j] - mx) : 0.0f;
            sum += r[j];
        }
        softmax_finish(i, mx, sum, run_max, run_sum, corr);
    }
}

static void values_portable(float *acc, const float *p, const float *corr, int m, const float *rows, int cnt, int L,
                            int C) {
    for (int i = 0; i < m; i++) {
        float *o = acc + (size_t)i * C;
        const float *pi = p + (size_t)i * KV_BLOCK;
        for (int c = 0; c < C; c++) {
            float a = 0;
            for (int j = 0; j < cnt; j++) a += pi[j] * rows[(size_t)j * L + c];
            o[c] = o[c] * corr[i] + a;
        }
    }
}

static const mla_kernels MLA_PORTABLE = {scores_portable, softmax_portable, values_portable};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define MK_INLINE static inline __attribute__((always_inline))

// ---- AVX2 + FMA ----------------------------------------------------------------------------------

ISA_TARGET_BEGIN("avx2,fma")

/* lanes below n (0..8) as a maskload/maskstore mask */
MK_INLINE __m256i mask8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* the 8 lanes' sum, always in the same order */
MK_INLINE float hsum8(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* e^x for x <= 0: x = n ln2 + r (ln2 in two parts, so n ln2 is exact), e^r by its Taylor
 * polynomial to degree 7, times 2^n in the exponent field; below MLA_EXP_FLOOR (-inf too) 0. */
MK_INLINE __m256 exp8(__m256 x) {
    __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(MLA_EXP_FLOOR), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(MLA_EXP_FLOOR));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440054690583e-4f), r);
    __m256 e = _mm256_set1_ps(1.f / 5040);
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.f / 720));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.f / 120));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.f / 24));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.f / 6));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(0.5f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.f));
    __m256i b = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(ok, _mm256_mul_ps(e, _mm256_castsi256_ps(b)));
}

/* 2 queries x 4 rows from (i0, j0); rows past m or cnt repeat the last one and are not stored */
MK_INLINE void scores_block_avx2(float *s, const float *const *q, int i0, int m, const float *rows, int j0, int cnt,
                                 int L) {
    const float *qa[2], *ra[4];
    for (int r = 0; r < 2; r++) qa[r] = q[min_i(i0 + r, m - 1)];
    for (int c = 0; c < 4; c++) ra[c] = rows + (size_t)min_i(j0 + c, cnt - 1) * L;
    __m256 a[2][4];
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++) a[r][c] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= L; k += 8) {
        __m256 x[2], y[4];
        for (int r = 0; r < 2; r++) x[r] = _mm256_loadu_ps(qa[r] + k);
        for (int c = 0; c < 4; c++) y[c] = _mm256_loadu_ps(ra[c] + k);
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 4; c++) a[r][c] = _mm256_fmadd_ps(x[r], y[c], a[r][c]);
    }
    if (k < L) {
        __m256i mk = mask8(L - k);
        __m256 x[2], y[4];
        for (int r = 0; r < 2; r++) x[r] = _mm256_maskload_ps(qa[r] + k, mk);
        for (int c = 0; c < 4; c++) y[c] = _mm256_maskload_ps(ra[c] + k, mk);
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 4; c++) a[r][c] = _mm256_fmadd_ps(x[r], y[c], a[r][c]);
    }
    for (int r = 0; r < min_i(2, m - i0); r++)
        for (int c = 0; c < min_i(4, cnt - j0); c++) s[(size_t)(i0 + r) * KV_BLOCK + j0 + c] = hsum8(a[r][c]);
}

static void scores_avx2(float *s, const float *const *q, int m, const float *rows, int cnt, int L) {
    for (int i0 = 0; i0 < m; i0 += 2)
        for (int j0 = 0; j0 < cnt; j0 += 4) scores_block_avx2(s, q, i0, m, rows, j0, cnt, L);
}

static void softmax_avx2(float *p, int m, const int *lim, float scale, float *run_max, float *run_sum, float *corr) {
    const __m256 sc = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    for (int i = 0; i < m; i++) {
        float *r = p + (size_t)i * KV_BLOCK;
        __m256 x[KV_BLOCK / 8], mv = ninf;
        for (int v = 0; v < KV_BLOCK / 8; v++) {
            __m256 keep = _mm256_castsi256_ps(mask8(lim[i] - 8 * v));
            x[v] = _mm256_blendv_ps(ninf, _mm256_mul_ps(_mm256_loadu_ps(r + 8 * v), sc), keep);
            mv = _mm256_max_ps(mv, x[v]);
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float mx = _mm_cvtss_f32(h), sum = 0;
        mx = mx > run_max[i] ? mx : run_max[i];
        if (mx == -INFINITY) { /* nothing in view yet */
            for (int v = 0; v < KV_BLOCK / 8; v++) _mm256_storeu_ps(r + 8 * v, _mm256_setzero_ps());
        } else {
            __m256 mb = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
            for (int v = 0; v < KV_BLOCK / 8; v++) {
                __m256 e = exp8(_mm256_sub_ps(x[v], mb));
                _mm256_storeu_ps(r + 8 * v, e);
                acc = _mm256_add_ps(acc, e);
            }
            sum = hsum8(acc);
        }
        softmax_finish(i, mx, sum, run_max, run_sum, corr);
    }
}

/* acc rows i0..i0+nr-1, columns c0.. (nw vectors of 8, the last one n_last lanes) */
MK_INLINE void values_block_avx2(float *acc, const float *p, const float *corr, int i0, const float *rows, int cnt,
                                 int L, int C, int c0, const int nr, const int nw, int n_last) {
    __m256i ml = mask8(n_last);
    __m256 a[4][2];
    for (int r = 0; r < nr; r++)
        for (int w = 0; w < nw; w++) a[r][w] = _mm256_setzero_ps();
    for (int j = 0; j < cnt; j++) {
        const float *row = rows + (size_t)j * L + c0;
        __m256 v[2];
        for (int w = 0; w < nw; w++)
            v[w] = w == nw - 1 && n_last < 8 ? _mm256_maskload_ps(row + 8 * w, ml) : _mm256_loadu_ps(row + 8 * w);
        for (int r = 0; r < nr; r++) {
            __m256 pb = _mm256_broadcast_ss(p + (size_t)(i0 + r) * KV_BLOCK + j);
            for (int w = 0; w < nw; w++) a[r][w] = _mm256_fmadd_ps(pb, v[w], a[r][w]);
        }
    }
    for (int r = 0; r < nr; r++) {
        float *o = acc + (size_t)(i0 + r) * C + c0;
        __m256 cr = _mm256_set1_ps(corr[i0 + r]);
        for (int w = 0; w < nw; w++) {
            if (w == nw - 1 && n_last < 8)
                _mm256_maskstore_ps(o + 8 * w, ml, _mm256_fmadd_ps(_mm256_maskload_ps(o + 8 * w, ml), cr, a[r][w]));
            else _mm256_storeu_ps(o + 8 * w, _mm256_fmadd_ps(_mm256_loadu_ps(o + 8 * w), cr, a[r][w]));
        }
    }
}

/* the rows i0..i0+nr-1 over every column: 16 at a time, then 8 (the last maybe fewer) */
MK_INLINE void values_rows_avx2(float *acc, const float *p, const float *corr, int i0, const float *rows, int cnt,
                                int L, int C, const int nr) {
    int c0 = 0;
    for (; c0 + 16 <= C; c0 += 16) values_block_avx2(acc, p, corr, i0, rows, cnt, L, C, c0, nr, 2, 8);
    for (; c0 < C; c0 += 8) values_block_avx2(acc, p, corr, i0, rows, cnt, L, C, c0, nr, 1, min_i(8, C - c0));
}

static void values_avx2(float *acc, const float *p, const float *corr, int m, const float *rows, int cnt, int L,
                        int C) {
    int i0 = 0;
    for (; i0 + 4 <= m; i0 += 4) values_rows_avx2(acc, p, corr, i0, rows, cnt, L, C, 4);
    switch (m - i0) {
    case 3: values_rows_avx2(acc, p, corr, i0, rows, cnt, L, C, 3); break;
    case 2: values_rows_avx2(acc, p, corr, i0, rows, cnt, L, C, 2); break;
    case 1: values_rows_avx2(acc, p, corr, i0, rows, cnt, L, C, 1); break;
    default: break;
    }
}

ISA_TARGET_END

static const mla_kernels MLA_AVX2 = {scores_avx2, softmax_avx2, values_avx2};

// ---- AVX-512 -----------------------------------------------------------------------------------

ISA_TARGET_BEGIN("avx2,fma,avx512f")

/* lanes below n (clamped to 0..16) */
MK_INLINE __mmask16 mask16(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* exp8's method on 16 lanes */
MK_INLINE __m512 exp16(__m512 x) {
    __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(MLA_EXP_FLOOR), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(MLA_EXP_FLOOR));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440054690583e-4f), r);
    __m512 e = _mm512_set1_ps(1.f / 5040);
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.f / 720));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.f / 120));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.f / 24));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.f / 6));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0.5f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.f));
    __m512i b = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, e, _mm512_castsi512_ps(b));
}

/* The 16 lanes' sums of a[r][c] in lane 4r + c, by a tree of shuffles and adds (45 instructions
 * for the 16 sums, not 16 reductions of 8 each): 128-bit chunks 0 + 2 and 1 + 3, then the two
 * halves, then lanes 0 + 2 and 1 + 3 within the chunk, then the two; each sum takes the same
 * additions in the same order wherever it sits. */
MK_INLINE __m512 sum16x16(__m512 a[4][4]) {
    __m512 b[8], c[4], d[2];
    for (int k = 0; k < 8; k++) { /* in transposed order, so that lane 4r + c ends up holding a[r][c] */
        __m512 x = a[(2 * k) % 4][(2 * k) / 4], y = a[(2 * k + 1) % 4][(2 * k + 1) / 4];
        b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    for (int k = 0; k < 4; k++)
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int k = 0; k < 2; k++)
        d[k] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* 4 queries x 4 rows from (i0, j0), as scores_block_avx2 */
MK_INLINE void scores_block_avx512(float *s, const float *const *q, int i0, int m, const float *rows, int j0, int cnt,
                                   int L) {
    const float *qa[4], *ra[4];
    for (int r = 0; r < 4; r++) qa[r] = q[min_i(i0 + r, m - 1)];
    for (int c = 0; c < 4; c++) ra[c] = rows + (size_t)min_i(j0 + c, cnt - 1) * L;
    __m512 a[4][4];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) a[r][c] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= L; k += 16) {
        __m512 x[4], y[4];
        for (int r = 0; r < 4; r++) x[r] = _mm512_loadu_ps(qa[r] + k);
        for (int c = 0; c < 4; c++) y[c] = _mm512_loadu_ps(ra[c] + k);
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 4; c++) a[r][c] = _mm512_fmadd_ps(x[r], y[c], a[r][c]);
    }
    if (k < L) {
        __mmask16 mk = mask16(L - k);
        __m512 x[4], y[4];
        for (int r = 0; r < 4; r++) x[r] = _mm512_maskz_loadu_ps(mk, qa[r] + k);
        for (int c = 0; c < 4; c++) y[c] = _mm512_maskz_loadu_ps(mk, ra[c] + k);
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 4; c++) a[r][c] = _mm512_fmadd_ps(x[r], y[c], a[r][c]);
    }
    __m512 z = sum16x16(a);
    if (m - i0 >= 4 && cnt - j0 >= 4) {
        float *o = s + (size_t)i0 * KV_BLOCK + j0; /* the lane index is an immediate (unoptimised builds too) */
        _mm_storeu_ps(o, _mm512_extractf32x4_ps(z, 0));
        _mm_storeu_ps(o + KV_BLOCK, _mm512_extractf32x4_ps(z, 1));
        _mm_storeu_ps(o + 2 * KV_BLOCK, _mm512_extractf32x4_ps(z, 2));
        _mm_storeu_ps(o + 3 * KV_BLOCK, _mm512_extractf32x4_ps(z, 3));
        return;
    }
    float t[16];
    _mm512_storeu_ps(t, z);
    for (int r = 0; r < min_i(4, m - i0); r++)
        for (int c = 0; c < min_i(4, cnt - j0); c++) s[(size_t)(i0 + r) * KV_BLOCK + j0 + c] = t[4 * r + c];
}

static void scores_avx512(float *s, const float *const *q, int m, const float *rows, int cnt, int L) {
    for (int i0 = 0; i0 < m; i0 += 4)
        for (int j0 = 0; j0 < cnt; j0 += 4) scores_block_avx512(s, q, i0, m, rows, j0, cnt, L);
}

static void softmax_avx512(float *p, int m, const int *lim, float scale, float *run_max, float *run_sum,
                           float *corr) {
    const __m512 sc = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < m; i++) {
        float *r = p + (size_t)i * KV_BLOCK;
        __m512 x[KV_BLOCK / 16], mv = ninf;
        for (int v = 0; v < KV_BLOCK / 16; v++) {
            x[v] = _mm512_mask_mul_ps(ninf, mask16(lim[i] - 16 * v), _mm512_loadu_ps(r + 16 * v), sc);
            mv = _mm512_max_ps(mv, x[v]);
        }
        float mx = _mm512_reduce_max_ps(mv), sum = 0;
        mx = mx > run_max[i] ? mx : run_max[i];
        if (mx == -INFINITY) { /* nothing in view yet */
            for (int v = 0; v < KV_BLOCK / 16; v++) _mm512_storeu_ps(r + 16 * v, _mm512_setzero_ps());
        } else {
            __m512 mb = _mm512_set1_ps(mx), acc = _mm512_setzero_ps();
            for (int v = 0; v < KV_BLOCK / 16; v++) {
                __m512 e = exp16(_mm512_sub_ps(x[v], mb));
                _mm512_storeu_ps(r + 16 * v, e);
                acc = _mm512_add_ps(acc, e);
            }
            sum = _mm512_reduce_add_ps(acc);
        }
        softmax_finish(i, mx, sum, run_max, run_sum, corr);
    }
}

/* acc rows i0..i0+nr-1, columns c0.. (nw vectors of 16, the last one n_last lanes) */
MK_INLINE void values_block_avx512(float *acc, const float *p, const float *corr, int i0, const float *rows, int cnt,
                                   int L, int C, int c0, const int nr, const int nw, int n_last) {
    __mmask16 ml = mask16(n_last);
    __m512 a[4][4];
    for (int r = 0; r < nr; r++)
        for (int w = 0; w < nw; w++) a[r][w] = _mm512_setzero_ps();
    for (int j = 0; j < cnt; j++) {
        const float *row = rows + (size_t)j * L + c0;
        __m512 v[4];
        for (int w = 0; w < nw; w++)
            v[w] = w == nw - 1 ? _mm512_maskz_loadu_ps(ml, row + 16 * w) : _mm512_loadu_ps(row + 16 * w);
        for (int r = 0; r < nr; r++) {
            __m512 pb = _mm512_set1_ps(p[(size_t)(i0 + r) * KV_BLOCK + j]);
            for (int w = 0; w < nw; w++) a[r][w] = _mm512_fmadd_ps(pb, v[w], a[r][w]);
        }
    }
    for (int r = 0; r < nr; r++) {
        float *o = acc + (size_t)(i0 + r) * C + c0;
        __m512 cr = _mm512_set1_ps(corr[i0 + r]);
        for (int w = 0; w < nw; w++) {
            __mmask16 mw = w == nw - 1 ? ml : (__mmask16)0xFFFF;
            _mm512_mask_storeu_ps(o + 16 * w, mw, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mw, o + 16 * w), cr, a[r][w]));
        }
    }
}

/* the rows i0..i0+nr-1 over every column: 64 at a time, then 16 (the last maybe fewer) */
MK_INLINE void values_rows_avx512(float *acc, const float *p, const float *corr, int i0, const float *rows, int cnt,
                                  int L, int C, const int nr) {
    int c0 = 0;
    for (; c0 + 64 <= C; c0 += 64) values_block_avx512(acc, p, corr, i0, rows, cnt, L, C, c0, nr, 4, 16);
    for (; c0 < C; c0 += 16) values_block_avx512(acc, p, corr, i0, rows, cnt, L, C, c0, nr, 1, min_i(16, C - c0));
}

static void values_avx512(float *acc, const float *p, const float *corr, int m, const float *rows, int cnt, int L,
                          int C) {
    int i0 = 0;
    for (; i0 + 4 <= m; i0 += 4) values_rows_avx512(acc, p, corr, i0, rows, cnt, L, C, 4);
    switch (m - i0) {
    case 3: values_rows_avx512(acc, p, corr, i0, rows, cnt, L, C, 3); break;
    case 2: values_rows_avx512(acc, p, corr, i0, rows, cnt, L, C, 2); break;
    case 1: values_rows_avx512(acc, p, corr, i0, rows, cnt, L, C, 1); break;
    default: break;
    }
}

ISA_TARGET_END

static const mla_kernels MLA_AVX512 = {scores_avx512, softmax_avx512, values_avx512};
#endif

// ---- dispatch ------------------------------------------------------------------------------------

const mla_kernels *mla_kernels_for(quant_isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    switch (isa) {
    case QUANT_ISA_AVX2: return &MLA_AVX2;
    case QUANT_ISA_AVX512:
    case QUANT_ISA_AMX: return &MLA_AVX512;
    default: break;
    }
#else
    (void)isa;
#endif
    return &MLA_PORTABLE;
}

const mla_kernels *mla_kernels_active(void) { return mla_kernels_for(quant_isa_active()); }
