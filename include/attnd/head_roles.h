/*
 * head_roles.h — what kind of head each attention head is, scored on probes made from the
 * model's own vocabulary (`attnd heads`, GET /v1/heads).
 *
 * A probe is [BOS] r_0 .. r_{T-1} r_0 .. r_{T-1}: T distinct tokens drawn at random from the
 * candidates the caller gives (its vocabulary without control tokens), repeated once. Evaluated
 * plainly with every head's attention captured (attnd/attn_capture.h); per head, averaged over
 * queries and probes:
 *   previous_token  weight on position i - 1, over every query i >= 1;
 *   induction       weight on the token after the earlier occurrence of the query's token
 *                   (second copy: query r_k looks at the first copy's r_{k+1}), the pattern
 *                   of in-context copying;
 *   sink            weight on position 0 (the first token), over every query i >= 1;
 *   local           weight on the last `window` positions (itself included), over queries
 *                   i >= window (so position 0 is outside).
 * Each is in [0, 1]. A head gets a label where its score clears HEAD_ROLE_* below (local only
 * when it is not a previous-token head). These are patterns on random text, not proof of what
 * the head does on real text: ablate it to see that.
 */
#ifndef ATTND_HEAD_ROLES_H
#define ATTND_HEAD_ROLES_H

#include <stdint.h>

#include "attnd/common.h"
#include "attnd/engine.h"
#include "attnd/kv.h"

#define HEAD_ROLE_PREVIOUS 0.4 /* previous_token score for the label "previous_token" */
#define HEAD_ROLE_INDUCTION 0.3
#define HEAD_ROLE_SINK 0.6
#define HEAD_ROLE_LOCAL 0.7

typedef struct head_roles_params {
    const int32_t *candidates; /* (n_candidates) token ids to draw probes from, borrowed; >= 2 */
    int n_candidates;
    int32_t bos;               /* first token of every probe; -1 = none */
    int length;                /* T, tokens per copy; 0 = 32 (capped to fit the context) */
    int n_probes;              /* 0 = 4 */
    int window;                /* local window; 0 = 4 */
    uint64_t seed;             /* probes are a function of the seed and the candidates */
} head_roles_params;

typedef struct head_scores {
    double previous_token, induction, sink, local;
} head_scores;

typedef struct head_roles {
    int n_layer, n_head;
    head_scores *scores;       /* (n_layer, n_head) owned */
    int recurrent_every;       /* a hybrid model's: only every recurrent_every-th layer (attention)
                                  is scored, the Gated DeltaNet layers' scores stay 0
                                  (head_roles_scored); 0 = every layer */
    int length, n_probes, window; /* as used */
    double wall_ms;
} head_roles;

/* Scores every head (see above) with e and a sequence of pool, on the calling thread. Errors:
 * ATTND_ERR_INVALID (fewer than 2 candidates, an id outside the vocabulary, no room for a probe
 * of 2 x 2 tokens), ATTND_ERR_UNSUPPORTED (an encoder), ATTND_ERR_NOMEM. *out is zeroed on
 * error. */
attnd_status head_roles_compute(engine *e, kv_pool *pool, const head_roles_params *p, head_roles *out, attnd_err *err);
void head_roles_free(head_roles *r); /* accepts NULL */
/* Whether layer l's heads were scored (a hybrid model's DeltaNet layers are not: no softmax rows). */
static inline bool head_roles_scored(const head_roles *r, int l) {
    return !r->recurrent_every || (l + 1) % r->recurrent_every == 0;
}

/* Probe k of p with T tokens per copy into ids[0..(bos >= 0) + 2T): what head_roles_compute
 * evaluates (for tests and for showing the probe). */
void head_roles_probe(int32_t *ids, const head_roles_params *p, int T, int k);

/* The labels of s, in this order: "previous_token", "induction", "sink", "local"; *labels gets
 * up to 4 static strings, returns how many. */
int head_roles_labels(const head_scores *s, const char *labels[4]);

#endif
