/*
 * engine.c — batched evaluation of the decoder (engine_* in attnd/engine.h).
 *
 * One engine_eval call runs every entry of the batch through the layers together: the weight
 * matrices are applied to all entries at once (quant_matmul reads each weight row once per call,
 * so a prefill is matrix-matrix work and N decode streams share one pass over the weights),
 * while attention is per entry, over the entry's own sequence's cache. Causality needs no mask:
 * an entry at position p attends over cached positions 0..p, and entries of one sequence are
 * written to the cache before attention runs, so later entries of a prefill see earlier ones.
 *
 * Attention never materialises a score matrix: keys are visited one cache block (KV_BLOCK
 * positions) at a time with an online softmax (running max and sum, rescaling the accumulator
 * when the max grows), as FlashAttention does, so memory is O(head_dim) per (entry, head).
 *
 * All buffers are sized for max_batch entries at engine_create: evaluation allocates nothing
 * except KV blocks when a sequence crosses a block boundary.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn_ops.h"
#include "block.h"
#include "deltanet.h"
#include "embed_eval.h"
#include "kv_layout.h"
#include "kv_quant.h"
#include "mla.h"
#include "model_internal.h"
#include "moe.h"
#include "quant.h"
#include "threads.h"

/* Below these amounts of work a parallel region costs more than it saves (thread wake-up is
 * several microseconds, and far worse on a loaded machine): elements of row-wise work
 * (normalisation, SwiGLU: from 8 decode streams of a 2048-wide model), and multiply-adds of one
 * layer's attention. The matmuls have their own threshold in quant.c (MATMUL_PAR_MIN_MACS). */
#define ROWWISE_PAR_MIN_ELEMS 16384L
#define ATTN_PAR_MIN_MACS 32768L

/* Queries per attention work item: consecutive entries of one sequence (a prefill) share each
 * converted K/V tile. */
#define ATTN_QBLOCK 16

/* Per-thread attention scratch, in floats, for one (query block, kv head) work item. */
typedef struct attn_slot {
    float *v_tile;   /* (KV_BLOCK, head_dim): an F16 value tile as F32, for tile steps that convert */
    float *kt;       /* (head_dim, KV_BLOCK): an F16 key tile (transposed, as cached) as F32, likewise,
                        and for report_attention */
    float *scores;   /* (KV_BLOCK) */
    float *qrows;    /* (ATTN_QBLOCK, group, head_dim): the query rows of one work item */
    float *p;        /* (ATTN_QBLOCK, group, KV_BLOCK): their scores, then weights, for one tile */
    float *acc;      /* (ATTN_QBLOCK, group, head_dim): running weighted sums of values */
    float *run_max;  /* (ATTN_QBLOCK, group) */
    float *run_sum;  /* (ATTN_QBLOCK, group) */
} attn_slot;

/* A run of entries [start, start + n) of one sequence at consecutive positions. */
typedef mla_qblock qblock;

struct engine {
    const model *m;
    int max_batch;
    int n_threads;
    int n_slots;            /* attention scratch slots: the most threads this engine will use */

    /* activations, one row per batch entry */
    float *x;               /* (B, n_embd) residual stream */
    float *xn;              /* (B, n_embd) normalised input of a sub-layer */
    float *q;               /* (B, q_dim) */
    float *k;               /* (B, kv_dim) */
    float *v;               /* (B, kv_dim) */
    float *att;             /* (B, q_dim) attention output before the output projection */
    float *tmp;             /* (B, n_embd) sub-layer output before the residual add */
    float *gate;            /* (B, n_ff) */
    float *up;              /* (B, n_ff) */
    float *fused;           /* (B, max(q_dim + 2 kv_dim, 2 n_ff)): a fused projection's output, or NULL */
    float *qfull;           /* (B, 2 q_dim) arch q_gate: each head's query then its gate; else empty */
    float *qgate;           /* (B, q_dim) arch q_gate: the gates, split out of qfull */

    /* Gated DeltaNet layers (deltanet.h; empty without them): C = conv_dim, VD = hv dv */
    float *dn_qkv;          /* (B, C) the projection, then the conv's output */
    float *dn_z;            /* (B, VD) */
    float *dn_beta, *dn_alpha; /* (B, hv) */
    float *dn_ba;           /* (B, 2 hv) a fused beta-alpha projection (arch dn_fused_ba), or empty */
    float *dn_o;            /* (B, VD) the mixer's output before ssm_out */
    int *dn_order;          /* (B) entries grouped by sequence (plan_runs) */
    int *dn_run;            /* (B + 1) where each sequence's entries start in dn_order */
    float **dn_state;       /* (B) the current layer's state of each run's sequence */
    dn_snap *dn_snaps;      /* (B, DN_SNAPS) the current layer's copies of each run's state: a checkpoint */
    dn_steps *dn_steps;     /* (B) the current layer's part of each run's verify record (kv_seq_keep_steps) */
    int *dn_snap_at;        /* (B) the entry of dn_order after which run r's checkpoint is taken */
    float *dn_scratch;      /* (n_slots, dn_scratch_floats) per-thread scratch of the chunked recurrence */

    /* Mixture of Experts (NULL for dense models); K = n_expert_used, FE = n_ff_exp */
    float *moe_logits;      /* (B, n_expert) router logits, then probabilities */
    int *moe_sel;           /* (B, K) the experts each entry uses, most probable first */
    float *moe_w;           /* (B, K) their weights */
    int *moe_slots;         /* (B * K) the (entry * K + k) slots sorted by expert (moe_plan) */
    moe_group *moe_groups;  /* (n_expert) the experts in use (moe_plan) */
    float *moe_g;           /* (B * K, FE) each sorted slot's activation */
    float *moe_o;           /* (B * K, n_embd) each sorted slot's input, then each slot's expert output */
    char *moe_scratch;      /* (n_slots, moe_scratch_bytes) per-thread scratch of the expert passes */
    size_t moe_scratch_bytes;
    float *rope;            /* (ROPE_TABLES, B, max_rope_dims / 2, 2): cos, sin of each entry's position */
    float *ple;             /* (B, n_layer, n_ple) per-layer embeddings' inputs (model n_ple), or empty */
    float *ple_g;           /* (B, n_ple) one layer's gated per-layer input */
    float *ple_tok;         /* (n_layer n_ple) one token's per_layer_token_embd row */
    float *side;            /* (B, n_embd) arch moe_beside_dense: the dense branch's output */
    /* latent attention (arch mla, mla.h; empty otherwise): HQ = n_head (nope + rope) */
    float *mla_q;           /* (B, HQ) the queries */
    float *mla_qa;          /* (B, q_lora) the queries' low-rank projection */
    float *mla_kva;         /* (B, kv_lora + rope) attn_kv_a_mqa's output */
    kv_seq **mla_seq;       /* (B) each entry's sequence */
    int *mla_pos;           /* (B) each entry's position */
    mla_scratch *mla;       /* owned: the attention's own scratch, or NULL */
    uint16_t *k16;          /* (kv_dim) one key row as F16, before it is scattered into a tile */
    float *neg;             /* (n_slots, n_ff) e^-gate of one row per thread, for SiLU */
    void *mm_scratch;       /* quant_matmul scratch for B rows of the widest weight */

    kv_seq **seqs;          /* (B) distinct sequences of the current batch */
    int *want;              /* (B) indices of entries that want logits */
    qblock *qblocks;        /* (B) attention work split of the current batch */
    float *slot_mem;        /* backing store of slots */
    attn_slot *slots;       /* (n_slots) */

    engine_attn_cb attn_cb; /* inspection hook; NULL = off */
    engine_attn_want attn_want; /* which (entry, layer, head) attn_cb wants; NULL = all */
    engine_resid_cb resid_cb;   /* residual-stream inspection hook (attn_user); NULL = off */
    engine_expert_cb expert_cb; /* expert-routing inspection hook (attn_user); NULL = off */
    engine_matmul_cb matmul_cb; /* matrix-input inspection hook (attn_user); NULL = off */
    engine_dn_cb dn_cb;         /* DeltaNet inspection hook (attn_user); NULL = off */
    void *attn_user;
    engine_yield_fn yield_fn; /* asked after each layer whether to give the step up; NULL = never */
    void *yield_user;
    double *prof;           /* engine_set_profile: seconds per engine_part; NULL = off */
    float *cb_weights;      /* (n_ctx) softmax weights handed to attn_cb */
    bool hidden;            /* engine_eval_hidden: "logits" are the final-normed hidden states */
    /* the MTP block (model_info.mtp; empty otherwise) */
    float *mtp_h;           /* (B, n_embd) each entry's final-normed hidden state */
    float *mtp_cat;         /* (B, 2 n_embd) [rmsnorm(embd(token)) enorm | rmsnorm(h) hnorm] */
    batch_entry *mtp_b;     /* (B) engine_mtp_step's entries as batch entries */

    char *mem;              /* owns every array above (engine/block.h) */
};

static int default_threads(void) { return threads_default(); }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static size_t max_scratch(size_t cur, const weight *w, int n_tok) {
    size_t s = quant_scratch_bytes(w->type, n_tok, w->cols);
    return s > cur ? s : cur;
}

/* Floats of one attention scratch slot (attn_slot). */
static size_t slot_floats(const model *m) {
    size_t hd = (size_t)m->max_head_dim, G = (size_t)m->max_group, QB = ATTN_QBLOCK;
    return 2 * KV_BLOCK * hd + KV_BLOCK + 2 * QB * G * hd + QB * G * KV_BLOCK + 2 * QB * G;
}

/* The MTP block's buffers (empty without one), and its projections' matmul scratch in *scratch. */
static void layout_mtp(engine *e, block *b, size_t *scratch) {
    const model *m = e->m;
    size_t B = (size_t)e->max_batch, E = (size_t)m->info.n_embd, on = m->info.mtp;
    if (on) *scratch = max_scratch(max_scratch(*scratch, &m->mtp_eh_proj, e->max_batch), &m->mtp_head, e->max_batch);
    e->mtp_h = block_take(b, on * B * E, sizeof(float));
    e->mtp_cat = block_take(b, on * 2 * B * E, sizeof(float));
    e->mtp_b = block_take(b, on * B, sizeof(batch_entry));
}

/* Lays out the engine's buffers in mem (block.h), sized for e->max_batch entries and e->n_slots
 * threads; returns the bytes they need. */
