/*
 * scheduler.c — the scheduler thread: continuous batching over one engine (see scheduler.h).
 *
 * Each step:
 *   1. destroy KV handles of deleted sessions; admit queued jobs into free slots (prefix reuse)
 *      while their KV reservations (prompt + max_tokens, capped at the context) fit the budget;
 *   2. drop cancelled jobs;
 *   3. build ONE batch: a decode token for every generating slot, then prefill chunks of the
 *      prompts still being read, sized to the prefill time budget while others decode; or, when
 *      prompts were just admitted beside decoding streams, a step of their first chunks alone
 *      (at most one such step between two decode steps; see step);
 *   4. engine_eval; when the pool is full, evict the least recently used cache no slot is
 *      using (idle ones first, then those of sessions whose turn still waits in the queue) and
 *      retry: the reservations count only running jobs, so every other cache must stay
 *      evictable, and then evicting always makes room; failing the newest job is only a
 *      safeguard against broken accounting;
 *   5. sample one token per slot that produced logits, publish text to the job.
 * Everything per-step lives in buffers allocated at start (batch, logits); per-request state
 * (the generation pipeline of attnd/gen.h, history) is allocated once at admission.
 */
#include "scheduler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/buf.h"
#include "attnd/gen.h"
#include "attnd/spec.h"
#include "sched_internal.h"
#include "slog.h"


static void forks_fail(sched *s, sched_job *j, attnd_status st, const char *msg);

// ---- latency distributions -----------------------------------------------------------------

/* Bucket bounds for CPU serving: a 1B model decodes at 20-60 ms a token and prefills 100-300
 * tokens/s on two cores, a 7B one several times slower, so the latency bounds reach minutes. */
static const double H_QUEUE[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
static const double H_TTFT[] = {0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120};
static const double H_ITL[] = {0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5};
static const double H_E2E[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640};
static const double H_TOKENS[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};

static void hist_init_all(sched_stats *st) {
    static const struct { const double *le; int n; } B[SCHED_H_COUNT] = {
        [SCHED_H_QUEUE] = {H_QUEUE, ATTND_ARRAY_LEN(H_QUEUE)}, [SCHED_H_TTFT] = {H_TTFT, ATTND_ARRAY_LEN(H_TTFT)},
        [SCHED_H_ITL] = {H_ITL, ATTND_ARRAY_LEN(H_ITL)},       [SCHED_H_E2E] = {H_E2E, ATTND_ARRAY_LEN(H_E2E)},
        [SCHED_H_PROMPT] = {H_TOKENS, ATTND_ARRAY_LEN(H_TOKENS)}, [SCHED_H_GEN] = {H_TOKENS, ATTND_ARRAY_LEN(H_TOKENS)},
    };
    for (int k = 0; k < SCHED_H_COUNT; k++)
        for (int a = 0; a < SCHED_N_APIS; a++) histo_init(&st->hist[k][a], B[k].le, B[k].n);
}

/* Scheduler thread: one observation of job j's, in its API's series, under the mutex
 * sched_get_stats copies them under. */
static void observe(sched *s, const sched_job *j, sched_hist k, double v) {
    pthread_mutex_lock(&s->mu);
    histo_observe(&s->stats.hist[k][j->api], v);
    pthread_mutex_unlock(&s->mu);
}


// ---- slots --------------------------------------------------------------------------------

/* Ends a slot's job: publishes the outcome, returns the cache entry with the new history. */
static void slot_finish(sched *s, slot *sl, const char *reason, attnd_status st, const char *msg) {
    sched_job *j = sl->job;
    char rid[sizeof(j->request_id)]; /* what this logs is about j's request (j may go first) */
    memcpy(rid, j->request_id, sizeof(rid));
    slog_set_request(rid);
    if (st == ATTND_OK) {
        if (!j->is_fork) {
            observe(s, j, SCHED_H_E2E, attnd_now_s() - j->t_submit);
            observe(s, j, SCHED_H_PROMPT, j->n_prompt);
        }
        observe(s, j, SCHED_H_GEN, sl->n_gen);
    }
    attn_capture_unlink(&s->inspecting, j->capture);
    if (sl->se) {
        if (sl->kv) kv_seq_keep_steps(sl->kv, 0); /* the room its verifies kept states in */
        if (sl->kv && st == ATTND_OK) kv_seq_checkpoint(sl->kv); /* a turn's end: where the next turn may differ */
        if (sl->kv) sess_set_kv(s->store, sl->se, sl->kv, sl->n_past, kv_seq_bytes(sl->kv));
        attnd_err e;
        /* the history is what the KV holds plus the last sampled token (the durable truth);
         * a request that failed before it had one leaves the old history alone */
        if (!sl->hist) sess_abandon(s->store, sl->se);
        else if (sess_release(s->store, sl->se, sl->hist, sl->n_hist, &e) != ATTND_OK) slog_error("%s", e.msg);
    }
    pthread_mutex_lock(&j->mu);
    if (st == ATTND_OK && reason && sl->g) {
        /* release held-back bytes: an unfinished UTF-8 tail, then text kept for stop matching */
        const char *e;
        size_t ne;
        if (gen_finish(sl->g, &e, &ne) == STOP_STRING) reason = "stop";
        sched_job_append_text(j, e, ne);
    }
    j->finish_reason = st == ATTND_OK ? reason : NULL;
    j->status = st;
    if (msg) snprintf(j->errmsg, sizeof(j->errmsg), "%s", msg);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    gen_destroy(sl->g);
    spec_destroy(sl->sp);
    free(sl->hist);
    if (sl->own_kv) kv_seq_destroy(sl->kv);
    free(sl->abl.mean_sum), free(sl->abl.mean_n);
    /* forks not started yet: the prompt they continue was never read */
    forks_fail(s, j, st != ATTND_OK ? st : ATTND_ERR_BUSY, msg ? msg : "the request ended before its prompt was read");
    sched_tenant_leave(s, j, true);
    sched_job_unref(j);
    size_t reserve = sl->reserve;
    kv_group *g = sl->group;
    memset(sl, 0, sizeof(*sl));
    sched_group_leave(s, g);
    slog_set_request(NULL);
    pthread_mutex_lock(&s->mu);
    s->n_active--;
    s->reserved -= reserve;
    pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
}

/* A job that never got a slot (its forks fail with it). */
static void job_fail_unstarted(sched *s, sched_job *j, attnd_status st, const char *msg) {
    if (j->se) sess_abandon(s->store, j->se);
    kv_group *g = j->kv_group;
    j->kv_group = NULL;
    if (g) { /* a fork of an admitted job: its own part and its share of the group go back */
        pthread_mutex_lock(&s->mu);
        s->reserved -= g->own;
        pthread_mutex_unlock(&s->mu);
        sched_group_leave(s, g);
    }
    forks_fail(s, j, st, msg);
    sched_tenant_leave(s, j, false);
    pthread_mutex_lock(&j->mu);
    j->status = st;
    snprintf(j->errmsg, sizeof(j->errmsg), "%.255s", msg);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    sched_job_unref(j);
}

/* The per-request generation state of a slot: history and the generation pipeline (sampler
 * with the prompt in its penalty window, detokenizer, stop strings). */
static attnd_status slot_init_gen(sched *s, slot *sl, sched_job *j, attnd_err *err) {
    sl->hist = malloc((size_t)(j->n_prompt + j->max_tokens + 1) * sizeof(int32_t));
    if (!sl->hist) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    memcpy(sl->hist, j->prompt, (size_t)j->n_prompt * sizeof(int32_t));
    sl->n_hist = j->n_prompt;
    if (j->grammar && !s->gvocab && s->tok) {
        attnd_status rc = grammar_vocab_from_tokenizer(&s->gvocab, s->tok, err);
        if (rc != ATTND_OK) return rc;
    }
    gen_params gp = {.sp = j->sp, .stops = (const char *const *)j->stops, .n_stops = j->n_stops,
                     .top_logprobs = j->top_logprobs, .grammar = j->grammar, .gvocab = s->gvocab,
                     .ignore_eog = j->ignore_eos, .think_budget = j->think_budget, .think_inside = j->think_inside,
                     .max_tokens = j->max_tokens, .grammar_close = j->grammar_close};
    return gen_create(&sl->g, &gp, s->n_vocab, s->tok, j->prompt, j->n_prompt, err);
}

/* An ablated job's slot: a KV cache of its own (never a session's or the prompt cache's, whose
 * later readers would get the ablated model's keys and values), evaluated from position 0 with
 * the ablation attached, destroyed when the job ends. */
static attnd_status slot_start_ablated(sched *s, slot *sl, sched_job *j, attnd_err *err) {
    ATTND_ASSERT(!j->se);
    size_t hd = (size_t)model_info_get(engine_model(s->eng))->head_dim, n = (size_t)j->n_ablate;
    sl->abl = (engine_ablation){.heads = j->ablate, .n = j->n_ablate, .mean_sum = calloc(n * hd, sizeof(double)),
                                .mean_n = calloc(n, sizeof(int))};
    if (!sl->abl.mean_sum || !sl->abl.mean_n) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    attnd_status rc = kv_seq_create(&sl->kv, s->pool, err);
    if (rc != ATTND_OK) return rc;
    sl->own_kv = true;
    engine_seq_ablate(sl->kv, &sl->abl);
    if (j->capture) attn_capture_link(&s->inspecting, j->capture, sl->kv);
    sl->prefilling = true;
    pthread_mutex_lock(&j->mu);
    if (j->prompt_logprobs && j->n_prompt > 0) j->prompt_lp[0] = NAN;
    pthread_mutex_unlock(&j->mu);
    return slot_init_gen(s, sl, j, err);
}

/* The drafter of a slot that speculates, fed the prompt: the draft model's, else the model's own
 * MTP block, else (none, or out of memory) prompt lookup's; none when that fails too. */
static void slot_open_drafter(sched *s, slot *sl) {
    if (sched_job_draft_max(s, sl->job) <= 0 || sl->job->capture) return;
    static const char *const names[] = {"draft model", "MTP block", "prompt lookup"};
    spec_params p;
    spec_params_default(&p);
    p.draft_max = sched_job_draft_max(s, sl->job), p.fixed = !s->draft_adapt;
    p.draft_min_p = sl->job->draft_min_p >= 0 ? sl->job->draft_min_p : s->draft_min_p;
    for (int kind = s->deng ? 0 : s->mtp ? 1 : 2; kind < 3 && !sl->sp; kind++) {
        if (kind == 1 && !s->mtp) continue;
        p.draft = kind == 0 ? s->deng : NULL, p.draft_pool = kind == 0 ? s->dpool : NULL;
        p.mtp = kind == 1 ? s->eng : NULL, p.mtp_seq = kind == 1 ? sl->kv : NULL;
        attnd_err err;
        if (spec_create(&sl->sp, &p, &err) == ATTND_OK && spec_push(sl->sp, sl->hist, sl->n_hist, &err) == ATTND_OK)
            break;
        slog_debug("no %s for this sequence: %s", names[kind], err.msg);
        spec_destroy(sl->sp);
        sl->sp = NULL;
    }
}

/* Takes a job into a free slot: picks its cache entry and keeps the longest common prefix. */
static attnd_status slot_start(sched *s, slot *sl, sched_job *j, attnd_err *err) {
    memset(sl, 0, sizeof(*sl));
    sl->job = j;
    sl->admitted = ++s->n_admitted;
    sl->fresh = true;
    observe(s, j, SCHED_H_QUEUE, attnd_now_s() - j->t_submit);
    if (j->n_ablate) return slot_start_ablated(s, sl, j, err);
    sl->se = j->se ? j->se : sess_acquire_anon(s->store, j->owner, j->prompt, j->n_prompt, s->max_anon);
    if (!sl->se) return attnd_fail(err, ATTND_ERR_BUSY, "no prompt cache entry free");
    sess_set_running(s->store, sl->se, true); /* its KV is in use from here: never evicted */
    sl->kv = sl->se->kv; /* NULL when evicted while the job was queued */
    if (!sl->kv) {
        attnd_status rc = kv_seq_create(&sl->kv, s->pool, err);
        if (rc != ATTND_OK) return rc;
        sess_set_kv(s->store, sl->se, sl->kv, 0, 0);
    }
    /* the KV holds se->tokens[0..kv_len); keep what the new prompt shares, but always evaluate
     * at least the last prompt token (its logits start generation) */
    int keep = sess_common_prefix(sl->se->tokens, sl->se->kv_len, j->prompt, j->n_prompt);
    if (keep >= j->n_prompt) keep = j->n_prompt - 1;
    if (j->prompt_logprobs || (j->capture && !j->se)) keep = 0; /* every position's logits / rows */
    if (keep < 0) keep = 0;
    kv_seq_truncate(sl->kv, keep);
    keep = kv_seq_len(sl->kv); /* less when a sliding window's positions were freed (kv.h) */
    if (j->capture) attn_capture_link(&s->inspecting, j->capture, sl->kv);
    kv_seq_checkpoint_at(sl->kv, j->n_prompt - SCHED_CKPT_BACK);
    kv_seq_keep_room(sl->kv, 1); /* a hybrid's steps may yield with its state backed up (reserved) */
    sl->n_past = keep;
    sl->prefilling = true;
    attnd_status rc = slot_init_gen(s, sl, j, err);
    if (rc != ATTND_OK) return rc;
    slot_open_drafter(s, sl);
    pthread_mutex_lock(&s->mu);
    s->stats.cached_tokens += (uint64_t)keep;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&j->mu);
    j->n_cached = keep;
    if (j->prompt_logprobs && j->n_prompt > 0) j->prompt_lp[0] = NAN;
    pthread_mutex_unlock(&j->mu);
    return ATTND_OK;
}

