/*
 * engine.h — batched evaluation of a model over KV caches (engine_eval), and the single-sequence
 * generation loop built on it (engine_generate). See model.h for the worked example.
 */
#ifndef ATTND_ENGINE_H
#define ATTND_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/kv.h"
#include "attnd/model.h"

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
 * engine_create, CPUs), the threads whose scratch the engine allocated up front. From the
 * thread that evaluates (between steps); engine_threads and engine_threads_in_use may be read
 * from any thread. */
void engine_set_threads(engine *e, int n_threads);
int engine_threads(const engine *e);
/* The threads a step may use now: engine_threads, or fewer while the worker pool's contention
 * guard holds a thread back (other busy processes kept descheduling a worker; see
 * engine/threads.c). Results never depend on it. */
int engine_threads_in_use(const engine *e);

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
 * Multi-token prediction (model_info.mtp: Qwen3.5's nextn block), the model's own draft. A pool
 * that caches the block (kv_pool_set_mtp, on by default for such a model) has engine_eval run it
 * over every batch, so its cache follows each sequence (truncation, forks, sessions) and each
 * sequence keeps the main model's hidden states of its newest positions. engine_mtp_step then
 * runs the block alone on n entries (distinct sequences of one pool): entry t at position pos
 * (>= its sequence's length) reads token and the hidden state h (NULL: the main model's of
 * pos - 1, as the sequence kept it), writes the block's cache at pos (past the sequence's length:
 * the next engine_eval of those positions overwrites it; the length does not change) and gives
 * n_vocab logits and n_embd floats of its own hidden state per entry (h_out, the h of the next
 * position's step). attnd/spec.h drafts with it. Errors: ATTND_ERR_INVALID (no MTP block cached,
 * a position before the sequence's length or past the context), ATTND_ERR_NOMEM (KV budget).
 */
typedef struct engine_mtp_entry {
    kv_seq *seq;
    int32_t token;
    int32_t pos;
    const float *h; /* (n_embd), borrowed for the call; NULL: the main model's of pos - 1 */
} engine_mtp_entry;
attnd_status engine_mtp_step(engine *e, const engine_mtp_entry *in, int n, float *logits, float *h_out,
                             attnd_err *err);

/*
 * Attention inspection (off by default, no cost when off): when set, engine_eval calls cb once
 * per (layer, head, query entry) with the softmax weights over the sequence's positions 0..n_keys-1,
 * serially, on the thread that called engine_eval. The weights pointer is valid during the call only.
 */
typedef void (*engine_attn_cb)(void *user, int entry, int layer, int head, const float *weights, int n_keys);
void engine_set_attention_cb(engine *e, engine_attn_cb cb, void *user);
/* Optional, with the callback: asked (with the callback's user) before anything is computed for
 * an (entry, layer, head); false skips it at no cost, so inspecting one sequence of a batch, or
 * one layer, costs the rest nothing. NULL (the default) = every one. attnd/attn_capture.h builds
 * on both. */
typedef bool (*engine_attn_want)(void *user, int entry, int layer, int head);
void engine_set_attention_filter(engine *e, engine_attn_want want);

/* Residual-stream inspection (off by default, no cost when off): when set, engine_eval calls cb
 * once per (layer, entry) after that layer, with the entry's position and its residual stream
 * x (n_embd floats, valid during the call only), serially, on the thread that called engine_eval
 * (the logit lens of attnd/attn_capture.h builds on it). The user pointer is the attention
 * callback's (engine_set_attention_cb). */
typedef void (*engine_resid_cb)(void *user, int entry, int layer, int pos, const float *x, int n_embd);
void engine_set_residual_cb(engine *e, engine_resid_cb cb);

/* Expert inspection (Mixture-of-Experts models; off by default, no cost when off): when set,
 * engine_eval calls cb once per (MoE layer, entry) with the entry's position and the k =
 * n_expert_used experts its token was routed to, most probable first, and their weights in the
 * layer's sum (valid during the call only), serially, on the thread that called engine_eval:
 * "which experts this token used". The user pointer is the attention callback's
 * (engine_set_attention_cb). */
typedef void (*engine_expert_cb)(void *user, int entry, int layer, int pos, const int *experts, const float *weights,
                                 int k);
void engine_set_expert_cb(engine *e, engine_expert_cb cb);

/* Gated DeltaNet inspection (hybrid models; off by default, no cost when off): when set,
 * engine_eval calls cb once per (DeltaNet layer, entry) after the layer's recurrence, with the
 * entry's position and what the recurrence read and wrote for it (valid during the call only),
 * serially, on the thread that called engine_eval. With S the (d_k, d_v) state of a value head h
 * (reading key head engine_dn_key_head(io, h)): S <- e^g S; u = beta (v - S^T k); S <- S + k u^T;
 * o = S^T q / sqrt(d_k). The user pointer is the attention callback's (engine_set_attention_cb). */
typedef struct engine_dn_io {
    int hk, hv, dk, dv;
    bool grouped;          /* value head h reads key head h / (hv / hk); false: h mod hk */
    const float *q, *k;    /* (hk, dk) after the conv, each head L2-normalised */
    const float *v;        /* (hv, dv) after the conv */
    const float *beta, *g; /* (hv) sigmoid(b) and the log decay a softplus(alpha + dt_bias) <= 0 */
    const float *o;        /* (hv, dv) the recurrence's output, before the gated RMSNorm */
} engine_dn_io;
typedef void (*engine_dn_cb)(void *user, int entry, int layer, int pos, const engine_dn_io *io);
void engine_set_deltanet_cb(engine *e, engine_dn_cb cb);
static inline int engine_dn_key_head(const engine_dn_io *io, int h) {
    return io->grouped ? h / (io->hv / io->hk) : h % io->hk;
}

/* Matrix-input inspection (off by default, no cost when off): when set, engine_eval calls cb
 * before each weight matrix of a layer (and the output head) is applied, with the weight's GGUF
 * tensor name, the n rows of `cols` floats it multiplies (x, valid during the call only) and, for
 * the experts of a MoE tensor, the expert those rows go to (-1 for a dense matrix): one call per
 * expert in use. Serially, on the thread that called engine_eval; `attnd imatrix` sums the
 * squares of these rows. The user pointer is the attention callback's (engine_set_attention_cb). */
typedef void (*engine_matmul_cb)(void *user, const char *weight, int expert, const float *x, int n, int cols);
void engine_set_matmul_cb(engine *e, engine_matmul_cb cb);

/* Giving a step up (off by default; fn NULL): engine_eval asks fn(user) after each layer but the
 * last whether to stop; on true it returns ATTND_ERR_BUSY having changed nothing a later call
 * sees: no sequence grows, and evaluating the same batch again gives the same results (it writes
 * the same KV rows again). A server uses it to let a newly arrived request start before a long
 * step ends. Not asked for a batch with an ablating sequence, nor while an inspection hook is set
 * (they see each layer once). On a model with a recurrent state, only when every sequence of the
 * batch has room to back it up (kv_seq_keep_room: one state each): each DeltaNet layer's state is
 * copied there before the layer runs, and back when the step is given up. */
typedef bool (*engine_yield_fn)(void *user);
void engine_set_yield(engine *e, engine_yield_fn fn, void *user);

/*
 * Head ablation, per sequence (no cost when no sequence of a batch has one): every evaluation
 * of s replaces the output o of each listed (layer, query head), before the output projection
 * W_O, by base + scale (o - base): base = 0 (ENGINE_ABLATE_ZERO) or the head's own mean output
 * (ENGINE_ABLATE_MEAN) over the positions of s evaluated with this ablation so far, this one
 * included (causal: position p's mean never sees a later position). scale 0 removes the head
 * entirely; 1 leaves it alone. a is borrowed until it is replaced or cleared (NULL); a fork does
 * not inherit it. Checked by engine_ablation_check.
 */
typedef enum engine_ablate_mode {
    ENGINE_ABLATE_ZERO = 0,
    ENGINE_ABLATE_MEAN = 1,
} engine_ablate_mode;

typedef struct engine_ablation_head {
    int layer, head;
    float scale;             /* 0 = the head removed */
    engine_ablate_mode mode;
} engine_ablation_head;

typedef struct engine_ablation {
    const engine_ablation_head *heads; /* (n), borrowed */
    int n;
    /* Mean heads only (NULL when none): the running sums of the heads' outputs, (n, head_dim),
     * and the positions each holds, (n); the caller's storage, zeroed before the sequence's
     * first evaluation, written by engine_eval. */
    double *mean_sum;
    int *mean_n;
} engine_ablation;

/* ATTND_ERR_INVALID naming the entry at fault when a layer or head is out of the model's range,
 * a scale is not finite, a mode unknown, or a mean head has no mean_sum storage. */
attnd_status engine_ablation_check(const model_info *mi, const engine_ablation *a, attnd_err *err);
void engine_seq_ablate(kv_seq *s, const engine_ablation *a);

// ---- Generation loop ------------------------------------------------------------------------

typedef struct spec spec; /* attnd/spec.h */

typedef struct engine_gen {
    int n_predict;                                     /* tokens to generate at most */
    /* Speculative decoding (attnd/spec.h), borrowed; NULL = off. Its history is reset and fed
     * the prompt and every generated token. Off for a model spec_supported refuses. */
    spec *spec;
    /* Picks the next token from logits[n_vocab]; NULL = greedy (sampler_argmax, attnd/sampler.h). A negative
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
    int n_prefill, n_decode;                           /* prompt tokens; generated tokens after the first */
    int n_drafted, n_accepted;                         /* speculation: tokens proposed, and kept */
} engine_timings;

/*
 * One sequence's generation: evaluates prompt[0..n_prompt) after what s already holds (prefill in
 * chunks of engine_max_batch, logits only for the last token), then repeatedly picks a token,
 * reports it, and evaluates it (one decode step, O(length)); with g->spec, it evaluates the token
 * and the drafted ones as one batch and keeps the drafts the picks agree with (attnd/spec.h), so
 * pick and on_token see the same logits and calls as without. out (n_predict ids, may be NULL)
 * receives the generated tokens and *n_out their count. The last generated token is not
 * evaluated, so s ends holding prompt + all but the last generated token. timings may be NULL.
 * Allocates nothing per token (one n_vocab logits buffer per call).
 */
attnd_status engine_generate(engine *e, kv_seq *s, const int32_t *prompt, int n_prompt, const engine_gen *g,
                             int32_t *out, int *n_out, engine_timings *timings, attnd_err *err);

#endif /* ATTND_ENGINE_H */