static size_t layout(engine *e, char *mem) {
    const model *m = e->m;
    const model_info *mi = &m->info;
    size_t B = (size_t)e->max_batch, E = (size_t)mi->n_embd, F = max_size((size_t)m->max_ff, (size_t)m->n_ff_shexp);
    size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim;
    size_t scratch = max_scratch(0, &m->output, e->max_batch), fused = 0, moe_scratch = 0;
    if (m->ple_model_proj.data) scratch = max_scratch(scratch, &m->ple_model_proj, e->max_batch);
    for (int l = 0; l < mi->n_layer + (mi->mtp ? 1 : 0); l++) {
        const layer_weights *L = &m->layers[l];
        const weight *ws[] = {&L->wq,      &L->wk,       &L->wv,       &L->wqkv,       &L->wo,       &L->w_gate,
                              &L->w_up,    &L->w_down,   &L->router,   &L->dn_z,       &L->dn_beta,  &L->dn_alpha,
                              &L->dn_out,  &L->gate_shexp, &L->up_shexp, &L->down_shexp, &L->dn_ba,
                              &L->ple_gate, &L->ple_proj,  &L->wq_a,     &L->wq_b,      &L->wkv_a};
        for (size_t i = 0; i < ATTND_ARRAY_LEN(ws); i++)
            if (ws[i]->data) scratch = max_scratch(scratch, ws[i], e->max_batch);
        if (L->router.data) /* the experts' passes have their own (moe.h) */
            moe_scratch = max_size(moe_scratch, moe_scratch_bytes(L, mi->n_embd, m->n_ff_exp, e->max_batch));
        if (L->wqkv.data && (size_t)L->wqkv.rows > fused) fused = (size_t)L->wqkv.rows;
        if (!L->w_gate.data && (size_t)L->w_up.rows > fused) fused = (size_t)L->w_up.rows;
    }
    block b = {.mem = mem};
    e->x = block_take(&b, B * E, sizeof(float)), e->xn = block_take(&b, B * E, sizeof(float));
    e->q = block_take(&b, B * Q, sizeof(float));
    e->k = block_take(&b, B * KV, sizeof(float));
    e->v = block_take(&b, B * KV, sizeof(float));
    e->att = block_take(&b, B * Q, sizeof(float));
    e->tmp = block_take(&b, B * E, sizeof(float));
    e->gate = block_take(&b, B * F, sizeof(float));
    e->up = block_take(&b, B * F, sizeof(float));
    e->fused = block_take(&b, B * fused, sizeof(float));
    size_t QG = m->arch->q_gate ? Q : 0, C = (size_t)m->dn.conv_dim, VD = (size_t)m->dn.hv * (size_t)m->dn.dv;
    e->qfull = block_take(&b, B * 2 * QG, sizeof(float));
    e->qgate = block_take(&b, B * QG, sizeof(float));
    e->dn_qkv = block_take(&b, B * C, sizeof(float));
    e->dn_z = block_take(&b, B * VD, sizeof(float));
    e->dn_beta = block_take(&b, B * (size_t)m->dn.hv, sizeof(float));
    e->dn_alpha = block_take(&b, B * (size_t)m->dn.hv, sizeof(float));
    e->dn_o = block_take(&b, B * VD, sizeof(float));
    e->dn_ba = block_take(&b, m->arch->dn_fused_ba ? B * 2 * (size_t)m->dn.hv : 0, sizeof(float));
    e->dn_order = block_take(&b, B, sizeof(int));
    e->dn_run = block_take(&b, B + 1, sizeof(int));
    e->dn_state = block_take(&b, B, sizeof(float *));
    e->dn_snaps = block_take(&b, B * DN_SNAPS, sizeof(dn_snap));
    e->dn_steps = block_take(&b, B, sizeof(dn_steps));
    e->dn_snap_at = block_take(&b, B, sizeof(int));
    e->dn_scratch = block_take(&b, (size_t)e->n_slots * dn_scratch_floats(&m->dn), sizeof(float));
    e->rope = block_take(&b, ROPE_TABLES * B * (size_t)m->max_rope_dims, sizeof(float));
    size_t PLE = (size_t)m->n_ple;
    e->ple = block_take(&b, B * (size_t)mi->n_layer * PLE, sizeof(float));
    e->ple_g = block_take(&b, B * PLE, sizeof(float));
    e->ple_tok = block_take(&b, (size_t)mi->n_layer * PLE, sizeof(float));
    e->side = block_take(&b, m->arch->moe_beside_dense && m->n_expert ? B * E : 0, sizeof(float));
    const mla_dims *md = &m->mla;
    e->mla_q = block_take(&b, B * (size_t)md->n_head * (size_t)mla_qk(md), sizeof(float));
    e->mla_qa = block_take(&b, B * (size_t)md->q_lora, sizeof(float));
    e->mla_kva = block_take(&b, B * (size_t)mla_latent(md), sizeof(float));
    e->mla_seq = block_take(&b, m->arch->mla ? B : 0, sizeof(kv_seq *));
    e->mla_pos = block_take(&b, m->arch->mla ? B : 0, sizeof(int));
    size_t NE = (size_t)m->n_expert, K = (size_t)m->n_expert_used, FE = (size_t)m->n_ff_exp;
    e->moe_logits = block_take(&b, B * NE, sizeof(float));
    e->moe_sel = block_take(&b, B * K, sizeof(int));
    e->moe_w = block_take(&b, B * K, sizeof(float));
    e->moe_slots = block_take(&b, B * K, sizeof(int));
    e->moe_groups = block_take(&b, NE, sizeof(*e->moe_groups));
    e->moe_g = block_take(&b, B * K * FE, sizeof(float));
    e->moe_o = block_take(&b, B * K * E, sizeof(float));
    e->moe_scratch_bytes = moe_scratch;
    e->moe_scratch = block_take(&b, moe_scratch * (size_t)e->n_slots, 1);
    e->k16 = block_take(&b, KV, sizeof(uint16_t));
    e->neg = block_take(&b, F * (size_t)e->n_slots, sizeof(float));
    layout_mtp(e, &b, &scratch);
    e->mm_scratch = block_take(&b, scratch ? scratch : 1, 1); /* quant_matmul wants one even if unused */
    e->seqs = block_take(&b, B, sizeof(*e->seqs));
    e->want = block_take(&b, B, sizeof(*e->want));
    e->qblocks = block_take(&b, B, sizeof(*e->qblocks));
    e->slot_mem = block_take(&b, slot_floats(m) * (size_t)e->n_slots, sizeof(float));
    e->slots = block_take(&b, (size_t)e->n_slots, sizeof(*e->slots));
    e->cb_weights = block_take(&b, (size_t)mi->n_ctx, sizeof(float));
    return block_size(&b);
}

/* The per-head matmuls' scratch of the latent attention (mla.h) for max_batch rows. */
static size_t mla_mm_bytes(const model *m, int max_batch) {
    size_t s = 0;
    for (int l = 0; l < m->info.n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        s = max_size(s, quant_scratch_bytes(L->k_b.type, max_batch, L->k_b.cols));
        s = max_size(s, quant_scratch_bytes(L->v_b.type, max_batch, L->v_b.cols));
    }
    return s;
}

attnd_status engine_create(engine **out, const model *m, int max_batch, int n_threads, attnd_err *err) {
    *out = NULL;
    if (!m) return attnd_fail(err, ATTND_ERR_INVALID, "engine_create: no model");
    if (max_batch < 1 || max_batch > (1 << 16))
        return attnd_fail(err, ATTND_ERR_INVALID, "max_batch %d is outside 1..65536", max_batch);
    engine *e = calloc(1, sizeof(*e));
    if (!e) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory creating an engine");
    e->m = m;
    e->max_batch = max_batch;
    e->n_threads = n_threads > 0 ? n_threads : default_threads();
    e->n_slots = e->n_threads > default_threads() ? e->n_threads : default_threads();

    if (!(e->mem = calloc(1, layout(e, NULL)))) {
        engine_destroy(e);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory creating an engine for %d tokens per batch",
                          max_batch);
    }
    layout(e, e->mem);
    if (m->arch->mla && !(e->mla = mla_scratch_create(&m->mla, max_batch, e->n_slots, mla_mm_bytes(m, max_batch)))) {
        engine_destroy(e);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory creating an engine for %d tokens per batch", max_batch);
    }
    size_t hd = (size_t)m->max_head_dim, G = (size_t)m->max_group, QB = ATTN_QBLOCK;
    for (int t = 0; t < e->n_slots; t++) {
        float *p = e->slot_mem + slot_floats(m) * (size_t)t;
        attn_slot *s = &e->slots[t];
        s->v_tile = p, p += KV_BLOCK * hd;
        s->kt = p, p += KV_BLOCK * hd;
        s->scores = p, p += KV_BLOCK;
        s->qrows = p, p += QB * G * hd;
        s->p = p, p += QB * G * KV_BLOCK;
        s->acc = p, p += QB * G * hd;
        s->run_max = p, p += QB * G;
        s->run_sum = p;
    }
    *out = e;
    return ATTND_OK;
}

void engine_destroy(engine *e) {
    if (!e) return;
    mla_scratch_destroy(e->mla);
    free(e->mem);
    free(e);
}

int engine_max_batch(const engine *e) { return e->max_batch; }
const model *engine_model(const engine *e) { return e->m; }

void engine_set_threads(engine *e, int n_threads) {
    if (n_threads <= 0) n_threads = default_threads();
    /* Attention scratch exists for n_slots threads; more threads than cores gains nothing. */
    /* atomic: other threads read it (engine_threads) while the owner's steps read it plainly */
    __atomic_store_n(&e->n_threads, n_threads < e->n_slots ? n_threads : e->n_slots, __ATOMIC_RELAXED);
}

int engine_threads(const engine *e) { return __atomic_load_n(&e->n_threads, __ATOMIC_RELAXED); }

int engine_threads_in_use(const engine *e) {
    int cap = threads_cap();
    int n = engine_threads(e);
    return cap && cap < n ? cap : n;
}

void engine_set_attention_cb(engine *e, engine_attn_cb cb, void *user) {
    e->attn_cb = cb;
    e->attn_user = user;
}

void engine_set_attention_filter(engine *e, engine_attn_want want) { e->attn_want = want; }

void engine_set_residual_cb(engine *e, engine_resid_cb cb) { e->resid_cb = cb; }

void engine_set_expert_cb(engine *e, engine_expert_cb cb) { e->expert_cb = cb; }

void engine_set_matmul_cb(engine *e, engine_matmul_cb cb) { e->matmul_cb = cb; }

void engine_set_profile(engine *e, double *seconds) { e->prof = seconds; }

const char *engine_part_name(engine_part part) {
    static const char *const names[ENGINE_PART_COUNT] = {"embed", "deltanet in", "deltanet mix", "deltanet out",
                                                         "attention", "router", "experts", "shared expert",
                                                         "dense ffn", "head"};
    return part >= 0 && part < ENGINE_PART_COUNT ? names[part] : "?";
}

/* Per-part timing: *t0 is the part's start (0 when profiling is off); the time since then goes
 * to part, and *t0 becomes now, the next part's start. */
