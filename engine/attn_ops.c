/*
 * attn_ops.c — attention loops specific to the cache layout (see attn_ops.h). The build targets
 * baseline x86-64 (or any other CPU), so the vector versions are compiled with per-function
 * target attributes; a row per instruction set (ATTN_SETS, at the end) picks them with the
 * matmul kernels' instruction set, and they take the vector primitives of that set's kernel table
 * (quant_impl.h). The portable versions are the reference and the fallback.
 */
#include "attn_ops.h"
#include "isa_target.h"

#include <math.h>
#include <string.h>

#include "kv_layout.h"
#include "kv_quant.h"
#include "quant.h"
#include "quant_impl.h"

typedef void (*attn_scores_t_fn)(float *s, const float *q, const float *KT, int cnt, int hd, float scale);
typedef float (*attn_max_fn)(const float *s, int cnt);

// ---- portable -------------------------------------------------------------------------------

static void attn_scores_t_portable(float *s, const float *q, const float *KT, int cnt, int hd, float scale) {
    for (int j = 0; j < cnt; j++) s[j] = 0;
    for (int i = 0; i < hd; i++)
        for (int j = 0; j < cnt; j++) s[j] += q[i] * KT[(size_t)i * KV_BLOCK + j];
    for (int j = 0; j < cnt; j++) s[j] *= scale;
}

static float attn_max_portable(const float *s, int cnt) {
    float m = s[0];
    for (int j = 1; j < cnt; j++) m = s[j] > m ? s[j] : m;
    return m;
}

// ---- AVX2 + FMA ----------------------------------------------------------------------------

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static __attribute__((target("avx2,fma"))) void attn_scores_t_avx2(float *s, const float *q, const float *KT, int cnt,
                                                                   int hd, float scale) {
    __m256 sc = _mm256_set1_ps(scale);
    if (cnt > KV_BLOCK / 2) { /* a full tile: 8 independent accumulators held in registers */
        __m256 a[KV_BLOCK / 8];
        for (int v = 0; v < KV_BLOCK / 8; v++) a[v] = _mm256_setzero_ps();
        for (int i = 0; i < hd; i++) {
            __m256 qi = _mm256_set1_ps(q[i]);
            const float *row = KT + (size_t)i * KV_BLOCK;
            for (int v = 0; v < KV_BLOCK / 8; v++) a[v] = _mm256_fmadd_ps(qi, _mm256_loadu_ps(row + 8 * v), a[v]);
        }
        for (int v = 0; v < KV_BLOCK / 8; v++) _mm256_storeu_ps(s + 8 * v, _mm256_mul_ps(a[v], sc));
        return;
    }
    for (int v = 0; v < (cnt + 7) / 8; v++) { /* a short tile (early positions): only what is needed */
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int i = 0;
        for (; i + 2 <= hd; i += 2) {
            a0 = _mm256_fmadd_ps(_mm256_set1_ps(q[i]), _mm256_loadu_ps(KT + (size_t)i * KV_BLOCK + 8 * v), a0);
            a1 = _mm256_fmadd_ps(_mm256_set1_ps(q[i + 1]), _mm256_loadu_ps(KT + (size_t)(i + 1) * KV_BLOCK + 8 * v), a1);
        }
        if (i < hd) a0 = _mm256_fmadd_ps(_mm256_set1_ps(q[i]), _mm256_loadu_ps(KT + (size_t)i * KV_BLOCK + 8 * v), a0);
        _mm256_storeu_ps(s + 8 * v, _mm256_mul_ps(_mm256_add_ps(a0, a1), sc));
    }
}

static __attribute__((target("avx2,fma"))) float attn_max_avx2(const float *s, int cnt) {
    int j = 0;
    float m = s[0];
    if (cnt >= 8) {
        __m256 v = _mm256_loadu_ps(s);
        for (j = 8; j + 8 <= cnt; j += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(s + j));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        m = _mm_cvtss_f32(h);
    }
    for (; j < cnt; j++) m = s[j] > m ? s[j] : m;
    return m;
}

#endif

