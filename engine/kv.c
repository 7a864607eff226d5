/*
 * kv.c — KV cache pools and sequences (public API in attnd/kv.h, layout in kv_layout.h).
 *
 * A pool is a byte budget, not a preallocated arena: blocks are malloc'd the first time they
 * are needed and recycled through a free list afterwards, so a server configured with a large
 * budget only uses the memory its live sessions hold. `used` counts blocks held by sequences;
 * a few released blocks (KV_FREE_KEEP) are kept for reuse, the rest go back to the allocator.
 */
#include "kv_layout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kv_quant.h"
#include "model_internal.h"

static const char *const KV_TYPE_NAMES[] = {"f16", "f32", "q8_0", "q4_0"};

const char *kv_type_name(kv_type type) {
    return (unsigned)type < ATTND_ARRAY_LEN(KV_TYPE_NAMES) ? KV_TYPE_NAMES[type] : "?";
}

attnd_status kv_type_parse(const char *name, kv_type *out) {
    for (size_t i = 0; name && i < ATTND_ARRAY_LEN(KV_TYPE_NAMES); i++)
        if (!strcasecmp(name, KV_TYPE_NAMES[i])) {
            *out = (kv_type)i;
            return ATTND_OK;
        }
    return ATTND_ERR_INVALID;
}

const char *kv_type_unsupported(const model *m, kv_type type) {
    if ((unsigned)type >= ATTND_ARRAY_LEN(KV_TYPE_NAMES)) return "unknown KV type";
    int latent = model_info_get(m)->kv_latent; /* its rows are quantized whole: kv_layout.h */
    if (type == KV_Q4_0 && latent) /* docs/engine.md: the numbers */
        return "a q4_0 KV cache is not supported for latent attention (deepseek2): its rows are every head's keys "
               "and values, and 4 bits on them lose greedy agreement (use q8_0 or f16)";
    if (kv_quant_is_quant(type) && latent && latent % KV_QUANT_BLOCK != 0)
        return "a q8_0 KV cache needs kv_lora_rank + rope dims a multiple of 32 (use f16)";
    if (kv_quant_is_quant(type) && !latent && model_info_get(m)->head_dim % KV_QUANT_BLOCK != 0)
        return "a q8_0 / q4_0 KV cache needs head_dim a multiple of 32 (use f16)";
    return NULL;
}

/* The bytes of a block from the layers' slots. */
static void pool_sizes(kv_pool *p) {
    size_t kv_tiles = model_info_get(p->m)->kv_latent ? 1 : 2; /* a latent tile holds what K and V would */
    p->global_bytes = kv_tiles * p->n_head_kv * p->tile_bytes * (size_t)p->n_global;
    p->local_bytes = kv_tiles * p->local_n_head_kv * p->local_tile_bytes * (size_t)p->n_local;
    p->block_bytes = p->global_bytes + p->local_bytes;
}

attnd_status kv_pool_set_mtp(kv_pool *p, bool on, attnd_err *err) {
    if (on == p->mtp) return ATTND_OK;
    if (on) return attnd_fail(err, ATTND_ERR_INVALID, "the model has no MTP block to cache");
    if (p->n_seqs || p->free_list || p->used)
        return attnd_fail(err, ATTND_ERR_INVALID, "the MTP block's cache is set before the pool has sequences");
    p->mtp = false;
    p->n_layer--;
    p->n_global--; /* the MTP layer's slot was the last global one */
    pool_sizes(p);
    return ATTND_OK;
}

