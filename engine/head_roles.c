/*
 * head_roles.c — head roles from probes of repeated random tokens (attnd/head_roles.h): each
 * probe is one plain evaluation with every head's whole rows captured, the scores read off the
 * rows and averaged.
 */
#include "attnd/head_roles.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/attn_capture.h"
#include "attnd/embed.h"

/* splitmix64: the probe's tokens are a function of the seed alone. */
static uint64_t next_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void head_roles_probe(int32_t *ids, const head_roles_params *p, int T, int k) {
    uint64_t s = p->seed + (uint64_t)k * 0xd1b54a32d192ed03ull, *rng = &s;
    int o = p->bos >= 0;
    if (o) ids[0] = p->bos;
    for (int k = 0; k < T; k++) {
        int32_t t;
        bool seen;
        do { /* distinct within a copy, so "the earlier occurrence" is one position */
            t = p->candidates[next_rand(rng) % (uint64_t)p->n_candidates];
            seen = false;
            for (int i = 0; i < k && !seen; i++) seen = ids[o + i] == t;
        } while (seen && k < p->n_candidates);
        ids[o + k] = ids[o + T + k] = t;
    }
}

/* Adds one probe's scores (rows of c over positions 0..o+2T-1) to acc, per head. */
static void score_probe(head_scores *acc, const attn_capture *c, int o, int T, int window) {
    int L = o + 2 * T;
    for (int li = 0; li < attn_capture_n_layers(c); li++)
        for (int hi = 0; hi < attn_capture_n_heads(c); hi++) {
            double prev = 0, sink = 0, ind = 0, loc = 0;
            int n_loc = 0;
            for (int i = 1; i < L; i++) {
                const float *w;
                attn_capture_row(c, li, hi, i, &w, NULL);
                prev += w[i - 1];
                sink += w[0];
                if (i >= o + T) ind += w[i - T + 1]; /* query r_k of the second copy: r_{k+1} of the first */
                if (i >= window) {
                    for (int j = i - window + 1; j <= i; j++) loc += w[j];
                    n_loc++;
                }
            }
            head_scores *s = &acc[attn_capture_layer(c, li) * attn_capture_n_heads(c) + hi];
            s->previous_token += prev / (L - 1);
            s->sink += sink / (L - 1);
            s->induction += ind / T;
            s->local += n_loc ? loc / n_loc : 0;
        }
}

/* One probe: evaluated into a fresh sequence of pool with c hooked. */
static attnd_status run_probe(engine *e, kv_pool *pool, attn_capture *c, const int32_t *ids, int L, attnd_err *err) {
    kv_seq *s = NULL;
    attnd_status st = kv_seq_create(&s, pool, err);
    if (st) return st;
    attn_capture_bind(c, s);
    attn_hook h;
    attn_hook_install(&h, e, c, NULL, 0);
    int mb = engine_max_batch(e);
    batch_entry *b = malloc(sizeof(*b) * (size_t)(L < mb ? L : mb));
    if (!b) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    for (int p0 = 0; st == ATTND_OK && p0 < L; p0 += mb) {
        int n = L - p0 < mb ? L - p0 : mb;
        for (int i = 0; i < n; i++) b[i] = (batch_entry){s, ids[p0 + i], p0 + i, false};
        st = engine_eval(e, b, n, NULL, err);
    }
    attn_hook_remove(&h);
    free(b);
    kv_seq_destroy(s);
    return st;
}

attnd_status head_roles_compute(engine *e, kv_pool *pool, const head_roles_params *p, head_roles *out, attnd_err *err) {
    memset(out, 0, sizeof(*out));
    const model_info *mi = model_info_get(engine_model(e));
    if (model_is_encoder(engine_model(e))) /* the scores are of causal rows over a sequence's KV */
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "head roles: '%s' is an encoder (every token sees every "
                          "token, no KV); the roles are scored on a decoder's causal rows", mi->arch);
    if (p->n_candidates < 2) return attnd_fail(err, ATTND_ERR_INVALID, "head roles: fewer than 2 candidate tokens");
    for (int i = 0; i < p->n_candidates; i++)
        if (p->candidates[i] < 0 || p->candidates[i] >= mi->n_vocab)
            return attnd_fail(err, ATTND_ERR_INVALID, "head roles: candidate %d is outside the vocabulary", p->candidates[i]);
    int o = p->bos >= 0, T = p->length > 0 ? p->length : 32, window = p->window > 0 ? p->window : 4;
    if (o + 2 * T > mi->n_ctx) T = (mi->n_ctx - o) / 2;
    if (T < 2) return attnd_fail(err, ATTND_ERR_INVALID, "head roles: the context (%d) holds no probe", mi->n_ctx);
    int n_probes = p->n_probes > 0 ? p->n_probes : 4, L = o + 2 * T, LH = mi->n_layer * mi->n_head;
    double t0 = attnd_now_s();
    *out = (head_roles){.n_layer = mi->n_layer, .n_head = mi->n_head, .length = T, .n_probes = n_probes,
                        .window = window, .scores = calloc((size_t)LH, sizeof(head_scores))};
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)L);
    int *attn = calloc((size_t)mi->n_layer, sizeof(int)), n_attn = 0; /* a hybrid model's attention layers */
    for (int l = 0; attn && l < mi->n_layer; l++)
        if (!model_info_recurrent(mi, l)) attn[n_attn++] = l;
    out->recurrent_every = mi->n_recurrent_layers ? mi->recurrent_every : 0;
    attn_capture *c = NULL;
    attnd_status st = out->scores && ids && attn ? ATTND_OK : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    if (st == ATTND_OK && !n_attn)
        st = attnd_fail(err, ATTND_ERR_UNSUPPORTED, "head roles: the model ('%s') has no attention layer", mi->arch);
    bool hybrid = mi->n_recurrent_layers > 0; /* its DeltaNet layers are not selected */
    attn_capture_params cp = {.n_positions = L, .deltanet = true, .layers = hybrid ? attn : NULL,
                              .n_layers = hybrid ? n_attn : 0};
    if (st == ATTND_OK) st = attn_capture_create(&c, engine_model(e), &cp, err);
    for (int k = 0; st == ATTND_OK && k < n_probes; k++) {
        head_roles_probe(ids, p, T, k);
        if ((st = run_probe(e, pool, c, ids, L, err)) == ATTND_OK) score_probe(out->scores, c, o, T, window);
    }
    for (int i = 0; st == ATTND_OK && i < LH; i++) {
        head_scores *s = &out->scores[i];
        s->previous_token /= n_probes, s->sink /= n_probes, s->induction /= n_probes, s->local /= n_probes;
    }
    attn_capture_destroy(c);
    free(ids), free(attn);
    out->wall_ms = (attnd_now_s() - t0) * 1e3;
    if (st != ATTND_OK) head_roles_free(out);
    return st;
}

void head_roles_free(head_roles *r) {
    if (!r) return;
    free(r->scores);
    memset(r, 0, sizeof(*r));
}

int head_roles_labels(const head_scores *s, const char *labels[4]) {
    int n = 0;
    if (s->previous_token >= HEAD_ROLE_PREVIOUS) labels[n++] = "previous_token";
    if (s->induction >= HEAD_ROLE_INDUCTION) labels[n++] = "induction";
    if (s->sink >= HEAD_ROLE_SINK) labels[n++] = "sink";
    if (s->local >= HEAD_ROLE_LOCAL && s->previous_token < HEAD_ROLE_PREVIOUS) labels[n++] = "local";
    return n;
}
