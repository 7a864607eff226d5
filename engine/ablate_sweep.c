/*
 * ablate_sweep.c — every head ablated in turn, as forks of one plain prefix batched through the
 * engine (attnd/ablate_sweep.h). Runs go in waves of batch_seqs forks: each wave's forks share
 * the prefix blocks, evaluate [from, n) in as few batches as max_batch allows, are measured and
 * destroyed, so the KV in use is the prefix plus one wave. The sweep is a cursor (prefix, plain
 * run, waves) that ablate_sweep_next moves by one batch of a size the caller picks, so that a
 * server can interleave it with its decode steps.
 */
#include "attnd/ablate_sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


attnd_status ablate_sweep_check(const model_info *mi, const ablate_sweep_params *p, attnd_err *err) {
    if (mi->n_recurrent_layers) /* as engine_ablation_check: head ablation of hybrid models is not supported */
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "measure: the model ('%s') has Gated DeltaNet layers; head "
                          "ablation of hybrid models is not supported yet", mi->arch);
    if (p->n_tokens < 1 || p->n_tokens > mi->n_ctx)
        return attnd_fail(err, ATTND_ERR_INVALID, "prompt: %d tokens; the model's context holds 1..%d", p->n_tokens,
                          mi->n_ctx);
    for (int i = 0; i < p->n_tokens; i++)
        if (p->tokens[i] < 0 || p->tokens[i] >= mi->n_vocab)
            return attnd_fail(err, ATTND_ERR_INVALID, "prompt: token %d at %d is outside the vocabulary",
                              (int)p->tokens[i], i);
    if (p->target < -1 || p->target >= mi->n_vocab)
        return attnd_fail(err, ATTND_ERR_INVALID, "target: token %d is outside the vocabulary (0..%d)", (int)p->target,
                          mi->n_vocab - 1);
    if (p->from < 0 || p->from >= p->n_tokens)
        return attnd_fail(err, ATTND_ERR_INVALID, "from: %d is outside 0..%d (the measured position)", p->from,
                          p->n_tokens - 1);
    if (!isfinite(p->scale)) return attnd_fail(err, ATTND_ERR_INVALID, "scale: not finite");
    if (p->mode != ENGINE_ABLATE_ZERO && p->mode != ENGINE_ABLATE_MEAN)
        return attnd_fail(err, ATTND_ERR_INVALID, "mode: unknown (%d)", (int)p->mode);
    return ATTND_OK;
}

/* One sweep's working state: the buffers of ablate_sweep_run, and where the sweep stands
 * (ablate_sweep_next evaluates one batch of it at a time). */
struct ablate_sweep {
    engine *e;
    kv_pool *pool;
    ablate_sweep_params p;    /* p.tokens borrowed */
    ablate_sweep_result r;    /* filled in as the sweep goes; handed out by ablate_sweep_finish */
    int LH, hd, V, max_batch, W;
    float *logits;            /* (W, V) one batch's measured rows */
    double *base_lp;          /* (2, V) log P, then scratch for log Q */
    batch_entry *batch;       /* (max_batch) */
    engine_ablation_head *all; /* (LH) every head, mean mode, scale 1: the plain run's sums */
    engine_ablation plain;    /* mean mode only: mean_sum (LH, hd), mean_n (LH) */
    kv_seq **kids;            /* (W) one wave's forks */
    engine_ablation_head *kh; /* (W) their heads */
    engine_ablation *ka;      /* (W) their ablations: sums (W, hd), counts */
    double *k_sum;
    int *k_n;
    // ---- where it stands ----
    int phase;                /* SW_*: what the next batch evaluates */
    kv_seq *prefix;           /* [0, from), every wave's fork parent */
    kv_seq *cont;             /* SW_PLAIN: the plain run's [from, n), a fork of prefix */
    int pos;                  /* SW_PREFIX / SW_PLAIN: the next position */
    int c0, nk;               /* SW_WAVE: the wave's heads c0..c0+nk-1, forked when made == nk */
    int made;
    long done;                /* SW_WAVE: entries evaluated of the wave's nk * (n - from) */
};

enum { SW_PREFIX, SW_PLAIN, SW_WAVE, SW_DONE };