static double prof_now(const engine *e) {
    if (!e->prof) return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void prof_add(const engine *e, engine_part part, double *t0) {
    if (!e->prof) return;
    double t = prof_now(e);
    e->prof[part] += t - *t0;
    *t0 = t;
}

void engine_set_deltanet_cb(engine *e, engine_dn_cb cb) { e->dn_cb = cb; }

void engine_set_yield(engine *e, engine_yield_fn fn, void *user) {
    e->yield_fn = fn;
    e->yield_user = user;
}

attnd_status engine_ablation_check(const model_info *mi, const engine_ablation *a, attnd_err *err) {
    if (a && a->n && mi->n_recurrent_layers)
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "ablate: the model ('%s') has Gated DeltaNet layers; head "
                          "ablation of hybrid models is not supported yet", mi->arch);
    for (int i = 0; a && i < a->n; i++) {
        const engine_ablation_head *h = &a->heads[i];
        if (h->layer < 0 || h->layer >= mi->n_layer)
            return attnd_fail(err, ATTND_ERR_INVALID, "ablate[%d]: layer %d is out of range; the model has %d (0..%d)", i,
                              h->layer, mi->n_layer, mi->n_layer - 1);
        if (h->head < 0 || h->head >= mi->n_head)
            return attnd_fail(err, ATTND_ERR_INVALID, "ablate[%d]: head %d is out of range; the model has %d (0..%d)", i,
                              h->head, mi->n_head, mi->n_head - 1);
        if (!isfinite(h->scale)) return attnd_fail(err, ATTND_ERR_INVALID, "ablate[%d]: scale is not finite", i);
        if (h->mode != ENGINE_ABLATE_ZERO && h->mode != ENGINE_ABLATE_MEAN)
            return attnd_fail(err, ATTND_ERR_INVALID, "ablate[%d]: unknown mode %d", i, (int)h->mode);
        if (h->mode == ENGINE_ABLATE_MEAN && (!a->mean_sum || !a->mean_n))
            return attnd_fail(err, ATTND_ERR_INVALID, "ablate[%d]: a mean ablation needs its running-sum storage", i);
    }
    return ATTND_OK;
}

void engine_seq_ablate(kv_seq *s, const engine_ablation *a) { s->ablation = a && a->n ? a : NULL; }

// ---- building blocks ------------------------------------------------------------------------

typedef struct rmsnorm_job {
    float *out;
    const float *x, *w;
    int dim;
    float eps;
} rmsnorm_job;

/* Row t: out = x / rms(x) * w (sum of squares in double, as llama.cpp does, so near-ties break
 * the same way more often). */
static void rmsnorm_row(void *ctx, int t, int worker) {
    (void)worker;
    const rmsnorm_job *j = ctx;
    const float *xr = j->x + (size_t)t * j->dim;
    float *o = j->out + (size_t)t * j->dim;
    double ss = 0;
    for (int i = 0; i < j->dim; i++) ss += (double)xr[i] * xr[i];
    float scale = (float)(1.0 / sqrt(ss / j->dim + j->eps));
    for (int i = 0; i < j->dim; i++) o[i] = xr[i] * scale * (j->w ? j->w[i] : 1.0f);
}

/* out = rmsnorm(x) * w for each of n rows of dim elements (w NULL: no weight). */
static void rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps, int n_threads) {
    rmsnorm_job j = {out, x, w, dim, eps};
    threads_run((long)n * dim >= ROWWISE_PAR_MIN_ELEMS ? n_threads : 1, n, rmsnorm_row, &j);
}

static void matmul(engine *e, float *out, const weight *w, const float *x, int n_tok) {
    if (e->matmul_cb) e->matmul_cb(e->attn_user, w->name, -1, x, n_tok, (int)w->cols);
    quant_matmul_packed(out, w->data, w->packed, w->type, w->rows, w->cols, x, n_tok, e->mm_scratch, e->n_threads);
}

/* Up to QUANT_MM_MAX weights of the same width against the same x, in one pass of the pool. */
static void matmul_many(engine *e, int n_w, float *const *out, const weight *const *w, const float *x, int n_tok) {
    quant_mm mm[QUANT_MM_MAX];
    for (int i = 0; e->matmul_cb && i < n_w; i++) e->matmul_cb(e->attn_user, w[i]->name, -1, x, n_tok, (int)w[i]->cols);
    for (int i = 0; i < n_w; i++) mm[i] = (quant_mm){out[i], w[i]->data, w[i]->packed, w[i]->type, w[i]->rows, false, 0};
    quant_matmul_many(mm, n_w, w[0]->cols, x, n_tok, e->mm_scratch, e->n_threads);
}

static void add_bias(float *x, const float *b, int n, int dim) {
    if (!b) return;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < dim; i++) x[(size_t)t * dim + i] += b[i];
}

/*
 * Rotates n_heads heads of head_dim in each of n rows by the entry's position, with the cos/sin of
 * rotary table `table`. ROPE_ADJACENT: pairs (2i, 2i+1) (llama's GGUF converter permuted Q/K for
 * this); ROPE_NEOX: pairs (i, i + rope_dims/2). Elements past rope_dims are left as they are.
 */
static void rope_apply(const engine *e, const layer_weights *L, float *x, int n, int n_heads) {
    int hd = L->head_dim, half = L->rope_dims / 2, stride = e->m->max_rope_dims;
    bool neox = e->m->arch->rope == ROPE_NEOX;
    for (int t = 0; t < n; t++) {
        const float *cs = e->rope + ((size_t)L->rope_table * e->max_batch + t) * stride; /* (half, 2) */
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)t * n_heads + h) * hd;
            for (int i = 0; i < half; i++) {
                int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                float c = cs[2 * i], s = cs[2 * i + 1];
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
            }
        }
    }
}

/* Writes each entry's K (as a column of the transposed key tile) and V (as a row of each kv
 * head's value tile) of `layer` into its sequence's cache at its position. */
static void kv_store(engine *e, const batch_entry *entries, int n, int layer) {
    const layer_weights *L = &e->m->layers[layer];
    int KV = L->kv_dim, hd = L->head_dim, n_kv = L->n_head_kv;
    for (int t = 0; t < n; t++) {
        const kv_seq *s = entries[t].seq;
        int pos = entries[t].pos, b = pos / KV_BLOCK, slot = pos % KV_BLOCK;
        const float *kr = e->k + (size_t)t * KV, *vr = e->v + (size_t)t * KV;
        void *kd = kv_k_block(s, layer, b);
        if (kv_quant_is_quant(s->pool->type)) { /* each head's row quantized in blocks of 32 */
            for (int g = 0; g < n_kv; g++) {
                kv_quant_store_k(kv_k_tile(s, layer, b, g), s->pool->type, hd, slot, kr + (size_t)g * hd);
                kv_quant_store_v(kv_v_tile(s, layer, b, g), s->pool->type, hd, slot, vr + (size_t)g * hd);
            }
        } else if (s->pool->type == KV_F32) {
            float *kc = (float *)kd + slot;
            for (int i = 0; i < KV; i++) kc[(size_t)i * KV_BLOCK] = kr[i];
            for (int g = 0; g < n_kv; g++)
                memcpy((float *)kv_v_tile(s, layer, b, g) + (size_t)slot * hd, vr + (size_t)g * hd, sizeof(float) * (size_t)hd);
        } else {
            uint16_t *kc = (uint16_t *)kd + slot;
            quant_f32_to_f16_row(e->k16, kr, KV);
            for (int i = 0; i < KV; i++) kc[(size_t)i * KV_BLOCK] = e->k16[i];
            for (int g = 0; g < n_kv; g++)
                quant_f32_to_f16_row((uint16_t *)kv_v_tile(s, layer, b, g) + (size_t)slot * hd, vr + (size_t)g * hd, hd);
        }
    }
}

/* The keys of kv head g in block b of s as a (hd, KV_BLOCK) F32 tile: read in place from an F32
 * cache, converted into buf (hd, KV_BLOCK) from an F16 or quantized one. */
static const float *k_tile(const kv_seq *s, int layer, int b, int g, int hd, float *buf) {
    if (s->pool->type == KV_F32) return kv_k_tile(s, layer, b, g);
    if (kv_quant_is_quant(s->pool->type)) {
        kv_quant_k_to_f32(buf, kv_k_tile(s, layer, b, g), s->pool->type, hd);
        return buf;
    }
    quant_f16_to_f32_row(buf, kv_k_tile(s, layer, b, g), (int64_t)hd * KV_BLOCK);
    return buf;
}

/* Points t at kv head g's key and value tiles of block b of s, in place: F32 ones, or F16 ones
 * that the tile step reads as they are or converts into t's scratch (attn_tile). */
static void tile_source(attn_tile *t, const kv_seq *s, int layer, int b, int g) {
    const void *k = kv_k_tile(s, layer, b, g), *v = kv_v_tile(s, layer, b, g);
    if (kv_quant_is_quant(s->pool->type))
        t->KQ = k, t->VQ = v, t->kvq = (int)s->pool->type;
    else if (s->pool->type == KV_F32)
        t->KT = k, t->V = v;
    else
        t->KT16 = k, t->V16 = v;
}

/* Asks for kv head g's key and value tiles of block b into L2 while earlier tiles are worked on:
 * they are two sequential runs, but short ones the hardware prefetchers pick up late. Always
 * inlined: GCC takes a function made only of prefetches for one without effect and drops its calls. */
static inline __attribute__((always_inline)) void kv_prefetch(const kv_seq *s, int layer, int b, int g) {
    size_t bytes = kv_tile_bytes(s->pool, layer);
    const char *k = kv_k_tile(s, layer, b, g), *v = kv_v_tile(s, layer, b, g);
    for (size_t o = 0; o < bytes; o += 64) {
        __builtin_prefetch(k + o, 0, 2);
        __builtin_prefetch(v + o, 0, 2);
    }
}

/*
 * Attention of the query block qb (entries of one sequence at consecutive positions) for the
 * query heads sharing kv head g (qb.n * G query rows). Each cache tile is read (and converted,
 * if the tile step must) once for every row that reaches it, all rows at once (attn_tile_step);
 * query i sees positions 0..pos_i only (the causal mask), and on a layer with a sliding window W
 * only pos_i - W + 1..pos_i: tiles wholly before the block's first window are not read.
 */
