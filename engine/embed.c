/*
 * embed.c — embeddings and relevance scores (attnd/embed.h): a model's roles and pooling, the
 * classification head, and engine_embed, which runs many inputs through the model in as few
 * passes as the engine's batch allows and pools each input's last hidden states into one vector.
 *
 * Decoders run through engine_eval (engine_eval_hidden) over a KV pool made for the call: each
 * input is its own sequence, so it attends causally to itself only, and the pool is destroyed
 * before the call returns (no KV is kept). Encoders (arch bidirectional) run through encoder.c.
 * The pooling and the head follow llama.cpp's build_pooling (src/llama-graph.cpp): mean, first
 * (cls), last; rank = the pooled row (a decoder's last, an encoder's first; ModernBERT's mean)
 * through cls (tanh; ModernBERT's GELU then cls.norm) and cls.output, a decoder's outputs then
 * softmaxed (Qwen3-Reranker's yes/no).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/embed.h"
#include "attnd/kv.h"
#include "embed_eval.h"
#include "quant.h"

const char *model_pooling_name(model_pooling p) {
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
    if (p == POOL_FILE) return "file";
    return p >= POOL_NONE && p <= POOL_RANK ? names[p] : "?";
}

bool model_is_encoder(const model *m) { return m->arch->bidirectional; }

model_pooling model_pooling_type(const model *m) { return (model_pooling)m->pooling; }

int model_n_cls_out(const model *m) { return m->n_cls_out; }

int model_pool_dim(const model *m, model_pooling pool) {
    if (pool == POOL_FILE) pool = model_pooling_type(m);
    if (pool == POOL_RANK) return m->n_cls_out;
    return pool >= POOL_MEAN && pool <= POOL_LAST ? m->info.n_embd : 0;
}

int model_embed_dim(const model *m) { return model_pool_dim(m, POOL_FILE); }

unsigned model_roles(const model *m) {
    char key[128];
    snprintf(key, sizeof(key), "%s.pooling_type", m->info.arch);
    bool has_pooling = gguf_find_kv(m->f, key) != NULL;
    unsigned r = m->arch->bidirectional ? 0 : MODEL_ROLE_GENERATE;
    if ((has_pooling || m->arch->bidirectional) && m->pooling != POOL_RANK && m->pooling != POOL_NONE)
        r |= MODEL_ROLE_EMBED;
    if (m->n_cls_out) r |= MODEL_ROLE_RANK;
    return r;
}

// ---- loading ----------------------------------------------------------------------------------

/* dense_2 (D, n_embd) and dense_3 (n_embd, D), both or neither: sentence-transformers' Dense
 * modules after pooling (EmbeddingGemma, converted with --sentence-transformers-dense-modules). */
static attnd_status embed_load_dense(model *m, attnd_err *err) {
    const gguf_tensor *t2 = gguf_find_tensor(m->f, "dense_2.weight"), *t3 = gguf_find_tensor(m->f, "dense_3.weight");
    int64_t E = m->info.n_embd, D = t2 ? (int64_t)t2->ne[1] : 0;
    if (!t2 && !t3) return ATTND_OK;
    if (!t2 || !t3 || D < 1 || D > (1 << 16))
        return attnd_fail(err, ATTND_ERR_FORMAT,
                          "dense_2.weight and dense_3.weight come together (n_embd -> D -> n_embd)");
    attnd_status st = model_find_matrix(m, "dense_2.weight", D, E, true, &m->dense_2, err);
    return st ? st : model_find_matrix(m, "dense_3.weight", E, D, true, &m->dense_3, err);
}

/* The pooling type (default: last for a decoder, cls for an encoder), the head's output count
 * (classifier.output_labels, else 1) and the head: cls (optional) and cls.output. */
