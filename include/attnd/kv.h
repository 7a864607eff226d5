/*
 * kv.h — per-sequence KV caches: a kv_pool is a byte budget of KV memory handed out in blocks of
 * token positions; a kv_seq is one sequence's cache, grown block by block from its pool.
 *
 * Thread-safety: a pool's block accounting is locked, so sequences not in an evaluation may be
 * created, truncated and destroyed on any thread; a sequence in an engine_eval belongs to that
 * evaluation's thread until it returns.
 */
#ifndef ATTND_KV_H
#define ATTND_KV_H

#include <stddef.h>

#include "attnd/common.h"
#include "attnd/model.h"

typedef enum kv_type { KV_F16 = 0, KV_F32 = 1 } kv_type;

typedef struct kv_pool kv_pool;
typedef struct kv_seq kv_seq;

/* Sequences take memory in blocks of 64 token positions (all layers' K and V), allocated on first
 * use: the budget is a limit, not an up-front allocation (SIZE_MAX = no limit). A budget below one
 * block is ATTND_ERR_INVALID. */
attnd_status kv_pool_create(kv_pool **out, const model *m, size_t budget_bytes, kv_type type, attnd_err *err);
void kv_pool_destroy(kv_pool *p); /* all its sequences must be destroyed first */
size_t kv_pool_bytes_used(const kv_pool *p); /* blocks held by sequences */
size_t kv_pool_bytes_budget(const kv_pool *p);
/* Bytes one token position takes in every layer's K and V. */
size_t kv_pool_bytes_per_token(const kv_pool *p);

/* Without a pool: bytes one token position takes (all layers' K and V) for model m, and the
 * bytes one full context of n_ctx positions takes (whole blocks), in the given type. */
size_t kv_bytes_per_token(const model *m, kv_type type);
size_t kv_context_bytes(const model *m, int n_ctx, kv_type type);

attnd_status kv_seq_create(kv_seq **out, kv_pool *pool, attnd_err *err);
void kv_seq_destroy(kv_seq *s); /* returns its blocks to the pool; accepts NULL */
int kv_seq_len(const kv_seq *s); /* tokens cached */
size_t kv_seq_bytes(const kv_seq *s); /* blocks it holds */
/* Keeps the first n tokens and returns blocks no longer needed; n >= len changes nothing. */
void kv_seq_truncate(kv_seq *s, int n);

#endif /* ATTND_KV_H */
