/*
 * attn_capture.c — recording attention weights for inspection (attnd/attn_capture.h).
 *
 * Rows are stored by absolute position, all allocated at create so that recording allocates
 * nothing: whole rows of one (layer, head) as a triangle (row p at offset p(p+1)/2, p + 1
 * floats), top_k rows as fixed k-wide slots (row p at p*k, min(p + 1, k) used). An encoder's
 * whole rows are one square per input (n_i rows of n_i floats, the squares one after another),
 * its top_k rows the same k-wide slots. A position's row
 * is complete when every selected (layer, head) was recorded; an evaluation reports each of them
 * once per entry, so `hits` counts modulo their number: a re-evaluated position (a session
 * truncated and extended) starts again at 1 and is complete at the end of its evaluation, in
 * whatever order the engine reports.
 *
 * Norm-weighted rows (ATTN_WEIGHTS_NORM) scale α_ij by ‖W_O^h v_j‖, read from the sequence's own
 * V cache and the layer's W_O as each position is first reached (one pass over W_O's rows per
 * position and layer, all selected heads at once), and kept per (layer, head, position). Latent
 * attention caches no values: v_j = W_UV,h c_j is made from the cached latent row first. The
 * logit lens reads each selected layer's residual stream through the engine's residual hook,
 * and the experts come from the engine's expert hook.
 *
 * A hybrid model's DeltaNet layers come through the engine's DeltaNet hook: each position's k,
 * beta and g of each selected value head are kept (dn_k, dn_bg), and row t is made at once by one
 * pass backwards from t: r = q_t / sqrt(d_k); for j = t, t - 1, ...: w_tj = beta_j k_j . r, then
 * r <- A_j r = e^{g_j} (r - w_tj k_j) (attnd/attn_capture.h: the formula), in double.
 */
#include "attnd/attn_capture.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "kv_layout.h"
#include "kv_quant.h"
#include "model_internal.h"
#include "quant.h"

struct attn_capture {
    int n_layers, n_heads;   /* selected (n_heads: the most of any selected layer) */
    int *lheads;             /* (n_layers) heads of each selected layer */
    int *lbase;              /* (n_layers) the first block of each selected layer */
    int n_blk;               /* blocks: selected (layer, head) pairs, the sum of lheads */
    int n_dnblk;             /* the DeltaNet layers' blocks among them */
    int max_heads;           /* head indices: n_head, or a DeltaNet layer's value heads when more */
    int *layers;             /* (n_layers) model layer of each selected one */
    int *heads;              /* (n_heads) */
    int *layer_slot;         /* (model n_layer) index among the selected, or -1 */
    int *head_slot;          /* (model n_head) */
    int top_k, n_positions;
    int k_slot;              /* floats per top_k row: min(top_k, n_positions); 0 = whole rows */
    int n_inputs;            /* an encoder's inputs; 0 = one causal sequence */
    int *in_first;           /* (n_inputs + 1) each input's first position, then n_positions */
    int *key0, *key_n;       /* (n_positions) an encoder's: each row's first key and key count */
    size_t *row_off;         /* (n_positions) an encoder's whole rows: each row's offset in a block */
    size_t block;            /* floats per (layer, head): a triangle, squares (encoder) or n_positions * top_k */
    float *w;                /* (n_layers, n_heads, block) */
    int32_t *ix;             /* (n_layers, n_heads, block) positions of top_k weights, or NULL */
    int *hits;               /* (n_positions) selected (layer, head) recorded, modulo their number */
    attn_weights weights;
    int lens_k, lens_slot;   /* asked; kept per row: min(lens_k, n_vocab) */
    const model *m;
    float *vnorm;            /* (n_layers, n_heads, n_positions) ‖W_O^h v_j‖, norm weights only */
    int *vnorm_upto;         /* (n_layers) positions whose vnorm is computed */
    float *vrows;            /* (n_heads, head_dim) scratch: the values of one position */
    float *lat;              /* (kv_latent) scratch: latent attention's cache row of one position */
    float *uvrow;            /* (kv_lora) scratch: one row of a head's W_UV as floats */
    float *wrow;             /* (q_dim) scratch: one row of W_O as floats */
    double *sq;              /* (n_heads) scratch */
    float *nrow;             /* (n_positions) scratch: one norm-weighted row */
    float *lens_p;           /* (n_layers, n_positions, lens_slot) logit-lens probabilities */
    int32_t *lens_ix;        /* (n_layers, n_positions, lens_slot) their token ids */
    float *lens_x;           /* (n_embd) scratch: the normalised residual */
    float *lens_logits;      /* (n_vocab) scratch */
    void *lens_scratch;      /* quant_matmul scratch for the output head, one row */
    int n_exp;               /* experts kept per row: n_expert_used when asked, else 0 */
    int32_t *exp_ix;         /* (n_layers, n_positions, n_exp) the experts of each row */
    float *exp_w;            /* (n_layers, n_positions, n_exp) their weights */
    int dk;                  /* DeltaNet: key head size, 0 without DeltaNet layers selected */
    int *dnbase;             /* (n_layers) the layer's first DeltaNet block, or -1 */
    int *dn_from;            /* (n_layers) the first position recorded (INT_MAX: none yet) */
    float *dn_k;             /* (DeltaNet blocks, n_positions, dk) each position's key */
    float *dn_bg;            /* (DeltaNet blocks, n_positions, 2) its beta and g */
    double *dn_r;            /* (dk) scratch: A_j ... A_t q_t */
    float *dn_row;           /* (n_positions) scratch: one effective row */
    const kv_seq *seq;
    attn_capture *next;      /* attn_capture_link's list */
    char *mem;               /* owns every array above (engine/block.h) */
};

