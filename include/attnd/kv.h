/*
 * kv.h — per-sequence KV caches: a kv_pool is a byte budget of KV memory handed out in blocks of
 * token positions; a kv_seq is one sequence's cache, grown block by block from its pool.
 *
 * A sequence can be forked: the child starts with the parent's tokens by sharing the parent's
 * blocks (reference-counted, no copy), and either side copies a shared block only when it first
 * writes into it — the partly filled last block, at most one per sequence. n continuations of one
 * prompt thus cost the prompt once plus one block each:
 *
 *     kv_seq *prompt, *child[N];
 *     ...evaluate the prompt into `prompt`...
 *     for (int i = 0; i < N; i++) kv_seq_fork(&child[i], prompt, &err);
 *     kv_seq_destroy(prompt);          // the children keep the blocks alive
 *     ...engine_eval batches of one token per child...
 *
 * Thread-safety: a pool's block accounting is locked, so sequences not in an evaluation may be
 * created, forked, truncated and destroyed on any thread; a sequence in an engine_eval belongs to
 * that evaluation's thread until it returns (and cannot be forked meanwhile). Sequences sharing
 * blocks may be in different evaluations at once: shared blocks are only read.
 */
#ifndef ATTND_KV_H
#define ATTND_KV_H

#include <stddef.h>

#include "attnd/common.h"
#include "attnd/model.h"

/* What the cache holds per element. Q8_0 and Q4_0 hold each position's head_dim values of a kv
 * head in blocks of 32 with one F16 scale each (GGUF's Q8_0 / Q4_0 values): 34 / 18 bytes per 32
 * values against F16's 64, for models whose head_dim is a multiple of 32 (kv_pool_create refuses
 * others). Attention reads the quantized tiles directly. */
typedef enum kv_type { KV_F16 = 0, KV_F32 = 1, KV_Q8_0 = 2, KV_Q4_0 = 3 } kv_type;

/* "f16", "f32", "q8_0", "q4_0" (what kv_type_parse reads; static strings). */
const char *kv_type_name(kv_type type);
/* name as above (case-insensitive) into *out; ATTND_ERR_INVALID for anything else. */
attnd_status kv_type_parse(const char *name, kv_type *out);
/* NULL when model m can cache type; else why not (a static string, e.g. head_dim not a multiple of
 * 32 for Q8_0 / Q4_0). */
const char *kv_type_unsupported(const model *m, kv_type type);

typedef struct kv_pool kv_pool;
typedef struct kv_seq kv_seq;

/* Sequences take memory in blocks of 64 token positions (all layers' K and V), allocated on first
 * use: the budget is a limit, not an up-front allocation (SIZE_MAX = no limit). A budget below one
 * block, or a type m cannot cache (kv_type_unsupported), is ATTND_ERR_INVALID. */
attnd_status kv_pool_create(kv_pool **out, const model *m, size_t budget_bytes, kv_type type, attnd_err *err);
void kv_pool_destroy(kv_pool *p); /* all its sequences must be destroyed first */
size_t kv_pool_bytes_used(const kv_pool *p); /* blocks held by sequences, each shared block once */
size_t kv_pool_bytes_budget(const kv_pool *p);
/* Bytes one token position takes in every layer's K and V. */
size_t kv_pool_bytes_per_token(const kv_pool *p);
/* Bytes one sequence of n_tokens may hold: whole blocks, so at least n_tokens * bytes_per_token,
 * and its recurrent state (kv_state_bytes) with the pool's checkpoints of it (kv_pool_set_checkpoints;
 * so n_tokens = 0 gives the state and its checkpoints alone). */
size_t kv_pool_bytes_for(const kv_pool *p, int n_tokens);

/* Without a pool: bytes one token position takes (all layers' K and V) for model m, and the
 * bytes one full context of n_ctx positions takes (whole blocks), in the given type. */
size_t kv_bytes_per_token(const model *m, kv_type type);
/* The part of kv_bytes_per_token of the sliding-window (local = true) or the other layers. A
 * sequence keeps the local layers' positions only while a later query can see them, so they hold
 * about window + 2 blocks of positions however long the sequence: kv_context_bytes counts that. */
size_t kv_layer_bytes_per_token(const model *m, kv_type type, bool local);
size_t kv_context_bytes(const model *m, int n_ctx, kv_type type);
/* The recurrent state one sequence keeps whatever its length (Gated DeltaNet layers: conv tail and
 * state matrix, f32), counted in the budget like blocks; 0 for a model without such layers.
 * kv_pool_bytes_for and kv_context_bytes include it. */
size_t kv_state_bytes(const model *m);

/* A model with an MTP block (model_info.mtp) caches it as one more layer, so that it can draft
 * (engine_mtp_step); off, the pool holds the main layers only and the engine never runs the block.
 * Set before the pool has sequences; ATTND_ERR_INVALID after, or to turn on a model without one.
 * kv_bytes_per_token and kv_context_bytes count the block. */
