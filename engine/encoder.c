/*
 * encoder.c — the forward pass of encoders (arch bidirectional: bert, nomic-bert, gemma-embedding,
 * modern-bert), for engine_embed.
 *
 * A pass takes whole inputs, concatenated: row t of every activation is one token of one input.
 * The matrices are applied to all rows at once (one read of each weight per pass, as engine.c
 * does); attention is per (input, head): every query of an input sees every key of the same
 * input and none of another, so inputs of different lengths share a pass with no padding and no
 * mask to compute. Nothing is cached: K and V live in the pass's buffers and are gone when it
 * returns. The buffers are allocated per engine_embed call (sized for its largest pass), not per
 * token.
 *
 * BERT's layer, as llama.cpp computes it (src/models/bert.cpp): x0 = LayerNorm(tok + type + pos);
 * then per layer x = LN(x + W_o attend(W_q x + b, W_k x + b, W_v x + b) + b_o),
 * x = LN(x + W_down gelu(W_up x + b_up) + b_down); the last x is the hidden state (no final norm).
 * GELU is the tanh form (ggml_gelu; llama.cpp also rounds its input and output to F16 there).
 * nomic-bert: no position rows, NEOX RoPE on q and k (positions from 0 in each input), a fused
 * attn_qkv, and a SwiGLU FFN (silu(ffn_gate x) * ffn_up x) without biases.
 * gemma-embedding (EmbeddingGemma, src/models/gemma-embedding.cpp): gemma3's pre-norm layer (RMSNorm,
 * QK-norm, NEOX RoPE with the local layers' base, post-norms, GeGLU, embeddings x sqrt(n_embd), the
 * final output_norm), attending both ways; its local layers see the keys within window / 2
 * positions on either side (llama.cpp's symmetric sliding window).
 * modern-bert (ModernBERT, src/models/modern-bert.cpp): the same pre-norm recipe with LayerNorms
 * (weight, no bias) instead of RMSNorms and no post-norms: x0 = LN(tok); x += W_o attend(fused
 * W_qkv LN(x)) (the first layer without its LN); x += W_down act(gate) * up, gate and up the two
 * halves of one ffn_up (GeGLU, or SwiGLU as hidden_activation says); then LN(x) (output_norm). NEOX
 * RoPE, local layers with their own base and the symmetric window; no biases.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/embed.h"
#include "embed_eval.h"
#include "quant.h"
#include "threads.h"

// ---- loading ----------------------------------------------------------------------------------

#define MAT(field, suffix, r, c, req)                                                                                  \
    snprintf(name, sizeof(name), "blk.%d.%s.weight", l, suffix);                                                       \
    if ((st = model_find_matrix(m, name, r, c, req, &L->field, err))) return st;
#define VEC(field, suffix, ext, n, req)                                                                                \
    snprintf(name, sizeof(name), "blk.%d.%s.%s", l, suffix, ext);                                                      \
    if ((st = model_load_vector(m, name, n, req, &L->field, err))) return st;

/* Layer l's attention of a post-LayerNorm encoder: q, k, v (fused or not) with optional biases,
 * the output projection, its LayerNorm. */
static attnd_status encoder_load_attention(model *m, int l, attnd_err *err) {
    int64_t E = m->info.n_embd, Q = m->q_dim, KV = m->kv_dim;
    layer_weights *L = &m->layers[l];
    attnd_status st;
    char name[96];
    if (m->arch->fused_qkv) {
        MAT(wqkv, "attn_qkv", Q + 2 * KV, E, true);
        VEC(b_qkv, "attn_qkv", "bias", Q + 2 * KV, false);
    } else {
        MAT(wq, "attn_q", Q, E, true);
        MAT(wk, "attn_k", KV, E, true);
        MAT(wv, "attn_v", KV, E, true);
        VEC(bq, "attn_q", "bias", Q, false);
        VEC(bk, "attn_k", "bias", KV, false);
        VEC(bv, "attn_v", "bias", KV, false);
    }
    MAT(wo, "attn_output", E, Q, true);
    VEC(bo, "attn_output", "bias", E, false);
    VEC(attn_norm, "attn_output_norm", "weight", E, true);
    VEC(attn_norm_b, "attn_output_norm", "bias", E, true);
    return ATTND_OK;
}

