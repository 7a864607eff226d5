/*
 * sampler.h — turning logits into the next token, and the log-probabilities behind it.
 *
 * The chain (fixed order, as llama.cpp's default): penalties (repeat, presence, frequency over
 * the last repeat_last_n tokens) -> logit_bias -> top-k -> typical-p -> top-p -> min-p ->
 * temperature -> draw. temperature 0 is exact greedy argmax (ties: lowest id).
 * Each sampler has its own random generator seeded from params.seed: the same seed, params and
 * logits give the same tokens on every run and at any thread count.
 *
 * The truncation steps (top-k, typical-p, top-p, min-p) look at the distribution at temperature
 * 1 (softmax of the penalised, biased logits); temperature only reshapes what survives them.
 * With temperature 0 the truncation steps are skipped: the result is the argmax of the
 * penalised, biased logits. Tokens whose logit is -inf (or NaN) after bias are never drawn.
 *
 * A generation loop does not call these one by one: include/attnd/gen.h runs sampler,
 * end-of-generation, detokenizer and stop strings (attnd/stop.h) as one pipeline.
 *
 * Thread-safety: a sampler belongs to one request/thread; sampler_logprobs is a pure function.
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

/* The seed of the k-th of several samplers drawing from one request's seed (n > 1 choices): stream
 * 0 is seed itself, so choice 0 of n equals the single choice of n = 1; the others are hashed
 * apart so their random sequences do not overlap. */
uint64_t sampler_seed_stream(uint64_t seed, int k);

/* Copies params (including the bias list). Allocates all scratch for n_vocab up front. */
attnd_status sampler_create(sampler **out, const sampler_params *p, int n_vocab, attnd_err *err);
void sampler_destroy(sampler *s);
/* Adds a token to the penalty history (prompt tokens and generated tokens alike). */
void sampler_accept(sampler *s, int32_t id);
/* Picks the next token from logits[n_vocab] (not modified). Does not call sampler_accept.
 * Ids outside [0, n_vocab) passed to sampler_accept are ignored. Allocates nothing.
 * When every logit is -inf/NaN after bias, returns the lowest id logit_bias does not ban. */
int32_t sampler_sample(sampler *s, const float *logits);
/* Applies the first two steps of the chain (penalties over the history, then logit_bias) to
 * logits[n_vocab] in place, exactly as sampler_sample does before truncating. For inspection
 * and tests; sampler_sample does not need it. */
void sampler_adjust_logits(const sampler *s, float *logits);
/* Forgets the penalty history (the random generator keeps its state). */
void sampler_reset(sampler *s);

/* Greedy decoding without a sampler (no penalties, no bias): the index of the largest of
 * logits[n_vocab], n_vocab >= 1; ties go to the lowest id. A pure function. */
int32_t sampler_argmax(const float *logits, int n_vocab);

/* Log-probabilities from the model's raw distribution (log_softmax of the logits, before any
 * sampling transform). */
typedef struct token_logprob {
    int32_t id;
    float logprob;
} token_logprob;
#define SAMPLER_MAX_TOP_LOGPROBS 20
/* Fills chosen's logprob and the top_n (0..SAMPLER_MAX_TOP_LOGPROBS) most likely alternatives,
 * best first (ties: lowest id); top_out holds top_n entries (may be NULL when top_n is 0).
 * Entries beyond n_vocab are {-1, -INFINITY}. NaN logits count as -inf. O(n_vocab), no
 * allocation. chosen must be in [0, n_vocab); top_n outside its range is a caller bug (assert). */
void sampler_logprobs(const float *logits, int n_vocab, int32_t chosen, int top_n, token_logprob *chosen_out,
                      token_logprob *top_out);

#endif /* ATTND_SAMPLER_H */
