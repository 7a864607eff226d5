/*
 * embreq.h — the embedding request as pure functions (server-private): OpenAI's POST
 * /v1/embeddings and Ollama's POST /api/embed and legacy /api/embeddings bodies become one
 * embreq (inputs as text or token ids, the output's shape), and pooled vectors become each API's
 * answer. No model, no HTTP: embed_http.c tokenizes, runs the scheduler and calls these.
 *
 *   OpenAI   input: a string, an array of strings, an array of token ids, or an array of such
 *            arrays (strings and id arrays may mix); encoding_format float | base64 (the
 *            little-endian float32 bytes); dimensions (Matryoshka: the first n components, then
 *            normalised again); model, user (accepted); llama-server's embd_normalize (-1 none,
 *            0 max-abs scaled to int16, 2 Euclidean (the default), p > 0 the p-norm); truncate
 *            (false by default: an input over the token cap is a 400; true cuts it, as TEI and
 *            Ollama do).
 *   Ollama   /api/embed: input a string or an array of strings, truncate (true by default, as
 *            Ollama), dimensions, options and keep_alive (accepted), L2-normalised vectors;
 *            /api/embeddings: prompt → one raw (not normalised) embedding, as Ollama answers it.
 */
#ifndef ATTND_SERVER_EMBREQ_H
#define ATTND_SERVER_EMBREQ_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

typedef enum embreq_api {
    EMBREQ_OPENAI,        /* POST /v1/embeddings */
    EMBREQ_OLLAMA,        /* POST /api/embed */
    EMBREQ_OLLAMA_LEGACY, /* POST /api/embeddings */
} embreq_api;

/* One input: text to tokenize, or token ids given by the client. */
typedef struct embreq_item {
    const char *text;     /* borrowed from the body; NULL when ids */
    size_t len;
    int32_t *ids;         /* (n_ids) owned, when the client sent ids */
    int n_ids;
} embreq_item;

/* The norm embd_normalize picks (llama-server's numbers). */
enum { EMBREQ_NORM_NONE = -1, EMBREQ_NORM_MAXABS = 0, EMBREQ_NORM_L2 = 2 };

typedef struct embreq {
    embreq_api api;
    embreq_item *items;   /* (n_items) owned */
    int n_items;
    const char *model;    /* borrowed from the body; "" when not given */
    bool base64;          /* encoding_format "base64" */
    int dimensions;       /* 0 = the model's whole vector */
    int norm;             /* EMBREQ_NORM_* or a p-norm's p */
    bool truncate;        /* cut an over-long input to the cap rather than refuse it */
} embreq;

/* Validates a body of api. max_inputs caps the inputs (config embed_max_inputs); n_vocab bounds
 * token ids. On error *param names the field (static) and the status is ATTND_ERR_INVALID
 * (ATTND_ERR_NOMEM out of memory). The strings stay borrowed from body: keep it alive. out is
 * freed with embreq_free whatever the status. */
attnd_status embreq_parse(const json_t *body, embreq_api api, int max_inputs, int n_vocab, embreq *out,
                          const char **param, attnd_err *err);
void embreq_free(embreq *r); /* accepts a zeroed or half-parsed request */

/* The vector an API returns from a pooled one: the first dims of raw[0..dim) (dims <= 0 or
 * above dim: all), normalised with norm (EMBREQ_NORM_*, p > 0), into out (dims floats). A zero
 * vector stays zero. Returns the number of floats written. */
int embreq_finish(const float *raw, int dim, int dims, int norm, float *out);

/* Standard base64 (with padding) of n bytes into a NUL-terminated malloc'd string; NULL when out
 * of memory. */
char *embreq_base64(const void *p, size_t n);

/* The answer (new reference; NULL when out of memory). vecs (n_items, dim) are finished vectors
 * (embreq_finish); n_tokens is the tokens evaluated (usage / prompt_eval_count); model the name
 * to answer with when the request gave none; total_ns Ollama's total_duration. */
json_t *embreq_answer(const embreq *r, const float *vecs, int dim, long n_tokens, const char *model,
                      long long total_ns);

#endif