// ---- parameters -----------------------------------------------------------------------------

/* Checks that list[0..n) holds distinct indices in 0..limit-1. */
static attnd_status check_list(const int *list, int n, int limit, const char *name, attnd_err *err) {
    if (n < 0) return attnd_fail(err, ATTND_ERR_INVALID, "%s: negative count", name);
    for (int i = 0; i < n; i++) {
        if (list[i] < 0 || list[i] >= limit)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: %d is out of range; the model has %d (0..%d)", name, list[i],
                              limit, limit - 1);
        for (int j = 0; j < i; j++)
            if (list[j] == list[i]) return attnd_fail(err, ATTND_ERR_INVALID, "%s: %d is listed twice", name, list[i]);
    }
    return ATTND_OK;
}

/* An encoder's capture: what it cannot record (no values are kept to weigh, no output head to
 * read the residual through, no experts), and its inputs' sizes. */
static attnd_status check_inputs(const model_info *mi, const attn_capture_params *p, const char **field,
                                 attnd_err *err) {
    const char *f = NULL;
    attnd_status st = ATTND_OK;
    long long sum = 0;
    if (p->weights != ATTN_WEIGHTS_ATTENTION || p->lens_k || p->experts) {
        f = p->lens_k ? "logit_lens" : p->experts ? "experts" : "weights";
        st = attnd_fail(err, ATTND_ERR_UNSUPPORTED, "%s is not available on an encoder ('%s'): it keeps no values "
                        "and reads no tokens out; only the attention weights are",
                        p->lens_k ? "logit_lens" : p->experts ? "experts" : "weights: \"norm\"", mi->arch);
    } else if (p->n_inputs < 1) {
        f = "inputs", st = attnd_fail(err, ATTND_ERR_INVALID, "inputs: %d inputs; give at least one", p->n_inputs);
    }
    for (int i = 0; !st && i < p->n_inputs; i++) {
        if (p->inputs[i] < 1 || p->inputs[i] > mi->n_ctx)
            f = "inputs", st = attnd_fail(err, ATTND_ERR_INVALID, "input %d: %d tokens; the model's context holds "
                                          "1..%d", i, p->inputs[i], mi->n_ctx);
        sum += p->inputs[i];
    }
    if (!st && sum != p->n_positions)
        f = "n_positions", st = attnd_fail(err, ATTND_ERR_INVALID, "%d positions, but the inputs hold %lld tokens",
                                           p->n_positions, sum);
    if (field) *field = f;
    return st;
}

static int n_selected(const int *list, int n, int all) { return list && n > 0 ? n : all; }

/* The li-th selected layer of p (model index). */
static int selected_layer(const attn_capture_params *p, int li) {
    return p->layers && p->n_layers > 0 ? p->layers[li] : li;
}

/* Heads of model layer l: a DeltaNet layer's value heads, else the query heads. */
static int heads_of(const model_info *mi, int l) {
    return model_info_recurrent(mi, l) ? mi->recurrent_heads : mi->n_head;
}

/* Whether p selects a DeltaNet layer. */
static bool selects_deltanet(const model_info *mi, const attn_capture_params *p) {
    for (int li = 0; li < n_selected(p->layers, p->n_layers, mi->n_layer); li++)
        if (model_info_recurrent(mi, selected_layer(p, li))) return true;
    return false;
}

/* A hybrid model's listed heads: in range for every selected layer, attention or DeltaNet. */
static attnd_status check_hybrid_heads(const model_info *mi, const attn_capture_params *p, attnd_err *err) {
    int lim = 1 << 30;
    for (int li = 0; li < n_selected(p->layers, p->n_layers, mi->n_layer); li++) {
        int n = heads_of(mi, selected_layer(p, li));
        lim = n < lim ? n : lim;
    }
    for (int i = 0; i < p->n_heads; i++)
        if (p->heads[i] >= lim && p->heads[i] < 1 << 30)
            return attnd_fail(err, ATTND_ERR_INVALID, "heads: %d is out of range for the selected layers: attention "
                              "layers have %d heads, Gated DeltaNet layers %d value heads; every listed head must "
                              "be in range for every selected layer (0..%d)", p->heads[i], mi->n_head,
                              mi->recurrent_heads, lim - 1);
    return check_list(p->heads, p->n_heads, 1 << 30, "heads", err);
}

