/*
 * kv_layout.h — (engine-private) layout of the KV cache, shared by kv.c (pools, sequences, blocks) and
 * the evaluation code (engine.c, attn_ops.c) that writes and reads cached keys and values.
 *
 * A sequence's cache is a list of fixed-size blocks of KV_BLOCK token positions. One block holds
 * every layer's keys and values for its positions. Keys are stored transposed, so that one kv
 * head's keys in a block form a contiguous (head_dim, KV_BLOCK) tile with consecutive positions
 * adjacent: attention scores vectorise over positions with no transposition at read time. Values
 * are stored head by head, so one kv head's values in a block are a contiguous (KV_BLOCK,
 * head_dim) tile as well: attention reads each of its tiles as one sequential run.
 *
 *     block: K (n_layer, kv_dim, KV_BLOCK) then V (n_layer, n_head_kv, KV_BLOCK, head_dim),
 *     elements of kv_type (kv_dim = n_head_kv * head_dim)
 *
 * Q8_0 and Q4_0 caches keep the same order of tiles (one per layer and kv head, keys then values),
 * each tile holding its positions' blocks of 32 as kv_quant.h describes; kv_pool.tile_bytes is
 * the size of every tile, whatever the type.
 *
 * A model with sliding-window layers keeps their part of a block apart: the global layers' K and
 * V in the block's payload as above (n_layer there = the global layers), the local layers' in a
 * separate allocation (kv_block.local, same layout over the local layers). Once every later
 * query of the sequence is past a block by more than the window, the block's local part is
 * freed (kv_seq_trim_window): the local layers hold about window + 2 blocks of positions however
 * long the sequence grows. Positions below kv_seq.lmin may have lost their local part; a
 * truncation that would need them again truncates to 0 instead.
 *
 * A model with a multi-token-prediction block it drafts with (model_info.mtp) caches that block
 * as one more global layer, index n_layer (kv_pool_set_mtp(false) leaves it out): its K and V
 * follow the sequence through truncation, forks and saved sessions as every layer's do. Drafting
 * writes them past the sequence's length (engine_mtp_step), where the next evaluation overwrites
 * them.
 *
 * A model with latent attention (mla.h, model_info.kv_latent) caches one row per position and layer
 * for every head, [latent | rotated key part] (kv_latent elements): a block holds per layer one
 * (KV_BLOCK, kv_latent) tile, positions one after the other (not transposed), read through
 * kv_k_tile(s, layer, block, 0); there is no value tile (the values are the latent's first
 * kv_lora_rank columns). F16, F32 or Q8_0 (each row kv_latent / 32 GGUF blocks, rows one after
 * the other as in a value tile: kv_quant.h); Q4_0 is refused (kv_type_unsupported).
 *
 * A model with Gated DeltaNet layers (deltanet.h) caches no K/V for them: the blocks hold the
 * attention layers only (n_global of them). Each such layer keeps instead a fixed-size f32 state
 * per sequence, all of them in one allocation of the sequence (kv_seq.state, state_bytes), taken
 * from the budget at the sequence's first reservation and copied by a fork. A state holds every
 * position up to len and cannot be cut back: truncating such a sequence below its length
 * truncates it to 0 (kv_seq_len says what was kept), and the caller recomputes.
 *
 * Blocks come from a pool with a byte budget; memory grows with the tokens actually held.
 * Reserving room for a batch is separate from committing it, so a batch that does not fit
 * leaves every sequence exactly as it was.
 *
 * Blocks are reference-counted: a forked sequence (kv_seq_fork) holds its parent's blocks rather
 * than copies, and a block with more than one holder is read-only. kv_reserve gives a sequence its
 * own copy of a shared block before the sequence writes into it (copy-on-write; only the block at
 * a sequence's length can be partly filled, so at most one block per sequence is copied). The
 * pool's byte count counts every block once, however many sequences hold it.
 */
#ifndef ATTND_KV_LAYOUT_H
#define ATTND_KV_LAYOUT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "attnd/engine.h"

/* Token positions per block: small enough that a short session wastes little, large enough
 * that a block is one attention tile and block bookkeeping is negligible. */
#define KV_BLOCK 64

/* Released blocks kept for reuse (saves page faults when sessions come and go); beyond this they
 * are freed, so the process's memory follows the tokens held rather than its peak. */
#define KV_FREE_KEEP 4

