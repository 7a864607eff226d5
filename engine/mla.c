/*
 * mla.c — multi-head latent attention (mla.h): the latent cache rows, the absorbed queries, the
 * attention in the latent space, and the heads' outputs.
 *
 * A cache block of a latent layer is one (KV_BLOCK, kv_lora + rope) tile, position after
 * position (kv_layout.h): every head reads the same rows, so the tile is the keys of all heads
 * and, in its first kv_lora columns, their values. A work item is a few consecutive entries of a
 * query block with every head (or a group of heads, when there are fewer items than threads):
 * up to MLA_ROWS query rows that share each tile they read. An F16, Q8_0 or Q4_0 tile is
 * converted to F32 once per item (a quantized row is L / 32 GGUF blocks, as a per-head value row:
 * kv_quant.h), so every type takes the same F32 kernels: scores and weighted sums of all the
 * item's rows against the tile as register-blocked matrix products (mla_kernels.h), around an
 * online softmax. Prefill and decode run the same kernels, whose results do not depend on how
 * the rows are grouped: a prompt's logits are those of the same tokens decoded one at a time.
 */
#include "mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "kv_layout.h"
#include "kv_quant.h"
#include "mla_kernels.h"
#include "quant.h"
#include "threads.h"

/* Most entries of one query block (engine.c splits batches into blocks of at most this many). */
#define MLA_QBLOCK 16
/* Most query rows (tokens x heads) of one work item: its running sums (MLA_ROWS, kv_lora) and
 * one converted tile (KV_BLOCK, latent) stay within a core's L2 cache. */
#define MLA_ROWS 96

/* One worker's attention scratch. */
typedef struct mla_slot {
    float *tile;     /* (KV_BLOCK, latent) an F16 / Q8_0 / Q4_0 tile as F32 */
    float *p;        /* (MLA_ROWS, KV_BLOCK) scores, then weights, of one tile */
    float *acc;      /* (MLA_ROWS, kv_lora) running weighted sums of latents */
    float *run_max;  /* (MLA_ROWS) */
    float *run_sum;  /* (MLA_ROWS) */
    float *corr;     /* (MLA_ROWS) one tile's rescaling of the running sums */
    int *lim;        /* (MLA_ROWS) how many of the tile's rows each query row sees */
    const float **q; /* (MLA_ROWS) the item's absorbed queries */
} mla_slot;

struct mla_scratch {
    float *qlat;      /* (B, n_head, latent) absorbed, rotated queries */
    float *olat;      /* (B, n_head, kv_lora) attention outputs in the latent space */
    float *hin;       /* (B, max(nope, kv_lora)) one head's gathered rows */
    float *hout;      /* (B, max(kv_lora, v_head)) one head's matmul output */
    float *row;       /* (latent) one cache row before it is stored */
    uint16_t *row16;  /* (latent) the same as F16 */
    void *mm;         /* quant_matmul scratch (mm_bytes) */
    mla_slot *slots;  /* (n_workers) */
    char *mem;        /* owns all of the above */
};

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

/* Places the scratch's arrays in mem (NULL: only measures); returns the bytes they need. */
static size_t layout(mla_scratch *s, char *mem, const mla_dims *d, int max_batch, int n_workers, size_t mm_bytes) {
    size_t B = (size_t)max_batch, H = (size_t)d->n_head, L = (size_t)mla_latent(d), C = (size_t)d->kv_lora;
    size_t R = MLA_ROWS;
    block b = {.mem = mem};
    s->qlat = block_take(&b, B * H * L, sizeof(float));
    s->olat = block_take(&b, B * H * C, sizeof(float));
    s->hin = block_take(&b, B * max_z(C, (size_t)d->nope), sizeof(float));
    s->hout = block_take(&b, B * max_z(C, (size_t)d->v_head), sizeof(float));
    s->row = block_take(&b, L, sizeof(float));
    s->row16 = block_take(&b, L, sizeof(uint16_t));
    s->mm = block_take(&b, mm_bytes ? mm_bytes : 1, 1);
    s->slots = block_take(&b, (size_t)n_workers, sizeof(mla_slot));
    for (int w = 0; w < n_workers; w++) {
        mla_slot sl = {0};
        sl.tile = block_take(&b, KV_BLOCK * L, sizeof(float));
        sl.p = block_take(&b, R * KV_BLOCK, sizeof(float));
        sl.acc = block_take(&b, R * C, sizeof(float));
        sl.run_max = block_take(&b, R, sizeof(float));
        sl.run_sum = block_take(&b, R, sizeof(float));
        sl.corr = block_take(&b, R, sizeof(float));
        sl.lim = block_take(&b, R, sizeof(int));
        sl.q = block_take(&b, R, sizeof(const float *));
        if (mem) s->slots[w] = sl;
    }
    return block_size(&b);
}