attnd_status attn_capture_check(const model_info *mi, const attn_capture_params *p, const char **field,
                                attnd_err *err) {
    const char *f = NULL;
    attnd_status st = ATTND_OK;
    bool hybrid = mi->n_recurrent_layers > 0;
    if (hybrid && !p->deltanet) /* their mixing is a recurrence, not a softmax over positions */
        f = "model", st = attnd_fail(err, ATTND_ERR_UNSUPPORTED, "the model ('%s') has %d Gated DeltaNet layers; this "
                                     "inspection reads softmax attention only", mi->arch, mi->n_recurrent_layers);
    else if (p->layers && (st = check_list(p->layers, p->n_layers, mi->n_layer, "layers", err))) f = "layers";
    else if (p->heads && hybrid && (st = check_hybrid_heads(mi, p, err))) f = "heads";
    else if (p->heads && !hybrid && (st = check_list(p->heads, p->n_heads, mi->n_head, "heads", err))) f = "heads";
    else if (hybrid && p->weights == ATTN_WEIGHTS_NORM && selects_deltanet(mi, p))
        f = "weights", st = attnd_fail(err, ATTND_ERR_UNSUPPORTED, "weights: \"norm\" needs each position's cached "
                                       "value, and a Gated DeltaNet layer caches none (its rows are effective "
                                       "weights already); select only attention layers (every %d-th) for it",
                                       mi->recurrent_every);
    else if (p->top_k < 0) f = "top_k", st = attnd_fail(err, ATTND_ERR_INVALID, "top_k: %d is negative", p->top_k);
    else if (p->weights != ATTN_WEIGHTS_ATTENTION && p->weights != ATTN_WEIGHTS_NORM)
        f = "weights", st = attnd_fail(err, ATTND_ERR_INVALID, "weights: unknown kind %d", (int)p->weights);
    else if (p->lens_k < 0 || p->lens_k > mi->n_vocab)
        f = "logit_lens", st = attnd_fail(err, ATTND_ERR_INVALID, "logit_lens: %d is outside 0..%d (the vocabulary)",
                                          p->lens_k, mi->n_vocab);
    else if (p->experts && mi->n_expert == 0)
        f = "experts", st = attnd_fail(err, ATTND_ERR_INVALID,
                                       "experts: the model ('%s') is dense; only Mixture-of-Experts models route "
                                       "tokens to experts", mi->arch);
    else if (p->inputs) return check_inputs(mi, p, field, err);
    else if (p->n_positions < 1 || p->n_positions > mi->n_ctx)
        f = "n_positions", st = attnd_fail(err, ATTND_ERR_INVALID, "%d positions; the model's context holds 1..%d",
                                           p->n_positions, mi->n_ctx);
    if (field) *field = f;
    return st;
}

uint64_t attn_capture_blocks(const model_info *mi, const attn_capture_params *p) {
    int nl = n_selected(p->layers, p->n_layers, mi->n_layer);
    if (p->heads && p->n_heads > 0) return (uint64_t)nl * (uint64_t)p->n_heads;
    uint64_t n = 0;
    for (int li = 0; li < nl; li++) {
        int l = selected_layer(p, li);
        n += (uint64_t)(l >= 0 && l < mi->n_layer && p->deltanet ? heads_of(mi, l) : mi->n_head);
    }
    return n;
}

uint64_t attn_capture_dn_weights(const model_info *mi, const attn_capture_params *p) {
    uint64_t P = p->n_positions > 0 ? (uint64_t)p->n_positions : 0, n = 0;
    for (int li = 0; p->deltanet && !p->inputs && li < n_selected(p->layers, p->n_layers, mi->n_layer); li++) {
        int l = selected_layer(p, li);
        if (l >= 0 && l < mi->n_layer && model_info_recurrent(mi, l))
            n += (uint64_t)(p->heads && p->n_heads > 0 ? p->n_heads : mi->recurrent_heads);
    }
    return n * P * (P + 1) / 2;
}

uint64_t attn_capture_count(const model_info *mi, const attn_capture_params *p) {
    uint64_t per_head = 0, P = p->n_positions > 0 ? (uint64_t)p->n_positions : 0;
    if (p->inputs) {
        for (int i = 0; i < p->n_inputs; i++) { /* an encoder: n_i rows of min(n_i, k) */
            uint64_t n = p->inputs[i] > 0 ? (uint64_t)p->inputs[i] : 0;
            per_head += n * (p->top_k > 0 && (uint64_t)p->top_k < n ? (uint64_t)p->top_k : n);
        }
    } else if (p->top_k <= 0 || (uint64_t)p->top_k >= P) per_head = P * (P + 1) / 2;
    else {
        uint64_t k = (uint64_t)p->top_k; /* rows 0..k-1 hold p + 1 weights, the rest k */
        per_head = k * (k + 1) / 2 + (P - k) * k;
    }
    return per_head * attn_capture_blocks(mi, p);
}

// ---- lifecycle ------------------------------------------------------------------------------

/* slot[i] = index of model index i among list (or -1); out = the selection (list or 0..all-1). */
static void fill_selection(int *out, int *slot, const int *list, int n, int all) {
    for (int i = 0; i < all; i++) slot[i] = -1;
    int ns = n_selected(list, n, all);
    for (int i = 0; i < ns; i++) {
        out[i] = list && n > 0 ? list[i] : i;
        slot[out[i]] = i;
    }
}

/* Selected (layer, head) pairs: the number of blocks of c->w. */
static size_t n_blocks(const attn_capture *c) { return (size_t)c->n_blk; }

/* Lays out the capture's arrays in mem (block.h); returns the bytes they need (SIZE_MAX when
 * the weights do not fit in memory at all). */