attnd_status kv_pool_create(kv_pool **out, const model *m, size_t budget_bytes, kv_type type, attnd_err *err) {
    *out = NULL;
    if (!m) return attnd_fail(err, ATTND_ERR_INVALID, "kv_pool_create: no model");
    const model_info *mi = model_info_get(m);
    const char *why = kv_type_unsupported(m, type);
    if (why) return attnd_fail(err, ATTND_ERR_INVALID, "KV type %s: %s (head_dim %d)", kv_type_name(type), why, mi->head_dim);
    kv_pool *p = calloc(1, sizeof(*p));
    if (!p) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory creating the KV pool");
    p->m = m;
    p->type = type;
    p->n_layer = mi->n_layer + (mi->mtp ? 1 : 0); /* the MTP block's cache last (kv_layout.h) */
    p->mtp = mi->mtp;
    p->kv_dim = mi->n_head_kv * mi->head_dim;
    p->head_dim = mi->head_dim;
    p->n_ctx = mi->n_ctx;
    p->elt = type == KV_F16 ? 2 : 4; /* (F16 / F32 only) */
    p->n_head_kv = mi->n_head_kv;
    p->tile_bytes = KV_BLOCK * kv_quant_row_bytes(type, mi->head_dim);
    p->local_head_dim = p->head_dim, p->local_n_head_kv = p->n_head_kv;
    for (int l = 0; l < mi->n_layer; l++) /* the model's layers of one kind share a geometry (model.c) */
        if (m->layers[l].kind != LAYER_DELTANET && m->layers[l].head_dim) {
            bool local = m->layers[l].window > 0;
            *(local ? &p->local_head_dim : &p->head_dim) = m->layers[l].head_dim;
            *(local ? &p->local_n_head_kv : &p->n_head_kv) = m->layers[l].n_head_kv;
        }
    p->kv_dim = p->n_head_kv * p->head_dim;
    p->tile_bytes = KV_BLOCK * kv_quant_row_bytes(type, p->head_dim);
    p->local_tile_bytes = KV_BLOCK * kv_quant_row_bytes(type, p->local_head_dim);
    if (mi->kv_latent) /* one (KV_BLOCK, latent) tile per layer: kv_layout.h */
        p->head_dim = p->kv_dim = mi->kv_latent, p->tile_bytes = KV_BLOCK * kv_quant_row_bytes(type, mi->kv_latent);
    p->layer_local = calloc((size_t)p->n_layer, 1);
    p->layer_slot = calloc((size_t)p->n_layer, sizeof(int));
    if (!p->layer_local || !p->layer_slot || pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p->layer_local), free(p->layer_slot), free(p);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory creating the KV pool");
    }
    for (int l = 0; l < p->n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        int w = L->window;
        p->layer_local[l] = w > 0;
        if (L->kv_source != l) /* reads an earlier layer's cache: holds none of its own */
            p->layer_slot[l] = p->layer_slot[L->kv_source];
        else
            p->layer_slot[l] = L->kind == LAYER_DELTANET ? -1 : w > 0 ? p->n_local++ : p->n_global++;
        if (w > p->window) p->window = w;
    }
    pool_sizes(p);
    p->state_layer_floats = m->n_dn_layers ? dn_state_floats(&m->dn) : 0;
    p->state_bytes = kv_state_bytes(m);
    p->log_layer_floats = m->n_dn_layers ? dn_log_floats(&m->dn) : 0;
    p->steps_log_floats = p->log_layer_floats * (size_t)m->n_dn_layers;
    p->budget = budget_bytes;
    if (budget_bytes < p->block_bytes + p->state_bytes) {
        attnd_status st = attnd_fail(err, ATTND_ERR_INVALID,
                                     "KV budget of %zu bytes is less than one block (%d tokens = %zu bytes) and "
                                     "one sequence's recurrent state (%zu bytes)",
                                     budget_bytes, KV_BLOCK, p->block_bytes, p->state_bytes);
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
        free(b->local);
        free(b);
        b = next;
    }
    pthread_mutex_destroy(&p->lock);
    free(p->layer_local), free(p->layer_slot);
    free(p);
}

size_t kv_pool_bytes_used(const kv_pool *p) { return p->used; }
size_t kv_pool_bytes_budget(const kv_pool *p) { return p->budget; }
size_t kv_pool_bytes_per_token(const kv_pool *p) { return p->block_bytes / KV_BLOCK; }
size_t kv_pool_bytes_for(const kv_pool *p, int n_tokens) {
    return (size_t)((n_tokens > 0 ? n_tokens : 0) + KV_BLOCK - 1) / KV_BLOCK * p->block_bytes +
           p->state_bytes * (size_t)(1 + p->ckpt_max);
}

