/*
 * scheduler.h — the scheduler: the one thread that owns the model's engine and every KV cache.
 *
 * HTTP threads build a sched_job (tokenized prompt, sampling, limits), submit it, and read the
 * job's output as it grows (text, tokens, logprobs) with sched_job_wait / sched_job_output. The scheduler runs
 * steps: each step admits queued jobs into free slots (reusing the longest cached prefix of the
 * job's session or of an anonymous prompt-cache entry), then makes ONE engine_eval call holding
 * one decode token for every generating sequence plus prefill chunks of new ones (continuous
 * batching), samples, and publishes what each job produced.
 *
 * Cancellation: sched_job_cancel (client gone) or sched_cancel_all (shutdown); the scheduler
 * drops the sequence at the start of its next step.
 *
 * Ownership: a job is reference counted (HTTP side + scheduler side); sched_job_unref frees it.
 */
#ifndef ATTND_SERVER_SCHED_H
#define ATTND_SERVER_SCHED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "attnd/attn_capture.h"
#include "attnd/common.h"
#include "attnd/grammar.h"
#include "attnd/engine.h"
#include "attnd/sampler.h"
#include "attnd/tokenizer.h"
#include "histo.h"
#include "sess.h"
#include "settings.h"

/* A generation request. Opaque: built by sched_job_create, read through sched_job_wait and
 * sched_job_output; the job's mutex never leaves scheduler.c. */
typedef struct sched_job sched_job;

/* What to generate. sched_job_create steals prompt, bias and stops (and NULLs them here),
 * whether it succeeds or not. */
typedef struct sched_job_spec {
    int32_t *prompt;          /* (n_prompt) stolen */
    int n_prompt;
    sampler_params sp;        /* sp.bias / sp.n_bias are ignored: the job points them at `bias` */
    logit_bias *bias;         /* (n_bias) stolen, may be NULL */
    int n_bias;
    char **stops;             /* (n_stops) stolen strings and array, may be NULL */
    int n_stops;
    int max_tokens;           /* >= 0; generation also ends at the context cap */
    int top_logprobs;         /* alternatives per generated token (0..20); -1 = no logprobs */
    int draft_max;            /* speculative decoding: drafts per step at most, 0 = off,
                                 -1 = the server's draft_max; backs off when the batch is full
                                 or the drafts do not pay (attnd/spec.h) */
    float draft_min_p;        /* the draft model's draft ends below this top probability;
                                 < 0 = the server's draft_min_p (0 in a zeroed spec: set -1) */
    bool prompt_logprobs;     /* echo + logprobs: log-probabilities of prompt tokens 1..n-1 */
    bool ignore_eos;          /* end-of-generation tokens are ordinary tokens: only max_tokens,
                                 a stop string or the context ends the job */
    int think_budget;         /* > 0: a <think> block is closed after this many of its tokens
                                 (gen.h's think_budget); 0 = no limit */
    bool think_inside;        /* the prompt opened the <think> block */
    int api;                  /* which API asked (0..SCHED_N_APIS-1), the histograms' label */
    bool grammar_close;       /* the grammar's sentence closes within max_tokens (gen.h);
                                 finish_reason "length" when the budget closed it */
    attn_capture *capture;    /* stolen, may be NULL: records the attention of this job's
                                 positions (attention inspection). Such a job evaluates its
                                 whole prompt unless a named session caches a prefix, also with
                                 max_tokens = 0; the hook is installed only for the steps that
                                 hold such a job, so other requests never pay for it */
    sess *se;                 /* acquired named session (busy), or NULL = anonymous; once
                                 sched_submit succeeds the scheduler releases it when the job
                                 ends; until then (and if create or submit fail) it stays the
                                 caller's */
    const char *owner;        /* the API key's owner tag (sess.h); an anonymous job uses only
                                 this owner's prompt cache. NULL = none. Copied. */
    const char *tenant;       /* who asked, for fair admission ("key:<owner>", "addr:<ip>"):
                                 queued jobs are admitted in turns across tenants, and one
                                 tenant holds at most max_parallel slots of the max_parallel + 1
                                 (so another tenant's request always finds one). NULL = "".
                                 Copied (at most SCHED_TENANT_MAX bytes). */
    const char *request_id;   /* the HTTP request's id, for the scheduler's log lines about the
                                 job; NULL = none. Copied (at most 64 characters). */
    grammar *grammar;         /* a reference, stolen, may be NULL: the output follows this
                                 grammar (attnd/grammar.h); forks share it */
    engine_ablation_head *ablate; /* (n_ablate) stolen, may be NULL: heads switched off or scaled
                                 while this job's sequence is evaluated (engine_seq_ablate;
                                 ranges checked by the caller). Such a job never uses a session
                                 or the prompt cache: its KV is its own, evaluated from position
                                 0 and dropped when it ends. It cannot be forked (n = 1). */
    int n_ablate;
} sched_job_spec;