/* The main model's final-normed hidden states a sequence keeps for its MTP block (the newest
 * positions it evaluated): enough for a truncation back through a whole verify. */
#define KV_MTP_ROWS 40

/* The most state checkpoints a sequence may keep (kv_pool_set_checkpoints). */
#define KV_CKPT_MAX 64

typedef struct kv_block {
    struct kv_block *next_free; /* free-list link while the block sits in the pool */
    int refs;                   /* sequences holding the block (under the pool lock); > 1 = read-only */
    uint8_t *local;             /* the local layers' part (local_bytes), or NULL: none, or freed */
    /* the payload follows, aligned to 64 bytes (see kv_block_data) */
} kv_block;

struct kv_pool {
    const model *m;
    kv_type type;
    int n_layer, kv_dim, n_ctx;
    int head_dim;          /* kv_dim = n_head_kv * head_dim (the global layers') */
    size_t elt;            /* bytes per cached element (2 for F16, 4 for F32; unused when quantized) */
    int n_head_kv;
    size_t tile_bytes;     /* bytes of one kv head's key (or value) tile of one layer in one block */
    /* The local layers' head_dim, n_head_kv and tile_bytes: the global layers' unless the model's
     * local layers have a geometry of their own (Gemma 4: arch layer_geometry) */
    int local_head_dim, local_n_head_kv;
    size_t local_tile_bytes;
    size_t block_bytes;    /* bytes of one whole block: global_bytes + local_bytes */
    size_t global_bytes;   /* payload bytes of one block: the global layers' K and V */
    size_t local_bytes;    /* bytes of one block's local part (0 without sliding-window layers) */
    int n_local;           /* sliding-window layers */
    int n_global;          /* the other layers with K/V (not the Gated DeltaNet ones) */
    size_t state_bytes;    /* the Gated DeltaNet layers' state of one sequence (0 without them) */
    size_t state_layer_floats; /* one layer's part of it (dn_state_floats) */
    size_t log_layer_floats; /* a verify's record of one entry for one layer (dn_log_floats) */
    size_t steps_log_floats; /* the same for every layer (n_dn_layers parts, in slot order) */
    int ckpt_max;          /* state checkpoints a sequence keeps (kv_state.c); 0 = none */
    int ckpt_interval;     /* a checkpoint each time a sequence passes a multiple of this; 0 = none */
    size_t ckpt_bytes;     /* the part of used that checkpoints hold */
    int window;            /* their window (positions) */
    bool mtp;              /* the MTP block's cache (layer info.n_layer, the last global slot) is held */
    uint8_t *layer_local;  /* (n_layer) 1 = the layer's K/V live in the local part */
    int *layer_slot;       /* (n_layer) the layer's index among the layers of its part (-1: no K/V);
                              a layer sharing an earlier layer's cache has that layer's slot */
    size_t budget, used;   /* bytes; used counts blocks held by sequences */
    int n_seqs;            /* live sequences (destroy asserts 0) */
    kv_block *free_list;   /* blocks released by sequences, reused before malloc */
    int n_free;            /* blocks on free_list (at most KV_FREE_KEEP) */
    pthread_mutex_t lock;  /* sequences may be created/destroyed on other threads than eval */
};

struct kv_seq {
    kv_pool *pool;
    int len;               /* tokens committed */
    int n_blocks;          /* blocks held (>= ceil(len / KV_BLOCK); more while a batch is pending) */
    int max_blocks;        /* capacity of blocks[]: ceil(n_ctx / KV_BLOCK) */
    kv_block **blocks;     /* (max_blocks) */
    int lmin;              /* positions below may have lost their local part (multiple of KV_BLOCK) */
    int pending;           /* engine scratch: entries of the current batch for this sequence */
    kv_block *cow_from;    /* kv_reserve scratch: the shared block this sequence is about to copy */
    const struct engine_ablation *ablation; /* engine_seq_ablate's, borrowed; NULL = none */
    float *state;          /* (n_dn_layers, state_layer_floats) Gated DeltaNet state, or NULL (none yet) */
    bool new_state;        /* kv_reserve scratch: this sequence gets its state in this reservation */
    struct kv_ckpt **ckpts; /* (ckpt_max + 1) its state checkpoints, positions increasing (kv_state.c) */
    int n_ckpts;
    int ckpt_want;         /* a position to checkpoint when a batch reaches it (kv_seq_checkpoint_at); 0 = none */
    struct kv_ckpt *ckpt_new; /* engine scratch: the checkpoint the current batch fills (kv_ckpt_begin) */
    float *steps;          /* a speculative verify's record (kv_seq_keep_steps), or NULL: the state before
                            * it (state_bytes), then (steps_cap, steps_log_floats) each entry's log, from
                            * which kv_state_rewind rebuilds the state after it (deltanet.h, dn_steps) */
    int steps_cap;         /* entries steps has room for (charged to the budget: kv_pool_steps_bytes) */
    int steps_want;        /* the next batch keeps this many (kv_seq_keep_steps); 0 = none */
    int steps_from, steps_n; /* log i rebuilds the state at length steps_from + 1 + i, i < steps_n */
    /* pool mtp: the main model's final-normed hidden state h of the newest evaluated positions,
     * position p's in row p % KV_MTP_ROWS when mtp_pos says p (-1: none); the MTP block at
     * position p reads h of p - 1 */
    float *mtp_h;          /* (KV_MTP_ROWS, n_embd) */
    int *mtp_pos;          /* (KV_MTP_ROWS) */
    int mtp_row;           /* engine scratch: the batch entry of this sequence last seen */
};

