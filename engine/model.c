/*
 * model.c — loading a decoder model from GGUF: hyper-parameters, weight lookup and validation,
 * as the family's description says (arch.h; public API in attnd/model.h, layout in
 * model_internal.h).
 *
 * Everything a later evaluation relies on is checked here, once: the architecture, every shape
 * against the hyper-parameters, every weight type against what the kernels compute. So a file
 * that loads can be evaluated without further checks, and a file that does not load says which
 * key or tensor is wrong. A key of the family that attnd does not apply, or a tensor that no step
 * reads, refuses the file by name. Weight matrices are referenced in the mapping, never copied.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/tokenizer.h"
#include "embed_eval.h"
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

/* "<arch>.<suffix>" as u32 that may also be a per-layer array of integers (Gemma 4's
 * head_count_kv, feed_forward_length): element l of the array, or its largest when l < 0.
 * n_layer: the array's length, checked when l >= 0. */
static attnd_status arch_u32_at(const gguf_file *f, const char *arch, const char *suffix, int l, int n_layer,
                                bool required, uint32_t dflt, uint32_t *out, attnd_err *err) {
    char key[128];
    const gguf_kv *kv = gguf_find_kv(f, arch_key(key, arch, suffix));
    if (!kv || kv->value.type != GGUF_VT_ARRAY) return arch_u32(f, arch, suffix, required, dflt, out, err);
    const gguf_array *a = &kv->value.v.arr;
    if (a->type != GGUF_VT_UINT32 && a->type != GGUF_VT_INT32)
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s is an array of %s, not of integers", key, gguf_vtype_name(a->type));
    if (a->n == 0 || (l >= 0 && a->n != (uint64_t)n_layer))
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s has %llu entries for %d layers", key, (unsigned long long)a->n,
                          n_layer);
    const int32_t *v = a->data;
    *out = 0;
    for (uint64_t i = 0; i < a->n; i++) {
        if (v[i] < 0) return attnd_fail(err, ATTND_ERR_FORMAT, "%s[%llu] is negative", key, (unsigned long long)i);
        if (l < 0 ? (uint32_t)v[i] > *out : (int)i == l) *out = (uint32_t)v[i];
    }
    return ATTND_OK;
}

/* Notes that a step reads t: at the end of the load every tensor must have been (check_all_read). */
static void mark_read(model *m, const gguf_tensor *t) {
    const gguf_tensor *first = gguf_tensor_at(m->f, 0);
    uint64_t n = gguf_tensor_count(m->f), i = (uint64_t)(t - first);
    if (i >= n || gguf_tensor_at(m->f, i) != t)
        for (i = 0; i < n && gguf_tensor_at(m->f, i) != t; i++) {}
    if (i < n && m->tensor_read) m->tensor_read[i] = 1; /* NULL after the load (model_set_context) */
}

/* Looks up a weight tensor of a computable type; *t is NULL when it is absent and optional. */
static attnd_status find_weight(model *m, const char *name, bool required, const gguf_tensor **t, attnd_err *err) {
    *t = gguf_find_tensor(m->f, name);
    if (!*t) return required ? attnd_fail(err, ATTND_ERR_FORMAT, "model has no tensor '%s'", name) : ATTND_OK;
    if (!gguf_type_computable((*t)->type))
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED,
                          "tensor '%s' has type %s, which attnd does not compute; re-quantize the model from its "
                          "F16/BF16 file with `attnd quantize` (e.g. to Q4_K_M or IQ4_XS)",
                          name, gguf_type_name((*t)->type));
    mark_read(m, *t);
    return ATTND_OK;
}

/* Looks up a tensor that must be a (rows, cols) matrix of a computable type. */
static attnd_status find_matrix(model *m, const char *name, int64_t rows, int64_t cols, bool required, weight *out,
                                attnd_err *err) {
    memset(out, 0, sizeof(*out));
    const gguf_tensor *t;
    attnd_status st = find_weight(m, name, required, &t, err);
    if (st != ATTND_OK || !t) return st;
    if (t->n_dims > 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
        return attnd_fail(err, ATTND_ERR_FORMAT, "tensor '%s' has shape [%llu, %llu], expected [%lld, %lld]", name,
                          (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (long long)cols,
                          (long long)rows);
    out->data = t->data;
    out->name = t->name;
    out->type = t->type;
    out->rows = rows;
    out->cols = cols;
    return ATTND_OK;
}

/* Copies an (outer, n) tensor out as F32 (*out malloc'd; NULL when absent and optional): a vector
 * when outer is 1, one vector per expert otherwise. */
static attnd_status load_vectors(model *m, const char *name, int64_t n, int64_t outer, bool required, float **out,
                                 attnd_err *err) {
    *out = NULL;
    const gguf_tensor *t;
    attnd_status st = find_weight(m, name, required, &t, err);
    if (st != ATTND_OK || !t) return st;
    if (t->n_elems != (uint64_t)(n * outer) || t->ne[0] != (uint64_t)n)
        return attnd_fail(err, ATTND_ERR_FORMAT, "tensor '%s' has %llu elements, expected %lld", name,
                          (unsigned long long)t->n_elems, (long long)(n * outer));
    *out = malloc(sizeof(float) * (size_t)(n * outer));
    if (!*out) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory loading '%s'", name);
    size_t row = quant_row_bytes(t->type, n);
    for (int64_t i = 0; i < outer; i++) quant_dequantize_row(*out + i * n, (const uint8_t *)t->data + row * i, t->type, n);
    return ATTND_OK;
}

static attnd_status load_vector(model *m, const char *name, int64_t n, bool required, float **out, attnd_err *err) {
    return load_vectors(m, name, n, 1, required, out, err);
}

/* A one-element tensor's value into *out, left as it is when the file has none; finite. */
static attnd_status load_scalar(model *m, const char *name, float *out, attnd_err *err) {
    float *v;
    attnd_status st = load_vector(m, name, 1, false, &v, err);
    if (st || !v) return st;
    *out = v[0];
    free(v);
    return isfinite(*out) ? ATTND_OK : attnd_fail(err, ATTND_ERR_FORMAT, "tensor '%s' is not finite", name);
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

/* v as an integer (a bool as 0 / 1); false for other types. */
static bool kv_integer(const gguf_value *v, int64_t *out) {
    switch (v->type) {
    case GGUF_VT_BOOL: *out = v->v.b; return true;
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        *out = (int64_t)v->v.u64;
        return v->v.u64 <= INT64_MAX;
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64: *out = v->v.i64; return true;
    default: return false;
    }
}

/* Every "<arch>." key of the file is one attnd applies (or knows to change nothing): a key that
 * would change the computation and is ignored would compute another model without a word. */
static attnd_status check_keys(const model *m, const char *arch, attnd_err *err) {
    size_t al = strlen(arch);
    for (uint64_t i = 0; i < gguf_kv_count(m->f); i++) {
        const char *k = gguf_kv_at(m->f, i)->key;
        if (strncmp(k, arch, al) || k[al] != '.') continue;
        if (arch_key_known(m->arch, k + al + 1)) continue;
        const arch_fixed_key *fk = arch_fixed_key_find(m->arch, k + al + 1);
        if (!fk)
            return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "key '%.120s' is not applied by attnd's '%s' (refusing the "
                              "file rather than computing another model)", k, arch);
        const gguf_value *v = &gguf_kv_at(m->f, i)->value;
        int64_t x;
        if (!kv_integer(v, &x))
            return attnd_fail(err, ATTND_ERR_FORMAT, "key '%.120s' is a %s, not an integer", k, gguf_vtype_name(v->type));
        if (x != fk->value)
            return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "key '%.120s' = %lld is not applied by attnd's '%s', which "
                              "computes %s (%lld) only", k, (long long)x, arch, fk->means, (long long)fk->value);
    }
    return ATTND_OK;
}

/* The architecture, its description and the shape keys, checked against what the engine computes. */
static attnd_status read_shape(model *m, const char **arch_out, attnd_err *err) {
    const gguf_file *f = m->f;
    model_info *mi = &m->info;
    attnd_status st;
    const char *arch;
    if ((st = gguf_get_str(f, "general.architecture", &arch, err))) return st;
    if (!(m->arch = arch_find(arch)))
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "architecture '%.100s' is not supported (attnd runs %s)", arch,
                          arch_names());
    *arch_out = mi->arch = arch;
    if (gguf_get_str(f, "general.name", &mi->name, NULL) != ATTND_OK) mi->name = "";
    if ((st = check_keys(m, arch, err))) return st;

    uint32_t n_ctx, n_embd, n_layer, n_ff, n_head, n_head_kv, key_len, val_len, rope_dims, n_mtp;
    if ((st = arch_u32(f, arch, "context_length", true, 0, &n_ctx, err))) return st;
    if ((st = arch_u32(f, arch, "embedding_length", true, 0, &n_embd, err))) return st;
    if ((st = arch_u32(f, arch, "block_count", true, 0, &n_layer, err))) return st;
    /* an MoE family's layers need no dense width (a shared expert's defaults to it) */
    if ((st = arch_u32_at(f, arch, "feed_forward_length", -1, 0, !m->arch->moe, 0, &n_ff, err))) return st;
    if ((st = arch_u32(f, arch, "attention.head_count", true, 0, &n_head, err))) return st;
    if ((st = arch_u32_at(f, arch, "attention.head_count_kv", -1, 0, false, n_head, &n_head_kv, err))) return st;
    /* block_count counts the multi-token-prediction blocks, the last ones, which are not run */
    if ((st = arch_u32(f, arch, "nextn_predict_layers", false, 0, &n_mtp, err))) return st;
    if (n_mtp >= n_layer)
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s.nextn_predict_layers %u leaves no layer of %u", arch, n_mtp, n_layer);
    n_layer -= n_mtp;
    mi->n_mtp_layers = (int)n_mtp;
    if (n_head == 0 || n_embd == 0 || n_layer == 0 || (n_ff == 0 && !m->arch->moe) || n_ctx == 0 || n_head_kv == 0) {
        return attnd_fail(err, ATTND_ERR_FORMAT, "a hyper-parameter of '%s' is zero", arch);
    }
    if ((st = arch_u32(f, arch, "attention.key_length", false, n_embd / n_head, &key_len, err))) return st;
    if ((st = arch_u32(f, arch, "attention.value_length", false, key_len, &val_len, err))) return st;
    if ((st = arch_u32(f, arch, "rope.dimension_count", false, key_len, &rope_dims, err))) return st;
    const char *eps_key = m->arch->post_ln || m->arch->pre_ln ? "attention.layer_norm_epsilon"
                                                              : "attention.layer_norm_rms_epsilon";
    if ((st = arch_f32(f, arch, eps_key, true, 0, &mi->rms_eps, err))) return st;
    if ((st = arch_f32(f, arch, "rope.freq_base", false, 10000.0f, &mi->rope_base, err))) return st;

    /* Sanity limits keep every later size computation far from overflow. */
    if (n_embd > (1u << 16) || n_ff > (1u << 18) || n_layer > 1024 || n_head > 1024 || n_ctx > (1u << 24)) {
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "hyper-parameters of '%s' are out of the supported range", arch);
    }
    if (n_head % n_head_kv != 0) {
        return attnd_fail(err, ATTND_ERR_FORMAT, "head_count %u is not a multiple of head_count_kv %u", n_head,
                        n_head_kv);
    }
    if (m->arch->mla) { /* the latent's widths; the heads' come from read_mla */
        if (key_len > 8192 || val_len > key_len || rope_dims % 2 || rope_dims == 0)
            return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "latent attention of %u (key) / %u (value), %u rotated, is not "
                              "supported", key_len, val_len, rope_dims);
    } else if (key_len == 0 || key_len != val_len || key_len % 2 != 0 || key_len > 1024) {
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "head size %u (key) / %u (value) is not supported", key_len,
                        val_len);
    }
    if (!m->arch->mla && (rope_dims == 0 || rope_dims % 2 != 0 || rope_dims > key_len)) {
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

/* attention.sliding_window_pattern (arch layer_geometry): one bool per layer, true = local. */
static attnd_status read_swa_pattern(const model *m, const char *arch, const uint8_t **out, attnd_err *err) {
    char key[128];
    const gguf_array *a;
    attnd_status st = gguf_get_arr(m->f, arch_key(key, arch, "attention.sliding_window_pattern"), GGUF_VT_BOOL, &a, err);
    if (st) return st;
    if (a->n != (uint64_t)m->info.n_layer)
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s has %llu entries for %d layers", key, (unsigned long long)a->n,
                          m->info.n_layer);
    *out = a->data;
    return ATTND_OK;
}

