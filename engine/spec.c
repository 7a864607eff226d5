/*
 * spec.c — the drafters of speculative decoding (see attnd/spec.h): prompt lookup over the
 * history, and a draft model kept in step with the history in its own KV sequence. The draft's
 * sequence holds a prefix of the tokens it was last asked about; each spec_draft rolls it back
 * to the prefix it shares with the history and evaluates the rest in chunks, so accepted drafts
 * cost the draft nothing more and rejected ones are dropped by a truncation.
 */
#include "attnd/spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/tokenizer.h"

struct spec {
    spec_params p;
    int32_t *hist;          /* (cap) confirmed tokens: prompt, then generated */
    int n_hist, cap;
    int64_t drafted, accepted;
    int cur_max;            /* the draft length now: doubles after a fully kept draft, else the kept + 1 */
    /* with a draft model */
    kv_seq *ds;             /* the draft's sequence; holds dtok[0..kv_seq_len(ds)) */
    int32_t *dtok;          /* (n_ctx of the draft) */
    int d_ctx, d_vocab, d_batch;
    float *dlogits;         /* (d_vocab) of the draft's newest position */
    batch_entry *db;        /* (d_batch) */
};

void spec_params_default(spec_params *p) {
    *p = (spec_params){.draft_max = 8, .ngram_min = 2, .ngram_max = 3, .draft_min_p = 0.5f};
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
    return ATTND_OK;
}

bool spec_supported(const model *m) { return model_info_get(m)->n_local_layers == 0; }

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

attnd_status spec_create(spec **out, const spec_params *p, attnd_err *err) {
    *out = NULL;
    attnd_status st = spec_params_validate(p, err);
    if (st != ATTND_OK) return st;
    spec *s = calloc(1, sizeof(*s));
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->cur_max = p->draft_max;
    if (p->draft) {
        const model_info *mi = model_info_get(engine_model(p->draft));
        s->d_ctx = mi->n_ctx, s->d_vocab = mi->n_vocab, s->d_batch = engine_max_batch(p->draft);
        s->dtok = malloc(sizeof(int32_t) * (size_t)s->d_ctx);
        s->dlogits = malloc(sizeof(float) * (size_t)s->d_vocab);
        s->db = malloc(sizeof(batch_entry) * (size_t)s->d_batch);
        if (!s->dtok || !s->dlogits || !s->db) {
            st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for the draft model's buffers");
            goto fail;
        }
        if ((st = kv_seq_create(&s->ds, p->draft_pool, err)) != ATTND_OK) goto fail;
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
    free(s->dtok);
    free(s->dlogits);
    free(s->db);
    free(s);
}

attnd_status spec_push(spec *s, const int32_t *ids, int n, attnd_err *err) {
    if (s->n_hist + n > s->cap) {
        int cap = s->cap ? s->cap : 256;
        while (cap < s->n_hist + n) cap *= 2;
        int32_t *h = realloc(s->hist, sizeof(int32_t) * (size_t)cap);
        if (!h) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for the speculation history");
        s->hist = h, s->cap = cap;
    }
    memcpy(s->hist + s->n_hist, ids, sizeof(int32_t) * (size_t)n);
    s->n_hist += n;
    return ATTND_OK;
}

void spec_reset(spec *s) { s->n_hist = 0; }
int spec_history_len(const spec *s) { return s->n_hist; }

void spec_count(spec *s, int drafted, int accepted) {
    s->drafted += drafted;
    s->accepted += accepted;
    if (drafted == 0) return;
    s->cur_max = accepted == drafted ? 2 * s->cur_max : accepted + 1;
    if (s->cur_max > s->p.draft_max) s->cur_max = s->p.draft_max;
}

void spec_totals(const spec *s, int64_t *drafted, int64_t *accepted) {
    *drafted = s->drafted;
    *accepted = s->accepted;
}

// ---- prompt lookup ------------------------------------------------------------------------------

int spec_lookup(const int32_t *hist, int n_hist, int ngram_min, int ngram_max, int max, int32_t *out) {
    for (int n = ngram_max; n >= ngram_min; n--) {
        if (n >= n_hist) continue;
        const int32_t *suffix = hist + n_hist - n;
        for (int j = n_hist - n - 1; j >= 0; j--) { /* the latest earlier occurrence */
            if (memcmp(hist + j, suffix, sizeof(int32_t) * (size_t)n) != 0) continue;
            int k = 0;
            for (; k < max && j + n + k < n_hist; k++) out[k] = hist[j + n + k];
            return k;
        }
    }
    return 0;
}

// ---- draft model --------------------------------------------------------------------------------

/* The probability of the largest logit under softmax, and its id. */
static int32_t top_token(const float *logits, int n_vocab, float *p_top) {
    int32_t best = engine_argmax(logits, n_vocab);
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
static attnd_status draft_sync(spec *s, attnd_err *err) {
    int have = kv_seq_len(s->ds), c = 0;
    while (c < have && c < s->n_hist && s->dtok[c] == s->hist[c]) c++;
    if (c == s->n_hist) c--; /* the newest position's logits are needed again */
    kv_seq_truncate(s->ds, c);
    c = kv_seq_len(s->ds);
    return draft_eval(s, s->hist + c, s->n_hist - c, err);
}

static attnd_status draft_model(spec *s, int max, int32_t *out, int *n_out, attnd_err *err) {
    if (s->n_hist + max > s->d_ctx) max = s->d_ctx - s->n_hist;
    if (max <= 0 || s->n_hist == 0) return ATTND_OK;
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

attnd_status spec_draft(spec *s, int max, int32_t *out, int *n_out, attnd_err *err) {
    *n_out = 0;
    if (max > s->cur_max) max = s->cur_max;
    if (max <= 0) return ATTND_OK;
    if (s->p.draft) return draft_model(s, max, out, n_out, err);
    *n_out = spec_lookup(s->hist, s->n_hist, s->p.ngram_min, s->p.ngram_max, max, out);
    return ATTND_OK;
}
