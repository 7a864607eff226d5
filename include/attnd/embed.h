/*
 * embed.h — one vector (or one relevance score) per input, from one evaluation of many inputs.
 * Encoders (bert, ...) attend both ways within each input; decoders (qwen3 files of
 * Qwen3-Embedding / Qwen3-Reranker, or any decoder family) causally. No KV is kept afterwards:
 * a decoder's inputs go through a KV pool made for the call and destroyed before it returns.
 *
 *     model_pooling pool = model_pooling_type(m);          // the file's
 *     int dim = model_pool_dim(m, pool);
 *     embed_input in[2] = {{ids0, n0, NULL}, {ids1, n1, NULL}};
 *     float *out = malloc(sizeof(float) * 2 * dim);
 *     engine_embed(e, in, 2, POOL_FILE, out, &err);       // out + i * dim: input i's vector
 *
 * What the vector is, as llama.cpp computes it: the last hidden state after the model's final
 * norm (a decoder's output_norm; an encoder's last layer output), pooled per input. POOL_RANK:
 * the pooled row (an encoder's first token, a decoder's last; modern-bert: the mean of the rows)
 * through the classification head: cls (tanh(W x + b), when the file has it; modern-bert:
 * LayerNorm(gelu(W x)) with weight cls.norm), then cls.output (W x + b); a decoder's head outputs
 * are then a softmax (Qwen3-Reranker's [yes, no] rows: the score is out[0] = P(yes)), an
 * encoder's are raw logits (bge-reranker: one logit; apply a sigmoid for a 0..1 score).
 *
 * Changes to the agreed contract (/work/embed-contract.md):
 *   - POOL_FILE (-1): "the file's pooling", the value to pass when the caller does not override.
 *   - engine_embed_tokens: the per-token vectors (pooling none) the contract refers to.
 *   - model_pool_dim(m, pool): the floats per input engine_embed writes for a given pooling
 *     (model_embed_dim is model_pool_dim(m, model_pooling_type(m))); model_n_cls_out(m) the head's
 *     outputs (0 without a head).
 *   - embed_input.types: honoured (added to each token's embedding row of token_types) where the
 *     file has token types. llama.cpp always adds row 0 whatever the caller says (src/models/bert.cpp:
 *     "token types are hardcoded to zero"), so NULL gives llama.cpp's numbers; a type outside the
 *     file's count is ATTND_ERR_INVALID. Decoders ignore types.
 */
#ifndef ATTND_EMBED_H
#define ATTND_EMBED_H

#include <stdbool.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/engine.h"
#include "attnd/model.h"

/* The values of GGUF's <arch>.pooling_type (as llama.cpp numbers them). */
typedef enum model_pooling {
    POOL_FILE = -1, /* engine_embed: the file's (model_pooling_type) */
    POOL_NONE = 0,  /* one vector per token (not pooled) */
    POOL_MEAN = 1,
    POOL_CLS = 2,  /* the first token's */
    POOL_LAST = 3, /* the last token's */
    POOL_RANK = 4, /* a classification head (cls / cls.output tensors): relevance scores */
} model_pooling;

/* "none", "mean", "cls", "last", "rank" ("file" for POOL_FILE); "?" otherwise. Static strings. */
const char *model_pooling_name(model_pooling p);

/* What a model file is for, as bits: a decoder GENERATES; a file with a pooling type (or an
 * encoder) EMBEDS; a file with a classification head RANKS. */
enum { MODEL_ROLE_GENERATE = 1, MODEL_ROLE_EMBED = 2, MODEL_ROLE_RANK = 4 };
unsigned model_roles(const model *m);
/* The file's <arch>.pooling_type; a decoder without the key: POOL_LAST; an encoder without it:
 * POOL_CLS. Never POOL_FILE. */
model_pooling model_pooling_type(const model *m);
/* Floats per pooled vector for the file's pooling: n_embd, or (POOL_RANK) model_n_cls_out. */
int model_embed_dim(const model *m);
/* Floats per input engine_embed writes with pooling pool (POOL_FILE: the file's); 0 when m cannot
 * pool that way (POOL_RANK without a head, POOL_NONE). */
int model_pool_dim(const model *m, model_pooling pool);
/* The classification head's outputs (<arch>.classifier.output_labels' count, else 1); 0 when the
 * file has no head (no cls.output.weight). */
int model_n_cls_out(const model *m);
bool model_is_encoder(const model *m); /* attends both ways */

typedef struct embed_input {
    const int32_t *tokens; /* (n_tokens) already tokenized, special tokens included ([CLS] ... [SEP]); borrowed */
    int n_tokens;          /* 1 .. engine_max_batch(e), and at most the model's context */
    const uint8_t *types;  /* (n_tokens) token type per token (BERT segment ids), NULL = all 0 */
} embed_input;

/* Evaluates inputs in[0..n) (in as few passes as engine_max_batch allows; each input attends only
 * to itself, without padding compute) and writes input i's pooled vector to out + i * dim, dim =
 * model_pool_dim(m, pool). Raw: no L2 normalisation, no truncation (the caller does both).
 * pool = POOL_FILE for the file's (POOL_RANK needs the head; POOL_NONE is refused here). Errors:
 * ATTND_ERR_INVALID (bad token id or type, an input empty or longer than engine_max_batch or the
 * model's context, POOL_RANK without a head, POOL_NONE), ATTND_ERR_NOMEM. Nothing is kept after
 * the call. An encoder calls the engine's attention hook (engine_set_attention_cb) for every
 * query row, entry = the row's index over the whole call, weights over its input's every token
 * (attn_capture_params.inputs); a decoder calls none. Reentrancy as engine_eval: one thread per
 * engine. */
attnd_status engine_embed(engine *e, const embed_input *in, int n, model_pooling pool, float *out, attnd_err *err);

/* Every token's vector instead of one per input (pooling none): the inputs as engine_embed takes
 * them, out = (sum of n_tokens, n_embd) floats, input 0's tokens first; the same hidden states
 * engine_embed pools (after the final norm; through dense_2 / dense_3 when the file has them, as
 * llama.cpp does with pooling none). Errors as engine_embed. */
attnd_status engine_embed_tokens(engine *e, const embed_input *in, int n, float *out, attnd_err *err);

#endif /* ATTND_EMBED_H */
