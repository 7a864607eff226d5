/*
 * sched_kv.c — the scheduler's KV admission control and prefill pacing (see scheduler.h):
 * the reservation a job makes when it is admitted (prompt + max_tokens, capped at the context;
 * n > 1 choices share the prompt's blocks), which queued job goes next (turns across tenants), the start-up check that the budget holds one full
 * context, and the size of a prefill chunk beside decoding streams. Scheduler thread only,
 * except where s->mu is taken.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int sched_job_draft_max(const sched *s, const sched_job *j) {
    return s->draft_max < 0 ? 0 : j->draft_max >= 0 ? j->draft_max : s->draft_max;
}

/* KV memory a job may come to hold: its prompt, max_tokens and the session tail, capped at the
 * context (engine_eval never grows a sequence past it), and with a recurrent state the room its
 * steps keep states in (kv_seq_keep_room, kv_pool_steps_bytes): a log per draft of a speculative
 * verify, and at least one state to back the state up when a step may be given up (the yield). */
static size_t job_kv_bytes(const sched *s, const sched_job *j) {
    long n = (long)j->n_prompt + (j->max_tokens > 0 ? j->max_tokens : 0) + 1;
    int room = sched_job_draft_max(s, j) > 1 ? sched_job_draft_max(s, j) : 1;
    return kv_pool_bytes_for(s->pool, n < s->n_ctx ? (int)n : s->n_ctx) + kv_pool_steps_bytes(s->pool, room);
}

/* The prompt's whole KV blocks: a job's forks share them and never write into them (a recurrent
 * state, kv_pool_bytes_for(pool, 0), is each member's own). */
