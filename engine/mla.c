/*
 * mla.c — multi-head latent attention (mla.h): the latent cache rows, the absorbed queries, the
 * attention in the latent space, and the heads' outputs.
 *
 * A cache block of a latent layer is one (KV_BLOCK, kv_lora + rope) tile, position after
 * position (kv_layout.h): every head reads the same rows, so the tile is the keys of all heads
 * and, in its first kv_lora columns, their values. Work items are (query block, head): a block's
 * entries share each tile they read; an F16, Q8_0 or Q4_0 tile is converted to F32 once per item
 * (a quantized row is L / 32 GGUF blocks, as a per-head value row: kv_quant.h), so every type
 * takes the same F32 dot products.
 */
#include "mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "kv_layout.h"
#include "kv_quant.h"
#include "quant.h"
#include "threads.h"

/* Most entries of one query block (engine.c splits batches into blocks of at most this many). */
#define MLA_QBLOCK 16

/* One worker's attention scratch. */
typedef struct mla_slot {
    float *tile;     /* (KV_BLOCK, latent) an F16 / Q8_0 / Q4_0 tile as F32 */
    float *p;        /* (MLA_QBLOCK, KV_BLOCK) scores, then weights, of one tile */
    float *acc;      /* (MLA_QBLOCK, kv_lora) running weighted sums of latents */
    float *run_max;  /* (MLA_QBLOCK) */
    float *run_sum;  /* (MLA_QBLOCK) */
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
    size_t QB = MLA_QBLOCK;
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
        sl.p = block_take(&b, QB * KV_BLOCK, sizeof(float));
        sl.acc = block_take(&b, QB * C, sizeof(float));
        sl.run_max = block_take(&b, QB, sizeof(float));
        sl.run_sum = block_take(&b, QB, sizeof(float));
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

/* a . b in 16 independent lanes (so the compiler keeps them in vector registers; a strict
 * left-to-right sum would not vectorise), then the lanes; n is a multiple of 16 or not. */
static float dot(const float *a, const float *b, int n) {
    float lane[16] = {0}, s = 0;
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) lane[k] += a[i + k] * b[i + k];
    for (; i < n; i++) s += a[i] * b[i];
    for (int k = 0; k < 16; k++) s += lane[k];
    return s;
}

/* One tile for the block's queries qi0..n-1 (query qi sees rows 0..pos0 + qi - base): scores,
 * online-softmax rescaling of the running sums, and the weighted latents added. */
static void tile_step(const mla_job *j, mla_slot *sl, const float *rows, int cnt, int base, int pos0, int qi0,
                      int n, const float *q0, size_t q_stride) {
    int C = j->d->kv_lora, L = mla_latent(j->d);
    for (int qi = qi0; qi < n; qi++) {
        int lim = pos0 + qi + 1 - base < cnt ? pos0 + qi + 1 - base : cnt;
        const float *q = q0 + (size_t)qi * q_stride;
        float *p = sl->p + (size_t)qi * KV_BLOCK, mx = sl->run_max[qi];
        for (int k = 0; k < lim; k++) {
            p[k] = dot(q, rows + (size_t)k * L, L) * j->scale;
            mx = p[k] > mx ? p[k] : mx;
        }
        float corr = expf(sl->run_max[qi] - mx), sum = 0;
        float *acc = sl->acc + (size_t)qi * C;
        for (int i = 0; i < C; i++) acc[i] *= corr;
        for (int k = 0; k < lim; k++) {
            float w = expf(p[k] - mx);
            sum += w;
            const float *r = rows + (size_t)k * L;
            for (int i = 0; i < C; i++) acc[i] += w * r[i];
        }
        sl->run_sum[qi] = sl->run_sum[qi] * corr + sum;
        sl->run_max[qi] = mx;
    }
}

typedef struct attend_ctx {
    const mla_job *j;
} attend_ctx;

/* Work item w: query block w / n_head, head w % n_head. */
static void attend_item(void *ctx, int w, int worker) {
    const mla_job *j = ((const attend_ctx *)ctx)->j;
    const mla_dims *d = j->d;
    int H = d->n_head, h = w % H, C = d->kv_lora, L = mla_latent(d);
    mla_qblock qb = j->qb[w / H];
    mla_slot *sl = &j->s->slots[worker];
    const struct kv_seq *s = j->seq[qb.start];
    int pos0 = j->pos[qb.start], n_keys = pos0 + qb.n;
    for (int qi = 0; qi < qb.n; qi++) sl->run_max[qi] = -INFINITY, sl->run_sum[qi] = 0;
    memset(sl->acc, 0, sizeof(float) * (size_t)qb.n * C);
    const float *q0 = j->s->qlat + ((size_t)qb.start * H + h) * L;
    for (int b = 0, base = 0; base < n_keys; b++, base += KV_BLOCK) {
        int cnt = n_keys - base < KV_BLOCK ? n_keys - base : KV_BLOCK;
        const float *rows = tile_rows(s, j->layer, b, cnt, L, sl->tile);
        int qi0 = base > pos0 ? base - pos0 : 0;
        tile_step(j, sl, rows, cnt, base, pos0, qi0, qb.n, q0, (size_t)H * L);
    }
    for (int qi = 0; qi < qb.n; qi++) {
        float *o = j->s->olat + ((size_t)(qb.start + qi) * H + h) * C, inv = 1.0f / sl->run_sum[qi];
        for (int i = 0; i < C; i++) o[i] = sl->acc[(size_t)qi * C + i] * inv;
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
    attend_ctx c = {j};
    threads_run(work >= 32768L ? j->n_threads : 1, j->n_qb * j->d->n_head, attend_item, &c);
    expand_outputs(j);
}

void mla_weights(const mla_job *j, int t, int h, float *w) {
    const mla_dims *d = j->d;
    int L = mla_latent(d), n_keys = j->pos[t] + 1;
    const float *q = j->s->qlat + ((size_t)t * d->n_head + h) * L;
    float mx = -INFINITY;
    for (int base = 0; base < n_keys; base += KV_BLOCK) {
        int cnt = n_keys - base < KV_BLOCK ? n_keys - base : KV_BLOCK;
        const float *rows = tile_rows(j->seq[t], j->layer, base / KV_BLOCK, cnt, L, j->s->slots[0].tile);
        for (int k = 0; k < cnt; k++) {
            w[base + k] = dot(q, rows + (size_t)k * L, L) * j->scale;
            mx = w[base + k] > mx ? w[base + k] : mx;
        }
    }
    double sum = 0;
    for (int k = 0; k < n_keys; k++) sum += w[k] = expf(w[k] - mx);
    for (int k = 0; k < n_keys; k++) w[k] = (float)(w[k] / sum);
}