/* The FFN's activation: the family's, or the one <arch>.hidden_activation names (arch act_key). */
static attnd_status read_ffn_act(model *m, const char *arch, attnd_err *err) {
    char key[128];
    const char *name = NULL;
    m->ffn_act = m->arch->act;
    if (!m->arch->act_key) return ATTND_OK;
    attnd_status st = gguf_get_str(m->f, arch_key(key, arch, "hidden_activation"), &name, err);
    if (st) return optional(st, false);
    if (!strcmp(name, "silu") || !strcmp(name, "swish") || !strcmp(name, "swiglu")) m->ffn_act = ACT_SILU;
    else if (!strcmp(name, "gelu") || !strcmp(name, "geglu")) m->ffn_act = ACT_GELU_TANH;
    else if (!strcmp(name, "relu") || !strcmp(name, "reglu"))
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "%s = \"%s\" (a ReGLU FFN) is not supported", key, name);
    return ATTND_OK; /* any other name: the family's, as llama.cpp falls back */
}

/* Sliding windows, soft-capping and the query scale, as the family and the file say. */
static attnd_status read_attention(model *m, const char *arch, attnd_err *err) {
    const arch_desc *d = m->arch;
    model_info *mi = &m->info;
    attnd_status st;
    uint32_t window = 0, period = (uint32_t)d->swa_pattern;
    bool swa = d->swa_pattern || d->swa_every_layer || d->layer_geometry;
    const uint8_t *pattern = NULL; /* (n_layer) arch layer_geometry: 1 = local */
    if (d->layer_geometry && (st = read_swa_pattern(m, arch, &pattern, err))) return st;
    if (d->swa_dense_first &&
        (st = arch_u32(m->f, arch, "attention.sliding_window_pattern", false, period, &period, err)))
        return st;
    if (swa && (st = arch_u32(m->f, arch, "attention.sliding_window", d->swa_default == 0 && !d->swa_optional,
                              (uint32_t)d->swa_default, &window, err)))
        return st;
    if (swa && ((window == 0 && !d->swa_optional) || window > (1u << 24)))
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s.attention.sliding_window %u is out of range", arch, window);
    float base_swa = -1.0f; /* -1: no key */
    if (swa && (st = arch_f32(m->f, arch, "rope.freq_base_swa", false, -1.0f, &base_swa, err))) return st;
    if (base_swa != -1.0f && !(base_swa > 0 && isfinite(base_swa)))
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s.rope.freq_base_swa %g is not a positive number", arch, base_swa);
    m->swa_rope_base = base_swa > 0 ? base_swa : d->swa_rope_base;
    m->attn_softcap = m->final_softcap = 0;
    if (d->softcap) {
        if ((st = arch_f32(m->f, arch, "attn_logit_softcapping", false, 0, &m->attn_softcap, err))) return st;
        if ((st = arch_f32(m->f, arch, "final_logit_softcapping", false, 0, &m->final_softcap, err))) return st;
        if (!(m->attn_softcap >= 0) || !(m->final_softcap >= 0) || !isfinite(m->attn_softcap + m->final_softcap))
            return attnd_fail(err, ATTND_ERR_FORMAT, "soft-capping values of '%s' are not finite and >= 0", arch);
    }
    bool wide = d->wide_scale_layers && mi->n_layer == d->wide_scale_layers;
    m->attn_scale = d->unit_attn_scale ? 1.0f : 1.0f / sqrtf((float)(wide ? mi->n_embd / mi->n_head : mi->head_dim));
    m->embd_scale = d->embd_scale ? sqrtf((float)mi->n_embd) : 1.0f;
    m->v_norm = d->v_norm;
    for (int l = 0; l < mi->n_layer; l++) {
        layer_weights *L = &m->layers[l];
        L->rope = !(d->nope_step && (l + 1) % d->nope_step == 0);
        int n = (int)period; /* 0 (a file's pattern): every layer local, as llama.cpp reads it */
        bool local = d->swa_every_layer || (pattern && pattern[l]) ||
                     (d->swa_dense_first ? n == 0 || l % n != 0 : d->swa_pattern && l % n != n - 1);
        L->window = local ? (int)window : 0;
        L->rope_table = L->window && (m->swa_rope_base > 0 || d->layer_geometry) ? ROPE_LOCAL : ROPE_GLOBAL;
        if (L->window) mi->n_local_layers++;
        if (L->window > m->max_window) m->max_window = L->window;
    }
    mi->window = m->max_window;
    return read_ffn_act(m, arch, err);
}

/* Layer l's KV heads and dense FFN width: the file's per-layer arrays (or its one value). */
static attnd_status read_layer_widths(model *m, const char *arch, int l, attnd_err *err) {
    model_info *mi = &m->info;
    layer_weights *L = &m->layers[l];
    int n_all = mi->n_layer + mi->n_mtp_layers;
    uint32_t kv, ff;
    attnd_status st;
    kv = (uint32_t)mi->n_head_kv; /* per layer only where the family reads it so (MLA: one latent row) */
    if ((m->arch->layer_geometry &&
         (st = arch_u32_at(m->f, arch, "attention.head_count_kv", l, n_all, false, kv, &kv, err))) ||
        (st = arch_u32_at(m->f, arch, "feed_forward_length", l, n_all, false, (uint32_t)mi->n_ff, &ff, err)))
        return st;
    if (kv == 0 || mi->n_head % (int)kv)
        return attnd_fail(err, ATTND_ERR_FORMAT, "layer %d: head_count %d is not a multiple of head_count_kv %u", l,
                          mi->n_head, kv);
    if (ff == 0 && !m->arch->moe) return attnd_fail(err, ATTND_ERR_FORMAT, "layer %d: feed_forward_length is 0", l);
    L->n_head_kv = (int)kv;
    L->n_ff = (int)ff;
    return ATTND_OK;
}

/* The layers that read an earlier layer's cache (arch layer_geometry: the last `shared`), as
 * llama.cpp pairs them: a global layer with the last layer that has a cache, a local one with the
 * one before; each must be of its reader's kind and geometry. */
static attnd_status pair_shared_kv(model *m, uint32_t shared, attnd_err *err) {
    int n = m->info.n_layer, first = n - (int)shared;
    if (shared && (shared >= (uint32_t)n || first < 2))
        return attnd_fail(err, ATTND_ERR_FORMAT, "attention.shared_kv_layers %u leaves fewer than 2 of %d layers with a "
                          "cache", shared, n);
    for (int l = first; shared && l < n; l++) {
        layer_weights *L = &m->layers[l];
        const layer_weights *S = &m->layers[first - (L->window ? 2 : 1)];
        if (!S->window != !L->window || S->head_dim != L->head_dim || S->n_head_kv != L->n_head_kv)
            return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "layer %d shares the cache of layer %d, which is of another "
                              "kind or geometry", l, first - (L->window ? 2 : 1));
        L->kv_source = first - (L->window ? 2 : 1);
        m->info.n_shared_local += L->window > 0;
    }
    m->info.n_shared_kv_layers = (int)shared;
    return ATTND_OK;
}