/* Layer l of a post-LayerNorm encoder: attention, then an FFN (ungated with optional biases, or a
 * gated one without: llama.cpp applies no bias there, so a file with them is refused as unread),
 * its LayerNorm. */
static attnd_status encoder_load_layer(model *m, int l, attnd_err *err) {
    int64_t E = m->info.n_embd, F = m->info.n_ff;
    layer_weights *L = &m->layers[l];
    attnd_status st;
    char name[96];
    if ((st = encoder_load_attention(m, l, err))) return st;
    if (!m->arch->ffn_ungated) {
        MAT(w_gate, "ffn_gate", F, E, true);
    }
    MAT(w_up, "ffn_up", F, E, true);
    MAT(w_down, "ffn_down", E, F, true);
    if (m->arch->ffn_ungated) {
        VEC(b_up, "ffn_up", "bias", F, false);
        VEC(b_down, "ffn_down", "bias", E, false);
    }
    VEC(ffn_norm, "layer_output_norm", "weight", E, true);
    VEC(ffn_norm_b, "layer_output_norm", "bias", E, true);
    return ATTND_OK;
}
#undef MAT
#undef VEC

attnd_status encoder_load_weights(model *m, attnd_err *err) {
    int64_t E = m->info.n_embd;
    attnd_status st;
    const gguf_tensor *tt = gguf_find_tensor(m->f, "token_types.weight");
    /* XLM-RoBERTa's one type: [embd, 1], or [embd] from converters that squeezed it (older bge-m3 files) */
    if (tt && (tt->n_dims > 2 || tt->ne[1] < 1 || tt->ne[1] > 256))
        return attnd_fail(err, ATTND_ERR_FORMAT, "tensor 'token_types.weight' is not a (types <= 256, embd) matrix");
    m->n_types = tt ? (int)tt->ne[1] : 0;
    if ((tt && (st = model_find_matrix(m, "token_types.weight", m->n_types, E, true, &m->type_embd, err))) ||
        (m->arch->abs_pos &&
         (st = model_find_matrix(m, "position_embd.weight", m->info.n_ctx, E, true, &m->pos_embd, err))) ||
        (st = model_load_vector(m, "token_embd_norm.weight", E, true, &m->tok_norm, err)) ||
        (st = model_load_vector(m, "token_embd_norm.bias", E, true, &m->tok_norm_b, err)))
        return st;
    for (int l = 0; l < m->info.n_layer; l++)
        if ((st = encoder_load_layer(m, l, err))) return st;
    return ATTND_OK;
}

void encoder_free(model *m) {
    for (int l = 0; m->layers && l < m->info.n_layer; l++) {
        layer_weights *L = &m->layers[l];
        free(L->attn_norm_b), free(L->ffn_norm_b), free(L->b_up), free(L->b_down), free(L->b_qkv);
    }
    free(m->tok_norm);
    free(m->tok_norm_b);
}

// ---- one pass ---------------------------------------------------------------------------------

/* A pass: inputs in[0..n) as T rows, and the buffers (each sized for the call's largest pass). */
typedef struct enc_pass {
    engine *e;
    const model *m;
    const embed_input *in;
    int n, T, n_threads;
    int *start;                            /* (n + 1) each input's first row */
    int first_entry;                       /* the pass's first row as an index over the whole call (the hooks' entry) */
    float *x, *q, *k, *v, *att, *tmp, *up; /* (T, E), (T, Q), (T, KV) x2, (T, Q), (T, E), (T, F) */
    float *gate;                           /* (T, F) a gated FFN's gate, or empty */
    float *xn;                             /* (T, E) a pre-norm layer's normalised input (RMSNorm families) */
    float *fused;                          /* (T, Q + 2 KV) a fused projection's output, or empty */
    float *scores;                         /* (n_threads, enc_attend_floats) attention's scratch */
    float *pool_scratch;                   /* (embed_scratch_floats) embed_pool's */
    int max_len;
    void *mm_scratch;
    engine_attn_cb attn_cb; /* the engine's inspection hook (serial when set), or NULL */
    engine_attn_want attn_want;
    void *attn_user;
    int layer;
    bool act_gated; /* the current layer's FFN has a gate (enc_act) */
} enc_pass;