static size_t layout(attn_capture *c, char *mem, const model *m) {
    const model_info *mi = &m->info;
    size_t n_w = n_blocks(c) <= SIZE_MAX / c->block ? n_blocks(c) * c->block : SIZE_MAX;
    block b = {.mem = mem};
    c->layers = block_take(&b, (size_t)c->n_layers, sizeof(*c->layers));
    c->lheads = block_take(&b, (size_t)c->n_layers, sizeof(*c->lheads));
    c->lbase = block_take(&b, (size_t)c->n_layers, sizeof(*c->lbase));
    c->heads = block_take(&b, (size_t)c->n_heads, sizeof(*c->heads));
    c->layer_slot = block_take(&b, (size_t)mi->n_layer, sizeof(*c->layer_slot));
    c->head_slot = block_take(&b, (size_t)c->max_heads, sizeof(*c->head_slot));
    c->hits = block_take(&b, (size_t)c->n_positions, sizeof(*c->hits));
    size_t PE = c->n_inputs ? (size_t)c->n_positions : 0;
    c->in_first = block_take(&b, c->n_inputs ? (size_t)c->n_inputs + 1 : 0, sizeof(*c->in_first));
    c->key0 = block_take(&b, PE, sizeof(*c->key0));
    c->key_n = block_take(&b, PE, sizeof(*c->key_n));
    c->row_off = block_take(&b, PE, sizeof(*c->row_off));
    c->w = block_take(&b, n_w, sizeof(*c->w));
    c->ix = block_take(&b, c->top_k ? n_w : 0, sizeof(*c->ix));
    size_t LH = n_blocks(c), P = (size_t)c->n_positions, norm = c->weights == ATTN_WEIGHTS_NORM;
    c->vnorm = block_take(&b, norm ? LH * P : 0, sizeof(*c->vnorm));
    c->vnorm_upto = block_take(&b, norm ? (size_t)c->n_layers : 0, sizeof(*c->vnorm_upto));
    c->vrows = block_take(&b, norm ? (size_t)c->n_heads * (size_t)m->max_head_dim : 0, sizeof(*c->vrows));
    size_t latent = norm ? (size_t)mi->kv_latent : 0; /* 0 without latent attention */
    c->lat = block_take(&b, latent, sizeof(*c->lat));
    c->uvrow = block_take(&b, latent ? (size_t)m->mla.kv_lora : 0, sizeof(*c->uvrow));
    c->wrow = block_take(&b, norm ? (size_t)m->q_dim : 0, sizeof(*c->wrow));
    c->sq = block_take(&b, norm ? (size_t)c->n_heads : 0, sizeof(*c->sq));
    c->nrow = block_take(&b, norm ? P : 0, sizeof(*c->nrow));
    size_t LK = c->lens_k ? (size_t)c->n_layers * P * (size_t)c->lens_slot : 0;
    c->lens_p = block_take(&b, LK, sizeof(*c->lens_p));
    c->lens_ix = block_take(&b, LK, sizeof(*c->lens_ix));
    c->lens_x = block_take(&b, c->lens_k ? (size_t)mi->n_embd : 0, sizeof(*c->lens_x));
    c->lens_logits = block_take(&b, c->lens_k ? (size_t)mi->n_vocab : 0, sizeof(*c->lens_logits));
    c->lens_scratch = block_take(&b, c->lens_k ? quant_scratch_bytes(m->output.type, 1, mi->n_embd) + 64 : 0, 1);
    size_t XK = (size_t)c->n_layers * P * (size_t)c->n_exp;
    c->exp_ix = block_take(&b, XK, sizeof(*c->exp_ix));
    c->exp_w = block_take(&b, XK, sizeof(*c->exp_w));
    size_t DN = (size_t)c->n_dnblk;
    c->dnbase = block_take(&b, c->dk ? (size_t)c->n_layers : 0, sizeof(*c->dnbase));
    c->dn_from = block_take(&b, c->dk ? (size_t)c->n_layers : 0, sizeof(*c->dn_from));
    c->dn_k = block_take(&b, DN * P * (size_t)c->dk, sizeof(*c->dn_k));
    c->dn_bg = block_take(&b, DN * P * 2, sizeof(*c->dn_bg));
    c->dn_r = block_take(&b, (size_t)c->dk, sizeof(*c->dn_r));
    c->dn_row = block_take(&b, c->dk ? P : 0, sizeof(*c->dn_row));
    return block_size(&b);
}

/* An encoder's rows: each input's first position, each row's keys and whole-row offset. */
static void fill_inputs(attn_capture *c, const int *inputs) {
    size_t off = 0;
    if (!c->n_inputs) return;
    c->in_first[0] = 0;
    for (int i = 0, p = 0; i < c->n_inputs; i++) {
        c->in_first[i + 1] = c->in_first[i] + inputs[i];
        for (; p < c->in_first[i + 1]; p++, off += (size_t)inputs[i]) {
            c->key0[p] = c->in_first[i];
            c->key_n[p] = inputs[i];
            c->row_off[p] = off;
        }
    }
}

