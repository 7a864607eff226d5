/*
 * sched_internal.h — (scheduler-private) the inside of a sched_job, shared by sched_job.c (the
 * job's life and its readers: create, fork, wait, output) and scheduler.c (the thread that fills
 * it in), and the scheduler's own state, shared by scheduler.c and sched_kv.c (KV admission and
 * prefill pacing). Nothing outside those three files includes it.
 */
#ifndef ATTND_SERVER_SCHED_INTERNAL_H
#define ATTND_SERVER_SCHED_INTERNAL_H

#include "attnd/attn_capture.h"
#include "attnd/buf.h"
#include "attnd/gen.h"
#include "attnd/spec.h"
#include "cpushare.h"
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
    int draft_max;            /* drafts per step at most; 0 = off */
    float draft_min_p;        /* the draft model's cut; < 0 = the server's */
    bool prompt_logprobs;
    bool ignore_eos;
    int think_budget;         /* gen.h's think_budget; 0 = none */
    bool think_inside;
    int api;                  /* the histograms' series (sched_job_spec.api) */
    bool grammar_close;
    attn_capture *capture;    /* owned, may be NULL */
    grammar *grammar;         /* a reference, may be NULL */
    engine_ablation_head *ablate; /* (n_ablate) owned, may be NULL */
    int n_ablate;
    sess *se;
    char owner[SESS_OWNER_MAX + 1]; /* whose prompt cache an anonymous job may use */
    char tenant[SCHED_TENANT_MAX + 1]; /* who asked (fair admission) */
    int tenant_ix;            /* its entry in the scheduler's tenants while submitted; -1 = none */
    char request_id[72];      /* the HTTP request's id, for log lines ("" = none) */
    double t_submit;          /* attnd_now_s() when sched_submit queued it (set under the
                                 scheduler's mutex, before the scheduler thread sees the job) */

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
    bool first_chunk_alone;   /* its first prompt chunk ran in a step without decode tokens (a
                                 step of its own beside streams, or nothing was generating) */
    uint64_t first_chunk_step; /* that step's number: the steps the scheduler had run before it */

    // ---- the reader's cursor (sched_job_wait) ----
    size_t rd_text;           /* text bytes already handed out */
    int rd_pieces;            /* pieces already handed out */
    buf rd;                   /* copy of the last update's text */

    // ---- forks (n > 1 choices of one prompt; scheduler thread only once submitted) ----
    struct sched_job *forks;  /* jobs continuing this prompt, started when its prefill ends;
                                 one reference each */
    struct sched_job *next;   /* link in a parent's forks, then in the scheduler's ready list */
    bool is_fork;
    struct kv_group *kv_group; /* a fork's shared KV reservation, once its parent was admitted */
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

// ---- the scheduler's own state (scheduler.c; admission and pacing in sched_kv.c) ----------

/* The KV reservation of n > 1 choices of one prompt (a job and its forks): the forks share the
 * prompt's whole blocks, so the group reserves them once (`shared`, given back by the last
 * member to end) plus each member's own growth. Scheduler thread only. */
typedef struct kv_group {
    int live;            /* members not ended yet */
    size_t shared;       /* bytes of the prompt's whole blocks */
    size_t own;          /* a fork's own part: the blocks it writes */
} kv_group;