/* Samples one token for a generating slot from row (NULL: goes on with the step its grammar's
 * mask left pending) and publishes what it released. false when the mask did not end by
 * s->mask_deadline: the slot is pending, out of the decode steps until slot_resume ends it. The
 * time a grammar's step takes is charged to the job's tenant. */
static bool slot_token(sched *s, slot *sl, const float *row) {
    sched_job *j = sl->job;
    /* only this thread writes pieces and tops; readers see entries below n_pieces */
    token_logprob *top = j->top_logprobs > 0 ? j->tops + (size_t)j->n_pieces * j->top_logprobs : NULL;
    gen_token t;
    stop_reason why = STOP_NONE;
    double t0 = attnd_now_s();
    bool done = row ? gen_next_until(sl->g, row, top, &t, s->mask_deadline, &why)
                    : gen_resume(sl->g, top, &t, s->mask_deadline, &why);
    if (j->grammar) sched_charge_ms(s, j->tenant_ix, (attnd_now_s() - t0) * 1e3);
    sl->pending = !done;
    if (!done) return false;
    sl->hist[sl->n_hist++] = t.id;
    attnd_err ignored;
    if (sl->sp && spec_push(sl->sp, &t.id, 1, &ignored) != ATTND_OK) spec_destroy(sl->sp), sl->sp = NULL;
    sl->n_gen++;
    double now = attnd_now_s();
    if (sl->t_last > 0) observe(s, j, SCHED_H_ITL, now - sl->t_last);
    else if (!j->is_fork) observe(s, j, SCHED_H_TTFT, now - j->t_submit);
    sl->t_last = now;
    pthread_mutex_lock(&j->mu);
    j->n_generated = sl->n_gen;
    if (why != STOP_EOG) {
        j->pieces[j->n_pieces++] = (token_logprob){t.id, j->top_logprobs >= 0 ? t.logprob : 0};
        sched_job_append_text(j, t.text, t.n_text);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    sl->next_token = t.id;
    /* finishing waits for the end of the step (see finish_ended) */
    if (why != STOP_NONE) sl->end_reason = gen_steered(sl->g) ? "length" : "stop"; /* the budget closed it */
    else if (sl->n_gen >= j->max_tokens || sl->n_past >= s->n_ctx) sl->end_reason = "length";
    return true;
}

/* Whether a slot has a token to decode in the next step (neither reading its prompt nor waiting
 * for its grammar's mask). */
static bool slot_decoding(const slot *sl) { return sl->job && !sl->prefilling && !sl->pending; }

/* The grammar masks of pending slots go on, in turns (each step starts with the next slot), until
 * the step's mask deadline; returns the tokens they produced. */
static int resume_pending(sched *s) {
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[(s->mask_turn + i) % s->n_slots];
        if (sl->job && sl->pending) n += slot_token(s, sl, NULL);
    }
    s->mask_turn = (s->mask_turn + 1) % s->n_slots;
    return n;
}

/* The step's deadline for grammar masks: none when every running job has a grammar and they are
 * one tenant's (nobody else waits for them), else about one decode step of the slots decoding
 * (sched_mask_budget_ms): so one tenant's grammar delays another's tokens by at most a step's
 * worth per step, its sequences finishing their masks over the next steps. */
static double mask_deadline(const sched *s, double now) {
    int tenant = -1, n_dec = 0;
    bool alone = true;
    for (int k = 0; k < s->n_slots; k++) {
        const slot *sl = &s->slots[k];
        if (!sl->job) continue;
        n_dec += slot_decoding(sl);
        if (!sl->job->grammar || (tenant >= 0 && sl->job->tenant_ix != tenant)) alone = false;
        tenant = sl->job->tenant_ix;
    }
    return alone ? 0 : now + sched_mask_budget_ms(s, n_dec > 0 ? n_dec : 1) / 1e3;
}

/*
 * Finishes the slots whose generation ended this step. A named session's last sampled token is
 * evaluated into its KV first (all of them in one batch, no logits), so the next turn finds the
 * whole conversation cached: cached_tokens >= the previous turn's total.
 */
