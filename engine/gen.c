/*
 * gen.c — the per-token generation pipeline (see gen.h; the whole-sequence loop is
 * engine_generate.c): sampler (+ grammar), end-of-generation, streaming detokenizer, stop strings,
 * in that order, with log-probabilities on the side.
 * With a grammar, the sampled token is checked against it (a walk over its bytes); only when
 * it is rejected is the whole vocabulary masked (one trie walk) and the token drawn again from
 * the masked logits, so an output the model already writes in the grammar costs almost nothing.
 * Everything is allocated in gen_create; a step allocates only when the stop matcher meets a
 * piece longer than any before, or gen_finish joins the held-back tail.
 *
 * A lazy grammar (grammar.h's grammar_lazy) walks phases, one per sequence:
 *   PROBE  the output so far is a beginning of skip_open: free while it stays one;
 *   SKIP   inside the skipped block: free until skip_close (seen across token boundaries); the
 *          first phase when the prompt opened the block (skip_inside). skip_break ends it too,
 *          and the grammar takes the break's bytes, as at the trigger;
 *   WAIT   free text until the trigger appears; the grammar then takes the trigger's bytes;
 *   ON     the grammar constrains every token.
 * Markers split across tokens are found through win, the last bytes of the output.
 */
#include "attnd/gen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    grammar_state *gs;        /* NULL without a grammar */
    const grammar_vocab *gv;  /* borrowed */
    unsigned char *allowed;   /* (n_vocab) the grammar's mask, when it is needed */
    float *masked;            /* (n_vocab) logits with the disallowed tokens at -inf */
    grammar_lazy lz;          /* borrowed from the grammar */
    int phase;                /* PH_*: where the lazy grammar stands */
    char win[2 * GRAMMAR_MAX_MARKER]; /* (n_win) PROBE: the output so far; SKIP / WAIT: its last bytes */
    size_t n_win;
    bool start_on;            /* WAIT, SKIP: the chosen token begins the grammar (from byte feed_from) */
    size_t feed_from;
    // ---- a step whose mask did not end by its deadline (gen_next_until, gen_resume) ----
    double deadline;          /* the current call's (0 = none) */
    bool pending;             /* the mask goes on in gen_resume */
    int32_t pend_id;          /* the token first sampled (kept when the grammar allows none) */
    float *held;              /* (n_vocab) the step's logits, kept while pending */
    // ---- the reasoning budget (gen_params.think_budget) ----
    int think_budget;         /* 0 = none */
    int think_state;          /* TH_* */
    int think_left;           /* TH_COUNT: tokens the block may still take */
    int32_t *think_force;     /* (n_think_force) the tokens of "</think>", written in order */
    int n_think_force, think_pos;
    char think_win[16];       /* (n_think_win) the output's last bytes, for the markers */
    size_t n_think_win;
    // ---- closing the grammar's sentence within max_tokens (gen_params.grammar_close) ----
    int max_tokens;           /* 0 = no steering */
    int n_steps;              /* tokens chosen so far */
    bool steered;
};

/* The reasoning budget: IDLE (watching for the open marker), COUNT (inside the block), UTF8 (the
 * budget is spent: waiting for a character to end), FORCE (writing the close marker). */
enum { TH_IDLE = 0, TH_COUNT, TH_UTF8, TH_FORCE };
static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";

enum { PH_ON = 0, PH_PROBE, PH_SKIP, PH_WAIT };

