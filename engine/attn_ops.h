/*
 * attn_ops.h — (engine-private) the inner loops of attention over one cache tile: F16 rows to
 * F32, query-key scores, and the probability-weighted sum of values. A portable C version always
 * exists; an AVX2/FMA/F16C version is chosen at run time when the CPU has it (attn_ops_init).
 * Shapes: K and V are (cnt, hd) with a row stride in floats; q, acc are (hd); s, p are (cnt).
 */
#ifndef ATTND_ATTN_OPS_H
#define ATTND_ATTN_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Selects the implementation for this CPU; idempotent and thread-safe. */
void attn_ops_init(void);
/* Name of the selected implementation ("avx2" or "portable"), for logs and benchmarks. */
const char *attn_ops_name(void);

/* dst[0..n) = src[0..n) converted from IEEE half. */
extern void (*attn_f16_row)(float *dst, const uint16_t *src, int n);
/* s[j] = dot(q, K[j]) * scale for j < cnt. */
extern void (*attn_scores)(float *s, const float *q, const float *K, size_t ks, int cnt, int hd, float scale);
/* acc[i] += sum_j p[j] * V[j][i] for i < hd. */
extern void (*attn_accum)(float *acc, const float *p, const float *V, size_t vs, int cnt, int hd);

#endif /* ATTND_ATTN_OPS_H */