/* Whether the attention layers of each kind (local, global) share one geometry (the cache's
 * parts hold one kind each, kv_layout.h); sets model_info's per-kind figures. */
static bool check_kinds(model *m) {
    model_info *mi = &m->info;
    const layer_weights *first[2] = {NULL, NULL};
    for (int l = 0; l < mi->n_layer; l++) {
        const layer_weights *L = &m->layers[l], **f = &first[L->window > 0];
        if (L->kind == LAYER_DELTANET) continue;
        if (!*f) *f = L;
        if ((*f)->head_dim != L->head_dim || (*f)->n_head_kv != L->n_head_kv) return false;
    }
    if (first[0]) mi->head_dim = first[0]->head_dim, mi->n_head_kv = first[0]->n_head_kv;
    const layer_weights *loc = first[1] ? first[1] : first[0];
    mi->head_dim_swa = loc ? loc->head_dim : mi->head_dim;
    mi->n_head_kv_swa = loc ? loc->n_head_kv : mi->n_head_kv;
    return true;
}

/* Each layer's attention geometry, FFN width and cache source: the model's for most families;
 * with arch layer_geometry, per layer kind (local layers: key_length_swa, rope.dimension_count_swa)
 * and per layer (head_count_kv, feed_forward_length arrays; shared_kv_layers). */
static attnd_status read_geometry(model *m, const char *arch, attnd_err *err) {
    model_info *mi = &m->info;
    bool geo = m->arch->layer_geometry;
    uint32_t hd_swa = (uint32_t)mi->head_dim, vd_swa, rot_swa, shared = 0;
    attnd_status st;
    if (geo && ((st = arch_u32(m->f, arch, "attention.key_length_swa", true, 0, &hd_swa, err)) ||
                (st = arch_u32(m->f, arch, "attention.value_length_swa", false, hd_swa, &vd_swa, err)) ||
                (st = arch_u32(m->f, arch, "rope.dimension_count_swa", false, hd_swa, &rot_swa, err)) ||
                (st = arch_u32(m->f, arch, "attention.shared_kv_layers", false, 0, &shared, err))))
        return st;
    if (geo && (hd_swa == 0 || hd_swa != vd_swa || hd_swa % 2 || hd_swa > 1024 || rot_swa == 0 || rot_swa % 2 ||
                rot_swa > hd_swa))
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "local layers' head size %u (key) / %u (value) with %u RoPE "
                          "dims is not supported", hd_swa, vd_swa, rot_swa);
    m->rope_dims[ROPE_GLOBAL] = mi->rope_dims;
    m->rope_dims[ROPE_LOCAL] = geo ? (int)rot_swa : mi->rope_dims;
    m->max_rope_dims = m->rope_dims[ROPE_GLOBAL] > m->rope_dims[ROPE_LOCAL] ? m->rope_dims[ROPE_GLOBAL]
                                                                               : m->rope_dims[ROPE_LOCAL];
    for (int l = 0; l < mi->n_layer; l++) {
        layer_weights *L = &m->layers[l];
        if ((st = read_layer_widths(m, arch, l, err))) return st;
        L->head_dim = geo && L->window ? (int)hd_swa : mi->head_dim;
        L->rope_dims = m->rope_dims[L->rope_table];
        L->q_dim = mi->n_head * L->head_dim;
        L->kv_dim = L->n_head_kv * L->head_dim;
        L->kv_source = l;
        L->out_scale = 1.0f;
        if (L->head_dim > m->max_head_dim) m->max_head_dim = L->head_dim;
        if (mi->n_head / L->n_head_kv > m->max_group) m->max_group = mi->n_head / L->n_head_kv;
        if (L->n_ff > m->max_ff) m->max_ff = L->n_ff;
        if (L->q_dim > m->q_dim) m->q_dim = L->q_dim;
        if (L->kv_dim > m->kv_dim) m->kv_dim = L->kv_dim;
    }
    if (!check_kinds(m))
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "layers of one kind (local or global) with different head "
                          "sizes or KV heads are not supported");
    if (mi->head_dim_swa > mi->head_dim) /* head_dim bounds every layer's (per-head buffers, engine.h) */
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "local layers' head size %d above the global layers' %d is not "
                          "supported", mi->head_dim_swa, mi->head_dim);
    return pair_shared_kv(m, shared, err);
}

/* The Gated DeltaNet layers: which layers they are and their sizes (arch recurrent_interval). */
static attnd_status read_recurrent(model *m, const char *arch, attnd_err *err) {
    const arch_desc *d = m->arch;
    model_info *mi = &m->info;
    if (!d->recurrent_interval) return ATTND_OK;
    uint32_t every, K, inner, dk, hv, hk;
    attnd_status st;
    if ((st = arch_u32(m->f, arch, "full_attention_interval", false, (uint32_t)d->recurrent_interval, &every, err)) ||
        (st = arch_u32(m->f, arch, "ssm.conv_kernel", true, 0, &K, err)) ||
        (st = arch_u32(m->f, arch, "ssm.inner_size", true, 0, &inner, err)) ||
        (st = arch_u32(m->f, arch, "ssm.state_size", true, 0, &dk, err)) ||
        (st = arch_u32(m->f, arch, "ssm.time_step_rank", true, 0, &hv, err)) ||
        (st = arch_u32(m->f, arch, "ssm.group_count", true, 0, &hk, err)))
        return st;
    if (every == 0 || K == 0 || K > 16 || dk == 0 || dk > 1024 || hv == 0 || hv > 1024 || hk == 0 || hv % hk != 0 ||
        inner != hv * dk)
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "Gated DeltaNet sizes of '%s' are not supported: interval %u, "
                          "conv kernel %u, inner %u, state %u, %u value heads, %u key heads (attnd needs value heads "
                          "of the key head's size, a multiple of the key heads)", arch, every, K, inner, dk, hv, hk);
    m->dn = (dn_dims){.K = (int)K, .hk = (int)hk, .hv = (int)hv, .dk = (int)dk, .dv = (int)dk,
                      .conv_dim = (int)(2 * hk * dk + hv * dk), .eps = mi->rms_eps, .grouped = d->dn_grouped};
    for (int l = 0; l < mi->n_layer; l++) {
        layer_weights *L = &m->layers[l];
        L->kind = (l + 1) % (int)every ? LAYER_DELTANET : LAYER_ATTENTION;
        if (L->kind == LAYER_DELTANET) L->dn_slot = m->n_dn_layers++;
    }
    mi->n_recurrent_layers = m->n_dn_layers;
    mi->recurrent_every = (int)every, mi->recurrent_heads = (int)hv;
    if (!m->n_dn_layers) m->dn = (dn_dims){0}, mi->recurrent_every = 0, mi->recurrent_heads = 0;
    return ATTND_OK;
}

/* Mixture of Experts: how many experts, how many each token uses, their FFN width. */
static attnd_status read_experts(model *m, const char *arch, attnd_err *err) {
    char key[128];
    bool side = m->arch->moe_beside_dense && gguf_find_kv(m->f, arch_key(key, arch, "expert_count"));
    if (!m->arch->moe && !side) return ATTND_OK;
    uint32_t n, used, ff;
    attnd_status st;
    if ((st = arch_u32(m->f, arch, "expert_count", true, 0, &n, err))) return st;
    if ((st = arch_u32(m->f, arch, "expert_used_count", true, 0, &used, err))) return st;
    if ((st = arch_u32(m->f, arch, "expert_feed_forward_length", true, 0, &ff, err))) return st;
    if (n == 0 || n > 1024 || used == 0 || used > n || ff == 0 || ff > (1u << 18))
        return attnd_fail(err, ATTND_ERR_FORMAT, "experts of '%s' out of range: %u experts, %u used, width %u", arch, n,
                          used, ff);
    m->info.n_expert = m->n_expert = (int)n;
    m->info.n_expert_used = m->n_expert_used = (int)used;
    m->info.n_ff_exp = m->n_ff_exp = (int)ff;
    if (!m->arch->shared_expert || m->arch->ds_router) return ATTND_OK; /* ds_router: read_ds_router */
    if ((st = arch_u32(m->f, arch, "expert_shared_feed_forward_length", false, (uint32_t)m->info.n_ff, &ff, err)))
        return st;
    if (ff == 0 || ff > (1u << 18))
        return attnd_fail(err, ATTND_ERR_FORMAT, "the shared expert's width %u of '%s' is out of range", ff, arch);
    m->n_ff_shexp = (int)ff;
    return ATTND_OK;
}

// ---- latent attention and DeepSeek's router (deepseek2) --------------------------------------

/* The latent attention's sizes (arch mla). attention.key_length / value_length are the latent's
 * (kv_lora + rope, kv_lora) and key_length_mla / value_length_mla a head's; a legacy file (no
 * _mla keys, attn_kv_b) has a head's in key_length / value_length, as llama.cpp reads them. */