/* The grammar's part of gen_create: its state and the mask buffers. */
static attnd_status grammar_init(gen *g, const gen_params *p, attnd_err *err) {
    if (!p->grammar) return ATTND_OK;
    if (!g->tok) return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "a grammar needs the model's vocabulary, which did not load");
    if (!p->gvocab) return attnd_fail(err, ATTND_ERR_INVALID, "a grammar needs the vocabulary index (gvocab)");
    g->gv = p->gvocab;
    attnd_status st = grammar_vocab_check(p->grammar, p->gvocab, err); /* its token terminals exist */
    if (st == ATTND_OK) st = grammar_state_create(&g->gs, p->grammar, err);
    if (st != ATTND_OK) return st;
    g->lz = grammar_get_lazy(p->grammar);
    g->phase = g->lz.skip_inside ? PH_SKIP : g->lz.skip_open ? PH_PROBE : g->lz.trigger ? PH_WAIT : PH_ON;
    g->allowed = malloc((size_t)g->n_vocab);
    g->masked = malloc((size_t)g->n_vocab * sizeof(float));
    g->held = malloc((size_t)g->n_vocab * sizeof(float));
    if (!g->allowed || !g->masked || !g->held) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for the grammar's mask");
    return ATTND_OK;
}

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
    if ((st = grammar_init(g, p, err)) != ATTND_OK) goto fail;
    g->max_tokens = p->grammar && p->grammar_close && p->max_tokens > 0 ? p->max_tokens : 0;
    if (p->think_budget > 0 && tok) {
        size_t n = 0;
        if ((st = tok_encode(tok, THINK_CLOSE, strlen(THINK_CLOSE), false, true, &g->think_force, &n, err)) != ATTND_OK)
            goto fail;
        g->n_think_force = (int)n;
        g->think_budget = p->think_budget;
        if (p->think_inside) g->think_state = TH_COUNT, g->think_left = p->think_budget;
    }
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
    grammar_state_destroy(g->gs);
    free(g->allowed);
    free(g->masked);
    free(g->held);
    free(g->think_force);
    free(g);
}

static bool is_eog(const gen *g, int32_t id) { return !g->ignore_eog && tok_is_eog(g->tok, id); }

/* Whether the grammar lets id come next: end-of-generation once it is complete (or where a
 * token terminal names it), otherwise a token whose bytes it accepts or that a token terminal
 * names (any other token without bytes never). */
static bool grammar_allows(gen *g, int32_t id) {
    if (is_eog(g, id)) return grammar_state_complete(g->gs) || grammar_state_try_token(g->gs, g->gv, id);
    return grammar_state_try_token(g->gs, g->gv, id);
}

/* The token drawn from logits masked to the count tokens the finished mask allows; -1 when it
 * allows nothing. */
static int32_t draw_masked(gen *g, const float *logits, int count) {
    int n_gv = grammar_vocab_size(g->gv), n = g->n_vocab < n_gv ? g->n_vocab : n_gv;
    for (int i = n; i < g->n_vocab; i++) g->allowed[i] = 0; /* ids the tokenizer does not know */
    if (grammar_state_complete(g->gs))
        for (int i = 0; i < n; i++)
            if (is_eog(g, i)) g->allowed[i] = 1, count++;
    if (count == 0) return -1;
    int32_t best = -1;
    for (int i = 0; i < g->n_vocab; i++) {
        g->masked[i] = g->allowed[i] ? logits[i] : -INFINITY;
        if (g->allowed[i] && (best < 0 || logits[i] > logits[best])) best = i;
    }
    int32_t id = sampler_sample(g->smp, g->masked);
    /* every allowed token banned by logit_bias: the sampler's fallback; keep to the grammar */
    return g->allowed[id] ? id : best;
}

/* The token drawn from logits masked to what the grammar allows; -1 when it allows nothing;
 * -2 when the mask did not end by the call's deadline (g->pending: gen_resume goes on). */
static int32_t sample_masked(gen *g, const float *logits) {
    int count;
    grammar_state_mask_begin(g->gs, g->gv, g->allowed);
    if (grammar_state_mask_more(g->gs, g->gv, g->allowed, g->deadline, &count)) return draw_masked(g, logits, count);
    g->pending = true;
    return -2;
}

// ---- the lazy phases -------------------------------------------------------------------------

static size_t token_bytes(const gen *g, int32_t id, const char **b) {
    size_t n = 0;
    *b = "";
    if (!is_eog(g, id) && !grammar_vocab_token(g->gv, id, b, &n)) n = 0;
    return n;
}

