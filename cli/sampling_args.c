/*
 * sampling_args.c — the sampling flags shared by CLI subcommands (generate, attention, chat): the
 * option entries (cli_sampling_opts) of --temperature (alias --temp), --top-k, --top-p, --min-p, --typical-p, --repeat-penalty, --repeat-last-n,
 * --presence-penalty, --frequency-penalty, --logit-bias, --seed, --stop and --top-logprobs into a
 * cli_sampling, and the generation callbacks (engine_gen's pick/on_token) that run the
 * generation pipeline (attnd/gen.h) and record log-probabilities.
 *
 * Every bad value is a usage error (exit 2) whose message names the flag; nothing is clamped.
 * The ranges are the library's (sampler_params_validate), so the server can apply the same
 * rules to its JSON fields by calling that function.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "attnd/gen.h"
#include "commands.h"

const char *const CLI_SAMPLING_USAGE =
    "sampling (applied in this order: penalties, logit bias, top-k, typical-p, top-p, min-p, temperature):\n"
    "  --temperature T        (or --temp) 0 = greedy argmax, ties to the lowest id (default; chat: 0.8)\n"
    "  --top-k K              keep the K most likely tokens; 0 = off (default 40)\n"
    "  --top-p P              keep the most likely tokens up to mass P, in (0, 1]; 1 = off (default 0.95)\n"
    "  --min-p P              drop tokens below P x the best one's probability, in [0, 1]; 0 = off (default 0.05)\n"
    "  --typical-p P          locally typical sampling, in (0, 1]; 1 = off (default)\n"
    "  --repeat-penalty R     divide (multiply if negative) logits of recent tokens by R > 0; 1 = off (default)\n"
    "  --repeat-last-n N      window of recent tokens for all penalties; -1 = all, 0 = off (default 64)\n"
    "  --presence-penalty X   subtract X from logits of tokens in the window (default 0)\n"
    "  --frequency-penalty X  subtract X x their count in the window (default 0)\n"
    "  --logit-bias ID=B,...  add B to token ID's logit; B = -inf or false bans it (repeatable)\n"
    "  --seed S               random seed, 0..2^64-1 (default 0): same seed, same tokens\n"
    "  --stop STR             end when the text contains STR, cut before it (repeatable)\n"
    "  --ignore-eos           keep generating past end-of-generation tokens (EOS, EOT, ...)\n"
    "  --top-logprobs N       with --json: each token's logprob and the N (0..20) likeliest, from the\n"
    "                         model's raw distribution (before penalties, bias and temperature)\n";

void cli_sampling_init(cli_sampling *o) {
    memset(o, 0, sizeof(*o));
    sampler_params_default(&o->params);
    o->params.temperature = 0.0f; /* the CLI is greedy unless asked */
}

void cli_sampling_free(cli_sampling *o) {
    free(o->bias);
    free(o->stops);
    memset(o, 0, sizeof(*o));
}

/* --seed: 0..2^64-1 into (uint64_t *)dst. */
static void parse_seed(const char *cmd, const char *flag, const char *s, void *dst) {
    char *end;
    errno = 0;
    /* strtoull would accept "-1" as 2^64-1: refuse any sign. */
    unsigned long long v = *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
    if (!(*s >= '0' && *s <= '9') || errno || *end != '\0')
        cli_usage_error(cmd, "%s: '%s' is not an integer in 0..18446744073709551615", flag, s);
    *(uint64_t *)dst = (uint64_t)v;
}

/* --logit-bias "ID=BIAS[,ID=BIAS...]", BIAS a finite number, or -inf / false to ban, added to
 * (cli_sampling *)dst's list. */