static attnd_status read_mla(model *m, const char *arch, attnd_err *err) {
    model_info *mi = &m->info;
    uint32_t q_lora, kv_lora, k_mla, v_mla, key_len, val_len;
    attnd_status st;
    if ((st = arch_u32(m->f, arch, "attention.q_lora_rank", false, 0, &q_lora, err)) ||
        (st = arch_u32(m->f, arch, "attention.kv_lora_rank", true, 0, &kv_lora, err)) ||
        (st = arch_u32(m->f, arch, "attention.key_length", false, 0, &key_len, err)) ||
        (st = arch_u32(m->f, arch, "attention.value_length", false, 0, &val_len, err)) ||
        (st = arch_u32(m->f, arch, "attention.key_length_mla", false, 0, &k_mla, err)) ||
        (st = arch_u32(m->f, arch, "attention.value_length_mla", false, 0, &v_mla, err)))
        return st;
    bool split = k_mla && v_mla; /* llama.cpp's is_mla(): both keys set */
    uint32_t qk = split ? k_mla : key_len, v = split ? v_mla : val_len, rope = (uint32_t)mi->rope_dims;
    if (kv_lora == 0 || kv_lora > 8192 || q_lora > 16384 || qk <= rope || qk > 1024 || v == 0 || v > 1024 ||
        (split && (key_len != kv_lora + rope || val_len != kv_lora)))
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "latent attention sizes of '%s' are not supported: q_lora_rank %u, "
                          "kv_lora_rank %u, key_length %u / value_length %u, key_length_mla %u / value_length_mla %u, "
                          "%u rotated", arch, q_lora, kv_lora, key_len, val_len, k_mla, v_mla, rope);
    m->mla = (mla_dims){.n_head = mi->n_head, .q_lora = (int)q_lora, .kv_lora = (int)kv_lora,
                        .nope = (int)(qk - rope), .rope = (int)rope, .v_head = (int)v};
    mi->kv_latent = mla_latent(&m->mla);
    mi->kv_per_head = mi->n_head * (int)(qk + v);
    mi->head_dim = (int)v; /* a head's output: attn_output's input is (n_head, v) */
    mi->n_head_kv = 1;     /* one latent row per token for every head */
    m->q_dim = mi->n_head * mi->head_dim;
    m->kv_dim = mi->head_dim;
    return ATTND_OK;
}

/* DeepSeek's router keys (arch ds_router). expert_gating_func absent: softmax, or sigmoid for
 * GLM-4.7-Flash's depth and vocabulary, as llama.cpp decides for files that lack it. */
static attnd_status read_ds_router(model *m, const char *arch, attnd_err *err) {
    uint32_t lead, shared, gating, groups, used, vocab;
    float log_mul;
    attnd_status st;
    if ((st = arch_u32(m->f, arch, "leading_dense_block_count", false, 0, &lead, err)) ||
        (st = arch_u32(m->f, arch, "expert_shared_count", false, 0, &shared, err)) ||
        (st = arch_u32(m->f, arch, "expert_gating_func", false, 0, &gating, err)) ||
        (st = arch_u32(m->f, arch, "expert_group_count", false, 0, &groups, err)) ||
        (st = arch_u32(m->f, arch, "expert_group_used_count", false, 0, &used, err)) ||
        (st = arch_u32(m->f, arch, "vocab_size", false, 0, &vocab, err)) ||
        (st = arch_f32(m->f, arch, "expert_weights_scale", false, 0.0f, &m->moe_w_scale, err)) ||
        (st = arch_f32(m->f, arch, "rope.scaling.yarn_log_multiplier", false, 0.0f, &log_mul, err)))
        return st;
    char key[128];
    bool norm = false;
    if ((st = gguf_get_bool(m->f, arch_key(key, arch, "expert_weights_norm"), &norm, err)) && st != ATTND_ERR_NOT_FOUND)
        return st;
    int nl = m->info.n_layer + m->info.n_mtp_layers;
    if (gating == 0) gating = (nl == 47 || nl == 48) && vocab == 154880 ? 2 : 1;
    if (gating != 1 && gating != 2)
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "%s.expert_gating_func = %u is not applied by attnd (1: softmax "
                          "and 2: sigmoid are)", arch, gating);
    if (lead > (uint32_t)m->info.n_layer || shared > 64 || !isfinite(m->moe_w_scale) || !isfinite(log_mul) ||
        (groups > 1 && (m->n_expert % (int)groups || used == 0 || used > groups)))
        return attnd_fail(err, ATTND_ERR_FORMAT, "router keys of '%s' out of range: %u dense layers, %u shared experts, "
                          "%u groups (%u used) of %d experts", arch, lead, shared, groups, used, m->n_expert);
    m->n_dense_lead = (int)lead, m->moe_gating = (int)gating, m->moe_w_norm = norm;
    m->n_group = groups > 1 ? (int)groups : 0, m->n_group_used = (int)used;
    m->n_ff_shexp = (int)shared * m->n_ff_exp;
    m->mla_log_mul = log_mul / 0.1f; /* the converter writes 0.1 mscale_all_dim */
    return ATTND_OK;
}

// ---- rotary position tables -----------------------------------------------------------------

/* The file's RoPE scaling: linear (positions divided by the factor) or YaRN (NTK-by-parts
 * interpolation, with cos and sin scaled), as llama.cpp applies them; refuses the others. */
typedef struct rope_scaling {
    bool yarn;
    float freq_scale;          /* 1 / factor; 1 without scaling */
    float attn_factor, beta_fast, beta_slow;
    uint32_t n_ctx_orig;
} rope_scaling;

static attnd_status read_rope_scaling(const model *m, const char *arch, rope_scaling *rs, attnd_err *err) {
    const gguf_file *f = m->f;
    char key[128];
    const char *type = "linear"; /* llama.cpp's default when only a factor is given */
    attnd_status st = gguf_get_str(f, arch_key(key, arch, "rope.scaling.type"), &type, err);
    if (st != ATTND_OK && st != ATTND_ERR_NOT_FOUND) return st;
    float factor = 0;
    if ((st = arch_f32(f, arch, "rope.scaling.factor", false, 0, &factor, err))) return st;
    *rs = (rope_scaling){.freq_scale = 1.0f, .attn_factor = 1.0f, .beta_fast = 32.0f, .beta_slow = 1.0f};
    if (!strcmp(type, "none")) return ATTND_OK;
    if (strcmp(type, "linear") && strcmp(type, "yarn"))
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "%s.rope.scaling.type '%.40s' is not supported (attnd applies "
                          "none, linear and yarn)", arch, type);
    if (!(factor >= 0) || !isfinite(factor) || (factor > 0 && factor < 1e-3f))
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s.rope.scaling.factor %g is out of range", arch, factor);
    rs->freq_scale = factor == 0 ? 1.0f : 1.0f / factor;
    rs->yarn = !strcmp(type, "yarn");
    if ((st = arch_f32(f, arch, "rope.scaling.attn_factor", false, 1.0f, &rs->attn_factor, err))) return st;
    if (!(rs->attn_factor > 0) || !isfinite(rs->attn_factor))
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s.rope.scaling.attn_factor %g is out of range", arch,
                          rs->attn_factor);
    if (!rs->yarn) return ATTND_OK;
    if ((st = arch_u32(f, arch, "rope.scaling.original_context_length", false, (uint32_t)m->info.n_ctx,
                       &rs->n_ctx_orig, err)))
        return st;
    if ((st = arch_f32(f, arch, "rope.scaling.yarn_beta_fast", false, 32.0f, &rs->beta_fast, err))) return st;
    if ((st = arch_f32(f, arch, "rope.scaling.yarn_beta_slow", false, 1.0f, &rs->beta_slow, err))) return st;
    if (rs->n_ctx_orig == 0 || !(rs->attn_factor > 0) || !(rs->beta_fast > 0) || !(rs->beta_slow > 0))
        return attnd_fail(err, ATTND_ERR_FORMAT, "YaRN parameters of '%s' are out of range", arch);
    return ATTND_OK;
}

/* YaRN's correction dimension: the pair index whose wavelength fits n_rot turns in n_ctx_orig. */
static double yarn_corr_dim(int n_dims, uint32_t n_ctx_orig, double n_rot, double base) {
    return n_dims * log(n_ctx_orig / (n_rot * 2 * M_PI)) / (2 * log(base));
}

/* t = base^(-2i / dims) per pair, scaled as rs says, divided by the file's rope_freqs factors (Llama 3:
 * `factors`, NULL when none). */
static attnd_status rope_table_make(rope_table *t, int dims, double base, const rope_scaling *rs,
                                    const float *factors) {
    t->inv_freq = malloc(sizeof(double) * (size_t)(dims / 2));
    if (!t->inv_freq) return ATTND_ERR_NOMEM;
    t->mscale = rs->attn_factor; /* LongRoPE's attention factor, 1 for most files */
    double lo = 0, hi = 0;
    if (rs->yarn) {
        lo = fmax(0, floor(yarn_corr_dim(dims, rs->n_ctx_orig, rs->beta_fast, base)));
        hi = fmin(dims - 1, ceil(yarn_corr_dim(dims, rs->n_ctx_orig, rs->beta_slow, base)));
        t->mscale = rs->attn_factor * (1.0f + 0.1f * logf(1.0f / rs->freq_scale));
    }
    for (int i = 0; i < dims / 2; i++) {
        double f = pow(base, -2.0 * i / dims), s = rs->freq_scale;
        if (rs->yarn) { /* mix of interpolated (low frequencies) and extrapolated (high) */
            double ramp = 1 - fmin(1, fmax(0, (i - lo) / fmax(0.001, hi - lo)));
            s = s * (1 - ramp) + ramp;
        }
        t->inv_freq[i] = f * s / (factors ? factors[i] : 1.0);
    }
    return ATTND_OK;
}

/* The per-pair frequency divisors of the file, NULL when none: Llama 3's rope_freqs, or LongRoPE's
 * (Phi-3 128k) rope_factors_long when the context attnd serves, n_ctx (the file's context_length
 * or the server's ctx_size, model_set_context), is beyond rope.scaling.original_context_length and
 * rope_factors_short otherwise, as llama.cpp picks them for a context of that size. Both LongRoPE
 * tensors count as read. */
