/*
 * attn_ops.h — (engine-private) the attention loops specific to attnd's cache layout: scores of a
 * query against a key tile stored transposed (hd, KV_BLOCK), and the max and exp-sum of a tile's
 * scores for the online softmax. Generic vector work (F16 rows, value accumulation, exp) uses the
 * kernels' primitives in quant.h. A portable version always exists; an AVX2/FMA version runs
 * when the kernels' instruction set (quant_isa_active) is AVX2 or better, and the grouped tile
 * step (attn_tile_step) has an AVX-512 version too: all follow the kernels' instruction set, so
 * ATTND_NO_SIMD=1 and quant_isa_force choose for all of them.
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

/*
 * One step of the online softmax for R query rows against one cache tile of one kv head: the
 * rows are the query heads that share the kv head (grouped-query attention), `group` per query,
 * for consecutive queries of one sequence, so the tile is read once for all of them. Row r sees
 * the first cnt_r = min(cnt, cnt0 + r / group) positions of the tile (the causal mask of a
 * prefill; every row sees all cnt in decode). For each row: scores s = q K^T * scale, then
 *     m' = max(run_max, max s);  acc = acc * e^(run_max - m') + sum_j e^(s_j - m') V_j;
 *     run_sum = run_sum * e^(run_max - m') + sum_j e^(s_j - m');  run_max = m'
 * (With a window, only the positions of row r's window; with softcap, capped scores.)
 * Scores below the running max by more than 87 count as 0 (e^-87 < 2^-125: below float's
 * resolution next to the max's weight of 1).
 */
typedef struct attn_tile {
    float *acc;        /* (R, hd) running weighted sums of values, updated */
    float *run_max;    /* (R) running maxima (-INFINITY before the first tile), updated */
    float *run_sum;    /* (R) running sums of weights, updated */
    float *p;          /* (R, KV_BLOCK) scratch (scores, then weights) */
    const float *q;    /* (R, hd) query rows */
    const float *KT;   /* (hd, KV_BLOCK) keys, transposed (the cache's key tile as F32) */
    const float *V;    /* (cnt, hd) values, row j at V + j * v_stride */
    /* Or, when KT16 is set (then V16 too; KT and V are not read), the tiles as F16 with the same
     * layouts (an F16 cache's, read in place). The AVX-512 step reads them directly; the others
     * first convert them (exactly) into kt_buf and v_buf, so every step gives the same result
     * as with the tiles converted to F32 beforehand. */
    const uint16_t *KT16, *V16;
    /* Or, when KQ is set (then VQ too; KT, V, KT16 and V16 are not read): Q8_0 or Q4_0 tiles (kvq,
     * a kv_type) as kv_quant.h lays them out, head_dim a multiple of 32 and V's rows one tile row
     * apart (v_stride unused). As for F16: the AVX-512 step reads them directly, dequantizing
     * inside its dot products and value sums; the others convert them (exactly) into kt_buf and
     * v_buf first. */
    const uint8_t *KQ, *VQ;
    int kvq;
    float *kt_buf;     /* (hd, KV_BLOCK) scratch for KT16 as F32 */
    float *v_buf;      /* (cnt, v_stride) scratch for V16 as F32 */
    int R, hd, cnt, cnt0, group;
    int v_stride;
    float scale;
    /* Gemma 2's attention soft-capping: > 0 turns each scaled score s into cap * tanh(s / cap)
     * before the softmax; 0 = off. */
    float softcap;
    /* A sliding window: > 0 hides from row r the positions before q_r - window + 1, where
     * q_r = qrel0 + r / group is the row's query position relative to the tile (so row r sees
     * [max(0, q_r - window + 1), cnt_r)); a row that sees none of the tile is left as it was.
     * 0 = no window (qrel0 unused). */
    int window, qrel0;
} attn_tile;

void attn_tile_step(const attn_tile *t);

#endif /* ATTND_ATTN_OPS_H */