static void finish_ended(sched *s) {
    int n = 0;
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        if (sl->job && sl->end_reason && sl->job->se && sl->n_past < s->n_ctx && n < s->max_batch)
            s->batch[n++] = (batch_entry){sl->kv, sl->next_token, sl->n_past, false};
    }
    attnd_err err;
    attnd_status rc = n ? engine_eval(s->eng, s->batch, n, NULL, &err) : ATTND_ERR_INVALID;
    if (n && rc != ATTND_OK) slog_debug("session tail not cached: %s", err.msg); /* next turn prefills it */
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        if (!sl->job || !sl->end_reason) continue;
        if (rc == ATTND_OK && sl->job->se && sl->n_past < s->n_ctx) sl->n_past++;
        slot_finish(s, sl, sl->end_reason, ATTND_OK, NULL);
    }
}

// ---- forks (n > 1) -----------------------------------------------------------------------

/* Fails j's forks that were not started (j ended before its prompt was read). */
static void forks_fail(sched *s, sched_job *j, attnd_status st, const char *msg) {
    while (j->forks) {
        sched_job *f = j->forks;
        j->forks = f->next;
        f->next = NULL;
        job_fail_unstarted(s, f, st, msg); /* drops the parent's reference */
    }
}

/* j's prompt is read (its KV holds exactly the prompt, row its last logits): each fork takes a
 * share of the blocks and a copy of the logits, and waits in the ready list for a slot. */
static void forks_start(sched *s, slot *sl, const float *row) {
    sched_job *j = sl->job;
    while (j->forks) {
        sched_job *f = j->forks;
        j->forks = f->next;
        f->next = NULL;
        attnd_err err;
        attnd_status rc = kv_seq_fork(&f->fork_kv, sl->kv, &err);
        if (rc == ATTND_OK && !(f->first_logits = malloc((size_t)s->n_vocab * sizeof(float))))
            rc = attnd_fail(&err, ATTND_ERR_NOMEM, "out of memory");
        if (rc != ATTND_OK) {
            job_fail_unstarted(s, f, rc, err.msg);
            continue;
        }
        memcpy(f->first_logits, row, (size_t)s->n_vocab * sizeof(float));
        *s->ready_tail = f;
        s->ready_tail = &f->next;
        pthread_mutex_lock(&s->mu);
        s->n_active++;
        pthread_mutex_unlock(&s->mu);
    }
}

/* Takes the oldest ready fork whose tenant may take a slot out of the ready list (its slot
 * counted); NULL when none may. */
static sched_job *ready_take(sched *s) {
    sched_job **pp = &s->ready, *prev = NULL;
    while (*pp && !sched_tenant_take_slot(s, *pp)) prev = *pp, pp = &(*pp)->next;
    sched_job *f = *pp;
    if (!f) return NULL;
    *pp = f->next;
    if (!f->next) s->ready_tail = prev ? &prev->next : &s->ready;
    f->next = NULL;
    return f;
}

/* Puts the ready fork f (ready_take) into the free slot sl: its cache already holds the prompt,
 * so it starts by sampling its first token. */
static void fork_admit(sched *s, slot *sl, sched_job *f) {
    memset(sl, 0, sizeof(*sl));
    sl->job = f;
    sl->admitted = ++s->n_admitted;
    sl->kv = f->fork_kv;
    sl->own_kv = true;
    f->fork_kv = NULL;
    sl->group = f->kv_group; /* reserved when its parent was admitted */
    sl->reserve = sl->group ? sl->group->own : 0;
    f->kv_group = NULL;
    sl->n_past = f->n_prompt;
    attnd_err err;
    attnd_status rc = atomic_load(&f->cancel) ? attnd_fail(&err, ATTND_ERR_BUSY, "cancelled") : slot_init_gen(s, sl, f, &err);
    if (rc != ATTND_OK) {
        slot_finish(s, sl, NULL, rc, err.msg);
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->stats.cached_tokens += (uint64_t)f->n_prompt;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&f->mu);
    f->n_cached = f->n_prompt;
    pthread_mutex_unlock(&f->mu);
    if (f->max_tokens == 0) {
        slot_finish(s, sl, "length", ATTND_OK, NULL);
        return;
    }
    slot_token(s, sl, f->first_logits); /* a pending step keeps its own copy of the logits */
    free(f->first_logits);
    f->first_logits = NULL;
    if (sl->end_reason) slot_finish(s, sl, sl->end_reason, ATTND_OK, NULL);
}

// ---- the loop -----------------------------------------------------------------------------

/* Destroys up to 64 KV handles of deleted or removed sessions; returns how many. */
static int drain_free_list(sched *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->n_free;
    kv_seq *local[64];
    if (n > 64) n = 64;
    memcpy(local, s->to_free + s->n_free - n, (size_t)n * sizeof(*local));
    s->n_free -= n;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) kv_seq_destroy(local[i]);
    return n;
}


/* Takes queued jobs into free slots while their KV reservations fit the budget: every admitted
 * job can then grow to its end, evicting only idle caches, so none fails mid-generation. */
static void admit(sched *s) {
    for (int k = 0; k < s->n_slots; k++) {
        if (s->slots[k].job) continue;
        sched_job *f = s->ready ? ready_take(s) : NULL;
        if (f) { /* forks first: their prompt is already read, their KV reserved */
            fork_admit(s, &s->slots[k], f);
            continue;
        }
        sched_job *j = sched_queue_pop_fitting(s);
        if (!j) return;
        if (atomic_load(&j->cancel)) {
            job_fail_unstarted(s, j, ATTND_ERR_BUSY,
                               atomic_load(&s->cancel_all) ? "server is shutting down" : "cancelled");
            pthread_mutex_lock(&s->mu);
            s->n_active--;
            pthread_cond_broadcast(&s->idle);
            pthread_mutex_unlock(&s->mu);
            k--;
            continue;
        }
        attnd_err err;
        slot *sl = &s->slots[k];
        attnd_status rc = slot_start(s, sl, j, &err);
        sched_reserve(s, sl, j); /* slot_finish gives it back on every path */
        if (rc != ATTND_OK) {
            slog_error("cannot start a request: %s", err.msg);
            if (!sl->se && j->se) sl->se = j->se;
            slot_finish(s, sl, NULL, ATTND_ERR_NOMEM, err.msg);
            continue;
        }
        /* nothing to generate; with forks the prompt is still read, for them to start from */
        if (j->max_tokens == 0 && !j->prompt_logprobs && !j->capture && !j->forks)
            slot_finish(s, sl, "length", ATTND_OK, NULL);
    }
}


/* What a step's batch holds beside its entries. */
typedef struct batch_shape {
    int n_decode, n_prefill; /* decode tokens; prompt tokens */
    double pf_pos;           /* mean position of the prompt tokens */
} batch_shape;

/* The prefilling slot admitted first that has no entries in the batch being built yet. */
static slot *oldest_prefilling(sched *s) {
    slot *best = NULL;
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        if (sl->job && sl->prefilling && sl->batch_n == 0 && sl->row0 == -1 && (!best || sl->admitted < best->admitted))
            best = sl;
    }
    return best;
}

int sched_draft_room(int cap, int n_decode, bool prompts_waiting) {
    int room = cap - n_decode;
    return room <= 0 ? 0 : prompts_waiting ? room / 2 : room;
}

/* Drafts for a decoding slot (speculative decoding, attnd/spec.h), at most room, as many as the
 * slot's controller finds worth their cost in the batch st describes (which they join): never
 * past max_tokens or the context, none for a job that inspects attention or ablates heads (a mean
 * ablation's running mean would count rejected drafts). A draft that fails (the draft pool is
 * full) is none. A draft model's are only planned here and queued, to be drafted with the other
 * slots' (draft_together): the count is then at most what they will be. */
static int slot_drafts(sched *s, slot *sl, int room, spec_step *st) {
    const sched_job *j = sl->job;
    int dm = sched_job_draft_max(s, j);
    int left = j->max_tokens - sl->n_gen - 1, ctx = s->n_ctx - sl->n_past - 1;
    int max = dm < room ? dm : room;
    if (left < max) max = left;
    if (ctx < max) max = ctx;
    if (max <= 0 || j->capture || j->n_ablate || !sl->sp) return 0;
    if (max > (int)ATTND_ARRAY_LEN(sl->draft)) max = (int)ATTND_ARRAY_LEN(sl->draft);
    draft_queue *q = &s->dq;
    if (q->b && spec_uses_draft_model(sl->sp)) {
        int k = spec_plan(sl->sp, st, max);
        if (k > 0) q->sp[q->n] = sl->sp, q->k[q->n] = k, q->out[q->n] = sl->draft, q->sl[q->n++] = sl;
        return k;
    }
    int n;
    attnd_err err;
    if (spec_draft(sl->sp, st, max, sl->draft, &n, &err) == ATTND_OK) return n;
    slog_debug("%s: %s", spec_uses_mtp(sl->sp) ? "MTP block" : "draft model", err.msg);
    return 0;
}