/* Keeps the last keep bytes of win + b[n] in win. */
static void win_push(gen *g, const char *b, size_t n, size_t keep) {
    char tmp[sizeof(g->win) * 2];
    size_t k = g->n_win;
    memcpy(tmp, g->win, k);
    size_t take = n > sizeof(g->win) ? sizeof(g->win) : n;
    memcpy(tmp + k, b + n - take, take), k += take;
    size_t from = k > keep ? k - keep : 0;
    memmove(g->win, tmp + from, k - from);
    g->n_win = k - from;
}

/* Where marker m starts in win + b[n] (the joined text), or -1; *after: where it ends, as an
 * offset into b (win is kept shorter than a marker, so it ends inside b). */
static long find_marker(const gen *g, const char *b, size_t n, const char *m, size_t *after) {
    size_t lm = strlen(m), total = g->n_win + n;
    for (size_t i = 0; i + lm <= total; i++) {
        size_t k = 0;
        while (k < lm && (i + k < g->n_win ? g->win[i + k] : b[i + k - g->n_win]) == m[k]) k++;
        if (k == lm) {
            *after = i + lm - g->n_win; /* the marker ends inside b: win is shorter than it */
            return (long)i;
        }
    }
    return -1;
}

/* PROBE: whether win + b[n] still agrees with skip_open over their common length. */
static bool probe_agrees(const gen *g, const char *b, size_t n) {
    size_t lo = strlen(g->lz.skip_open);
    for (size_t i = 0; i < lo && i < g->n_win + n; i++)
        if ((i < g->n_win ? g->win[i] : b[i - g->n_win]) != g->lz.skip_open[i]) return false;
    return true;
}

/* PROBE, a token that leaves skip_open's path: the output is not a skipped block. With an
 * empty prefix, the grammar (or the trigger search) takes over at this token. A prefix of
 * skip_open already written goes to the grammar when it accepts it; otherwise the block must go
 * on, and the token is drawn again among those that continue skip_open (-1: none). */
static int32_t probe_leave(gen *g, const float *logits, int32_t id) {
    if (g->lz.trigger) return g->phase = PH_WAIT, id; /* win is the trigger search's window */
    grammar_state_reset(g->gs);
    if (g->n_win == 0 || grammar_state_accept(g->gs, g->win, g->n_win)) return g->phase = PH_ON, id;
    int32_t best = -1;
    for (int i = 0; i < g->n_vocab; i++) {
        const char *b;
        size_t n = token_bytes(g, i, &b);
        bool ok = n > 0 && probe_agrees(g, b, n);
        g->masked[i] = ok ? logits[i] : -INFINITY;
        if (ok && (best < 0 || logits[i] > logits[best])) best = i;
    }
    if (best < 0) return g->phase = PH_ON, id;
    int32_t pick = sampler_sample(g->smp, g->masked);
    return isinf(g->masked[pick]) ? best : pick;
}

/* WAIT (marker: the trigger), SKIP (skip_break): a token that completes the marker starts the
 * grammar at the marker's first byte; the bytes of the marker written before it are fed now.
 * Rejected: drawn again from the grammar. */
static int32_t start_check(gen *g, const float *logits, int32_t id, const char *marker, bool *stuck) {
    const char *b;
    size_t n = token_bytes(g, id, &b), after;
    long at = n ? find_marker(g, b, n, marker, &after) : -1;
    if (at < 0) return id;
    grammar_state_reset(g->gs);
    if ((size_t)at < g->n_win) grammar_state_accept(g->gs, g->win + at, g->n_win - (size_t)at);
    g->start_on = true;
    g->feed_from = (size_t)at < g->n_win ? 0 : (size_t)at - g->n_win;
    if (grammar_state_try(g->gs, b + g->feed_from, n - g->feed_from)) return id;
    g->feed_from = 0;
    int32_t masked = sample_masked(g, logits);
    *stuck = masked == -1;
    return masked < 0 ? id : masked;
}

