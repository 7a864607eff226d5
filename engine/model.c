/*
 * model.c — loading a Llama-family model from GGUF: hyper-parameters, weight lookup and
 * validation (public API in attnd/model.h, layout in model_internal.h).
 *
 * Everything a later evaluation relies on is checked here, once: the architecture, every shape
 * against the hyper-parameters, every weight type against what the kernels compute. So a file
 * that loads can be evaluated without further checks, and a file that does not load says which
 * key or tensor is wrong. Weight matrices are referenced in the mapping, never copied.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/tokenizer.h"
#include "model_internal.h"
#include "quant.h"
#include "threads.h"

/* "<arch>.<suffix>" in key. */
static const char *arch_key(char key[128], const char *arch, const char *suffix) {
    snprintf(key, 128, "%s.%s", arch, suffix);
    return key;
}

/* The status of reading a key whose value the caller has preset to its default: a missing key
 * is an error only when required. */
static attnd_status optional(attnd_status st, bool required) {
    return st == ATTND_ERR_NOT_FOUND && !required ? ATTND_OK : st;
}

/* Reads "<arch>.<suffix>" as u32 (dflt when missing and not required). */
static attnd_status arch_u32(const gguf_file *f, const char *arch, const char *suffix, bool required,
                             uint32_t dflt, uint32_t *out, attnd_err *err) {
    char key[128];
    *out = dflt;
    return optional(gguf_get_u32(f, arch_key(key, arch, suffix), out, err), required);
}

/* Reads "<arch>.<suffix>" as f32 (dflt when missing and not required). */
static attnd_status arch_f32(const gguf_file *f, const char *arch, const char *suffix, bool required, float dflt,
                             float *out, attnd_err *err) {
    char key[128];
    *out = dflt;
    return optional(gguf_get_f32(f, arch_key(key, arch, suffix), out, err), required);
}

/* Looks up a weight tensor of a computable type; *t is NULL when it is absent and optional. */
static attnd_status find_weight(const gguf_file *f, const char *name, bool required, const gguf_tensor **t,
                                attnd_err *err) {
    *t = gguf_find_tensor(f, name);
    if (!*t) return required ? attnd_fail(err, ATTND_ERR_FORMAT, "model has no tensor '%s'", name) : ATTND_OK;
    if (!gguf_type_computable((*t)->type))
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED,
                          "tensor '%s' has type %s, which attnd does not compute (the IQ1-IQ3 lattice types are not "
                          "implemented); re-quantize the model from its F16/BF16 file with `attnd quantize` "
                          "(e.g. to Q4_K_M or IQ4_XS)",
                          name, gguf_type_name((*t)->type));
    return ATTND_OK;
}

