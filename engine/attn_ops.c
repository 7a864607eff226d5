/*
 * attn_ops.c — attention inner loops (see attn_ops.h). The build targets baseline x86-64 (or any
 * other CPU), so the vector versions are compiled with per-function target attributes and picked
 * at run time; the portable versions are the reference and the fallback.
 */
#include "attn_ops.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "kv.h"

// ---- portable -------------------------------------------------------------------------------

static void f16_row_c(float *dst, const uint16_t *src, int n) {
    for (int i = 0; i < n; i++) dst[i] = kv_f16_to_f32(src[i]);
}

static void f16_store_c(uint16_t *dst, const float *src, int n) {
    for (int i = 0; i < n; i++) dst[i] = kv_f32_to_f16(src[i]);
}

static void scores_c(float *s, const float *q, const float *K, size_t ks, int cnt, int hd, float scale) {
    for (int j = 0; j < cnt; j++) {
        const float *k = K + (size_t)j * ks;
        float d = 0;
        for (int i = 0; i < hd; i++) d += q[i] * k[i];
        s[j] = d * scale;
    }
}

static void scores_t_c(float *s, const float *q, const float *KT, int hd, float scale) {
    for (int j = 0; j < KV_BLOCK; j++) s[j] = 0;
    for (int i = 0; i < hd; i++)
        for (int j = 0; j < KV_BLOCK; j++) s[j] += q[i] * KT[(size_t)i * KV_BLOCK + j];
    for (int j = 0; j < KV_BLOCK; j++) s[j] *= scale;
}

static float exp_sum_c(float *s, int cnt, float mx) {
    float sum = 0;
    for (int j = 0; j < cnt; j++) sum += s[j] = expf(s[j] - mx);
    return sum;
}

static void accum_c(float *acc, const float *p, const float *V, size_t vs, int cnt, int hd) {
    for (int j = 0; j < cnt; j++) {
        const float *v = V + (size_t)j * vs;
        for (int i = 0; i < hd; i++) acc[i] += p[j] * v[i];
    }
}

// ---- AVX2 + FMA + F16C ------------------------------------------------------------------------

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1

__attribute__((target("avx2,fma,f16c"))) static void f16_row_avx2(float *dst, const uint16_t *src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = kv_f16_to_f32(src[i]);
}

__attribute__((target("avx2,fma,f16c"))) static void f16_store_avx2(uint16_t *dst, const float *src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = kv_f32_to_f16(src[i]);
}

__attribute__((target("avx2,fma"))) static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static void scores_avx2(float *s, const float *q, const float *K, size_t ks,
                                                            int cnt, int hd, float scale) {
    if (hd % 8 != 0) {
        scores_c(s, q, K, ks, cnt, hd, scale);
        return;
    }
    for (int j = 0; j < cnt; j++) {
        const float *k = K + (size_t)j * ks;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int i = 0;
        for (; i + 16 <= hd; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
        }
        if (i < hd) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
        s[j] = hsum256(_mm256_add_ps(a0, a1)) * scale;
    }
}

__attribute__((target("avx2,fma"))) static void scores_t_avx2(float *s, const float *q, const float *KT, int hd,
                                                              float scale) {
    __m256 a[KV_BLOCK / 8];
    for (int v = 0; v < KV_BLOCK / 8; v++) a[v] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i++) {
        __m256 qi = _mm256_set1_ps(q[i]);
        const float *row = KT + (size_t)i * KV_BLOCK;
        for (int v = 0; v < KV_BLOCK / 8; v++) a[v] = _mm256_fmadd_ps(qi, _mm256_loadu_ps(row + 8 * v), a[v]);
    }
    __m256 sc = _mm256_set1_ps(scale);
    for (int v = 0; v < KV_BLOCK / 8; v++) _mm256_storeu_ps(s + 8 * v, _mm256_mul_ps(a[v], sc));
}