/* The token the grammar's phase lets through: id, or one drawn again. */
static int32_t constrain(gen *g, const float *logits, int32_t id, bool *stuck) {
    if (g->phase == PH_PROBE) {
        const char *b;
        size_t n = token_bytes(g, id, &b);
        /* a control token that writes no text (not the end) leaves the text, and the probe, as is */
        if (n > 0 ? probe_agrees(g, b, n) : !is_eog(g, id)) return id;
        id = probe_leave(g, logits, id);
        if (g->phase == PH_PROBE) return id;
    }
    if (g->phase == PH_WAIT) return start_check(g, logits, id, g->lz.trigger, stuck);
    if (g->phase == PH_SKIP) return g->lz.skip_break ? start_check(g, logits, id, g->lz.skip_break, stuck) : id;
    if (grammar_allows(g, id)) return id;
    int32_t masked = sample_masked(g, logits);
    *stuck = masked == -1;
    return masked < 0 ? id : masked;
}

/* SKIP: the bytes win keeps, to find skip_close and skip_break across token boundaries. */
static size_t skip_keep(const gen *g) {
    size_t c = strlen(g->lz.skip_close), k = g->lz.skip_break ? strlen(g->lz.skip_break) : 0;
    return (c > k ? c : k) - 1;
}

/* The chosen token (not end-of-generation) moves the phase on. */
static void advance(gen *g, int32_t id) {
    const char *b;
    size_t n = token_bytes(g, id, &b), after;
    switch (g->phase) {
    case PH_ON: grammar_state_accept_token(g->gs, g->gv, id); return;
    case PH_PROBE:
        win_push(g, b, n, sizeof(g->win));
        if (g->n_win >= strlen(g->lz.skip_open)) {
            g->phase = PH_SKIP; /* what follows the opening may already hold the close */
            memmove(g->win, g->win + strlen(g->lz.skip_open), g->n_win - strlen(g->lz.skip_open));
            g->n_win -= strlen(g->lz.skip_open);
            if (find_marker(g, "", 0, g->lz.skip_close, &after) >= 0) g->n_win = 0, g->phase = g->lz.trigger ? PH_WAIT : PH_ON;
        }
        return;
    case PH_SKIP:
        if (g->start_on) { /* skip_break: the grammar begins at its first byte */
            g->phase = PH_ON, g->start_on = false;
            grammar_state_accept(g->gs, b + g->feed_from, n - g->feed_from);
        } else if (find_marker(g, b, n, g->lz.skip_close, &after) >= 0) {
            g->n_win = 0; /* the rest of this token is free; the grammar starts at the next one */
            g->phase = g->lz.trigger ? PH_WAIT : PH_ON;
            if (g->phase == PH_WAIT) win_push(g, b + after, n - after, strlen(g->lz.trigger) - 1);
        } else {
            win_push(g, b, n, skip_keep(g));
        }
        return;
    default: /* PH_WAIT */
        if (g->start_on) {
            g->phase = PH_ON, g->start_on = false;
            grammar_state_accept(g->gs, b + g->feed_from, n - g->feed_from);
        } else {
            win_push(g, b, n, strlen(g->lz.trigger) - 1);
        }
    }
}

// ---- the reasoning budget -------------------------------------------------------------------

/* Whether marker m ends the window once b[n] is appended (kept to the marker's length). */
static bool think_seen(gen *g, const char *b, size_t n, const char *m) {
    size_t lm = strlen(m);
    for (size_t i = 0; i < n; i++) {
        if (g->n_think_win == sizeof(g->think_win)) memmove(g->think_win, g->think_win + 1, --g->n_think_win);
        g->think_win[g->n_think_win++] = b[i];
        if (g->n_think_win >= lm && !memcmp(g->think_win + g->n_think_win - lm, m, lm)) return true;
    }
    return false;
}

/* Whether bytes b[n] end with a whole UTF-8 character (or hold none; a window that starts inside
 * a character counts as whole). */
static bool utf8_ends_whole(const char *b, size_t n) {
    size_t k = 0;
    while (k < n && k < 4 && ((unsigned char)b[n - 1 - k] & 0xC0) == 0x80) k++;
    if (k == n) return true;
    unsigned char lead = (unsigned char)b[n - 1 - k];
    size_t want = lead < 0x80 ? 0 : lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
    return k == want;
}

