/*
 * sched_embed.h — embedding and rerank jobs on the scheduler (server-private): a request's inputs
 * evaluated by the scheduler's engine (engine_embed, attnd/embed.h) in turns between its
 * generation steps, so embeddings share the engine fairly with the streams: each turn evaluates
 * as many whole inputs as fit in the positions a turn may hold (sched_task_turn.max_entries, at
 * least one input), and the tokens are charged to the request's tenant, as generation's are.
 * No KV is held: nothing is kept after the call.
 */
#ifndef ATTND_SERVER_SCHED_EMBED_H
#define ATTND_SERVER_SCHED_EMBED_H

#include "attnd/embed.h"
#include "scheduler.h"

typedef struct sched_embed_spec {
    const embed_input *in;  /* (n) borrowed until the call returns; each input at most the
                               engine's max_batch tokens (ATTND_ERR_INVALID otherwise) */
    int n;
    model_pooling pool;     /* as engine_embed */
    int dim;                /* floats per input in out: model_embed_dim, or the classifier's
                               outputs for POOL_RANK */
    const char *tenant;     /* who asked (fair turns); NULL = "" */
} sched_embed_spec;

/* Evaluates every input, writing input i's raw pooled vector to out + i * dim. Waits until done.
 * Errors: engine_embed's, ATTND_ERR_BUSY when the scheduler is stopping. Thread-safe; not from
 * the scheduler thread. */
attnd_status sched_embed(sched *s, const sched_embed_spec *spec, float *out, attnd_err *err);

#endif