/* lp[0..V) = log softmax(lg), in double; returns the argmax (lowest id on ties). */
static int32_t log_softmax(double *lp, const float *lg, int V) {
    int32_t best = 0;
    for (int v = 1; v < V; v++)
        if (lg[v] > lg[best]) best = v;
    double sum = 0, mx = lg[best];
    for (int v = 0; v < V; v++) sum += exp((double)lg[v] - mx);
    double lz = mx + log(sum);
    for (int v = 0; v < V; v++) lp[v] = (double)lg[v] - lz;
    return best;
}

/* Evaluates w->batch[0..n) as one batch, counted in the result. */
static attnd_status eval(ablate_sweep *w, int n, attnd_err *err) {
    w->r.n_batches++;
    w->r.n_evaluated += n;
    return engine_eval(w->e, w->batch, n, w->logits, err);
}

/* Compares ablated head c's logits row with the plain run's. */
static void measure(ablate_sweep *w, int c, const float *row) {
    double *q_lp = w->base_lp + w->V;
    int32_t t = w->r.target, top = log_softmax(q_lp, row, w->V);
    double kl = 0;
    for (int v = 0; v < w->V; v++) kl += exp(w->base_lp[v]) * (w->base_lp[v] - q_lp[v]);
    w->r.dlogprob[c] = q_lp[t] - w->base_lp[t];
    w->r.kl[c] = kl > 0 ? kl : 0; /* rounding can leave -1e-17 for a head that does nothing */
    w->r.top[c] = top;
}

/* The buffers of w for W runs per wave (calloc'd, freed by ablate_sweep_destroy). */
static bool sweep_alloc(ablate_sweep *w, int W) {
    size_t LH = (size_t)w->LH, hd = (size_t)w->hd;
    w->logits = malloc(sizeof(float) * (size_t)W * w->V); /* a wave's last positions (the plain run: one) */
    w->base_lp = malloc(sizeof(double) * 2 * (size_t)w->V); /* log P, then scratch for log Q */
    w->batch = malloc(sizeof(batch_entry) * (size_t)w->max_batch);
    w->all = calloc(LH, sizeof(*w->all));
    w->plain.mean_sum = calloc(LH * hd, sizeof(double));
    w->plain.mean_n = calloc(LH, sizeof(int));
    w->kids = calloc((size_t)W, sizeof(*w->kids));
    w->kh = calloc((size_t)W, sizeof(*w->kh));
    w->ka = calloc((size_t)W, sizeof(*w->ka));
    w->k_sum = calloc((size_t)W * hd, sizeof(double));
    w->k_n = calloc((size_t)W, sizeof(int));
    w->r.dlogprob = calloc(LH, sizeof(double));
    w->r.kl = calloc(LH, sizeof(double));
    w->r.top = calloc(LH, sizeof(int32_t));
    return w->logits && w->base_lp && w->batch && w->all && w->plain.mean_sum && w->plain.mean_n && w->kids && w->kh &&
           w->ka && w->k_sum && w->k_n && w->r.dlogprob && w->r.kl && w->r.top;
}

/* The wave count of p on e: as many forks as one max_batch holds for their span (p->max_seqs
 * caps it), 1..n_layer*n_head. */
static int wave_size(const ablate_sweep_params *p, int max_batch, int LH) {
    int span = p->n_tokens - p->from, W = p->max_seqs > 0 ? p->max_seqs : max_batch / span;
    if (W > max_batch) W = max_batch;
    if (W > LH) W = LH;
    return W < 1 ? 1 : W;
}

size_t ablate_sweep_kv_bytes(const engine *e, const kv_pool *pool, const ablate_sweep_params *p) {
    const model_info *mi = model_info_get(engine_model(e));
    int W = wave_size(p, engine_max_batch(e), mi->n_layer * mi->n_head);
    /* each fork writes its span and copies the prefix's partly filled last block */
    size_t block = kv_pool_bytes_for(pool, 1), fork = kv_pool_bytes_for(pool, p->n_tokens - p->from) + block;
    return kv_pool_bytes_for(pool, p->n_tokens) + (size_t)W * fork;
}