/* The drafts the draft model's slots planned this step, drafted together: one catch-up batch and
 * one batched step per drafted position for all of them (spec_draft_batch). A failure (the draft
 * pool is full) drafts none. */
static void draft_together(sched *s) {
    draft_queue *q = &s->dq;
    attnd_err err;
    if (q->n && spec_draft_batch(q->b, q->sp, q->k, q->out, q->n, &s->spcost, &err) != ATTND_OK)
        slog_debug("draft model: %s", err.msg);
    for (int i = 0; i < q->n; i++) q->sl[i]->n_draft = q->k[i];
    q->n = 0;
}

/* The decoding slots' entries (build_batch marked them with batch_n 1), each its token and then
 * its drafts, in slot order; returns the entries, *rows their logits rows. */
static int lay_out_decode(sched *s, int *rows) {
    int n = 0;
    *rows = 0;
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        if (!sl->batch_n) continue;
        /* a recurrent state keeps its state after each drafted position, or nothing is drafted */
        if (sl->n_draft && !kv_seq_keep_steps(sl->kv, sl->n_draft)) sl->n_draft = 0;
        s->batch[n++] = (batch_entry){sl->kv, sl->next_token, sl->n_past, true};
        for (int i = 0; i < sl->n_draft; i++) s->batch[n++] = (batch_entry){sl->kv, sl->draft[i], sl->n_past + 1 + i, true};
        sl->row0 = *rows, sl->batch_n = 1 + sl->n_draft;
        *rows += sl->batch_n;
    }
    return n;
}

/* Appends the next tokens of sl's prompt to the batch, up to entry limit and the logits rows
 * (a row for the last prompt token, or for every one with prompt logprobs); returns how many. */
static int batch_add_chunk(sched *s, slot *sl, int *n, int *rows, int limit, double *pos_sum) {
    sched_job *j = sl->job;
    sl->row0 = -2; /* visited */
    for (int pos = sl->n_past; pos < j->n_prompt && *n < limit; pos++) {
        bool want = j->prompt_logprobs || pos == j->n_prompt - 1;
        if (want && *rows >= s->rows_cap) break;
        if (want && sl->row0 < 0) sl->row0 = *rows;
        if (want) (*rows)++;
        s->batch[(*n)++] = (batch_entry){sl->kv, j->prompt[pos], pos, want};
        sl->batch_n++;
        *pos_sum += pos;
    }
    return sl->batch_n;
}

/* The tenant entries of the decoding slots and how many each has (s->pick: (n_slots, 3) scratch:
 * tenants, counts, quotas); returns how many tenants. */
static int count_decoders(sched *s, int *ten, int *cnt) {
    int nt = 0;
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        sl->picked = false;
        if (!slot_decoding(sl)) continue;
        int t = 0;
        while (t < nt && ten[t] != sl->job->tenant_ix) t++;
        if (t == nt) ten[nt] = sl->job->tenant_ix, cnt[nt++] = 0;
        cnt[t]++;
    }
    return nt;
}

/*
 * Marks (picked) the decoding slots of this step; returns how many. One tenant decoding: all. Several:
 * the step holds as many decode rows as keep its cost within twice that of the lightest tenant's
 * rows alone (sched_decode_rows, from the learned step costs), shared out evenly (a tenant with
 * fewer sequences leaves its part to the others, everyone gets one), each tenant's sequences
 * taken least recently decoded first. So one tenant's n = 16 choices never slow another
 * tenant's stream below about half its speed alone, however much a row costs (a big vocabulary's
 * output rows on a small model), while rows that cost little all go in.
 */
static int pick_decoders(sched *s) {
    int *ten = s->pick, *cnt = s->pick + s->n_slots, *quota = s->pick + 2 * s->n_slots;
    int nt = count_decoders(s, ten, cnt), total = 0, least = 0, picked = 0;
    for (int t = 0; t < nt; t++) total += cnt[t], least = !t || cnt[t] < least ? cnt[t] : least;
    int left = nt > 1 ? sched_decode_rows(s, least, total) : total;
    for (int done = 0; done < nt; done++) { /* water-filling, smallest tenant first */
        int t = -1;
        for (int i = 0; i < nt; i++)
            if (cnt[i] >= 0 && (t < 0 || cnt[i] < cnt[t])) t = i;
        int share = left / (nt - done), q = cnt[t] < share ? cnt[t] : share > 0 ? share : 1;
        quota[t] = q, left -= q, cnt[t] = -1; /* done */
    }
    for (int t = 0; t < nt; t++)
        for (int q = 0; q < quota[t]; q++) { /* the tenant's least recently decoded slot */
            slot *best = NULL;
            for (int k = 0; k < s->n_slots; k++) {
                slot *sl = &s->slots[k];
                if (slot_decoding(sl) && !sl->picked && sl->job->tenant_ix == ten[t] && (!best || sl->last_step < best->last_step))
                    best = sl;
            }
            if (best) best->picked = true, picked++;
        }
    return picked;
}

/* Builds the step's batch into s->batch; returns its size. Each decoding slot's token comes
 * first; drafts take only the room the decoding slots leave (half of it while a prompt waits to
 * prefill), so speculation backs off as the batch fills. Prefill chunks stop where the logits
 * rows or the prefill cap run out. */
static int build_batch(sched *s, batch_shape *sh) {
    int n = 0, rows = 0, n_dec = pick_decoders(s), waiting = 0;
    double pos_sum = 0;
    *sh = (batch_shape){0};
    for (int k = 0; k < s->n_slots; k++) waiting += s->slots[k].job && s->slots[k].prefilling;
    int room = sched_draft_room(s->max_batch < s->rows_cap ? s->max_batch : s->rows_cap, n_dec, waiting > 0);
    spec_step st = {&s->spcost, n_dec, n_dec}; /* the decoding rows, then each slot's drafts */
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        sl->batch_n = 0;
        sl->row0 = -1;
        sl->n_draft = 0;
        if (!slot_decoding(sl) || !sl->picked || n >= s->max_batch || rows >= s->rows_cap) continue;
        sl->batch_n = 1; /* laid out below, once the drafts are known */
        sl->last_step = s->stats.steps + 1; /* stats.steps: written by this thread only */
        sh->n_decode++;
        sl->n_draft = room > 0 ? slot_drafts(s, sl, room, &st) : 0;
        n += 1 + sl->n_draft, rows += 1 + sl->n_draft, room -= sl->n_draft;
    }
    draft_together(s);
    n = lay_out_decode(s, &rows);
    /* prefill, oldest admission first; the cap is sized for the oldest prompt's position, less
     * what a step of fresh prompts just before took from it (the streams' gap stays one budget) */
    slot *best = oldest_prefilling(s);
    int cap = best ? sched_prefill_cap(s, sh->n_decode, waiting, best->n_past) - s->fresh_debt : 0;
    int limit = n + (best && cap < 1 ? 1 : cap); /* the prompt always moves */
    if (limit > s->max_batch) limit = s->max_batch;
    for (; best && n < limit; best = oldest_prefilling(s)) sh->n_prefill += batch_add_chunk(s, best, &n, &rows, limit, &pos_sum);
    sh->pf_pos = sh->n_prefill ? pos_sum / sh->n_prefill : 0;
    return n;
}

/* The fresh slot (admitted, no chunk read) that goes next into a step of fresh prompts: the one
 * admitted first, so they go in the tenants' turns of fair admission (sched_kv.c: a newcomer
 * beside another tenant's batch is admitted before that tenant's next job). NULL when every
 * fresh slot is in the batch already. */
static slot *fresh_next(sched *s) {
    slot *best = NULL;
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        if (sl->job && sl->fresh && sl->row0 == -1 && (!best || sl->admitted < best->admitted)) best = sl;
    }
    return best;
}

/* Whether this step reads fresh prompts alone: some were admitted beside decoding streams and the
 * last step was not such a step already (the streams then decode now: at most one such step
 * between two decode steps). */
static bool fresh_step_due(const sched *s) {
    bool fresh = false, decoding = false;
    for (int k = 0; k < s->n_slots; k++) {
        const slot *sl = &s->slots[k];
        fresh |= sl->job && sl->fresh;
        decoding |= slot_decoding(sl);
    }
    return fresh && decoding && !s->fresh_last;
}

/* A step of fresh prompts: their first chunks alone, in admission order (fresh_next), within the
 * prefill the step would have held beside the streams, so that the streams' next token comes
 * no later than before and the newcomers' first token comes before it. */