static void attend(const engine *e, attn_slot *sl, const batch_entry *entries, qblock qb, int layer, int g) {
    const layer_weights *L = &e->m->layers[layer];
    int window = L->window;
    int hd = L->head_dim, G = e->m->info.n_head / L->n_head_kv, Q = L->q_dim;
    const kv_seq *seq = entries[qb.start].seq;
    int pos0 = entries[qb.start].pos, n_keys_max = pos0 + qb.n;

    for (int qi = 0; qi < qb.n; qi++) /* (G, hd) of each query */
        memcpy(sl->qrows + (size_t)qi * G * hd, e->q + (size_t)(qb.start + qi) * Q + (size_t)g * G * hd,
               sizeof(float) * (size_t)G * hd);
    /* a sink (gpt-oss) is one more logit in each head's softmax, with no value: the running max
     * and sum start from it instead of from nothing */
    const float *sinks = e->m->layers[layer].sinks;
    for (int i = 0; i < qb.n * G; i++) {
        sl->run_max[i] = sinks ? sinks[g * G + i % G] : -INFINITY;
        sl->run_sum[i] = sinks ? 1.0f : 0;
    }
    memset(sl->acc, 0, sizeof(float) * (size_t)qb.n * G * hd);
    attn_tile t = {.kt_buf = sl->kt, .v_buf = sl->v_tile, .hd = hd, .group = G, .v_stride = hd,
                   .scale = e->m->attn_scale, .softcap = e->m->attn_softcap, .window = window};
    int b0 = window && pos0 - window + 1 > 0 ? (pos0 - window + 1) / KV_BLOCK : 0; /* the first tile in view */
    for (int b = b0, base = b0 * KV_BLOCK; base < n_keys_max; b++, base += KV_BLOCK) {
        if (b == b0 && base + KV_BLOCK < n_keys_max) kv_prefetch(seq, layer, b + 1, g);
        if (base + 2 * KV_BLOCK < n_keys_max) kv_prefetch(seq, layer, b + 2, g); /* two tiles ahead */
        t.cnt = n_keys_max - base < KV_BLOCK ? n_keys_max - base : KV_BLOCK;
        tile_source(&t, seq, layer, b, g);
        int qi0 = base > pos0 ? base - pos0 : 0; /* the first query that reaches this tile */
        size_t r0 = (size_t)qi0 * G;
        t.cnt0 = pos0 + qi0 + 1 - base < t.cnt ? pos0 + qi0 + 1 - base : t.cnt;
        t.qrel0 = pos0 + qi0 - base;
        t.R = (qb.n - qi0) * G;
        t.q = sl->qrows + r0 * hd;
        t.acc = sl->acc + r0 * hd;
        t.p = sl->p + r0 * KV_BLOCK;
        t.run_max = sl->run_max + r0;
        t.run_sum = sl->run_sum + r0;
        attn_tile_step(&t);
    }
    for (int qi = 0; qi < qb.n; qi++) {
        float *out = e->att + (size_t)(qb.start + qi) * Q + (size_t)g * G * hd; /* (G, hd) */
        for (int h = 0; h < G; h++) {
            int k = qi * G + h;
            float inv = 1.0f / sl->run_sum[k];
            for (int i = 0; i < hd; i++) out[(size_t)h * hd + i] = sl->acc[(size_t)k * hd + i] * inv;
        }
    }
}

/* Splits the batch into query blocks: maximal runs (up to ATTN_QBLOCK) of entries of one
 * sequence at consecutive positions. Returns the number of blocks. */
static int split_qblocks(engine *e, const batch_entry *entries, int n) {
    int nb = 0;
    for (int t = 0; t < n;) {
        int len = 1;
        while (t + len < n && len < ATTN_QBLOCK && entries[t + len].seq == entries[t].seq &&
               entries[t + len].pos == entries[t].pos + len)
            len++;
        e->qblocks[nb++] = (qblock){t, len};
        t += len;
    }
    return nb;
}

/* Inspection path (only when a callback is set): exact softmax weights of every (entry, head),
 * handed to the callback serially, on the calling thread. */
static void report_attention(engine *e, const batch_entry *entries, int n, int layer) {
    const model_info *mi = &e->m->info;
    const layer_weights *L = &e->m->layers[layer];
    int hd = L->head_dim, G = mi->n_head / L->n_head_kv, Q = L->q_dim, window = L->window;
    float scale = e->m->attn_scale, cap = e->m->attn_softcap;
    for (int t = 0; t < n; t++) {
        const kv_seq *s = entries[t].seq;
        int n_keys = entries[t].pos + 1, lo = window && n_keys > window ? n_keys - window : 0; /* first in view */
        for (int h = 0; h < mi->n_head; h++) {
            if (e->attn_want && !e->attn_want(e->attn_user, t, layer, h)) continue;
            const float *q = e->q + (size_t)t * Q + (size_t)h * hd;
            int g = h / G;
            float mx = -INFINITY;
            for (int base = lo / KV_BLOCK * KV_BLOCK; base < n_keys; base += KV_BLOCK) { /* blocks in view */
                int cnt = n_keys - base < KV_BLOCK ? n_keys - base : KV_BLOCK;
                const float *KT = k_tile(s, layer, base / KV_BLOCK, g, hd, e->slots[0].kt);
                attn_scores_t(e->slots[0].scores, q, KT, cnt, hd, scale); /* same scores as attend */
                memcpy(e->cb_weights + base, e->slots[0].scores, sizeof(float) * (size_t)cnt);
            }
            for (int j = 0; j < n_keys; j++) {
                float *w = &e->cb_weights[j];
                if (j < lo) *w = -INFINITY; /* outside the sliding window: weight 0 */
                else if (cap > 0) *w = tanhf(*w * (1.0f / cap)) * cap;
                mx = *w > mx ? *w : mx;
            }
            const float *sinks = e->m->layers[layer].sinks;
            if (sinks && sinks[h] > mx) mx = sinks[h];
            double sum = sinks ? expf(sinks[h] - mx) : 0;
            for (int j = 0; j < n_keys; j++) sum += e->cb_weights[j] = expf(e->cb_weights[j] - mx);
            for (int j = 0; j < n_keys; j++) e->cb_weights[j] = (float)(e->cb_weights[j] / sum);
            e->attn_cb(e->attn_user, t, layer, h, e->cb_weights, n_keys);
        }
    }
}

// ---- evaluation -----------------------------------------------------------------------------

/* Checks the batch and reserves cache room for it; on success e->seqs[0..*n_seqs) are the
 * distinct sequences, each with `pending` set to its number of entries. */
static attnd_status prepare(engine *e, const batch_entry *entries, int n, int *n_seqs, attnd_err *err) {
    const model_info *mi = &e->m->info;
    *n_seqs = 0;
    for (int t = 0; t < n; t++) {
        if (!entries[t].seq) return attnd_fail(err, ATTND_ERR_INVALID, "batch entry %d has no sequence", t);
        entries[t].seq->pending = 0;
    }
    const kv_pool *pool = entries[0].seq->pool;
    attnd_status st = ATTND_OK;
    for (int t = 0; t < n && !st; t++) {
        const batch_entry *b = &entries[t];
        kv_seq *s = b->seq;
        if (s->pool->m != e->m)
            st = attnd_fail(err, ATTND_ERR_INVALID, "batch entry %d: sequence belongs to another model", t);
        else if (s->pool != pool)
            st = attnd_fail(err, ATTND_ERR_INVALID, "batch entry %d: all sequences of a batch must share one pool",
                            t);
        else if (b->token < 0 || b->token >= mi->n_vocab)
            st = attnd_fail(err, ATTND_ERR_INVALID, "batch entry %d: token id %d is outside 0..%d", t, b->token,
                            mi->n_vocab - 1);
        else if (b->pos != s->len + s->pending)
            st = attnd_fail(err, ATTND_ERR_INVALID, "batch entry %d: position %d, but the sequence is at %d", t,
                            b->pos, s->len + s->pending);
        else if (b->pos >= mi->n_ctx)
            st = attnd_fail(err, ATTND_ERR_INVALID, "batch entry %d: position %d exceeds the context of %d tokens",
                            t, b->pos, mi->n_ctx);
        else if (s->pending++ == 0)
            e->seqs[(*n_seqs)++] = s;
    }
    if (!st) st = kv_reserve(e->seqs, *n_seqs, err);
    if (st)
        for (int t = 0; t < n; t++) entries[t].seq->pending = 0;
    return st;
}

// ---- the forward pass, one named step at a time (as in llama2.c's run.c) --------------------

/* One engine_eval call: the batch and the dimensions, derived once. */
typedef struct pass {
    engine *e;
    const batch_entry *entries; /* (n) */
    int n;                      /* batch entries: the rows of every activation buffer */
    int E, Q, KV, F;            /* n_embd, q_dim (n_head * head_dim), kv_dim, n_ff */
    int n_qb;                   /* attention query blocks (e->qblocks) */
    int n_runs;                 /* Gated DeltaNet runs: the batch's sequences (plan_runs) */
    long attn_work;             /* multiply-adds of one layer's attention, to decide on threading */
    int layer;                  /* the layer being evaluated */
    bool ablating;              /* a sequence of the batch has an ablation (engine_seq_ablate) */
    bool back_up;               /* the step may be given up: DeltaNet states backed up (kv_state.c) */
} pass;

/* embed: x[t] = the embedding row of entry t's token (times the family's scale); and each
 * entry's rotary cos/sin in every table the model has. */
static void step_embed(const pass *p) {
    const model *m = p->e->m;
    size_t emb_row = quant_row_bytes(m->tok_embd.type, p->E);
    for (int t = 0; t < p->n; t++) {
        const batch_entry *b = &p->entries[t];
        float *x = p->e->x + (size_t)t * p->E;
        quant_dequantize_row(x, (const uint8_t *)m->tok_embd.data + emb_row * b->token, m->tok_embd.type, p->E);
        if (m->embd_scale != 1.0f)
            for (int i = 0; i < p->E; i++) x[i] *= m->embd_scale;
        for (int r = 0; r < ROPE_TABLES; r++) {
            const rope_table *rt = &m->rope[r];
            if (!rt->inv_freq) continue;
            float *cs = p->e->rope + ((size_t)r * p->e->max_batch + t) * m->max_rope_dims; /* (dims / 2, 2) */
            for (int i = 0; i < m->rope_dims[r] / 2; i++) {
                double theta = b->pos * rt->inv_freq[i];
                cs[2 * i] = (float)cos(theta);
                cs[2 * i + 1] = (float)sin(theta);
                if (rt->mscale != 1.0f) cs[2 * i] *= rt->mscale, cs[2 * i + 1] *= rt->mscale;
            }
        }
    }
}

/* ple_inputs (model n_ple, Gemma 4's E models): each entry's inputs of every layer from the
 * scaled embedding x, ple[t][l] = (rmsnorm((x W_model_proj)[l] / sqrt(E)) proj_norm
 * + per_layer_token_embd[token][l] sqrt(n_ple)) / sqrt(2). */
static void step_ple_inputs(const pass *p) {
    engine *e = p->e;
    const model *m = e->m;
    int P = m->n_ple, NL = m->info.n_layer, W = P * NL;
    matmul(e, e->ple, &m->ple_model_proj, e->x, p->n);
    float proj_scale = 1.0f / sqrtf((float)p->E), tok_scale = sqrtf((float)P), in_scale = 1.0f / sqrtf(2.0f);
    for (size_t i = 0; i < (size_t)p->n * W; i++) e->ple[i] *= proj_scale;
    rmsnorm(e->ple, e->ple, m->ple_proj_norm, p->n * NL, P, m->info.rms_eps, e->n_threads);
    size_t row = quant_row_bytes(m->ple_embd.type, W);
    for (int t = 0; t < p->n; t++) {
        quant_dequantize_row(e->ple_tok, (const uint8_t *)m->ple_embd.data + row * p->entries[t].token,
                             m->ple_embd.type, W);
        float *r = e->ple + (size_t)t * W;
        for (int i = 0; i < W; i++) r[i] = (r[i] + e->ple_tok[i] * tok_scale) * in_scale;
    }
}

