/*
 * sched_internal.h — (scheduler-private) the inside of a sched_job, shared by sched_job.c (the
 * job's life and its readers: create, fork, wait, output) and scheduler.c (the thread that fills
 * it in). Nothing outside those two files includes it.
 */
#ifndef ATTND_SERVER_SCHED_INTERNAL_H
#define ATTND_SERVER_SCHED_INTERNAL_H

#include "attnd/buf.h"
#include "scheduler.h"

struct sched_job {
    // ---- input: set by sched_job_create, read-only afterwards ----
    int32_t *prompt;          /* (n_prompt) owned */
    int n_prompt;
    sampler_params sp;        /* sp.bias points into `bias` */
    logit_bias *bias;         /* (sp.n_bias) owned */
    int max_tokens;
    char **stops;             /* (n_stops) owned strings */
    int n_stops;
    int top_logprobs;
    bool prompt_logprobs;
    attn_capture *capture;    /* owned, may be NULL */
    sess *se;
    char owner[SESS_OWNER_MAX + 1]; /* whose prompt cache an anonymous job may use */

    // ---- output: guarded by mu; cv signalled on every change ----
    pthread_mutex_t mu;
    pthread_cond_t cv;
    buf text;                 /* generated text, stop strings removed */
    token_logprob *pieces;    /* (n_pieces) generated tokens, capacity max_tokens */
    int n_pieces;
    token_logprob *tops;      /* (n_pieces, top_logprobs) alternatives, best first */
    float *prompt_lp;         /* (n_prompt) when prompt_logprobs */
    token_logprob *prompt_tops; /* (n_prompt, top_logprobs) alternatives at each prompt position */
    bool done;
    const char *finish_reason;
    attnd_status status;
    char errmsg[256];
    int n_cached, n_generated;
    double prompt_ms, gen_ms;

    // ---- the reader's cursor (sched_job_wait) ----
    size_t rd_text;           /* text bytes already handed out */
    int rd_pieces;            /* pieces already handed out */
    buf rd;                   /* copy of the last update's text */

    // ---- forks (n > 1 choices of one prompt; scheduler thread only once submitted) ----
    struct sched_job *forks;  /* jobs continuing this prompt, started when its prefill ends;
                                 one reference each */
    struct sched_job *next;   /* link in a parent's forks, then in the scheduler's ready list */
    bool is_fork;
    kv_seq *fork_kv;          /* a started fork's cache: the parent's prompt blocks, shared;
                                 owned until a slot takes it */
    float *first_logits;      /* (n_vocab) the prompt's last logits: a started fork's first
                                 token is sampled from them; owned */

    atomic_bool cancel;
    atomic_int refs;
};

/* Appends released text to the job (caller holds j->mu). Out of memory drops the text rather
 * than crash; the token list stays complete. */
void sched_job_append_text(sched_job *j, const char *p, size_t n);

#endif
