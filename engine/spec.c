/*
 * spec.c — the drafters of speculative decoding (see attnd/spec.h): prompt lookup over the
 * history, and a draft model kept in step with the history in its own KV sequence. The draft's
 * sequence holds a prefix of the tokens it was last asked about; each spec_draft rolls it back
 * to the prefix it shares with the history and evaluates the rest in chunks, so accepted drafts
 * cost the draft nothing more and rejected ones are dropped by a truncation. The controller
 * (spec_ctl, spec_cost) decides how many tokens each draft may have from measured step costs and
 * the acceptance learned so far.
 */
#include "attnd/spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/sampler.h"
#include "attnd/tokenizer.h"
#include "block.h"

struct spec {
    spec_params p;
    int32_t *hist;          /* (cap) confirmed tokens: prompt, then generated */
    int n_hist;
    size_t cap;
    int64_t drafted, accepted;
    spec_ctl ctl;           /* acceptance per class, back-off */
    spec_cost cost;         /* the target's step costs when the caller keeps none (spec_time) */
    int last_cls;           /* the class of the last draft (spec_count teaches it) */
    /* with a draft model */
    kv_seq *ds;             /* the draft's sequence; holds dtok[0..kv_seq_len(ds)) */
    int32_t *dtok;          /* (n_ctx of the draft) */
    int d_ctx, d_vocab, d_batch;
    float *dlogits;         /* (d_vocab) of the draft's newest position */
    batch_entry *db;        /* (d_batch) */
    char *dmem;             /* the block dtok, dlogits and db are laid out in (layout_draft) */
    /* with the model's MTP block (p.mtp): dlogits as above, and the block's hidden states */
    float *mh;              /* (2, n_embd): the last step's, the step before's */
};

void spec_params_default(spec_params *p) {
    *p = (spec_params){.draft_max = 8, .ngram_min = 2, .ngram_max = 8, .draft_min_p = 0.5f};
}

attnd_status spec_params_validate(const spec_params *p, attnd_err *err) {
    if (p->draft_max < 1 || p->draft_max > SPEC_MAX_DRAFT)
        return attnd_fail(err, ATTND_ERR_INVALID, "draft_max %d is outside 1..%d", p->draft_max, SPEC_MAX_DRAFT);
    if (p->ngram_min < 1 || p->ngram_max > 8 || p->ngram_min > p->ngram_max)
        return attnd_fail(err, ATTND_ERR_INVALID, "the lookup n-gram range %d..%d is not within 1..8", p->ngram_min,
                          p->ngram_max);
    if (!(p->draft_min_p >= 0 && p->draft_min_p <= 1))
        return attnd_fail(err, ATTND_ERR_INVALID, "draft_min_p %g is outside 0..1", p->draft_min_p);
    if (p->draft && !p->draft_pool) return attnd_fail(err, ATTND_ERR_INVALID, "a draft model needs its KV pool");
    if (p->mtp && p->draft) return attnd_fail(err, ATTND_ERR_INVALID, "a draft model and the MTP block are exclusive");
    if (p->mtp && (!p->mtp_seq || !model_info_get(engine_model(p->mtp))->mtp || !kv_pool_mtp(kv_seq_pool(p->mtp_seq))))
        return attnd_fail(err, ATTND_ERR_INVALID, "MTP drafting needs a model with an MTP block and a sequence whose "
                          "pool caches it");
    return ATTND_OK;
}

bool spec_supported(const model *m) {
    return model_info_get(m)->n_local_layers == 0;
}

/* The token strings of both files, id by id; a file without a vocabulary matches only another. */
static attnd_status compare_tokens(const model *target, const model *draft, attnd_err *err) {
    tokenizer *a = NULL, *b = NULL;
    attnd_err ignored;
    bool ha = tok_load(&a, model_gguf(target), &ignored) == ATTND_OK;
    bool hb = tok_load(&b, model_gguf(draft), &ignored) == ATTND_OK;
    attnd_status st = ATTND_OK;
    if (ha != hb) {
        st = attnd_fail(err, ATTND_ERR_INVALID, "the draft model's vocabulary differs: only the %s has one",
                        ha ? "target" : "draft");
    } else if (ha && tok_n_vocab(a) != tok_n_vocab(b)) {
        st = attnd_fail(err, ATTND_ERR_INVALID, "the draft model's vocabulary differs: %d tokens, the target has %d",
                        tok_n_vocab(b), tok_n_vocab(a));
    } else if (ha) {
        for (int i = 0; i < tok_n_vocab(a); i++) {
            if (strcmp(tok_piece(a, i), tok_piece(b, i)) == 0) continue;
            st = attnd_fail(err, ATTND_ERR_INVALID, "the draft model's vocabulary differs at token %d: \"%.40s\", the target has \"%.40s\"",
                            i, tok_piece(b, i), tok_piece(a, i));
            break;
        }
    }
    tok_destroy(a);
    tok_destroy(b);
    return st;
}