/* gelu in its tanh form, 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). */
static inline float gelu_tanh(float g) {
    return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
}

/* Copies columns [c0, c0 + w) of each of n rows of src (n, src_w) into dst (n, w). */
static void split_cols(float *dst, const float *src, int n, int src_w, int c0, int w) {
    for (int t = 0; t < n; t++) memcpy(dst + (size_t)t * w, src + (size_t)t * src_w + c0, sizeof(float) * (size_t)w);
}

/* qkv: q, k, v = xn Wq, xn Wk, xn Wv (one fused matrix, or three) + biases; then each head of q
 * and k RMS-normalised where the family says (QK-norm). */
static void step_qkv(const pass *p, const layer_weights *L) {
    engine *e = p->e;
    if (L->wqkv.data) {
        int W = p->Q + 2 * p->KV;
        matmul(e, e->fused, &L->wqkv, e->xn, p->n);
        split_cols(e->q, e->fused, p->n, W, 0, p->Q);
        split_cols(e->k, e->fused, p->n, W, p->Q, p->KV);
        split_cols(e->v, e->fused, p->n, W, p->Q + p->KV, p->KV);
    } else if (!L->wk.data) { /* a layer reading an earlier layer's cache: queries only */
        matmul(e, e->q, &L->wq, e->xn, p->n);
    } else if (!L->wv.data) { /* arch v_optional: V is K's projection, taken before the k-norm */
        matmul_many(e, 2, (float *const[]){e->q, e->k}, (const weight *const[]){&L->wq, &L->wk}, e->xn, p->n);
        memcpy(e->v, e->k, sizeof(float) * (size_t)p->n * (size_t)p->KV);
    } else {
        matmul_many(e, 3, (float *const[]){e->q, e->k, e->v}, (const weight *const[]){&L->wq, &L->wk, &L->wv}, e->xn,
                    p->n);
    }
    add_bias(e->q, L->bq, p->n, p->Q);
    add_bias(e->k, L->bk, p->n, p->KV);
    add_bias(e->v, L->bv, p->n, p->KV);
    const model_info *mi = &e->m->info;
    if (L->q_norm) rmsnorm(e->q, e->q, L->q_norm, p->n * mi->n_head, L->head_dim, mi->rms_eps, e->n_threads);
    if (L->k_norm) rmsnorm(e->k, e->k, L->k_norm, p->n * L->n_head_kv, L->head_dim, mi->rms_eps, e->n_threads);
    if (e->m->v_norm && L->wk.data) /* arch v_norm: each V head, no weight */
        rmsnorm(e->v, e->v, NULL, p->n * L->n_head_kv, L->head_dim, mi->rms_eps, e->n_threads);
}

/* qkv_gated (arch q_gate): as qkv, but W_q gives each head's query followed by its gate; the
 * gates go to qgate, and only the queries are normed. */
static void step_qkv_gated(const pass *p, const layer_weights *L) {
    engine *e = p->e;
    const model_info *mi = &e->m->info;
    int hd = mi->head_dim;
    matmul_many(e, 3, (float *const[]){e->qfull, e->k, e->v}, (const weight *const[]){&L->wq, &L->wk, &L->wv}, e->xn,
                p->n);
    for (int t = 0; t < p->n; t++)
        for (int h = 0; h < mi->n_head; h++) {
            const float *src = e->qfull + (size_t)t * 2 * p->Q + (size_t)h * 2 * hd; /* (2, hd) */
            memcpy(e->q + (size_t)t * p->Q + (size_t)h * hd, src, sizeof(float) * (size_t)hd);
            memcpy(e->qgate + (size_t)t * p->Q + (size_t)h * hd, src + hd, sizeof(float) * (size_t)hd);
        }
    if (L->q_norm) rmsnorm(e->q, e->q, L->q_norm, p->n * mi->n_head, hd, mi->rms_eps, e->n_threads);
    if (L->k_norm) rmsnorm(e->k, e->k, L->k_norm, p->n * mi->n_head_kv, hd, mi->rms_eps, e->n_threads);
}

/* gate_heads (arch q_gate): att *= sigmoid(gate), element by element. */
static void step_gate_heads(const pass *p) {
    float *a = p->e->att;
    const float *g = p->e->qgate;
    for (size_t i = 0; i < (size_t)p->n * p->Q; i++) a[i] *= 1.0f / (1.0f + expf(-g[i]));
}

/* rope: rotate every query and key head by its entry's position (not on a NoPE layer). */
static void step_rope(const pass *p, const layer_weights *L) {
    const model_info *mi = &p->e->m->info;
    if (!L->rope) return;
    rope_apply(p->e, L, p->e->q, p->n, mi->n_head);
    if (L->wk.data || L->wqkv.data) rope_apply(p->e, L, p->e->k, p->n, L->n_head_kv);
}

/* One attention task: work item w = (query block w / n_kv, kv head w % n_kv), on the scratch
 * slot of the thread that runs it. */
static void attend_task(void *ctx, int w, int worker) {
    const pass *p = ctx;
    int n_kv = p->e->m->layers[p->layer].n_head_kv;
    attend(p->e, &p->e->slots[worker], p->entries, p->e->qblocks[w / n_kv], p->layer, w % n_kv);
}

/* attend: store this layer's k, v in the caches, then att = softmax(q K^T / sqrt(hd)) V per head,
 * tiled over KV blocks. Items cost more at later positions: the pool hands them out one by one. */
static void step_attend(pass *p, int layer) {
    engine *e = p->e;
    p->layer = layer;
    const layer_weights *L = &e->m->layers[layer];
    if (L->kv_source == layer) kv_store(e, p->entries, p->n, layer); /* else: the earlier layer's, as cached */
    int n_items = p->n_qb * L->n_head_kv;
    threads_run(p->attn_work >= ATTN_PAR_MIN_MACS ? e->n_threads : 1, n_items, attend_task, p);
    if (e->attn_cb) report_attention(e, p->entries, p->n, layer);
}

/* ablate: each entry whose sequence has an ablation moves the listed heads of this layer's
 * attention output (before W_O) towards their base, o = base + scale (o - base). Entries of one
 * sequence come in increasing positions, so a mean head's running sum is causal. */
static void step_ablate(const pass *p, int layer) {
    int hd = p->e->m->layers[layer].head_dim;
    for (int t = 0; t < p->n; t++) {
        const engine_ablation *a = p->entries[t].seq->ablation;
        for (int i = 0; a && i < a->n; i++) {
            const engine_ablation_head *h = &a->heads[i];
            if (h->layer != layer) continue;
            float *o = p->e->att + (size_t)t * p->Q + (size_t)h->head * hd, sc = h->scale;
            if (h->mode == ENGINE_ABLATE_MEAN) {
                /* mean_sum's rows are model_info's head_dim apart (engine.h), the widest layer's */
                double *sum = a->mean_sum + (size_t)i * p->e->m->info.head_dim, inv = 1.0 / ++a->mean_n[i];
                for (int k = 0; k < hd; k++) {
                    sum[k] += o[k];
                    double base = sum[k] * inv;
                    o[k] = (float)(base + sc * (o[k] - base));
                }
            } else {
                for (int k = 0; k < hd; k++) o[k] = sc == 0 ? 0.0f : o[k] * sc;
            }
        }
    }
}

/* residual: x += tmp (the sub-layer's output). */
static void step_residual(const pass *p) {
    float *x = p->e->x;
    const float *d = p->e->tmp;
    for (size_t i = 0; i < (size_t)p->n * p->E; i++) x[i] += d[i];
}

/* swiglu of entry t: gate = silu(gate) * up, silu(g) = g / (1 + e^-g). */
static void swiglu_row(void *ctx, int t, int worker) {
    const pass *p = ctx;
    engine *e = p->e;
    int F = p->F;
    float *g = e->gate + (size_t)t * F, *u = e->up + (size_t)t * F, *neg = e->neg + (size_t)worker * F;
    for (int i = 0; i < F; i++) neg[i] = -g[i];
    quant_exp(neg, neg, F); /* e^-g; overflow gives inf and silu -> -0, as it should */
    for (int i = 0; i < F; i++) g[i] = g[i] / (1.0f + neg[i]) * u[i];
}

/* geglu of entry t: gate = gelu(gate) * up, gelu in its tanh form
 * 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). */
static void geglu_row(void *ctx, int t, int worker) {
    (void)worker;
    const pass *p = ctx;
    int F = p->F;
    float *g = p->e->gate + (size_t)t * F, *u = p->e->up + (size_t)t * F;
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int i = 0; i < F; i++) {
        float x = g[i];
        g[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * u[i];
    }
}

/* ffn: gate, up = xn W_gate, xn W_up (one fused matrix, gate rows first, or two); gate = act(gate) * up. */
static void step_gated_ffn(pass *p, const layer_weights *L) {
    engine *e = p->e;
    if (!L->w_gate.data) {
        matmul(e, e->fused, &L->w_up, e->xn, p->n);
        split_cols(e->gate, e->fused, p->n, 2 * p->F, 0, p->F);
        split_cols(e->up, e->fused, p->n, 2 * p->F, p->F, p->F);
    } else {
        matmul_many(e, 2, (float *const[]){e->gate, e->up}, (const weight *const[]){&L->w_gate, &L->w_up}, e->xn,
                    p->n);
    }
    bool gelu = e->m->arch->act == ACT_GELU_TANH;
    threads_run((long)p->n * p->F >= ROWWISE_PAR_MIN_ELEMS ? e->n_threads : 1, p->n, gelu ? geglu_row : swiglu_row, p);
}

/* softmax of x[0..n) in place: the sum in double, then times its reciprocal, as llama.cpp's */
static void softmax_inplace(float *x, int n) {
    float mx = -INFINITY;
    double sum = 0;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) sum += x[i] = expf(x[i] - mx);
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* route: each entry's K experts (ties to the lower id) and their weights. Qwen3-MoE: the K most
 * probable of a softmax over every expert, their probabilities renormalised to sum 1; gpt-oss
 * (moe_softmax_topk): the K largest logits (router bias added), a softmax over those K. */
