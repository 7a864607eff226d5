/*
 * gen.c — the per-token generation pipeline (see gen.h): sampler, end-of-generation,
 * streaming detokenizer, stop strings, in that order, with log-probabilities on the side.
 * Everything is allocated in gen_create; a step allocates only when the stop matcher meets a
 * piece longer than any before, or gen_finish joins the held-back tail.
 */
#include "attnd/gen.h"

#include <stdlib.h>

#include "attnd/buf.h"

struct gen {
    sampler *smp;
    const tokenizer *tok;     /* borrowed; NULL = no text */
    tok_stream *ts;           /* NULL without a tokenizer */
    stop_matcher *sm;         /* NULL without a tokenizer */
    int n_vocab;
    int top_logprobs;
    bool ignore_eog;
    stop_reason ended;        /* STOP_EOG / STOP_STRING: no more tokens are detokenized */
    bool finished;            /* gen_finish ran, or a stop string cut the text */
    buf tail;                 /* gen_finish's joined tail */
};

attnd_status gen_create(gen **out, const gen_params *p, int n_vocab, const tokenizer *tok, const int32_t *prompt,
                        int n_prompt, attnd_err *err) {
    *out = NULL;
    if (p->n_stops > 0 && !tok)
        return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "stop strings need the model's vocabulary, which did not load");
    gen *g = calloc(1, sizeof(*g));
    if (!g) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    g->tok = tok;
    g->n_vocab = n_vocab;
    g->top_logprobs = p->top_logprobs;
    g->ignore_eog = p->ignore_eog;
    attnd_status st = sampler_create(&g->smp, &p->sp, n_vocab, err);
    if (st != ATTND_OK) goto fail;
    for (int i = 0; i < n_prompt; i++) sampler_accept(g->smp, prompt[i]);
    if (tok) {
        if ((st = tok_stream_create(&g->ts, tok, false)) != ATTND_OK) {
            attnd_fail(err, st, "cannot create the detokenizer stream");
            goto fail;
        }
        /* the completion continues the prompt: " there" after "Once upon a time" keeps its space */
        tok_stream_keep_leading_space(g->ts);
        if ((st = stop_matcher_create(&g->sm, p->stops, p->n_stops, err)) != ATTND_OK) goto fail;
    }
    *out = g;
    return ATTND_OK;
fail:
    gen_destroy(g);
    return st;
}

void gen_destroy(gen *g) {
    if (!g) return;
    sampler_destroy(g->smp);
    tok_stream_destroy(g->ts);
    stop_matcher_destroy(g->sm);
    buf_free(&g->tail);
    free(g);
}

stop_reason gen_next(gen *g, const float *logits, token_logprob *top, gen_token *t) {
    int32_t id = sampler_sample(g->smp, logits);
    sampler_accept(g->smp, id);
    *t = (gen_token){.id = id, .text = ""};
    if (g->top_logprobs >= 0) {
        token_logprob chosen;
        sampler_logprobs(logits, g->n_vocab, id, top ? g->top_logprobs : 0, &chosen, top);
        t->logprob = chosen.logprob;
    }
    if (!g->tok || g->ended) return g->ended;
    if (!g->ignore_eog && tok_is_eog(g->tok, id)) {
        return g->ended = STOP_EOG; /* control tokens decode to nothing: the matcher need not see it */
    }
    const char *piece;
    size_t n = tok_stream_push(g->ts, id, &piece);
    if (!n) return STOP_NONE;
    if (stop_matcher_push(g->sm, piece, n, &t->text, &t->n_text)) g->ended = STOP_STRING, g->finished = true;
    return g->ended;
}

stop_reason gen_finish(gen *g, const char **text, size_t *n_text) {
    *text = "", *n_text = 0;
    if (!g->tok || g->finished) return STOP_NONE;
    g->finished = true;
    buf_clear(&g->tail);
    const char *p, *e;
    size_t n = tok_stream_flush(g->ts, &p), ne = 0;
    stop_reason why = STOP_NONE;
    if (n) {
        if (stop_matcher_push(g->sm, p, n, &e, &ne)) why = STOP_STRING;
        buf_append(&g->tail, e, ne);
    }
    if (why == STOP_NONE) buf_append(&g->tail, e, stop_matcher_flush(g->sm, &e));
    *text = g->tail.p ? g->tail.p : "";
    *n_text = g->tail.len;
    return why;
}

const char *gen_matched_stop(const gen *g) { return g->sm ? stop_matcher_matched(g->sm) : NULL; }