attnd_status embed_model_load(model *m, const char *arch, attnd_err *err) {
    char key[128];
    uint32_t pooling = m->arch->bidirectional ? POOL_CLS : POOL_LAST;
    snprintf(key, sizeof(key), "%s.pooling_type", arch);
    attnd_status st = gguf_get_u32(m->f, key, &pooling, err);
    if (st != ATTND_OK && st != ATTND_ERR_NOT_FOUND) return st;
    if (pooling > POOL_RANK)
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "%s = %u is not a pooling attnd knows (0 none .. 4 rank)", key,
                          pooling);
    m->pooling = (int)pooling;
    int64_t E = m->info.n_embd, n_out = 1;
    const gguf_array *labels;
    snprintf(key, sizeof(key), "%s.classifier.output_labels", arch);
    st = gguf_get_arr(m->f, key, -1, &labels, err);
    if (st != ATTND_OK && st != ATTND_ERR_NOT_FOUND) return st;
    if (st == ATTND_OK) n_out = (int64_t)labels->n;
    if (n_out < 1 || n_out > 4096)
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s has %lld labels (1..4096)", key, (long long)n_out);
    if ((st = model_find_matrix(m, "cls.weight", E, E, false, &m->cls, err)) ||
        (st = model_load_vector(m, "cls.bias", E, false, &m->cls_b, err)) ||
        (st = model_find_matrix(m, "cls.output.weight", n_out, E, false, &m->cls_out, err)) ||
        (st = model_load_vector(m, "cls.output.bias", n_out, false, &m->cls_out_b, err)) ||
        (m->arch->rank_mean_gelu && (st = model_load_vector(m, "cls.norm.weight", E, false, &m->cls_norm, err))))
        return st;
    if ((st = embed_load_dense(m, err))) return st;
    if ((m->cls_b && !m->cls.data) || (m->cls_norm && !m->cls.data) || (m->cls_out_b && !m->cls_out.data) ||
        (m->cls.data && !m->cls_out.data))
        return attnd_fail(err, ATTND_ERR_FORMAT,
                          "the classification head is incomplete (cls.bias or cls.norm without cls.weight, "
                          "or cls without cls.output.weight)");
    m->n_cls_out = m->cls_out.data ? (int)n_out : 0;
    if (m->pooling == POOL_RANK && !m->n_cls_out)
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s.pooling_type is rank but the file has no cls.output.weight", arch);
    return ATTND_OK;
}

void embed_model_free(model *m) {
    encoder_free(m);
    free(m->cls_b);
    free(m->cls_out_b);
    free(m->cls_norm);
}

// ---- pooling and the head -----------------------------------------------------------------------

/* out (rows) = W x (+ b) through the matmul kernels, so x is rounded as llama.cpp rounds it for
 * W's type (F16: to F16); row is (cols) floats of scratch (enough for the F32 / F16 / Q8 forms of
 * x; a larger need falls back to a malloc'd one). */
static void head_matvec(float *out, const weight *w, const float *b, const float *x, float *row) {
    size_t need = quant_scratch_bytes(w->type, 1, w->cols);
    void *scratch = need <= sizeof(float) * (size_t)w->cols ? (void *)row : malloc(need);
    if (!scratch) { /* out of memory for a few bytes: the exact sum instead */
        size_t rb = quant_row_bytes(w->type, w->cols);
        for (int64_t r = 0; r < w->rows; r++) {
            float *wr = row;
            quant_dequantize_row(wr, (const uint8_t *)w->data + rb * (size_t)r, w->type, w->cols);
            double s = 0;
            for (int64_t c = 0; c < w->cols; c++) s += (double)wr[c] * x[c];
            out[r] = (float)s;
        }
    } else {
        quant_matmul(out, w->data, w->type, w->rows, w->cols, x, 1, scratch, 1);
        if (scratch != row) free(scratch);
    }
    for (int64_t r = 0; b && r < w->rows; r++) out[r] += b[r];
}

/* y (n) = LayerNorm(gelu(y)) * w (mean and variance in double; no norm when w is NULL). */
static void head_gelu_norm(float *y, const float *w, int n, float eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += y[i] = embed_gelu(y[i]);
    mean /= n;
    for (int i = 0; i < n; i++) var += (y[i] - mean) * (y[i] - mean);
    float sc = (float)(1.0 / sqrt(var / n + eps));
    for (int i = 0; w && i < n; i++) y[i] = (float)(y[i] - mean) * sc * w[i];
}

/* out (n_cls_out) = the head of the pooled row x (n_embd); scratch: 2 n_embd floats. */
static void rank_head(const model *m, const float *x, float *out, float *scratch) {
    int E = m->info.n_embd;
    float *y = scratch, *row = scratch + E;
    if (m->cls.data) {
        head_matvec(y, &m->cls, m->cls_b, x, row);
        if (m->arch->rank_mean_gelu) /* ModernBERT's: GELU, then its LayerNorm (weight, no bias) */
            head_gelu_norm(y, m->cls_norm, E, m->info.rms_eps);
        else
            for (int i = 0; i < E; i++) y[i] = tanhf(y[i]);
        x = y;
    }
    float *o = out;
    head_matvec(o, &m->cls_out, m->cls_out_b, x, row);
    if (m->arch->bidirectional) return;
    float mx = -INFINITY; /* a decoder's head (Qwen3-Reranker's yes/no rows): softmax, as llama.cpp */
    double sum = 0;
    for (int i = 0; i < m->n_cls_out; i++) mx = o[i] > mx ? o[i] : mx;
    for (int i = 0; i < m->n_cls_out; i++) sum += o[i] = expf(o[i] - mx);
    for (int i = 0; i < m->n_cls_out; i++) o[i] = (float)(o[i] / sum);
}