typedef struct slot {
    sched_job *job;      /* NULL = free */
    sess *se;            /* cache entry (named session or anonymous), busy while here */
    kv_seq *kv;          /* borrowed from se */
    int n_past;          /* tokens in kv */
    bool prefilling;     /* still reading the prompt */
    bool fresh;          /* admitted, no prompt chunk read yet: its first chunk may take a step
                            of its own before the next decode step (scheduler.c, step) */
    int32_t next_token;  /* last sampled token, decoded in the next step */
    int n_gen;
    const char *end_reason; /* generation ended this step: "stop" / "length" */
    int32_t *hist;       /* (n_prompt + max_tokens + 1) prompt then generated tokens */
    int n_hist;
    gen *g;              /* sampler, detokenizer, stop strings of this request */
    int batch_n;         /* entries this slot has in the current batch */
    int row0;            /* first logits row of this slot in the current batch, -1 = none */
    int32_t draft[32];   /* (n_draft) drafts after next_token in this batch */
    struct spec *sp;     /* this sequence's drafter (draft model or prompt lookup), or NULL (off) */
    int n_draft;
    uint64_t admitted;   /* admission order (newest fails first on KV exhaustion) */
    size_t reserve;      /* KV bytes this job reserved for itself (see kv_group) */
    kv_group *group;     /* n > 1 choices of one prompt: the reservation they share, or NULL */
    bool own_kv;         /* a fork's or an ablated job's cache: the slot destroys it (no
                            session holds it) */
    engine_ablation abl; /* the ablated job's (engine_seq_ablate of kv); mean sums owned */
    double t_last;       /* when this sequence's last token was sampled; 0 = none yet */
    bool pending;        /* its grammar's mask did not end by a step's deadline: it sits out the
                            decode steps until the mask ends (gen_resume, scheduler.c) */
    bool picked;         /* decodes in the step being built (pick_decoders, scheduler.c) */
    uint64_t last_step;  /* the step it last decoded in (its tenant's sequences take turns) */
} slot;

/* Where a prompt's state checkpoint goes (hybrid models, kv.h): this many tokens before its end.
 * The tail of a prompt is the template's generation prompt, the part the next turn's history most
 * often renders differently (Qwen3.5 drops "<think>\n" from earlier turns: 2 tokens; with
 * thinking off "<think>\n\n</think>\n\n": 4), and a regenerated turn recomputes from it too;
 * llama.cpp's server takes its checkpoint 4 tokens before a prompt's end as well. */
#define SCHED_CKPT_BACK 4

/* Exponentially weighted sums of (position, cost) of recent prefill chunks run beside streams,
 * for a least-squares line: a prompt token's cost in ms against the position it is read at. */
/* Decode step sizes whose cost the pacing learns separately (a step of 8 tokens costs ~1.5-3x
 * one of 1 on the TinyLlama shape: the weights are read once, the arithmetic grows). */
#define SCHED_DEC_SIZES 32

typedef struct pace_fit {
    double w, p, c, pp, pc; /* weight, and the weighted sums of p, c, p^2, p*c */
} pace_fit;

/* A client as fair admission sees it (sched_kv.c): one API key, or one address without keys. */
typedef struct sched_tenant {
    char name[SCHED_TENANT_MAX + 1];
    int live;            /* its jobs queued or running (forks included); 0 = the entry is free */
    int running;         /* slots its jobs hold */
    double served;       /* tokens charged at admission (prompt + max_tokens x choices) */
    unsigned mark;       /* scratch for the queue scan */
} sched_tenant;

/* The slots that draft with the draft model in the step being built: planned one by one
 * (slot_drafts), drafted together (spec_draft_batch). Arrays of n_slots. */
typedef struct draft_queue {
    spec_batch *b;
    struct spec **sp; /* their drafters */
    int *k;           /* their plans, then their drafts */
    int32_t **out;    /* their draft buffers (slot.draft) */
    slot **sl;
    int n;
} draft_queue;

