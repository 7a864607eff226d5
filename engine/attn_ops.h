/*
 * attn_ops.h — (engine-private) the inner loops of attention over one cache tile: F16 rows to
 * F32, query-key scores, and the probability-weighted sum of values. A portable C version always
 * exists; an AVX2/FMA/F16C version is chosen at run time when the CPU has it (attn_ops_init).
 * Shapes: K and V are (cnt, hd) with a row stride in floats; q, acc are (hd); s, p are (cnt).
 */
#ifndef ATTND_ATTN_OPS_H
#define ATTND_ATTN_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Selects the implementation for this CPU; idempotent and thread-safe. */
void attn_ops_init(void);
/* Switches to the vector version (when the CPU has it) or the portable one; returns whether the
 * vector version is now active. For tests and benchmarks that compare the two; not thread-safe
 * against running evaluations. */
bool attn_ops_select(bool simd);
/* Name of the selected implementation ("avx2" or "portable"), for logs and benchmarks. */
const char *attn_ops_name(void);

/* dst[0..n) = src[0..n) converted from IEEE half. */
extern void (*attn_f16_row)(float *dst, const uint16_t *src, int n);
/* dst[0..n) = src[0..n) rounded to IEEE half (nearest even), for storing into the cache. */
extern void (*attn_f16_store)(uint16_t *dst, const float *src, int n);
/* s[j] = dot(q, K[j]) * scale for j < cnt. */
extern void (*attn_scores)(float *s, const float *q, const float *K, size_t ks, int cnt, int hd, float scale);
/* s[j] = dot(q, column j of KT) * scale for all j < KV_BLOCK; KT is (hd, KV_BLOCK), i.e. a tile
 * of keys transposed so that consecutive keys are consecutive floats (vectorises over keys). */
extern void (*attn_scores_t)(float *s, const float *q, const float *KT, int hd, float scale);
/* s[j] = exp(s[j] - mx) for j < cnt; returns their sum. */
extern float (*attn_exp_sum)(float *s, int cnt, float mx);
/* acc[i] += sum_j p[j] * V[j][i] for i < hd. */
extern void (*attn_accum)(float *acc, const float *p, const float *V, size_t vs, int cnt, int hd);

#endif /* ATTND_ATTN_OPS_H */