/* exp(x) for x <= 0-ish arguments of a softmax: x = n*ln2 + r with |r| <= ln2/2, exp(r) by its
 * degree-6 Taylor polynomial (relative error ~1e-7), 2^n through the exponent bits. Arguments
 * below -87.3 are clamped (their exp, ~1e-38, is negligible next to the max's 1). */
__attribute__((target("avx2,fma"))) static inline __m256 exp256(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma"))) static float exp_sum_avx2(float *s, int cnt, float mx) {
    __m256 m = _mm256_set1_ps(mx), sum = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= cnt; j += 8) {
        __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
        _mm256_storeu_ps(s + j, p);
        sum = _mm256_add_ps(sum, p);
    }
    float total = hsum256(sum);
    for (; j < cnt; j++) total += s[j] = expf(s[j] - mx);
    return total;
}

__attribute__((target("avx2,fma"))) static void accum_avx2(float *acc, const float *p, const float *V, size_t vs,
                                                           int cnt, int hd) {
    if (hd % 8 != 0) {
        accum_c(acc, p, V, vs, cnt, hd);
        return;
    }
    /* 32 columns at a time in four independent accumulators: one chain of dependent FMAs would
     * wait on the FMA latency at every key. */
    int i = 0;
    for (; i + 32 <= hd; i += 32) {
        __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);
        __m256 a2 = _mm256_loadu_ps(acc + i + 16), a3 = _mm256_loadu_ps(acc + i + 24);
        for (int j = 0; j < cnt; j++) {
            const float *v = V + (size_t)j * vs + i;
            __m256 pj = _mm256_set1_ps(p[j]);
            a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v), a0);
            a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 8), a1);
            a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 16), a2);
            a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 24), a3);
        }
        _mm256_storeu_ps(acc + i, a0);
        _mm256_storeu_ps(acc + i + 8, a1);
        _mm256_storeu_ps(acc + i + 16, a2);
        _mm256_storeu_ps(acc + i + 24, a3);
    }
    for (; i < hd; i += 8) {
        __m256 a = _mm256_loadu_ps(acc + i);
        for (int j = 0; j < cnt; j++)
            a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(V + (size_t)j * vs + i), a);
        _mm256_storeu_ps(acc + i, a);
    }
}
#endif

// ---- selection -----------------------------------------------------------------------------------

void (*attn_f16_row)(float *, const uint16_t *, int) = f16_row_c;
void (*attn_scores)(float *, const float *, const float *, size_t, int, int, float) = scores_c;
void (*attn_accum)(float *, const float *, const float *, size_t, int, int) = accum_c;
void (*attn_f16_store)(uint16_t *, const float *, int) = f16_store_c;
void (*attn_scores_t)(float *, const float *, const float *, int, float) = scores_t_c;
float (*attn_exp_sum)(float *, int, float) = exp_sum_c;
static const char *ops_name = "portable";
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static void set_portable(void) {
    attn_f16_row = f16_row_c;
    attn_f16_store = f16_store_c;
    attn_scores = scores_c;
    attn_scores_t = scores_t_c;
    attn_exp_sum = exp_sum_c;
    attn_accum = accum_c;
    ops_name = "portable";
}

static bool set_simd(void) {
#ifdef HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        attn_f16_row = f16_row_avx2;
        attn_f16_store = f16_store_avx2;
        attn_scores = scores_avx2;
        attn_scores_t = scores_t_avx2;
        attn_exp_sum = exp_sum_avx2;
        attn_accum = accum_avx2;
        ops_name = "avx2";
        return true;
    }
#endif
    return false;
}

static void select_ops(void) {
    /* ATTND_NO_SIMD=1 forces the portable loops, as it does for the matrix kernels. */
    const char *force = getenv("ATTND_NO_SIMD");
    if (force && *force && *force != '0') return;
    set_simd();
}

bool attn_ops_select(bool simd) {
    attn_ops_init();
    set_portable();
    return simd && set_simd();
}

void attn_ops_init(void) { pthread_once(&ops_once, select_ops); }
const char *attn_ops_name(void) {
    attn_ops_init();
    return ops_name;
}