size_t kv_state_bytes(const model *m) {
    return m->n_dn_layers ? sizeof(float) * dn_state_floats(&m->dn) * (size_t)m->n_dn_layers : 0;
}

size_t kv_bytes_per_token(const model *m, kv_type type) {
    return kv_layer_bytes_per_token(m, type, false) + kv_layer_bytes_per_token(m, type, true);
}

/* Each attention layer with a cache of its own (not a Gated DeltaNet one, not one reading an
 * earlier layer's) of the kind asked: its K and V rows. */
size_t kv_layer_bytes_per_token(const model *m, kv_type type, bool local) {
    const model_info *mi = model_info_get(m);
    if (mi->kv_latent) return (size_t)(local ? 0 : mi->n_layer) * kv_quant_row_bytes(type, mi->kv_latent);
    size_t n = 0;
    for (int l = 0; l < mi->n_layer + (mi->mtp ? 1 : 0); l++) { /* the MTP block's as the pool holds it */
        const layer_weights *L = &m->layers[l];
        if (L->kind == LAYER_DELTANET || L->kv_source != l || (L->window > 0) != local) continue;
        n += (size_t)2 * L->n_head_kv * kv_quant_row_bytes(type, L->head_dim);
    }
    return n;
}

size_t kv_context_bytes(const model *m, int n_ctx, kv_type type) {
    size_t blocks = ((size_t)n_ctx + KV_BLOCK - 1) / KV_BLOCK;
    /* the local layers hold the blocks of their window and the ones it straddles: see kv_seq_trim_window */
    size_t w = (size_t)model_info_get(m)->window, local = w ? (w + KV_BLOCK - 1) / KV_BLOCK + 1 : 0;
    if (local > blocks) local = blocks;
    return KV_BLOCK * (blocks * kv_layer_bytes_per_token(m, type, false) + local * kv_layer_bytes_per_token(m, type, true)) +
           kv_state_bytes(m);
}

/* A sequence with no tokens and an empty block table sized for the whole context (so growing never
 * reallocates); not yet counted in the pool. */
static kv_seq *seq_alloc(kv_pool *pool) {
    kv_seq *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->pool = pool;
    s->max_blocks = (pool->n_ctx + KV_BLOCK - 1) / KV_BLOCK;
    s->blocks = calloc((size_t)s->max_blocks, sizeof(*s->blocks));
    s->ckpts = pool->ckpt_max ? calloc((size_t)pool->ckpt_max, sizeof(*s->ckpts)) : NULL;
    if (pool->mtp) {
        s->mtp_h = malloc(sizeof(float) * KV_MTP_ROWS * (size_t)model_info_get(pool->m)->n_embd);
        s->mtp_pos = malloc(sizeof(int) * KV_MTP_ROWS);
    }
    if (!s->blocks || (pool->ckpt_max && !s->ckpts) || (pool->mtp && (!s->mtp_h || !s->mtp_pos))) {
        free(s->blocks), free(s->ckpts), free(s->mtp_h), free(s->mtp_pos), free(s);
        return NULL;
    }
    for (int i = 0; pool->mtp && i < KV_MTP_ROWS; i++) s->mtp_pos[i] = -1;
    return s;
}

attnd_status kv_seq_create(kv_seq **out, kv_pool *pool, attnd_err *err) {
    *out = NULL;
    if (!pool) return attnd_fail(err, ATTND_ERR_INVALID, "kv_seq_create: no pool");
    kv_seq *s = seq_alloc(pool);
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory creating a KV sequence");
    pthread_mutex_lock(&pool->lock);
    pool->n_seqs++;
    pthread_mutex_unlock(&pool->lock);
    *out = s;
    return ATTND_OK;
}