static attnd_status load_rope_factors(model *m, const char *arch, int n_ctx, float **factors, attnd_err *err) {
    const model_info *mi = &m->info;
    int n = mi->rope_dims / 2;
    float *s = NULL, *l = NULL;
    attnd_status st;
    if ((st = load_vector(m, "rope_freqs.weight", n, false, factors, err))) return st;
    if ((st = load_vector(m, "rope_factors_short.weight", n, false, &s, err)) ||
        (st = load_vector(m, "rope_factors_long.weight", n, false, &l, err)))
        goto out;
    if (!s != !l || (s && *factors)) {
        st = attnd_fail(err, ATTND_ERR_FORMAT, "a file has rope_freqs.weight, or both rope_factors_short.weight "
                        "and rope_factors_long.weight (LongRoPE), not another mix");
        goto out;
    }
    if (s) {
        uint32_t orig;
        if ((st = arch_u32(m->f, arch, "rope.scaling.original_context_length", false, (uint32_t)mi->n_ctx, &orig,
                           err)))
            goto out;
        m->info.rope_long = (uint32_t)n_ctx > orig;
        *factors = m->info.rope_long ? l : s;
        if (m->info.rope_long) l = NULL; else s = NULL;
    }
    for (int i = 0; *factors && i < n; i++)
        if (!((*factors)[i] > 0) || !isfinite((*factors)[i])) {
            st = attnd_fail(err, ATTND_ERR_FORMAT, "RoPE frequency factor %d = %g is not positive", i, (*factors)[i]);
            goto out;
        }
out:
    free(s);
    free(l);
    if (st) {
        free(*factors);
        *factors = NULL;
    }
    return st;
}

/* The global table (the file's base, scaling and frequency factors) for a context of n_ctx. */
/* The global layers' table (local: the local layers', base m->swa_rope_base, with the global
 * scaling when the family says so, else unscaled; the files' factors are the global layers'). */
static attnd_status make_rope(model *m, const char *arch, int n_ctx, bool local, rope_table *out, attnd_err *err) {
    rope_scaling rs = {.freq_scale = 1.0f, .attn_factor = 1.0f};
    attnd_status st;
    if ((!local || m->arch->swa_rope_scaled) && (st = read_rope_scaling(m, arch, &rs, err))) return st;
    float *factors = NULL;
    if (!local && (st = load_rope_factors(m, arch, n_ctx, &factors, err))) return st;
    float base = local && m->swa_rope_base > 0 ? m->swa_rope_base : m->info.rope_base;
    st = rope_table_make(out, m->rope_dims[local ? ROPE_LOCAL : ROPE_GLOBAL], base, &rs, factors);
    free(factors);
    return st ? attnd_fail(err, st, "out of memory loading a model") : ATTND_OK;
}

static attnd_status make_global_rope(model *m, const char *arch, int n_ctx, rope_table *out, attnd_err *err) {
    return make_rope(m, arch, n_ctx, false, out, err);
}

/* The global table and, when local layers have their own base, the local one (unscaled, as
 * llama.cpp computes Gemma 3's). */
static attnd_status make_rope_tables(model *m, const char *arch, attnd_err *err) {
    const model_info *mi = &m->info;
    attnd_status st = make_global_rope(m, arch, mi->n_ctx, &m->rope[ROPE_GLOBAL], err);
    if (!st && (m->swa_rope_base > 0 || m->arch->layer_geometry) && mi->n_local_layers)
        st = make_rope(m, arch, mi->n_ctx, true, &m->rope[ROPE_LOCAL], err);
    return st;
}

/* The query scale and the rotation's factor on cos and sin, as llama.cpp's deepseek2 graph has
 * them: mscale = (the table's factor) (1 + 0.1 mscale_all_dim ln factor), scale = mscale^2 /
 * sqrt(key_length_mla); with yarn_log_multiplier, YaRN's own factor on cos and sin cancels
 * (mscale == mscale_all_dim) and leaves the file's attn_factor. */
static attnd_status mla_scales(model *m, const char *arch, attnd_err *err) {
    rope_scaling rs;
    attnd_status st = read_rope_scaling(m, arch, &rs, err);
    if (st) return st;
    if (rs.freq_scale != 1.0f && !rs.yarn)
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "%s: linear RoPE scaling of latent attention is not applied by "
                          "attnd (YaRN is)", arch);
    rope_table *t = &m->rope[ROPE_GLOBAL];
    if (rs.yarn && m->mla_log_mul != 0) t->mscale = rs.attn_factor;
    float ms = t->mscale * (1.0f + 0.1f * m->mla_log_mul * logf(1.0f / rs.freq_scale));
    m->attn_scale = ms * ms / sqrtf((float)mla_qk(&m->mla));
    return ATTND_OK;
}

attnd_status model_set_context(model *m, int n_ctx, attnd_err *err) {
    if (n_ctx <= 0 || n_ctx > m->info.n_ctx) n_ctx = m->info.n_ctx;
    if (!gguf_find_tensor(m->f, "rope_factors_long.weight")) { /* no choice depends on it */
        m->run_ctx = n_ctx;
        return ATTND_OK;
    }
    rope_table t = {0};
    bool was_long = m->info.rope_long;
    attnd_status st = make_global_rope(m, m->info.arch, n_ctx, &t, err);
    if (st) {
        m->info.rope_long = was_long;
        return st;
    }
    free(m->rope[ROPE_GLOBAL].inv_freq);
    m->rope[ROPE_GLOBAL] = t;
    m->run_ctx = n_ctx;
    return ATTND_OK;
}

int model_run_context(const model *m) { return m->run_ctx; }

// ---- layers ---------------------------------------------------------------------------------

#define MAT(field, suffix, r, c)                                                    \
    snprintf(name, sizeof(name), "blk.%d.%s.weight", l, suffix);                    \
    if ((st = find_matrix(m, name, r, c, true, &L->field, err))) return st;
#define OPT_MAT(field, suffix, r, c, req)                                           \
    snprintf(name, sizeof(name), "blk.%d.%s.weight", l, suffix);                    \
    if ((st = find_matrix(m, name, r, c, req, &L->field, err))) return st;
#define VEC(field, suffix, ext, n, req)                                             \
    snprintf(name, sizeof(name), "blk.%d.%s.%s", l, suffix, ext);                   \
    if ((st = load_vector(m, name, n, req, &L->field, err))) return st;

/* Layer l's attention weights: matrices mapped in place, norms and biases as float vectors; which
 * ones the family has comes from its description. */
static attnd_status load_attention(model *m, int l, attnd_err *err) {
    const arch_desc *d = m->arch;
    layer_weights *L = &m->layers[l];
    int64_t E = m->info.n_embd, Q = L->q_dim, KV = L->kv_dim, HD = L->head_dim;
    attnd_status st;
    char name[96];
    bool own_kv = L->kv_source == l; /* a layer reading another's cache: its K, V weights, if any, unused */
    if (d->fused_qkv) {
        MAT(wqkv, "attn_qkv", Q + 2 * KV, E);
    } else {
        MAT(wq, "attn_q", d->q_gate ? 2 * Q : Q, E);
        OPT_MAT(wk, "attn_k", KV, E, own_kv);
        OPT_MAT(wv, "attn_v", KV, E, own_kv && !d->v_optional);
    }
    MAT(wo, "attn_output", E, Q);
    if (d->qkv_bias != NEED_NO) {
        bool req = d->qkv_bias == NEED_YES;
        VEC(bq, "attn_q", "bias", Q, req);
        VEC(bk, "attn_k", "bias", KV, req);
        VEC(bv, "attn_v", "bias", KV, req);
    }
    if (d->attn_out_bias) {
        VEC(bo, "attn_output", "bias", E, true);
    }
    if (d->sinks) {
        VEC(sinks, "attn_sinks", "weight", m->info.n_head, true);
    }
    if (d->qk_norm) {
        VEC(q_norm, "attn_q_norm", "weight", HD, true);
        VEC(k_norm, "attn_k_norm", "weight", HD, own_kv);
    }
    if (!own_kv) { /* llama.cpp loads but never runs them */
        free(L->k_norm), L->k_norm = NULL;
        memset(&L->wk, 0, sizeof(L->wk)), memset(&L->wv, 0, sizeof(L->wv));
    }
    return ATTND_OK;
}

/* A per-head tensor [cols, rows, n_head] (attn_k_b, attn_v_b) as n_head matrices of (rows, cols). */
static attnd_status find_heads(model *m, const char *name, int64_t rows, int64_t cols, mla_heads *out, attnd_err *err) {
    const gguf_tensor *t;
    attnd_status st = find_weight(m, name, true, &t, err);
    if (st) return st;
    int64_t H = m->mla.n_head;
    if (t->n_dims != 3 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows || (int64_t)t->ne[2] != H)
        return attnd_fail(err, ATTND_ERR_FORMAT, "tensor '%s' has shape [%llu, %llu, %llu], expected [%lld, %lld, %lld]",
                          name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                          (unsigned long long)t->ne[2], (long long)cols, (long long)rows, (long long)H);
    *out = (mla_heads){t->data, t->type, rows, cols, quant_row_bytes(t->type, cols) * (size_t)rows};
    return ATTND_OK;
}

/* A legacy attn_kv_b (per head: nope rows of W_UK, then v rows of W_UV, kv_lora columns): W_UV,h
 * read in place, W_UK,h transposed into an owned F32 copy. */
