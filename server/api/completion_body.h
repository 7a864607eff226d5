/*
 * completion_body.h — the response JSON of the generation endpoints: OpenAI completions and chat
 * completions (whole and streamed chunks), llama.cpp's /completion, usage and timings, and the
 * model list. Pure functions of plain C data to JSON (no scheduler, no HTTP, no locks), so
 * every shape is unit-testable; tests/test_server_completion_body.c pins them.
 *
 * Every builder returns a new reference (NULL only when out of memory). Nothing passed in is
 * kept: all pointers are borrowed for the call.
 */
#ifndef ATTND_SERVER_COMPLETION_BODY_H
#define ATTND_SERVER_COMPLETION_BODY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/sampler.h"

/* A token's own bytes (for logprobs); false when id names no token. */
typedef bool (*completion_body_token_bytes_fn)(void *user, int32_t id, const char **p, size_t *n);

/* What is fixed for one response. */
typedef struct completion_body_ctx {
    const char *id;              /* "chatcmpl-..." / "cmpl-..." */
    const char *model;           /* model id */
    long long created;           /* Unix time */
    bool chat;                   /* chat.completion shapes, else text_completion */
    bool include_usage;          /* stream_options.include_usage */
    const char *session_id;      /* echoed back as "session_id"; NULL or "" = none */
    completion_body_token_bytes_fn token_bytes;
    void *token_user;
} completion_body_ctx;

/* A generation's output as the builders see it. */
typedef struct completion_body_gen {
    const char *text;            /* (text_len) generated text */
    size_t text_len;
    const token_logprob *pieces; /* (n_pieces) generated tokens and their log-probabilities */
    int n_pieces;
    const token_logprob *tops;   /* (n_pieces, top_logprobs) alternatives, best first */
    int top_logprobs;            /* -1 = no logprobs asked for */
    const int32_t *prompt;       /* (n_prompt) */
    int n_prompt;
    const float *prompt_lp;      /* (n_prompt) or NULL: log-probabilities of the prompt tokens */
    const token_logprob *prompt_tops; /* (n_prompt, top_logprobs) or NULL */
    const char *finish_reason;   /* "stop" / "length"; NULL reads as "stop" in OpenAI shapes and as
                                    a cut stream (stop_type "none") in llama.cpp's */
    int n_cached, n_generated;
    int n_reasoning;             /* generated tokens that were reasoning (reasoning.h); -1: not a chat
                                    reply (usage has no completion_tokens_details) */
    double prompt_ms, gen_ms;
} completion_body_gen;

/* A token's text for logprobs (its bytes on their own, invalid UTF-8 as U+FFFD) and, when
 * bytes is non-NULL, its raw bytes as an array of integers (*bytes: new reference). Chosen
 * tokens and alternatives are named by the same function, so clients can compare them. */
json_t *completion_body_token_str(const completion_body_ctx *c, int32_t id, json_t **bytes);

/* Chat logprobs {"content": [...]} for generated tokens [from, to). */
json_t *completion_body_chat_logprobs(const completion_body_ctx *c, const completion_body_gen *g, int from, int to);
/* Legacy completions logprobs {tokens, token_logprobs, top_logprobs, text_offset} for tokens
 * [from, to), preceded by the prompt's when with_prompt (echo). *text_off is the running
 * character offset, advanced past every token written. */
json_t *completion_body_completion_logprobs(const completion_body_ctx *c, const completion_body_gen *g, int from, int to, bool with_prompt,
                                size_t *text_off);
json_t *completion_body_usage(const completion_body_gen *g);
/* llama.cpp-style timings (prefill and decode time of this request). */
json_t *completion_body_timings(const completion_body_gen *g);
/* {"id", "object", "created", "model"} */
json_t *completion_body_envelope(const completion_body_ctx *c, const char *object);

/* The whole non-streamed completion or chat completion. echo (completions only; NULL = no
 * echo) is the prompt's text, written before the completion. */
json_t *completion_body_final(const completion_body_ctx *c, const completion_body_gen *g, const char *echo, size_t echo_len);
/* One streamed chunk: delta_or_text (stolen) is the chat delta object or the completion text;
 * logprobs (stolen) may be NULL; finish NULL while running. */
json_t *completion_body_chunk(const completion_body_ctx *c, json_t *delta_or_text, json_t *logprobs, const char *finish);
/* The streamed usage chunk (include_usage): empty choices plus usage. */
json_t *completion_body_usage_chunk(const completion_body_ctx *c, const completion_body_gen *g);

/* llama.cpp's /completion answer: text (n bytes) plus, when tokens is non-NULL, the token ids
 * pieces [from, to) as "tokens"; when final, the counts, stop type and timings (stop_type
 * "shutdown" for g->finish_reason "shutdown", "none" for none: a cancelled job). */
json_t *completion_body_llama(const completion_body_ctx *c, const completion_body_gen *g, const char *text, size_t n, bool tokens,
                           int from, int to, bool final);

/* A float as the shortest decimal that reads back as the same float (0.8, not
 * 0.800000011920929): a new reference. */
json_t *completion_body_float(float v);

/* What GET /v1/models says about the one model. */
typedef struct completion_body_model_desc {
    const char *id;
    long long created;
    int context_length, n_vocab, n_ctx_train;
    long long n_params;
    const char *chat_template;   /* family name */
    const sampler_params *defaults; /* the server's sampling defaults (borrowed) */
    int default_max_tokens;         /* max_tokens when a request gives none */
    unsigned roles;                 /* what the model serves (attnd/embed.h's MODEL_ROLE_* bits) */
    int n_embd;                     /* floats per embedding (model_embed_dim) */
} completion_body_model_desc;
/* The roles (MODEL_ROLE_* bits) as names: ["generate", "embed", "rank"] (new reference). */
json_t *completion_body_roles(unsigned roles);
/* GET /v1/models/{id}: the model object. */
json_t *completion_body_model(const completion_body_model_desc *m);
/* GET /v1/models: {"object": "list", "data": [model]}. */
json_t *completion_body_models(const completion_body_model_desc *m);

#endif