attnd_status spec_vocab_check(const model *target, const model *draft, attnd_err *err) {
    int nt = model_info_get(target)->n_vocab, nd = model_info_get(draft)->n_vocab;
    if (nt != nd)
        return attnd_fail(err, ATTND_ERR_INVALID, "the draft model's vocabulary differs: %d logits, the target has %d",
                          nd, nt);
    return compare_tokens(target, draft, err);
}

/* The draft model's buffers, sized by d_ctx, d_vocab and d_batch, in one block (block.h). */
static size_t layout_draft(spec *s, char *mem) {
    block b = {.mem = mem};
    s->dtok = block_take(&b, (size_t)s->d_ctx, sizeof(*s->dtok));
    s->dlogits = block_take(&b, (size_t)s->d_vocab, sizeof(*s->dlogits));
    s->db = block_take(&b, (size_t)s->d_batch, sizeof(*s->db));
    return block_size(&b);
}

attnd_status spec_create(spec **out, const spec_params *p, attnd_err *err) {
    *out = NULL;
    attnd_status st = spec_params_validate(p, err);
    if (st != ATTND_OK) return st;
    spec *s = calloc(1, sizeof(*s));
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    s->p = *p;
    spec_ctl_init(&s->ctl);
    if (p->draft) s->ctl.probe_limit[0] = SPEC_DRAFT_PROBES;
    if (p->draft) {
        const model_info *mi = model_info_get(engine_model(p->draft));
        s->d_ctx = mi->n_ctx, s->d_vocab = mi->n_vocab, s->d_batch = engine_max_batch(p->draft);
        if (!(s->dmem = block_alloc(layout_draft(s, NULL)))) {
            st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for the draft model's buffers");
            goto fail;
        }
        layout_draft(s, s->dmem);
        if ((st = kv_seq_create(&s->ds, p->draft_pool, err)) != ATTND_OK) goto fail;
    } else if (p->mtp) {
        const model_info *mi = model_info_get(engine_model(p->mtp));
        s->d_ctx = mi->n_ctx, s->d_vocab = mi->n_vocab, s->d_batch = 1;
        s->dmem = block_alloc(layout_draft(s, NULL));
        s->mh = malloc(sizeof(float) * 2 * (size_t)mi->n_embd);
        if (!s->dmem || !s->mh) {
            st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for the MTP draft's buffers");
            goto fail;
        }
        layout_draft(s, s->dmem);
    }
    *out = s;
    return ATTND_OK;
fail:
    spec_destroy(s);
    return st;
}

void spec_destroy(spec *s) {
    if (!s) return;
    kv_seq_destroy(s->ds);
    free(s->hist);
    free(s->dmem); /* dtok, dlogits, db */
    free(s->mh);
    free(s);
}

attnd_status spec_push(spec *s, const int32_t *ids, int n, attnd_err *err) {
    if (!attnd_grow(&s->hist, &s->cap, (size_t)s->n_hist + (size_t)n, sizeof(*s->hist), 256))
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for the speculation history");
    memcpy(s->hist + s->n_hist, ids, sizeof(int32_t) * (size_t)n);
    s->n_hist += n;
    return ATTND_OK;
}

void spec_reset(spec *s) { s->n_hist = 0; }
int spec_history_len(const spec *s) { return s->n_hist; }

void spec_count(spec *s, int drafted, int accepted) {
    s->drafted += drafted;
    s->accepted += accepted;
    spec_ctl_learn(&s->ctl, s->last_cls, drafted, accepted);
}

void spec_totals(const spec *s, int64_t *drafted, int64_t *accepted) {
    *drafted = s->drafted;
    *accepted = s->accepted;
}

