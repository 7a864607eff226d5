/*
 * attn_ops.c — attention inner loops (see attn_ops.h). The build targets baseline x86-64 (or any
 * other CPU), so the vector versions are compiled with per-function target attributes and picked
 * at run time; the portable versions are the reference and the fallback.
 */
#include "attn_ops.h"

#include <pthread.h>
#include <stdlib.h>

#include "kv.h"

// ---- portable -------------------------------------------------------------------------------

static void f16_row_c(float *dst, const uint16_t *src, int n) {
    for (int i = 0; i < n; i++) dst[i] = kv_f16_to_f32(src[i]);
}

static void scores_c(float *s, const float *q, const float *K, size_t ks, int cnt, int hd, float scale) {
    for (int j = 0; j < cnt; j++) {
        const float *k = K + (size_t)j * ks;
        float d = 0;
        for (int i = 0; i < hd; i++) d += q[i] * k[i];
        s[j] = d * scale;
    }
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

__attribute__((target("avx2,fma"))) static void accum_avx2(float *acc, const float *p, const float *V, size_t vs,
                                                           int cnt, int hd) {
    if (hd % 8 != 0) {
        accum_c(acc, p, V, vs, cnt, hd);
        return;
    }
    for (int i = 0; i < hd; i += 8) {
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
static const char *ops_name = "portable";
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static void select_ops(void) {
    /* ATTND_NO_SIMD=1 forces the portable loops, as it does for the matrix kernels. */
    const char *force = getenv("ATTND_NO_SIMD");
    if (force && *force && *force != '0') return;
#ifdef HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        attn_f16_row = f16_row_avx2;
        attn_scores = scores_avx2;
        attn_accum = accum_avx2;
        ops_name = "avx2";
    }
#endif
}

void attn_ops_init(void) { pthread_once(&ops_once, select_ops); }
const char *attn_ops_name(void) {
    attn_ops_init();
    return ops_name;
}
