/*
 * sampler.h — turning logits into the next token, and stopping generation.
 *
 * The chain (fixed order, as llama.cpp's default): penalties (repeat, presence, frequency over
 * the last repeat_last_n tokens) -> logit_bias -> top-k -> typical-p -> top-p -> min-p ->
 * temperature -> draw. temperature 0 is exact greedy argmax (ties: lowest id).
 * Each sampler has its own random generator seeded from params.seed: the same seed, params and
 * logits give the same tokens on every run and at any thread count.
 *
 * Thread-safety: a sampler belongs to one request/thread.
 */
#ifndef ATTND_SAMPLER_H
#define ATTND_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

typedef struct logit_bias {
    int32_t id;
    float bias; /* -INFINITY bans the token */
} logit_bias;

typedef struct sampler_params {
    float temperature;       /* 0 = greedy */
    int top_k;               /* 0 = off */
    float top_p;             /* 1 = off */
    float min_p;             /* 0 = off */
    float typical_p;         /* 1 = off */
    float repeat_penalty;    /* 1 = off */
    int repeat_last_n;       /* window for all penalties; -1 = whole history */
    float presence_penalty;  /* 0 = off */
    float frequency_penalty; /* 0 = off */
    uint64_t seed;
    const logit_bias *bias;  /* borrowed; sampler_create copies it */
    int n_bias;
} sampler_params;

/* llama.cpp-like defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, typical 1,
 * repeat_penalty 1, repeat_last_n 64, no presence/frequency penalty, seed 0. */
void sampler_params_default(sampler_params *p);
/* Rejects out-of-range values (NaN, negative top_k, top_p outside (0,1], bias id >= n_vocab...)
 * with a message naming the parameter; never clamps. */
attnd_status sampler_params_validate(const sampler_params *p, int n_vocab, attnd_err *err);

typedef struct sampler sampler;

/* Copies params (including the bias list). Allocates all scratch for n_vocab up front. */
attnd_status sampler_create(sampler **out, const sampler_params *p, int n_vocab, attnd_err *err);
void sampler_destroy(sampler *s);
/* Adds a token to the penalty history (prompt tokens and generated tokens alike). */
void sampler_accept(sampler *s, int32_t id);
/* Picks the next token from logits[n_vocab] (not modified). Does not call sampler_accept. */
int32_t sampler_sample(sampler *s, const float *logits);

/* Log-probabilities from the model's raw distribution (log_softmax of the logits, before any
 * sampling transform). */
typedef struct token_logprob {
    int32_t id;
    float logprob;
} token_logprob;
/* Fills chosen's logprob and the top_n (<= 20) most likely alternatives, best first. */
void sampler_logprobs(const float *logits, int n_vocab, int32_t chosen, int top_n, token_logprob *chosen_out,
                      token_logprob *top_out);

// ---- Stop strings ---------------------------------------------------------------------------

/*
 * Stop strings may span tokens. Feed each decoded text piece; the matcher says how many bytes are
 * safe to emit now (text that cannot be the start of a stop string) and whether a stop string was
 * completed, in which case the text before it has been released and nothing after.
 */
typedef struct stop_matcher stop_matcher;
attnd_status stop_matcher_create(stop_matcher **out, const char *const *stops, int n_stops, attnd_err *err);
void stop_matcher_destroy(stop_matcher *m);
/* Appends piece; *emit points at bytes now safe to send (valid until the next call), *n_emit
 * their count. Returns true when a stop string matched (generation should end). */
bool stop_matcher_push(stop_matcher *m, const char *piece, size_t len, const char **emit, size_t *n_emit);
/* At the end of generation without a stop: releases the held-back tail. */
size_t stop_matcher_flush(stop_matcher *m, const char **emit);

#endif /* ATTND_SAMPLER_H */