attnd_status kv_seq_fork(kv_seq **out, const kv_seq *parent, attnd_err *err) {
    *out = NULL;
    if (!parent) return attnd_fail(err, ATTND_ERR_INVALID, "kv_seq_fork: no parent sequence");
    ATTND_ASSERT(parent->pending == 0);
    kv_pool *p = parent->pool;
    kv_seq *s = seq_alloc(p);
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory forking a KV sequence");
    if (parent->state && (s->state = malloc(p->state_bytes))) memcpy(s->state, parent->state, p->state_bytes);
    pthread_mutex_lock(&p->lock);
    if (parent->state && (!s->state || p->state_bytes > p->budget - p->used)) {
        pthread_mutex_unlock(&p->lock);
        free(s->state), free(s->blocks), free(s->ckpts), free(s->mtp_h), free(s->mtp_pos), free(s);
        return attnd_fail(err, ATTND_ERR_NOMEM, "no room for a forked sequence's recurrent state (%zu bytes)",
                          p->state_bytes);
    }
    if (s->state) p->used += p->state_bytes;
    for (int i = 0; i < parent->n_blocks; i++) {
        s->blocks[i] = parent->blocks[i];
        s->blocks[i]->refs++;
    }
    s->n_blocks = parent->n_blocks;
    kv_ckpt_share_locked(s, parent);
    s->len = parent->len;
    s->lmin = parent->lmin;
    if (p->mtp) { /* the hidden states the MTP block reads next */
        memcpy(s->mtp_h, parent->mtp_h, sizeof(float) * KV_MTP_ROWS * (size_t)model_info_get(p->m)->n_embd);
        memcpy(s->mtp_pos, parent->mtp_pos, sizeof(int) * KV_MTP_ROWS);
    }
    p->n_seqs++;
    pthread_mutex_unlock(&p->lock);
    *out = s;
    return ATTND_OK;
}

// ---- blocks (pool lock held) ----------------------------------------------------------------

/* One block with a single holder, from the free list or the allocator; NULL when out of memory.
 * The caller has checked the budget. */
static kv_block *block_take(kv_pool *p) {
    kv_block *b = p->free_list;
    if (b) {
        p->free_list = b->next_free;
        p->n_free--;
    } else {
        b = aligned_alloc(64, KV_BLOCK_HEADER + p->global_bytes);
        if (!b) return NULL;
        /* Attention reads whole key tiles, also past a sequence's last position (those scores are
         * ignored); zeroing keeps those reads defined. */
        memset(b, 0, KV_BLOCK_HEADER + p->global_bytes);
    }
    if (p->local_bytes && !b->local) {
        if (!(b->local = aligned_alloc(64, p->local_bytes))) {
            free(b);
            return NULL;
        }
        memset(b->local, 0, p->local_bytes);
    }
    b->next_free = NULL;
    b->refs = 1;
    p->used += p->block_bytes;
    return b;
}

/* Drops one holder of b. The last one returns it to the pool: onto the free list, or onto
 * *to_free for the caller to free once the lock is released. */
static void block_unref(kv_pool *p, kv_block *b, kv_block **to_free) {
    ATTND_ASSERT(b->refs > 0);
    if (--b->refs > 0) return;
    p->used -= p->global_bytes + (b->local ? p->local_bytes : 0);
    if (p->n_free < KV_FREE_KEEP) {
        b->next_free = p->free_list;
        p->free_list = b;
        p->n_free++;
    } else {
        b->next_free = *to_free;
        *to_free = b;
    }
}

static void free_chain(kv_block *b) {
    while (b) {
        kv_block *next = b->next_free;
        free(b->local);
        free(b);
        b = next;
    }
}

/* Gives up blocks[keep..n_blocks). */
static void release_blocks(kv_seq *s, int keep) {
    kv_pool *p = s->pool;
    kv_block *to_free = NULL; /* freed outside the lock */
    pthread_mutex_lock(&p->lock);
    while (s->n_blocks > keep) {
        kv_block *b = s->blocks[--s->n_blocks];
        s->blocks[s->n_blocks] = NULL;
        block_unref(p, b, &to_free);
    }
    pthread_mutex_unlock(&p->lock);
    free_chain(to_free);
}

// ---- sequences ------------------------------------------------------------------------------

void kv_seq_destroy(kv_seq *s) {
    if (!s) return;
    release_blocks(s, 0);
    kv_ckpt_release(s);
    kv_seq_keep_steps(s, 0);
    kv_pool *p = s->pool;
    pthread_mutex_lock(&p->lock);
    p->n_seqs--;
    if (s->state) p->used -= p->state_bytes;
    pthread_mutex_unlock(&p->lock);
    free(s->state);
    free(s->blocks);
    free(s->ckpts);
    free(s->mtp_h), free(s->mtp_pos);
    free(s);
}