attnd_status attn_capture_create(attn_capture **out, const model *m, const attn_capture_params *p, attnd_err *err) {
    *out = NULL;
    const model_info *mi = model_info_get(m);
    attnd_status st = attn_capture_check(mi, p, NULL, err);
    if (st) return st;
    attn_capture *c = calloc(1, sizeof(*c));
    if (!c) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory creating an attention capture");
    int max_heads = p->deltanet && selects_deltanet(mi, p) && mi->recurrent_heads > mi->n_head ? mi->recurrent_heads
                                                                                               : mi->n_head;
    c->max_heads = max_heads;
    c->n_layers = n_selected(p->layers, p->n_layers, mi->n_layer);
    c->n_heads = n_selected(p->heads, p->n_heads, max_heads);
    c->n_blk = (int)attn_capture_blocks(mi, p);
    for (int li = 0; li < c->n_layers; li++)
        if (model_info_recurrent(mi, selected_layer(p, li)))
            c->n_dnblk += p->heads && p->n_heads > 0 ? p->n_heads : mi->recurrent_heads;
    c->dk = c->n_dnblk ? m->dn.dk : 0;
    c->n_positions = p->n_positions;
    c->top_k = p->top_k;
    c->k_slot = p->top_k < p->n_positions ? p->top_k : p->n_positions;
    size_t P = (size_t)p->n_positions, squares = 0;
    c->n_inputs = p->inputs ? p->n_inputs : 0;
    for (int i = 0; i < c->n_inputs; i++) squares += (size_t)p->inputs[i] * (size_t)p->inputs[i];
    c->block = c->top_k ? P * (size_t)c->k_slot : c->n_inputs ? squares : P * (P + 1) / 2;
    c->weights = p->weights;
    c->lens_k = p->lens_k;
    c->lens_slot = p->lens_k;
    c->n_exp = p->experts ? mi->n_expert_used : 0;
    c->m = m;
    size_t n_weights = n_blocks(c) * c->block;
    if (!(c->mem = calloc(1, layout(c, NULL, m)))) {
        attn_capture_destroy(c);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for %zu attention weights", n_weights);
    }
    layout(c, c->mem, m);
    fill_inputs(c, p->inputs);
    fill_selection(c->layers, c->layer_slot, p->layers, p->n_layers, mi->n_layer);
    fill_selection(c->heads, c->head_slot, p->heads, p->n_heads, max_heads);
    for (int li = 0, base = 0, dn = 0; li < c->n_layers; li++) {
        bool rec = model_info_recurrent(mi, c->layers[li]);
        c->lheads[li] = p->heads && p->n_heads > 0 ? p->n_heads : heads_of(mi, c->layers[li]);
        c->lbase[li] = base, base += c->lheads[li];
        if (c->dk) c->dnbase[li] = rec ? dn : -1, c->dn_from[li] = INT_MAX, dn += rec ? c->lheads[li] : 0;
    }
    *out = c;
    return ATTND_OK;
}

void attn_capture_destroy(attn_capture *c) {
    if (!c) return;
    free(c->mem);
    free(c);
}

void attn_capture_bind(attn_capture *c, const kv_seq *seq) { c->seq = seq; }

int attn_capture_n_layers(const attn_capture *c) { return c->n_layers; }
int attn_capture_layer(const attn_capture *c, int li) { return c->layers[li]; }
int attn_capture_n_heads(const attn_capture *c) { return c->n_heads; }
int attn_capture_head(const attn_capture *c, int hi) { return c->heads[hi]; }
int attn_capture_layer_heads(const attn_capture *c, int li) { return c->lheads[li]; }
bool attn_capture_layer_deltanet(const attn_capture *c, int li) { return c->dk && c->dnbase[li] >= 0; }
bool attn_capture_hybrid(const attn_capture *c) { return c->m->info.n_recurrent_layers > 0; }
int attn_capture_layer_from(const attn_capture *c, int li) {
    return attn_capture_layer_deltanet(c, li) && c->dn_from[li] != INT_MAX ? c->dn_from[li] : 0;
}
int attn_capture_top_k(const attn_capture *c) { return c->top_k; }
attn_weights attn_capture_weights(const attn_capture *c) { return c->weights; }
int attn_capture_lens_k(const attn_capture *c) { return c->lens_k; }
int attn_capture_n_experts(const attn_capture *c) { return c->n_exp; }
int attn_capture_n_inputs(const attn_capture *c) { return c->n_inputs; }

int attn_capture_input(const attn_capture *c, int i, int *first) {
    ATTND_ASSERT(i >= 0 && i < c->n_inputs);
    *first = c->in_first[i];
    return c->in_first[i + 1] - c->in_first[i];
}

int attn_capture_keys(const attn_capture *c, int pos, int *first) {
    ATTND_ASSERT(pos >= 0 && pos < c->n_positions);
    *first = c->n_inputs ? c->key0[pos] : 0;
    return c->n_inputs ? c->key_n[pos] : pos + 1;
}

// ---- recording and reading ------------------------------------------------------------------

static size_t row_offset(const attn_capture *c, int li, int hi, int pos) {
    size_t base = ((size_t)c->lbase[li] + (size_t)hi) * c->block;
    if (c->top_k) return base + (size_t)pos * (size_t)c->k_slot;
    return base + (c->n_inputs ? c->row_off[pos] : (size_t)pos * (size_t)(pos + 1) / 2);
}

/* Keeps the k largest of w[0..n) in ow/oi, heaviest first (by_abs: the largest |w|, signs
 * kept); equal weights keep the lower position first (insertion after equals). O(n k), no
 * allocation. */
static void top_k_pick(float *ow, int32_t *oi, int k, const float *w, int n, bool by_abs) {
    int m = 0;
    for (int j = 0; j < n; j++) {
        float a = by_abs ? fabsf(w[j]) : w[j];
        if (m == k && !(a > (by_abs ? fabsf(ow[k - 1]) : ow[k - 1]))) continue;
        int i = m < k ? m++ : k - 1;
        for (; i > 0 && (by_abs ? fabsf(ow[i - 1]) : ow[i - 1]) < a; i--) {
            ow[i] = ow[i - 1];
            oi[i] = oi[i - 1];
        }
        ow[i] = w[j];
        oi[i] = j;
    }
}

static void top_k_select(float *ow, int32_t *oi, int k, const float *w, int n) { top_k_pick(ow, oi, k, w, n, false); }

// ---- norm weights: ‖W_O^h v_j‖ ------------------------------------------------------------

/* The cache row [c_j | k_pe_j] of position j of a latent layer (kv_layout.h) as F32 into c->lat. */
static void gather_latent_row(attn_capture *c, int layer, int j) {
    int L = c->m->info.kv_latent;
    kv_type kt = c->seq->pool->type;
    const uint8_t *row = (const uint8_t *)kv_k_tile(c->seq, layer, j / KV_BLOCK, 0) +
                         (size_t)(j % KV_BLOCK) * kv_quant_row_bytes(kt, L);
    if (kv_quant_is_quant(kt)) kv_quant_v_to_f32(c->lat, row, kt, L, 1);
    else if (kt == KV_F32) memcpy(c->lat, row, sizeof(float) * (size_t)L);
    else quant_f16_to_f32_row(c->lat, (const uint16_t *)row, L);
}