// ---- shared --------------------------------------------------------------------------------------

float attn_exp_sum(float *s, int cnt, float mx) {
    for (int j = 0; j < cnt; j++) s[j] -= mx;
    quant_exp(s, s, cnt); /* the kernels' vector exp, within 2 ulp */
    float sum = 0;
    for (int j = 0; j < cnt; j++) sum += s[j];
    return sum;
}

/* Below this, e^x counts as 0 (see attn_tile in attn_ops.h). */
#define ATTN_EXP_FLOOR -87.0f

/* t with F32 tiles: t itself, or (F16 or quantized tiles) *f32, a copy of t whose tiles are t's
 * converted (exactly: by h2f, or kv_quant.c's conversions) into t's scratch. */
static inline __attribute__((always_inline)) const attn_tile *tile_as_f32(const attn_tile *t, attn_tile *f32,
                                                                           quant_h2f_fn h2f) {
    if (!t->KT16 && !t->KQ) return t;
    *f32 = *t;
    if (t->KQ) {
        kv_quant_k_to_f32(t->kt_buf, t->KQ, (kv_type)t->kvq, t->hd);
        kv_quant_v_to_f32(t->v_buf, t->VQ, (kv_type)t->kvq, t->hd, t->cnt);
        f32->v_stride = t->hd;
    } else {
        h2f(t->kt_buf, t->KT16, (int64_t)t->hd * KV_BLOCK);
        h2f(t->v_buf, t->V16, (int64_t)(t->cnt - 1) * t->v_stride + t->hd);
    }
    f32->KT = t->kt_buf, f32->V = t->v_buf, f32->KT16 = f32->V16 = NULL, f32->KQ = f32->VQ = NULL;
    return f32;
}

/* An instruction set's scores and value sums over quantized tiles read in place (t->KQ, t->VQ):
 * the same operations, in the same order, as its F32 primitives over the converted tiles. */
typedef struct tile_q_ops {
    void (*scores)(float *s, const float *q, const attn_tile *t, int cnt, float scale);
    void (*axpy)(float *acc, const float *p, const attn_tile *t, int cnt);
} tile_q_ops;

/* The grouped tile step row by row, from an instruction set's primitives (the portable
 * reference, and AVX2); always inlined, so each caller calls its own set directly. Quantized
 * tiles are read in place when qops is given, else converted first. */
static inline __attribute__((always_inline)) void tile_step_rows(const attn_tile *t, attn_scores_t_fn scores,
                                                                  attn_max_fn amax, quant_exp_fn ex,
                                                                  quant_axpy_rows_fn axpy, quant_h2f_fn h2f,
                                                                  const tile_q_ops *qops) {
    attn_tile f32;
    bool direct = t->KQ && qops;
    if (!direct) t = tile_as_f32(t, &f32, h2f);
    int hd = t->hd;
    for (int r = 0; r < t->R; r++) {
        int cnt = t->cnt0 + r / t->group < t->cnt ? t->cnt0 + r / t->group : t->cnt;
        int lo = t->window ? t->qrel0 + r / t->group - t->window + 1 : 0; /* the row's first position in view */
        if (lo >= cnt) continue;
        float *s = t->p + (size_t)r * KV_BLOCK, *acc = t->acc + (size_t)r * hd;
        if (direct)
            qops->scores(s, t->q + (size_t)r * hd, t, cnt, t->scale);
        else
            scores(s, t->q + (size_t)r * hd, t->KT, cnt, hd, t->scale);
        if (t->softcap > 0)
            for (int j = 0; j < cnt; j++) s[j] = tanhf(s[j] * (1.0f / t->softcap)) * t->softcap;
        for (int j = 0; j < lo; j++) s[j] = -INFINITY;
        float m = amax(s, cnt);
        if (m > t->run_max[r]) { /* a larger max: rescale what was accumulated under the old one */
            float c = expf(t->run_max[r] - m);
            t->run_sum[r] *= c;
            for (int i = 0; i < hd; i++) acc[i] *= c;
            t->run_max[r] = m;
        }
        for (int j = 0; j < cnt; j++) {
            float d = s[j] - t->run_max[r];
            s[j] = d < ATTN_EXP_FLOOR ? -INFINITY : d;
        }
        ex(s, s, cnt);
        float sum = 0;
        for (int j = 0; j < cnt; j++) sum += s[j];
        t->run_sum[r] += sum;
        if (direct)
            qops->axpy(acc, s, t, cnt);
        else
            axpy(acc, s, t->V, t->v_stride, cnt, hd);
    }
}