static attnd_status split_kv_b(model *m, layer_weights *L, const weight *kv_b, attnd_err *err) {
    const mla_dims *d = &m->mla;
    int64_t C = d->kv_lora, NP = d->nope, V = d->v_head, per = NP + V;
    size_t row = quant_row_bytes(kv_b->type, C);
    L->v_b = (mla_heads){(const uint8_t *)kv_b->data + row * (size_t)NP, kv_b->type, V, C, row * (size_t)per};
    float *tmp = malloc(sizeof(float) * (size_t)C);
    L->k_b_own = malloc(sizeof(float) * (size_t)(d->n_head * C * NP));
    if (!tmp || !L->k_b_own) {
        free(tmp);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory loading '%s'", kv_b->name);
    }
    for (int h = 0; h < d->n_head; h++)
        for (int64_t i = 0; i < NP; i++) { /* row i of W_UK,h becomes column i of its transpose */
            quant_dequantize_row(tmp, (const uint8_t *)kv_b->data + row * (size_t)(h * per + i), kv_b->type, C);
            for (int64_t c = 0; c < C; c++) L->k_b_own[((size_t)h * C + c) * NP + i] = tmp[c];
        }
    free(tmp);
    L->k_b = (mla_heads){L->k_b_own, GGUF_TYPE_F32, C, NP, sizeof(float) * (size_t)(C * NP)};
    return ATTND_OK;
}

/* Layer l's latent attention weights (arch mla, mla.h). */
static attnd_status load_mla(model *m, int l, attnd_err *err) {
    const mla_dims *d = &m->mla;
    int64_t E = m->info.n_embd, HQ = (int64_t)d->n_head * mla_qk(d), C = d->kv_lora;
    layer_weights *L = &m->layers[l];
    attnd_status st;
    char name[96];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%d.%s", l, suffix), name)
    if (d->q_lora) {
        if ((st = find_matrix(m, NAME("attn_q_a.weight"), d->q_lora, E, true, &L->wq_a, err)) ||
            (st = find_matrix(m, NAME("attn_q_b.weight"), HQ, d->q_lora, true, &L->wq_b, err)) ||
            (st = load_vector(m, NAME("attn_q_a_norm.weight"), d->q_lora, true, &L->q_a_norm, err)))
            return st;
    } else if ((st = find_matrix(m, NAME("attn_q.weight"), HQ, E, true, &L->wq, err))) {
        return st;
    }
    if ((st = find_matrix(m, NAME("attn_kv_a_mqa.weight"), C + d->rope, E, true, &L->wkv_a, err)) ||
        (st = load_vector(m, NAME("attn_kv_a_norm.weight"), C, true, &L->kv_a_norm, err)) ||
        (st = find_matrix(m, NAME("attn_output.weight"), E, m->q_dim, true, &L->wo, err)))
        return st;
    if (gguf_find_tensor(m->f, NAME("attn_k_b.weight"))) {
        if ((st = find_heads(m, name, C, d->nope, &L->k_b, err)) ||
            (st = find_heads(m, NAME("attn_v_b.weight"), d->v_head, C, &L->v_b, err)))
            return st;
        return ATTND_OK;
    }
    weight kv_b;
    if ((st = find_matrix(m, NAME("attn_kv_b.weight"), (int64_t)d->n_head * (d->nope + d->v_head), C, true, &kv_b, err)))
        return st;
#undef NAME
    return split_kv_b(m, L, &kv_b, err);
}

/* Layer l's Gated DeltaNet weights (deltanet.h): the projections mapped, the small ones as F32.
 * ssm_a and ssm_dt.bias are one per value head; ssm_a carries no ".weight". */
static attnd_status load_deltanet(model *m, int l, attnd_err *err) {
    const dn_dims *dn = &m->dn;
    int64_t E = m->info.n_embd, C = dn->conv_dim, HV = dn->hv, VD = (int64_t)dn->hv * dn->dv;
    attnd_status st;
    layer_weights *L = &m->layers[l];
    char name[96];
    MAT(wqkv, "attn_qkv", C, E);
    MAT(dn_z, "attn_gate", VD, E);
    if (m->arch->dn_fused_ba) {
        MAT(dn_ba, "ssm_ba", 2 * HV, E);
    } else {
        MAT(dn_beta, "ssm_beta", HV, E);
        MAT(dn_alpha, "ssm_alpha", HV, E);
    }
    MAT(dn_out, "ssm_out", E, VD);
    snprintf(name, sizeof(name), "blk.%d.ssm_conv1d.weight", l);
    if ((st = load_vectors(m, name, dn->K, C, true, &L->dn_conv, err))) return st;
    VEC(dn_dt_bias, "ssm_dt", "bias", HV, true);
    snprintf(name, sizeof(name), "blk.%d.ssm_a", l);
    if ((st = load_vector(m, name, HV, true, &L->dn_a, err))) return st;
    VEC(dn_norm, "ssm_norm", "weight", dn->dv, true);
    for (int h = 0; h < HV; h++)
        if (!(L->dn_a[h] <= 0) || !isfinite(L->dn_dt_bias[h]))
            return attnd_fail(err, ATTND_ERR_FORMAT, "blk.%d.ssm_a[%d] = %g is not -exp(A_log) (<= 0), or ssm_dt.bias "
                              "is not finite", l, h, L->dn_a[h]);
    return ATTND_OK;
}

/* Layer l's token mixer (attention or Gated DeltaNet) with its norms. */
static attnd_status load_layer(model *m, int l, attnd_err *err) {
    const arch_desc *d = m->arch;
    int64_t E = m->info.n_embd;
    attnd_status st;
    layer_weights *L = &m->layers[l];
    char name[96];
    VEC(attn_norm, "attn_norm", "weight", E, !(d->pre_ln && l == 0)); /* ModernBERT's first: none */
    if ((st = L->kind == LAYER_DELTANET ? load_deltanet(m, l, err)
              : d->mla                   ? load_mla(m, l, err)
                                         : load_attention(m, l, err)))
        return st;
    if (d->post_norms) {
        VEC(post_attn_norm, "post_attention_norm", "weight", E, true);
        VEC(post_ffn_norm, "post_ffw_norm", "weight", E, true);
    }
    VEC(ffn_norm, d->ffn_norm ? d->ffn_norm : "ffn_norm", "weight", E, true);
    snprintf(name, sizeof(name), "blk.%d.layer_output_scale.weight", l);
    if (d->out_scale && (st = load_scalar(m, name, &L->out_scale, err))) return st;
    if (m->n_ple) {
        OPT_MAT(ple_gate, "inp_gate", m->n_ple, E, true);
        OPT_MAT(ple_proj, "proj", E, m->n_ple, true);
        VEC(ple_post_norm, "post_norm", "weight", E, true);
    }
    return ATTND_OK;
}
#undef OPT_MAT
#undef MAT
#undef VEC

/* The multi-token-prediction block of an arch mtp family (one nextn block, blk.<n_layer>): a
 * gated-attention block of the main layers' geometry, and its nextn tensors (llama.cpp's
 * qwen35 / qwen35moe load_block_mtp). A file whose block does not load as that is served without
 * it (info.mtp false): the block never changes what the main pass computes. */
static attnd_status load_ffn(model *m, int l, attnd_err *err);
static void load_mtp(model *m, const char *arch) {
    model_info *mi = &m->info;
    int l = mi->n_layer, src = -1;
    if (!m->arch->mtp || mi->n_mtp_layers != 1) return;
    for (int i = 0; i < l; i++)
        if (m->layers[i].kind == LAYER_ATTENTION && !m->layers[i].window) src = i;
    if (src < 0) return;
    layer_weights *L = &m->layers[l];
    attnd_err err;
    int64_t E = mi->n_embd, V = mi->n_vocab;
    *L = (layer_weights){0};
    const layer_weights *S = &m->layers[src];
    L->kind = LAYER_ATTENTION, L->rope = S->rope, L->rope_table = S->rope_table, L->head_dim = S->head_dim;
    L->rope_dims = S->rope_dims, L->q_dim = S->q_dim, L->kv_dim = S->kv_dim, L->kv_source = l, L->out_scale = 1.0f;
    if (read_layer_widths(m, arch, l, &err) || L->n_head_kv != S->n_head_kv || L->n_ff > m->max_ff ||
        load_layer(m, l, &err) || load_ffn(m, l, &err))
        goto off;
    char name[96];
#define NEXTN(s) (snprintf(name, sizeof(name), "blk.%d.nextn.%s.weight", l, s), name)
    if (find_matrix(m, NEXTN("eh_proj"), E, 2 * E, true, &m->mtp_eh_proj, &err) ||
        load_vector(m, NEXTN("enorm"), E, true, &m->mtp_enorm, &err) ||
        load_vector(m, NEXTN("hnorm"), E, true, &m->mtp_hnorm, &err) ||
        load_vector(m, NEXTN("shared_head_norm"), E, false, &m->mtp_head_norm, &err) ||
        find_matrix(m, NEXTN("shared_head_head"), V, E, false, &m->mtp_head, &err) ||
        find_matrix(m, NEXTN("embed_tokens"), V, E, false, &m->mtp_embd, &err))
        goto off;
#undef NEXTN
    if (!m->mtp_head.data) m->mtp_head = m->output;
    if (!m->mtp_embd.data) m->mtp_embd = m->tok_embd;
    mi->mtp = true;
    return;
off:
    mi->mtp = false;
}

/* The multi-token-prediction blocks (blk.N. with N from n_layer on) count as read: the main pass
 * does not run them (llama.cpp's does not either); load_mtp's block runs as a draft. */
static void skip_mtp_blocks(model *m) {
    for (uint64_t i = 0; m->info.n_mtp_layers && i < gguf_tensor_count(m->f); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->f, i);
        int b;
        if (sscanf(t->name, "blk.%d.", &b) == 1 && b >= m->info.n_layer) m->tensor_read[i] = 1;
    }
}

