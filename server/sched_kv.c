/*
 * sched_kv.c — the scheduler's KV admission control and prefill pacing (see scheduler.h):
 * the reservation a job makes when it is admitted (prompt + max_tokens, capped at the context;
 * n > 1 choices share the prompt's blocks), the start-up check that the budget holds one full
 * context, and the size of a prefill chunk beside decoding streams. Scheduler thread only,
 * except where s->mu is taken.
 */
#include <stdlib.h>

#include "sched_internal.h"
#include "slog.h"

/* A member of a reservation group ended: the last one gives the shared prompt blocks back. */
void sched_group_leave(sched *s, kv_group *g) {
    if (!g || --g->live > 0) return;
    pthread_mutex_lock(&s->mu);
    s->reserved -= g->shared;
    pthread_mutex_unlock(&s->mu);
    free(g);
}

/* KV memory a job may come to hold: its prompt, max_tokens and the session tail, capped at the
 * context (engine_eval never grows a sequence past it). */
static size_t job_kv_bytes(const sched *s, const sched_job *j) {
    long n = (long)j->n_prompt + (j->max_tokens > 0 ? j->max_tokens : 0) + 1;
    return kv_pool_bytes_for(s->pool, n < s->n_ctx ? (int)n : s->n_ctx);
}

/* The prompt's whole KV blocks: a job's forks share them and never write into them. */
static size_t prompt_full_bytes(const sched *s, const sched_job *j) {
    size_t block = kv_pool_bytes_for(s->pool, 1);
    return (size_t)j->n_prompt / (block / kv_pool_bytes_per_token(s->pool)) * block;
}

int sched_n_forks(const sched_job *j) {
    int n = 0;
    for (const sched_job *f = j->forks; f; f = f->next) n++;
    return n;
}

/* What admitting j reserves. With forks: the prompt's blocks once (the partly filled last one
 * too, as it stays until every member has copied it), plus each member's own part: the blocks
 * it writes, its copy of that last block included. */
size_t sched_group_kv_bytes(const sched *s, const sched_job *j) {
    int nf = sched_n_forks(j);
    if (!nf) return job_kv_bytes(s, j);
    size_t own = job_kv_bytes(s, j) - prompt_full_bytes(s, j);
    return kv_pool_bytes_for(s->pool, j->n_prompt) + (size_t)(1 + nf) * own;
}

/* The queue's head when its KV reservation fits beside the running jobs' (FIFO: a big request
 * is not overtaken forever by small ones), popped and counted active; NULL otherwise. Cancelled
 * jobs are popped whatever their size. */
sched_job *sched_queue_pop_fitting(sched *s) {
    pthread_mutex_lock(&s->mu);
    sched_job *j = s->q_len ? s->queue[s->q_head] : NULL;
    if (j && !atomic_load(&j->cancel) && s->reserved + sched_group_kv_bytes(s, j) > s->stats.kv_budget) j = NULL;
    if (j) {
        s->q_head = (s->q_head + 1) % s->queue_limit;
        s->q_len--;
        s->n_active++;
    }
    pthread_mutex_unlock(&s->mu);
    return j;
}

/* Reserves KV for the job admitted into sl and its forks (which then carry their group). */
void sched_reserve(sched *s, slot *sl, sched_job *j) {
    size_t total = sched_group_kv_bytes(s, j);
    int nf = sched_n_forks(j);
    sl->reserve = total;
    kv_group *g = nf ? malloc(sizeof(*g)) : NULL;
    if (g) {
        *g = (kv_group){.live = 1 + nf, .shared = kv_pool_bytes_for(s->pool, j->n_prompt),
                        .own = job_kv_bytes(s, j) - prompt_full_bytes(s, j)};
        sl->reserve = g->own; /* the parent's own part; forks take theirs, the last one the shared */
        sl->group = g;
        for (sched_job *f = j->forks; f; f = f->next) f->kv_group = g;
    } else if (nf) { /* out of memory for the group: all of it stays reserved until j ends */
        slog_warn("out of memory: the KV of %d forks stays reserved until their request ends", nf);
    }
    pthread_mutex_lock(&s->mu);
    s->reserved += total;
    pthread_mutex_unlock(&s->mu);
}

/* Prefill tokens this step may take beside n_decode decoding streams. Alone, a prompt goes in
 * max_batch-sized chunks (its fastest); beside streams, the chunk is sized from the measured
 * costs so the step lasts about the prefill budget (prefill_budget_ms, or 4 decode steps when
 * 0): the streams keep a steady pace while the prompt still moves at nearly its solo speed. */
int sched_prefill_cap(const sched *s, int n_decode) {
    if (n_decode == 0) return s->max_batch;
    if (s->pf_ms_tok <= 0) return 32; /* nothing measured yet: a modest first chunk */
    double budget = s->budget_ms > 0 ? s->budget_ms : 4 * s->dec_ms;
    double cap = (budget - s->dec_ms) / s->pf_ms_tok;
    if (cap < 16) cap = 16; /* the prompt always moves */
    return cap < s->max_batch ? (int)cap : s->max_batch;
}

/* Moving averages of what a decode step and one prefill token cost (prefill_cap sizes chunks
 * from them). */
void sched_learn_costs(sched *s, double ms, int n_decode, int n_prefill) {
    const double a = 0.3;
    if (n_prefill == 0) {
        s->dec_ms = s->dec_ms > 0 ? (1 - a) * s->dec_ms + a * ms : ms;
        return;
    }
    double tok = (ms - (n_decode ? s->dec_ms : 0)) / n_prefill;
    if (tok <= 0) return;
    s->pf_ms_tok = s->pf_ms_tok > 0 ? (1 - a) * s->pf_ms_tok + a * tok : tok;
}

/* A budget must hold one request of a full context, else such requests could never run. */
attnd_status sched_check_budget(const sched *s, size_t budget, attnd_err *err) {
    size_t full = kv_pool_bytes_for(s->pool, s->n_ctx), block = kv_pool_bytes_for(s->pool, 1);
    if (full <= budget) return ATTND_OK;
    int fits = (int)(budget / block * (block / kv_pool_bytes_per_token(s->pool)));
    return attnd_fail(err, ATTND_ERR_INVALID,
                      "kv_budget_mb = %zu cannot hold one full context: %d tokens of KV need %zu MiB; "
                      "set kv_budget_mb >= %zu, or ctx_size <= %d to fit this budget",
                      budget >> 20, s->n_ctx, (full + ((size_t)1 << 20) - 1) >> 20,
                      (full + ((size_t)1 << 20) - 1) >> 20, fits);
}