/* Looks up a tensor that must be a (rows, cols) matrix of a computable type. */
static attnd_status find_matrix(const gguf_file *f, const char *name, int64_t rows, int64_t cols, bool required,
                                weight *out, attnd_err *err) {
    memset(out, 0, sizeof(*out));
    const gguf_tensor *t;
    attnd_status st = find_weight(f, name, required, &t, err);
    if (st != ATTND_OK || !t) return st;
    if (t->n_dims > 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
        return attnd_fail(err, ATTND_ERR_FORMAT, "tensor '%s' has shape [%llu, %llu], expected [%lld, %lld]", name,
                          (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (long long)cols,
                          (long long)rows);
    out->data = t->data;
    out->type = t->type;
    out->rows = rows;
    out->cols = cols;
    return ATTND_OK;
}

/* Copies a vector tensor of n elements out as F32 (*out malloc'd; NULL when absent and optional). */
static attnd_status load_vector(const gguf_file *f, const char *name, int64_t n, bool required, float **out,
                                attnd_err *err) {
    *out = NULL;
    const gguf_tensor *t;
    attnd_status st = find_weight(f, name, required, &t, err);
    if (st != ATTND_OK || !t) return st;
    if (t->n_elems != (uint64_t)n || t->ne[0] != (uint64_t)n)
        return attnd_fail(err, ATTND_ERR_FORMAT, "tensor '%s' has %llu elements, expected %lld", name,
                          (unsigned long long)t->n_elems, (long long)n);
    *out = malloc(sizeof(float) * (size_t)n);
    if (!*out) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory loading '%s'", name);
    quant_dequantize_row(*out, t->data, t->type, n);
    return ATTND_OK;
}

/* The tokenizer metadata, when the file has any, must load (every special id inside the
 * vocabulary, array lengths consistent, merges well-formed) and name exactly one token per
 * embedding row: every command refuses a file whose text side is broken, not just those that
 * tokenize, and no token id the tokenizer produces can index past the embedding matrix. A
 * tokenizer family attnd does not implement is not an error here (ids still work). */
static attnd_status check_vocabulary(const gguf_file *f, int n_vocab, attnd_err *err) {
    if (!gguf_find_kv(f, "tokenizer.ggml.model") && !gguf_find_kv(f, "tokenizer.ggml.tokens")) return ATTND_OK;
    tokenizer *t = NULL;
    attnd_status st = tok_load(&t, f, err);
    if (st == ATTND_ERR_UNSUPPORTED) return ATTND_OK;
    if (st != ATTND_OK) return st;
    if (tok_n_vocab(t) != n_vocab)
        st = attnd_fail(err, ATTND_ERR_FORMAT, "tokenizer.ggml.tokens has %d entries but token_embd.weight has %d rows",
                        tok_n_vocab(t), n_vocab);
    tok_destroy(t);
    return st;
}

/* The architecture and hyper-parameters, checked against what the engine computes. */
static attnd_status read_hparams(model *m, attnd_err *err) {
    const gguf_file *f = m->f;
    model_info *mi = &m->info;
    attnd_status st;
    const char *arch;
    if ((st = gguf_get_str(f, "general.architecture", &arch, err))) return st;
    if (!strcmp(arch, "llama")) {
        m->arch = ARCH_LLAMA;
    } else if (!strcmp(arch, "qwen2")) {
        m->arch = ARCH_QWEN2;
    } else {
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED,
                        "architecture '%.100s' is not supported (attnd runs 'llama' and 'qwen2')", arch);
    }
    mi->arch = arch;
    if (gguf_get_str(f, "general.name", &mi->name, NULL) != ATTND_OK) mi->name = "";

    uint32_t n_ctx, n_embd, n_layer, n_ff, n_head, n_head_kv, key_len, val_len, rope_dims;
    if ((st = arch_u32(f, arch, "context_length", true, 0, &n_ctx, err))) return st;
    if ((st = arch_u32(f, arch, "embedding_length", true, 0, &n_embd, err))) return st;
    if ((st = arch_u32(f, arch, "block_count", true, 0, &n_layer, err))) return st;
    if ((st = arch_u32(f, arch, "feed_forward_length", true, 0, &n_ff, err))) return st;
    if ((st = arch_u32(f, arch, "attention.head_count", true, 0, &n_head, err))) return st;
    if ((st = arch_u32(f, arch, "attention.head_count_kv", false, n_head, &n_head_kv, err))) return st;
    if (n_head == 0 || n_embd == 0 || n_layer == 0 || n_ff == 0 || n_ctx == 0 || n_head_kv == 0) {
        return attnd_fail(err, ATTND_ERR_FORMAT, "a hyper-parameter of '%s' is zero", arch);
    }
    if ((st = arch_u32(f, arch, "attention.key_length", false, n_embd / n_head, &key_len, err))) return st;
    if ((st = arch_u32(f, arch, "attention.value_length", false, key_len, &val_len, err))) return st;
    if ((st = arch_u32(f, arch, "rope.dimension_count", false, key_len, &rope_dims, err))) return st;
    if ((st = arch_f32(f, arch, "attention.layer_norm_rms_epsilon", true, 0, &mi->rms_eps, err))) return st;
    if ((st = arch_f32(f, arch, "rope.freq_base", false, 10000.0f, &mi->rope_base, err))) return st;

    /* Sanity limits keep every later size computation far from overflow. */
    if (n_embd > (1u << 16) || n_ff > (1u << 18) || n_layer > 1024 || n_head > 1024 || n_ctx > (1u << 24)) {
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "hyper-parameters of '%s' are out of the supported range", arch);
    }
    if (n_head % n_head_kv != 0) {
        return attnd_fail(err, ATTND_ERR_FORMAT, "head_count %u is not a multiple of head_count_kv %u", n_head,
                        n_head_kv);
    }
    if (key_len == 0 || key_len != val_len || key_len % 2 != 0 || key_len > 1024) {
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "head size %u (key) / %u (value) is not supported", key_len,
                        val_len);
    }
    if (rope_dims == 0 || rope_dims % 2 != 0 || rope_dims > key_len) {
        return attnd_fail(err, ATTND_ERR_FORMAT, "rope.dimension_count %u does not fit head size %u", rope_dims,
                        key_len);
    }
    if (!(mi->rms_eps > 0) || !(mi->rope_base > 0) || !isfinite(mi->rope_base)) {
        return attnd_fail(err, ATTND_ERR_FORMAT, "rms epsilon %g or rope base %g is not positive", mi->rms_eps,
                        mi->rope_base);
    }
    mi->n_ctx = (int)n_ctx;
    mi->n_embd = (int)n_embd;
    mi->n_layer = (int)n_layer;
    mi->n_ff = (int)n_ff;
    mi->n_head = (int)n_head;
    mi->n_head_kv = (int)n_head_kv;
    mi->head_dim = (int)key_len;
    mi->rope_dims = (int)rope_dims;
    m->q_dim = mi->n_head * mi->head_dim;
    m->kv_dim = mi->n_head_kv * mi->head_dim;
    return ATTND_OK;
}

