/*
 * spec.h — speculative decoding: proposing the next few tokens cheaply so the target model can
 * check them all in one batched engine_eval instead of one step each.
 *
 * Three drafters, all deterministic (each proposes one token per position, a point mass):
 *   - prompt lookup (no draft model): the longest suffix of the history, of ngram_max down to
 *     ngram_min tokens, that occurred earlier in the history (prompt + generated) proposes the
 *     tokens that followed its latest earlier occurrence;
 *   - a draft model with the target's vocabulary (spec_vocab_check): its greedy continuation,
 *     cut where its top probability falls below draft_min_p;
 *   - the target's own MTP block (model_info.mtp, engine_mtp_step): its greedy continuation,
 *     cut the same way; no second model, its cache part of the target's sequence.
 *
 * Verification (engine_generate, the server's scheduler): the target evaluates the unevaluated
 * token t and the drafts d1..dk as one batch, logits for each; the sampler pipeline (gen.h) runs
 * on row 0, then on row i only while its pick equalled d_i; the rest of the KV is truncated.
 * Because the draft is a point mass, this is the standard accept/reject: d_i is kept with
 * probability min(1, p(d_i)/1) = p(d_i), and a rejection yields the target's draw conditioned on
 * not being d_i, which is norm(max(0, p - q)). Every sampler stage, the grammar, stop strings and
 * log-probabilities see exactly what they would see without speculation, so the output keeps the
 * target's distribution, and greedy output is the non-speculative output.
 *
 *     spec *sp;
 *     spec_params p = {.draft_max = 8, .ngram_min = 1, .ngram_max = 3};
 *     spec_create(&sp, &p, &err);
 *     engine_gen g = {.n_predict = 64, .spec = sp};   // engine_generate drives it
 *
 * Thread-safety: a spec belongs to one sequence and one thread; a draft engine is used by the
 * thread that calls spec_draft.
 */
#ifndef ATTND_SPEC_H
#define ATTND_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/engine.h"
#include "attnd/kv.h"
#include "attnd/model.h"

#define SPEC_MAX_DRAFT 32 /* draft_max's upper limit */

typedef struct spec_params {
    int draft_max;          /* tokens proposed per step at most, 1..SPEC_MAX_DRAFT */
    int ngram_min, ngram_max; /* prompt lookup: suffix lengths tried, longest first (1..8) */
    float draft_min_p;      /* draft model: stop drafting below this top probability (0..1) */
    bool fixed;             /* propose draft_max whenever there is a proposal (no cost control) */
    engine *draft;          /* borrowed: the draft model's engine; NULL = prompt lookup */
    kv_pool *draft_pool;    /* borrowed, with draft: the pool of the draft's KV sequence */
    engine *mtp;            /* borrowed: the target's engine, to draft with its MTP block (not with draft) */
    kv_seq *mtp_seq;        /* borrowed, with mtp: the target's sequence this spec drafts for (its pool
                               caches the block: kv_pool_set_mtp) */
} spec_params;

/* Defaults: draft_max 8, ngram 2..8 (single-token matches guess too often; the match's length
 * is what the controller learns acceptance by), draft_min_p 0.5, adaptive, prompt lookup. */
void spec_params_default(spec_params *p);
/* ATTND_ERR_INVALID naming the parameter out of range. */
attnd_status spec_params_validate(const spec_params *p, attnd_err *err);

/* Whether target and draft share one vocabulary: the same size and, where the files carry one,
 * the same token strings. ATTND_ERR_INVALID with the first difference otherwise. */
attnd_status spec_vocab_check(const model *target, const model *draft, attnd_err *err);

typedef struct spec spec;

/* Copies p (the engine and pool stay borrowed for spec's lifetime). With a draft, creates its
 * KV sequence in p->draft_pool. Errors: ATTND_ERR_INVALID, ATTND_ERR_NOMEM. */
attnd_status spec_create(spec **out, const spec_params *p, attnd_err *err);
void spec_destroy(spec *s); /* accepts NULL */

/* Appends confirmed tokens (the prompt, then each generated token) to the history. Errors:
 * ATTND_ERR_NOMEM (the history could not grow). */
attnd_status spec_push(spec *s, const int32_t *ids, int n, attnd_err *err);
/* Forgets the history (a new generation on the same spec). */
void spec_reset(spec *s);
int spec_history_len(const spec *s);

