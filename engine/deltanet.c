/*
 * deltanet.c — the Gated DeltaNet token mixer (deltanet.h): the causal conv, the L2 norms, the
 * delta-rule recurrence and the gated RMSNorm, in the sequential form for prefill and decode
 * alike. Sums run in the order llama.cpp's CPU kernels use (conv taps oldest first; the state's
 * rows as dot products over d_k), so near-ties of greedy decoding break the same way more often.
 */
#include "deltanet.h"

#include <math.h>
#include <string.h>

#include "threads.h"

/* Conv channels per work item: decode has one entry per sequence, so the channels are the split. */
#define DN_CONV_CHUNK 512

/* The largest value head the recurrence's stack scratch holds (model.c refuses larger ones). */
#define DN_MAX_HEAD 1024

size_t dn_state_floats(const dn_dims *d) {
    return (size_t)(d->K - 1) * (size_t)d->conv_dim + (size_t)d->hv * (size_t)d->dv * (size_t)d->dk;
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* log(1 + e^x), x itself where e^x would swamp the 1. */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Where copy q of run r takes the layer's state after entry i (an index into order), or NULL. */
static float *snap_dst(const dn_job *j, int r, int q, int i) {
    const dn_snap *s = j->snap ? &j->snap[(size_t)r * DN_SNAPS + q] : NULL;
    return s && s->dst && i >= s->at && i < s->at + s->n ? s->dst + (size_t)(i - s->at) * j->snap_stride : NULL;
}

/* conv: item w = (run w / n_chunks, channel chunk w % n_chunks); each entry of the run in order,
 * out = silu(sum over the K taps, the oldest first and the entry's own input last), then the
 * tail moves on by one input. In place: qkv's row becomes the conv's output. */
static void conv_task(void *ctx, int w, int worker) {
    (void)worker;
    const dn_job *j = ctx;
    const dn_dims *d = j->d;
    int n_chunks = (d->conv_dim + DN_CONV_CHUNK - 1) / DN_CONV_CHUNK, r = w / n_chunks;
    int c0 = (w % n_chunks) * DN_CONV_CHUNK, c1 = c0 + DN_CONV_CHUNK < d->conv_dim ? c0 + DN_CONV_CHUNK : d->conv_dim;
    float *tail = j->state[r]; /* (K - 1, conv_dim) */
    int K = d->K, C = d->conv_dim;
    for (int i = j->run_start[r]; i < j->run_start[r + 1]; i++) {
        float *x = j->qkv + (size_t)j->order[i] * C;
        for (int c = c0; c < c1; c++) {
            const float *wc = j->conv_w + (size_t)c * K;
            float acc = 0;
            for (int k = 0; k < K - 1; k++) acc += tail[(size_t)k * C + c] * wc[k];
            acc += x[c] * wc[K - 1];
            for (int k = 0; k + 1 < K - 1; k++) tail[(size_t)k * C + c] = tail[(size_t)(k + 1) * C + c];
            if (K > 1) tail[(size_t)(K - 2) * C + c] = x[c];
            x[c] = silu(acc);
        }
        for (int q = 0; q < DN_SNAPS; q++) {
            float *dst = snap_dst(j, r, q, i);
            for (int k = 0; dst && k < K - 1; k++)
                memcpy(dst + (size_t)k * C + c0, tail + (size_t)k * C + c0, sizeof(float) * (size_t)(c1 - c0));
        }
    }
}

/* x / max(|x|, eps) over n elements (the sum of squares in double, as llama.cpp's l2_norm). */
static void l2_normalise(float *x, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = 1.0f / fmaxf(sqrtf((float)ss), eps);
    for (int i = 0; i < n; i++) x[i] *= s;
}

/* Each entry's q and k heads L2-normalised. */
static void norm_task(void *ctx, int t, int worker) {
    (void)worker;
    const dn_job *j = ctx;
    const dn_dims *d = j->d;
    float *x = j->qkv + (size_t)t * d->conv_dim;
    for (int h = 0; h < 2 * d->hk; h++) l2_normalise(x + (size_t)h * d->dk, d->dk, d->eps);
}

/* a . b over n elements in 8 partial sums (lane i of the sum takes elements i, i + 8, ...): the
 * compiler keeps them in vector registers, as a SIMD dot product does; then the partial sums in
 * pairs. */
static float dot(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++) acc[i % 8] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* The recurrence of value head h over run r's entries, then each output's gated RMSNorm. */
static void recur_task(void *ctx, int w, int worker) {
    (void)worker;
    const dn_job *j = ctx;
    const dn_dims *d = j->d;
    int r = w / d->hv, h = w % d->hv, dk = d->dk, dv = d->dv, C = d->conv_dim, hk = d->grouped ? h / (d->hv / d->hk) : h % d->hk;
    float *S = j->state[r] + (size_t)(d->K - 1) * C + (size_t)h * dv * dk; /* (dv, dk): row i is S[:, i] */
    float u[DN_MAX_HEAD];
    float scale = 1.0f / sqrtf((float)dk);
    for (int i = j->run_start[r]; i < j->run_start[r + 1]; i++) {
        int t = j->order[i];
        const float *x = j->qkv + (size_t)t * C;
        const float *q = x + (size_t)hk * dk, *k = x + (size_t)(d->hk + hk) * dk, *v = x + (size_t)2 * d->hk * dk + (size_t)h * dv;
        float beta = 1.0f / (1.0f + expf(-j->beta[(size_t)t * d->hv + h]));
        float g = j->ssm_a[h] * softplus(j->alpha[(size_t)t * d->hv + h] + j->dt_bias[h]);
        float decay = expf(g);
        for (size_t e = 0; e < (size_t)dv * dk; e++) S[e] *= decay;
        for (int c = 0; c < dv; c++) u[c] = (v[c] - dot(S + (size_t)c * dk, k, dk)) * beta;
        for (int c = 0; c < dv; c++) {
            float *row = S + (size_t)c * dk;
            for (int e = 0; e < dk; e++) row[e] += k[e] * u[c];
        }
        for (int q = 0; q < DN_SNAPS; q++) {
            float *dst = snap_dst(j, r, q, i);
            if (dst) memcpy(dst + (S - j->state[r]), S, sizeof(float) * (size_t)dv * dk);
        }
        float *o = j->out + (size_t)t * d->hv * dv + (size_t)h * dv;
        const float *z = j->z + (size_t)t * d->hv * dv + (size_t)h * dv;
        double ss = 0;
        for (int c = 0; c < dv; c++) {
            o[c] = dot(S + (size_t)c * dk, q, dk) * scale;
            ss += (double)o[c] * o[c];
        }
        float rs = 1.0f / sqrtf((float)(ss / dv) + d->eps);
        for (int c = 0; c < dv; c++) o[c] = o[c] * rs * j->norm_w[c] * silu(z[c]);
    }
}

void dn_forward(const dn_job *j) {
    const dn_dims *d = j->d;
    int n_chunks = (d->conv_dim + DN_CONV_CHUNK - 1) / DN_CONV_CHUNK;
    threads_run(j->n_threads, j->n_runs * n_chunks, conv_task, (void *)j);
    threads_run(j->n >= 4 ? j->n_threads : 1, j->n, norm_task, (void *)j);
    threads_run(j->n_threads, j->n_runs * d->hv, recur_task, (void *)j);
}