bool spec_draft_stopped(const spec *s) { return s->p.draft && !s->ds; }

void spec_time(spec *s, int rows, double ms) { spec_cost_learn(&s->cost, rows, ms); }
const spec_cost *spec_costs(const spec *s) { return &s->cost; }

// ---- the cost table -----------------------------------------------------------------------------

#define COST_DRIFT 0.05   /* a size's estimate: the least time seen, rising this share a sample */
#define COST_SPIKE 3.0    /* a size's first sample counts as at most this many estimates */
#define COST_SLOPE0 0.1   /* with one size measured: each further row assumed to add this share */
#define ACCEPT_DECAY 0.9  /* the acceptance counts' decay per draft learned */

/* Other work on the machine slows a step, never speeds it up: the least time recently seen is
 * the step's cost, and one slow step (preempted, a page fault) changes nothing. It may rise by
 * COST_DRIFT a sample, so a lasting change (a longer context, a busier machine) comes through. */
static void cost_mix(double *m, double ms) {
    double up = *m * (1 + COST_DRIFT);
    *m = *m > 0 && ms > up ? up : ms;
}

void spec_cost_learn(spec_cost *c, int rows, double ms) {
    if (rows < 1 || rows > SPEC_COST_ROWS || !(ms > 0)) return;
    double est = c->ms[rows] > 0 ? 0 : spec_cost_est(c, rows);
    cost_mix(&c->ms[rows], est > 0 && ms > COST_SPIKE * est ? COST_SPIKE * est : ms);
}

void spec_cost_learn_draft(spec_cost *c, int tokens, double ms) {
    if (ms > 0) cost_mix(&c->draft_ms, ms / (tokens > 1 ? tokens : 1));
}

/* The nearest measured sizes: up to two at or below rows (lo, lo2 < lo), one above (hi); 0 = none. */
static void cost_near(const spec_cost *c, int rows, int *lo, int *lo2, int *hi) {
    *lo = *lo2 = *hi = 0;
    for (int n = rows < SPEC_COST_ROWS ? rows : SPEC_COST_ROWS; n >= 1 && !*lo2; n--)
        if (c->ms[n] > 0) *(*lo ? lo2 : lo) = n;
    for (int n = rows + 1; n <= SPEC_COST_ROWS && !*hi; n++)
        if (c->ms[n] > 0) *hi = n;
}

double spec_cost_est(const spec_cost *c, int rows) {
    if (rows < 1) rows = 1;
    int lo, lo2, hi;
    cost_near(c, rows, &lo, &lo2, &hi);
    if (lo == rows) return c->ms[lo];
    if (lo && hi) return c->ms[lo] + (c->ms[hi] - c->ms[lo]) * (rows - lo) / (hi - lo);
    if (lo && lo2) {
        double slope = (c->ms[lo] - c->ms[lo2]) / (lo - lo2);
        return c->ms[lo] + (slope > 0 ? slope : 0) * (rows - lo);
    }
    if (lo) return c->ms[lo] * (1 + COST_SLOPE0 * (rows - lo));
    if (hi) return c->ms[hi] / (1 + COST_SLOPE0 * (hi - rows));
    return 0;
}

// ---- the controller -----------------------------------------------------------------------------

/* The prior: 1/2 for the draft model; n/(n + 2) for a lookup match of n tokens (a longer match is
 * likelier to go on), worth a few drafts, so what is measured soon outweighs it. */
void spec_ctl_init(spec_ctl *c) {
    *c = (spec_ctl){0};
    for (int i = 0; i < SPEC_CLASSES; i++) {
        c->hit[i] = i ? i : 1, c->miss[i] = i ? 2 : 1;
        c->interval[i] = SPEC_PROBE_FIRST;
    }
}

static int ctl_class(int cls) { return cls < 0 ? 0 : cls >= SPEC_CLASSES ? SPEC_CLASSES - 1 : cls; }

double spec_ctl_accept(const spec_ctl *c, int cls) {
    cls = ctl_class(cls);
    return c->hit[cls] / (c->hit[cls] + c->miss[cls]);
}

/* The tokens k drafts keep on average: a + a^2 + ... + a^k. */
static double ctl_kept(double a, int k) {
    double pk = 1, sum = 0;
    for (int i = 1; i <= k; i++) pk *= a, sum += pk;
    return sum;
}