static int build_fresh_batch(sched *s, batch_shape *sh) {
    int n = 0, rows = 0, n_dec = 0, waiting = 0;
    double pos_sum = 0;
    *sh = (batch_shape){0};
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        sl->batch_n = 0, sl->row0 = -1, sl->n_draft = 0;
        n_dec += slot_decoding(sl);
        waiting += sl->job && sl->prefilling;
    }
    slot *sl = fresh_next(s);
    int limit = sl ? sched_prefill_cap(s, n_dec, waiting, sl->n_past) : 0;
    if (limit > s->max_batch) limit = s->max_batch;
    for (; sl && n < limit; sl = fresh_next(s)) sh->n_prefill += batch_add_chunk(s, sl, &n, &rows, limit, &pos_sum);
    sh->pf_pos = sh->n_prefill ? pos_sum / sh->n_prefill : 0;
    return n;
}

/* The step's batch: fresh prompts alone (build_fresh_batch) or the usual one (build_batch). */
static int build_step(sched *s, batch_shape *sh, bool fresh) {
    return fresh ? build_fresh_batch(s, sh) : build_batch(s, sh);
}

/* Frees KV for the step: evicts one idle cache; false when there was nothing to evict. */
static bool evict_one(sched *s) {
    kv_seq *kv = sess_evict_lru(s->store);
    if (!kv) return false;
    kv_seq_destroy(kv);
    pthread_mutex_lock(&s->mu);
    s->stats.evictions++;
    pthread_mutex_unlock(&s->mu);
    return true;
}

static slot *newest_prefilling(sched *s) {
    slot *pick = NULL;
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        if (sl->job && (!pick || (sl->prefilling && !pick->prefilling) ||
                        (sl->prefilling == pick->prefilling && sl->admitted > pick->admitted)))
            pick = sl;
    }
    return pick;
}


/* Applies cancellations: shutdown marks everything; cancelled slots are freed. */
static void apply_cancels(sched *s) {
    if (atomic_load(&s->cancel_all)) {
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < s->q_len; i++) atomic_store(&s->queue[(s->q_head + i) % s->queue_limit]->cancel, true);
        pthread_mutex_unlock(&s->mu);
        for (int k = 0; k < s->n_slots; k++)
            if (s->slots[k].job) atomic_store(&s->slots[k].job->cancel, true);
        for (sched_job *f = s->ready; f; f = f->next) atomic_store(&f->cancel, true);
    }
    for (int k = 0; k < s->n_slots; k++)
        if (s->slots[k].job && atomic_load(&s->slots[k].job->cancel)) {
            slog_info("request cancelled after %d generated tokens; slot freed", s->slots[k].n_gen);
            slot_finish(s, &s->slots[k], NULL, ATTND_ERR_BUSY,
                        atomic_load(&s->cancel_all) ? "server is shutting down" : "cancelled");
        }
}

/* Evaluates the step's batch (*n entries, rebuilt if a job had to give way); false when there
 * is nothing left to publish. */
static bool eval_batch(sched *s, int *n, batch_shape *sh, bool fresh) {
    attnd_err err;
    attnd_status rc;
    /* jobs that inspect attention are hooked into the engine for the evaluations that hold them */
    while ((rc = attn_capture_eval(s->inspecting, s->eng, s->batch, *n, s->logits, &err)) == ATTND_ERR_NOMEM) {
        if (drain_free_list(s) || evict_one(s)) continue;
        /* nothing idle to evict: cannot happen while reservations hold; the newest job gives way */
        slot *victim = newest_prefilling(s);
        slog_error("KV budget exhausted despite the reservations; failing the newest request");
        slot_finish(s, victim, NULL, ATTND_ERR_NOMEM, "KV cache budget exhausted; retry later");
        if ((*n = build_step(s, sh, fresh)) == 0) return false;
    }
    if (rc == ATTND_OK || s->yielded) return rc == ATTND_OK;
    slog_error("engine_eval failed: %s", err.msg);
    for (int k = 0; k < s->n_slots; k++)
        if (s->slots[k].job && s->slots[k].batch_n) slot_finish(s, &s->slots[k], NULL, rc, err.msg);
    return false;
}

/* A prefilling slot's chunk was evaluated in a step with n_decode decode tokens: prompt
 * logprobs, and once the whole prompt is read, its forks start and its first token is sampled.
 * Returns the tokens generated (0 or 1). */
static int slot_prefilled(sched *s, slot *sl, double dt, int n_decode) {
    sched_job *j = sl->job;
    int first = sl->n_past;
    sl->n_past += sl->batch_n;
    pthread_mutex_lock(&j->mu);
    j->prompt_ms += dt * 1e3;
    if (sl->fresh) { /* stats.steps: written by this thread only */
        j->first_chunk_alone = n_decode == 0;
        j->first_chunk_step = s->stats.steps;
    }
    sl->fresh = false;
    if (j->prompt_logprobs) /* row i predicts prompt token first+i+1 */
        for (int i = 0; i < sl->batch_n && first + i + 1 < j->n_prompt; i++) {
            token_logprob lp, dummy;
            int p = first + i + 1, top = j->top_logprobs > 0 ? j->top_logprobs : 0;
            sampler_logprobs(s->logits + (size_t)(sl->row0 + i) * s->n_vocab, s->n_vocab, j->prompt[p], top, &lp,
                             top ? j->prompt_tops + (size_t)p * top : &dummy);
            j->prompt_lp[first + i + 1] = lp.logprob;
        }
    pthread_mutex_unlock(&j->mu);
    if (sl->n_past < j->n_prompt) return 0;
    sl->prefilling = false;
    int last_row = sl->row0 + (j->prompt_logprobs ? sl->batch_n - 1 : 0);
    forks_start(s, sl, s->logits + (size_t)last_row * s->n_vocab);
    if (j->max_tokens == 0) {
        slot_finish(s, sl, "length", ATTND_OK, NULL);
        return 0;
    }
    return slot_token(s, sl, s->logits + (size_t)last_row * s->n_vocab);
}

/* Counts a step of dt seconds into the statistics. */
static void count_step(sched *s, const batch_shape *sh, double dt, uint64_t n_gen) {
    pthread_mutex_lock(&s->mu);
    s->stats.steps++;
    s->stats.prompt_tokens += (uint64_t)sh->n_prefill;
    s->stats.generated_tokens += n_gen;
    if (sh->n_decode) s->stats.decode_seconds += dt;
    if (sh->n_prefill) s->stats.prompt_seconds += dt;
    double now = attnd_now_s();
    if (now - s->rate_t0 >= 1.0) {
        s->stats.last_tok_per_s = (s->stats.generated_tokens - s->rate_tok0) / (now - s->rate_t0);
        s->rate_t0 = now;
        s->rate_tok0 = s->stats.generated_tokens;
    }
    pthread_mutex_unlock(&s->mu);
}

/* A decoding slot's rows were evaluated: samples from them in order while each token equals the
 * next draft (attnd/spec.h), then drops the rejected drafts from the KV. Returns the tokens
 * generated. */
static int slot_verify(sched *s, slot *sl) {
    int r = 0, kept = 0, made = 0;
    sl->n_past += 1; /* next_token */
    for (;; r++) {
        if (!slot_token(s, sl, s->logits + (size_t)(sl->row0 + r) * s->n_vocab)) break; /* pending: drafts dropped */
        made++;
        bool agree = r < sl->n_draft && sl->next_token == sl->draft[r];
        kept += agree;
        if (sl->end_reason || !agree) break;
        sl->n_past += 1; /* the draft is the token sampled: its position holds */
    }
    if (sl->n_draft) {
        if (sl->sp) spec_count(sl->sp, sl->n_draft, kept);
        kv_seq_truncate(sl->kv, sl->n_past);
        pthread_mutex_lock(&s->mu);
        s->stats.spec_drafted += (uint64_t)sl->n_draft;
        s->stats.spec_accepted += (uint64_t)kept;
        pthread_mutex_unlock(&s->mu);
    }
    return made;
}

/* Whether the step about to run may be given up when a request that can start arrives during
 * it (engine_set_yield): a decode step, not a step of fresh prompts, with no drafts (a drafter
 * has moved on already), no attention capture, and none given up since the last decode step ran
 * (the streams lose at most one step's work per step they make). */
static bool yield_allowed(const sched *s, const batch_shape *sh, bool fresh) {
    if (fresh || !sh->n_decode || s->yield_spent || s->inspecting) return false;
    for (int k = 0; k < s->n_slots; k++)
        if (s->slots[k].job && s->slots[k].n_draft) return false;
    return true;
}

/* The engine's question after each layer (scheduler thread): give this step up now? */
static bool step_yield(void *user) {
    sched *s = user;
    if (!s->yield_ok || !atomic_load(&s->newcomer)) return false;
    s->yielded = true;
    return true;
}

/*
 * One step. Prompts admitted beside decoding streams first get a step of their own: their first
 * chunks alone, before the streams' next decode step, so a newcomer's time to first token is the
 * running step plus its own prefill, not a step shared with every stream's decode (with many
 * streams on a small model that costs several times a short prefill). The bound on the streams:
 * the step after it always decodes, and it takes its prompt tokens from that step's prefill
 * budget (fresh_debt), so the streams' gap stays what one mixed step would have been.
 */
