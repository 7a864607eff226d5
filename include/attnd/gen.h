/*
 * gen.h — the per-token generation pipeline, the one place that turns logits into text:
 *
 *     logits -> sampler (+ log-probabilities) -> end-of-generation? -> streaming detokenizer
 *            -> stop strings -> text
 *
 * The server's scheduler and `attnd generate` both run it; nobody else calls tok_stream_push
 * or stop_matcher_push on generated tokens. A gen belongs to one sequence and one thread.
 *
 *     gen *g; attnd_err err;
 *     gen_params p = {.sp = params, .stops = stops, .n_stops = n, .top_logprobs = -1};
 *     gen_create(&g, &p, n_vocab, tok, prompt, n_prompt, &err);  // prompt feeds the penalties
 *     for (n = 0; n < max_tokens; n++) {
 *         gen_token t;
 *         stop_reason why = gen_next(g, logits, NULL, &t);       // samples, detokenizes, matches
 *         send(t.text, t.n_text);
 *         if (why != STOP_NONE) break;                           // EOG or a stop string
 *         ... evaluate t.id to get the next logits ...
 *     }
 *     gen_finish(g, &text, &n_text);                             // the held-back tail
 *     send(text, n_text);
 *
 * Text is released as soon as it cannot be part of a stop string and does not end inside a
 * UTF-8 character; gen_finish releases what is held back when generation ends for another
 * reason (length, context full). A SentencePiece leading space is kept: the text continues the
 * prompt.
 */
#ifndef ATTND_GEN_H
#define ATTND_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/grammar.h"
#include "attnd/sampler.h"
#include "attnd/stop.h"
#include "attnd/tokenizer.h"

typedef struct gen_params {
    sampler_params sp;          /* copied (bias list included) */
    const char *const *stops;   /* (n_stops) copied; needs a tokenizer */
    int n_stops;
    int top_logprobs;           /* -1: no log-probabilities; 0..SAMPLER_MAX_TOP_LOGPROBS: the
                                   chosen token's and that many alternatives' */
    bool ignore_eog;            /* end-of-generation tokens are ordinary tokens */
    const grammar *grammar;     /* borrowed for gen's lifetime; NULL = unconstrained. The
                                   output is a sentence of it: a sampled token the grammar
                                   rejects is drawn again from the distribution masked to the
                                   tokens it allows (every sampler stage applies), an
                                   end-of-generation token is allowed only once the grammar is
                                   complete, and generation ends (STOP_GRAMMAR) when it is
                                   complete and allows nothing more. Needs a tokenizer. */
    const grammar_vocab *gvocab; /* borrowed; the tokenizer's vocabulary index, required with
                                   a grammar (built once per model and shared) */
    int think_budget;           /* > 0: a reasoning block ("<think>" ... "</think>", as the
                                   output spells it, special tokens included) ends after this
                                   many of its tokens: once the last one completes its UTF-8
                                   character, the tokens of "</think>" are written instead of
                                   sampled, as llama.cpp's reasoning budget does. 0 = no limit.
                                   Needs a tokenizer; not while a grammar constrains the block */
    bool think_inside;          /* the prompt opened the block (the output starts inside it) */
    int max_tokens;             /* the tokens this output may take (0 = not known) */
    bool grammar_close;         /* with a grammar and max_tokens: once the grammar's shortest
                                   completion (grammar_state_distance) nears the tokens left,
                                   a sampled token that would leave too long a completion is
                                   replaced by the likeliest of the model's top choices and the
                                   one-byte tokens that leave one short enough, else the one
                                   that shortens it most (gen_steered says it happened) */
} gen_params;

typedef struct gen gen;

/*
 * tok may be NULL (a model without a usable vocabulary): tokens are still sampled, but there is
 * no text and no end-of-generation check; stop strings then are ATTND_ERR_UNSUPPORTED. The
 * prompt's tokens enter the penalty history (as in llama.cpp). Borrows tok for gen's lifetime.
 * Errors: ATTND_ERR_INVALID (params), ATTND_ERR_NOMEM.
 */
attnd_status gen_create(gen **out, const gen_params *p, int n_vocab, const tokenizer *tok, const int32_t *prompt,
                        int n_prompt, attnd_err *err);
void gen_destroy(gen *g); /* accepts NULL */

typedef struct gen_token {
    int32_t id;
    float logprob;              /* of id under the raw model distribution (top_logprobs >= 0) */
    const char *text;           /* (n_text) text released by this token; borrowed, valid until
                                   the next call on g */
    size_t n_text;
} gen_token;

/*
 * One step: samples from logits[n_vocab] (not modified), adds the token to the history, and
 * unless it ends generation as an end-of-generation token, detokenizes it and runs the stop
 * strings. With top_logprobs > 0, top (top_logprobs entries) receives the alternatives, best
 * first; top NULL skips them. Returns STOP_EOG, STOP_STRING (the text before the stop string
 * is in t, nothing after), STOP_GRAMMAR (t's text completes the grammar's sentence), or
 * STOP_NONE to go on. When the grammar allows no token of the vocabulary at all, the step ends
 * generation as STOP_EOG does (t carries no text). Allocates nothing per token in steady state.
 */
stop_reason gen_next(gen *g, const float *logits, token_logprob *top, gen_token *t);

/*
 * gen_next for a caller that bounds each step's time (a server batching many sequences): when the
 * sampled token is rejected and the grammar's mask of the whole vocabulary does not end by
 * deadline (attnd_now_s seconds; 0 = no limit), returns false and the step is pending: the logits
 * are copied (the caller may reuse its buffer) and gen_resume goes on with the mask until a later
 * deadline. Once a call returns true, *why and *t are gen_next's for these logits, whatever
 * deadlines cut the mask (the same token for the same seed). While pending, only gen_resume and
 * gen_destroy may be called.
 */
bool gen_next_until(gen *g, const float *logits, token_logprob *top, gen_token *t, double deadline, stop_reason *why);
bool gen_resume(gen *g, token_logprob *top, gen_token *t, double deadline, stop_reason *why);
/* Whether a step is pending (gen_next_until). */
bool gen_pending(const gen *g);

/* Generation ended (end-of-generation token, length, context full): releases the held-back
 * text (*text borrowed as in gen_token). Returns STOP_STRING when that tail completes a stop
 * string (cut before it), else STOP_NONE. After a stop string, or a second time, it releases
 * nothing. */
stop_reason gen_finish(gen *g, const char **text, size_t *n_text);

/* Whether grammar_close chose a token: the budget, not the model, closed the sentence. */
bool gen_steered(const gen *g);

/* The stop string that matched (borrowed, valid while g lives), or NULL. */
const char *gen_matched_stop(const gen *g);

#endif /* ATTND_GEN_H */