#define SCHED_TENANT_MAX 63

/* A job with one reference, output buffers sized for max_tokens and top_logprobs. On failure
 * the stolen parts of spec are freed. */
attnd_status sched_job_create(sched_job **out, sched_job_spec *spec, attnd_err *err);
/*
 * A job continuing parent's prompt with its own sampling seed: one of n choices. The prompt is
 * read once, by the parent; when its prefill ends the fork starts from the parent's KV blocks,
 * shared (kv_seq_fork: only the partly filled last block is copied, when the fork first writes
 * into it), and samples its first token from the same logits with its own sampler. Call before
 * submitting parent and do not submit the fork: it goes with its parent, and fails with it when
 * the parent ends before its prompt is read. The parent must not want prompt log-probabilities.
 * *out is the caller's reference. Errors: NOMEM.
 */
attnd_status sched_job_fork(sched_job **out, sched_job *parent, uint64_t seed, attnd_err *err);
void sched_job_ref(sched_job *j);
void sched_job_unref(sched_job *j); /* accepts NULL */

/* Asks the scheduler to drop the job (client gone); it does so at its next step. Returns true
 * when the job was already cancelled. Thread-safe. */
bool sched_job_cancel(sched_job *j);

/* What changed since the previous sched_job_wait on this job (one reader per job). */
typedef struct sched_update {
    const char *text;         /* (text_len) text released since the previous call; borrowed,
                                 valid until the next sched_job_wait or the last unref */
    size_t text_len;
    int from, to;             /* generated tokens [from, to) are new (see sched_output.pieces) */
    bool done;                /* the job ended: sched_job_output has its outcome */
} sched_update;

/* Waits up to timeout_ms (0 = just look) until the job released text or tokens since the
 * previous call, or ended; fills *u with what is new. Returns true when there was news or the
 * job is done, false on timeout. */
bool sched_job_wait(sched_job *j, int timeout_ms, sched_update *u);

/* A job's output. The arrays are borrowed from the job and stay valid until the last unref;
 * entries below the counts never change once published. */
typedef struct sched_output {
    const int32_t *prompt;    /* (n_prompt) */
    int n_prompt;
    const token_logprob *pieces; /* (n_pieces) generated tokens and their log-probabilities under
                                    the raw model distribution (0 without logprobs) */
    int n_pieces;
    const token_logprob *tops;   /* (n_pieces, top_logprobs) alternatives, best first */
    int top_logprobs;            /* -1 = no logprobs */
    const float *prompt_lp;      /* (n_prompt) or NULL; [0] is NaN (nothing predicts it) */
    const token_logprob *prompt_tops; /* (n_prompt, top_logprobs) or NULL */
    const char *text;         /* (text_len) the whole generated text, stop strings removed;
                                 NULL until done */
    size_t text_len;
    bool done;
    const char *finish_reason; /* "stop" / "length" (static); NULL while running or on error */
    attnd_status status;      /* != OK: failed, message in errmsg */
    const char *errmsg;       /* "" when none */
    int n_cached;             /* prompt tokens whose KV was reused */
    int n_generated;          /* tokens sampled, the end-of-generation token included */
    double prompt_ms, gen_ms; /* time in steps that prefilled / decoded this job */
    const attn_capture *capture; /* the job's (sched_job_spec.capture); read it once done */
} sched_output;