int kv_seq_len(const kv_seq *s) { return s->len; }
kv_pool *kv_seq_pool(const kv_seq *s) { return s->pool; }
/* Bytes of blocks[i] of s: its payload, and its local part while it has one. */
static size_t held_bytes(const kv_seq *s, int i) {
    return s->pool->global_bytes + (s->blocks[i]->local ? s->pool->local_bytes : 0);
}

size_t kv_seq_bytes(const kv_seq *s) {
    kv_pool *p = s->pool;
    size_t n = 0;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < s->n_blocks; i++) n += held_bytes(s, i);
    pthread_mutex_unlock(&p->lock);
    return n + (s->state ? p->state_bytes : 0) + kv_ckpt_held_bytes(s);
}

size_t kv_seq_bytes_shared(const kv_seq *s) {
    kv_pool *p = s->pool;
    size_t n = 0;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < s->n_blocks; i++) n += s->blocks[i]->refs > 1 ? held_bytes(s, i) : 0;
    for (int i = 0; i < s->n_ckpts; i++) n += s->ckpts[i]->refs > 1 ? p->state_bytes : 0;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void kv_seq_truncate(kv_seq *s, int n) {
    ATTND_ASSERT(n >= 0);
    if (n >= s->len) return;
    const kv_pool *p = s->pool;
    /* the next query (position n) sees n - window + 1..: gone below lmin? then keep nothing */
    if (p->n_local && n > 0 && (n - p->window + 1 > 0 ? n - p->window + 1 : 0) < s->lmin) n = 0;
    /* a recurrent state holds every position: back to its newest checkpoint at or below n, or to 0 */
    if (p->state_bytes) n = kv_state_rewind(s, n);
    s->len = n;
    if (n == 0) s->lmin = 0;
    release_blocks(s, (n + KV_BLOCK - 1) / KV_BLOCK);
}

void kv_seq_trim_window(kv_seq *s) {
    kv_pool *p = s->pool;
    if (!p->n_local) return;
    int n_gone;
    do { /* up to 16 blocks a round, each round's parts freed outside the lock */
        uint8_t *gone[16];
        n_gone = 0;
        pthread_mutex_lock(&p->lock);
        for (int b = s->lmin / KV_BLOCK;
             b < s->n_blocks && (b + 1) * KV_BLOCK <= s->len - p->window + 1 && n_gone < 16; b++) {
            kv_block *blk = s->blocks[b];
            if (blk->refs == 1 && blk->local) { /* a shared one stays for its other holders */
                gone[n_gone++] = blk->local;
                blk->local = NULL;
                p->used -= p->local_bytes;
            }
            s->lmin = (b + 1) * KV_BLOCK;
        }
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < n_gone; i++) free(gone[i]);
    } while (n_gone == 16);
}

// ---- reservation ----------------------------------------------------------------------------

/* Blocks the batch needs (pool lock held): new ones past each sequence's last block, plus a copy
 * of each shared block a sequence is about to write into. A sequence that will copy gives up its
 * hold on the shared block now (cow_from remembers it), so when every holder writes in the same
 * batch the last one keeps the original instead of copying it. */
static size_t plan_blocks(kv_seq *const *seqs, int n) {
    size_t need = 0;
    for (int i = 0; i < n; i++) {
        kv_seq *s = seqs[i];
        int want = (s->len + s->pending + KV_BLOCK - 1) / KV_BLOCK;
        ATTND_ASSERT(want <= s->max_blocks);
        if (want > s->n_blocks) need += (size_t)(want - s->n_blocks);
        s->cow_from = NULL;
        if (s->pending > 0 && s->len % KV_BLOCK != 0) {
            kv_block *b = s->blocks[s->len / KV_BLOCK];
            if (b->refs > 1) {
                b->refs--;
                s->cow_from = b;
                need++;
            }
        }
    }
    return need;
}

static void unplan_blocks(kv_seq *const *seqs, int n) {
    for (int i = 0; i < n; i++) {
        if (seqs[i]->cow_from) seqs[i]->cow_from->refs++;
        seqs[i]->cow_from = NULL;
    }
}

