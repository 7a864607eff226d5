/*
 * kv.c — KV cache pools and sequences (public API in attnd/model.h, layout in kv.h).
 *
 * A pool is a byte budget, not a preallocated arena: blocks are malloc'd the first time they
 * are needed and recycled through a free list afterwards, so a server configured with a large
 * budget only uses the memory its live sessions hold. `used` counts blocks held by sequences;
 * a few released blocks (KV_FREE_KEEP) are kept for reuse, the rest go back to the allocator.
 */
#include "kv_layout.h"

#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

attnd_status kv_pool_create(kv_pool **out, const model *m, size_t budget_bytes, kv_type type, attnd_err *err) {
    *out = NULL;
    if (!m) return attnd_fail(err, ATTND_ERR_INVALID, "kv_pool_create: no model");
    if (type != KV_F16 && type != KV_F32) return attnd_fail(err, ATTND_ERR_INVALID, "unknown KV type %d", (int)type);
    const model_info *mi = model_info_get(m);
    kv_pool *p = calloc(1, sizeof(*p));
    if (!p) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory creating the KV pool");
    p->m = m;
    p->type = type;
    p->n_layer = mi->n_layer;
    p->kv_dim = mi->n_head_kv * mi->head_dim;
    p->n_ctx = mi->n_ctx;
    p->elt = type == KV_F16 ? 2 : 4;
    p->block_bytes = (size_t)2 * p->n_layer * KV_BLOCK * p->kv_dim * p->elt;
    p->budget = budget_bytes;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return attnd_fail(err, ATTND_ERR_NOMEM, "cannot create the KV pool lock");
    }
    if (budget_bytes < p->block_bytes) {
        attnd_status st = attnd_fail(err, ATTND_ERR_INVALID,
                                     "KV budget of %zu bytes is less than one block (%d tokens = %zu bytes)",
                                     budget_bytes, KV_BLOCK, p->block_bytes);
        kv_pool_destroy(p);
        return st;
    }
    *out = p;
    return ATTND_OK;
}

