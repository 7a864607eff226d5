/*
 * model.h — the transformer engine: Llama-family decoder weights, per-sequence KV caches and
 * batched evaluation. Knows nothing about HTTP, tokenizers or sampling.
 *
 * Objects and ownership:
 *   model     weights mmapped read-only from a GGUF file, plus hyper-parameters. Immutable
 *             after load; shared by every sequence and thread.
 *   kv_pool   a byte budget of KV memory, handed out in fixed-size blocks of tokens.
 *   kv_seq    one sequence's KV cache (grows block by block from its pool). Owned by the caller.
 *   engine    scratch buffers and thread settings for evaluation; one per evaluating thread
 *             (the server's scheduler owns exactly one). Allocated once: no allocation per token.
 *
 *     model *m; engine *e; kv_pool *pool; kv_seq *s; attnd_err err;
 *     model_load(&m, "m.gguf", &err);
 *     kv_pool_create(&pool, m, 256 << 20, KV_F16, &err);
 *     engine_create(&e, m, 512, 0, &err);          // up to 512 tokens per eval, all cores
 *     kv_seq_create(&s, pool, &err);
 *     batch_entry b[3] = {{s, 1, 0, false}, {s, 415, 1, false}, {s, 461, 2, true}};
 *     float *logits = malloc(sizeof(float) * model_info_get(m)->n_vocab);
 *     engine_eval(e, b, 3, logits, &err);          // prefill; logits of the last token
 *
 * Thread-safety: model is read-only and shareable; an engine and the kv_seqs it evaluates must be
 * used by one thread at a time. A kv_pool's block accounting is locked, so sequences not in an
 * evaluation may be created, truncated and destroyed on other threads.
 */
#ifndef ATTND_MODEL_H
#define ATTND_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/gguf.h"

typedef struct model model;

typedef struct model_info {
    const char *arch; /* "llama" or "qwen2" */
    const char *name; /* general.name or "" */
    int n_vocab, n_ctx, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    float rms_eps, rope_base;
    int rope_dims;
    uint64_t n_params;
} model_info;

/* Loads and validates a GGUF model. Refuses unknown architectures and tensor types the engine
 * does not compute, naming them. On success *out owns the mapping. */
attnd_status model_load(model **out, const char *path, attnd_err *err);
void model_destroy(model *m); /* accepts NULL */
const model_info *model_info_get(const model *m);
/* The underlying GGUF (borrowed, valid while m lives), e.g. for the tokenizer's metadata. */
const gguf_file *model_gguf(const model *m);

// ---- KV cache -------------------------------------------------------------------------------

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

attnd_status kv_seq_create(kv_seq **out, kv_pool *pool, attnd_err *err);
void kv_seq_destroy(kv_seq *s); /* returns its blocks to the pool; accepts NULL */
int kv_seq_len(const kv_seq *s); /* tokens cached */
size_t kv_seq_bytes(const kv_seq *s); /* blocks it holds */
/* Keeps the first n tokens and returns blocks no longer needed; n >= len changes nothing. */
void kv_seq_truncate(kv_seq *s, int n);

// ---- Evaluation -----------------------------------------------------------------------------

typedef struct batch_entry {
    kv_seq *seq;
    int32_t token;
    int32_t pos;      /* must equal the sequence's length at this point of the batch */
    bool want_logits; /* copy this entry's logits out */
} batch_entry;

typedef struct engine engine;

/* max_batch: most entries one engine_eval accepts. n_threads <= 0: the CPUs this process may
 * run on. */
attnd_status engine_create(engine **out, const model *m, int max_batch, int n_threads, attnd_err *err);
void engine_destroy(engine *e);
int engine_max_batch(const engine *e);
const model *engine_model(const engine *e); /* borrowed */
/* n_threads <= 0: the CPUs this process may run on. Capped at max(n_threads given to
 * engine_create, CPUs), the threads whose scratch the engine allocated up front. */
void engine_set_threads(engine *e, int n_threads);
int engine_threads(const engine *e);

/*
 * Evaluates n entries in one pass over the weights: any mix of several tokens of one sequence
 * (prefill, matrix-matrix) and single tokens of many sequences (decode). Entries of one sequence
 * must appear in increasing, contiguous positions starting at its current length. Each sequence's
 * KV cache is extended by its entries. logits receives n_vocab floats per entry with
 * want_logits, in entry order (may be NULL when no entry wants logits).
 * All sequences of one batch must come from the same kv_pool.
 * Errors: ATTND_ERR_INVALID (bad token id, position, n > max_batch, context overflow),
 * ATTND_ERR_NOMEM (KV pool budget exhausted; nothing was appended to any sequence).
 */
attnd_status engine_eval(engine *e, const batch_entry *entries, int n, float *logits, attnd_err *err);

/*
 * Attention inspection (off by default, no cost when off): when set, engine_eval calls cb once
 * per (layer, head, query entry) with the softmax weights over the sequence's positions 0..n_keys-1.
 * The weights pointer is valid during the call only.
 */
typedef void (*engine_attn_cb)(void *user, int entry, int layer, int head, const float *weights, int n_keys);
void engine_set_attention_cb(engine *e, engine_attn_cb cb, void *user);

// ---- Generation loop ------------------------------------------------------------------------

/* Index of the largest logit; ties go to the lowest id (greedy decoding). */
int32_t engine_argmax(const float *logits, int n_vocab);

typedef struct engine_gen {
    int n_predict;                                     /* tokens to generate at most */
    /* Picks the next token from logits[n_vocab]; NULL = greedy (engine_argmax). A negative
     * return aborts generation with ATTND_ERR_INVALID. */
    int32_t (*pick)(void *user, const float *logits);
    void *pick_user;
    /* Called with each generated token after it is chosen; return false to stop (end of
     * generation token, stop string, client gone...). NULL = never stop early. */
    bool (*on_token)(void *user, int32_t id);
    void *token_user;
} engine_gen;

typedef struct engine_timings {
    double prefill_ms, decode_ms;
    int n_prefill, n_decode;                           /* tokens evaluated in each phase */
} engine_timings;

/*
 * One sequence's generation: evaluates prompt[0..n_prompt) after what s already holds (prefill in
 * chunks of engine_max_batch, logits only for the last token), then repeatedly picks a token,
 * reports it, and evaluates it (one decode step, O(length)). out (n_predict ids, may be NULL)
 * receives the generated tokens and *n_out their count. The last generated token is not
 * evaluated, so s ends holding prompt + all but the last generated token. timings may be NULL.
 * Allocates nothing per token (one n_vocab logits buffer per call).
 */
attnd_status engine_generate(engine *e, kv_seq *s, const int32_t *prompt, int n_prompt, const engine_gen *g,
                             int32_t *out, int *n_out, engine_timings *timings, attnd_err *err);

#endif /* ATTND_MODEL_H */
