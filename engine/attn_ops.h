/*
 * attn_ops.h — (engine-private) the attention loops specific to attnd's cache layout: scores of a
 * query against a key tile stored transposed (hd, KV_BLOCK), and the max and exp-sum of a tile's
 * scores for the online softmax. Generic vector work (F16 rows, value accumulation, exp) uses the
 * kernels' primitives in quant.h. A portable version always exists; an AVX2/FMA version runs
 * when the kernels' instruction set (quant_isa_active) is AVX2 or better: both come from the
 * kernels' one dispatch table, so ATTND_NO_SIMD=1 and quant_isa_force choose for both.
 * Thread-safe: pure functions.
 */
#ifndef ATTND_ATTN_OPS_H
#define ATTND_ATTN_OPS_H

#include <stddef.h>
#include <stdint.h>

/* s[j] = dot(q, column j of KT) * scale for j < cnt (cnt <= KV_BLOCK; up to the next multiple
 * of 8 may be written); KT is (hd, KV_BLOCK): a tile of keys stored transposed, as the cache
 * holds them, so consecutive keys are consecutive floats and the loop vectorises over keys. */
void attn_scores_t(float *s, const float *q, const float *KT, int cnt, int hd, float scale);
/* max of s[0..cnt), cnt >= 1. */
float attn_max(const float *s, int cnt);

/* s[j] = exp(s[j] - mx) for j < cnt (cnt <= KV_BLOCK); returns their sum. */
float attn_exp_sum(float *s, int cnt, float mx);

#endif /* ATTND_ATTN_OPS_H */