/* The row index, among an input's n hidden rows, that pooling pool reads (-1: all of them, mean). */
static int pooled_row(const model *m, model_pooling pool, int n) {
    if (pool == POOL_MEAN || pool == POOL_NONE) return -1;
    if (pool == POOL_CLS) return 0;
    if (pool == POOL_RANK) return m->arch->rank_mean_gelu ? -1 : m->arch->bidirectional ? 0 : n - 1;
    return n - 1;
}

size_t embed_scratch_floats(const model *m) {
    size_t E = (size_t)m->info.n_embd, D = (size_t)m->dense_2.rows, W = E > D ? E : D;
    return 3 * W + D;
}

/* Input i's vector into out from its hidden rows h (n_rows, n_embd): the pooled row, or the mean
 * of all; through the head for POOL_RANK, else through dense_2 then dense_3 when the file has them
 * (scratch: embed_scratch_floats). */
void embed_pool(const model *m, model_pooling pool, const float *h, int n_rows, float *out, float *scratch) {
    int E = m->info.n_embd, D = (int)m->dense_2.rows, W = E > D ? E : D;
    bool dense = pool != POOL_RANK && m->dense_2.data;
    float *v = pool == POOL_RANK || dense ? scratch : out;
    if (n_rows > 1) {
        for (int i = 0; i < E; i++) {
            double s = 0;
            for (int t = 0; t < n_rows; t++) s += h[(size_t)t * E + i];
            v[i] = (float)(s / n_rows);
        }
    } else {
        memcpy(v, h, sizeof(float) * (size_t)E);
    }
    if (pool == POOL_RANK) {
        rank_head(m, v, out, scratch + E);
    } else if (dense) { /* no activation between them, as llama.cpp's build_dense_out */
        float *y = scratch + W, *row = scratch + W + D;
        head_matvec(y, &m->dense_2, NULL, v, row);
        head_matvec(out, &m->dense_3, NULL, y, row);
    }
}

// ---- engine_embed ------------------------------------------------------------------------------

/* The checks of engine_embed before anything runs; *pool resolved from POOL_FILE. */
static attnd_status embed_check(const engine *e, const embed_input *in, int n, model_pooling *pool, attnd_err *err) {
    const model *m = engine_model(e);
    const model_info *mi = &m->info;
    if (*pool == POOL_FILE) *pool = model_pooling_type(m);
    if (n < 0 || (n > 0 && !in)) return attnd_fail(err, ATTND_ERR_INVALID, "engine_embed: %d inputs", n);
    if (*pool == POOL_NONE || *pool < POOL_NONE || *pool > POOL_RANK)
        return attnd_fail(err, ATTND_ERR_INVALID,
                          "pooling '%s' is not one engine_embed computes (mean, cls, last, rank)",
                          model_pooling_name(*pool));
    if (*pool == POOL_RANK && !m->n_cls_out)
        return attnd_fail(err, ATTND_ERR_INVALID, "the model ('%s') has no classification head: it cannot rank",
                          mi->arch);
    int cap = engine_max_batch(e) < mi->n_ctx ? engine_max_batch(e) : mi->n_ctx;
    for (int i = 0; i < n; i++) {
        if (in[i].n_tokens < 1 || in[i].n_tokens > cap || !in[i].tokens)
            return attnd_fail(err, ATTND_ERR_INVALID, "input %d has %d tokens; 1..%d fit", i, in[i].n_tokens, cap);
        for (int t = 0; t < in[i].n_tokens; t++) {
            if (in[i].tokens[t] < 0 || in[i].tokens[t] >= mi->n_vocab)
                return attnd_fail(err, ATTND_ERR_INVALID, "input %d: token id %d is outside 0..%d", i, in[i].tokens[t],
                                  mi->n_vocab - 1);
            if (in[i].types && in[i].types[t] && in[i].types[t] >= m->n_types && m->arch->bidirectional)
                return attnd_fail(err, ATTND_ERR_INVALID, "input %d: token type %d; the model has %d", i,
                                  in[i].types[t], m->n_types);
        }
    }
    return ATTND_OK;
}