/* A 3-D expert tensor [cols, rows, n_expert] as one (n_expert * rows, cols) matrix. */
static attnd_status find_experts(model *m, const char *name, int64_t rows, int64_t cols, weight *out, attnd_err *err) {
    memset(out, 0, sizeof(*out));
    const gguf_tensor *t;
    attnd_status st = find_weight(m, name, true, &t, err);
    if (st) return st;
    if (t->n_dims != 3 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows || (int64_t)t->ne[2] != m->n_expert)
        return attnd_fail(err, ATTND_ERR_FORMAT, "tensor '%s' has shape [%llu, %llu, %llu], expected [%lld, %lld, %d]",
                          name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                          (unsigned long long)t->ne[2], (long long)cols, (long long)rows, m->n_expert);
    *out = (weight){.data = t->data, .type = t->type, .rows = rows * m->n_expert, .cols = cols, .name = t->name};
    return ATTND_OK;
}

/* arch moe_beside_dense: layer l's experts, when it has a router (ffn_gate_inp): the norms of both
 * branches, the router's input scale, gate and up fused (ffn_gate_up_exps) or apart, and each
 * expert's output scale (ffn_down_exps.scale, optional). */
static attnd_status load_side_experts(model *m, int l, attnd_err *err) {
    layer_weights *L = &m->layers[l];
    int64_t E = m->info.n_embd, FE = m->n_ff_exp;
    attnd_status st;
    char name[96];
#define NAME(suffix, ext) (snprintf(name, sizeof(name), "blk.%d.%s.%s", l, suffix, ext), name)
    if (!gguf_find_tensor(m->f, NAME("ffn_gate_inp", "weight"))) return ATTND_OK;
    if (!m->n_expert) return attnd_fail(err, ATTND_ERR_FORMAT, "layer %d has a router but the file no expert_count", l);
    if ((st = find_matrix(m, name, m->n_expert, E, true, &L->router, err)) ||
        (st = load_vector(m, NAME("ffn_gate_inp", "scale"), E, true, &L->router_scale, err)) ||
        (st = load_vector(m, NAME("pre_ffw_norm_2", "weight"), E, true, &L->ffn_pre_norm_2, err)) ||
        (st = load_vector(m, NAME("post_ffw_norm_1", "weight"), E, true, &L->ffn_post_norm_1, err)) ||
        (st = load_vector(m, NAME("post_ffw_norm_2", "weight"), E, true, &L->ffn_post_norm_2, err)) ||
        (st = load_vector(m, NAME("ffn_down_exps", "scale"), m->n_expert, false, &L->down_exps_scale, err)) ||
        (st = find_experts(m, NAME("ffn_down_exps", "weight"), E, FE, &L->down_exps, err)))
        return st;
    L->exp_stride = (int)FE;
    if (!gguf_find_tensor(m->f, NAME("ffn_gate_up_exps", "weight"))) {
        if ((st = find_experts(m, NAME("ffn_gate_exps", "weight"), FE, E, &L->gate_exps, err))) return st;
        return find_experts(m, NAME("ffn_up_exps", "weight"), FE, E, &L->up_exps, err);
    }
    if ((st = find_experts(m, name, 2 * FE, E, &L->gate_exps, err))) return st;
    L->exp_stride = (int)(2 * FE); /* expert x: its gate rows from 2 FE x, its up rows from 2 FE x + FE */
    L->up_exps = L->gate_exps;
    L->up_exps.data = (const uint8_t *)L->gate_exps.data + quant_row_bytes(L->gate_exps.type, E) * (size_t)FE;
    return ATTND_OK;
#undef NAME
}

/* Layer l's feed-forward weights: a router and its experts, or one gated FFN (fused or not). */
static attnd_status load_ffn(model *m, int l, attnd_err *err) {
    const arch_desc *d = m->arch;
    layer_weights *L = &m->layers[l];
    int64_t E = m->info.n_embd, F = L->n_ff;
    attnd_status st;
    char name[96];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%d.%s.weight", l, suffix), name)
    if (d->moe && l >= m->n_dense_lead) {
        int64_t FE = m->n_ff_exp;
        L->exp_stride = (int)FE;
        if ((st = find_matrix(m, NAME("ffn_gate_inp"), m->n_expert, E, true, &L->router, err))) return st;
        if ((st = find_experts(m, NAME("ffn_gate_exps"), FE, E, &L->gate_exps, err))) return st;
        if ((st = find_experts(m, NAME("ffn_up_exps"), FE, E, &L->up_exps, err))) return st;
        if ((st = find_experts(m, NAME("ffn_down_exps"), E, FE, &L->down_exps, err))) return st;
        if (d->shared_expert && m->n_ff_shexp) {
            int64_t FS = m->n_ff_shexp;
            if ((st = find_matrix(m, NAME("ffn_gate_shexp"), FS, E, true, &L->gate_shexp, err)) ||
                (st = find_matrix(m, NAME("ffn_up_shexp"), FS, E, true, &L->up_shexp, err)) ||
                (st = find_matrix(m, NAME("ffn_down_shexp"), E, FS, true, &L->down_shexp, err)))
                return st;
            /* DeepSeek's shared experts are ungated */
            if (!d->ds_router && (st = load_vector(m, NAME("ffn_gate_inp_shexp"), E, true, &L->shexp_gate, err)))
                return st;
        }
        if (d->ds_router) {
            snprintf(name, sizeof(name), "blk.%d.exp_probs_b.bias", l);
            if ((st = load_vector(m, name, m->n_expert, false, &L->exp_probs_b, err))) return st;
        }
        if (!d->moe_biases) return ATTND_OK;
#define BIAS(suffix) (snprintf(name, sizeof(name), "blk.%d.%s.bias", l, suffix), name)
        int NE = m->n_expert;
        if ((st = load_vectors(m, BIAS("ffn_gate_inp"), NE, 1, true, &L->router_b, err))) return st;
        if ((st = load_vectors(m, BIAS("ffn_gate_exps"), FE, NE, true, &L->gate_exps_b, err))) return st;
        if ((st = load_vectors(m, BIAS("ffn_up_exps"), FE, NE, true, &L->up_exps_b, err))) return st;
        return load_vectors(m, BIAS("ffn_down_exps"), E, NE, true, &L->down_exps_b, err);
#undef BIAS
    }
    if (d->fused_gate_up) {
        if ((st = find_matrix(m, NAME("ffn_up"), 2 * F, E, true, &L->w_up, err))) return st;
    } else {
        if ((st = find_matrix(m, NAME("ffn_gate"), F, E, true, &L->w_gate, err))) return st;
        if ((st = find_matrix(m, NAME("ffn_up"), F, E, true, &L->w_up, err))) return st;
    }
    if ((st = find_matrix(m, NAME("ffn_down"), E, F, true, &L->w_down, err))) return st;
    return d->moe_beside_dense ? load_side_experts(m, l, err) : ATTND_OK;
#undef NAME
}

/* Every tensor of the file is read by some step: one that none reads (a family's extra norm) would be a part of the model silently left out. */
static attnd_status check_all_read(const model *m, attnd_err *err) {
    for (uint64_t i = 0; i < gguf_tensor_count(m->f); i++)
        if (!m->tensor_read[i]) {
            const char *name = gguf_tensor_at(m->f, i)->name;
            return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "tensor '%.100s' is not read by any step of attnd's '%s' "
                              "(refusing the file rather than computing another model)",
                              name, m->info.arch);
        }
    return ATTND_OK;
}

/* The 2-D matrices of a layer (those a family lacks are empty: no data). The experts are read in
 * slices from the mapping, not packed. */
#define LAYER_MATRICES 22
static void layer_matrices(layer_weights *L, weight *out[LAYER_MATRICES]) {
    weight *lw[LAYER_MATRICES] = {&L->wq,       &L->wk,         &L->wv,      &L->wqkv,      &L->wo,       &L->w_gate,
                                  &L->w_up,     &L->w_down,     &L->router,  &L->dn_z,      &L->dn_beta,  &L->dn_alpha,
                                  &L->dn_out,   &L->gate_shexp, &L->up_shexp, &L->down_shexp, &L->dn_ba,
                                  &L->ple_gate, &L->ple_proj,   &L->wq_a,     &L->wq_b,       &L->wkv_a};
    memcpy(out, lw, sizeof lw);
}

typedef struct {
    model *m;
    weight **ws;
} pack_job;

/* Each copy replaces the mapped original in use, so its pages leave resident memory as soon as it
 * is made (they come back from the file only if a path reads the original): the load's peak stays
 * near one matrix above the mapping. A tied output's stay: the embedding lookup still reads them. */
static void pack_task(void *ctx, int i, int worker) {
    (void)worker;
    const pack_job *job = ctx;
    weight *w = job->ws[i];
    if (!w->data || !(w->packed = quant_pack(w->data, w->type, w->rows, w->cols))) return;
    if (w->data != job->m->tok_embd.data)
        gguf_drop_pages(job->m->f, w->data, quant_row_bytes(w->type, w->cols) * (size_t)w->rows);
}

/* The matrices to pack (an array of n, the caller frees it; NULL when out of memory). */
static weight **packable(model *m, int *n_out) {
    int nl = m->info.n_layer + (m->info.mtp ? 1 : 0), n = 0, cap = 4 + LAYER_MATRICES * nl;
    weight **ws = malloc(sizeof(*ws) * (size_t)cap);
    if (!ws) return NULL;
    ws[n++] = &m->output;
    ws[n++] = &m->ple_model_proj;
    ws[n++] = &m->mtp_eh_proj;
    if (m->mtp_head.data && m->mtp_head.data != m->output.data) ws[n++] = &m->mtp_head;
    for (int l = 0; l < nl; l++, n += LAYER_MATRICES) layer_matrices(&m->layers[l], ws + n);
    *n_out = n;
    return ws;
}

/* pack_alone (model_load_opts): matrix after matrix on the calling thread, each in slices of
 * about o->slice_bytes of the file's rows, o->pace called before each slice. */