static void attn_tile_portable(const attn_tile *t) {
    const quant_kernels *k = &quant_kernels_portable;
    tile_step_rows(t, attn_scores_t_portable, attn_max_portable, k->exp, k->axpy_rows, k->h2f, NULL);
}

#if defined(__x86_64__) && defined(__GNUC__)
// ---- AVX2: quantized tiles in place ---------------------------------------------------------------
//
// The loops of attn_scores_t_avx2 and of the kernels' AVX2 axpy_rows (32 columns in registers
// across the rows), each vector of quants widened and multiplied by its scales as it is loaded:
// d q is exact, so the results are those of the F32 loops over the converted tiles, bit for bit.

#define Q2_TARGET __attribute__((target("avx2,fma,f16c")))
#define Q2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* 8 quants as int32: Q8_0 bytes, or Q4_0 nibbles (high ones when high) less 8 */
Q2_INLINE __m256i q2_quants(const uint8_t *p, int high, const int q4) {
    __m128i b = _mm_loadl_epi64((const __m128i *)p);
    if (!q4) return _mm256_cvtepi8_epi32(b);
    if (high) b = _mm_srli_epi16(b, 4);
    return _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_and_si128(b, _mm_set1_epi8(0x0F))), _mm256_set1_epi32(8));
}

/* Keys of dimension i at positions 8v..8v+7 of t's key tile, as F32 */
Q2_INLINE __m256 q2_key(const attn_tile *t, const uint16_t *ds, int i, int v, const int q4) {
    const uint16_t *di = ds + (size_t)(i / KV_QUANT_BLOCK) * KV_BLOCK + 8 * v;
    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)di));
    int k0 = 8 * (v % 4); /* Q4_0: positions 32G + k0.. in bytes 16G + k0 % 16.., high nibbles from k0 = 16 */
    const uint8_t *p = q4 ? t->KQ + (size_t)i * (KV_BLOCK / 2) + (size_t)(v / 4) * 16 + k0 % 16
                          : t->KQ + (size_t)i * KV_BLOCK + 8 * v;
    return _mm256_mul_ps(_mm256_cvtepi32_ps(q2_quants(p, k0 >= 16, q4)), d);
}

/* attn_scores_t_avx2 over t's quantized key tile */
Q2_INLINE void q2_scores_kind(float *s, const float *q, const attn_tile *t, int cnt, float scale, const int q4) {
    int hd = t->hd;
    const uint16_t *ds = kv_quant_k_scales(t->KQ, q4 ? KV_Q4_0 : KV_Q8_0, hd);
    __m256 sc = _mm256_set1_ps(scale);
    if (cnt > KV_BLOCK / 2) {
        __m256 a[KV_BLOCK / 8];
        for (int v = 0; v < KV_BLOCK / 8; v++) a[v] = _mm256_setzero_ps();
        for (int i = 0; i < hd; i++) {
            __m256 qi = _mm256_set1_ps(q[i]);
            for (int v = 0; v < KV_BLOCK / 8; v++) a[v] = _mm256_fmadd_ps(qi, q2_key(t, ds, i, v, q4), a[v]);
        }
        for (int v = 0; v < KV_BLOCK / 8; v++) _mm256_storeu_ps(s + 8 * v, _mm256_mul_ps(a[v], sc));
        return;
    }
    for (int v = 0; v < (cnt + 7) / 8; v++) { /* hd is even: the pairs cover it */
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int i = 0; i + 2 <= hd; i += 2) {
            a0 = _mm256_fmadd_ps(_mm256_set1_ps(q[i]), q2_key(t, ds, i, v, q4), a0);
            a1 = _mm256_fmadd_ps(_mm256_set1_ps(q[i + 1]), q2_key(t, ds, i + 1, v, q4), a1);
        }
        _mm256_storeu_ps(s + 8 * v, _mm256_mul_ps(_mm256_add_ps(a0, a1), sc));
    }
}