/* A consistent snapshot of the job's output so far. Thread-safe. */
void sched_job_output(sched_job *j, sched_output *out);


/* The latency and size distributions the scheduler records (what SLOs are written in). Bounds
 * are chosen for CPU serving; see sched_hist_bounds in scheduler.c and docs/server.md. */
typedef enum sched_hist {
    SCHED_H_QUEUE,  /* seconds from submission to a slot (n > 1: the first choice) */
    SCHED_H_TTFT,   /* seconds from submission to the first generated token */
    SCHED_H_ITL,    /* seconds between consecutive tokens of one sequence */
    SCHED_H_E2E,    /* seconds from submission to the end, requests that ended well */
    SCHED_H_PROMPT, /* prompt tokens per request */
    SCHED_H_GEN,    /* generated tokens per sequence (each of n choices counts) */
    SCHED_H_COUNT
} sched_hist;

/* The histograms keep one series per API a job came through (sched_job_spec.api, an index the
 * API layer chooses; metrics.h names them): at most this many. */
#define SCHED_N_APIS 8

typedef struct sched_stats {
    int active, queued, slots;
    size_t kv_used, kv_budget;
    size_t kv_checkpoint_bytes; /* the part of kv_used held by recurrent state checkpoints */
    size_t kv_reserved;      /* KV bytes reserved by the running jobs (admission control) */
    uint64_t prompt_tokens, generated_tokens, cached_tokens, steps;
    uint64_t steps_yielded; /* decode steps given up mid-way for a newly arrived request */
    uint64_t steps_shared;   /* steps run on fewer threads than its own: other models worked too
                                (several models, cpushare.h) */
    uint64_t evictions;      /* idle KV caches evicted to make room */
    uint64_t spec_drafted, spec_accepted; /* speculative decoding: tokens drafted, and kept */
    double decode_seconds;   /* wall time of steps that decoded at least one token */
    double prompt_seconds;   /* wall time of steps that prefilled */
    double last_tok_per_s;   /* generated tokens/s over the last few seconds */
    int threads;             /* engine threads configured */
    int threads_in_use;      /* of which a step may use now (engine_threads_in_use) */
    histo hist[SCHED_H_COUNT][SCHED_N_APIS]; /* latency and size distributions (sched_hist), by the
                                                jobs' api (sched_job_spec.api) */
} sched_stats;

typedef struct sched sched;

/*
 * Starts the scheduler thread. Borrows m, tok and store (they must outlive the scheduler);
 * creates the engine and KV pool from settings (threads, max_batch, kv_budget_mb, kv_f32,
 * max_parallel, queue_limit, ctx cap, prefill_budget_ms) and calls hooks.on_watchdog from its
 * loop. ATTND_ERR_INVALID when the KV budget cannot hold one full context (the message says
 * which kv_budget_mb or ctx_size would do).
 */
attnd_status sched_create(sched **out, const model *m, const tokenizer *tok, sess_store *store,
                          const server_settings *cfg, attnd_err *err);
/* The bytes of the draft model's KV pool (cfg->draft_model: one full context per slot), 0 without
 * one: memory the scheduler holds beside kv_budget_mb. */
size_t sched_draft_kv_bytes(const sched *s);
/* Stops the thread: every queued and active job is cancelled (finish_reason NULL, status BUSY),
 * all KV freed. Accepts NULL. */
void sched_destroy(sched *s);