static void pack_paced(model *m, weight **ws, int n, const model_load_opts *o) {
    size_t total = 0, done = 0, slice = o->slice_bytes ? o->slice_bytes : (size_t)1 << 20;
    for (int i = 0; i < n; i++)
        if (ws[i]->data) total += quant_row_bytes(ws[i]->type, ws[i]->cols) * (size_t)ws[i]->rows;
    for (int i = 0; i < n; i++) {
        weight *w = ws[i];
        if (!w->data) continue;
        size_t rb = quant_row_bytes(w->type, w->cols);
        if ((w->packed = quant_pack_begin(w->type, w->rows, w->cols))) {
            int64_t step = (int64_t)(slice / rb) / QUANT_PACK_ROWS * QUANT_PACK_ROWS;
            if (step < QUANT_PACK_ROWS) step = QUANT_PACK_ROWS;
            for (int64_t r = 0; r < w->rows; r += step) {
                if (o->pace) o->pace(o->pace_user, done, total);
                int64_t r1 = r + step < w->rows ? r + step : w->rows;
                quant_pack_rows(w->packed, w->data, r, r1);
                done += rb * (size_t)(r1 - r);
            }
            if (w->data != m->tok_embd.data) gguf_drop_pages(m->f, w->data, rb * (size_t)w->rows);
        } else done += rb * (size_t)w->rows;
    }
}

/* Packed copies for the decode kernels where the instruction set has one for the type (quant_pack),
 * made on the engine's thread pool (or as opts says); without one (or without the memory) a matrix
 * is read from the mapping as it is. token_embd is only looked up by row: never packed, even when
 * the output head is tied to it. */
static void pack_matrices(model *m, const model_load_opts *opts) {
    int n = 0;
    weight **ws = packable(m, &n);
    if (!ws) return; /* no copies: slower, same results */
    bool own_head = m->mtp_head.data && m->mtp_head.data != m->output.data;
    if (opts && opts->pack_alone) pack_paced(m, ws, n, opts);
    else threads_run(threads_default(), n, pack_task, &(pack_job){m, ws});
    for (int i = 0; i < n; i++)
        if (ws[i]->packed) m->packed_bytes += quant_packed_bytes(ws[i]->packed);
    free(ws);
    if (!own_head && m->mtp_head.data) m->mtp_head = m->output; /* the head it shares, packed */
}

/* Per-layer embeddings (arch per_layer_embd, embedding_length_per_layer_input > 0): the token's
 * rows of every layer, the projection of the embedding onto them and its norm. */
static attnd_status load_per_layer_embd(model *m, attnd_err *err) {
    const model_info *mi = &m->info;
    uint32_t n = 0;
    attnd_status st;
    if (!m->arch->per_layer_embd) return ATTND_OK;
    if ((st = arch_u32(m->f, mi->arch, "embedding_length_per_layer_input", false, 0, &n, err))) return st;
    if (n == 0) return ATTND_OK;
    if (n > 4096) return attnd_fail(err, ATTND_ERR_FORMAT, "embedding_length_per_layer_input %u is out of range", n);
    m->n_ple = (int)n;
    int64_t W = (int64_t)n * mi->n_layer;
    if ((st = find_matrix(m, "per_layer_token_embd.weight", mi->n_vocab, W, true, &m->ple_embd, err)) ||
        (st = find_matrix(m, "per_layer_model_proj.weight", W, mi->n_embd, true, &m->ple_model_proj, err)))
        return st;
    return load_vector(m, "per_layer_proj_norm.weight", n, true, &m->ple_proj_norm, err);
}

/* The embeddings, the output head and norm, and every layer, after the shape is known. */
static attnd_status load_weights(model *m, attnd_err *err) {
    const gguf_file *f = m->f;
    model_info *mi = &m->info;
    attnd_status st;
    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) return attnd_fail(err, ATTND_ERR_FORMAT, "model has no tensor 'token_embd.weight'");
    if (te->n_dims != 2 || te->ne[1] == 0 || te->ne[1] > (1u << 22))
        return attnd_fail(err, ATTND_ERR_FORMAT, "tensor 'token_embd.weight' is not a (vocab, embd) matrix");
    mi->n_vocab = (int)te->ne[1];
    if ((st = check_vocabulary(f, mi->n_vocab, err))) return st;
    int64_t V = mi->n_vocab, E = mi->n_embd;
    if ((st = find_matrix(m, "token_embd.weight", V, E, true, &m->tok_embd, err))) return st;
    if (m->arch->post_ln) return encoder_load_weights(m, err); /* encoder.c */
    if ((st = find_matrix(m, "output.weight", V, E, false, &m->output, err))) return st;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    if ((st = load_vector(m, "output_norm.weight", E, true, &m->output_norm, err))) return st;
    if (m->arch->pre_ln && (st = load_vector(m, "token_embd_norm.weight", E, true, &m->tok_norm, err))) return st;
    if ((st = load_per_layer_embd(m, err))) return st;
    for (int l = 0; l < mi->n_layer; l++)
        if ((st = load_layer(m, l, err)) || (st = load_ffn(m, l, err))) return st;
    return ATTND_OK;
}

void model_destroy(model *m) {
    if (!m) return;
    embed_model_free(m); /* before the layers: it frees some of theirs */
    if (m->layers) {
        for (int l = 0; l < m->info.n_layer + m->info.n_mtp_layers; l++) { /* an MTP block that failed to load too */
            layer_weights *L = &m->layers[l];
            float *vecs[] = {L->attn_norm, L->ffn_norm, L->bq, L->bk, L->bv, L->bo, L->sinks, L->q_norm,
                             L->k_norm, L->post_attn_norm, L->post_ffn_norm, L->router_b, L->gate_exps_b,
                             L->up_exps_b, L->down_exps_b, L->dn_conv, L->dn_dt_bias, L->dn_a, L->dn_norm,
                             L->shexp_gate, L->ffn_post_norm_1, L->ffn_pre_norm_2, L->ffn_post_norm_2,
                             L->router_scale, L->down_exps_scale, L->ple_post_norm, L->q_a_norm, L->kv_a_norm,
                             L->k_b_own, L->exp_probs_b};
            for (size_t i = 0; i < ATTND_ARRAY_LEN(vecs); i++) free(vecs[i]);
            weight *lw[LAYER_MATRICES];
            layer_matrices(L, lw);
            for (int i = 0; i < LAYER_MATRICES; i++) quant_packed_destroy(lw[i]->packed);
        }
        free(m->layers);
    }
    if (m->mtp_head.packed != m->output.packed) quant_packed_destroy(m->mtp_head.packed);
    quant_packed_destroy(m->output.packed); /* never set on tok_embd, even when output is tied to it */
    quant_packed_destroy(m->ple_model_proj.packed);
    free(m->output_norm);
    free(m->ple_proj_norm);
    free(m->mtp_enorm), free(m->mtp_hnorm), free(m->mtp_head_norm);
    quant_packed_destroy(m->mtp_eh_proj.packed);
    for (int i = 0; i < ROPE_TABLES; i++) free(m->rope[i].inv_freq);
    free(m->tensor_read);
    gguf_close(m->f);
    free(m);
}

attnd_status model_load(model **out, const char *path, attnd_err *err) { return model_load_with(out, path, NULL, err); }

attnd_status model_load_with(model **out, const char *path, const model_load_opts *opts, attnd_err *err) {
    *out = NULL;
    attnd_status st;
    const char *arch = NULL;
    model *m = calloc(1, sizeof(*m));
    if (!m) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory loading a model");
    if ((st = gguf_open(&m->f, path, err))) goto fail;
    model_info *mi = &m->info;
    if ((st = read_shape(m, &arch, err))) goto fail;
    m->layers = calloc((size_t)(mi->n_layer + mi->n_mtp_layers), sizeof(*m->layers));
    m->tensor_read = calloc(gguf_tensor_count(m->f) + 1, 1);
    if (!m->layers || !m->tensor_read) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory loading a model");
        goto fail;
    }
    if ((st = read_attention(m, arch, err)) || (st = read_experts(m, arch, err)) || (st = read_recurrent(m, arch, err)))
        goto fail;
    if ((m->arch->mla && (st = read_mla(m, arch, err))) || (m->arch->ds_router && (st = read_ds_router(m, arch, err))))
        goto fail;
    if ((st = read_geometry(m, arch, err))) goto fail; /* per layer, from the model's (read_mla's for MLA) */
    if ((st = load_weights(m, err)) || (st = embed_model_load(m, arch, err))) goto fail;
    load_mtp(m, arch);
    skip_mtp_blocks(m);
    m->run_ctx = mi->n_ctx;
    if ((st = make_rope_tables(m, arch, err))) goto fail;
    if (m->arch->mla && (st = mla_scales(m, arch, err))) goto fail;
    if ((st = check_all_read(m, err))) goto fail;
    free(m->tensor_read);
    m->tensor_read = NULL;

    for (uint64_t i = 0; i < gguf_tensor_count(m->f); i++) mi->n_params += gguf_tensor_at(m->f, i)->n_elems;
    pack_matrices(m, opts);
    *out = m;
    return ATTND_OK;

fail:
    model_destroy(m);
    return st;
}

const model_info *model_info_get(const model *m) { return &m->info; }

attnd_status model_find_matrix(model *m, const char *name, int64_t rows, int64_t cols, bool required, weight *out,
                               attnd_err *err) {
    return find_matrix(m, name, rows, cols, required, out, err);
}

attnd_status model_load_vector(model *m, const char *name, int64_t n, bool required, float **out, attnd_err *err) {
    return load_vector(m, name, n, required, out, err);
}
const gguf_file *model_gguf(const model *m) { return m->f; }