static bool step(sched *s) {
    apply_cancels(s);
    atomic_store(&s->newcomer, false); /* who is queued now is admitted now */
    admit(s);
    s->mask_deadline = mask_deadline(s, attnd_now_s()); /* the grammars' share of this step */
    int resumed = resume_pending(s);
    if (resumed) {
        pthread_mutex_lock(&s->mu);
        s->stats.generated_tokens += (uint64_t)resumed;
        pthread_mutex_unlock(&s->mu);
        finish_ended(s); /* a resumed step that ended its sequence */
    }
    bool fresh = fresh_step_due(s);
    batch_shape sh;
    int n = build_step(s, &sh, fresh);
    if (n == 0) return false;
    double t0 = attnd_now_s();
    s->yield_ok = yield_allowed(s, &sh, fresh);
    s->yielded = false;
    bool ok = eval_batch(s, &n, &sh, fresh);
    s->yield_ok = false;
    if (s->yielded) { /* nothing was published: the next step starts the newcomer, then this again */
        s->yield_spent = true;
        pthread_mutex_lock(&s->mu);
        s->stats.steps_yielded++;
        pthread_mutex_unlock(&s->mu);
        return true;
    }
    if (ok && sh.n_decode) s->yield_spent = false;
    s->fresh_last = fresh && ok;
    s->fresh_debt = fresh && ok ? sh.n_prefill : 0;
    if (!ok) return true;
    double dt = attnd_now_s() - t0;
    sched_learn_costs(s, dt * 1e3, sh.n_decode, sh.n_prefill, sh.pf_pos);
    if (sh.n_prefill == 0) spec_cost_learn(&s->spcost, n, dt * 1e3); /* what drafts cost (spec.h) */
    uint64_t n_gen = 0;
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        if (!sl->job || !sl->batch_n) continue;
        if (sl->prefilling) {
            n_gen += (uint64_t)slot_prefilled(s, sl, dt, sh.n_decode);
            continue;
        }
        pthread_mutex_lock(&sl->job->mu);
        sl->job->gen_ms += dt * 1e3;
        pthread_mutex_unlock(&sl->job->mu);
        n_gen += (uint64_t)slot_verify(s, sl);
    }
    finish_ended(s);
    /* live KV sizes of active sessions, for GET /v1/sessions */
    for (int k = 0; k < s->n_slots; k++)
        if (s->slots[k].job && s->slots[k].se) sess_set_kv(s->store, s->slots[k].se, s->slots[k].kv, s->slots[k].n_past,
                                         kv_seq_bytes(s->slots[k].kv));
    count_step(s, &sh, dt, n_gen);
    return true;
}

// ---- tasks on the scheduler thread (sched_run_task) -----------------------------------------

typedef struct sched_task {
    sched_task_spec spec;
    char tenant[SCHED_TENANT_MAX + 1];
    int tenant_ix;        /* its entry in the tenants while queued; -1 = none (out of memory) */
    bool planned;         /* its plan call ran: kv_bytes is known */
    bool reserved;        /* kv_bytes are counted in s->reserved */
    size_t kv_bytes;      /* the most KV it holds in the pool at once (its plan) */
    long held;            /* KV bytes it holds now: what the pool gained in its turns */
    attnd_status st;
    attnd_err err;
    bool done;
    struct sched_task *next;
} sched_task;

/* The task ended with st: its reservation and tenant entry go, its caller wakes. Returns true
 * (for task_turn: it ended). */