// ---- cost-aware control -----------------------------------------------------------------------
/*
 * Speculation pays only where the drafts kept outweigh what they cost: a verify step of 1 + k
 * rows costs more than a 1-row step (nearly k + 1 times as much on a small, compute-bound model;
 * about the same on a large, memory-bound one), and a draft model's own steps cost time too. So
 * the draft length is chosen from measurements, per sequence:
 *   - spec_cost: the target's measured step time by rows in the batch (the least time recently
 *     seen: load only slows steps), and the draft model's time per drafted token; estimates
 *     between and beyond the measured sizes follow the line through the nearest measured ones;
 *   - spec_ctl: acceptance per token a, learned per class (0: the draft model; 1..8: prompt
 *     lookup by the length of the match it proposes from), decayed; k drafts then keep
 *     a + a^2 + ... + a^k tokens on average;
 *   - the plan: the k in 1..max with the best expected throughput against the batch without
 *     them, (T + kept(k)) C(N) / (T (C(N + k) + k D)) for a batch of N rows expected to yield T
 *     tokens (a lone sequence: N = T = 1), and every SPEC_EXPLORE plans one token more, so the
 *     next size's cost stays measured. Below SPEC_GAIN_MIN it drafts nothing. Where even
 *     drafts always kept would not pay (a full batch, a compute-bound model), that is all, with
 *     a probe of the length that would pay best every SPEC_PROBE_MAX plans, to re-measure its
 *     cost; where the
 *     acceptance is what falls short, it backs off and probes (one token) at intervals doubling
 *     from SPEC_PROBE_FIRST to SPEC_PROBE_MAX; probes kept raise a and drafting resumes. A draft
 *     model stops for good after SPEC_DRAFT_PROBES probes in a row that did not pay: each first
 *     evaluates the tokens its KV missed while backed off, a prefill of its own that no gain
 *     repays. Until drafting has paid once on what it learned (not on the prior), it probes every
 *     SPEC_PROBE_EAGER plans, so a draft that rarely agrees is found out within a few steps,
 *     each catching up a few tokens; once it has, at the usual intervals (the text may change).
 *     Once stopped, the spec drops the draft's KV sequence and the draft model runs no more rows.
 * All of it is deterministic given the measurements, which is how the tests drive it.
 */
#define SPEC_COST_ROWS 128  /* spec_cost measures steps of 1..SPEC_COST_ROWS rows */
#define SPEC_CLASSES 9      /* 0: the draft model; n: a prompt-lookup match of n tokens (8: 8+) */
#define SPEC_GAIN_MIN 1.05  /* the expected speed-up a draft must promise */
#define SPEC_PROBE_FIRST 16 /* plans backed off before the first probe */
#define SPEC_PROBE_MAX 64   /* ... and at most between probes */
#define SPEC_EXPLORE 8      /* every this many drafting plans, one token longer than the best */
#define SPEC_DRAFT_PROBES 3 /* a draft model's probes that may fail in a row before it stops */
#define SPEC_PROBE_EAGER 2  /* ... and its probe interval until drafting has paid once */

typedef struct spec_cost {
    double ms[SPEC_COST_ROWS + 1]; /* ms[n]: a target step of n rows, decayed mean; 0 = not seen */
    double draft_ms;               /* the draft model's time per drafted token; 0 = not seen */
} spec_cost;

/* Learns a target step of rows rows that took ms (rows outside 1..SPEC_COST_ROWS are ignored). */
void spec_cost_learn(spec_cost *c, int rows, double ms);
/* Learns a draft model's call that took ms for the `tokens` it was asked for (at least 1). */
void spec_cost_learn_draft(spec_cost *c, int tokens, double ms);
/* The estimated ms of a step of rows rows; 0 when nothing has been measured. */
double spec_cost_est(const spec_cost *c, int rows);

typedef struct spec_ctl {
    double hit[SPEC_CLASSES], miss[SPEC_CLASSES]; /* decayed counts: drafts kept, drafts cut */
    int wait[SPEC_CLASSES];     /* backed-off plans left before the next probe */
    int interval[SPEC_CLASSES]; /* the probe interval now */
    bool backed[SPEC_CLASSES];  /* backed off: the acceptance is too low to pay */
    int idle[SPEC_CLASSES];     /* plans in a row where no acceptance could pay for the rows */
    int explore[SPEC_CLASSES];  /* drafting plans since the last one a token longer */
    int probes[SPEC_CLASSES];   /* probes since drafting last paid */
    int probe_limit[SPEC_CLASSES]; /* then no more (0 = no limit; spec_create sets the draft
                                      model's: each of its probes first catches its KV up) */
    int learned[SPEC_CLASSES];     /* drafts whose outcome was learned */
    bool paid[SPEC_CLASSES];       /* drafting paid once on what was learned (2+ drafts, the
                                      draft model's cost measured) */
    bool stopped[SPEC_CLASSES];    /* its probes are spent: it plans nothing ever again */
} spec_ctl;

/* The batch a plan adds to, updated by it: a plan of k drafts adds k rows and the tokens it
 * expects to keep. */
typedef struct spec_step {
    spec_cost *cost; /* borrowed; NULL in spec_draft: the spec's own table */
    int rows;        /* rows in the batch so far, this sequence's own token included */
    double tokens;   /* tokens the batch is expected to yield so far */
} spec_step;