/*
 * Work for the scheduler thread itself, in turns between its steps: for inspections that batch
 * sequences of their own (the ablation sweep, attnd/ablate_sweep.h), and for the session fork.
 * Between two steps the scheduler runs ONE turn of ONE task (the oldest waiting of the tenant
 * charged least so far, as jobs are admitted; one with more to do goes to the back), so tasks
 * never hold up the streams by more than a turn per step, tenants take turns, and tasks queued
 * meanwhile wait for their turn. A turn should evaluate at most max_entries
 * positions in one batch: the scheduler sizes it so that a turn costs about one decode step of
 * the streams (of one stream when none decodes, so that a request arriving during a turn waits
 * no longer than for a step).
 */
typedef struct sched_task_turn {
    engine *e;            /* the engine and the KV pool, for this turn only */
    kv_pool *pool;
    bool plan;            /* the first call: set kv_bytes (and allocate outside the pool); do
                             not evaluate or take KV. The next turn comes once kv_bytes fit
                             beside the running jobs' reservations (idle caches are evicted for
                             it), and stays reserved until the task ends */
    bool stop;            /* the scheduler is stopping: release what the task holds in the pool
                             and return (the task ends ATTND_ERR_BUSY) */
    int max_entries;      /* positions one engine_eval of this turn may hold (>= 1) */
    // ---- set by fn ----
    bool more;            /* not finished: another turn after the next step */
    long work;            /* positions evaluated this turn: charged to the task's tenant */
    size_t kv_bytes;      /* plan: the most KV bytes the task holds in the pool at once */
} sched_task_turn;

/* One turn of a task (scheduler thread). A task that ends (more false, or an error) leaves the
 * pool as it found it (every sequence it made destroyed). */
typedef attnd_status (*sched_task_fn)(void *user, sched_task_turn *turn, attnd_err *err);

typedef struct sched_task_spec {
    sched_task_fn fn;
    void *user;           /* borrowed until sched_run_task returns */
    const char *tenant;   /* charged for the task's work in fair admission, as a job's tenant;
                             NULL = "". Copied. */
} sched_task_spec;

/* Queues the task, waits until its last turn ran and returns its status (its message in *err);
 * ATTND_ERR_BUSY when the scheduler is stopping, ATTND_ERR_NOMEM when its kv_bytes exceed what
 * the budget can ever give it. Thread-safe; not from the scheduler thread. */
attnd_status sched_run_task(sched *s, const sched_task_spec *spec, attnd_err *err);

/* Queues a job (takes a reference). The job is admitted once its KV reservation (prompt +
 * max_tokens + 1, capped at the context) fits beside the running jobs' reservations, so an
 * admitted job never runs out of KV. ATTND_ERR_BUSY when the queue is full (-> 429);
 * ATTND_ERR_INVALID when the reservation exceeds the whole budget (-> 400, it never could run). */
attnd_status sched_submit(sched *s, sched_job *j, attnd_err *err);
/* Hands a KV handle to the scheduler thread for destruction (session deleted). */
void sched_free_kv(sched *s, struct kv_seq *kv);
/* Waits until no job is queued or active, or timeout_ms passed. Returns true when idle. */
bool sched_wait_idle(sched *s, int timeout_ms);
/* Cancels everything queued or active. */
void sched_cancel_all(sched *s);
void sched_get_stats(sched *s, sched_stats *out);

/* One running or queued sequence, as GET /slots shows it (no prompt text). */
typedef struct sched_seq_info {
    int slot;             /* the slot it runs in; -1 = queued */
    uint64_t admitted;    /* admission order (0 = queued) */
    int n_prompt, n_cached, n_past, n_generated, max_tokens;
    bool prefilling;      /* still reading its prompt */
} sched_seq_info;

/* Up to cap sequences into out, the running ones (by slot) then the queued ones (oldest first),
 * *n of them; read on the scheduler thread between two steps, so they are one moment's.
 * Errors as sched_run_task. Thread-safe; not from the scheduler thread. */
attnd_status sched_list_seqs(sched *s, sched_seq_info *out, int cap, int *n, attnd_err *err);

#endif
