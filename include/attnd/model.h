/*
 * model.h — decoder-only transformer weights (llama, qwen2/3, gemma2/3, phi3, smollm3, gpt-oss,
 * qwen35, qwen3next) loaded
 * from a GGUF file. The KV caches are in kv.h,
 * evaluation and the generation loop in engine.h. Knows nothing about HTTP, tokenizers or sampling.
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
    const char *arch; /* general.architecture: "llama", "qwen2", "qwen3", "gemma3", ... */
    const char *name; /* general.name or "" */
    int n_vocab, n_ctx, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    float rms_eps, rope_base;
    int rope_dims;
    uint64_t n_params;
    int n_local_layers; /* layers with sliding-window attention (0: every layer is global) */
    int window;         /* their window in positions (0 when none) */
    int n_shared_kv_layers; /* the last layers, which read an earlier layer's cache and keep none
                               (Gemma 4's attention.shared_kv_layers; 0 for most families) ... */
    int n_shared_local;     /* ... of them local (counted in n_local_layers too) */
    int head_dim_swa, n_head_kv_swa; /* the local layers' head size and KV heads (Gemma 4's differ
                                        from head_dim and n_head_kv, the global layers'); else equal */
    int n_expert, n_expert_used, n_ff_exp; /* Mixture of Experts: experts, used per token, their FFN
                                              width (0 for dense models) */
    int n_recurrent_layers; /* Gated DeltaNet layers (qwen35): a fixed-size state per sequence, no KV */
    int recurrent_every;    /* with them: every recurrent_every-th layer is full attention, the rest
                               DeltaNet (model_info_recurrent) */
    int recurrent_heads;    /* with them: the DeltaNet layers' value heads */
    int n_mtp_layers;   /* multi-token-prediction blocks in the file (nextn), not run by the main pass */
    bool mtp;           /* one of them is loaded to draft with (qwen35, qwen35moe, qwen3next: engine_mtp_step) */
    int kv_latent;      /* latent attention (deepseek2): values cached per token and layer, the
                           latent and the rotated key part (kv_lora_rank + rope dims), shared by
                           every head; 0 for per-head K and V */
    int kv_per_head;    /* with kv_latent: what per-head keys and values would hold per token and
                           layer instead, n_head (key_length_mla + value_length_mla) */
    bool rope_long;     /* LongRoPE: the long-context factors apply (the context it is run at,
                           model_run_context, is beyond the original context); false with the
                           short ones or without LongRoPE */
} model_info;

/* Whether layer l is a Gated DeltaNet layer (a linear-attention recurrence, no KV). */
static inline bool model_info_recurrent(const model_info *mi, int l) {
    return mi->n_recurrent_layers > 0 && (l + 1) % mi->recurrent_every != 0;
}

/* Loads and validates a GGUF model. Refuses unknown architectures and tensor types the engine
 * does not compute, naming them. On success *out owns the mapping. */
attnd_status model_load(model **out, const char *path, attnd_err *err);
void model_destroy(model *m); /* accepts NULL */

/* How a load makes the packed copies of the weights (quant_pack), for a load beside other work:
 * a server loading one model while others serve (issue 50's isolation). All zero: model_load's
 * way, every CPU of the engine's worker pool, one matrix per task. */
typedef struct model_load_opts {
    /* The copies made on the calling thread alone, in slices: the worker pool stays free for the
     * models that serve meanwhile (a busy pool runs their steps on one thread), and the load takes
     * only the caller's CPU (at the caller's priority). */
    bool pack_alone;
    /* With pack_alone: the file's bytes packed between two calls of pace (rounded down to whole
     * 16-row groups, at least one); 0: 1 MB. */
    size_t slice_bytes;
    /* With pack_alone: called on the calling thread before each slice, done and total the file's
     * bytes of the matrices packed so far and in all (done < total), to wait there while other
     * work runs. NULL: no calls. It must not call into this model (not yet returned). */
    void (*pace)(void *user, size_t done, size_t total);
    void *pace_user; /* pace's, borrowed */
} model_load_opts;

/* model_load, its packed copies made as opts says (NULL: model_load's way). The model is the
 * same either way, byte for byte. */
attnd_status model_load_with(model **out, const char *path, const model_load_opts *opts, attnd_err *err);
const model_info *model_info_get(const model *m);

/* The longest sequence m will be run at, when less than the file's context_length (the server's
 * ctx_size; 0 or more than the file's: the file's), before any engine or KV pool is made from m.
 * What changes: a LongRoPE file (Phi-3 128k) takes its short factors when n_ctx is at most
 * rope.scaling.original_context_length, as llama.cpp picks them for its context, and the long
 * ones beyond (model_info.rope_long says which). model_info.n_ctx stays the file's. Errors:
 * ATTND_ERR_NOMEM (m is unchanged then). Not thread-safe: call it right after model_load. */
attnd_status model_set_context(model *m, int n_ctx, attnd_err *err);
int model_run_context(const model *m); /* n_ctx of the last model_set_context, else the file's */
/* The underlying GGUF (borrowed, valid while m lives), e.g. for the tokenizer's metadata. */
const gguf_file *model_gguf(const model *m);

#endif /* ATTND_MODEL_H */