static void moe_route(pass *p, const layer_weights *L, const float *in) {
    engine *e = p->e;
    const model *m = e->m;
    int NE = m->n_expert, K = m->n_expert_used;
    bool topk_first = m->arch->moe_softmax_topk;
    matmul(e, e->moe_logits, &L->router, in, p->n);
    add_bias(e->moe_logits, L->router_b, p->n, NE);
    if (m->arch->ds_router) {
        moe_ds_router r = {.n_expert = NE, .k = K, .gating = m->moe_gating, .bias = L->exp_probs_b,
                           .n_group = m->n_group, .n_group_used = m->n_group_used, .norm = m->moe_w_norm,
                           .scale = m->moe_w_scale};
        for (int t = 0; t < p->n; t++)
            moe_ds_route(&r, e->moe_logits + (size_t)t * NE, e->moe_sel + (size_t)t * K, e->moe_w + (size_t)t * K);
        return;
    }
    for (int t = 0; t < p->n; t++) {
        float *pr = e->moe_logits + (size_t)t * NE;
        if (!topk_first) softmax_inplace(pr, NE);
        int *sel = e->moe_sel + (size_t)t * K;
        float *w = e->moe_w + (size_t)t * K, wsum = 0;
        for (int k = 0; k < K; k++) { /* K is small: selection by repeated scans */
            int best = -1;
            for (int x = 0; x < NE; x++) {
                bool taken = false;
                for (int j = 0; j < k && !taken; j++) taken = sel[j] == x;
                if (!taken && (best < 0 || pr[x] > pr[best])) best = x;
            }
            sel[k] = best;
            wsum += w[k] = pr[best];
        }
        if (topk_first)
            softmax_inplace(w, K);
        else
            for (int k = 0; k < K; k++) w[k] /= wsum;
    }
}

/* Inspection path (only with a matmul callback): each expert's input rows, the sorted slots' xn
 * (moe_o) for gate and up, or their activations (moe_g) for down. */
static void report_expert_inputs(engine *e, const layer_weights *L, const moe_plan *pl, int cols, bool down) {
    for (int g = 0; g < pl->n_groups; g++) {
        const moe_group *gr = &pl->groups[g];
        const float *x = (down ? e->moe_g : e->moe_o) + (size_t)gr->start * cols;
        if (down) {
            e->matmul_cb(e->attn_user, L->down_exps.name, gr->expert, x, gr->cnt, cols);
            continue;
        }
        e->matmul_cb(e->attn_user, L->gate_exps.name, gr->expert, x, gr->cnt, cols);
        e->matmul_cb(e->attn_user, L->up_exps.name, gr->expert, x, gr->cnt, cols);
    }
}

/* moe: tmp = sum over each entry's K experts of weight * W_down,x act(W_gate,x xn) * (W_up,x xn)
 * (times the expert's down_exps_scale where the file has one), routed on route_in (xn, or the
 * family's own router input), the experts' outputs added in the order of their probability. Entries are grouped by expert
 * (moe.h), so each expert's rows are read once per step and unused experts not at all; all the
 * experts' gate and up rows are one pass of the pool, all their down rows another. */
static void step_moe(pass *p, const layer_weights *L, int l, const float *route_in) {
    engine *e = p->e;
    const model *m = e->m;
    int K = m->n_expert_used, E = p->E, n_slots = p->n * K;
    double t0 = prof_now(e);
    moe_route(p, L, route_in);
    prof_add(e, ENGINE_PART_ROUTER, &t0);
    for (int t = 0; e->expert_cb && t < p->n; t++)
        e->expert_cb(e->attn_user, t, l, p->entries[t].pos, e->moe_sel + (size_t)t * K, e->moe_w + (size_t)t * K, K);
    moe_plan pl = {.groups = e->moe_groups, .slot = e->moe_slots};
    moe_plan_build(&pl, e->moe_sel, n_slots, m->n_expert);
    for (int i = 0; i < n_slots; i++) /* each sorted slot's input, in moe_o until moe_down writes it */
        memcpy(e->moe_o + (size_t)i * E, e->xn + (size_t)(pl.slot[i] / K) * E, sizeof(float) * (size_t)E);
    moe_job j = {.L = L, .act = m->arch->act, .E = E, .FE = m->n_ff_exp, .pl = &pl, .x = e->moe_o, .g = e->moe_g,
                 .o = e->moe_o, .scratch = e->moe_scratch, .scratch_bytes = e->moe_scratch_bytes,
                 .max_tok = e->max_batch, .n_threads = e->n_threads};
    if (e->matmul_cb) report_expert_inputs(e, L, &pl, E, false);
    moe_gate_up(&j);
    if (e->matmul_cb) report_expert_inputs(e, L, &pl, m->n_ff_exp, true);
    moe_down(&j);
    for (int t = 0; t < p->n; t++) {
        float *out = e->tmp + (size_t)t * E;
        for (int k = 0; k < K; k++) {
            const float *o = e->moe_o + ((size_t)t * K + k) * E;
            float w = e->moe_w[(size_t)t * K + k];
            if (L->down_exps_scale) w *= L->down_exps_scale[e->moe_sel[(size_t)t * K + k]];
            for (int i = 0; i < E; i++) out[i] = k ? out[i] + o[i] * w : o[i] * w;
        }
    }
    prof_add(e, ENGINE_PART_EXPERTS, &t0);
}

/* shared_expert (arch shared_expert): tmp += sigmoid(w_gate_inp_shexp . xn) * W_down act(W_gate xn)
 * * (W_up xn), the shared expert's SwiGLU FFN beside the routed ones. */
static void step_shared_expert(pass *p, const layer_weights *L) {
    engine *e = p->e;
    int FS = e->m->n_ff_shexp, E = p->E;
    matmul_many(e, 2, (float *const[]){e->gate, e->up}, (const weight *const[]){&L->gate_shexp, &L->up_shexp}, e->xn,
                p->n);
    pass ps = *p;
    ps.F = FS;
    threads_run((long)p->n * FS >= ROWWISE_PAR_MIN_ELEMS ? e->n_threads : 1, p->n, swiglu_row, &ps);
    matmul(e, e->moe_o, &L->down_shexp, e->gate, p->n); /* moe_o is free again after step_moe */
    for (int t = 0; t < p->n; t++) {
        const float *xn = e->xn + (size_t)t * E, *o = e->moe_o + (size_t)t * E;
        double d = 0;
        for (int i = 0; L->shexp_gate && i < E; i++) d += (double)L->shexp_gate[i] * xn[i];
        float w = L->shexp_gate ? 1.0f / (1.0f + expf(-(float)d)) : 1.0f; /* DeepSeek's: ungated */
        float *out = e->tmp + (size_t)t * E;
        for (int i = 0; i < E; i++) out[i] += o[i] * w;
    }
}

/* Groups the batch's entries by sequence (e->seqs order), positions increasing: the runs the
 * Gated DeltaNet recurrence walks. Returns the number of runs. */
static int plan_runs(engine *e, const batch_entry *entries, int n, int n_seqs) {
    int k = 0;
    for (int r = 0; r < n_seqs; r++) {
        e->dn_run[r] = k;
        for (int t = 0; t < n; t++)
            if (entries[t].seq == e->seqs[r]) e->dn_order[k++] = t;
    }
    e->dn_run[n_seqs] = k;
    for (int r = 0; r < n_seqs; r++) { /* a state checkpoint inside the run, if one is due (kv_state.c) */
        int at = kv_ckpt_begin(e->seqs[r]);
        e->dn_snap_at[r] = at >= 0 ? e->dn_run[r] + at : -1;
        kv_steps_begin(e->seqs[r]); /* a speculative verify's states (kv_seq_keep_steps) */
    }
    return n_seqs;
}

/* Unpacks a fused beta-alpha projection (dn_ba: per key head, its r value heads' beta, then their
 * alpha) into dn_beta and dn_alpha in value-head order. */
static void split_beta_alpha(const pass *p) {
    engine *e = p->e;
    const dn_dims *d = &e->m->dn;
    int r = d->hv / d->hk;
    for (int t = 0; t < p->n; t++) {
        const float *ba = e->dn_ba + (size_t)t * 2 * d->hv;
        for (int h = 0; h < d->hv; h++) {
            int g = h / r, j = h % r;
            e->dn_beta[(size_t)t * d->hv + h] = ba[g * 2 * r + j];
            e->dn_alpha[(size_t)t * d->hv + h] = ba[g * 2 * r + r + j];
        }
    }
}

/* The DeltaNet inspection hook of layer l after a raw recurrence (j->raw): each entry's q, k, v,
 * gates and output, then the gated norm the recurrence left out. The gates are computed over
 * dn_beta and dn_alpha, which nothing reads after the recurrence. */
static void report_deltanet(pass *p, const dn_job *j, int l) {
    engine *e = p->e;
    const dn_dims *d = j->d;
    dn_gates(j, e->dn_beta, e->dn_alpha);
    for (int t = 0; t < p->n; t++) {
        const float *x = e->dn_qkv + (size_t)t * d->conv_dim;
        engine_dn_io io = {.hk = d->hk, .hv = d->hv, .dk = d->dk, .dv = d->dv, .grouped = d->grouped, .q = x,
                           .k = x + (size_t)d->hk * d->dk, .v = x + (size_t)2 * d->hk * d->dk,
                           .beta = e->dn_beta + (size_t)t * d->hv, .g = e->dn_alpha + (size_t)t * d->hv,
                           .o = j->out + (size_t)t * d->hv * d->dv};
        e->dn_cb(e->attn_user, t, l, p->entries[t].pos, &io);
    }
    dn_gate_out(j);
}

/* deltanet: tmp = W_out gated_deltanet(xn) (deltanet.h), each sequence's state of this layer
 * carried from its previous entries. */
static void step_deltanet(pass *p, const layer_weights *L, int l) {
    engine *e = p->e;
    const model *m = e->m;
    double t0 = prof_now(e);
    if (L->dn_ba.data) {
        matmul_many(e, 3, (float *const[]){e->dn_qkv, e->dn_z, e->dn_ba},
                    (const weight *const[]){&L->wqkv, &L->dn_z, &L->dn_ba}, e->xn, p->n);
        split_beta_alpha(p);
    } else {
        matmul_many(e, 4, (float *const[]){e->dn_qkv, e->dn_z, e->dn_beta, e->dn_alpha},
                    (const weight *const[]){&L->wqkv, &L->dn_z, &L->dn_beta, &L->dn_alpha}, e->xn, p->n);
    }
    for (int r = 0; r < p->n_runs; r++) {
        kv_seq *s = e->seqs[r];
        if (p->back_up) kv_state_back_up(s, L->dn_slot);
        e->dn_state[r] = kv_dn_state(s, L->dn_slot);
        e->dn_snaps[r * DN_SNAPS] = (dn_snap){kv_dn_snap(s, L->dn_slot), e->dn_snap_at[r], 1};
        e->dn_steps[r] = (dn_steps){kv_dn_steps(s, L->dn_slot), kv_dn_log(s, L->dn_slot), e->dn_run[r], s->steps_n};
    }
    const kv_pool *pool = e->seqs[0]->pool;
    dn_job j = {.snap = e->dn_snaps, .snap_stride = pool->state_bytes / sizeof(float), .steps = e->dn_steps,
                .log_stride = pool->steps_log_floats, .d = &m->dn, .n = p->n, .order = e->dn_order, .run_start = e->dn_run, .n_runs = p->n_runs,
                .state = e->dn_state, .qkv = e->dn_qkv, .z = e->dn_z, .beta = e->dn_beta, .alpha = e->dn_alpha,
                .conv_w = L->dn_conv, .dt_bias = L->dn_dt_bias, .ssm_a = L->dn_a, .norm_w = L->dn_norm,
                .out = e->dn_o, .raw = e->dn_cb != NULL, .scratch = e->dn_scratch, .n_threads = e->n_threads};
    prof_add(e, ENGINE_PART_DN_IN, &t0);
    dn_forward(&j);
    if (e->dn_cb) report_deltanet(p, &j, l);
    prof_add(e, ENGINE_PART_DN_MIX, &t0);
    matmul(e, e->tmp, &L->dn_out, e->dn_o, p->n);
    prof_add(e, ENGINE_PART_DN_OUT, &t0);
}