/* One pass of a decoder: inputs in[0..n) (their tokens fit one batch) as sequences of kv, their
 * pooled vectors to out. entries (max_batch), hidden (max_batch, n_embd), scratch (embed_scratch_floats). */
static attnd_status decoder_pass(engine *e, kv_pool *kv, const embed_input *in, int n, model_pooling pool, float *out,
                                 batch_entry *entries, float *hidden, float *scratch, attnd_err *err) {
    const model *m = engine_model(e);
    int dim = model_pool_dim(m, pool), E = m->info.n_embd, n_ent = 0;
    kv_seq **seqs = calloc((size_t)n, sizeof(*seqs));
    attnd_status st = seqs ? ATTND_OK : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory embedding");
    for (int i = 0; i < n && !st; i++) {
        if ((st = kv_seq_create(&seqs[i], kv, err))) break;
        int want = pooled_row(m, pool, in[i].n_tokens);
        for (int t = 0; t < in[i].n_tokens; t++)
            entries[n_ent++] = (batch_entry){seqs[i], in[i].tokens[t], t, want < 0 || want == t};
    }
    if (!st) st = engine_eval_hidden(e, entries, n_ent, hidden, err);
    for (int i = 0, row = 0; i < n && !st; i++) {
        int rows = pooled_row(m, pool, in[i].n_tokens) < 0 ? in[i].n_tokens : 1;
        if (pool == POOL_NONE) /* every token's vector: out is (tokens, n_embd) */
            for (int t = 0; t < rows; t++)
                embed_pool(m, POOL_CLS, hidden + (size_t)(row + t) * E, 1, out + (size_t)(row + t) * E, scratch);
        else embed_pool(m, pool, hidden + (size_t)row * E, rows, out + (size_t)i * dim, scratch);
        row += rows;
    }
    for (int i = 0; seqs && i < n; i++) kv_seq_destroy(seqs[i]);
    free(seqs);
    return st;
}

/* Decoders: passes of as many whole inputs as fit engine_max_batch, over one KV pool made here. */
static attnd_status embed_decoder(engine *e, const embed_input *in, int n, model_pooling pool, float *out,
                                  attnd_err *err) {
    const model *m = engine_model(e);
    int B = engine_max_batch(e), E = m->info.n_embd, dim = model_pool_dim(m, pool);
    kv_pool *kv = NULL;
    batch_entry *entries = malloc(sizeof(*entries) * (size_t)B);
    float *hidden = malloc(sizeof(float) * ((size_t)B * E + embed_scratch_floats(m)));
    attnd_status st = entries && hidden ? kv_pool_create(&kv, m, SIZE_MAX, KV_F32, err)
                                        : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory embedding");
    for (int i = 0, done = 0; i < n && !st;) {
        int j = i, toks = 0;
        while (j < n && toks + in[j].n_tokens <= B) toks += in[j++].n_tokens;
        st = decoder_pass(e, kv, in + i, j - i, pool, out + (pool == POOL_NONE ? (size_t)done * E : (size_t)i * dim),
                          entries, hidden, hidden + (size_t)B * E, err);
        done += toks;
        i = j;
    }
    kv_pool_destroy(kv);
    free(entries);
    free(hidden);
    return st;
}

/* engine_embed and engine_embed_tokens: checked inputs through the decoder or the encoder path. */
static attnd_status embed_run(engine *e, const embed_input *in, int n, model_pooling pool, float *out, attnd_err *err) {
    if (n == 0) return ATTND_OK;
    if (!out) return attnd_fail(err, ATTND_ERR_INVALID, "engine_embed: no output buffer");
    if (model_is_encoder(engine_model(e))) return encoder_embed(e, in, n, pool, out, err);
    return embed_decoder(e, in, n, pool, out, err);
}

attnd_status engine_embed(engine *e, const embed_input *in, int n, model_pooling pool, float *out, attnd_err *err) {
    attnd_status st = embed_check(e, in, n, &pool, err);
    return st ? st : embed_run(e, in, n, pool, out, err);
}

attnd_status engine_embed_tokens(engine *e, const embed_input *in, int n, float *out, attnd_err *err) {
    model_pooling pool = POOL_MEAN; /* checked as any pooling: every token is kept below */
    attnd_status st = embed_check(e, in, n, &pool, err);
    return st ? st : embed_run(e, in, n, POOL_NONE, out, err);
}
