/*
 * sampler.h — turning logits into the next token, and stopping generation.
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
 * A generation loop, as `attnd generate` and the server run it:
 *
 *     sampler *s; stop_matcher *sm; attnd_err err;
 *     sampler_create(&s, &params, n_vocab, &err);        // after sampler_params_validate
 *     stop_matcher_create(&sm, stops, n_stops, &err);
 *     for (i = 0; i < n_prompt; i++) sampler_accept(s, prompt[i]);
 *     stop_reason why = STOP_NONE;
 *     for (n = 0; why == STOP_NONE; n++) {
 *         if (n == max_tokens) { why = STOP_LENGTH; break; }
 *         int32_t id = sampler_sample(s, logits);
 *         if (tok_is_eog(tok, id)) { why = STOP_EOG; break; }
 *         sampler_accept(s, id);
 *         piece = <tok_stream_push(id)>;
 *         if (stop_matcher_push(sm, piece, len, &out, &n_out)) why = STOP_STRING;
 *         send(out, n_out);
 *         ... evaluate id to get the next logits ...
 *     }
 *     if (why != STOP_STRING) send(<tok_stream_flush then stop_matcher_push>, stop_matcher_flush);
 *
 * Thread-safety: a sampler and a stop_matcher belong to one request/thread; sampler_logprobs is
 * a pure function.
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

/* Why generation ended; STOP_NONE while it runs. */
typedef enum stop_reason {
    STOP_NONE = 0,
    STOP_EOG = 1,    /* the model produced an end-of-generation token (tok_is_eog) */
    STOP_STRING = 2, /* a stop string matched (stop_matcher_push returned true) */
    STOP_LENGTH = 3, /* max_tokens were generated (or the context is full) */
} stop_reason;
/* OpenAI's finish_reason for r: "stop" (EOG, stop string), "length", or NULL for STOP_NONE. */
const char *stop_reason_finish(stop_reason r);

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

// ---- Stop strings ---------------------------------------------------------------------------

/*
 * Stop strings may span tokens. Feed each decoded text piece; the matcher says how many bytes are
 * safe to emit now (text that cannot be the start of a stop string) and whether a stop string was
 * completed, in which case the text before it has been released and nothing after.
 *
 * Matching is on bytes. Generation stops at the first point where some stop string is complete
 * (if two complete at the same byte, the longer one is cut): the result is the same however the
 * text is cut into pieces. Besides a possible stop-string prefix the
 * matcher also holds back an incomplete UTF-8 character at the end of the text, so what it
 * releases never splits a character; stop_matcher_flush releases everything left.
 * With n_stops 0 the matcher only does that UTF-8 hold-back.
 */
typedef struct stop_matcher stop_matcher;
/* Copies the strings. Errors: ATTND_ERR_INVALID for n_stops < 0, a NULL or empty string;
 * ATTND_ERR_NOMEM. */
attnd_status stop_matcher_create(stop_matcher **out, const char *const *stops, int n_stops, attnd_err *err);
void stop_matcher_destroy(stop_matcher *m); /* accepts NULL */
/* Appends piece; *emit points at bytes now safe to send (valid until the next call), *n_emit
 * their count. Returns true when a stop string matched (generation should end); afterwards
 * every push releases nothing and returns true. Allocates only when a piece is larger than
 * any seen before; if that allocation fails, releases what it safely can, returns true and
 * stop_matcher_status() says ATTND_ERR_NOMEM. */
bool stop_matcher_push(stop_matcher *m, const char *piece, size_t len, const char **emit, size_t *n_emit);
/* At the end of generation without a stop: releases the held-back tail (0 bytes after a stop). */
size_t stop_matcher_flush(stop_matcher *m, const char **emit);
/* ATTND_OK, or ATTND_ERR_NOMEM when a push could not grow its buffer. */
attnd_status stop_matcher_status(const stop_matcher *m);
/* The stop string that matched (borrowed, valid while m lives), or NULL. */
const char *stop_matcher_matched(const stop_matcher *m);

#endif /* ATTND_SAMPLER_H */