/* The best k in 1..max for st's batch, its expected gain (*gain) and kept tokens (*kept). */
static int ctl_best(double a, const spec_step *st, int max, double *gain, double *kept) {
    double cn = spec_cost_est(st->cost, st->rows), t = st->tokens > 0 ? st->tokens : 1, d = st->cost->draft_ms;
    double pk = 1, sum = 0;
    int best = 0;
    *gain = 0, *kept = 0;
    for (int k = 1; k <= max; k++) {
        pk *= a, sum += pk;
        double ck = spec_cost_est(st->cost, st->rows + k);
        if (ck < cn) ck = cn; /* noise between sizes: more rows never cost less */
        double g = (t + sum) * cn / (t * (ck + k * d));
        if (g > *gain) *gain = g, *kept = sum, best = k;
    }
    return best;
}

/* Whether cls has made all the probes it may, which stops it for good; counts this one otherwise. */
static bool ctl_probes_spent(spec_ctl *c, int cls) {
    if (c->probe_limit[cls] && c->probes[cls] >= c->probe_limit[cls]) return c->stopped[cls] = true;
    c->probes[cls]++;
    return false;
}

/* The plans to wait before the next probe: the interval, or SPEC_PROBE_EAGER for a draft model
 * whose drafting never paid (each wait is a catch-up its probe pays for). */
static int ctl_wait(const spec_ctl *c, int cls) {
    return c->probe_limit[cls] && !c->paid[cls] ? SPEC_PROBE_EAGER : c->interval[cls];
}

int spec_ctl_plan(spec_ctl *c, int cls, spec_step *st, int max) {
    cls = ctl_class(cls);
    if (c->stopped[cls] || max <= 0 || spec_cost_est(st->cost, st->rows) <= 0) return 0;
    double a = spec_ctl_accept(c, cls), gain, kept, perfect, ignored;
    int k = ctl_best(a, st, max, &gain, &kept), k_perfect = ctl_best(1, st, max, &perfect, &ignored);
    if (gain >= SPEC_GAIN_MIN) {
        c->backed[cls] = false, c->interval[cls] = SPEC_PROBE_FIRST, c->wait[cls] = 0, c->idle[cls] = 0;
        c->probes[cls] = 0;
        c->paid[cls] |= c->learned[cls] >= 2 && (st->cost->draft_ms > 0 || !c->probe_limit[cls]);
        if (++c->explore[cls] >= SPEC_EXPLORE && k < max) /* one longer, to keep its cost measured */
            c->explore[cls] = 0, k++, kept = ctl_kept(a, k);
    } else if (perfect < SPEC_GAIN_MIN) {
        /* the rows cost too much whatever is kept (a full batch, a compute-bound model): not the
         * acceptance's fault; a rare probe of the most promising length re-measures its cost,
         * except a draft model's (it would first catch its KV up; the batch's own steps measure
         * the costs) */
        if (c->probe_limit[cls] || ++c->idle[cls] < SPEC_PROBE_MAX) return 0;
        c->idle[cls] = 0, k = k_perfect;
        kept = ctl_kept(a, k);
    } else if (!c->backed[cls]) {
        c->backed[cls] = true, c->wait[cls] = ctl_wait(c, cls);
        return 0;
    } else if (c->wait[cls] > 0 || ctl_probes_spent(c, cls)) {
        c->wait[cls] -= c->wait[cls] > 0;
        return 0;
    } else { /* a probe: one token, to see whether acceptance has changed */
        k = 1, kept = a;
        c->interval[cls] = 2 * c->interval[cls] < SPEC_PROBE_MAX ? 2 * c->interval[cls] : SPEC_PROBE_MAX;
        c->wait[cls] = ctl_wait(c, cls);
    }
    st->rows += k, st->tokens += kept;
    return k;
}

void spec_ctl_learn(spec_ctl *c, int cls, int drafted, int accepted) {
    if (drafted <= 0) return;
    cls = ctl_class(cls);
    c->hit[cls] = ACCEPT_DECAY * c->hit[cls] + accepted;
    c->miss[cls] = ACCEPT_DECAY * c->miss[cls] + (accepted < drafted);
    c->learned[cls]++;
}

// ---- prompt lookup ------------------------------------------------------------------------------