static bool task_end(sched *s, sched_task *t, attnd_status st) {
    sched_tenant_exit(s, t->tenant_ix);
    pthread_mutex_lock(&s->mu);
    if (t->reserved) s->reserved -= t->kv_bytes;
    t->st = st;
    t->done = true;
    pthread_cond_broadcast(&s->task_done);
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* Counts t's kv_bytes into the reservations when they fit beside the running jobs'; false while
 * they wait (*never: they can never fit). */
static bool task_reserve(sched *s, sched_task *t, bool *never) {
    pthread_mutex_lock(&s->mu);
    *never = t->kv_bytes > s->stats.kv_budget;
    t->reserved = !*never && s->reserved + t->kv_bytes <= s->stats.kv_budget;
    if (t->reserved) s->reserved += t->kv_bytes;
    /* while it waits, queued jobs wait too (else they could take the KV it waits for for ever) */
    s->task_kv_waiting = t->reserved || *never ? 0 : t->kv_bytes;
    pthread_mutex_unlock(&s->mu);
    return t->reserved;
}

static int n_decoding(const sched *s) {
    int n = 0;
    for (int k = 0; k < s->n_slots; k++) n += slot_decoding(&s->slots[k]);
    return n;
}

/* One turn of t: its plan first, then (once its KV is reserved, idle caches evicted to make it
 * free) a turn sized to the streams decoding beside it, charged to its tenant. true when the
 * task ended. */
static bool task_turn(sched *s, sched_task *t) {
    sched_task_turn turn = {.e = s->eng, .pool = s->pool, .plan = !t->planned};
    attnd_status st = ATTND_OK;
    if (turn.plan) {
        st = t->spec.fn(t->spec.user, &turn, &t->err);
        t->planned = true;
        t->kv_bytes = turn.kv_bytes;
        if (st != ATTND_OK) return task_end(s, t, st);
    }
    bool never = false;
    if (!t->reserved && !task_reserve(s, t, &never)) {
        if (!never) return false; /* after the next step */
        st = attnd_fail(&t->err, ATTND_ERR_NOMEM, "the task needs %zu bytes of KV cache; kv_budget_mb allows %zu",
                        t->kv_bytes, s->stats.kv_budget);
        turn = (sched_task_turn){.e = s->eng, .pool = s->pool, .stop = true};
        t->spec.fn(t->spec.user, &turn, &t->err); /* it releases what it allocated in its plan */
        return task_end(s, t, st);
    }
    long want = (long)t->kv_bytes - t->held;
    while ((long)kv_pool_bytes_used(s->pool) + want > (long)s->stats.kv_budget && (drain_free_list(s) || evict_one(s))) {}
    int n_dec = n_decoding(s);
    turn = (sched_task_turn){.e = s->eng, .pool = s->pool, .max_entries = sched_task_cap(s, n_dec)};
    long used0 = (long)kv_pool_bytes_used(s->pool);
    double t0 = attnd_now_s();
    st = t->spec.fn(t->spec.user, &turn, &t->err);
    sched_task_learn(s, (attnd_now_s() - t0) * 1e3, turn.work, turn.max_entries, n_dec);
    t->held += (long)kv_pool_bytes_used(s->pool) - used0;
    sched_tenant_charge(s, t->tenant_ix, (double)turn.work);
    if (st != ATTND_OK || !turn.more) return task_end(s, t, st);
    return false;
}

/* The task to run a turn of (s->mu held), unlinked: the oldest of the least charged tenant, so
 * that tenants take turns with their tasks (embedding requests, sweeps) as with their jobs, and
 * one client's many requests do not take more turns than another's one. NULL when none. */
static sched_task *task_pick(sched *s) {
    sched_task **best = NULL;
    double least = 0;
    for (sched_task **p = &s->tasks; *p; p = &(*p)->next) {
        int ix = (*p)->tenant_ix;
        double served = ix >= 0 ? s->tenants[ix].served : 0;
        if (!best || served < least) best = p, least = served;
    }
    if (!best) return NULL;
    sched_task *t = *best;
    *best = t->next;
    return t;
}

/* One turn of the next task (task_pick); one with more to do goes to the back of the list, so
 * tasks queued meanwhile, and the next step, come first. Stopping: every task ends BUSY, each
 * told to release what it holds. */
static void run_tasks(sched *s, bool stopping) {
    do {
        pthread_mutex_lock(&s->mu);
        sched_task *t = task_pick(s);
        pthread_mutex_unlock(&s->mu);
        if (!t) return;
        if (stopping) {
            sched_task_turn turn = {.e = s->eng, .pool = s->pool, .stop = true};
            if (t->planned) t->spec.fn(t->spec.user, &turn, &t->err);
            task_end(s, t, attnd_fail(&t->err, ATTND_ERR_BUSY, "the server is stopping"));
            continue;
        }
        if (task_turn(s, t)) return;
        pthread_mutex_lock(&s->mu);
        sched_task **tail = &s->tasks;
        while (*tail) tail = &(*tail)->next;
        t->next = NULL;
        *tail = t;
        pthread_mutex_unlock(&s->mu);
    } while (stopping);
}

attnd_status sched_run_task(sched *s, const sched_task_spec *spec, attnd_err *err) {
    sched_task t = {.spec = *spec, .tenant_ix = -1};
    snprintf(t.tenant, sizeof(t.tenant), "%s", spec->tenant ? spec->tenant : "");
    pthread_mutex_lock(&s->mu);
    if (s->stop) {
        pthread_mutex_unlock(&s->mu);
        return attnd_fail(err, ATTND_ERR_BUSY, "the server is stopping");
    }
    t.tenant_ix = sched_tenant_enter(s, t.tenant);
    sched_task **tail = &s->tasks;
    while (*tail) tail = &(*tail)->next;
    *tail = &t;
    pthread_cond_signal(&s->wake);
    while (!t.done) pthread_cond_wait(&s->task_done, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (t.st != ATTND_OK) *err = t.err;
    return t.st;
}

typedef struct seq_list {
    sched *s;
    sched_seq_info *out;
    int cap, n;
} seq_list;

/* sched_list_seqs' task: the slots are the scheduler thread's, the queue the mutex's. */
static attnd_status list_seqs(void *user, sched_task_turn *turn, attnd_err *err) {
    (void)err;
    seq_list *l = user;
    sched *s = l->s;
    if (turn->plan || turn->stop) return ATTND_OK; /* no KV; the list is read on the next turn */
    for (int k = 0; k < s->n_slots && l->n < l->cap; k++) {
        const slot *sl = &s->slots[k];
        if (!sl->job) continue;
        l->out[l->n++] = (sched_seq_info){k, sl->admitted, sl->job->n_prompt, sl->job->n_cached, sl->n_past,
                                          sl->n_gen, sl->job->max_tokens, sl->prefilling};
    }
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < s->q_len && l->n < l->cap; k++) {
        const sched_job *j = s->queue[(s->q_head + k) % s->queue_limit];
        l->out[l->n++] = (sched_seq_info){-1, 0, j->n_prompt, 0, 0, 0, j->max_tokens, false};
    }
    pthread_mutex_unlock(&s->mu);
    return ATTND_OK;
}

attnd_status sched_list_seqs(sched *s, sched_seq_info *out, int cap, int *n, attnd_err *err) {
    seq_list l = {s, out, cap, 0};
    attnd_status st = sched_run_task(s, &(sched_task_spec){list_seqs, &l, "slots"}, err);
    *n = l.n;
    return st;
}

/* A one-line status for the service manager (systemctl status), at most every 5 s and only
 * when it changed. */
static void report_status(sched *s, double now, double *last, char *prev, size_t prev_n) {
    if (!s->hooks.on_status || now - *last < 5.0) return;
    *last = now;
    pthread_mutex_lock(&s->mu);
    int active = s->n_active, queued = s->q_len;
    double rate = s->stats.last_tok_per_s;
    pthread_mutex_unlock(&s->mu);
    char line[128];
    snprintf(line, sizeof(line), "serving: %d active, %d queued, %.0f tokens/s", active, queued, active ? rate : 0.0);
    if (!strcmp(line, prev)) return;
    snprintf(prev, prev_n, "%s", line);
    s->hooks.on_status(s->hooks.user, line);
}

/* Several models: marks this scheduler working or resting in the shared threads, and before a
 * step takes its share of them (cpushare.h). */
static void share_threads(sched *s, bool working) {
    if (!s->share) return;
    cpushare_mark(s->share, &s->share_on, working);
    if (!working) return;
    int t = cpushare_threads(s->share, s->own_threads);
    if (t != engine_threads(s->eng)) engine_set_threads(s->eng, t);
    if (s->deng && t != engine_threads(s->deng)) engine_set_threads(s->deng, t);
}

static void *sched_main(void *arg) {
    sched *s = arg;
    double last_wd = 0, last_status = 0, last_expire = 0;
    char status[128] = "";
    for (;;) {
        double now = attnd_now_s();
        if (s->hooks.on_watchdog && (now - last_wd) * 1e3 >= s->wd_ms / 2.0) {
            s->hooks.on_watchdog(s->hooks.user);
            last_wd = now;
        }
        report_status(s, now, &last_status, status, sizeof(status));
        if (now - last_expire >= 1.0) { /* session TTL: a cheap scan once a second */
            sess_expire(s->store);
            last_expire = now;
        }
        drain_free_list(s);
        run_tasks(s, false);
        pthread_mutex_lock(&s->mu);
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            run_tasks(s, true);
            share_threads(s, false);
            break;
        }
        if (s->n_active == 0 && s->q_len == 0 && s->n_free == 0 && !s->tasks) {
            struct timespec ts;
            attnd_deadline(&ts, s->wd_ms / 2);
            pthread_mutex_unlock(&s->mu);
            share_threads(s, false);
            pthread_mutex_lock(&s->mu);
            pthread_cond_timedwait(&s->wake, &s->mu, &ts);
            s->stats.kv_used = kv_pool_bytes_used(s->pool);
            s->stats.kv_checkpoint_bytes = kv_pool_checkpoint_bytes(s->pool);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        share_threads(s, true);
        bool stepped = step(s);
        if (!stepped) share_threads(s, false); /* waiting on its clients: no CPU to share */
        size_t used = kv_pool_bytes_used(s->pool), ckpt = kv_pool_checkpoint_bytes(s->pool);
        pthread_mutex_lock(&s->mu);
        s->stats.kv_used = used;
        s->stats.kv_checkpoint_bytes = ckpt;
        if (stepped && s->share && engine_threads(s->eng) < s->own_threads) s->stats.steps_shared++;
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

// ---- public -------------------------------------------------------------------------------

/* The draft model of cfg->draft_model (speculative decoding): loaded, checked against the model's
 * vocabulary, with its own engine and a KV pool of one full context per slot. */
static attnd_status draft_open(sched *s, const server_settings *cfg, attnd_err *err) {
    s->draft_min_p = cfg->draft_min_p, s->draft_adapt = cfg->draft_adapt;
    if (!cfg->draft_model || !*cfg->draft_model) return ATTND_OK;
    attnd_status rc = model_load(&s->dm, cfg->draft_model, err);
    if (rc != ATTND_OK) return rc;
    if ((rc = spec_vocab_check(s->m, s->dm, err)) != ATTND_OK) return rc;
    if (!spec_supported(s->dm))
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "draft_model %s has sliding-window layers, which speculation "
                          "cannot roll back", cfg->draft_model);
    if (model_info_get(s->dm)->n_recurrent_layers) /* its rollbacks would recompute it from the start */
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "draft_model %s has Gated DeltaNet layers: a hybrid model cannot "
                          "be a draft model yet", cfg->draft_model);
    size_t budget = kv_context_bytes(s->dm, s->n_ctx, KV_F16) * (size_t)s->n_slots;
    if ((rc = kv_pool_create(&s->dpool, s->dm, budget, KV_F16, err)) != ATTND_OK) return rc;
    s->dpool_bytes = budget;
    if ((rc = engine_create(&s->deng, s->dm, 512, cfg->threads, err)) != ATTND_OK) return rc;
    draft_queue *q = &s->dq;
    if ((rc = spec_batch_create(&q->b, s->deng, s->n_slots, err)) != ATTND_OK) return rc;
    q->sp = malloc(sizeof(*q->sp) * (size_t)s->n_slots), q->k = malloc(sizeof(*q->k) * (size_t)s->n_slots);
    q->out = malloc(sizeof(*q->out) * (size_t)s->n_slots), q->sl = malloc(sizeof(*q->sl) * (size_t)s->n_slots);
    if (!q->sp || !q->k || !q->out || !q->sl) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for the draft queue");
    return ATTND_OK;
}

size_t sched_draft_kv_bytes(const sched *s) { return s->dpool_bytes; }

/* Where the session store sends the KV of sessions it removes itself (TTL, LRU). */
static void kv_sink(void *user, struct kv_seq *kv) { sched_free_kv(user, kv); }


attnd_status sched_create(sched **out, const model *m, const tokenizer *tok, sess_store *store,
                          const server_settings *cfg, attnd_err *err) {
    *out = NULL;
    sched *s = calloc(1, sizeof(*s));
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    s->ready_tail = &s->ready;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    pthread_cond_init(&s->task_done, NULL);
    s->m = m;
    s->tok = tok;
    s->store = store;
    s->hooks = cfg->hooks;
    s->wd_ms = cfg->watchdog_interval_ms > 0 ? cfg->watchdog_interval_ms : 1000;
    const model_info *mi = model_info_get(m);
    s->n_vocab = mi->n_vocab;
    s->n_ctx = cfg->ctx_size > 0 && cfg->ctx_size < mi->n_ctx ? cfg->ctx_size : mi->n_ctx;
    s->tenant_slots = cfg->max_parallel > 0 ? cfg->max_parallel : 16;
    s->n_slots = s->tenant_slots + 1; /* one more than a tenant may hold: another finds it free */
    s->max_batch = cfg->max_batch > s->n_slots ? cfg->max_batch : s->n_slots;
    /* the model's own MTP block drafts unless a draft model does or the setting is off; its cache
     * is left out of the pool otherwise */
    s->mtp = cfg->mtp && mi->mtp && spec_supported(m) && !(cfg->draft_model && *cfg->draft_model);
    s->draft_max = !spec_supported(m) ? -1 : cfg->draft_max == 0 && s->mtp ? cfg->mtp_draft_max : cfg->draft_max;
    s->queue_limit = cfg->queue_limit > 0 ? cfg->queue_limit : 1;
    s->max_anon = s->n_slots + 4;
    /* logits rows: one per decoding slot plus prefill rows, within ~64 MiB for big vocabularies */
    size_t cap = ((size_t)64 << 20) / ((size_t)s->n_vocab * sizeof(float));
    s->rows_cap = (int)(cap < (size_t)s->max_batch ? cap : (size_t)s->max_batch);
    if (s->rows_cap < s->n_slots + 1) s->rows_cap = s->n_slots + 1;
    if (s->rows_cap > s->max_batch) s->rows_cap = s->max_batch;
    attnd_status rc = ATTND_ERR_NOMEM;
    s->logits = malloc((size_t)s->rows_cap * s->n_vocab * sizeof(float));
    s->batch = malloc((size_t)s->max_batch * sizeof(batch_entry));
    s->slots = calloc((size_t)s->n_slots, sizeof(slot));
    s->pick = malloc((size_t)s->n_slots * 3 * sizeof(int));
    s->queue = calloc((size_t)s->queue_limit, sizeof(sched_job *));
    s->cap_free = 16;
    s->to_free = malloc((size_t)s->cap_free * sizeof(kv_seq *));
    if (!s->logits || !s->batch || !s->slots || !s->pick || !s->queue || !s->to_free) {
        attnd_fail(err, rc, "out of memory allocating scheduler buffers");
        goto fail;
    }
    size_t budget = cfg->kv_budget_mb ? cfg->kv_budget_mb << 20 : (size_t)1 << 30;
    if ((rc = kv_pool_create(&s->pool, m, budget, cfg->kv_f32 ? KV_F32 : (kv_type)cfg->kv_type, err)) != ATTND_OK) goto fail;
    if ((rc = kv_pool_set_checkpoints(s->pool, cfg->kv_checkpoints, cfg->kv_checkpoint_interval, err)) != ATTND_OK)
        goto fail;
    if (!s->mtp && (rc = kv_pool_set_mtp(s->pool, false, err)) != ATTND_OK) goto fail;
    if ((rc = sched_check_budget(s, budget, err)) != ATTND_OK) goto fail;
    s->budget_ms = cfg->prefill_budget_ms;
    if ((rc = engine_create(&s->eng, m, s->max_batch, cfg->threads, err)) != ATTND_OK) goto fail;
    engine_set_yield(s->eng, step_yield, s);
    s->share = cfg->cpu_share;
    s->own_threads = engine_threads(s->eng);
    if ((rc = draft_open(s, cfg, err)) != ATTND_OK) goto fail;
    s->stats.kv_budget = kv_pool_bytes_budget(s->pool);
    hist_init_all(&s->stats);
    s->stats.slots = s->tenant_slots;
    s->rate_t0 = attnd_now_s();
    if (pthread_create(&s->th, NULL, sched_main, s) != 0) {
        rc = attnd_fail(err, ATTND_ERR_NOMEM, "cannot start the scheduler thread");
        goto fail;
    }
    s->th_started = true;
    sess_store_set_kv_sink(store, kv_sink, s);
    *out = s;
    return ATTND_OK;
fail:
    sched_destroy(s);
    return rc;
}

static void destroy_kv(struct kv_seq *kv) { kv_seq_destroy(kv); }

void sched_destroy(sched *s) {
    if (!s) return;
    if (s->th_started) {
        attnd_thread_stop(s->th, &s->mu, &s->wake, &s->stop);
        sess_store_set_kv_sink(s->store, NULL, NULL);
    }
    /* the thread is gone: this thread now owns the engine and every KV handle */
    for (int k = 0; s->slots && k < s->n_slots; k++)
        if (s->slots[k].job) slot_finish(s, &s->slots[k], NULL, ATTND_ERR_BUSY, "server is shutting down");
    while (s->ready) {
        sched_job *f = s->ready;
        s->ready = f->next;
        f->next = NULL;
        s->n_active--;
        kv_seq_destroy(f->fork_kv); /* before the pool goes; the HTTP side may hold the job longer */
        f->fork_kv = NULL;
        job_fail_unstarted(s, f, ATTND_ERR_BUSY, "server is shutting down");
    }
    while (s->q_len) {
        sched_job *j = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->queue_limit;
        s->q_len--;
        job_fail_unstarted(s, j, ATTND_ERR_BUSY, "server is shutting down");
    }
    for (int i = 0; i < s->n_free; i++) kv_seq_destroy(s->to_free[i]);
    if (s->store) sess_take_all_kv(s->store, destroy_kv);
    engine_destroy(s->eng);
    spec_batch_destroy(s->dq.b);
    free(s->dq.sp), free(s->dq.k), free(s->dq.out), free(s->dq.sl);
    engine_destroy(s->deng);
    kv_pool_destroy(s->dpool); /* the slots' drafters went with them */
    model_destroy(s->dm);
    kv_pool_destroy(s->pool);
    free(s->logits);
    free(s->batch);
    free(s->slots);
    free(s->pick);
    free(s->queue);
    free(s->to_free);
    free(s->tenants);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->task_done);
    grammar_vocab_destroy(s->gvocab);
    free(s);
}