mla_scratch *mla_scratch_create(const mla_dims *d, int max_batch, int n_workers, size_t mm_bytes) {
    mla_scratch *s = calloc(1, sizeof(*s)), probe;
    if (!s) return NULL;
    if (!(s->mem = calloc(1, layout(&probe, NULL, d, max_batch, n_workers, mm_bytes)))) {
        free(s);
        return NULL;
    }
    layout(s, s->mem, d, max_batch, n_workers, mm_bytes);
    return s;
}

void mla_scratch_destroy(mla_scratch *s) {
    if (!s) return;
    free(s->mem);
    free(s);
}

// ---- the cache rows and the absorbed queries -------------------------------------------------

/* Rotates the rope/2 adjacent pairs (2i, 2i+1) of x by the angles whose cos, sin are cs (rope/2, 2):
 * llama.cpp's "normal" RoPE, which deepseek2 uses. */
static void rope_pairs(float *x, const float *cs, int rope) {
    for (int i = 0; i < rope / 2; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1], x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

/* The layer's cache rows: [rmsnorm(c) * kv_norm | rope(k_pe)] of each entry, at its position. */
static void store_rows(const mla_job *j) {
    const mla_dims *d = j->d;
    int C = d->kv_lora, L = mla_latent(d);
    float *row = j->s->row;
    for (int t = 0; t < j->n; t++) {
        const float *x = j->kva + (size_t)t * L;
        double ss = 0; /* the sum of squares in double, as engine.c's rmsnorm */
        for (int i = 0; i < C; i++) ss += (double)x[i] * x[i];
        float sc = (float)(1.0 / sqrt(ss / C + j->eps));
        for (int i = 0; i < C; i++) row[i] = x[i] * sc * j->kv_norm[i];
        memcpy(row + C, x + C, sizeof(float) * (size_t)d->rope);
        rope_pairs(row + C, j->rope_cs + (size_t)t * j->rope_cs_stride, d->rope);
        const struct kv_seq *s = j->seq[t];
        int pos = j->pos[t];
        void *tile = kv_k_tile(s, j->layer, pos / KV_BLOCK, 0);
        size_t at = (size_t)(pos % KV_BLOCK) * L;
        if (s->pool->type == KV_F32) {
            memcpy((float *)tile + at, row, sizeof(float) * (size_t)L);
        } else if (kv_quant_is_quant(s->pool->type)) { /* the row as L / 32 GGUF blocks */
            kv_quant_store_v(tile, s->pool->type, L, pos % KV_BLOCK, row);
        } else {
            quant_f32_to_f16_row(j->s->row16, row, L);
            memcpy((uint16_t *)tile + at, j->s->row16, sizeof(uint16_t) * (size_t)L);
        }
    }
}

/* Rows (n, cols) of head h gathered from src (n, n_head, src_w) at column c0 into dst (n, cols), or
 * the reverse (scatter: dst (n, n_head, src_w) from src (n, cols)). */
static void gather(float *dst, const float *src, int n, int n_head, int src_w, int h, int c0, int cols) {
    for (int t = 0; t < n; t++)
        memcpy(dst + (size_t)t * cols, src + ((size_t)t * n_head + h) * src_w + c0, sizeof(float) * (size_t)cols);
}
static void scatter(float *dst, const float *src, int n, int n_head, int dst_w, int h, int c0, int cols) {
    for (int t = 0; t < n; t++)
        memcpy(dst + ((size_t)t * n_head + h) * dst_w + c0, src + (size_t)t * cols, sizeof(float) * (size_t)cols);
}

/* out (n, rows) = x (n, cols) W_h^T for head h of w. */
static void head_matmul(const mla_job *j, float *out, const mla_heads *w, int h, const float *x) {
    const uint8_t *data = (const uint8_t *)w->data + (size_t)h * w->stride;
    quant_matmul_packed(out, data, NULL, w->type, w->rows, w->cols, x, j->n, j->s->mm, j->n_threads);
}

/* qlat = [W_UK,h^T q_nope | rope(q_pe)] of every entry and head. */
static void absorb_queries(const mla_job *j) {
    const mla_dims *d = j->d;
    mla_scratch *s = j->s;
    int H = d->n_head, L = mla_latent(d), QK = mla_qk(d);
    for (int h = 0; h < H; h++) {
        gather(s->hin, j->q, j->n, H, QK, h, 0, d->nope);
        head_matmul(j, s->hout, &j->k_b, h, s->hin);
        scatter(s->qlat, s->hout, j->n, H, L, h, 0, d->kv_lora);
    }
    for (int t = 0; t < j->n; t++)
        for (int h = 0; h < H; h++) {
            float *qp = s->qlat + ((size_t)t * H + h) * L + d->kv_lora;
            memcpy(qp, j->q + ((size_t)t * H + h) * QK + d->nope, sizeof(float) * (size_t)d->rope);
            rope_pairs(qp, j->rope_cs + (size_t)t * j->rope_cs_stride, d->rope);
        }
}

// ---- attention in the latent space -----------------------------------------------------------

/* The rows of block b of s for `layer` as F32 (cnt rows of L): in place, or converted into buf. */
static const float *tile_rows(const struct kv_seq *s, int layer, int b, int cnt, int L, float *buf) {
    const void *tile = kv_k_tile(s, layer, b, 0);
    if (s->pool->type == KV_F32) return tile;
    if (kv_quant_is_quant(s->pool->type)) kv_quant_v_to_f32(buf, tile, s->pool->type, L, cnt);
    else quant_f16_to_f32_row(buf, tile, (int64_t)cnt * L);
    return buf;
}

/* How the attention is cut into work items: nt consecutive entries of one query block x nh
 * heads (n_hg groups of heads), so an item's cache tiles are converted once for all its rows. */
typedef struct attend_ctx {
    const mla_job *j;
    const mla_kernels *k;
    int nt, nh, n_hg;
} attend_ctx;

static int min_i(int a, int b) { return a < b ? a : b; }

static int attend_items(const attend_ctx *c) {
    int n = 0;
    for (int i = 0; i < c->j->n_qb; i++) n += (c->j->qb[i].n + c->nt - 1) / c->nt * c->n_hg;
    return n;
}

/* Items as large as MLA_ROWS allows (every head of a few entries), with the heads split further
 * while there are fewer items than threads (decode of one sequence). */
static void attend_plan(attend_ctx *c, int n_threads) {
    int H = c->j->d->n_head;
    for (c->nh = min_i(H, MLA_ROWS);; c->nh = (c->nh + 1) / 2) {
        c->nt = min_i(MLA_QBLOCK, MLA_ROWS / c->nh);
        c->n_hg = (H + c->nh - 1) / c->nh;
        if (c->nh == 1 || attend_items(c) >= n_threads) return;
    }
}

/* Work item w: its entries' and heads' rows attend tile after tile (flash-style online softmax),
 * each query row seeing the cached rows up to its entry's position. */
static void attend_item(void *ctx, int w, int worker) {
    const attend_ctx *c = ctx;
    const mla_job *j = c->j;
    const mla_dims *d = j->d;
    int H = d->n_head, C = d->kv_lora, L = mla_latent(d), qi = 0, per;
    while (w >= (per = (j->qb[qi].n + c->nt - 1) / c->nt * c->n_hg)) w -= per, qi++;
    mla_qblock qb = j->qb[qi];
    int t0 = qb.start + w / c->n_hg * c->nt, nt = min_i(c->nt, qb.start + qb.n - t0);
    int h0 = w % c->n_hg * c->nh, nh = min_i(c->nh, H - h0), m = nt * nh;
    mla_slot *sl = &j->s->slots[worker];
    const struct kv_seq *s = j->seq[t0];
    int pos0 = j->pos[t0], n_keys = pos0 + nt; /* entry t0 + t is at position pos0 + t */
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < nh; h++) sl->q[t * nh + h] = j->s->qlat + ((size_t)(t0 + t) * H + h0 + h) * L;
    for (int r = 0; r < m; r++) sl->run_max[r] = -INFINITY, sl->run_sum[r] = 0;
    memset(sl->acc, 0, sizeof(float) * (size_t)m * C);
    for (int b = 0, base = 0; base < n_keys; b++, base += KV_BLOCK) {
        int cnt = min_i(n_keys - base, KV_BLOCK);
        const float *rows = tile_rows(s, j->layer, b, cnt, L, sl->tile);
        for (int t = 0; t < nt; t++) {
            int lim = pos0 + t + 1 - base;
            lim = lim < 0 ? 0 : min_i(lim, cnt);
            for (int h = 0; h < nh; h++) sl->lim[t * nh + h] = lim;
        }
        c->k->scores(sl->p, sl->q, m, rows, cnt, L);
        c->k->softmax(sl->p, m, sl->lim, j->scale, sl->run_max, sl->run_sum, sl->corr);
        c->k->values(sl->acc, sl->p, sl->corr, m, rows, cnt, L, C);
    }
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < nh; h++) {
            int r = t * nh + h;
            float *o = j->s->olat + ((size_t)(t0 + t) * H + h0 + h) * C, inv = 1.0f / sl->run_sum[r];
            for (int i = 0; i < C; i++) o[i] = sl->acc[(size_t)r * C + i] * inv;
        }
}