int spec_lookup(const int32_t *hist, int n_hist, int ngram_min, int ngram_max, int max, int32_t *out, int *match) {
    if (match) *match = 0;
    for (int n = ngram_max; n >= ngram_min; n--) {
        if (n >= n_hist) continue;
        const int32_t *suffix = hist + n_hist - n;
        for (int j = n_hist - n - 1; j >= 0; j--) { /* the latest earlier occurrence */
            if (memcmp(hist + j, suffix, sizeof(int32_t) * (size_t)n) != 0) continue;
            int k = 0;
            for (; k < max && j + n + k < n_hist; k++) out[k] = hist[j + n + k];
            if (match && k > 0) *match = n;
            return k;
        }
    }
    return 0;
}

// ---- draft model --------------------------------------------------------------------------------

/* The probability of the largest logit under softmax, and its id. */
static int32_t top_token(const float *logits, int n_vocab, float *p_top) {
    int32_t best = sampler_argmax(logits, n_vocab);
    double z = 0;
    for (int i = 0; i < n_vocab; i++) z += exp((double)logits[i] - logits[best]);
    *p_top = (float)(1.0 / z);
    return best;
}

/* Evaluates toks[0..n) after the draft's sequence, logits of the last into dlogits. */
static attnd_status draft_eval(spec *s, const int32_t *toks, int n, attnd_err *err) {
    for (int done = 0; done < n;) {
        int c = n - done < s->d_batch ? n - done : s->d_batch, pos0 = kv_seq_len(s->ds);
        for (int i = 0; i < c; i++) s->db[i] = (batch_entry){s->ds, toks[done + i], pos0 + i, done + i == n - 1};
        attnd_status st = engine_eval(s->p.draft, s->db, c, s->dlogits, err);
        if (st != ATTND_OK) return st;
        memcpy(s->dtok + pos0, toks + done, sizeof(int32_t) * (size_t)c);
        done += c;
    }
    return ATTND_OK;
}

/* Rolls the draft's sequence back to what it shares with the history and evaluates the rest, so
 * dlogits predict the token after the history. */
static int draft_rollback(spec *s);
static attnd_status draft_sync(spec *s, attnd_err *err) {
    int c = draft_rollback(s);
    return draft_eval(s, s->hist + c, s->n_hist - c, err);
}

/* Rolls the draft's sequence back to the prefix it shares with the history; returns its length
 * (at most n_hist - 1: the newest position's logits are needed again). */
static int draft_rollback(spec *s) {
    int have = kv_seq_len(s->ds), c = 0;
    while (c < have && c < s->n_hist && s->dtok[c] == s->hist[c]) c++;
    if (c == s->n_hist) c--;
    kv_seq_truncate(s->ds, c);
    return kv_seq_len(s->ds);
}

static attnd_status draft_model(spec *s, int max, int32_t *out, int *n_out, attnd_err *err) {
    if (max <= 0) return ATTND_OK;
    attnd_status st = draft_sync(s, err);
    for (int k = 0; st == ATTND_OK && k < max; k++) {
        float p;
        int32_t id = top_token(s->dlogits, s->d_vocab, &p);
        if (p < s->p.draft_min_p) break;
        out[(*n_out)++] = id;
        if (k + 1 < max) st = draft_eval(s, &id, 1, err);
    }
    return st;
}

// ---- the model's own MTP block ----------------------------------------------------------------

/* Up to max tokens from the MTP block of the target's sequence: its first step reads the newest
 * history token (the one the target evaluates next, at the sequence's length) with the target's
 * hidden state before it; each further step the drafted token with the block's own hidden state.
 * Nothing when the sequence does not hold the history but its newest token. */
static attnd_status draft_mtp(spec *s, int max, int32_t *out, int *n_out, attnd_err *err) {
    kv_seq *q = s->p.mtp_seq;
    int pos = kv_seq_len(q), E = model_info_get(engine_model(s->p.mtp))->n_embd;
    if (pos < 1 || pos != s->n_hist - 1) return ATTND_OK;
    int32_t tok = s->hist[s->n_hist - 1];
    const float *h = NULL; /* the target's, kept by the sequence */
    for (int k = 0; k < max; k++) {
        float *ho = s->mh + (size_t)(k % 2) * E, p;
        engine_mtp_entry in = {q, tok, pos + k, h};
        attnd_status st = engine_mtp_step(s->p.mtp, &in, 1, s->dlogits, ho, err);
        if (st != ATTND_OK) return st;
        int32_t id = top_token(s->dlogits, s->d_vocab, &p);
        if (p < s->p.draft_min_p) break;
        out[(*n_out)++] = id;
        tok = id, h = ho;
    }
    return ATTND_OK;
}