void kv_pool_destroy(kv_pool *p) {
    if (!p) return;
    ATTND_ASSERT(p->n_seqs == 0);
    for (kv_block *b = p->free_list; b;) {
        kv_block *next = b->next_free;
        free(b);
        b = next;
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}

size_t kv_pool_bytes_used(const kv_pool *p) { return p->used; }
size_t kv_pool_bytes_budget(const kv_pool *p) { return p->budget; }
size_t kv_pool_bytes_per_token(const kv_pool *p) { return p->block_bytes / KV_BLOCK; }

size_t kv_bytes_per_token(const model *m, kv_type type) {
    const model_info *mi = model_info_get(m);
    return (size_t)2 * mi->n_layer * mi->n_head_kv * mi->head_dim * (type == KV_F16 ? 2 : 4);
}

size_t kv_context_bytes(const model *m, int n_ctx, kv_type type) {
    size_t blocks = ((size_t)n_ctx + KV_BLOCK - 1) / KV_BLOCK;
    return blocks * KV_BLOCK * kv_bytes_per_token(m, type);
}

attnd_status kv_seq_create(kv_seq **out, kv_pool *pool, attnd_err *err) {
    *out = NULL;
    if (!pool) return attnd_fail(err, ATTND_ERR_INVALID, "kv_seq_create: no pool");
    kv_seq *s = calloc(1, sizeof(*s));
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory creating a KV sequence");
    s->pool = pool;
    s->max_blocks = (pool->n_ctx + KV_BLOCK - 1) / KV_BLOCK;
    /* The block table is sized for the whole context once, so growing never reallocates. */
    s->blocks = calloc((size_t)s->max_blocks, sizeof(*s->blocks));
    if (!s->blocks) {
        free(s);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory creating a KV sequence");
    }
    pthread_mutex_lock(&pool->lock);
    pool->n_seqs++;
    pthread_mutex_unlock(&pool->lock);
    *out = s;
    return ATTND_OK;
}

/* Returns blocks[keep..n_blocks) to the pool. */
static void release_blocks(kv_seq *s, int keep) {
    kv_pool *p = s->pool;
    kv_block *to_free = NULL; /* freed outside the lock */
    pthread_mutex_lock(&p->lock);
    while (s->n_blocks > keep) {
        kv_block *b = s->blocks[--s->n_blocks];
        s->blocks[s->n_blocks] = NULL;
        if (p->n_free < KV_FREE_KEEP) {
            b->next_free = p->free_list;
            p->free_list = b;
            p->n_free++;
        } else {
            b->next_free = to_free;
            to_free = b;
        }
        p->used -= p->block_bytes;
    }
    pthread_mutex_unlock(&p->lock);
    while (to_free) {
        kv_block *next = to_free->next_free;
        free(to_free);
        to_free = next;
    }
}

void kv_seq_destroy(kv_seq *s) {
    if (!s) return;
    release_blocks(s, 0);
    kv_pool *p = s->pool;
    pthread_mutex_lock(&p->lock);
    p->n_seqs--;
    pthread_mutex_unlock(&p->lock);
    free(s->blocks);
    free(s);
}

int kv_seq_len(const kv_seq *s) { return s->len; }
size_t kv_seq_bytes(const kv_seq *s) { return (size_t)s->n_blocks * s->pool->block_bytes; }

void kv_seq_truncate(kv_seq *s, int n) {
    ATTND_ASSERT(n >= 0);
    if (n >= s->len) return;
    s->len = n;
    release_blocks(s, (n + KV_BLOCK - 1) / KV_BLOCK);
}

attnd_status kv_reserve(kv_seq *const *seqs, int n, attnd_err *err) {
    if (n == 0) return ATTND_OK;
    kv_pool *p = seqs[0]->pool;
    size_t need = 0;
    for (int i = 0; i < n; i++) {
        ATTND_ASSERT(seqs[i]->pool == p);
        int want = (seqs[i]->len + seqs[i]->pending + KV_BLOCK - 1) / KV_BLOCK;
        ATTND_ASSERT(want <= seqs[i]->max_blocks);
        if (want > seqs[i]->n_blocks) need += (size_t)(want - seqs[i]->n_blocks);
    }
    if (need == 0) return ATTND_OK;
    pthread_mutex_lock(&p->lock);
    if (need * p->block_bytes > p->budget - p->used) {
        size_t used = p->used;
        pthread_mutex_unlock(&p->lock);
        return attnd_fail(err, ATTND_ERR_NOMEM,
                          "KV cache budget exhausted: %zu more bytes needed, %zu of %zu in use", need * p->block_bytes,
                          used, p->budget);
    }
    int done = 0; /* sequences fully served, for rollback */
    for (; done < n; done++) {
        kv_seq *s = seqs[done];
        int want = (s->len + s->pending + KV_BLOCK - 1) / KV_BLOCK;
        while (s->n_blocks < want) {
            kv_block *b = p->free_list;
            if (b) {
                p->free_list = b->next_free;
                p->n_free--;
            } else {
                b = aligned_alloc(64, KV_BLOCK_HEADER + p->block_bytes);
                if (!b) goto nomem;
                /* Attention reads whole key tiles, also past a sequence's last position (those
                 * scores are ignored); zeroing keeps those reads defined. */
                memset(b, 0, KV_BLOCK_HEADER + p->block_bytes);
            }
            s->blocks[s->n_blocks++] = b;
            p->used += p->block_bytes;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return ATTND_OK;

nomem:
    pthread_mutex_unlock(&p->lock);
    /* Undo: between evaluations a sequence holds exactly the blocks its len needs, so dropping
     * back to that returns every block this call took. */
    for (int i = 0; i <= done && i < n; i++) release_blocks(seqs[i], (seqs[i]->len + KV_BLOCK - 1) / KV_BLOCK);
    return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory allocating KV cache blocks");
}