/* side_experts (arch moe_beside_dense): with the dense FFN's output in tmp, tmp = rmsnorm(tmp)
 * post_1 + rmsnorm(moe(rmsnorm(x) pre_2)) post_2, the experts routed on rmsnorm(x) / sqrt(E)
 * times router_scale. */
static void step_side_experts(pass *p, const layer_weights *L, int l) {
    engine *e = p->e;
    int n = p->n, E = p->E, nth = e->n_threads;
    float eps = e->m->info.rms_eps, s = 1.0f / sqrtf((float)E);
    rmsnorm(e->side, e->tmp, L->ffn_post_norm_1, n, E, eps, nth);
    rmsnorm(e->tmp, e->x, NULL, n, E, eps, nth);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < E; i++) e->tmp[(size_t)t * E + i] *= s * L->router_scale[i];
    rmsnorm(e->xn, e->x, L->ffn_pre_norm_2, n, E, eps, nth);
    step_moe(p, L, l, e->tmp); /* routes on tmp before it writes tmp */
    rmsnorm(e->tmp, e->tmp, L->ffn_post_norm_2, n, E, eps, nth);
    for (size_t i = 0; i < (size_t)n * E; i++) e->tmp[i] += e->side[i];
}

/* ple (model n_ple): x += rmsnorm((gelu(x W_inp_gate) * ple[t][l]) W_proj) post_norm, the layer's
 * per-layer input gated by the residual stream. */
static void step_ple(const pass *p, const layer_weights *L, int l) {
    engine *e = p->e;
    int P = e->m->n_ple, W = P * e->m->info.n_layer;
    matmul(e, e->ple_g, &L->ple_gate, e->x, p->n);
    for (int t = 0; t < p->n; t++)
        for (int i = 0; i < P; i++) {
            float *g = &e->ple_g[(size_t)t * P + i];
            *g = gelu_tanh(*g) * e->ple[(size_t)t * W + (size_t)l * P + i];
        }
    matmul(e, e->tmp, &L->ple_proj, e->ple_g, p->n);
    rmsnorm(e->tmp, e->tmp, L->ple_post_norm, p->n, p->E, e->m->info.rms_eps, e->n_threads);
    step_residual(p);
}

/* out_scale: the whole residual stream times the layer's output scale (arch out_scale). */
static void step_out_scale(const pass *p, const layer_weights *L) {
    for (size_t i = 0; i < (size_t)p->n * p->E; i++) p->e->x[i] *= L->out_scale;
}

/* Inspection path (only when a callback is set): the latent attention's exact weights of every
 * (entry, head), as report_attention's. */
static void report_mla(engine *e, const mla_job *j, int layer) {
    for (int t = 0; t < j->n; t++)
        for (int h = 0; h < j->d->n_head; h++) {
            if (e->attn_want && !e->attn_want(e->attn_user, t, layer, h)) continue;
            mla_weights(j, t, h, e->cb_weights);
            e->attn_cb(e->attn_user, t, layer, h, e->cb_weights, j->pos[t] + 1);
        }
}

/* mla (arch mla, mla.h): q = W_q xn (or W_q_b rmsnorm(W_q_a xn)), [c | k_pe] = W_kv_a xn; the
 * latent attention writes the heads' outputs into att; tmp = W_o att. */
static void step_mla(pass *p, const layer_weights *L, int l) {
    engine *e = p->e;
    const model *m = e->m;
    const mla_dims *d = &m->mla;
    if (L->wq_a.data) {
        matmul_many(e, 2, (float *const[]){e->mla_qa, e->mla_kva}, (const weight *const[]){&L->wq_a, &L->wkv_a}, e->xn,
                    p->n);
        rmsnorm(e->mla_qa, e->mla_qa, L->q_a_norm, p->n, d->q_lora, m->info.rms_eps, e->n_threads);
        matmul(e, e->mla_q, &L->wq_b, e->mla_qa, p->n);
    } else {
        matmul_many(e, 2, (float *const[]){e->mla_q, e->mla_kva}, (const weight *const[]){&L->wq, &L->wkv_a}, e->xn,
                    p->n);
    }
    for (int t = 0; t < p->n; t++) e->mla_seq[t] = p->entries[t].seq, e->mla_pos[t] = p->entries[t].pos;
    mla_job j = {.d = d, .s = e->mla, .q = e->mla_q, .kva = e->mla_kva, .kv_norm = L->kv_a_norm,
                 .eps = m->info.rms_eps, .rope_cs = e->rope + (size_t)ROPE_GLOBAL * e->max_batch * m->max_rope_dims,
                 .rope_cs_stride = m->max_rope_dims, .k_b = L->k_b, .v_b = L->v_b, .seq = e->mla_seq,
                 .pos = e->mla_pos, .n = p->n, .layer = l, .qb = e->qblocks, .n_qb = p->n_qb,
                 .scale = m->attn_scale, .n_threads = e->n_threads, .out = e->att};
    mla_attend(&j);
    if (e->attn_cb) report_mla(e, &j, l);
    if (p->ablating) step_ablate(p, l);
    matmul(e, e->tmp, &L->wo, e->att, p->n);
}

/* attention: tmp = Wo attend(rope(qkv(xn))) (+ bias), the gated form where the family has it. */
static void step_attention(pass *p, const layer_weights *L, int l) {
    engine *e = p->e;
    bool gated = e->m->arch->q_gate;
    if (gated) step_qkv_gated(p, L);
    else step_qkv(p, L);
    step_rope(p, L);
    step_attend(p, l);
    if (gated) step_gate_heads(p);
    if (p->ablating) step_ablate(p, l);
    matmul(e, e->tmp, &L->wo, e->att, p->n);
    add_bias(e->tmp, L->bo, p->n, p->E);
}

/* One decoder layer: x += post(mixer(rmsnorm(x))); x += post(ffn(rmsnorm(x))), where the mixer is
 * attention or a Gated DeltaNet and post is the family's output norm of a sub-layer, or nothing. */
static void step_layer(pass *p, int l) {
    engine *e = p->e;
    const model_info *mi = &e->m->info;
    const layer_weights *L = &e->m->layers[l];
    int n = p->n, nth = e->n_threads;
    p->Q = L->q_dim, p->KV = L->kv_dim, p->F = L->n_ff;

    // token-mixing sub-layer: x += mixer(rmsnorm(x))
    rmsnorm(e->xn, e->x, L->attn_norm, n, p->E, mi->rms_eps, nth);
    double t0 = prof_now(e);
    if (L->kind == LAYER_DELTANET) step_deltanet(p, L, l);
    else if (L->wkv_a.data) step_mla(p, L, l);
    else step_attention(p, L, l);
    if (L->kind != LAYER_DELTANET) prof_add(e, ENGINE_PART_ATTN, &t0);
    if (L->post_attn_norm) rmsnorm(e->tmp, e->tmp, L->post_attn_norm, n, p->E, mi->rms_eps, nth);
    step_residual(p);

    // feed-forward sub-layer: x += W_down act(W_gate xn) * (W_up xn), xn = rmsnorm(x)
    rmsnorm(e->xn, e->x, L->ffn_norm, n, p->E, mi->rms_eps, nth);
    bool beside = e->m->arch->moe_beside_dense;
    if (L->router.data && !beside) {
        step_moe(p, L, l, e->xn);
        t0 = prof_now(e);
        if (L->gate_shexp.data) step_shared_expert(p, L);
        prof_add(e, ENGINE_PART_SHEXP, &t0);
    } else {
        t0 = prof_now(e);
        step_gated_ffn(p, L);
        matmul(e, e->tmp, &L->w_down, e->gate, n);
        prof_add(e, ENGINE_PART_FFN, &t0);
        if (L->router.data) step_side_experts(p, L, l);
    }
    if (L->post_ffn_norm) rmsnorm(e->tmp, e->tmp, L->post_ffn_norm, n, p->E, mi->rms_eps, nth);
    step_residual(p);
    if (e->m->n_ple) step_ple(p, L, l);
    if (L->out_scale != 1.0f) step_out_scale(p, L);
}

/* Inspection path (only when a residual callback is set): each entry's residual stream after
 * layer l, handed to the callback serially. */
static void report_residual(const pass *p, int l) {
    for (int t = 0; t < p->n; t++)
        p->e->resid_cb(p->e->attn_user, t, l, p->entries[t].pos, p->e->x + (size_t)t * p->E, p->E);
}

/* logits: only the rows that want them go through the final norm and the output head. */
static void step_logits(const pass *p, int n_want, float *logits) {
    engine *e = p->e;
    const model *m = e->m;
    for (int w = 0; w < n_want; w++)
        memcpy(e->tmp + (size_t)w * p->E, e->x + (size_t)e->want[w] * p->E, sizeof(float) * (size_t)p->E);
    rmsnorm(e->xn, e->tmp, m->output_norm, n_want, p->E, m->info.rms_eps, e->n_threads);
    if (e->hidden) { /* engine_eval_hidden (embed.c): the rows an embedding pools */
        memcpy(logits, e->xn, sizeof(float) * (size_t)n_want * p->E);
        return;
    }
    matmul(e, logits, &m->output, e->xn, n_want);
    float cap = m->final_softcap;
    if (cap > 0)
        for (size_t i = 0; i < (size_t)n_want * m->info.n_vocab; i++) logits[i] = tanhf(logits[i] * (1.0f / cap)) * cap;
}

// ---- multi-token prediction (the model's own draft) ------------------------------------------
/*
 * The MTP block (model_info.mtp) predicts the token after next: at position p it reads the
 * embedding of token x_p and the main model's final-normed hidden state h_{p-1} (which predicted
 * x_p), each RMS-normed by its own weight, concatenated [embedding | hidden], projected back to
 * n_embd by eh_proj, then one gated-attention block over its own cache, then head_norm and the
 * head (llama.cpp's qwen35 graph_mtp; the hidden state is the one after output_norm, t_h_nextn).
 * Its cache must hold every position the main pass evaluated, so every engine_eval of a pool that
 * caches the block runs it over the batch too (step_mtp_follow: the block without its head); a
 * draft then costs one block and the head per token (engine_mtp_step).
 */