bool spec_uses_draft_model(const spec *s) { return s && s->ds; }
bool spec_uses_mtp(const spec *s) { return s && s->p.mtp; }

int spec_plan(spec *s, spec_step *st, int max) {
    spec_step own = {&s->cost, 1, 1};
    if (!st) st = &own;
    if (!st->cost) st->cost = &s->cost;
    if (max > s->p.draft_max) max = s->p.draft_max;
    if (!(s->ds || s->p.mtp) || max <= 0) return 0; /* lookup, or stopped for good */
    s->last_cls = 0;
    int k = s->p.fixed ? max : spec_ctl_plan(&s->ctl, 0, st, max);
    if (s->ctl.stopped[0]) kv_seq_destroy(s->ds), s->ds = NULL; /* its KV goes, never caught up again */
    if (s->n_hist + k > s->d_ctx) k = s->d_ctx - s->n_hist;
    return s->n_hist > 0 && k > 0 ? k : 0;
}

attnd_status spec_draft(spec *s, spec_step *st, int max, int32_t *out, int *n_out, attnd_err *err) {
    *n_out = 0;
    spec_step own = {&s->cost, 1, 1};
    if (!st) st = &own;
    if (!st->cost) st->cost = &s->cost;
    if (max > s->p.draft_max) max = s->p.draft_max;
    if (max <= 0) return ATTND_OK;
    if (s->p.draft || s->p.mtp) {
        int k = spec_plan(s, st, max);
        if (k == 0) return ATTND_OK;
        double t0 = attnd_now_s();
        attnd_status rc = s->p.mtp ? draft_mtp(s, k, out, n_out, err) : draft_model(s, k, out, n_out, err);
        spec_cost_learn_draft(st->cost, k, (attnd_now_s() - t0) * 1e3);
        return rc;
    }
    int32_t cand[SPEC_MAX_DRAFT];
    int match, n = spec_lookup(s->hist, s->n_hist, s->p.ngram_min, s->p.ngram_max, max, cand, &match);
    if (n == 0) return ATTND_OK;
    s->last_cls = match;
    int k = s->p.fixed ? n : spec_ctl_plan(&s->ctl, match, st, n);
    memcpy(out, cand, sizeof(int32_t) * (size_t)k);
    *n_out = k;
    return ATTND_OK;
}

// ---- drafting for several sequences at once --------------------------------------------------------

struct spec_batch {
    engine *e;
    int max_seqs, cap, vocab;
    batch_entry *b; /* (cap) */
    int *who;       /* (cap) the spec of each entry */
    int *row_of;    /* (max_seqs) the spec of each logits row */
    float *logits;  /* (max_seqs, vocab): one row per spec at most in an evaluation */
    bool *going;    /* (max_seqs) still drafting */
    int *planned;   /* (max_seqs) the tokens each may draft */
};

attnd_status spec_batch_create(spec_batch **out, engine *draft, int max_seqs, attnd_err *err) {
    *out = NULL;
    if (max_seqs < 1) return attnd_fail(err, ATTND_ERR_INVALID, "a draft batch needs room for a sequence");
    spec_batch *b = calloc(1, sizeof(*b));
    if (!b) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    b->e = draft, b->max_seqs = max_seqs, b->cap = engine_max_batch(draft);
    b->vocab = model_info_get(engine_model(draft))->n_vocab;
    b->b = malloc(sizeof(batch_entry) * (size_t)b->cap);
    b->who = malloc(sizeof(int) * (size_t)b->cap);
    b->row_of = malloc(sizeof(int) * (size_t)max_seqs);
    b->logits = malloc(sizeof(float) * (size_t)max_seqs * (size_t)b->vocab);
    b->going = malloc(sizeof(bool) * (size_t)max_seqs);
    b->planned = malloc(sizeof(int) * (size_t)max_seqs);
    if (!b->b || !b->who || !b->row_of || !b->logits || !b->going || !b->planned) {
        spec_batch_destroy(b);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for the draft batch");
    }
    *out = b;
    return ATTND_OK;
}