/* A row-wise normalisation of n rows of dim: out = LayerNorm(x) * w + b (mean and variance in
 * double, as ggml_norm), or out = x / rms(x) * w (the sum of squares in double, as engine.c);
 * out may be x. Parallel over chunks of rows when the work is worth a wake-up of the pool. */
typedef struct norm_job {
    float *out;
    const float *x, *w, *b;
    int n, dim;
    float eps;
    bool layer; /* LayerNorm; false: RMSNorm */
} norm_job;

#define ROW_CHUNK 8
#define ROWWISE_PAR_MIN 16384L /* elements below which one thread does it (as engine.c) */

/* sum of x[0..n) and of (x[i] - mean)^2: eight float chains (independent, so they pipeline and
 * vectorise) added in double at the end, as ggml sums vectors of floats into a double. */
static double row_sum(const float *x, int n) {
    float a[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += x[i + k];
    double s = 0;
    for (int k = 0; k < 8; k++) s += a[k];
    for (; i < n; i++) s += x[i];
    return s;
}

static double row_sq_dev(const float *x, int n, float mean) {
    float a[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += (x[i + k] - mean) * (x[i + k] - mean);
    double s = 0;
    for (int k = 0; k < 8; k++) s += a[k];
    for (; i < n; i++) s += (double)(x[i] - mean) * (x[i] - mean);
    return s;
}

static void norm_task(void *ctx, int c, int worker) {
    (void)worker;
    const norm_job *j = ctx;
    for (int t = c * ROW_CHUNK; t < j->n && t < (c + 1) * ROW_CHUNK; t++) {
        const float *r = j->x + (size_t)t * j->dim;
        float *o = j->out + (size_t)t * j->dim;
        float mean = j->layer ? (float)(row_sum(r, j->dim) / j->dim) : 0.0f;
        double var = row_sq_dev(r, j->dim, mean);
        float sc = (float)(1.0 / sqrt(var / j->dim + j->eps));
        if (!j->layer)
            for (int i = 0; i < j->dim; i++) o[i] = r[i] * sc * j->w[i];
        else if (j->b)
            for (int i = 0; i < j->dim; i++) o[i] = (r[i] - mean) * sc * j->w[i] + j->b[i];
        else
            for (int i = 0; i < j->dim; i++) o[i] = (r[i] - mean) * sc * j->w[i];
    }
}

static void norm_rows(int nth, float *out, const float *x, const float *w, const float *b, int n, int dim, float eps,
                      bool layer) {
    norm_job j = {out, x, w, b, n, dim, eps, layer};
    threads_run((long)n * dim >= ROWWISE_PAR_MIN ? nth : 1, (n + ROW_CHUNK - 1) / ROW_CHUNK, norm_task, &j);
}

/* x[i] += y[i] (+ b[i]) for i < n: blocks of 8 with a fixed inner count, which the compiler turns
 * into vector adds at -O2 (a loop of unknown count it leaves scalar). */
static void add_rows(float *restrict x, const float *restrict y, const float *restrict b, size_t n) {
    size_t i = 0;
    if (y && b)
        for (; i + 8 <= n; i += 8)
            for (int k = 0; k < 8; k++) x[i + k] += y[i + k] + b[i + k];
    else if (y)
        for (; i + 8 <= n; i += 8)
            for (int k = 0; k < 8; k++) x[i + k] += y[i + k];
    else
        for (; i + 8 <= n; i += 8)
            for (int k = 0; k < 8; k++) x[i + k] += b[i + k];
    for (; i < n; i++) x[i] += (y ? y[i] : 0.0f) + (b ? b[i] : 0.0f);
}

static void add_bias_rows(float *x, const float *b, int n, int dim) {
    for (int t = 0; b && t < n; t++) add_rows(x + (size_t)t * dim, NULL, b, (size_t)dim);
}

/* out (T, rows) = x w^T. An encoder evaluates a request's inputs in one pass, so F16/BF16
 * weights may take the float GEMM (quant_mm.gemm); a decoder's tokens must not depend on their
 * batch and never do. */
static void enc_mm(const enc_pass *p, float *out, const weight *w, const float *x) {
    quant_mm mm = {out, w->data, w->packed, w->type, w->rows, true, 0};
    quant_matmul_many(&mm, 1, w->cols, x, p->T, p->mm_scratch, p->n_threads);
}

static void enc_matmul(const enc_pass *p, float *out, const weight *w, const float *x, const float *b) {
    enc_mm(p, out, w, x);
    add_bias_rows(out, b, p->T, (int)w->rows);
}

/* x (T, E) += W in (+ b), through tmp (T, E): one pass over x for the bias and the residual. */
static void enc_matmul_add(const enc_pass *p, float *x, const weight *w, const float *in, const float *b) {
    enc_mm(p, p->tmp, w, in);
    size_t E = (size_t)w->rows;
    for (size_t t = 0; t < (size_t)p->T; t++) add_rows(x + t * E, p->tmp + t * E, b, E);
}

/* Several weights against the same input (q, k, v; gate, up): one rounding of the activations
 * and one parallel region (quant_matmul_many), then each one's bias. */
static void enc_matmul3(const enc_pass *p, float *const out[], const weight *const w[], const float *const b[], int n,
                        const float *x) {
    quant_mm mm[3] = {{0}};
    for (int i = 0; i < n; i++) mm[i] = (quant_mm){out[i], w[i]->data, w[i]->packed, w[i]->type, w[i]->rows, true, 0};
    quant_matmul_many(mm, n, w[0]->cols, x, p->T, p->mm_scratch, p->n_threads);
    for (int i = 0; i < n; i++) add_bias_rows(out[i], b[i], p->T, (int)w[i]->rows);
}

/* embed: x = tok + type + pos rows, LayerNorm'd. */
static void enc_embed(enc_pass *p) {
    const model *m = p->m;
    int E = m->info.n_embd;
    float *row = p->tmp; /* one row of scratch */
    for (int i = 0; i < p->n; i++)
        for (int t = 0; t < p->in[i].n_tokens; t++) {
            float *x = p->x + (size_t)(p->start[i] + t) * E;
            const weight *src[3] = {&m->tok_embd, &m->type_embd, &m->pos_embd};
            int idx[3] = {p->in[i].tokens[t], p->in[i].types ? p->in[i].types[t] : 0, t};
            memset(x, 0, sizeof(float) * (size_t)E);
            for (int s = 0; s < 3; s++) {
                if (!src[s]->data) continue;
                size_t rb = quant_row_bytes(src[s]->type, E);
                quant_dequantize_row(row, (const uint8_t *)src[s]->data + rb * (size_t)idx[s], src[s]->type, E);
                for (int c = 0; c < E; c++) x[c] += row[c];
            }
        }
    for (size_t i = 0; m->embd_scale != 1.0f && i < (size_t)p->T * E; i++) p->x[i] *= m->embd_scale;
    if (m->tok_norm) norm_rows(p->n_threads, p->x, p->x, m->tok_norm, m->tok_norm_b, p->T, E, m->info.rms_eps, true);
}


/* Attention of input i, head h, as two matrix products per block of ENC_QB queries: scores S =
 * Q K^T (the keys transposed once per task into the worker's scratch), each row's softmax (a local
 * layer's symmetric window masked first), then att = S V. */
#define ENC_QB 96 /* queries per block: S is (ENC_QB, len), in L2 */

static int enc_len_pad(int len) { return (len + 15) & ~15; }

/* floats of enc_attend_task's scratch per worker, for inputs of up to max_len tokens */
static size_t enc_attend_floats(const model *m, int max_len) {
    return (size_t)(m->info.head_dim + ENC_QB) * (size_t)enc_len_pad(max_len);
}

static void enc_attend_task(void *ctx, int item, int worker) {
    enc_pass *p = ctx;
    const model_info *mi = &p->m->info;
    int H = mi->n_head, hd = mi->head_dim, Q = p->m->q_dim, KV = p->m->kv_dim;
    int i = item / H, h = item % H, kh = h / (H / mi->n_head_kv);
    int s = p->start[i], len = p->in[i].n_tokens, lp = enc_len_pad(len);
    float *kt = p->scores + (size_t)worker * enc_attend_floats(p->m, p->max_len); /* (hd, lp) K^T */
    float *S = kt + (size_t)hd * lp;                                                  /* (ENC_QB, lp) */
    const float *K = p->k + (size_t)s * KV + (size_t)kh * hd, *V = p->v + (size_t)s * KV + (size_t)kh * hd;
    int half = p->m->layers[p->layer].window / 2; /* a local layer's symmetric window: |t - j| <= half */
    for (int j = 0; j < len; j++)
        for (int c = 0; c < hd; c++) kt[(size_t)c * lp + j] = K[(size_t)j * KV + c];
    for (int q0 = 0; q0 < len; q0 += ENC_QB) {
        int nq = len - q0 < ENC_QB ? len - q0 : ENC_QB;
        quant_gemm_f32(S, lp, p->q + (size_t)(s + q0) * Q + (size_t)h * hd, Q, kt, lp, nq, len, hd, false);
        for (int r = 0; r < nq; r++) {
            float *sc = S + (size_t)r * lp;
            for (int j = 0; half && j < len; j++)
                if (abs(j - (q0 + r)) > half) sc[j] = -INFINITY;
            quant_softmax(sc, len, p->m->attn_scale);
            int t = s + q0 + r;
            engine_attn_cb cb = p->attn_cb;
            if (cb && (!p->attn_want || p->attn_want(p->attn_user, p->first_entry + t, p->layer, h)))
                cb(p->attn_user, p->first_entry + t, p->layer, h, sc, len);
        }
        quant_gemm_f32(p->att + (size_t)(s + q0) * Q + (size_t)h * hd, Q, S, lp, V, KV, nq, hd, len, false);
    }
}

/* q, k, v of every row from in (T, E): one fused projection split by columns, or three; each head
 * of q and k RMS-normalised where the family says (QK-norm); then RoPE (NEOX, each row at its
 * position within its input, the layer's table) where the family rotates. */
static void enc_qkv(enc_pass *p, const layer_weights *L, const float *in) {
    const model *m = p->m;
    const model_info *mi = &m->info;
    int Q = m->q_dim, KV = m->kv_dim, W = Q + 2 * KV;
    if (L->wqkv.data) {
        enc_matmul(p, p->fused, &L->wqkv, in, L->b_qkv);
        for (int t = 0; t < p->T; t++) {
            const float *r = p->fused + (size_t)t * W;
            memcpy(p->q + (size_t)t * Q, r, sizeof(float) * (size_t)Q);
            memcpy(p->k + (size_t)t * KV, r + Q, sizeof(float) * (size_t)KV);
            memcpy(p->v + (size_t)t * KV, r + Q + KV, sizeof(float) * (size_t)KV);
        }
    } else {
        enc_matmul3(p, (float *const[]){p->q, p->k, p->v}, (const weight *const[]){&L->wq, &L->wk, &L->wv},
                    (const float *const[]){L->bq, L->bk, L->bv}, 3, in);
    }
    if (L->q_norm)
        norm_rows(p->n_threads, p->q, p->q, L->q_norm, NULL, p->T * mi->n_head, mi->head_dim, mi->rms_eps, false);
    if (L->k_norm)
        norm_rows(p->n_threads, p->k, p->k, L->k_norm, NULL, p->T * mi->n_head_kv, mi->head_dim, mi->rms_eps, false);
    if (m->arch->abs_pos) return;
    const rope_table *rt = &m->rope[L->rope_table];
    int hd = mi->head_dim, half = mi->rope_dims / 2;
    for (int i = 0; i < p->n; i++)
        for (int t = 0; t < p->in[i].n_tokens; t++)
            for (int j = 0; j < half; j++) {
                double th = t * rt->inv_freq[j];
                float c = (float)cos(th) * rt->mscale, s = (float)sin(th) * rt->mscale;
                for (int h = 0; h < mi->n_head + mi->n_head_kv; h++) { /* q's heads, then k's */
                    float *v = h < mi->n_head ? p->q + (size_t)(p->start[i] + t) * Q + (size_t)h * hd
                                              : p->k + (size_t)(p->start[i] + t) * KV + (size_t)(h - mi->n_head) * hd;
                    float x0 = v[j], x1 = v[j + half];
                    v[j] = x0 * c - x1 * s;
                    v[j + half] = x0 * s + x1 * c;
                }
            }
}

/* The FFN's activation into up: gelu(up) (ungated), or act(gate) * up (SwiGLU, GeGLU), over
 * chunks of 4096 elements on the pool. */
#define ACT_CHUNK 4096

static void act_task(void *ctx, int c, int worker) {
    (void)worker;
    const enc_pass *p = ctx;
    size_t n = (size_t)p->T * (size_t)p->m->info.n_ff, i0 = (size_t)c * ACT_CHUNK,
           i1 = i0 + ACT_CHUNK < n ? i0 + ACT_CHUNK : n;
    float *u = p->up;
    const float *g = p->gate;
    if (!p->act_gated) {
        quant_gelu(u + i0, u + i0, (int64_t)(i1 - i0));
    } else if (p->m->ffn_act == ACT_GELU_TANH) { /* GeGLU: the gate's GELU in place, then times up */
        float *gg = p->gate;
        quant_gelu(gg + i0, gg + i0, (int64_t)(i1 - i0));
        for (size_t i = i0; i < i1; i++) u[i] *= gg[i];
    } else
        for (size_t i = i0; i < i1; i++) u[i] *= g[i] / (1.0f + expf(-g[i]));
}

static void enc_act(enc_pass *p, const layer_weights *L) {
    size_t n = (size_t)p->T * (size_t)p->m->info.n_ff;
    p->act_gated = L->w_gate.data != NULL || p->m->arch->fused_gate_up;
    threads_run((long)n >= ROWWISE_PAR_MIN ? p->n_threads : 1, (int)((n + ACT_CHUNK - 1) / ACT_CHUNK), act_task, p);
}

/* One encoder layer, post-LayerNorm: x = LN(x + attn(x)); x = LN(x + ffn(x)). */
static void enc_layer(enc_pass *p, int l) {
    const model *m = p->m;
    const layer_weights *L = &m->layers[l];
    int E = m->info.n_embd, T = p->T;
    float eps = m->info.rms_eps;
    enc_qkv(p, L, p->x);
    p->layer = l; /* with an inspection hook, serially on this thread (worker 0) */
    threads_run(p->attn_cb ? 1 : p->n_threads, p->n * m->info.n_head, enc_attend_task, p);
    enc_matmul_add(p, p->x, &L->wo, p->att, L->bo);
    norm_rows(p->n_threads, p->x, p->x, L->attn_norm, L->attn_norm_b, T, E, eps, true);
    if (L->w_gate.data)
        enc_matmul3(p, (float *const[]){p->up, p->gate}, (const weight *const[]){&L->w_up, &L->w_gate},
                    (const float *const[]){L->b_up, NULL}, 2, p->x);
    else
        enc_matmul(p, p->up, &L->w_up, p->x, L->b_up);
    enc_act(p, L);
    enc_matmul_add(p, p->x, &L->w_down, p->up, L->b_down);
    norm_rows(p->n_threads, p->x, p->x, L->ffn_norm, L->ffn_norm_b, T, E, eps, true);
}

/* gate (T, F) and up (T, F) of a pre-norm layer's FFN from its input in (T, E): two matrices, or
 * one ffn_up of 2F rows (arch fused_gate_up: the gate's rows first) into gate as (T, 2F), then
 * split (the gate's halves moved down in place, row by row, ahead of what they overwrite). */
static void enc_gate_up(enc_pass *p, const layer_weights *L, const float *in) {
    size_t F = (size_t)p->m->info.n_ff;
    if (L->w_gate.data) {
        enc_matmul3(p, (float *const[]){p->up, p->gate}, (const weight *const[]){&L->w_up, &L->w_gate},
                    (const float *const[]){NULL, NULL}, 2, in);
        return;
    }
    enc_matmul(p, p->gate, &L->w_up, in, NULL);
    for (size_t t = 0; t < (size_t)p->T; t++) {
        memcpy(p->up + t * F, p->gate + t * 2 * F + F, sizeof(float) * F);
        memmove(p->gate + t * F, p->gate + t * 2 * F, sizeof(float) * F);
    }
}

/* One pre-norm layer (gemma-embedding: gemma3's layer attending both ways; modern-bert):
 * x += post(attn(norm(x))); x += post(ffn(norm(x))), norm = the family's RMSNorm or LayerNorm (arch
 * pre_ln; none where the layer has no attn_norm), post = its norm of a sub-layer's output, or nothing. */
static void enc_layer_pre(enc_pass *p, int l) {
    const model *m = p->m;
    const layer_weights *L = &m->layers[l];
    int E = m->info.n_embd, T = p->T;
    float eps = m->info.rms_eps;
    bool ln = m->arch->pre_ln;
    if (L->attn_norm) norm_rows(p->n_threads, p->xn, p->x, L->attn_norm, NULL, T, E, eps, ln);
    enc_qkv(p, L, L->attn_norm ? p->xn : p->x);
    p->layer = l;
    threads_run(p->attn_cb ? 1 : p->n_threads, p->n * m->info.n_head, enc_attend_task, p);
    enc_matmul(p, p->tmp, &L->wo, p->att, L->bo);
    if (L->post_attn_norm) norm_rows(p->n_threads, p->tmp, p->tmp, L->post_attn_norm, NULL, T, E, eps, false);
    for (size_t i = 0; i < (size_t)T * E; i++) p->x[i] += p->tmp[i];
    norm_rows(p->n_threads, p->xn, p->x, L->ffn_norm, NULL, T, E, eps, ln);
    enc_gate_up(p, L, p->xn);
    enc_act(p, L);
    enc_matmul(p, p->tmp, &L->w_down, p->up, NULL);
    if (L->post_ffn_norm) norm_rows(p->n_threads, p->tmp, p->tmp, L->post_ffn_norm, NULL, T, E, eps, false);
    for (size_t i = 0; i < (size_t)T * E; i++) p->x[i] += p->tmp[i];
}

// ---- engine_embed for encoders ------------------------------------------------------------------

/* The bytes of quant_matmul scratch the largest pass (T rows) needs. */
static size_t enc_scratch_bytes(const model *m, int T) {
    size_t s = 1;
    for (int l = 0; l < m->info.n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        const weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wqkv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < ATTND_ARRAY_LEN(ws); i++) {
            if (!ws[i]->data) continue;
            size_t b = quant_scratch_bytes(ws[i]->type, T, ws[i]->cols);
            s = b > s ? b : s;
        }
    }
    return s;
}

/* Allocates p's buffers for passes of up to T rows and inputs of up to max_len tokens (one
 * block, freed with free(p->x)). */
static attnd_status enc_alloc(enc_pass *p, int T, int n_in, attnd_err *err) {
    const model *m = p->m;
    size_t E = (size_t)m->info.n_embd, Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim, F = (size_t)m->info.n_ff;
    size_t G = m->arch->fused_gate_up ? 2 * F : m->layers[0].w_gate.data ? F : 0; /* fused: (T, 2F) first */
    size_t W = m->arch->fused_qkv ? Q + 2 * KV : 0;
    size_t att = (size_t)p->n_threads * enc_attend_floats(m, p->max_len);
    size_t floats = (size_t)T * (3 * E + 2 * Q + 2 * KV + F + G + W) + att + embed_scratch_floats(m);
    size_t scratch = enc_scratch_bytes(m, T);
    char *mem = malloc(sizeof(float) * floats + scratch + sizeof(int) * (size_t)(n_in + 1) + 64);
    if (!mem) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for an encoder pass of %d tokens", T);
    float *f = (float *)mem;
    p->x = f, f += (size_t)T * E;
    p->tmp = f, f += (size_t)T * E;
    p->xn = f, f += (size_t)T * E;
    p->q = f, f += (size_t)T * Q;
    p->att = f, f += (size_t)T * Q;
    p->k = f, f += (size_t)T * KV;
    p->v = f, f += (size_t)T * KV;
    p->up = f, f += (size_t)T * F;
    p->gate = f, f += (size_t)T * G;
    p->fused = f, f += (size_t)T * W;
    p->scores = f, f += att;
    p->pool_scratch = f, f += embed_scratch_floats(m);
    p->start = (int *)f;
    p->mm_scratch = (char *)(p->start + n_in + 1) + (64 - ((uintptr_t)(p->start + n_in + 1) % 64)) % 64;
    return ATTND_OK;
}

/* Runs inputs in[0..n) (they fit one pass) and pools each into out (dim floats apart). */
static void enc_run(enc_pass *p, const embed_input *in, int n, model_pooling pool, float *out, int dim) {
    const model *m = p->m;
    int E = m->info.n_embd;
    p->in = in, p->n = n, p->T = 0;
    for (int i = 0; i < n; i++) p->start[i] = p->T, p->T += in[i].n_tokens;
    p->start[n] = p->T;
    enc_embed(p);
    for (int l = 0; l < m->info.n_layer; l++) {
        if (m->arch->post_ln) enc_layer(p, l);
        else enc_layer_pre(p, l);
    }
    if (m->output_norm) /* the pre-norm families' (RMSNorm, or LayerNorm: arch pre_ln) */
        norm_rows(p->n_threads, p->x, p->x, m->output_norm, NULL, p->T, E, m->info.rms_eps, m->arch->pre_ln);
    for (int t = 0; pool == POOL_NONE && t < p->T; t++) /* every token's vector: out is (T, n_embd) */
        embed_pool(m, POOL_CLS, p->x + (size_t)t * E, 1, out + (size_t)t * E, p->pool_scratch);
    for (int i = 0; pool != POOL_NONE && i < n; i++) {
        int len = in[i].n_tokens, r = pool == POOL_LAST ? len - 1 : 0; /* the first row, or the mean from it */
        bool mean = pool == POOL_MEAN || (pool == POOL_RANK && m->arch->rank_mean_gelu);
        embed_pool(m, pool, p->x + (size_t)(p->start[i] + r) * E, mean ? len : 1, out + (size_t)i * dim,
                   p->pool_scratch);
    }
    p->first_entry += p->T;
}

attnd_status encoder_embed(engine *e, const embed_input *in, int n, model_pooling pool, float *out, attnd_err *err) {
    const model *m = engine_model(e);
    int B = engine_max_batch(e), dim = model_pool_dim(m, pool), T = 0, max_len = 1;
    for (int i = 0, run = 0; i < n; i++) { /* the largest pass and input */
        run = run + in[i].n_tokens > B ? in[i].n_tokens : run + in[i].n_tokens;
        T = run > T ? run : T;
        max_len = in[i].n_tokens > max_len ? in[i].n_tokens : max_len;
    }
    enc_pass p = {.e = e, .m = m, .n_threads = engine_threads(e), .max_len = max_len};
    engine_attn_hooks(e, &p.attn_cb, &p.attn_want, &p.attn_user);
    attnd_status st = enc_alloc(&p, T, n, err);
    for (int i = 0, done = 0; i < n && !st;) {
        int j = i, toks = 0;
        while (j < n && toks + in[j].n_tokens <= B) toks += in[j++].n_tokens;
        enc_run(&p, in + i, j - i, pool, out + (pool == POOL_NONE ? (size_t)done * m->info.n_embd : (size_t)i * dim),
                dim);
        done += toks;
        i = j;
    }
    free(p.x);
    return st;
}