static size_t prompt_full_bytes(const sched *s, const sched_job *j) {
    size_t block = kv_pool_bytes_for(s->pool, 1) - kv_pool_bytes_for(s->pool, 0);
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

// ---- fair admission ------------------------------------------------------------------------
/*
 * Admission takes turns across tenants (API keys, or client addresses without keys) by the
 * tokens each was charged (start-time fair queueing over tokens): the next job is the first
 * queued one of the tenant charged least, and admitting it charges its prompt plus max_tokens
 * for each choice. A tenant that had nothing queued or running comes back at the least charge
 * among the active ones: idle time earns no credit, past use costs nothing later. Within a
 * tenant the order stays first come, first served, and a tenant whose next job waits for KV
 * holds the others back too (else small requests would overtake a big one for ever). One tenant
 * holds at most max_parallel slots of the max_parallel + 1, so a request from another tenant
 * finds a slot at once, beside however many long jobs one client submitted.
 */

/* The charge of admitting j: its prompt, read once, and max_tokens for every choice. */
static double job_charge(const sched_job *j) {
    return (double)j->n_prompt + (double)(j->max_tokens > 0 ? j->max_tokens : 0) * (1 + sched_n_forks(j));
}

/* The entry of name: an existing one, else a free one or a new one (s->mu held); -1 when out of
 * memory. A tenant coming back starts at the least charge among the active tenants. */
static int tenant_find(sched *s, const char *name) {
    int free_ix = -1;
    double least = -1;
    for (int i = 0; i < s->n_tenants; i++) {
        sched_tenant *t = &s->tenants[i];
        if (t->live == 0) {
            if (free_ix < 0) free_ix = i;
            continue;
        }
        if (!strcmp(t->name, name)) return i;
        if (least < 0 || t->served < least) least = t->served;
    }
    if (free_ix < 0) {
        if (s->n_tenants == s->cap_tenants) {
            int cap = s->cap_tenants ? 2 * s->cap_tenants : 16;
            sched_tenant *g = realloc(s->tenants, (size_t)cap * sizeof(*g));
            if (!g) return -1;
            s->tenants = g;
            s->cap_tenants = cap;
        }
        free_ix = s->n_tenants++;
    }
    sched_tenant *t = &s->tenants[free_ix];
    *t = (sched_tenant){.served = least >= 0 ? least : 0};
    snprintf(t->name, sizeof(t->name), "%s", name);
    return free_ix;
}

int sched_tenant_enter(sched *s, const char *name) {
    int ix = tenant_find(s, name);
    if (ix >= 0) s->tenants[ix].live++;
    return ix;
}

void sched_tenant_exit(sched *s, int ix) {
    if (ix < 0) return;
    pthread_mutex_lock(&s->mu);
    s->tenants[ix].live--;
    ATTND_ASSERT(s->tenants[ix].live >= 0);
    pthread_mutex_unlock(&s->mu);
}

void sched_tenant_charge(sched *s, int ix, double tokens) {
    if (ix < 0 || tokens <= 0) return;
    pthread_mutex_lock(&s->mu);
    s->tenants[ix].served += tokens;
    pthread_mutex_unlock(&s->mu);
}

bool sched_tenant_join(sched *s, sched_job *j) {
    int ix = tenant_find(s, j->tenant);
    if (ix < 0) return false;
    j->tenant_ix = ix;
    s->tenants[ix].live++;
    for (sched_job *f = j->forks; f; f = f->next) {
        f->tenant_ix = ix;
        s->tenants[ix].live++;
    }
    return true;
}

void sched_tenant_leave(sched *s, sched_job *j, bool in_slot) {
    if (j->tenant_ix < 0) return;
    pthread_mutex_lock(&s->mu);
    sched_tenant *t = &s->tenants[j->tenant_ix];
    t->live--;
    if (in_slot) t->running--;
    ATTND_ASSERT(t->live >= 0 && t->running >= 0);
    pthread_mutex_unlock(&s->mu);
    j->tenant_ix = -1;
}

bool sched_tenant_take_slot(sched *s, sched_job *j) {
    if (j->tenant_ix < 0) return true;
    pthread_mutex_lock(&s->mu);
    sched_tenant *t = &s->tenants[j->tenant_ix];
    bool ok = t->running < s->tenant_slots || atomic_load(&j->cancel);
    if (ok) t->running++;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* The queue position to admit next (s->mu held): a cancelled job, else the first job of the
 * least charged tenant below its slot share; -1 when none. */
static int queue_pick(sched *s) {
    int best = -1;
    s->scan++;
    for (int i = 0; i < s->q_len; i++) {
        sched_job *j = s->queue[(s->q_head + i) % s->queue_limit];
        if (atomic_load(&j->cancel)) return i;
        sched_tenant *t = &s->tenants[j->tenant_ix];
        if (t->mark == s->scan) continue; /* only a tenant's first queued job competes */
        t->mark = s->scan;
        if (t->running >= s->tenant_slots) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const sched_tenant *b = &s->tenants[s->queue[(s->q_head + best) % s->queue_limit]->tenant_ix];
        if (t->served < b->served || (t->served == b->served && t->running < b->running)) best = i;
    }
    return best;
}

sched_job *sched_queue_pop_fitting(sched *s) {
    pthread_mutex_lock(&s->mu);
    int i = queue_pick(s);
    sched_job *j = i >= 0 ? s->queue[(s->q_head + i) % s->queue_limit] : NULL;
    if (j && !atomic_load(&j->cancel) && s->reserved + s->task_kv_waiting + sched_group_kv_bytes(s, j) > s->stats.kv_budget)
        j = NULL;
    if (j) {
        for (int k = i; k > 0; k--) /* close the gap: the jobs before it move up one place */
            s->queue[(s->q_head + k) % s->queue_limit] = s->queue[(s->q_head + k - 1) % s->queue_limit];
        s->q_head = (s->q_head + 1) % s->queue_limit;
        s->q_len--;
        s->n_active++;
        if (!atomic_load(&j->cancel)) { /* a cancelled one never takes its slot */
            sched_tenant *t = &s->tenants[j->tenant_ix];
            t->served += job_charge(j);
            t->running++;
        }
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

/* Pacing a prompt beside streams: the first chunk before any cost is known, the least a prompt
 * moves per step, how fast the learned costs follow, and the spread of positions below which
 * the cost's growth along the prompt is not estimated (a line through points a few tokens apart
 * would be mostly noise). The auto budget is 3 decode steps, measured on the TinyLlama-shaped
 * Q4_K_M model on 2 cores (tools/bench/serve_load.sh; the host's memory bandwidth varies from
 * run to run): at 4.5 the streams' p99 gap was 4.3-5.9x their quiet median with the prompt's
 * time to first token 1.09-1.10x its time alone, at 3.5 3.6-5.2x and 1.13-1.33x (one run over
 * the gap's target, in a slow hour), at 3 3.2-3.8x and 1.16-1.21x (three runs; issue 12's
 * targets: <= 5x and <= 1.5x). */
enum { PACE_FIRST_CHUNK = 32, PACE_MIN_CHUNK = 4 };
static const double PACE_AUTO_STEPS = 3.0, PACE_DECODE_ALPHA = 0.3, PACE_FIT_DECAY = 0.75, PACE_MIN_SPREAD = 32;

/* The line's cost at position pos and its slope (ms per token, per token of position); false
 * when nothing was measured yet. The slope is never negative (attention only grows), and the
 * cost never falls below half the recent mean (a new, short prompt after a long one). */
static bool pace_line(const pace_fit *f, double pos, double *cost, double *slope) {
    if (f->w <= 0) return false;
    double mp = f->p / f->w, mc = f->c / f->w, var = f->pp / f->w - mp * mp;
    *slope = var >= PACE_MIN_SPREAD * PACE_MIN_SPREAD ? (f->pc / f->w - mp * mc) / var : 0;
    if (*slope < 0) *slope = 0;
    *cost = mc + *slope * (pos - mp);
    if (*cost < mc / 2) *cost = mc / 2;
    return true;
}

/* The decode step cost for n tokens: learned for n, else for the nearest smaller n learned (a
 * lower bound: more tokens never cost less), else the nearest larger; 0 when none was seen. */
static double dec_cost(const sched *s, int n) {
    int i = (n < SCHED_DEC_SIZES ? n : SCHED_DEC_SIZES) - 1;
    for (int k = i; k >= 0; k--)
        if (s->dec_ms[k] > 0) return s->dec_ms[k];
    for (int k = i + 1; k < SCHED_DEC_SIZES; k++)
        if (s->dec_ms[k] > 0) return s->dec_ms[k];
    return 0;
}

/* Prefill tokens this step may take beside n_decode decoding streams, for n_prompts prompts being
 * read, the oldest at position pos. Alone, prompts go in max_batch-sized chunks (their fastest);
 * beside streams, the chunk is sized so the step lasts about the prefill budget
 * (prefill_budget_ms, or PACE_AUTO_STEPS decode steps of n_decode tokens when 0): n tokens from
 * pos cost n * (c + slope * n / 2) by the learned line, so n solves slope/2 n^2 + c n = budget -
 * decode step. The streams keep a steady pace while the prompt still moves at most of its solo
 * speed. When prompts outnumber the streams (a burst of requests), the budget is shared per
 * request: it grows by n_prompts / n_decode, so the newcomers start together instead of one per
 * step behind streams that are only a few tokens ahead. */
int sched_prefill_cap(const sched *s, int n_decode, int n_prompts, int pos) {
    double c, slope, dec = dec_cost(s, n_decode);
    if (n_decode == 0) return s->max_batch;
    double share = n_prompts > n_decode ? (double)n_prompts / n_decode : 1;
    double cap;
    if (!pace_line(&s->pf, pos, &c, &slope) || dec <= 0) {
        cap = PACE_FIRST_CHUNK * share;
    } else {
        double budget = (s->budget_ms > 0 ? s->budget_ms : PACE_AUTO_STEPS * dec) * share, room = budget - dec;
        cap = room <= 0 ? 0 : slope > 0 ? (sqrt(c * c + 2 * slope * room) - c) / slope : room / c;
    }
    if (cap < PACE_MIN_CHUNK) cap = PACE_MIN_CHUNK; /* the prompt always moves */
    return cap < s->max_batch ? (int)cap : s->max_batch;
}

/*
 * Learns from a step of ms milliseconds: a decode-only step updates the decode step's cost; a
 * step that carried prompt tokens beside streams adds a point to the cost line of a prompt
 * token: the step's time beyond a decode step per prompt token, at their mean position. Only
 * those steps teach it: a chunk token's cost depends on the chunk's size (small chunks use the
 * weights less well than a prompt's max_batch chunks alone) and grows with the prompt already
 * read (each token attends over it), so the line is fitted to the recent chunks themselves
 * (weights decaying by PACE_FIT_DECAY a chunk) and followed along the prompt by its slope.
 */
void sched_learn_costs(sched *s, double ms, int n_decode, int n_prefill, double pf_pos) {
    if (n_decode == 0) return; /* a prompt alone: max_batch chunks, nothing to pace */
    if (n_prefill == 0) {
        double *d = &s->dec_ms[(n_decode < SCHED_DEC_SIZES ? n_decode : SCHED_DEC_SIZES) - 1];
        *d = *d > 0 ? (1 - PACE_DECODE_ALPHA) * *d + PACE_DECODE_ALPHA * ms : ms;
        return;
    }
    double dec = dec_cost(s, n_decode);
    if (dec <= 0) return; /* no decode step measured yet: the prompt's share is unknown */
    double c = (ms - dec) / n_prefill;
    if (c <= 0) return;
    pace_fit *f = &s->pf;
    const double d = PACE_FIT_DECAY;
    *f = (pace_fit){d * f->w + 1, d * f->p + pf_pos, d * f->c + c, d * f->pp + pf_pos * pf_pos, d * f->pc + pf_pos * c};
}

/* A task's turn: as many positions as cost about one decode step of the n_decode streams (of one
 * stream when none decodes: a request arriving meanwhile waits no longer for the turn than for a
 * step), learned from the turns before, starting at the first chunk's size. */
int sched_task_cap(const sched *s, int n_decode) {
    (void)n_decode; /* the size learned is for the streams of the turns before: close enough */
    double cap = s->task_entries > 0 ? s->task_entries : PACE_FIRST_CHUNK;
    if (cap < 1) cap = 1;
    return cap < s->max_batch ? (int)cap : s->max_batch;
}

void sched_task_learn(sched *s, double ms, long work, int cap, int n_decode) {
    double dec = dec_cost(s, n_decode > 0 ? n_decode : 1);
    if (work <= 0 || work < cap || dec <= 0 || ms <= 0) return; /* a short last turn says little */
    double f = dec / ms;
    f = f < 0.5 ? 0.5 : f > 2 ? 2 : f;
    s->task_entries = (double)work * f;
    if (s->task_entries < 1) s->task_entries = 1;
    if (s->task_entries > s->max_batch) s->task_entries = s->max_batch;
}

int sched_decode_rows(const sched *s, int least, int total) {
    int lo = -1, hi = -1;
    for (int k = 0; k < SCHED_DEC_SIZES - 1; k++) /* the last entry pools every bigger size */
        if (s->dec_ms[k] > 0) hi = k, lo = lo < 0 ? k : lo;
    if (lo < 0 || hi == lo) return total;
    double b = (s->dec_ms[hi] - s->dec_ms[lo]) / (hi - lo), a = s->dec_ms[lo] - b * (lo + 1);
    if (b <= 0) return total;
    double rows = (2 * (a + b * least) - a) / b;
    return rows >= total ? total : rows <= least ? least : (int)rows;
}

void sched_charge_ms(sched *s, int ix, double ms) {
    double per_token = dec_cost(s, 1);
    sched_tenant_charge(s, ix, ms / (per_token > 0 ? per_token : 1.0));
}

double sched_mask_budget_ms(const sched *s, int n_decode) {
    double dec = dec_cost(s, n_decode);
    return dec > SCHED_MASK_MIN_MS ? dec : SCHED_MASK_MIN_MS;
}

/* A budget must hold one request of a full context, else such requests could never run. */
attnd_status sched_check_budget(const sched *s, size_t budget, attnd_err *err) {
    size_t full = kv_pool_bytes_for(s->pool, s->n_ctx), state = kv_pool_bytes_for(s->pool, 0);
    size_t block = kv_pool_bytes_for(s->pool, 1) - state;
    if (full <= budget) return ATTND_OK;
    int fits = budget > state ? (int)((budget - state) / block * (block / kv_pool_bytes_per_token(s->pool))) : 0;
    return attnd_fail(err, ATTND_ERR_INVALID,
                      "kv_budget_mb = %zu cannot hold one full context: %d tokens of KV need %zu MiB; "
                      "set kv_budget_mb >= %zu, or ctx_size <= %d to fit this budget",
                      budget >> 20, s->n_ctx, (full + ((size_t)1 << 20) - 1) >> 20,
                      (full + ((size_t)1 << 20) - 1) >> 20, fits);
}
