/*
 * mla_kernels.h — (engine-private) the float32 tile kernels of the latent attention (mla.c).
 *
 * Every head of a latent layer reads the same cache rows [c | k_pe] (L values each), so a block
 * of m query rows (tokens x heads) against one tile of cnt <= KV_BLOCK cached rows is two small
 * matrix products around an online softmax:
 *     s (m, cnt)  = Q (m, L) . rows (cnt, L)^T                       (mla_kernels.scores)
 *     p           = e^(scale s - m'), masked causally; run_max, run_sum, corr   (.softmax)
 *     acc (m, C) = acc * corr + p (m, cnt) . rows (cnt, C)             (.values: C = kv_lora)
 * Each kernel is register-blocked over several query rows and cached rows, so a cached row is
 * loaded once for many queries.
 *
 * Order of operations: a score, a weight and an accumulated value depend only on their own
 * query row and cached row, never on m, on the row's place in the block nor on which rows the
 * tile holds beyond the row's causal limit (rows beyond it get weight exactly 0, which adds
 * exactly nothing). So a token attended alone (decode) and the same token inside a prompt
 * (prefill) get the same bits from the same instruction set. The instruction sets differ from
 * each other in the last bits (the order of the sums; the vector e^x is within 2 ulp).
 *
 * A portable version always exists; AVX2+FMA and AVX-512F versions follow the matmul kernels'
 * instruction set (quant_isa_active), so ATTND_NO_SIMD=1 and quant_isa_force choose for these
 * too. Thread-safe: pure functions.
 */
#ifndef ATTND_MLA_KERNELS_H
#define ATTND_MLA_KERNELS_H

#include "quant.h"

typedef struct mla_kernels {
    /* s (m, KV_BLOCK): s[i * KV_BLOCK + j] = q[i] . rows[j * L ..] (L values) for j < cnt; the
     * rest of each row of s is not written. */
    void (*scores)(float *s, const float *const *q, int m, const float *rows, int cnt, int L);
    /* Row i of p (m, KV_BLOCK) holds scores s; positions j < lim[i] are in view. In place:
     * p[i][j] = e^(scale s_ij - m_i) in view, 0 beyond (all KV_BLOCK of the row), with
     * m_i = max(run_max[i], scale s_ij in view); corr[i] = e^(run_max[i] - m_i) (1 when equal);
     * run_sum[i] = run_sum[i] * corr[i] + sum_j p_ij; run_max[i] = m_i. */
    void (*softmax)(float *p, int m, const int *lim, float scale, float *run_max, float *run_sum, float *corr);
    /* acc (m, C) = acc * corr[i] + sum_{j < cnt} p[i][j] rows[j * L + c] for c < C (C <= L). */
    void (*values)(float *acc, const float *p, const float *corr, int m, const float *rows, int cnt, int L, int C);
} mla_kernels;

/* The kernels of instruction set isa (the portable ones where it has none of its own), and
 * those of the matmul kernels' current set. Static tables: never NULL, never freed. */
const mla_kernels *mla_kernels_for(quant_isa isa);
const mla_kernels *mla_kernels_active(void);

#endif /* ATTND_MLA_KERNELS_H */