/* The hidden state h_{pos} s keeps for its MTP block, or NULL (never evaluated, or too long ago:
 * the block then reads zeros, a weaker draft, never a wrong output). */
static const float *mtp_hidden(const kv_seq *s, int pos) {
    if (pos < 0) return NULL;
    int r = pos % KV_MTP_ROWS;
    return s->mtp_pos[r] == pos ? s->mtp_h + (size_t)r * s->pool->m->info.n_embd : NULL;
}

/* Row t of mtp_cat: [rmsnorm(mtp_embd[token]) enorm | rmsnorm(h) hnorm] (h NULL: zeros). */
static void mtp_input(engine *e, int t, int32_t token, const float *h) {
    const model *m = e->m;
    int E = m->info.n_embd;
    float *cat = e->mtp_cat + (size_t)t * 2 * E, *emb = e->tmp + (size_t)t * E;
    quant_dequantize_row(emb, (const uint8_t *)m->mtp_embd.data + quant_row_bytes(m->mtp_embd.type, E) * (size_t)token,
                         m->mtp_embd.type, E);
    rmsnorm(cat, emb, m->mtp_enorm, 1, E, m->info.rms_eps, 1);
    if (h) rmsnorm(cat + E, h, m->mtp_hnorm, 1, E, m->info.rms_eps, 1);
    else memset(cat + E, 0, sizeof(float) * (size_t)E);
}

/* The block over p's entries from their mtp_cat rows: x = eh_proj cat, then the layer (its K, V
 * written at each entry's position). No inspection hook sees it: it is not part of the model's
 * forward pass. */
static void mtp_block(pass *p) {
    engine *e = p->e;
    engine saved = *e;
    e->attn_cb = NULL, e->resid_cb = NULL, e->expert_cb = NULL, e->matmul_cb = NULL;
    matmul(e, e->x, &e->m->mtp_eh_proj, e->mtp_cat, p->n);
    step_layer(p, e->m->info.n_layer);
    e->attn_cb = saved.attn_cb, e->resid_cb = saved.resid_cb, e->expert_cb = saved.expert_cb;
    e->matmul_cb = saved.matmul_cb;
}

/* After the main layers of an engine_eval: each entry's h kept by its sequence, and the MTP
 * block's cache written at each entry's position from (h of the position before, token). */
static void step_mtp_follow(pass *p) {
    engine *e = p->e;
    const model *m = e->m;
    int E = p->E;
    rmsnorm(e->mtp_h, e->x, m->output_norm, p->n, E, m->info.rms_eps, e->n_threads);
    for (int t = 0; t < p->n; t++) p->entries[t].seq->mtp_row = -1;
    for (int t = 0; t < p->n; t++) {
        kv_seq *s = p->entries[t].seq;
        const float *h = s->mtp_row >= 0 ? e->mtp_h + (size_t)s->mtp_row * E : mtp_hidden(s, p->entries[t].pos - 1);
        s->mtp_row = t;
        mtp_input(e, t, p->entries[t].token, h);
    }
    for (int t = 0; t < p->n; t++) { /* after every read: a long batch wraps the ring */
        kv_seq *s = p->entries[t].seq;
        int pos = p->entries[t].pos, r = pos % KV_MTP_ROWS;
        memcpy(s->mtp_h + (size_t)r * E, e->mtp_h + (size_t)t * E, sizeof(float) * (size_t)E);
        s->mtp_pos[r] = pos;
    }
    mtp_block(p);
}

attnd_status engine_mtp_step(engine *e, const engine_mtp_entry *in, int n, float *logits, float *h_out,
                             attnd_err *err) {
    const model *m = e->m;
    const model_info *mi = &m->info;
    if (n < 1 || n > e->max_batch)
        return attnd_fail(err, ATTND_ERR_INVALID, "an MTP step of %d entries; this engine takes 1..%d", n, e->max_batch);
    for (int t = 0; t < n; t++) in[t].seq->mtp_row = -1;
    for (int t = 0; t < n; t++) {
        kv_seq *s = in[t].seq;
        if (s->pool->m != m || !s->pool->mtp)
            return attnd_fail(err, ATTND_ERR_INVALID, "MTP entry %d: the sequence's pool does not cache the model's MTP "
                              "block", t);
        if (s->pool != in[0].seq->pool)
            return attnd_fail(err, ATTND_ERR_INVALID, "MTP entry %d: all sequences must share one pool", t);
        if (s->mtp_row >= 0) return attnd_fail(err, ATTND_ERR_INVALID, "MTP entry %d: a sequence twice in one step", t);
        if (in[t].token < 0 || in[t].token >= mi->n_vocab || in[t].pos < s->len || in[t].pos >= mi->n_ctx)
            return attnd_fail(err, ATTND_ERR_INVALID, "MTP entry %d: token %d at position %d (the sequence holds %d, the "
                              "context %d)", t, in[t].token, in[t].pos, s->len, mi->n_ctx);
        s->mtp_row = t;
        e->seqs[t] = s;
        e->mtp_b[t] = (batch_entry){s, in[t].token, in[t].pos, true};
    }
    for (int t = 0; t < n; t++) in[t].seq->pending = in[t].pos + 1 - in[t].seq->len; /* room, never committed */
    attnd_status st = kv_reserve(e->seqs, n, err);
    for (int t = 0; t < n; t++) in[t].seq->pending = 0;
    if (st) return st;
    pass p = {.e = e, .entries = e->mtp_b, .n = n, .E = mi->n_embd, .Q = m->q_dim, .KV = m->kv_dim, .F = mi->n_ff};
    p.n_qb = split_qblocks(e, e->mtp_b, n);
    for (int t = 0; t < n; t++) p.attn_work += (long)mi->n_head * mi->head_dim * (in[t].pos + 1);
    step_embed(&p); /* the rotary tables of each position (x is replaced below) */
    for (int t = 0; t < n; t++) mtp_input(e, t, in[t].token, in[t].h ? in[t].h : mtp_hidden(in[t].seq, in[t].pos - 1));
    mtp_block(&p);
    rmsnorm(h_out, e->x, m->mtp_head_norm ? m->mtp_head_norm : m->output_norm, n, p.E, mi->rms_eps, e->n_threads);
    matmul(e, logits, &m->mtp_head, h_out, n);
    return ATTND_OK;
}

attnd_status engine_eval(engine *e, const batch_entry *entries, int n, float *logits, attnd_err *err) {
    if (n == 0) return ATTND_OK;
    if (n < 0 || n > e->max_batch)
        return attnd_fail(err, ATTND_ERR_INVALID, "batch of %d entries; this engine takes 1..%d", n, e->max_batch);
    if (!entries) return attnd_fail(err, ATTND_ERR_INVALID, "engine_eval: no entries");
    if (e->m->arch->bidirectional) /* encoders run through engine_embed (attnd/embed.h, encoder.c) */
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "'%s' is an encoder: it embeds and ranks, it does not "
                          "generate", e->m->info.arch);
    int n_want = 0;
    for (int t = 0; t < n; t++)
        if (entries[t].want_logits) e->want[n_want++] = t;
    if (n_want && !logits) return attnd_fail(err, ATTND_ERR_INVALID, "entries want logits but no buffer was given");
    int n_seqs;
    attnd_status st = prepare(e, entries, n, &n_seqs, err);
    if (st) return st;

    const model *m = e->m;
    const model_info *mi = &m->info;
    pass p = {.e = e, .entries = entries, .n = n, .E = mi->n_embd, .Q = m->q_dim, .KV = m->kv_dim, .F = mi->n_ff};
    p.n_qb = split_qblocks(e, entries, n);
    for (int i = 0; i < n_seqs; i++) p.ablating |= e->seqs[i]->ablation != NULL;
    for (int t = 0; t < n; t++) p.attn_work += (long)mi->n_head * mi->head_dim * (entries[t].pos + 1);

    if (m->n_dn_layers) p.n_runs = plan_runs(e, entries, n, n_seqs);
    /* a recurrent state moved on by the layers already run is backed up first, or no yield */
    bool may_yield =
        e->yield_fn && !p.ablating && !e->attn_cb && !e->resid_cb && !e->expert_cb && !e->matmul_cb && !e->dn_cb;
    for (int i = 0; may_yield && m->n_dn_layers && i < n_seqs; i++) may_yield = kv_state_can_back_up(e->seqs[i]);
    p.back_up = may_yield && m->n_dn_layers;
    double t0 = prof_now(e);
    step_embed(&p);
    if (m->n_ple) step_ple_inputs(&p);
    prof_add(e, ENGINE_PART_EMBED, &t0);
    for (int l = 0; l < mi->n_layer; l++) {
        step_layer(&p, l);
        if (e->resid_cb) report_residual(&p, l);
        if (may_yield && l + 1 < mi->n_layer && e->yield_fn(e->yield_user)) {
            for (int i = 0; i < n_seqs; i++) { /* the rows written are rewritten, the states restored */
                e->seqs[i]->pending = 0;
                kv_ckpt_commit(e->seqs[i], false);
                for (int k = 0; p.back_up && k <= l; k++)
                    if (m->layers[k].kind == LAYER_DELTANET) kv_state_restore_layer(e->seqs[i], m->layers[k].dn_slot);
            }
            return attnd_fail(err, ATTND_ERR_BUSY, "the step was given up after layer %d", l);
        }
    }
    t0 = prof_now(e);
    if (n_want) step_logits(&p, n_want, logits);
    prof_add(e, ENGINE_PART_HEAD, &t0);
    if (entries[0].seq->pool->mtp) step_mtp_follow(&p);

    for (int i = 0; i < n_seqs; i++) {
        e->seqs[i]->len += e->seqs[i]->pending;
        e->seqs[i]->pending = 0;
        kv_ckpt_commit(e->seqs[i], true);
        kv_seq_trim_window(e->seqs[i]); /* local layers' blocks no later query sees */
    }
    return ATTND_OK;
}

/* engine_eval with the final-normed hidden states (n_embd floats per entry that wants them) in
 * place of the logits, and no inspection or yield hook called (embed_eval.h). */
attnd_status engine_eval_hidden(engine *e, const batch_entry *entries, int n, float *hidden, attnd_err *err) {
    engine saved = *e;
    e->attn_cb = NULL, e->resid_cb = NULL, e->expert_cb = NULL, e->matmul_cb = NULL, e->yield_fn = NULL;
    e->dn_cb = NULL;
    e->hidden = true;
    attnd_status st = engine_eval(e, entries, n, hidden, err);
    e->hidden = false;
    e->attn_cb = saved.attn_cb, e->resid_cb = saved.resid_cb, e->expert_cb = saved.expert_cb;
    e->matmul_cb = saved.matmul_cb, e->yield_fn = saved.yield_fn, e->dn_cb = saved.dn_cb;
    return st;
}

void engine_attn_hooks(const engine *e, engine_attn_cb *cb, engine_attn_want *want, void **user) {
    *cb = e->attn_cb, *want = e->attn_want, *user = e->attn_user;
}