/* The kernels' AVX2 axpy_rows over t's quantized value tile: one GGUF block (32 columns) at a time */
Q2_INLINE void q2_axpy_kind(float *acc, const float *p, const attn_tile *t, int n, const int q4) {
    size_t bb = q4 ? 18 : 34, rb = (size_t)(t->hd / KV_QUANT_BLOCK) * bb;
    for (int i = 0; i < t->hd; i += KV_QUANT_BLOCK) {
        __m256 a[4];
        for (int w = 0; w < 4; w++) a[w] = _mm256_loadu_ps(acc + i + 8 * w);
        for (int j = 0; j < n; j++) {
            const uint8_t *blk = t->VQ + (size_t)j * rb + (size_t)(i / KV_QUANT_BLOCK) * bb;
            uint16_t h;
            memcpy(&h, blk, 2);
            __m256 d = _mm256_set1_ps(_cvtsh_ss(h)), pj = _mm256_set1_ps(p[j]);
            for (int w = 0; w < 4; w++) { /* Q4_0: columns 16.. are the high nibbles of bytes 0.. */
                const uint8_t *qp = q4 ? blk + 2 + 8 * (w % 2) : blk + 2 + 8 * w;
                __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(q2_quants(qp, w >= 2, q4)), d);
                a[w] = _mm256_fmadd_ps(pj, v, a[w]);
            }
        }
        for (int w = 0; w < 4; w++) _mm256_storeu_ps(acc + i + 8 * w, a[w]);
    }
}

static Q2_TARGET void q2_scores(float *s, const float *q, const attn_tile *t, int cnt, float scale) {
    if (t->kvq == KV_Q4_0) q2_scores_kind(s, q, t, cnt, scale, 1);
    else q2_scores_kind(s, q, t, cnt, scale, 0);
}

static Q2_TARGET void q2_axpy(float *acc, const float *p, const attn_tile *t, int cnt) {
    if (t->kvq == KV_Q4_0) q2_axpy_kind(acc, p, t, cnt, 1);
    else q2_axpy_kind(acc, p, t, cnt, 0);
}

static const tile_q_ops Q2_OPS = {q2_scores, q2_axpy};

static void attn_tile_avx2(const attn_tile *t) {
    const quant_kernels *k = &quant_kernels_avx2;
    tile_step_rows(t, attn_scores_t_avx2, attn_max_avx2, k->exp, k->axpy_rows, k->h2f, &Q2_OPS);
}

// ---- AVX-512: register tiles of 4 query rows ----------------------------------------------------
//
// Scores: 4 rows x up to 64 positions (16 accumulators); each key row of the tile (64 floats)
// is loaded once for the 4 query rows. Values: 4 rows x up to 64 columns of acc in registers
// across the tile, each value row loaded once for the 4 rows. F16 tiles (an F16 cache's) are
// read as they are, each vector converted as it is loaded (vcvtph2ps, exact), so no converted
// copy of the tile is written and read again; Q8_0 / Q4_0 tiles likewise, each vector of quants
// widened and multiplied by its scales (exact) as it is loaded. Compiled for AVX-512F only; the callers choose it
// through the dispatch table when the CPU has it.

ISA_TARGET_BEGIN("avx2,fma,avx512f")

#define AT_RB 4 /* query rows per register tile */
#define AT_INLINE inline __attribute__((always_inline))

/* e^x for x <= 0 (as exp_ps in quant_x86.inc: n ln2 + r, degree-7 polynomial); lanes below
 * ATTN_EXP_FLOOR, -inf included, give 0. */
static AT_INLINE __m512 at_exp(__m512 x) {
    __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(ATTN_EXP_FLOOR), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(ATTN_EXP_FLOOR));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440054690583e-4f), r);
    __m512 p = _mm512_set1_ps(1.f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, p, _mm512_castsi512_ps(e));
}