/* Layer l's weights: matrices mapped in place, norms and biases as float vectors. */
static attnd_status load_layer(model *m, int l, attnd_err *err) {
    const gguf_file *f = m->f;
    int64_t E = m->info.n_embd, Q = m->q_dim, KV = m->kv_dim, F = m->info.n_ff;
    attnd_status st;
    layer_weights *L = &m->layers[l];
    char name[96];
#define MAT(field, suffix, r, c)                                                    \
    snprintf(name, sizeof(name), "blk.%d.%s.weight", l, suffix);                    \
    if ((st = find_matrix(f, name, r, c, true, &L->field, err))) return st;
#define VEC(field, suffix, ext, n, req)                                             \
    snprintf(name, sizeof(name), "blk.%d.%s.%s", l, suffix, ext);                   \
    if ((st = load_vector(f, name, n, req, &L->field, err))) return st;
    VEC(attn_norm, "attn_norm", "weight", E, true);
    MAT(wq, "attn_q", Q, E);
    MAT(wk, "attn_k", KV, E);
    MAT(wv, "attn_v", KV, E);
    MAT(wo, "attn_output", E, Q);
    /* qwen2 always has q/k/v biases; some llama-architecture files do too. */
    bool req_bias = m->arch == ARCH_QWEN2;
    VEC(bq, "attn_q", "bias", Q, req_bias);
    VEC(bk, "attn_k", "bias", KV, req_bias);
    VEC(bv, "attn_v", "bias", KV, req_bias);
    VEC(ffn_norm, "ffn_norm", "weight", E, true);
    MAT(w_gate, "ffn_gate", F, E);
    MAT(w_up, "ffn_up", F, E);
    MAT(w_down, "ffn_down", E, F);
#undef MAT
#undef VEC
    return ATTND_OK;
}

/* The seven matrices of a layer. */
#define LAYER_MATRICES 7
static void layer_matrices(layer_weights *L, weight *out[LAYER_MATRICES]) {
    weight *lw[LAYER_MATRICES] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    memcpy(out, lw, sizeof lw);
}

static void pack_task(void *ctx, int i, int worker) {
    (void)worker;
    weight *w = ((weight **)ctx)[i];
    w->packed = quant_pack(w->data, w->type, w->rows, w->cols);
}

