/*
 * scheduler.h — the scheduler: the one thread that owns the model's engine and every KV cache.
 *
 * HTTP threads build a sched_job (tokenized prompt, sampling, limits), submit it, and read the
 * job's output as it grows (text, tokens, logprobs) under the job's mutex. The scheduler runs
 * steps: each step admits queued jobs into free slots (reusing the longest cached prefix of the
 * job's session or of an anonymous prompt-cache entry), then makes ONE engine_eval call holding
 * one decode token for every generating sequence plus prefill chunks of new ones (continuous
 * batching), samples, and publishes what each job produced.
 *
 * Cancellation: set job->cancel (client gone, shutdown); the scheduler drops the sequence at the
 * start of its next step.
 *
 * Ownership: a job is reference counted (HTTP side + scheduler side); sched_job_unref frees it.
 */
#ifndef ATTND_SERVER_SCHED_H
#define ATTND_SERVER_SCHED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/engine.h"
#include "attnd/sampler.h"
#include "attnd/tokenizer.h"
#include "sess.h"
#include "settings.h"

/* One generated token. */
typedef struct sched_piece {
    int32_t token;
    float logprob;   /* log-probability under the raw model distribution */
} sched_piece;

#define SCHED_TOP_MAX 20

typedef struct sched_job {
    // ---- input: set before sched_submit, read-only afterwards ----
    int32_t *prompt;          /* (n_prompt) owned */
    int n_prompt;
    sampler_params sp;        /* sp.bias points into `bias` */
    logit_bias *bias;         /* (sp.n_bias) owned */
    int max_tokens;           /* >= 0; generation also ends at the context cap */
    char **stops;             /* (n_stops) owned strings */
    int n_stops;
    int top_logprobs;         /* alternatives per generated token (0..20); -1 = no logprobs */
    bool prompt_logprobs;     /* echo + logprobs: log-probabilities of prompt tokens 1..n-1 */
    sess *se;                 /* acquired named session (busy), or NULL = anonymous; the
                                 scheduler releases it when the job ends */

    // ---- output: guarded by mu; cv signalled on every change ----
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;               /* (text_len) generated text, stop strings removed; owned */
    size_t text_len, text_cap;
    sched_piece *pieces;      /* (n_pieces) generated tokens, capacity max_tokens */
    int n_pieces;
    token_logprob *tops;      /* (n_pieces, top_logprobs) alternatives, best first */
    float *prompt_lp;         /* (n_prompt) when prompt_logprobs; [0] is NaN (nothing predicts it) */
    token_logprob *prompt_tops; /* (n_prompt, top_logprobs) alternatives at each prompt position */
    bool started;             /* admitted into a slot */
    bool done;
    const char *finish_reason; /* "stop" or "length" (static strings); NULL while running or on error */
    attnd_status status;      /* != OK: failed, message in errmsg */
    char errmsg[256];
    int n_cached;             /* prompt tokens whose KV was reused */
    int n_generated;          /* tokens sampled, the end-of-generation token included */
    double prompt_ms, gen_ms; /* time in steps that prefilled / decoded this job */

    atomic_bool cancel;
    atomic_int refs;
} sched_job;

/* A zeroed job with refs = 1, mutex and cv initialised, output buffers sized for max_tokens
 * and top_logprobs. Set the input fields (prompt etc.) after; they are freed by unref. */
attnd_status sched_job_create(sched_job **out, int n_prompt, int max_tokens, int top_logprobs, bool prompt_logprobs,
                              attnd_err *err);
void sched_job_ref(sched_job *j);
void sched_job_unref(sched_job *j); /* accepts NULL */

typedef struct sched_stats {
    int active, queued, slots;
    size_t kv_used, kv_budget;
    uint64_t prompt_tokens, generated_tokens, cached_tokens, steps;
    uint64_t evictions;      /* idle KV caches evicted to make room */
    double decode_seconds;   /* wall time of steps that decoded at least one token */
    double prompt_seconds;   /* wall time of steps that prefilled */
    double last_tok_per_s;   /* generated tokens/s over the last few seconds */
} sched_stats;

typedef struct sched sched;

/*
 * Starts the scheduler thread. Borrows m, tok and store (they must outlive the scheduler);
 * creates the engine and KV pool from settings (threads, max_batch, kv_budget_mb, kv_f32,
 * max_parallel, queue_limit, ctx cap) and calls hooks.on_watchdog from its loop.
 */
attnd_status sched_create(sched **out, const model *m, const tokenizer *tok, sess_store *store,
                          const server_settings *cfg, attnd_err *err);
/* Stops the thread: every queued and active job is cancelled (finish_reason NULL, status BUSY),
 * all KV freed. Accepts NULL. */
void sched_destroy(sched *s);

/* The per-sequence context cap in tokens (settings.ctx_size or the model's n_ctx). */
int sched_n_ctx(const sched *s);
/* Queues a job (takes a reference). ATTND_ERR_BUSY when the queue is full (-> 429). */
attnd_status sched_submit(sched *s, sched_job *j, attnd_err *err);
/* Hands a KV handle to the scheduler thread for destruction (session deleted). */
void sched_free_kv(sched *s, struct kv_seq *kv);
/* Waits until no job is queued or active, or timeout_ms passed. Returns true when idle. */
bool sched_wait_idle(sched *s, int timeout_ms);
/* Cancels everything queued or active. */
void sched_cancel_all(sched *s);
void sched_get_stats(sched *s, sched_stats *out);

#endif