attnd_status kv_pool_set_mtp(kv_pool *p, bool on, attnd_err *err);
bool kv_pool_mtp(const kv_pool *p);

attnd_status kv_seq_create(kv_seq **out, kv_pool *pool, attnd_err *err);
void kv_seq_destroy(kv_seq *s); /* returns its blocks to the pool; accepts NULL */
int kv_seq_len(const kv_seq *s); /* tokens cached */
kv_pool *kv_seq_pool(const kv_seq *s); /* borrowed: the pool s takes its blocks from */
size_t kv_seq_bytes(const kv_seq *s); /* blocks, state and checkpoints it holds, shared ones included */
size_t kv_seq_bytes_shared(const kv_seq *s); /* the part of kv_seq_bytes held by other sequences too */
/* Keeps the first n tokens and gives up blocks no longer needed (a shared block goes back to the
 * pool when its last holder gives it up); n >= len changes nothing. With sliding-window layers,
 * positions that fell out of every window were freed: when position n's window would need them,
 * the sequence is truncated to 0 instead (kv_seq_len says what was kept). With Gated DeltaNet
 * layers (kv_state_bytes > 0) every n < len truncates to the newest state checkpoint at or below n,
 * or to 0 without one: their state cannot be cut back. */
void kv_seq_truncate(kv_seq *s, int n);

/*
 * Recurrent state checkpoints (models with Gated DeltaNet layers; nothing for others). A sequence
 * keeps up to `max` copies of its state at lengths it passed, and a truncation to n goes back to
 * the newest one at or below n instead of to 0 (kv_seq_len says where: the caller recomputes the
 * tokens after it). The engine takes them inside its batches: once a sequence's batch reaches a
 * multiple of `interval` (0 = never), or the length kv_seq_checkpoint_at asked for (which wins when
 * one batch reaches both); at most one per sequence per batch. Beyond `max`, older ones thin out
 * (recent ones dense, older ones sparse: engine/kv_state.c). Each takes kv_state_bytes from the
 * budget when taken, and none is taken when the budget has no room; forks share them (counted
 * once). kv_pool_bytes_for counts `max` of them per sequence. Set before the pool has sequences;
 * max 0..64 (0 = off, the default), else ATTND_ERR_INVALID.
 */
attnd_status kv_pool_set_checkpoints(kv_pool *p, int max, int interval, attnd_err *err);
int kv_pool_checkpoints(const kv_pool *p);           /* max per sequence (0 without a recurrent state) */
size_t kv_pool_checkpoint_bytes(const kv_pool *p);   /* the part of kv_pool_bytes_used checkpoints hold */
/* Copies s's state as it is now (a turn's end), if checkpoints are on and s has none at its length
 * yet; false when none was taken (off, nothing to copy, or no room in the budget). */
bool kv_seq_checkpoint(kv_seq *s);
/* Asks for a checkpoint when an evaluation brings s to length pos (> its length; else the request
 * is cleared): e.g. a prompt's end, before the last tokens an edited turn may change. */
void kv_seq_checkpoint_at(kv_seq *s, int pos);
/* Speculative decoding: the next evaluation of s keeps what rebuilds the state after each of its
 * first n entries (never after its last), so a truncation back into that batch (rejected drafts)
 * is exact. The room for it (kv_pool_steps_bytes: one state and a small log per entry) stays with
 * s, from the budget, for the verifies after it, until kv_seq_keep_steps(s, 0) or its destruction. false (nothing asked) when the budget or memory has
 * no room: the caller does not draft. Always true for models without a recurrent state (their
 * truncations are exact) and for n <= 0 (which gives the room back). */
bool kv_seq_keep_steps(kv_seq *s, int n);
/* The room of kv_seq_keep_steps alone (nothing asked of the next evaluation): with room for one
 * state, an evaluation of s may be given up midway (engine_set_yield) on a model with a recurrent
 * state; without it, such a model's evaluations holding s never yield. Same errors and return. */
bool kv_seq_keep_room(kv_seq *s, int n);
/* Bytes of the room kv_seq_keep_steps(s, n) or kv_seq_keep_room(s, n) takes on a sequence of p
 * (0 without a recurrent state, or for n <= 0). */
size_t kv_pool_steps_bytes(const kv_pool *p, int n);
/* The positions of s's checkpoints, oldest first, into pos[0..max); returns how many it holds. */
int kv_seq_checkpoints(const kv_seq *s, int *pos, int max);

/*
 * A new sequence in parent's pool holding parent's tokens, sharing all of parent's blocks. Takes
 * no pool memory until one of them writes into a shared block; the two are independent
 * afterwards (truncate, extend, destroy in any order). parent is only read and must not be in an
 * evaluation. A recurrent state (kv_state_bytes) is copied at once, from the budget. Errors:
 * ATTND_ERR_NOMEM (the block table or the state could not be allocated, or the budget has no room
 * for the state).
 */
attnd_status kv_seq_fork(kv_seq **out, const kv_seq *parent, attnd_err *err);

#endif /* ATTND_KV_H */