/* Latent attention (mla.h): head h's value at j is W_UV,h c_j (v_head), made here from the cache
 * row for each selected head, W_UV,h read a row at a time (its rows are the file's). */
static void gather_latent_values(attn_capture *c, int layer, int j) {
    const mla_heads *uv = &c->m->layers[layer].v_b;
    int C = c->m->mla.kv_lora, VH = c->m->mla.v_head;
    size_t rb = quant_row_bytes(uv->type, C);
    gather_latent_row(c, layer, j);
    for (int hi = 0; hi < c->n_heads; hi++) {
        const uint8_t *w = (const uint8_t *)uv->data + (size_t)c->heads[hi] * uv->stride;
        for (int r = 0; r < VH; r++) {
            quant_dequantize_row(c->uvrow, w + (size_t)r * rb, uv->type, C);
            double d = 0;
            for (int i = 0; i < C; i++) d += (double)c->uvrow[i] * c->lat[i];
            c->vrows[(size_t)hi * VH + r] = (float)d;
        }
    }
}

/* c->vrows = the cached values of position j of `layer` for each selected head (its kv head's). */
static void gather_values(attn_capture *c, int layer, int j) {
    if (c->m->info.kv_latent) {
        gather_latent_values(c, layer, j);
        return;
    }
    const layer_weights *L = &c->m->layers[layer]; /* each layer its geometry (Gemma 4's kinds differ) */
    int hd = L->head_dim, G = c->m->info.n_head / L->n_head_kv;
    for (int hi = 0; hi < c->n_heads; hi++) {
        const void *tile = kv_v_tile(c->seq, layer, j / KV_BLOCK, c->heads[hi] / G);
        size_t off = (size_t)(j % KV_BLOCK) * (size_t)hd;
        float *dst = c->vrows + (size_t)hi * hd;
        kv_type kt = c->seq->pool->type;
        if (kv_quant_is_quant(kt)) { /* row j % KV_BLOCK of the tile, converted */
            const uint8_t *row = (const uint8_t *)tile + (size_t)(j % KV_BLOCK) * kv_quant_row_bytes(kt, hd);
            kv_quant_v_to_f32(dst, row, kt, hd, 1);
        } else if (kt == KV_F32) memcpy(dst, (const float *)tile + off, sizeof(float) * (size_t)hd);
        else quant_f16_to_f32_row(dst, (const uint16_t *)tile + off, hd);
    }
}

/* vnorm of every selected head of the li-th layer at position j: one pass over W_O's rows. */
static void vnorm_position(attn_capture *c, int li, int j) {
    const model *m = c->m;
    int layer = c->layers[li], hd = m->layers[layer].head_dim, E = m->info.n_embd, Q = m->layers[layer].q_dim;
    const weight *wo = &m->layers[layer].wo;
    size_t rb = quant_row_bytes(wo->type, Q);
    gather_values(c, layer, j);
    for (int hi = 0; hi < c->n_heads; hi++) c->sq[hi] = 0;
    for (int r = 0; r < E; r++) {
        quant_dequantize_row(c->wrow, (const uint8_t *)wo->data + (size_t)r * rb, wo->type, Q);
        for (int hi = 0; hi < c->n_heads; hi++) {
            const float *w = c->wrow + (size_t)c->heads[hi] * hd, *v = c->vrows + (size_t)hi * hd;
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)w[i] * v[i];
            c->sq[hi] += d * d;
        }
    }
    for (int hi = 0; hi < c->n_heads; hi++)
        c->vnorm[((size_t)li * c->n_heads + hi) * c->n_positions + j] = (float)sqrt(c->sq[hi]);
}

/* c->nrow[0..n) = w[j] ‖W_O^h v_j‖, normalised to sum 1 (left at 0 when every term is 0). On
 * the first selected head of a layer, the norms of positions not yet seen are computed: a
 * position evaluated again (a truncated session) is recomputed from there on. */
static const float *norm_row(attn_capture *c, int li, int hi, int head, const float *w, int n) {
    int pos = n - 1, *upto = &c->vnorm_upto[li];
    bool first_head = true;
    for (int k = 0; k < c->n_heads; k++) first_head &= c->heads[k] >= head;
    if (first_head) {
        for (int j = pos < *upto ? pos : *upto; j <= pos; j++) vnorm_position(c, li, j);
        *upto = pos + 1;
    }
    const float *vn = c->vnorm + ((size_t)li * c->n_heads + hi) * c->n_positions;
    double sum = 0;
    for (int j = 0; j < n; j++) sum += (double)w[j] * vn[j];
    for (int j = 0; j < n; j++) c->nrow[j] = sum > 0 ? (float)(w[j] * vn[j] / sum) : 0.0f;
    return c->nrow;
}

// ---- the logit lens -----------------------------------------------------------------------