void spec_batch_destroy(spec_batch *b) {
    if (!b) return;
    free(b->b), free(b->who), free(b->row_of), free(b->logits), free(b->going), free(b->planned);
    free(b);
}

/* Evaluates the m entries gathered (rows of them want logits), then records each entry's token
 * in its spec's dtok and each logits row in its spec's dlogits. */
static attnd_status batch_flush(spec_batch *b, spec *const *sp, int *m, int *rows, attnd_err *err) {
    attnd_status st = *m ? engine_eval(b->e, b->b, *m, b->logits, err) : ATTND_OK;
    for (int i = 0; st == ATTND_OK && i < *m; i++) sp[b->who[i]]->dtok[b->b[i].pos] = b->b[i].token;
    for (int r = 0; st == ATTND_OK && r < *rows; r++)
        memcpy(sp[b->row_of[r]]->dlogits, b->logits + (size_t)r * b->vocab, sizeof(float) * (size_t)b->vocab);
    *m = *rows = 0;
    return st;
}

/* Adds token id at the end of sp[i]'s draft sequence (the logits row when last), flushing first
 * when the batch is full. */
static attnd_status batch_add(spec_batch *b, spec *const *sp, int i, int32_t id, int pos, bool last, int *m, int *rows,
                              attnd_err *err) {
    attnd_status st = *m == b->cap ? batch_flush(b, sp, m, rows, err) : ATTND_OK;
    if (st != ATTND_OK) return st;
    if (last) b->row_of[(*rows)++] = i;
    b->who[*m] = i;
    b->b[(*m)++] = (batch_entry){sp[i]->ds, id, pos, last};
    return ATTND_OK;
}

/* Every drafting spec's sequence rolled back and caught up on its history, as one batch. */
static attnd_status batch_catch_up(spec_batch *b, spec *const *sp, int n, attnd_err *err) {
    int m = 0, rows = 0;
    attnd_status st = ATTND_OK;
    for (int i = 0; st == ATTND_OK && i < n; i++) {
        if (!b->going[i]) continue;
        spec *s = sp[i];
        for (int pos = draft_rollback(s); st == ATTND_OK && pos < s->n_hist; pos++)
            st = batch_add(b, sp, i, s->hist[pos], pos, pos == s->n_hist - 1, &m, &rows, err);
    }
    return st == ATTND_OK ? batch_flush(b, sp, &m, &rows, err) : st;
}

attnd_status spec_draft_batch(spec_batch *b, spec *const *sp, int *k, int32_t *const *out, int n, spec_cost *cost,
                              attnd_err *err) {
    if (n > b->max_seqs) return attnd_fail(err, ATTND_ERR_INVALID, "%d sequences for a draft batch of %d", n, b->max_seqs);
    int total = 0;
    for (int i = 0; i < n; i++) {
        b->going[i] = k[i] > 0 && sp[i]->ds && sp[i]->p.draft == b->e;
        b->planned[i] = b->going[i] ? k[i] : 0, k[i] = 0;
        total += b->planned[i];
    }
    double t0 = attnd_now_s();
    attnd_status st = batch_catch_up(b, sp, n, err);
    for (bool any = true; st == ATTND_OK && any;) { /* one batched step per drafted position */
        int m = 0, rows = 0;
        any = false;
        for (int i = 0; st == ATTND_OK && i < n; i++) {
            if (!b->going[i]) continue;
            spec *s = sp[i];
            float p;
            int32_t id = top_token(s->dlogits, s->d_vocab, &p);
            if (p < s->p.draft_min_p) b->going[i] = false;
            if (!b->going[i]) continue;
            out[i][k[i]++] = id;
            b->going[i] = k[i] < b->planned[i];
            if (b->going[i]) st = batch_add(b, sp, i, id, kv_seq_len(s->ds), true, &m, &rows, err), any = true;
        }
        if (st == ATTND_OK) st = batch_flush(b, sp, &m, &rows, err);
    }
    if (cost && total) spec_cost_learn_draft(cost, total, (attnd_now_s() - t0) * 1e3);
    if (st != ATTND_OK)
        for (int i = 0; i < n; i++) k[i] = 0;
    return st;
}