/* Hands the blocks on chain (exactly as many as plan_blocks counted) to the sequences: copies
 * first, then new blocks at the end. */
static void install_blocks(kv_pool *p, kv_seq *const *seqs, int n, kv_block *chain) {
    for (int i = 0; i < n; i++) {
        kv_seq *s = seqs[i];
        int want = (s->len + s->pending + KV_BLOCK - 1) / KV_BLOCK;
        if (s->cow_from) {
            kv_block *b = chain;
            chain = b->next_free;
            b->next_free = NULL;
            memcpy(kv_block_data(b), kv_block_data(s->cow_from), p->global_bytes);
            ATTND_ASSERT(!p->local_bytes || s->cow_from->local); /* the block at len is always in view */
            if (p->local_bytes) memcpy(b->local, s->cow_from->local, p->local_bytes);
            s->blocks[s->len / KV_BLOCK] = b;
            s->cow_from = NULL;
        }
        while (s->n_blocks < want) {
            kv_block *b = chain;
            chain = b->next_free;
            b->next_free = NULL;
            s->blocks[s->n_blocks++] = b;
        }
    }
    ATTND_ASSERT(chain == NULL);
}

/* Zeroed recurrent states for the sequences of seqs that have none yet (new_state marks them);
 * all or nothing. Returns the bytes they take from the budget, or SIZE_MAX when out of memory. */
static size_t plan_states(kv_pool *p, kv_seq *const *seqs, int n) {
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        kv_seq *s = seqs[i];
        s->new_state = p->state_bytes && !s->state;
        if (!s->new_state) continue;
        if (!(s->state = calloc(1, p->state_bytes))) {
            for (int k = 0; k <= i; k++)
                if (seqs[k]->new_state) free(seqs[k]->state), seqs[k]->state = NULL, seqs[k]->new_state = false;
            return SIZE_MAX;
        }
        bytes += p->state_bytes;
    }
    return bytes;
}

static void unplan_states(kv_seq *const *seqs, int n) {
    for (int i = 0; i < n; i++)
        if (seqs[i]->new_state) free(seqs[i]->state), seqs[i]->state = NULL, seqs[i]->new_state = false;
}

attnd_status kv_reserve(kv_seq *const *seqs, int n, attnd_err *err) {
    if (n == 0) return ATTND_OK;
    kv_pool *p = seqs[0]->pool;
    for (int i = 0; i < n; i++) ATTND_ASSERT(seqs[i]->pool == p);
    size_t state = plan_states(p, seqs, n); /* outside the lock: only these sequences see them */
    if (state == SIZE_MAX) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory allocating a recurrent state");
    pthread_mutex_lock(&p->lock);
    size_t need = plan_blocks(seqs, n);
    if (need * p->block_bytes + state > p->budget - p->used) {
        size_t used = p->used;
        unplan_blocks(seqs, n);
        pthread_mutex_unlock(&p->lock);
        unplan_states(seqs, n);
        return attnd_fail(err, ATTND_ERR_NOMEM,
                          "KV cache budget exhausted: %zu more bytes needed, %zu of %zu in use",
                          need * p->block_bytes + state, used, p->budget);
    }
    kv_block *chain = NULL; /* the blocks taken, linked through next_free */
    for (size_t i = 0; i < need; i++) {
        kv_block *b = block_take(p);
        if (!b) {
            kv_block *to_free = NULL;
            while (chain) {
                kv_block *next = chain->next_free;
                block_unref(p, chain, &to_free);
                chain = next;
            }
            unplan_blocks(seqs, n);
            pthread_mutex_unlock(&p->lock);
            free_chain(to_free);
            unplan_states(seqs, n);
            return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory allocating KV cache blocks");
        }
        b->next_free = chain;
        chain = b;
    }
    install_blocks(p, seqs, n, chain);
    p->used += state;
    for (int i = 0; i < n; i++) seqs[i]->new_state = false;
    pthread_mutex_unlock(&p->lock);
    return ATTND_OK;
}
bool kv_pool_mtp(const kv_pool *p) { return p->mtp; }