/* A copy of a sequence's whole recurrent state (state_bytes) as it was at length pos. Read-only
 * once committed, so forks share it: refs counts its holders (under the pool lock), and the
 * pool's byte count counts it once. */
typedef struct kv_ckpt {
    int pos;
    int refs;
    float *state;          /* (n_dn_layers, state_layer_floats), the layout of kv_seq.state */
} kv_ckpt;

/* The state of Gated DeltaNet layer `slot` (layer_weights.dn_slot) of s (deltanet.h's layout). */
static inline float *kv_dn_state(const kv_seq *s, int slot) {
    return s->state + (size_t)slot * s->pool->state_layer_floats;
}

/* ---- state checkpoints (kv_state.c) ----
 * A sequence with a recurrent state keeps up to ckpt_max copies of it at chosen lengths, so a
 * truncation goes back to the newest one at or below its target instead of to 0. The engine takes
 * them inside a batch: kv_ckpt_begin picks at most one length the batch reaches for a sequence
 * (the position asked for by kv_seq_checkpoint_at, else the last multiple of ckpt_interval) and
 * allocates its copy from the budget; the Gated DeltaNet layers fill it as their recurrence passes
 * that length (dn_job.snap); kv_ckpt_commit files it once the batch is done. */

/* The run-relative index of the entry after which s's checkpoint of this batch is taken (its
 * copy ready in ckpt_new), or -1: none wanted, or no room in the budget (best effort: the batch
 * goes on without it). s->pending holds the batch's entries. */
int kv_ckpt_begin(kv_seq *s);
/* Files ckpt_new (if any) among s's checkpoints, or frees it (and forgets the steps kept) when
 * the batch was given up. */
void kv_ckpt_commit(kv_seq *s, bool done);
/* Rewinds s's state to length n when the last batch kept the state there (kv_seq_keep_steps), else
 * to its newest checkpoint at or below n, and drops the checkpoints past n; returns the length
 * the state now has (0, zeroed, when nothing at or below n was kept). */
int kv_state_rewind(kv_seq *s, int n);
/* How many of s's batch entries (s->pending) keep the state after them (the first ones; never the
 * last), from what kv_seq_keep_steps asked for; 0 = none. */
int kv_steps_begin(kv_seq *s);
/* Makes child hold every checkpoint of parent (shared). Pool lock held. */
void kv_ckpt_share_locked(kv_seq *child, const kv_seq *parent);
/* Drops every checkpoint s holds. */
void kv_ckpt_release(kv_seq *s);
/* Bytes of the checkpoints s holds, shared ones included, and of its speculative steps. */
size_t kv_ckpt_held_bytes(const kv_seq *s);

/* The yield of a running step (kv_state.c): whether s has room to back its state up (one state
 * of kv_seq_keep_room, and no verify's steps in it); layer `slot`'s state copied there before the
 * layer runs, and back when the step is given up. */
bool kv_state_can_back_up(const kv_seq *s);
void kv_state_back_up(kv_seq *s, int slot);
void kv_state_restore_layer(kv_seq *s, int slot);

/* Layer `slot`'s part of the state before s's verify (kv_steps_begin), or NULL: none kept. */
static inline float *kv_dn_steps(const kv_seq *s, int slot) {
    return s->steps_n ? s->steps + (size_t)slot * s->pool->state_layer_floats : NULL;
}