void spec_ctl_init(spec_ctl *c);
/* The acceptance per token learned for cls (the prior: 1/2 for the draft model, n/(n + 2) for a
 * lookup match of n tokens). */
double spec_ctl_accept(const spec_ctl *c, int cls);
/* How many of at most max drafts to propose for class cls; 0 while no step has been measured,
 * and for good once cls has stopped. Updates st (rows, tokens) and the back-off state. */
int spec_ctl_plan(spec_ctl *c, int cls, spec_step *st, int max);
/* Learns a draft of `drafted` tokens of class cls, `accepted` of them kept. */
void spec_ctl_learn(spec_ctl *c, int cls, int drafted, int accepted);

// ---- drafting ------------------------------------------------------------------------------------

/* Proposes up to max tokens continuing the history into out; *n_out may be 0. How many comes
 * from the controller (above) unless the spec is `fixed`; st describes the batch (NULL: a lone
 * sequence, costed by the spec's own table, which spec_time feeds) and is updated.
 * A draft model evaluates what it has not seen of the history, then one step per drafted token.
 * Errors: those of engine_eval on the draft (the caller may go on without speculation). */
attnd_status spec_draft(spec *s, spec_step *st, int max, int32_t *out, int *n_out, attnd_err *err);

// ---- drafting for several sequences at once ------------------------------------------------------
/*
 * Sequences that speculate with one draft model (a server's slots) draft together: each plans
 * its draft first (spec_plan: the controller's k, exactly as spec_draft would decide it), then
 * spec_draft_batch evaluates what each has not seen yet as one batch and then one batched step
 * per drafted position, over the sequences still drafting (a sequence stops at its k, or where
 * its top probability falls below its draft_min_p). So n sequences drafting k tokens cost the
 * draft model k evaluations, not n k. The drafts are what spec_draft would propose (up to the
 * kernels' rounding between batch sizes); the target verifies them either way.
 */
typedef struct spec_batch spec_batch;

/* Buffers for batches of up to max_seqs sequences of the draft engine (borrowed, for the batch's
 * lifetime; used by one thread at a time). Errors: ATTND_ERR_INVALID, ATTND_ERR_NOMEM. */
attnd_status spec_batch_create(spec_batch **out, engine *draft, int max_seqs, attnd_err *err);
void spec_batch_destroy(spec_batch *b); /* accepts NULL */

/* Whether s drafts with a draft model that has not stopped (NULL: false). */
bool spec_uses_draft_model(const spec *s);
/* Whether s drafts with the target's MTP block (NULL: false); spec_draft drafts it. */
bool spec_uses_mtp(const spec *s);
/* With a draft model or the MTP block: how many tokens (at most max, and draft_max) s's next draft
 * may have, as spec_draft would decide (st as there); 0 = none. Prompt lookup: 0 (use spec_draft). */
int spec_plan(spec *s, spec_step *st, int max);
/* Drafts sp[0..n) (n <= max_seqs), each up to k[i] tokens (its plan), into out[i]; k[i] gets how
 * many. Specs of another draft engine, or stopped, draft nothing. cost (may be NULL) learns the
 * draft model's time per planned token. Errors: engine_eval's on the draft (every k[i] is then 0;
 * the caller may go on without drafts), ATTND_ERR_INVALID (n too large). */
attnd_status spec_draft_batch(spec_batch *b, spec *const *sp, int *k, int32_t *const *out, int n, spec_cost *cost,
                              attnd_err *err);

/* A target step of rows rows took ms: teaches the spec's own cost table. */
void spec_time(spec *s, int rows, double ms);
/* The spec's own cost table (read-only; valid for the spec's lifetime). */
const spec_cost *spec_costs(const spec *s);

/* Whether the spec's draft model has stopped for good (its probes spent, its KV sequence
 * dropped): spec_draft proposes nothing more for the spec's lifetime (spec_reset included).
 * False for prompt lookup. */
bool spec_draft_stopped(const spec *s);

/* Counts for the caller's statistics: proposed tokens, and those the target then kept; teaches
 * the controller the last draft's outcome. */
void spec_count(spec *s, int drafted, int accepted);
void spec_totals(const spec *s, int64_t *drafted, int64_t *accepted);

/* Prompt lookup as a pure function over hist[0..n_hist): see the top of this file. Returns the
 * tokens proposed; *match (may be NULL) gets the length of the match they follow (0: none). */
int spec_lookup(const int32_t *hist, int n_hist, int ngram_min, int ngram_max, int max, int32_t *out, int *match);

/* Whether speculation can roll back this model's KV cache (models with sliding-window layers free
 * positions a rollback would need: speculation is off for them). A Gated DeltaNet state rolls back
 * through the states its verify keeps (kv_seq_keep_steps, asked for before each verify). */
bool spec_supported(const model *m);

#endif /* ATTND_SPEC_H */