/* lanes of position vector v (positions 16v..16v+15) below cnt */
static inline __mmask16 at_mask(int cnt, int v) {
    int n = cnt - 16 * v;
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* What the tiles hold: a constant in each specialisation of the step */
#define AT_F32 0
#define AT_F16 1
#define AT_Q8 2
#define AT_Q4 3

/* Keys of dimension i at positions 16v..16v+15 of t's key tile, as F32; d: their scales (the
 * quantized kinds), so the key is d q exactly as kv_quant_k_to_f32 makes it. */
static AT_INLINE __m512 at_key(const attn_tile *t, int i, int v, __m512 d, const int kind) {
    size_t e = (size_t)i * KV_BLOCK + 16 * (size_t)v;
    if (kind == AT_F32) return _mm512_loadu_ps(t->KT + e);
    if (kind == AT_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(t->KT16 + e)));
    if (kind == AT_Q8)
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(t->KQ + e)))), d);
    /* Q4: the low (v even) or high (v odd) nibbles of 16 bytes */
    __m128i b = _mm_loadu_si128((const __m128i *)(t->KQ + (size_t)i * (KV_BLOCK / 2) + (size_t)(v / 2) * 16));
    if (v % 2) b = _mm_srli_epi16(b, 4);
    __m512i n = _mm512_cvtepu8_epi32(_mm_and_si128(b, _mm_set1_epi8(0x0F)));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(n, _mm512_set1_epi32(8))), d);
}

/* Values of position j at columns c..c+15 of t's value tile, as F32 (the quantized kinds: d q,
 * as kv_quant_v_to_f32 makes them) */
static AT_INLINE __m512 at_value(const attn_tile *t, int j, int c, const int kind) {
    if (kind == AT_F32) return _mm512_loadu_ps(t->V + (size_t)j * t->v_stride + c);
    if (kind == AT_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(t->V16 + (size_t)j * t->v_stride + c)));
    size_t bb = kind == AT_Q8 ? 34 : 18;
    const uint8_t *blk = t->VQ + ((size_t)j * (size_t)(t->hd / KV_QUANT_BLOCK) + (size_t)(c / KV_QUANT_BLOCK)) * bb;
    uint16_t h;
    memcpy(&h, blk, 2);
    __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
    if (kind == AT_Q8) {
        __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2 + c % KV_QUANT_BLOCK));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
    }
    __m128i b = _mm_loadu_si128((const __m128i *)(blk + 2));
    if (c % KV_QUANT_BLOCK) b = _mm_srli_epi16(b, 4);
    __m512i n = _mm512_cvtepu8_epi32(_mm_and_si128(b, _mm_set1_epi8(0x0F)));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(n, _mm512_set1_epi32(8))), d);
}

/* s[rr][v] = q_rr . (positions 16v.. of t's key tile), rows q + rr * hd; quantized keys one block
 * of 32 dimensions at a time, its 16-position scale vectors loaded once */
static AT_INLINE void at_scores(__m512 s[AT_RB][4], const float *q, const attn_tile *t, const int nr, const int nv,
                                const int kind) {
    int hd = t->hd, step = kind >= AT_Q8 ? KV_QUANT_BLOCK : hd;
    const uint16_t *ds = kind >= AT_Q8 ? kv_quant_k_scales(t->KQ, kind == AT_Q8 ? KV_Q8_0 : KV_Q4_0, hd) : NULL;
    for (int rr = 0; rr < nr; rr++)
        for (int v = 0; v < nv; v++) s[rr][v] = _mm512_setzero_ps();
    for (int i0 = 0; i0 < hd; i0 += step) {
        __m512 d[4];
        for (int v = 0; v < nv; v++)
            d[v] = kind >= AT_Q8 ? _mm512_cvtph_ps(_mm256_loadu_si256(
                                       (const __m256i *)(ds + (size_t)(i0 / KV_QUANT_BLOCK) * KV_BLOCK + 16 * v)))
                                 : _mm512_setzero_ps();
        for (int i = i0; i < i0 + step; i++) {
            __m512 k[4];
            for (int v = 0; v < nv; v++) k[v] = at_key(t, i, v, d[v], kind);
            for (int rr = 0; rr < nr; rr++) {
                __m512 qb = _mm512_set1_ps(q[(size_t)rr * hd + i]);
                for (int v = 0; v < nv; v++) s[rr][v] = _mm512_fmadd_ps(qb, k[v], s[rr][v]);
            }
        }
    }
}

