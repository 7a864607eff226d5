/*
 * mla.h — (engine-private) multi-head latent attention (DeepSeek-V2/V3, GLM-4.7-Flash: GGUF
 * architecture `deepseek2`), the token mixer of a layer whose arch row says `mla`.
 *
 * Per token, one down-projection gives a latent c (kv_lora_rank values, RMS-normed with
 * attn_kv_a_norm) and a key part k_pe (qk_rope_head_dim values, rotated, shared by every head).
 * The cache holds only [c | k_pe] per token and layer (mla_latent values), not per-head keys and
 * values. Each head's query [q_nope | q_pe] attends in the latent space ("absorbed" form):
 *     q_lat = [W_UK,h^T q_nope | rope(q_pe)]       (kv_lora + rope)
 *     score_j = scale * q_lat . [c_j | k_pe_j]
 *     o_h = W_UV,h (sum_j softmax_j c_j)          (v_head_dim)
 * which is the same sum as expanding k_j = [W_UK,h c_j | k_pe_j] and v_j = W_UV,h c_j per head.
 * Prefill and decode both take this form (docs/engine.md says why).
 */
#ifndef ATTND_MLA_H
#define ATTND_MLA_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

struct kv_seq;

/* The latent attention's sizes (all 0 in a model without it). */
typedef struct mla_dims {
    int n_head;
    int q_lora;      /* attention.q_lora_rank; 0: a plain attn_q (DeepSeek-V2-Lite) */
    int kv_lora;     /* attention.kv_lora_rank: the latent c */
    int nope, rope;  /* a head's query/key parts without and with RoPE (key_length_mla = nope + rope) */
    int v_head;      /* value_length_mla: a head's output */
} mla_dims;

static inline int mla_latent(const mla_dims *d) { return d->kv_lora + d->rope; }
static inline int mla_qk(const mla_dims *d) { return d->nope + d->rope; }

/* A weight matrix per head, h's at data + h * stride bytes (rows, cols each). */
typedef struct mla_heads {
    const void *data;
    uint32_t type;
    int64_t rows, cols;
    size_t stride;
} mla_heads;

/* One block of entries of one sequence at consecutive positions (as engine.c splits a batch). */
typedef struct mla_qblock {
    int start, n;
} mla_qblock;

/* The per-engine scratch of the latent attention (mla_scratch_create). */
typedef struct mla_scratch mla_scratch;

/* Scratch for up to max_batch entries and n_workers threads, with mm_bytes for the per-head
 * matmuls (the most quant_scratch_bytes of any layer's W_UK, W_UV for max_batch rows); NULL when
 * out of memory. */
mla_scratch *mla_scratch_create(const mla_dims *d, int max_batch, int n_workers, size_t mm_bytes);
void mla_scratch_destroy(mla_scratch *s); /* accepts NULL */

/* One layer's attention over a batch, all borrowed for the call. */
typedef struct mla_job {
    const mla_dims *d;
    mla_scratch *s;
    const float *q;          /* (n, n_head, nope + rope) queries before RoPE */
    const float *kva;        /* (n, kv_lora + rope) attn_kv_a_mqa's output */
    const float *kv_norm;    /* (kv_lora) attn_kv_a_norm */
    float eps;
    const float *rope_cs;    /* (n, rope / 2, 2) each entry's cos, sin (row stride rope_cs_stride floats) */
    int rope_cs_stride;
    mla_heads k_b, v_b;      /* W_UK,h (kv_lora, nope), W_UV,h (v_head, kv_lora) */
    struct kv_seq *const *seq; /* (n) each entry's sequence */
    const int *pos;          /* (n) each entry's position */
    int n, layer;
    const mla_qblock *qb;    /* (n_qb) */
    int n_qb;
    float scale;             /* the softmax's scale: mscale^2 / sqrt(nope + rope) */
    int n_threads;
    float *out;              /* (n, n_head, v_head): the heads' outputs before attn_output */
} mla_job;

/* Stores each entry's [rmsnorm(c) | rope(k_pe)] in its sequence's cache at its position, then
 * attends (causally, each entry over positions 0..pos of its own sequence). */
void mla_attend(const mla_job *j);

/* Attention weights of entry t's head h over positions 0..pos (after mla_attend): w (pos + 1). */
void mla_weights(const mla_job *j, int t, int h, float *w);

#endif /* ATTND_MLA_H */