/* The lens of the li-th layer at pos: softmax(head(norm(x))), its lens_slot most probable. */
static void lens_record(attn_capture *c, int li, int pos, const float *x) {
    const model *m = c->m;
    int E = m->info.n_embd, V = m->info.n_vocab;
    double ss = 0; /* as the engine's RMSNorm: the sum of squares in double */
    for (int i = 0; i < E; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / E + m->info.rms_eps));
    for (int i = 0; i < E; i++) c->lens_x[i] = x[i] * scale * m->output_norm[i];
    float *lg = c->lens_logits, mx = -INFINITY, cap = m->final_softcap;
    quant_matmul(lg, m->output.data, m->output.type, V, E, c->lens_x, 1, c->lens_scratch, 1);
    for (int v = 0; v < V; v++) {
        if (cap > 0) lg[v] = tanhf(lg[v] / cap) * cap;
        mx = lg[v] > mx ? lg[v] : mx;
    }
    double sum = 0;
    for (int v = 0; v < V; v++) sum += lg[v] = expf(lg[v] - mx);
    for (int v = 0; v < V; v++) lg[v] = (float)(lg[v] / sum);
    size_t off = ((size_t)li * c->n_positions + pos) * c->lens_slot;
    top_k_select(c->lens_p + off, c->lens_ix + off, c->lens_slot, lg, V);
}

int attn_capture_lens(const attn_capture *c, int li, int pos, const float **p, const int32_t **ids) {
    ATTND_ASSERT(c->lens_k && li >= 0 && li < c->n_layers && pos >= 0 && pos < c->n_positions);
    size_t off = ((size_t)li * c->n_positions + pos) * c->lens_slot;
    *p = c->lens_p + off;
    if (ids) *ids = c->lens_ix + off;
    return c->lens_slot;
}

// ---- experts ------------------------------------------------------------------------------

static void experts_record(attn_capture *c, int li, int pos, const int *ids, const float *w) {
    size_t off = ((size_t)li * c->n_positions + pos) * c->n_exp;
    for (int k = 0; k < c->n_exp; k++) c->exp_ix[off + k] = ids[k], c->exp_w[off + k] = w[k];
}

int attn_capture_experts(const attn_capture *c, int li, int pos, const int32_t **ids, const float **w) {
    ATTND_ASSERT(li >= 0 && li < c->n_layers && pos >= 0 && pos < c->n_positions);
    size_t off = ((size_t)li * c->n_positions + pos) * c->n_exp;
    *ids = c->n_exp ? c->exp_ix + off : NULL;
    if (w) *w = c->n_exp ? c->exp_w + off : NULL;
    return c->n_exp;
}

// ---- recording ------------------------------------------------------------------------------

/* Row pos: the query's position (the last key's; an encoder's: the entry's, its row over the
 * whole call). A row whose keys are not pos's input's is not an encoder's row of this capture
 * (another call's): dropped. */
static void store_row(attn_capture *c, int li, int hi, int pos, const float *w, int n_keys, bool by_abs);

static void capture_record(attn_capture *c, int layer, int head, int pos, const float *w, int n_keys) {
    int li = c->layer_slot[layer], hi = c->head_slot[head];
    if (li < 0 || hi < 0 || pos < 0 || pos >= c->n_positions || (c->n_inputs && n_keys != c->key_n[pos])) return;
    if (hi >= c->lheads[li] || attn_capture_layer_deltanet(c, li)) return;
    if (c->weights == ATTN_WEIGHTS_NORM) w = norm_row(c, li, hi, head, w, n_keys);
    store_row(c, li, hi, pos, w, n_keys, false);
}

/* Row pos of the li-th layer and hi-th head is w[0..n_keys) (by_abs: a signed row, whose top_k
 * are the largest |w|). */
static void store_row(attn_capture *c, int li, int hi, int pos, const float *w, int n_keys, bool by_abs) {
    size_t off = row_offset(c, li, hi, pos);
    if (c->top_k) {
        top_k_pick(c->w + off, c->ix + off, c->k_slot, w, n_keys, by_abs);
        int k = n_keys < c->k_slot ? n_keys : c->k_slot;
        for (int j = 0; c->n_inputs && j < k; j++) c->ix[off + j] += c->key0[pos]; /* positions, not keys */
    } else {
        memcpy(c->w + off, w, sizeof(float) * (size_t)n_keys);
    }
    c->hits[pos] = c->hits[pos] % c->n_blk + 1;
}

/* DeltaNet value head h of the li-th layer at pos: keeps its k, beta and g, then makes row pos
 * backwards over the positions kept (attnd/attn_capture.h), in double. */
static void dn_record(attn_capture *c, int li, int hi, int h, int pos, const engine_dn_io *io) {
    int dk = c->dk, from = c->dn_from[li], kh = engine_dn_key_head(io, h);
    size_t blk = (size_t)(c->dnbase[li] + hi) * (size_t)c->n_positions;
    float *kp = c->dn_k + (blk + (size_t)pos) * (size_t)dk, *bg = c->dn_bg + (blk + (size_t)pos) * 2;
    memcpy(kp, io->k + (size_t)kh * dk, sizeof(float) * (size_t)dk);
    bg[0] = io->beta[h], bg[1] = io->g[h];
    const float *q = io->q + (size_t)kh * dk;
    double scale = 1.0 / sqrt((double)dk), *r = c->dn_r;
    for (int e = 0; e < dk; e++) r[e] = q[e] * scale;
    for (int j = 0; j < from; j++) c->dn_row[j] = 0; /* in the state before the first position kept */
    for (int j = pos; j >= from; j--) {
        const float *kj = c->dn_k + (blk + (size_t)j) * (size_t)dk, *bgj = c->dn_bg + (blk + (size_t)j) * 2;
        double d = 0;
        for (int e = 0; e < dk; e++) d += kj[e] * r[e];
        double w = bgj[0] * d, decay = exp((double)bgj[1]);
        c->dn_row[j] = (float)w;
        for (int e = 0; e < dk; e++) r[e] = decay * (r[e] - w * kj[e]);
    }
    store_row(c, li, hi, pos, c->dn_row, pos + 1, true);
}