/* out = W_UV,h olat_h of every entry and head. */
static void expand_outputs(const mla_job *j) {
    const mla_dims *d = j->d;
    mla_scratch *s = j->s;
    int H = d->n_head;
    for (int h = 0; h < H; h++) {
        gather(s->hin, s->olat, j->n, H, d->kv_lora, h, 0, d->kv_lora);
        head_matmul(j, s->hout, &j->v_b, h, s->hin);
        scatter(j->out, s->hout, j->n, H, d->v_head, h, 0, d->v_head);
    }
}

void mla_attend(const mla_job *j) {
    for (int i = 0; i < j->n_qb; i++) ATTND_ASSERT(j->qb[i].n <= MLA_QBLOCK);
    store_rows(j);
    absorb_queries(j);
    long work = 0;
    for (int t = 0; t < j->n; t++) work += (long)(j->pos[t] + 1) * j->d->n_head * mla_latent(j->d);
    int n_threads = work >= 32768L ? j->n_threads : 1;
    attend_ctx c = {.j = j, .k = mla_kernels_active()};
    attend_plan(&c, n_threads);
    threads_run(n_threads, attend_items(&c), attend_item, &c);
    expand_outputs(j);
}

void mla_weights(const mla_job *j, int t, int h, float *w) {
    const mla_dims *d = j->d;
    int L = mla_latent(d), n_keys = j->pos[t] + 1;
    const float *q = j->s->qlat + ((size_t)t * d->n_head + h) * L;
    float s[KV_BLOCK], mx = -INFINITY; /* the attention's own scores (mla_kernels) */
    for (int base = 0; base < n_keys; base += KV_BLOCK) {
        int cnt = min_i(n_keys - base, KV_BLOCK);
        const float *rows = tile_rows(j->seq[t], j->layer, base / KV_BLOCK, cnt, L, j->s->slots[0].tile);
        mla_kernels_active()->scores(s, &q, 1, rows, cnt, L);
        for (int k = 0; k < cnt; k++) {
            w[base + k] = s[k] * j->scale;
            mx = w[base + k] > mx ? w[base + k] : mx;
        }
    }
    double sum = 0;
    for (int k = 0; k < n_keys; k++) sum += w[k] = expf(w[k] - mx);
    for (int k = 0; k < n_keys; k++) w[k] = (float)(w[k] / sum);
}