struct sched {
    const model *m;
    const tokenizer *tok;
    grammar_vocab *gvocab;   /* the vocabulary index for grammars: built at the first job that
                                has one (scheduler thread), owned */
    sess_store *store;
    server_hooks hooks;
    int wd_ms;
    engine *eng;
    kv_pool *pool;
    int n_vocab, n_ctx, max_batch, n_slots, queue_limit, max_anon, rows_cap;
    int draft_max;        /* the server's draft_max; -1: the model cannot speculate (spec.h) */
    model *dm;            /* draft_model, or NULL (prompt lookup) */
    cpushare *share;      /* several models: the threads shared with the others (borrowed), NULL = own */
    bool share_on;        /* marked working in it */
    int own_threads;      /* the engine's threads when alone */
    engine *deng;         /* the draft model's engine, used by the scheduler thread only */
    kv_pool *dpool;       /* the draft sequences' KV (one per speculating slot) */
    size_t dpool_bytes;   /* dpool's budget (sched_draft_kv_bytes) */
    draft_queue dq;       /* with a draft model: this step's slots drafting with it */
    float draft_min_p;    /* the server's; a job's own when it sets one */
    bool draft_adapt;     /* drafts as long as their measured cost pays (spec_ctl), else draft_max */
    bool mtp;             /* slots draft with the model's MTP block (its cache in pool: kv_pool_set_mtp) */
    spec_cost spcost;     /* the model's step costs by rows, for the drafters' plans */
    int tenant_slots;     /* most slots one tenant holds (max_parallel; n_slots has one more) */
    float *logits;        /* (rows_cap, n_vocab) */
    batch_entry *batch;   /* (max_batch) */
    slot *slots;          /* (n_slots) */
    int *pick;            /* (3, n_slots) scratch of pick_decoders: tenants, counts, quotas */
    attn_capture *inspecting; /* captures of the running jobs that inspect attention (a list) */
    uint64_t n_admitted;
    bool fresh_last;      /* the last step read fresh prompts alone: this one decodes */
    int fresh_debt;       /* prompt tokens that step took from this one's prefill budget */
    sched_job *ready, **ready_tail; /* started forks waiting for a slot (scheduler thread only) */

    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;   /* guards everything below */
    pthread_cond_t wake;  /* work arrived / stop */
    pthread_cond_t idle;  /* a job finished */
    sched_job **queue;    /* ring (queue_limit) */
    int q_head, q_len;
    kv_seq **to_free;     /* KV handles of deleted sessions */
    int n_free, cap_free;
    bool stop;
    atomic_bool cancel_all; /* shutdown: cancel whatever is queued or running */
    atomic_bool newcomer; /* a job that can take a free slot now was queued (sched_submit) */
    bool yield_ok;        /* the step being evaluated may be given up for a newcomer (step) */
    bool yielded;         /* it was (step_yield) */
    bool yield_spent;     /* a step was given up since the last decode step ran: not another */
    int n_active;
    size_t reserved;      /* KV bytes reserved by the active jobs (<= stats.kv_budget) */
    struct sched_task *tasks; /* sched_run_task's, waiting for the scheduler thread (a list) */
    size_t task_kv_waiting; /* KV bytes a task waits for (queued jobs wait behind it); 0 = none */
    pthread_cond_t task_done; /* a task ran */
    sched_tenant *tenants; /* (n_tenants) fair admission's accounts */
    int n_tenants, cap_tenants;
    unsigned scan;        /* the current queue scan's mark */
    double budget_ms;     /* prefill_budget_ms setting; 0 = auto */
    double dec_ms[SCHED_DEC_SIZES]; /* recent time of a decode-only step of n + 1 tokens (moving
                                       average; 0 = none seen; the last entry: that many or more) */
    pace_fit pf;          /* a prompt token's cost beside streams against its position */
    double mask_deadline; /* grammar masks of this step end by then (attnd_now_s); 0 = no limit */
    int mask_turn;        /* the slot whose pending mask goes first in the next step */
    double task_entries;  /* a task turn's positions beside streams (sched_task_cap); 0 = none
                             learned yet */
    sched_stats stats;
    double rate_t0;       /* tokens/s window */
    uint64_t rate_tok0;
};

/* A member of a reservation group ended: the last one gives the shared prompt blocks back
 * (accepts NULL). */
void sched_group_leave(sched *s, kv_group *g);
/* The KV bytes admitting j reserves: its own need, or with forks the prompt's blocks once plus
 * each choice's own growth. */
