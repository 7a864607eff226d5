/*
 * moe.h — (engine-private) the experts of a Mixture-of-Experts feed-forward layer, for engine.c.
 *
 * Once the router has chosen each entry's K experts (the slots entry * K + k of sel), the slots
 * are sorted by expert (moe_plan): one group per expert in use, so each expert's rows are read
 * once per step whatever the number of entries routed to it (a prefill, batched decode). Then two
 * passes of the pool, each one region split by (group, row block) whatever the number of experts:
 *   moe_gate_up:  g = act(x W_gate,x^T + b) * (x W_up,x^T + b) of each group's gathered inputs;
 *   moe_down:     o[slot] = g W_down,x^T + b, in slot order.
 * Results are bit-identical to one quant_matmul_packed per expert (the row kernels compute each row
 * on its own, and a group's entries go through them together), for any number of threads. The
 * experts are read through their packed copies where the model made them (model.c: an expert's
 * rows a multiple of 16; a block's rows are a slice of the copy, quant_mm.pk_row0), so a token's
 * expert outputs are the same bits whatever the number of entries its experts serve (decode, a
 * prefill, a verify batch); experts left mapped switch kernels at 4 entries (quant.h).
 */
#ifndef ATTND_MOE_H
#define ATTND_MOE_H

#include <stdbool.h>
#include <stddef.h>

#include "model_internal.h"

/* One expert in use: its sorted slots [start, start + cnt). */
typedef struct moe_group {
    int expert, start, cnt;
} moe_group;

/* A step's experts: n_groups groups in increasing expert id; within a group, slots increase. */
typedef struct moe_plan {
    moe_group *groups; /* (n_expert) */
    int *slot;         /* (n_slots) the slot of each sorted position */
    int n_groups, n_slots;
} moe_plan;

/* Sorts the n_slots slots of sel (each an expert id < n_expert) into pl's groups; pl's arrays are
 * the caller's. */
void moe_plan_build(moe_plan *pl, const int *sel, int n_slots, int n_expert);

/* Bytes of one worker's scratch for moe_gate_up and moe_down on up to max_tok entries per group. */
size_t moe_scratch_bytes(const layer_weights *L, int64_t n_embd, int64_t n_ff_exp, int max_tok);

/* The layer's experts and the buffers of one step (all borrowed for the call). */
typedef struct moe_job {
    const layer_weights *L;
    arch_act act;
    int E, FE;          /* n_embd, n_ff_exp */
    const moe_plan *pl;
    const float *x;     /* (n_slots, E) each sorted position's input; may be o's storage (moe_down
                           does not read it) */
    float *g;           /* (n_slots, FE) each sorted position's activation (moe_gate_up's output) */
    float *o;           /* (n_slots, E) each slot's expert output, in slot order (moe_down's) */
    char *scratch;      /* (n_workers, scratch_bytes) one region per worker */
    size_t scratch_bytes; /* moe_scratch_bytes(..., max_tok) */
    int max_tok;        /* what scratch_bytes was sized for: no group has more entries */
    int n_threads;      /* at most n_workers */
} moe_job;

/* DeepSeek's router (arch ds_router) for one entry. */
typedef struct moe_ds_router {
    int n_expert, k;          /* experts, used per entry */
    int gating;               /* 1: softmax over every expert, 2: a sigmoid of each logit */
    const float *bias;        /* (n_expert) exp_probs_b, added for the choice only; NULL = none */
    int n_group, n_group_used; /* n_group > 1: only the n_group_used groups (consecutive experts)
                                  with the largest sums of their two best choice scores compete */
    bool norm;                /* the k weights divided by their sum (at least 2^-14) */
    float scale;              /* the weights times this (0 or 1: not scaled) */
} moe_ds_router;

/* The k experts of one entry, best choice score first (ties to the lower id), into sel (k), and
 * their weights, the unbiased probabilities, into w (k). p (n_expert): the router's logits in, its
 * probabilities out. */
void moe_ds_route(const moe_ds_router *r, float *p, int *sel, float *w);

void moe_gate_up(const moe_job *j);
void moe_down(const moe_job *j);

#endif /* ATTND_MOE_H */
