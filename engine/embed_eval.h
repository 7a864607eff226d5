/*
 * embed_eval.h — (engine-private) what the embeddings path (embed.c, attnd/embed.h) takes from the
 * forward pass (engine.c) and the loader (model.c), and what model.c asks of it at load.
 */
#ifndef ATTND_EMBED_EVAL_H
#define ATTND_EMBED_EVAL_H

#include <math.h>

#include "attnd/embed.h"
#include "attnd/engine.h"
#include "model_internal.h"

/* engine_eval, but each entry that wants logits gets its final-normed hidden state (n_embd floats,
 * in entry order) in hidden instead; no inspection or yield hook of e is called. The sequences
 * grow as with engine_eval. Errors as engine_eval. */
attnd_status engine_eval_hidden(engine *e, const batch_entry *entries, int n, float *hidden, attnd_err *err);

/* model.c's lookups, for the loaders of embed.c: a (rows, cols) matrix of a computable type, or a
 * vector of n as F32 (malloc'd); absent and optional gives an empty weight / NULL. Each marks its
 * tensor read. */
attnd_status model_find_matrix(model *m, const char *name, int64_t rows, int64_t cols, bool required, weight *out,
                               attnd_err *err);
attnd_status model_load_vector(model *m, const char *name, int64_t n, bool required, float **out, attnd_err *err);

/* At load, after the weights (embed.c): the pooling type, the classification head. */
attnd_status embed_model_load(model *m, const char *arch, attnd_err *err);
void embed_model_free(model *m); /* what embed_model_load allocated; m's fields may be zero */

/* The engine's attention inspection hooks (engine_set_attention_cb / _filter): encoders call
 * them with each query's weights over its own input (entry = the token's index over the whole
 * engine_embed call, n_keys = its input's length). */
void engine_attn_hooks(const engine *e, engine_attn_cb *cb, engine_attn_want *want, void **user);

/* embed.c: input's vector into out from its hidden rows h (n_rows, n_embd): the mean of the rows
 * (n_rows > 1) or the one row; through the head for POOL_RANK, through dense_2 and dense_3 for the
 * others when the file has them. scratch: embed_scratch_floats(m) floats. */
void embed_pool(const model *m, model_pooling pool, const float *h, int n_rows, float *out, float *scratch);
size_t embed_scratch_floats(const model *m);

/* GELU, tanh form (ggml_gelu's formula; ggml's CPU backend also rounds its input and output to
 * F16 through a table, which attnd does not copy: the float64 reference is the exact function). */
static inline float embed_gelu(float x) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x)));
}

/* encoder.c: a post_ln encoder's weights (after token_embd, from load_weights), what they
 * allocated (from embed_model_free), and engine_embed's evaluation for encoders (inputs checked). */
attnd_status encoder_load_weights(model *m, attnd_err *err);
void encoder_free(model *m);
attnd_status encoder_embed(engine *e, const embed_input *in, int n, model_pooling pool, float *out, attnd_err *err);

#endif /* ATTND_EMBED_EVAL_H */
