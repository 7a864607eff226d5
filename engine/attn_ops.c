/*
 * attn_ops.c — attention loops specific to the cache layout (see attn_ops.h). The build targets
 * baseline x86-64 (or any other CPU), so the vector versions are compiled with per-function
 * target attributes; they sit in the kernels' one dispatch table (quant_impl.h), which picks
 * them with the matmul kernels' instruction set. The portable versions are the reference and
 * the fallback.
 */
#include "attn_ops.h"

#include "kv_layout.h"
#include "quant.h"
#include "quant_impl.h"

// ---- portable -------------------------------------------------------------------------------

void attn_scores_t_portable(float *s, const float *q, const float *KT, int cnt, int hd, float scale) {
    for (int j = 0; j < cnt; j++) s[j] = 0;
    for (int i = 0; i < hd; i++)
        for (int j = 0; j < cnt; j++) s[j] += q[i] * KT[(size_t)i * KV_BLOCK + j];
    for (int j = 0; j < cnt; j++) s[j] *= scale;
}

float attn_max_portable(const float *s, int cnt) {
    float m = s[0];
    for (int j = 1; j < cnt; j++) m = s[j] > m ? s[j] : m;
    return m;
}

// ---- AVX2 + FMA ----------------------------------------------------------------------------

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) void attn_scores_t_avx2(float *s, const float *q, const float *KT, int cnt, int hd,
                                                            float scale) {
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

__attribute__((target("avx2,fma"))) float attn_max_avx2(const float *s, int cnt) {
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

// ---- dispatch ------------------------------------------------------------------------------------

void attn_scores_t(float *s, const float *q, const float *KT, int cnt, int hd, float scale) {
    quant_kernels_active()->attn_scores_t(s, q, KT, cnt, hd, scale);
}

float attn_max(const float *s, int cnt) { return quant_kernels_active()->attn_max(s, cnt); }