static void parse_bias(const char *cmd, const char *flag, const char *s, void *dst) {
    cli_sampling *o = dst;
    const char *p = s;
    if (!*p) cli_usage_error(cmd, "%s: empty list (expected ID=BIAS[,ID=BIAS...])", flag);
    while (*p) {
        char *end;
        errno = 0;
        long long id = *p >= '0' && *p <= '9' ? strtoll(p, &end, 10) : -1;
        if (id < 0 || errno || id > INT32_MAX || *end != '=')
            cli_usage_error(cmd, "%s: '%s' is not ID=BIAS[,ID=BIAS...] with a non-negative token id", flag, s);
        p = end + 1;
        size_t n = strcspn(p, ",");
        char val[64];
        if (n == 0 || n >= sizeof(val)) cli_usage_error(cmd, "%s: token %lld has no usable bias in '%s'", flag, id, s);
        memcpy(val, p, n);
        val[n] = '\0';
        float bias;
        if (!strcmp(val, "-inf") || !strcmp(val, "-infinity") || !strcmp(val, "false")) {
            bias = -INFINITY;
        } else {
            char *vend;
            errno = 0;
            double v = strtod(val, &vend);
            if (*vend != '\0' || vend == val || !isfinite(v) || errno)
                cli_usage_error(cmd, "%s: bias '%s' for token %lld is not a finite number, -inf or false", flag, val,
                                id);
            bias = (float)v;
        }
        if (!attnd_grow(&o->bias, &o->cap_bias, (size_t)o->n_bias + 1, sizeof(*o->bias), 8))
            cli_usage_error(cmd, "out of memory");
        o->bias[o->n_bias++] = (logit_bias){(int32_t)id, bias};
        p += n;
        if (*p == ',') {
            p++;
            if (!*p) cli_usage_error(cmd, "%s: trailing comma in '%s'", flag, s);
        }
    }
    o->params.bias = o->bias;
    o->params.n_bias = o->n_bias;
}

/* --stop STR, added to (cli_sampling *)dst's list (borrowing argv). */
static void parse_stop(const char *cmd, const char *flag, const char *v, void *dst) {
    cli_sampling *o = dst;
    if (!*v) cli_usage_error(cmd, "%s: the stop string is empty", flag);
    const char **g = realloc(o->stops, sizeof(*g) * (size_t)(o->n_stops + 1));
    if (!g) cli_usage_error(cmd, "out of memory");
    o->stops = g;
    o->stops[o->n_stops++] = v;
}

int cli_sampling_opts(void *sampling, cli_opt *out, int cap) {
    cli_sampling *o = sampling;
    sampler_params *p = &o->params;
    const cli_opt opts[] = {
        CLI_OPT_FLOAT("--temperature", &p->temperature, 0, false, INFINITY, true),
        CLI_OPT_INT("--top-k", &p->top_k, 0, INT_MAX),
        CLI_OPT_FLOAT("--top-p", &p->top_p, 0, true, 1, false),
        CLI_OPT_FLOAT("--min-p", &p->min_p, 0, false, 1, false),
        CLI_OPT_FLOAT("--typical-p", &p->typical_p, 0, true, 1, false),
        CLI_OPT_FLOAT("--repeat-penalty", &p->repeat_penalty, 0, true, INFINITY, true),
        CLI_OPT_INT("--repeat-last-n", &p->repeat_last_n, -1, INT_MAX),
        CLI_OPT_FLOAT("--presence-penalty", &p->presence_penalty, -INFINITY, true, INFINITY, true),
        CLI_OPT_FLOAT("--frequency-penalty", &p->frequency_penalty, -INFINITY, true, INFINITY, true),
        CLI_OPT_FN("--logit-bias", parse_bias, o),
        CLI_OPT_FN("--seed", parse_seed, &p->seed),
        CLI_OPT_FN("--stop", parse_stop, o),
        CLI_OPT_SET("--ignore-eos", &o->ignore_eos),
        CLI_OPT_INT("--top-logprobs", &o->top_logprobs, 0, SAMPLER_MAX_TOP_LOGPROBS),
    };
    ATTND_ASSERT(cap >= (int)ATTND_ARRAY_LEN(opts));
    memcpy(out, opts, sizeof(opts));
    return (int)ATTND_ARRAY_LEN(opts);
}

void cli_sampling_check(const char *cmd, const cli_sampling *o, int n_vocab) {
    for (int i = 0; i < o->n_bias; i++)
        if (o->bias[i].id >= n_vocab)
            cli_usage_error(cmd, "--logit-bias: token id %d is outside the model's vocabulary (0..%d)",
                            (int)o->bias[i].id, n_vocab - 1);
    attnd_err err;
    if (sampler_params_validate(&o->params, n_vocab, &err) != ATTND_OK) cli_usage_error(cmd, "%s", err.msg);
}