attnd_status ablate_sweep_create(ablate_sweep **out, engine *e, kv_pool *pool, const ablate_sweep_params *p,
                                 attnd_err *err) {
    *out = NULL;
    const model_info *mi = model_info_get(engine_model(e));
    attnd_status st = ablate_sweep_check(mi, p, err);
    if (st) return st;
    ablate_sweep *w = calloc(1, sizeof(*w));
    if (!w) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for an ablation sweep");
    *w = (ablate_sweep){.e = e, .pool = pool, .p = *p, .LH = mi->n_layer * mi->n_head, .hd = mi->head_dim,
                        .V = mi->n_vocab, .max_batch = engine_max_batch(e), .phase = SW_PREFIX};
    w->W = wave_size(p, w->max_batch, w->LH);
    w->r = (ablate_sweep_result){.n_layer = mi->n_layer, .n_head = mi->n_head, .batch_seqs = w->W,
                                 .n_sequences = w->LH + 1};
    if (!sweep_alloc(w, w->W)) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for an ablation sweep");
    if (st == ATTND_OK) st = kv_seq_create(&w->prefix, pool, err);
    if (st != ATTND_OK) {
        ablate_sweep_destroy(w);
        return st;
    }
    if (p->mode == ENGINE_ABLATE_MEAN) { /* each head "ablated" around its mean with scale 1: unchanged */
        int H = mi->n_head;
        for (int c = 0; c < w->LH; c++)
            w->all[c] = (engine_ablation_head){.layer = c / H, .head = c % H, .scale = 1, .mode = ENGINE_ABLATE_MEAN};
        w->plain.heads = w->all, w->plain.n = w->LH;
        engine_seq_ablate(w->prefix, &w->plain);
    }
    *out = w;
    return ATTND_OK;
}

void ablate_sweep_destroy(ablate_sweep *w) {
    if (!w) return;
    for (int i = 0; i < w->made; i++) kv_seq_destroy(w->kids[i]);
    kv_seq_destroy(w->cont);
    kv_seq_destroy(w->prefix);
    free(w->logits), free(w->base_lp), free(w->batch), free(w->all), free(w->plain.mean_sum), free(w->plain.mean_n);
    free(w->kids), free(w->kh), free(w->ka), free(w->k_sum), free(w->k_n);
    ablate_sweep_result_free(&w->r);
    free(w);
}

/* The plain prefix [0, from), collecting every head's sums for a mean ablation: at most max
 * positions. When it is read, the plain run's continuation forks it. */
static attnd_status next_prefix(ablate_sweep *w, int max, attnd_err *err) {
    int n = w->p.from - w->pos < max ? w->p.from - w->pos : max;
    for (int i = 0; i < n; i++) w->batch[i] = (batch_entry){w->prefix, w->p.tokens[w->pos + i], w->pos + i, false};
    attnd_status st = n ? eval(w, n, err) : ATTND_OK;
    if (st != ATTND_OK || (w->pos += n) < w->p.from) return st;
    engine_seq_ablate(w->prefix, NULL);
    w->phase = SW_PLAIN;
    return kv_seq_fork(&w->cont, w->prefix, err);
}

/* The plain run's [from, n), at most max positions: log P into base_lp once it ends. */
static attnd_status next_plain(ablate_sweep *w, int max, attnd_err *err) {
    int n = w->p.n_tokens - w->pos < max ? w->p.n_tokens - w->pos : max;
    for (int i = 0; i < n; i++)
        w->batch[i] = (batch_entry){w->cont, w->p.tokens[w->pos + i], w->pos + i, w->pos + i == w->p.n_tokens - 1};
    attnd_status st = eval(w, n, err);
    if (st != ATTND_OK || (w->pos += n) < w->p.n_tokens) return st;
    kv_seq_destroy(w->cont);
    w->cont = NULL;
    w->r.base_top = log_softmax(w->base_lp, w->logits, w->V);
    w->r.target = w->p.target >= 0 ? w->p.target : w->r.base_top;
    w->r.base_logprob = w->base_lp[w->r.target];
    w->phase = SW_WAVE;
    w->nk = w->LH < w->W ? w->LH : w->W;
    return ATTND_OK;
}