/* The forced token of this step, or -1: the budget is spent (and no grammar constrains). */
static int32_t think_forced(const gen *g) {
    if (g->think_state != TH_FORCE || (g->gs && g->phase == PH_ON)) return -1;
    return g->think_force[g->think_pos];
}

/* The chosen token moves the budget's state on. */
static void think_advance(gen *g, int32_t id) {
    const char *b = "";
    size_t n = 0;
    if (!tok_token_bytes(g->tok, id, true, &b, &n)) n = 0;
    switch (g->think_state) {
    case TH_IDLE:
        if (think_seen(g, b, n, THINK_OPEN)) g->think_state = TH_COUNT, g->think_left = g->think_budget, g->n_think_win = 0;
        return;
    case TH_FORCE:
        if (++g->think_pos == g->n_think_force) g->think_state = TH_IDLE, g->think_pos = 0, g->n_think_win = 0;
        return;
    default: /* TH_COUNT, TH_UTF8 */
        if (think_seen(g, b, n, THINK_CLOSE)) {
            g->think_state = TH_IDLE, g->n_think_win = 0;
            return;
        }
        if (g->think_state == TH_COUNT && --g->think_left > 0) return;
        /* the window holds the output's last bytes: a character split over tokens ends there */
        g->think_state = utf8_ends_whole(g->think_win, g->n_think_win) && g->n_think_force > 0 ? TH_FORCE : TH_UTF8;
    }
}

// ---- closing the sentence within the budget ------------------------------------------------------

/* Steering starts when the tokens left are at most the shortest completion plus this. */
enum { STEER_SLACK = 2, STEER_TOP = 16 };

/* The STEER_TOP likeliest tokens into top[] (best first); returns how many. */
static int top_tokens(const gen *g, const float *logits, int32_t *top) {
    int n = 0;
    for (int32_t i = 0; i < g->n_vocab; i++) {
        if (n == STEER_TOP && logits[i] <= logits[top[n - 1]]) continue;
        int k = n < STEER_TOP ? n++ : n - 1;
        while (k > 0 && logits[top[k - 1]] < logits[i]) top[k] = top[k - 1], k--;
        top[k] = i;
    }
    return n;
}

/* Considers token id for the steered step: its completion's length after it, d; the best so far
 * in *best (feasible: d fits the tokens left after it; else the shortest d). */
static void steer_consider(gen *g, const float *logits, int32_t id, uint32_t left, int32_t *best, uint32_t *best_d) {
    const char *b;
    size_t n;
    uint32_t d;
    if (is_eog(g, id) || !grammar_vocab_token(g->gv, id, &b, &n) || !grammar_state_try_distance(g->gs, b, n, &d)) return;
    bool fits = d <= left - 1, best_fits = *best >= 0 && *best_d <= left - 1;
    bool better = *best < 0 || (fits && !best_fits) || (fits == best_fits && (fits ? logits[id] > logits[*best]
                                                                                     : d < *best_d || (d == *best_d && logits[id] > logits[*best])));
    if (better) *best = id, *best_d = d;
}

/* The token that closes the grammar's sentence within max_tokens instead of the sampled one,
 * or -1: the budget is not near, the sampled token still leaves a completion that fits, or
 * nothing better is found. */