/* Packed copies for the decode kernels where the instruction set has one for the type (quant_pack),
 * made on the engine's thread pool; without one (or without the memory) a matrix is read from the
 * mapping as it is. token_embd is only looked up by row: never packed, even when the output head
 * is tied to it. */
static void pack_matrices(model *m) {
    int n = 0, cap = 1 + LAYER_MATRICES * m->info.n_layer;
    weight **ws = malloc(sizeof(*ws) * (size_t)cap);
    if (!ws) return; /* no copies: slower, same results */
    ws[n++] = &m->output;
    for (int l = 0; l < m->info.n_layer; l++, n += LAYER_MATRICES) layer_matrices(&m->layers[l], ws + n);
    threads_run(threads_default(), n, pack_task, ws);
    for (int i = 0; i < n; i++) m->packed_bytes += quant_packed_bytes(ws[i]->packed);
    free(ws);
}

attnd_status model_load(model **out, const char *path, attnd_err *err) {
    *out = NULL;
    attnd_status st;
    model *m = calloc(1, sizeof(*m));
    if (!m) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory loading a model");
    if ((st = gguf_open(&m->f, path, err))) goto fail;
    const gguf_file *f = m->f;
    model_info *mi = &m->info;

    if ((st = read_hparams(m, err))) goto fail;
    uint32_t n_layer = (uint32_t)mi->n_layer;

    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) {
        st = attnd_fail(err, ATTND_ERR_FORMAT, "model has no tensor 'token_embd.weight'");
        goto fail;
    }
    if (te->n_dims != 2 || te->ne[1] == 0 || te->ne[1] > (1u << 22)) {
        st = attnd_fail(err, ATTND_ERR_FORMAT, "tensor 'token_embd.weight' is not a (vocab, embd) matrix");
        goto fail;
    }
    mi->n_vocab = (int)te->ne[1];
    if ((st = check_vocabulary(f, mi->n_vocab, err))) goto fail;
    int64_t V = mi->n_vocab, E = mi->n_embd;
    if ((st = find_matrix(f, "token_embd.weight", V, E, true, &m->tok_embd, err))) goto fail;
    if ((st = find_matrix(f, "output.weight", V, E, false, &m->output, err))) goto fail;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    if ((st = load_vector(f, "output_norm.weight", E, true, &m->output_norm, err))) goto fail;

    m->layers = calloc(n_layer, sizeof(*m->layers));
    if (!m->layers) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory loading a model");
        goto fail;
    }
    for (int l = 0; l < mi->n_layer; l++)
        if ((st = load_layer(m, l, err))) goto fail;

    m->rope_inv_freq = malloc(sizeof(double) * (size_t)(mi->rope_dims / 2));
    if (!m->rope_inv_freq) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory loading a model");
        goto fail;
    }
    for (int i = 0; i < mi->rope_dims / 2; i++)
        m->rope_inv_freq[i] = pow((double)mi->rope_base, -2.0 * i / mi->rope_dims);

    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) mi->n_params += gguf_tensor_at(f, i)->n_elems;
    pack_matrices(m);
    *out = m;
    return ATTND_OK;

fail:
    model_destroy(m);
    return st;
}

void model_destroy(model *m) {
    if (!m) return;
    if (m->layers) {
        for (int l = 0; l < m->info.n_layer; l++) {
            layer_weights *L = &m->layers[l];
            free(L->attn_norm);
            free(L->ffn_norm);
            free(L->bq);
            free(L->bk);
            free(L->bv);
            weight *lw[LAYER_MATRICES];
            layer_matrices(L, lw);
            for (int i = 0; i < LAYER_MATRICES; i++) quant_packed_destroy(lw[i]->packed);
        }
        free(m->layers);
    }
    quant_packed_destroy(m->output.packed); /* never set on tok_embd, even when output is tied to it */
    free(m->output_norm);
    free(m->rope_inv_freq);
    gguf_close(m->f);
    free(m);
}

const model_info *model_info_get(const model *m) { return &m->info; }
const gguf_file *model_gguf(const model *m) { return m->f; }