size_t sched_group_kv_bytes(const sched *s, const sched_job *j);
/* The next queued job to admit, popped and counted active: cancelled ones first, else the first
 * queued job of the tenant served least so far (tenants at their slot share skipped) when its
 * reservation fits beside the running jobs' (and the KV a task waits for); NULL otherwise (it waits, so a big request is not
 * overtaken for ever). Charges the tenant and counts its slot. Takes s->mu. */
sched_job *sched_queue_pop_fitting(sched *s);
/* The entry of tenant name, counted live (s->mu held): a task's, for as long as it runs; -1 when
 * out of memory. _exit forgets it (takes s->mu, accepts -1); _charge adds tokens (or their
 * equivalent in work) to what it was served (takes s->mu, accepts -1). */
int sched_tenant_enter(sched *s, const char *name);
void sched_tenant_exit(sched *s, int ix);
void sched_tenant_charge(sched *s, int ix, double tokens);
/* Counts j and its forks into its tenant's account at submission (s->mu held). false: out of
 * memory. */
bool sched_tenant_join(sched *s, sched_job *j);
/* j ended (in a slot: in_slot; or never started): its tenant's account forgets it. Takes s->mu.
 * Accepts a job that was never counted. */
void sched_tenant_leave(sched *s, sched_job *j, bool in_slot);
/* A ready fork can take a slot only while its tenant holds fewer than its share; true and the
 * slot counted when it may. Takes s->mu. */
bool sched_tenant_take_slot(sched *s, sched_job *j);
/* Forks attached to j (choices 2..n of its prompt, not started yet). */
int sched_n_forks(const sched_job *j);
/* The drafts per step j may take: its own draft_max, else the server's; 0 when the model cannot
 * speculate. */
int sched_job_draft_max(const sched *s, const sched_job *j);
/* Reserves KV for j, admitted into sl, and hands its forks their group. */
void sched_reserve(sched *s, slot *sl, sched_job *j);
/* ATTND_ERR_INVALID, saying what would fit, when budget bytes cannot hold one full context. */
attnd_status sched_check_budget(const sched *s, size_t budget, attnd_err *err);
/* Prefill tokens the next step may take beside n_decode decoding sequences, for n_prompts prompts
 * being read, the oldest of which has its next token at position pos. */
int sched_prefill_cap(const sched *s, int n_decode, int n_prompts, int pos);
/* Speculative decoding's share of a step of cap entries (the smaller of max_batch and the logits
 * rows) beside n_decode decoding streams: what they leave, half of it while prompts wait to
 * prefill, so drafting backs off as the batch fills (0 when it is full). */
int sched_draft_room(int cap, int n_decode, bool prompts_waiting);
/* Decode rows a step may hold when several tenants decode, the lightest with least rows of
 * total: as many as keep its cost (by a line through the learned decode step costs) within
 * twice that of least rows; total while the costs of two step sizes are not known yet. */
int sched_decode_rows(const sched *s, int least, int total);
/* Grammar work of tenant ix (a sequence's mask, ms milliseconds of the scheduler thread) charged
 * to it in fair admission, as the tokens a decode step of that time would make. Takes s->mu. */
void sched_charge_ms(sched *s, int ix, double ms);
/* The grammar masks' time a step may take beside n_decode decoding sequences: about one decode
 * step of theirs (at least SCHED_MASK_MIN_MS). */
#define SCHED_MASK_MIN_MS 2.0
double sched_mask_budget_ms(const sched *s, int n_decode);
/* Positions a task's turn may evaluate (about one decode step's cost of the streams, or of one
 * stream when none decodes), and learning it from a turn of ms that evaluated work of the cap it
 * was given beside n_decode decoding streams. */
int sched_task_cap(const sched *s, int n_decode);
void sched_task_learn(sched *s, double ms, long work, int cap, int n_decode);
/* Learns what a decode step and a prefill token cost from a step of ms milliseconds that carried
 * n_decode decode tokens and n_prefill prompt tokens at mean position pf_pos. */
void sched_learn_costs(sched *s, double ms, int n_decode, int n_prefill, double pf_pos);

#endif