static int32_t steer(gen *g, const float *logits, int32_t sampled) {
    if (!g->max_tokens || g->ended || g->phase != PH_ON) return -1;
    int left = g->max_tokens - g->n_steps; /* this token included */
    uint32_t d = grammar_state_distance(g->gs);
    if (left <= 0 || d == 0 || d == GRAMMAR_FAR || (uint32_t)left > d + STEER_SLACK) return -1;
    const char *sb;
    size_t sn;
    uint32_t sd;
    if (!is_eog(g, sampled) && grammar_vocab_token(g->gv, sampled, &sb, &sn) &&
        grammar_state_try_distance(g->gs, sb, sn, &sd) && sd <= (uint32_t)left - 1)
        return -1; /* the model's own choice closes in time */
    int32_t top[STEER_TOP], best = -1;
    uint32_t best_d = GRAMMAR_FAR;
    int n_top = top_tokens(g, logits, top);
    for (int i = 0; i < n_top; i++) steer_consider(g, logits, top[i], (uint32_t)left, &best, &best_d);
    int n_gv = grammar_vocab_size(g->gv);
    for (int32_t i = 0; i < g->n_vocab && i < n_gv; i++) {
        const char *b;
        size_t n;
        if (grammar_vocab_token(g->gv, i, &b, &n) && n == 1) steer_consider(g, logits, i, (uint32_t)left, &best, &best_d);
    }
    if (best >= 0) g->steered = true;
    return best;
}

bool gen_steered(const gen *g) { return g->steered; }

/* The rest of a step once its token id is chosen (stuck: the grammar allowed none). */
static stop_reason step_end(gen *g, const float *logits, token_logprob *top, gen_token *t, int32_t id, bool stuck) {
    sampler_accept(g->smp, id);
    g->n_steps++;
    *t = (gen_token){.id = id, .text = ""};
    if (g->top_logprobs >= 0) {
        token_logprob chosen;
        sampler_logprobs(logits, g->n_vocab, id, top ? g->top_logprobs : 0, &chosen, top);
        t->logprob = chosen.logprob;
    }
    if (!g->tok || g->ended) return g->ended;
    if (stuck || is_eog(g, id)) {
        return g->ended = STOP_EOG; /* control tokens decode to nothing: the matcher need not see it */
    }
    if (g->gs) advance(g, id);
    if (g->think_budget) think_advance(g, id);
    const char *piece;
    size_t n = tok_stream_push(g->ts, id, &piece);
    if (n && stop_matcher_push(g->sm, piece, n, &t->text, &t->n_text)) g->ended = STOP_STRING, g->finished = true;
    if (!g->ended && g->gs && g->phase == PH_ON && grammar_state_complete(g->gs) && !grammar_state_can_continue(g->gs))
        g->ended = STOP_GRAMMAR;
    return g->ended;
}

bool gen_next_until(gen *g, const float *logits, token_logprob *top, gen_token *t, double deadline, stop_reason *why) {
    ATTND_ASSERT(!g->pending);
    int32_t forced = think_forced(g);
    if (forced >= 0) { /* the budget is spent: the close marker, whatever the logits say */
        *why = step_end(g, logits, top, t, forced, false);
        return true;
    }
    int32_t id = sampler_sample(g->smp, logits);
    if (g->gs && (forced = steer(g, logits, id)) >= 0) { /* the budget nears: close the sentence in time */
        *why = step_end(g, logits, top, t, forced, false);
        return true;
    }
    bool stuck = false; /* the grammar allows no token at all */
    g->deadline = deadline;
    if (g->gs && !g->ended) id = constrain(g, logits, id, &stuck);
    if (g->pending) {
        memcpy(g->held, logits, (size_t)g->n_vocab * sizeof(float));
        g->pend_id = id;
        return false;
    }
    *why = step_end(g, logits, top, t, id, stuck);
    return true;
}

bool gen_resume(gen *g, token_logprob *top, gen_token *t, double deadline, stop_reason *why) {
    ATTND_ASSERT(g->pending);
    int count;
    if (!grammar_state_mask_more(g->gs, g->gv, g->allowed, deadline, &count)) return false;
    g->pending = false;
    int32_t id = draw_masked(g, g->held, count);
    bool stuck = id == -1;
    *why = step_end(g, g->held, top, t, stuck ? g->pend_id : id, stuck);
    return true;
}

bool gen_pending(const gen *g) { return g->pending; }

stop_reason gen_next(gen *g, const float *logits, token_logprob *top, gen_token *t) {
    stop_reason why = STOP_NONE;
    bool done = gen_next_until(g, logits, top, t, 0, &why);
    ATTND_ASSERT(done);
    return why;
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