// ---- Generation callbacks -------------------------------------------------------------------

struct cli_gen {
    gen *g;                  /* sampler, end-of-generation, detokenizer, stop strings */
    stop_reason why;         /* of the last token */
    int top_n;               /* --top-logprobs */
    int n_max, n;            /* tokens room was made for, tokens picked */
    token_logprob *chosen;   /* (n_max) owns top too: one allocation */
    token_logprob *top;      /* (n_max, top_n), just after chosen */
    bool has_tok;
    buf text;                /* what the pipeline released */
};

void cli_gen_destroy(cli_gen *g) {
    if (!g) return;
    gen_destroy(g->g);
    free(g->chosen);
    buf_free(&g->text);
    free(g);
}

attnd_status cli_gen_create(cli_gen **out, const cli_sampling *o, int n_vocab, const tokenizer *tok,
                            const int32_t *prompt, int n_prompt, int n_predict, attnd_err *err) {
    *out = NULL;
    cli_gen *g = calloc(1, sizeof(*g));
    if (!g) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    gen_params p = {.sp = o->params, .stops = o->stops, .n_stops = o->n_stops,
                    .top_logprobs = o->top_logprobs > 0 ? o->top_logprobs : -1, .ignore_eog = o->ignore_eos};
    attnd_status st = gen_create(&g->g, &p, n_vocab, tok, prompt, n_prompt, err);
    if (st == ATTND_ERR_UNSUPPORTED) attnd_fail(err, st, "--stop needs the model's vocabulary, which did not load");
    if (st != ATTND_OK) goto fail;
    g->has_tok = tok != NULL;
    g->top_n = o->top_logprobs;
    g->n_max = n_predict;
    if (o->top_logprobs > 0 && n_predict > 0) {
        g->chosen = malloc(sizeof(*g->chosen) * (size_t)n_predict * (1 + (size_t)o->top_logprobs));
        if (!g->chosen) {
            st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for %d tokens' logprobs", n_predict);
            goto fail;
        }
        g->top = g->chosen + n_predict;
    }
    *out = g;
    return ATTND_OK;
fail:
    cli_gen_destroy(g);
    return st;
}

int32_t cli_gen_pick(void *user, const float *logits) {
    cli_gen *g = user;
    bool record = g->chosen && g->n < g->n_max;
    gen_token t;
    g->why = gen_next(g->g, logits, record ? g->top + (size_t)g->n * g->top_n : NULL, &t);
    if (record) g->chosen[g->n] = (token_logprob){t.id, t.logprob};
    if (!buf_append(&g->text, t.text, t.n_text)) g->why = STOP_STRING; /* out of memory: end here */
    g->n++;
    return t.id;
}

/* The token was the one cli_gen_pick just returned: the pipeline already said whether to end. */
bool cli_gen_on_token(void *user, int32_t id) {
    (void)id;
    return ((cli_gen *)user)->why == STOP_NONE;
}

const char *cli_gen_text(cli_gen *g, size_t *len) {
    const char *tail;
    size_t n;
    gen_finish(g->g, &tail, &n);
    buf_append(&g->text, tail, n);
    *len = g->text.len;
    return g->text.p ? g->text.p : "";
}

/* A logprob as JSON: -inf (a banned or impossible token) has no JSON number, so null. */
static json_t *logprob_json(float lp) { return isfinite(lp) ? json_real(lp) : json_null(); }

struct json_t *cli_gen_logprobs_json(const cli_gen *g) {
    json_t *a = json_array();
    int n = g->n < g->n_max ? g->n : g->n_max;
    for (int i = 0; g->chosen && i < n; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "id", json_integer(g->chosen[i].id));
        json_object_set_new(e, "logprob", logprob_json(g->chosen[i].logprob));
        json_t *top = json_array();
        for (int k = 0; k < g->top_n; k++) {
            const token_logprob *t = &g->top[(size_t)i * g->top_n + k];
            if (t->id < 0) break; /* vocabulary smaller than top_n */
            json_t *te = json_object();
            json_object_set_new(te, "id", json_integer(t->id));
            json_object_set_new(te, "logprob", logprob_json(t->logprob));
            json_array_append_new(top, te);
        }
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(a, e);
    }
    return a;
}
