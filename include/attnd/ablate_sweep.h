/*
 * ablate_sweep.h — head importance in one call: for every (layer, head) of the model, how much
 * switching that head alone off moves one next-token prediction (POST /v1/attention with
 * "measure": "ablation").
 *
 * The prompt tokens[0..n) is evaluated once, plainly: positions [0, from) into one sequence,
 * which every ablated run forks (sharing its KV blocks, kv_seq_fork), then [from, n). Each
 * ablated run evaluates [from, n) with its one head ablated (engine_seq_ablate), many runs per
 * engine_eval batch. At position n - 1 the plain and the ablated next-token distributions P and
 * Q are compared: the change of the target token's log-probability, log Q(target) - log
 * P(target), and KL(P || Q) = sum_v P(v) (log P(v) - log Q(v)), in double.
 *
 * from = 0 ablates the head at every position (the head removed from the model for this
 * prompt); from = n - 1 only at the measured position (the head's effect through that
 * position's own residual stream: what earlier positions' keys and values carry is untouched),
 * and costs one token per head instead of n. A mean ablation's mean is the head's own causal
 * mean output over positions 0..p, the plain prefix included (as engine_seq_ablate on the whole
 * sequence would give).
 *
 *     ablate_sweep_params p = {.tokens = ids, .n_tokens = n, .target = id, .from = n - 1};
 *     ablate_sweep_result r;
 *     ablate_sweep_run(e, pool, &p, &r, &err);
 *     // r.dlogprob[l * n_head + h], r.kl[...], r.wall_ms; ablate_sweep_result_free(&r)
 *
 * Runs on the calling thread, which must own e and be the only user of pool's sequences it
 * creates; allocates up front (the result, one logits buffer, one wave of forks).
 *
 * In steps (a server interleaving the sweep with its decode steps): ablate_sweep_create, then
 * ablate_sweep_next with the batch size of each step until *done, ablate_sweep_take_result,
 * ablate_sweep_destroy. Between steps the sweep holds its prefix and one wave's forks in the pool
 * (at most ablate_sweep_kv_bytes); the caller may evaluate other sequences meanwhile.
 */
#ifndef ATTND_ABLATE_SWEEP_H
#define ATTND_ABLATE_SWEEP_H

#include <stdint.h>

#include "attnd/common.h"
#include "attnd/engine.h"
#include "attnd/kv.h"

typedef struct ablate_sweep_params {
    const int32_t *tokens; /* (n_tokens) borrowed */
    int n_tokens;          /* >= 1; the prediction after position n_tokens - 1 is measured */
    int32_t target;        /* the token whose log-probability is measured; -1 = the plain
                              run's most probable one */
    int from;              /* 0..n_tokens-1: ablated from this position on */
    engine_ablate_mode mode;
    float scale;           /* as engine_ablation_head: 0 = removed */
    int max_seqs;          /* most ablated runs per batch; 0 = as many as engine_max_batch holds */
} ablate_sweep_params;

typedef struct ablate_sweep_result {
    int n_layer, n_head;
    int32_t target;        /* the measured token (params' target, or the plain argmax) */
    double base_logprob;   /* log P(target) */
    int32_t base_top;      /* argmax of P */
    double *dlogprob;      /* (n_layer, n_head) log Q(target) - log P(target); owned */
    double *kl;            /* (n_layer, n_head) KL(P || Q) in nats; owned */
    int32_t *top;          /* (n_layer, n_head) argmax of Q; owned */
    // ---- cost ----
    int n_sequences;       /* ablated runs (n_layer * n_head) plus the plain one */
    int batch_seqs;        /* ablated runs per engine_eval batch */
    int n_batches;         /* engine_eval calls, the plain ones included */
    long n_evaluated;      /* token positions evaluated in all */
    double wall_ms;        /* time in the sweep's own batches (not the waits between steps) */
} ablate_sweep_result;

/* Checks p against e's model (tokens and target in the vocabulary, 1 <= n_tokens <= n_ctx,
 * 0 <= from < n_tokens, a finite scale, a known mode): ATTND_ERR_INVALID naming the field
 * ("prompt", "target", "from", "scale", "mode"); ATTND_ERR_UNSUPPORTED on a hybrid model (Gated
 * DeltaNet layers: head ablation is refused there, engine_ablation_check). */
attnd_status ablate_sweep_check(const model_info *mi, const ablate_sweep_params *p, attnd_err *err);

/* Runs the sweep (see above). Errors: those of ablate_sweep_check, ATTND_ERR_NOMEM (memory or
 * the pool's KV budget: nothing is left allocated in the pool). *r is zeroed on error. */
attnd_status ablate_sweep_run(engine *e, kv_pool *pool, const ablate_sweep_params *p, ablate_sweep_result *r,
                              attnd_err *err);
void ablate_sweep_result_free(ablate_sweep_result *r); /* accepts NULL */

// ---- the sweep in steps ----
typedef struct ablate_sweep ablate_sweep;
/* A sweep of p over e and pool, nothing evaluated yet: checks p (ablate_sweep_check), allocates
 * its buffers and its prefix sequence. Borrows e, pool and p->tokens until destroyed. Errors:
 * those of ablate_sweep_check, ATTND_ERR_NOMEM. */
attnd_status ablate_sweep_create(ablate_sweep **out, engine *e, kv_pool *pool, const ablate_sweep_params *p,
                                 attnd_err *err);
/* Evaluates the sweep's next batch, of at most max_entries positions (1..engine_max_batch; the
 * smaller, the more batches). *done once every head is measured. Errors: ATTND_ERR_NOMEM (the
 * pool's budget; the sweep cannot go on: destroy it). */
attnd_status ablate_sweep_next(ablate_sweep *w, int max_entries, bool *done, attnd_err *err);
/* Token positions the sweep evaluated so far (its result's n_evaluated). */
long ablate_sweep_evaluated(const ablate_sweep *w);
/* A done sweep's result, moved into *r (free it with ablate_sweep_result_free). */
void ablate_sweep_take_result(ablate_sweep *w, ablate_sweep_result *r);
/* Destroys the sweep and every sequence it holds in the pool. Accepts NULL. Same thread. */
void ablate_sweep_destroy(ablate_sweep *w);
/* The most KV bytes a sweep of p on e holds in pool at once: its prefix and one wave of forks. */
size_t ablate_sweep_kv_bytes(const engine *e, const kv_pool *pool, const ablate_sweep_params *p);

#endif