/* Forks the wave's runs from the prefix, each with its one head ablated. */
static attnd_status wave_fork(ablate_sweep *w, attnd_err *err) {
    const ablate_sweep_params *p = &w->p;
    int H = w->r.n_head;
    for (; w->made < w->nk; w->made++) {
        int k = w->made, c = w->c0 + k;
        attnd_status st = kv_seq_fork(&w->kids[k], w->prefix, err);
        if (st != ATTND_OK) return st;
        w->kh[k] = (engine_ablation_head){.layer = c / H, .head = c % H, .scale = p->scale, .mode = p->mode};
        double *sum = w->k_sum + (size_t)k * w->hd;
        if (p->mode == ENGINE_ABLATE_MEAN) memcpy(sum, w->plain.mean_sum + (size_t)c * w->hd, sizeof(double) * w->hd);
        w->k_n[k] = p->mode == ENGINE_ABLATE_MEAN ? w->plain.mean_n[c] : 0;
        w->ka[k] = (engine_ablation){.heads = &w->kh[k], .n = 1, .mean_sum = sum, .mean_n = &w->k_n[k]};
        engine_seq_ablate(w->kids[k], &w->ka[k]);
    }
    return ATTND_OK;
}

/* Up to max entries of the wave: its nk runs over [from, n), position by position (entry e is
 * run e % nk at from + e / nk, so each run's positions go in order); a run's last position is
 * measured in the batch that holds it. When the wave ends its forks go and the next one starts. */
static attnd_status next_wave(ablate_sweep *w, int max, attnd_err *err) {
    attnd_status st = wave_fork(w, err);
    if (st != ATTND_OK) return st;
    long total = (long)w->nk * (w->p.n_tokens - w->p.from), e0 = w->done;
    int n = total - e0 < max ? (int)(total - e0) : max, rows = 0;
    for (int i = 0; i < n; i++) {
        long e = e0 + i;
        int k = (int)(e % w->nk), pos = w->p.from + (int)(e / w->nk);
        w->batch[i] = (batch_entry){w->kids[k], w->p.tokens[pos], pos, pos == w->p.n_tokens - 1};
    }
    if ((st = eval(w, n, err)) != ATTND_OK) return st;
    for (int i = 0; i < n; i++)
        if (w->batch[i].want_logits) measure(w, w->c0 + (int)((e0 + i) % w->nk), w->logits + (size_t)rows++ * w->V);
    if ((w->done += n) < total) return ATTND_OK;
    for (int i = 0; i < w->made; i++) kv_seq_destroy(w->kids[i]);
    w->made = 0, w->done = 0;
    w->c0 += w->nk;
    w->nk = w->LH - w->c0 < w->W ? w->LH - w->c0 : w->W;
    if (w->nk <= 0) w->phase = SW_DONE;
    return ATTND_OK;
}

attnd_status ablate_sweep_next(ablate_sweep *w, int max_entries, bool *done, attnd_err *err) {
    double t0 = attnd_now_s();
    int max = max_entries < 1 ? 1 : max_entries > w->max_batch ? w->max_batch : max_entries;
    attnd_status st = ATTND_OK;
    int batches = w->r.n_batches;
    while (st == ATTND_OK && w->phase != SW_DONE && w->r.n_batches == batches) /* an empty prefix: no batch */
        st = w->phase == SW_PREFIX ? next_prefix(w, max, err)
           : w->phase == SW_PLAIN  ? next_plain(w, max, err)
                                   : next_wave(w, max, err);
    w->r.wall_ms += (attnd_now_s() - t0) * 1e3;
    *done = st == ATTND_OK && w->phase == SW_DONE;
    return st;
}

long ablate_sweep_evaluated(const ablate_sweep *w) { return w->r.n_evaluated; }

void ablate_sweep_take_result(ablate_sweep *w, ablate_sweep_result *r) {
    ATTND_ASSERT(w->phase == SW_DONE);
    *r = w->r;
    memset(&w->r, 0, sizeof(w->r));
}

attnd_status ablate_sweep_run(engine *e, kv_pool *pool, const ablate_sweep_params *p, ablate_sweep_result *r,
                              attnd_err *err) {
    memset(r, 0, sizeof(*r));
    ablate_sweep *w;
    attnd_status st = ablate_sweep_create(&w, e, pool, p, err);
    bool done = false;
    while (st == ATTND_OK && !done) st = ablate_sweep_next(w, engine_max_batch(e), &done, err);
    if (st == ATTND_OK) ablate_sweep_take_result(w, r);
    ablate_sweep_destroy(w);
    return st;
}

void ablate_sweep_result_free(ablate_sweep_result *r) {
    if (!r) return;
    free(r->dlogprob), free(r->kl), free(r->top);
    memset(r, 0, sizeof(*r));
}
