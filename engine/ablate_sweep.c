/*
 * ablate_sweep.c — every head ablated in turn, as forks of one plain prefix batched through the
 * engine (attnd/ablate_sweep.h). Runs go in waves of batch_seqs forks: each wave's forks share
 * the prefix blocks, evaluate [from, n) in as few batches as max_batch allows, are measured and
 * destroyed, so the KV in use is the prefix plus one wave.
 */
#include "attnd/ablate_sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


attnd_status ablate_sweep_check(const model_info *mi, const ablate_sweep_params *p, attnd_err *err) {
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

/* One sweep's working state. */
typedef struct sweep {
    engine *e;
    const ablate_sweep_params *p;
    ablate_sweep_result *r;
    int LH, hd, V, max_batch;
    float *logits;            /* (batch_seqs, V) */
    double *base_lp;          /* (V) log P */
    batch_entry *batch;       /* (max_batch) */
    engine_ablation_head *all; /* (LH) every head, mean mode, scale 1: the plain run's sums */
    engine_ablation plain;    /* mean mode only: mean_sum (LH, hd), mean_n (LH) */
    kv_seq **kids;            /* (batch_seqs) one wave's forks */
    engine_ablation_head *kh; /* (batch_seqs) their heads */
    engine_ablation *ka;      /* (batch_seqs) their ablations: sums (batch_seqs, hd), counts */
    double *k_sum;
    int *k_n;
} sweep;

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

/* Evaluates positions [a, b) of the prompt into s in max_batch chunks; the last position's
 * logits into w->logits row 0 when want. */
static attnd_status eval_span(sweep *w, kv_seq *s, int a, int b, bool want, attnd_err *err) {
    for (int p0 = a; p0 < b; p0 += w->max_batch) {
        int n = b - p0 < w->max_batch ? b - p0 : w->max_batch;
        for (int i = 0; i < n; i++)
            w->batch[i] = (batch_entry){s, w->p->tokens[p0 + i], p0 + i, want && p0 + i == b - 1};
        attnd_status st = engine_eval(w->e, w->batch, n, w->logits, err);
        w->r->n_batches++;
        w->r->n_evaluated += n;
        if (st) return st;
    }
    return ATTND_OK;
}

/* Compares the ablated runs' logits rows [0, nk) with the plain run's: heads c0.. */
static void measure(sweep *w, int c0, int nk, double *q_lp) {
    int32_t t = w->r->target;
    for (int i = 0; i < nk; i++) {
        int32_t top = log_softmax(q_lp, w->logits + (size_t)i * w->V, w->V);
        double kl = 0;
        for (int v = 0; v < w->V; v++) kl += exp(w->base_lp[v]) * (w->base_lp[v] - q_lp[v]);
        w->r->dlogprob[c0 + i] = q_lp[t] - w->base_lp[t];
        w->r->kl[c0 + i] = kl > 0 ? kl : 0; /* rounding can leave -1e-17 for a head that does nothing */
        w->r->top[c0 + i] = top;
    }
}

/* One wave: heads c0..c0+nk-1, each a fork of prefix evaluating [from, n) ablated. */
static attnd_status wave(sweep *w, const kv_seq *prefix, int c0, int nk, double *q_lp, attnd_err *err) {
    const ablate_sweep_params *p = w->p;
    int H = w->r->n_head, span = p->n_tokens - p->from, chunk = w->max_batch / nk;
    if (chunk > span) chunk = span;
    attnd_status st = ATTND_OK;
    int made = 0;
    for (; made < nk && st == ATTND_OK; made++) {
        int c = c0 + made;
        if ((st = kv_seq_fork(&w->kids[made], prefix, err)) != ATTND_OK) break;
        w->kh[made] = (engine_ablation_head){.layer = c / H, .head = c % H, .scale = p->scale, .mode = p->mode};
        double *sum = w->k_sum + (size_t)made * w->hd;
        if (p->mode == ENGINE_ABLATE_MEAN) memcpy(sum, w->plain.mean_sum + (size_t)c * w->hd, sizeof(double) * w->hd);
        w->k_n[made] = p->mode == ENGINE_ABLATE_MEAN ? w->plain.mean_n[c] : 0;
        w->ka[made] = (engine_ablation){.heads = &w->kh[made], .n = 1, .mean_sum = sum, .mean_n = &w->k_n[made]};
        engine_seq_ablate(w->kids[made], &w->ka[made]);
    }
    for (int p0 = p->from; st == ATTND_OK && p0 < p->n_tokens; p0 += chunk) {
        int c = p->n_tokens - p0 < chunk ? p->n_tokens - p0 : chunk, n = 0;
        for (int i = 0; i < nk; i++)
            for (int k = 0; k < c; k++)
                w->batch[n++] = (batch_entry){w->kids[i], p->tokens[p0 + k], p0 + k, p0 + k == p->n_tokens - 1};
        st = engine_eval(w->e, w->batch, n, w->logits, err);
        w->r->n_batches++;
        w->r->n_evaluated += n;
    }
    if (st == ATTND_OK) measure(w, c0, nk, q_lp);
    for (int i = 0; i < made; i++) kv_seq_destroy(w->kids[i]);
    return st;
}

/* The buffers of w for W runs per wave (calloc'd, freed by sweep_free). */
static bool sweep_alloc(sweep *w, int W) {
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
    w->r->dlogprob = calloc(LH, sizeof(double));
    w->r->kl = calloc(LH, sizeof(double));
    w->r->top = calloc(LH, sizeof(int32_t));
    return w->logits && w->base_lp && w->batch && w->all && w->plain.mean_sum && w->plain.mean_n && w->kids && w->kh &&
           w->ka && w->k_sum && w->k_n && w->r->dlogprob && w->r->kl && w->r->top;
}

static void sweep_free(sweep *w) {
    free(w->logits), free(w->base_lp), free(w->batch), free(w->all), free(w->plain.mean_sum), free(w->plain.mean_n);
    free(w->kids), free(w->kh), free(w->ka), free(w->k_sum), free(w->k_n);
}

/* The plain run: [0, from) into prefix (collecting every head's sums for a mean ablation: each
 * head "ablated" around its mean with scale 1, which leaves its output as it is), then a fork
 * of it reads [from, n): log P into w->base_lp. */
static attnd_status plain_run(sweep *w, kv_seq *prefix, attnd_err *err) {
    const ablate_sweep_params *p = w->p;
    int H = w->r->n_head;
    if (p->mode == ENGINE_ABLATE_MEAN) {
        for (int c = 0; c < w->LH; c++)
            w->all[c] = (engine_ablation_head){.layer = c / H, .head = c % H, .scale = 1, .mode = ENGINE_ABLATE_MEAN};
        w->plain.heads = w->all, w->plain.n = w->LH;
        engine_seq_ablate(prefix, &w->plain);
    }
    attnd_status st = eval_span(w, prefix, 0, p->from, false, err);
    engine_seq_ablate(prefix, NULL);
    kv_seq *cont = NULL;
    if (st == ATTND_OK) st = kv_seq_fork(&cont, prefix, err);
    if (st == ATTND_OK) st = eval_span(w, cont, p->from, p->n_tokens, true, err);
    kv_seq_destroy(cont);
    if (st == ATTND_OK) {
        w->r->base_top = log_softmax(w->base_lp, w->logits, w->V);
        w->r->target = p->target >= 0 ? p->target : w->r->base_top;
        w->r->base_logprob = w->base_lp[w->r->target];
    }
    return st;
}

attnd_status ablate_sweep_run(engine *e, kv_pool *pool, const ablate_sweep_params *p, ablate_sweep_result *r,
                              attnd_err *err) {
    memset(r, 0, sizeof(*r));
    const model_info *mi = model_info_get(engine_model(e));
    attnd_status st = ablate_sweep_check(mi, p, err);
    if (st) return st;
    double t0 = attnd_now_s();
    sweep w = {.e = e, .p = p, .r = r, .LH = mi->n_layer * mi->n_head, .hd = mi->head_dim, .V = mi->n_vocab,
               .max_batch = engine_max_batch(e)};
    r->n_layer = mi->n_layer, r->n_head = mi->n_head;
    int span = p->n_tokens - p->from, W = p->max_seqs > 0 ? p->max_seqs : w.max_batch / span;
    if (W > w.max_batch) W = w.max_batch;
    if (W > w.LH) W = w.LH;
    if (W < 1) W = 1;
    r->batch_seqs = W;
    r->n_sequences = w.LH + 1;
    kv_seq *prefix = NULL;
    if (!sweep_alloc(&w, W)) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for an ablation sweep");
    if (st == ATTND_OK) st = kv_seq_create(&prefix, pool, err);
    if (st == ATTND_OK) st = plain_run(&w, prefix, err);
    for (int c0 = 0; st == ATTND_OK && c0 < w.LH; c0 += W)
        st = wave(&w, prefix, c0, w.LH - c0 < W ? w.LH - c0 : W, w.base_lp + w.V, err);
    kv_seq_destroy(prefix);
    sweep_free(&w);
    r->wall_ms = (attnd_now_s() - t0) * 1e3;
    if (st != ATTND_OK) ablate_sweep_result_free(r);
    return st;
}

void ablate_sweep_result_free(ablate_sweep_result *r) {
    if (!r) return;
    free(r->dlogprob), free(r->kl), free(r->top);
    memset(r, 0, sizeof(*r));
}
