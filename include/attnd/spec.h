/*
 * spec.h — speculative decoding: proposing the next few tokens cheaply so the target model can
 * check them all in one batched engine_eval instead of one step each.
 *
 * Two drafters, both deterministic (each proposes one token per position, a point mass):
 *   - prompt lookup (no draft model): the longest suffix of the history, of ngram_max down to
 *     ngram_min tokens, that occurred earlier in the history (prompt + generated) proposes the
 *     tokens that followed its latest earlier occurrence;
 *   - a draft model with the target's vocabulary (spec_vocab_check): its greedy continuation,
 *     cut where its top probability falls below draft_min_p.
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
    engine *draft;          /* borrowed: the draft model's engine; NULL = prompt lookup */
    kv_pool *draft_pool;    /* borrowed, with draft: the pool of the draft's KV sequence */
} spec_params;

/* Defaults: draft_max 8, ngram 2..3 (single-token matches guess too often), draft_min_p 0.5,
 * prompt lookup. */
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

/* Proposes up to max (and the length spec_count set) tokens continuing the history into out;
 * *n_out may be 0.
 * A draft model evaluates what it has not seen of the history, then one step per drafted token.
 * Errors: those of engine_eval on the draft (the caller may go on without speculation). */
attnd_status spec_draft(spec *s, int max, int32_t *out, int *n_out, attnd_err *err);

/* Counts for the caller's statistics: proposed tokens, and those the target then kept. It also
 * sets the next draft's length: twice the last after a draft kept whole, else one more than was
 * kept (so a drafter that guesses badly costs about one token a step), within draft_max. */
void spec_count(spec *s, int drafted, int accepted);
void spec_totals(const spec *s, int64_t *drafted, int64_t *accepted);

/* Prompt lookup as a pure function over hist[0..n_hist): see the top of this file. */
int spec_lookup(const int32_t *hist, int n_hist, int ngram_min, int ngram_max, int max, int32_t *out);

/* Whether speculation can roll back this model's KV cache (models with sliding-window layers free
 * positions a rollback would need: speculation is off for them). */
bool spec_supported(const model *m);

#endif /* ATTND_SPEC_H */