/* Scores, mask, softmax bookkeeping of rows r..r+nr-1: weights into t->p, rescale factors into c */
static AT_INLINE void at_softmax(const attn_tile *t, int r, float c[AT_RB], const int nr, const int nv,
                                 const int kind) {
    __m512 s[AT_RB][4];
    at_scores(s, t->q + (size_t)r * t->hd, t, nr, nv, kind);
    const __m512 sc = _mm512_set1_ps(t->scale), ninf = _mm512_set1_ps(-INFINITY);
    for (int rr = 0; rr < nr; rr++) {
        int cnt = t->cnt0 + (r + rr) / t->group < t->cnt ? t->cnt0 + (r + rr) / t->group : t->cnt;
        int lo = t->window ? t->qrel0 + (r + rr) / t->group - t->window + 1 : 0; /* first in view */
        __m512 mx = ninf;
        for (int v = 0; v < nv; v++) {
            __mmask16 keep = at_mask(cnt, v) & (__mmask16)~at_mask(lo, v);
            s[rr][v] = _mm512_mask_mul_ps(ninf, keep, s[rr][v], sc);
            mx = _mm512_max_ps(mx, s[rr][v]);
        }
        float m_old = t->run_max[r + rr], m = _mm512_reduce_max_ps(mx);
        m = m > m_old ? m : m_old;
        c[rr] = m > m_old ? expf(m_old - m) : 1.f;
        t->run_max[r + rr] = m;
        __m512 mv = _mm512_set1_ps(m), sum = _mm512_setzero_ps();
        float *p = t->p + (size_t)(r + rr) * KV_BLOCK;
        for (int v = 0; v < nv; v++) {
            __m512 e = at_exp(_mm512_sub_ps(s[rr][v], mv));
            _mm512_storeu_ps(p + 16 * v, e);
            sum = _mm512_add_ps(sum, e);
        }
        t->run_sum[r + rr] = t->run_sum[r + rr] * c[rr] + _mm512_reduce_add_ps(sum);
    }
}

/* acc rows r..r+nr-1, columns c0..c0+16nw-1: acc = acc * c + sum_j p_j V_j over j < cnt */
static AT_INLINE void at_values(const attn_tile *t, int r, int c0, int cnt, const float c[AT_RB], const int nr,
                                const int nw, const int kind) {
    __m512 a[AT_RB][4];
    for (int rr = 0; rr < nr; rr++)
        for (int w = 0; w < nw; w++)
            a[rr][w] = _mm512_mul_ps(_mm512_loadu_ps(t->acc + (size_t)(r + rr) * t->hd + c0 + 16 * w), _mm512_set1_ps(c[rr]));
    const float *p = t->p + (size_t)r * KV_BLOCK;
    for (int j = 0; j < cnt; j++) {
        __m512 v[4];
        for (int w = 0; w < nw; w++) v[w] = at_value(t, j, c0 + 16 * w, kind);
        for (int rr = 0; rr < nr; rr++) {
            __m512 pb = _mm512_set1_ps(p[(size_t)rr * KV_BLOCK + j]);
            for (int w = 0; w < nw; w++) a[rr][w] = _mm512_fmadd_ps(pb, v[w], a[rr][w]);
        }
    }
    for (int rr = 0; rr < nr; rr++)
        for (int w = 0; w < nw; w++) _mm512_storeu_ps(t->acc + (size_t)(r + rr) * t->hd + c0 + 16 * w, a[rr][w]);
}