/* Layer `slot`'s part of the first entry's log of s's verify, or NULL. */
static inline float *kv_dn_log(const kv_seq *s, int slot) {
    const kv_pool *p = s->pool;
    return s->steps_n ? s->steps + p->state_bytes / sizeof(float) + (size_t)slot * p->log_layer_floats : NULL;
}

/* Layer `slot`'s part of s's checkpoint in progress, or NULL when the batch takes none for s. */
static inline float *kv_dn_snap(const kv_seq *s, int slot) {
    return s->ckpt_new ? s->ckpt_new->state + (size_t)slot * s->pool->state_layer_floats : NULL;
}

/* Bytes before a block's payload: keeps the payload 64-byte aligned for vector loads. */
#define KV_BLOCK_HEADER 64

static inline uint8_t *kv_block_data(kv_block *b) { return (uint8_t *)b + KV_BLOCK_HEADER; }

/* The part of block `block` of s holding `layer`, the layers in that part, and the layer's slot. */
static inline uint8_t *kv_part(const kv_seq *s, int layer, int block, int *n_in_part, int *slot) {
    const kv_pool *p = s->pool;
    bool local = p->layer_local[layer];
    *n_in_part = local ? p->n_local : p->n_global;
    *slot = p->layer_slot[layer];
    return local ? s->blocks[block]->local : kv_block_data(s->blocks[block]);
}

/* The bytes of one kv head's key (or value) tile of `layer` in a block, and its kv heads. */
static inline size_t kv_tile_bytes(const kv_pool *p, int layer) {
    return p->layer_local[layer] ? p->local_tile_bytes : p->tile_bytes;
}
static inline int kv_layer_heads(const kv_pool *p, int layer) {
    return p->layer_local[layer] ? p->local_n_head_kv : p->n_head_kv;
}

/* The keys of `layer` in block `block` of s: n_head_kv key tiles (F16 / F32: (kv_dim, KV_BLOCK)
 * elements of the pool type). */
static inline void *kv_k_block(const kv_seq *s, int layer, int block) {
    const kv_pool *p = s->pool;
    int n, slot;
    uint8_t *base = kv_part(s, layer, block, &n, &slot);
    return base + (size_t)slot * (size_t)kv_layer_heads(p, layer) * kv_tile_bytes(p, layer);
}

/* The keys of kv head g of `layer` in block `block` of s: a (head_dim, KV_BLOCK) tile of elements of
 * the pool type, transposed (position j of the tile's row i at i * KV_BLOCK + j); Q8_0 / Q4_0 as
 * kv_quant.h lays them out. */
static inline void *kv_k_tile(const kv_seq *s, int layer, int block, int g) {
    return (uint8_t *)kv_k_block(s, layer, block) + (size_t)g * kv_tile_bytes(s->pool, layer);
}

/* The values of kv head g of `layer` in block `block` of s: (KV_BLOCK, head_dim) elements of the
 * pool type, the row of position block * KV_BLOCK + j at j * head_dim (Q8_0 / Q4_0: rows of GGUF
 * blocks, kv_quant_row_bytes apart: kv_quant.h). */
static inline void *kv_v_tile(const kv_seq *s, int layer, int block, int g) {
    const kv_pool *p = s->pool;
    int n, slot;
    uint8_t *base = kv_part(s, layer, block, &n, &slot);
    return base + (((size_t)n + (size_t)slot) * (size_t)kv_layer_heads(p, layer) + (size_t)g) * kv_tile_bytes(p, layer);
}

/*
 * Makes sure every sequence in seqs[0..n) (distinct) holds blocks for len + pending positions,
 * taking them from the pool, and that each block it is about to write into is its own (a shared,
 * partly filled last block is copied first). All or nothing: on ATTND_ERR_NOMEM (budget or malloc)
 * no sequence gains or swaps a block. The caller has checked len + pending <= n_ctx.
 */
attnd_status kv_reserve(kv_seq *const *seqs, int n, attnd_err *err);

/* Frees the local part of every block of s that no later query of s can see (every position of
 * it more than the window before s's length) and that s alone holds, and moves lmin past them.
 * Called after each evaluation; nothing to do without sliding-window layers. */
void kv_seq_trim_window(kv_seq *s);

#endif /* ATTND_KV_LAYOUT_H */