/* Whether j (just queued, s->mu held) can take a slot at the next admission: its tenant holds
 * fewer than its share and some slot is free. Then a running step may give way to it. */
static bool slot_free_for(const sched *s, const sched_job *j) {
    int running = 0;
    for (int i = 0; i < s->n_tenants; i++) running += s->tenants[i].running;
    return j->tenant_ix >= 0 && s->tenants[j->tenant_ix].running < s->tenant_slots && running < s->n_slots &&
           !j->se; /* a session turn may wait for its own cache: no gain in stopping for it */
}

attnd_status sched_submit(sched *s, sched_job *j, attnd_err *err) {
    pthread_mutex_lock(&s->mu);
    attnd_status rc = ATTND_OK;
    if (s->stop) rc = attnd_fail(err, ATTND_ERR_BUSY, "server is shutting down");
    else if (j->n_prompt < 1 || j->n_prompt + (j->max_tokens > 0) > s->n_ctx)
        rc = attnd_fail(err, ATTND_ERR_INVALID, "the prompt has %d tokens; the context holds %d", j->n_prompt, s->n_ctx);
    else if (sched_group_kv_bytes(s, j) > s->stats.kv_budget)
        rc = attnd_fail(err, ATTND_ERR_INVALID,
                        "the request needs %zu bytes of KV cache (prompt %d + max_tokens %d tokens, %d choices sharing "
                        "the prompt) but kv_budget_mb allows %zu bytes in all; lower max_tokens or n",
                        sched_group_kv_bytes(s, j), j->n_prompt, j->max_tokens, 1 + sched_n_forks(j), s->stats.kv_budget);
    else if (s->q_len >= s->queue_limit)
        rc = attnd_fail(err, ATTND_ERR_BUSY, "request queue is full (%d waiting); retry later", s->q_len);
    else if (!sched_tenant_join(s, j))
        rc = attnd_fail(err, ATTND_ERR_BUSY, "out of memory queueing the request; retry later");
    else {
        sched_job_ref(j);
        j->t_submit = attnd_now_s(); /* queue wait, time to first token and duration count from here */
        s->queue[(s->q_head + s->q_len) % s->queue_limit] = j;
        s->q_len++;
        if (slot_free_for(s, j)) atomic_store(&s->newcomer, true);
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void sched_free_kv(sched *s, struct kv_seq *kv) {
    if (!kv) return;
    pthread_mutex_lock(&s->mu);
    if (s->n_free == s->cap_free) {
        kv_seq **g = realloc(s->to_free, (size_t)s->cap_free * 2 * sizeof(*g));
        if (g) {
            s->to_free = g;
            s->cap_free *= 2;
        }
    }
    if (s->n_free < s->cap_free) s->to_free[s->n_free++] = kv;
    else slog_error("out of memory: a KV cache is leaked until shutdown");
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

bool sched_wait_idle(sched *s, int timeout_ms) {
    struct timespec ts;
    attnd_deadline(&ts, timeout_ms);
    pthread_mutex_lock(&s->mu);
    while (s->n_active + s->q_len > 0)
        if (pthread_cond_timedwait(&s->idle, &s->mu, &ts) != 0) break;
    bool idle = s->n_active + s->q_len == 0;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

void sched_cancel_all(sched *s) {
    /* only the scheduler thread touches slots: it applies this at its next step */
    atomic_store(&s->cancel_all, true);
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

void sched_get_stats(sched *s, sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    out->active = s->n_active;
    out->queued = s->q_len;
    out->kv_reserved = s->reserved;
    pthread_mutex_unlock(&s->mu);
    out->threads = engine_threads(s->eng);
    out->threads_in_use = engine_threads_in_use(s->eng);
}
