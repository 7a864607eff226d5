/*
 * embed_eval.h — (engine-private) what the embeddings path (embed.c, attnd/embed.h) takes from the
 * forward pass (engine.c) and the loader (model.c), and what model.c asks of it at load.
 */
#ifndef ATTND_EMBED_EVAL_H
#define ATTND_EMBED_EVAL_H

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

#endif /* ATTND_EMBED_EVAL_H */