int attn_capture_rows(const attn_capture *c, int *first) {
    int want = c->n_blk, p = 0;
    while (p < c->n_positions && c->hits[p] != want) p++;
    *first = p < c->n_positions ? p : 0;
    int n = 0;
    while (p + n < c->n_positions && c->hits[p + n] == want) n++;
    return n;
}

int attn_capture_row(const attn_capture *c, int li, int hi, int pos, const float **w, const int32_t **ix) {
    ATTND_ASSERT(li >= 0 && li < c->n_layers && hi >= 0 && hi < c->lheads[li] && pos >= 0 && pos < c->n_positions);
    size_t off = row_offset(c, li, hi, pos);
    *w = c->w + off;
    if (ix) *ix = c->top_k ? c->ix + off : NULL;
    int n = c->n_inputs ? c->key_n[pos] : pos + 1;
    return c->top_k && c->k_slot < n ? c->k_slot : n;
}

// ---- the engine hook ------------------------------------------------------------------------

void attn_capture_link(attn_capture **list, attn_capture *c, const kv_seq *seq) {
    attn_capture_unlink(list, c);
    c->seq = seq;
    c->next = *list;
    *list = c;
}

void attn_capture_unlink(attn_capture **list, attn_capture *c) {
    for (attn_capture **p = list; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            c->next = NULL;
            return;
        }
}

static attn_capture *capture_of(attn_capture *list, const kv_seq *s) {
    while (list && list->seq != s) list = list->next;
    return list;
}

/* The capture that records entry, or NULL. */
static attn_capture *hook_capture(const attn_hook *h, int entry) {
    if (!h->entries) return h->list;
    return entry < h->n ? capture_of(h->list, h->entries[entry].seq) : NULL;
}

static bool hook_want(void *user, int entry, int layer, int head) {
    const attn_hook *h = user;
    const attn_capture *c = hook_capture(h, entry);
    if (!c || c->layer_slot[layer] < 0 || c->head_slot[head] < 0) return false;
    return !h->entries || h->entries[entry].pos < c->n_positions;
}

static void hook_record(void *user, int entry, int layer, int head, const float *weights, int n_keys) {
    attn_capture *c = hook_capture(user, entry);
    if (c) capture_record(c, layer, head, c->n_inputs ? entry : n_keys - 1, weights, n_keys);
}

static void hook_resid(void *user, int entry, int layer, int pos, const float *x, int n_embd) {
    (void)n_embd;
    attn_capture *c = hook_capture(user, entry);
    if (c && c->lens_k && c->layer_slot[layer] >= 0 && pos < c->n_positions) lens_record(c, c->layer_slot[layer], pos, x);
}

static void hook_deltanet(void *user, int entry, int layer, int pos, const engine_dn_io *io) {
    attn_capture *c = hook_capture(user, entry);
    if (!c || !c->dk || c->n_inputs || c->layer_slot[layer] < 0 || pos < 0 || pos >= c->n_positions) return;
    int li = c->layer_slot[layer];
    if (c->dnbase[li] < 0) return;
    if (pos < c->dn_from[li]) c->dn_from[li] = pos;
    for (int hi = 0; hi < c->lheads[li]; hi++) dn_record(c, li, hi, c->heads[hi], pos, io);
}

static void hook_experts(void *user, int entry, int layer, int pos, const int *experts, const float *weights, int k) {
    attn_capture *c = hook_capture(user, entry);
    if (c && c->n_exp == k && c->layer_slot[layer] >= 0 && pos < c->n_positions)
        experts_record(c, c->layer_slot[layer], pos, experts, weights);
}

void attn_hook_install(attn_hook *h, engine *e, attn_capture *list, const batch_entry *entries, int n) {
    *h = (attn_hook){.e = e, .list = list, .entries = entries, .n = n};
    engine_set_attention_cb(e, hook_record, h);
    engine_set_attention_filter(e, hook_want);
    bool lens = false, experts = false;
    for (const attn_capture *c = list; c; c = entries ? c->next : NULL) {
        lens |= c->lens_k > 0, experts |= c->n_exp > 0;
        if (!entries) break;
    }
    engine_set_residual_cb(e, lens ? hook_resid : NULL);
    engine_set_expert_cb(e, experts ? hook_experts : NULL);
    bool dn = false;
    for (const attn_capture *c = list; c; c = entries ? c->next : NULL) {
        dn |= c->dk > 0;
        if (!entries) break;
    }
    engine_set_deltanet_cb(e, dn ? hook_deltanet : NULL);
}

void attn_hook_remove(attn_hook *h) {
    if (!h->e) return;
    engine_set_attention_cb(h->e, NULL, NULL);
    engine_set_attention_filter(h->e, NULL);
    engine_set_residual_cb(h->e, NULL);
    engine_set_expert_cb(h->e, NULL);
    engine_set_deltanet_cb(h->e, NULL);
    h->e = NULL;
}

attnd_status attn_capture_eval(attn_capture *list, engine *e, const batch_entry *entries, int n, float *logits,
                               attnd_err *err) {
    bool any = false;
    for (int t = 0; list && t < n && !any; t++) any = capture_of(list, entries[t].seq) != NULL;
    attn_hook h = {0};
    if (any) attn_hook_install(&h, e, list, entries, n);
    attnd_status st = engine_eval(e, entries, n, logits, err);
    attn_hook_remove(&h);
    return st;
}