/* One register tile of nr rows: nr and the vector counts become constants per case. */
#define AT_CASES4(CALL, X) \
    switch (X) {           \
    case 1: CALL(1); break; \
    case 2: CALL(2); break; \
    case 3: CALL(3); break; \
    default: CALL(4); break; \
    }

static AT_INLINE void at_rows(const attn_tile *t, int r, const int nr, const int kind) {
    float c[AT_RB];
    int nv = (t->cnt + 15) / 16;
#define AT_SM(NV) at_softmax(t, r, c, nr, NV, kind)
    AT_CASES4(AT_SM, nv)
#undef AT_SM
    /* the last row of the tile sees the most positions; the others' weights past theirs are 0 */
    int last = t->cnt0 + (r + nr - 1) / t->group, cnt = last < t->cnt ? last : t->cnt;
    for (int c0 = 0; c0 < t->hd; c0 += 64) {
        int nw = (t->hd - c0) / 16;
#define AT_VAL(NW) at_values(t, r, c0, cnt, c, nr, NW, kind)
        AT_CASES4(AT_VAL, nw)
#undef AT_VAL
    }
}

/* The tile step over tiles of one kind (a constant: one specialisation each) */
static AT_INLINE void at_tile(const attn_tile *t, const int kind) {
    int r = 0;
    for (; r + AT_RB <= t->R; r += AT_RB) at_rows(t, r, AT_RB, kind);
    switch (t->R - r) {
    case 1: at_rows(t, r, 1, kind); break;
    case 2: at_rows(t, r, 2, kind); break;
    case 3: at_rows(t, r, 3, kind); break;
    default: break;
    }
}

static void attn_tile_avx512(const attn_tile *t) {
    if (t->hd % 16 != 0 || t->softcap > 0) { /* the register tiles take whole vectors of head_dim, no tanh */
        attn_tile_avx2(t);
        return;
    }
    if (t->KQ)
        t->kvq == KV_Q8_0 ? at_tile(t, AT_Q8) : at_tile(t, AT_Q4);
    else if (t->KT16)
        at_tile(t, AT_F16);
    else
        at_tile(t, AT_F32);
}

ISA_TARGET_END
#endif

// ---- dispatch ------------------------------------------------------------------------------------
//
// The kernels' instruction set (quant_isa_active) picks these loops too, so ATTND_NO_SIMD=1 and
// quant_isa_force choose for both. They are not in the kernels' table: they know the cache's
// layout, which engine/kernels/ does not, and the kernels call nothing above them.

typedef struct attn_set {
    attn_scores_t_fn scores_t;
    attn_max_fn max;
    void (*tile)(const attn_tile *t);
} attn_set;

/* Per instruction set; the AMX sets use AVX-512's loops, the emulated one the portable loops. */
static const attn_set ATTN_SETS[QUANT_ISA_COUNT] = {
    [QUANT_ISA_PORTABLE] = {attn_scores_t_portable, attn_max_portable, attn_tile_portable},
    [QUANT_ISA_AMX_EMU] = {attn_scores_t_portable, attn_max_portable, attn_tile_portable},
#if defined(__x86_64__) && defined(__GNUC__)
    [QUANT_ISA_AVX2] = {attn_scores_t_avx2, attn_max_avx2, attn_tile_avx2},
    [QUANT_ISA_AVX512] = {attn_scores_t_avx2, attn_max_avx2, attn_tile_avx512},
    [QUANT_ISA_AMX] = {attn_scores_t_avx2, attn_max_avx2, attn_tile_avx512},
#endif
};

static const attn_set *attn_active(void) {
    const attn_set *set = &ATTN_SETS[quant_isa_active()];
    return set->tile ? set : &ATTN_SETS[QUANT_ISA_PORTABLE];
}

void attn_scores_t(float *s, const float *q, const float *KT, int cnt, int hd, float scale) {
    attn_active()->scores_t(s, q, KT, cnt, hd, scale);
}

float attn_max(const float *s, int cnt) { return attn_active()->max(s, cnt); }

void attn_tile_step(const attn_tile *t) { attn_active()->tile(t); }
