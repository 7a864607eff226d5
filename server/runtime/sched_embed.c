/*
 * sched_embed.c — embedding jobs as scheduler tasks (see sched_embed.h).
 */
#include "sched_embed.h"

typedef struct embed_job {
    const sched_embed_spec *spec;
    float *out;
    int next;               /* the first input not evaluated yet */
} embed_job;

/* One turn: the next inputs whose tokens fit in turn->max_entries (at least one). */
static attnd_status embed_turn(void *user, sched_task_turn *turn, attnd_err *err) {
    embed_job *j = user;
    const sched_embed_spec *sp = j->spec;
    if (turn->plan || turn->stop) { /* no KV: nothing to reserve or release */
        turn->kv_bytes = 0;
        return ATTND_OK;
    }
    int from = j->next, to = from;
    long work = 0;
    while (to < sp->n && (to == from || work + sp->in[to].n_tokens <= turn->max_entries)) work += sp->in[to++].n_tokens;
    attnd_status st = engine_embed(turn->e, sp->in + from, to - from, sp->pool, j->out + (size_t)from * (size_t)sp->dim, err);
    j->next = to;
    turn->work = work;
    turn->more = st == ATTND_OK && to < sp->n;
    return st;
}

attnd_status sched_embed(sched *s, const sched_embed_spec *spec, float *out, attnd_err *err) {
    if (spec->n == 0) return ATTND_OK;
    embed_job j = {.spec = spec, .out = out};
    return sched_run_task(s, &(sched_task_spec){embed_turn, &j, spec->tenant}, err);
}
