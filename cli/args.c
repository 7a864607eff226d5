/*
 * args.c — strict command-line parsing shared by the subcommands (see commands.h): option tables,
 * llama.cpp's spellings as aliases, "did you mean", the default model, and the one-sequence set-up
 * (model, context, engine, KV) of generate, score, attention and chat.
 */
#include "commands.h"
#include "../server/runtime/hub.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "attnd %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'attnd %s --help'.\n", cmd);
    va_end(ap);
    exit(2);
}

long long cli_parse_int(const char *cmd, const char *flag, const char *s, long long min, long long max) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0')
        cli_usage_error(cmd, "%s: '%s' is not an integer", flag, s);
    if (v < min || v > max) cli_usage_error(cmd, "%s: %lld is outside %lld..%lld", flag, v, min, max);
    return v;
}

float cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, bool lo_open, double hi,
                      bool hi_open) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE && isinf(v)) v = NAN; /* "1e999": not a usable number either */
    if (end == s || *end != '\0' || !isfinite(v)) cli_usage_error(cmd, "%s: '%s' is not a finite number", flag, s);
    if ((lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi)) {
        char lo_s[32], hi_s[32];
        snprintf(lo_s, sizeof(lo_s), isinf(lo) ? "-inf" : "%g", lo);
        snprintf(hi_s, sizeof(hi_s), isinf(hi) ? "inf" : "%g", hi);
        cli_usage_error(cmd, "%s: %s is outside %s%s, %s%s", flag, s, lo_open ? "(" : "[", lo_s, hi_s,
                        hi_open ? ")" : "]");
    }
    return (float)v;
}

// ---- aliases ---------------------------------------------------------------------------------

/* The spellings people bring from llama.cpp (and the other subcommands), read as the flag on the
 * right wherever a command has it. `to` NULL: a GPU flag, read with its value and ignored. */
static const struct cli_alias {
    const char *alias, *to;
} ALIASES[] = {
    {"-m", "--model"},       {"-c", "--ctx-size"},         {"-t", "--threads"},
    {"-n", "--n"},           {"--n-predict", "--n"},       {"--predict", "--n"},
    {"--max-tokens", "--n"}, {"-p", "--prompt"},           {"-s", "--seed"},
    {"--temp", "--temperature"}, {"-sys", "--system"},     {"--system-prompt", "--system"},
    {"-v", "--verbose"},     {"-ngl", NULL},               {"--n-gpu-layers", NULL},
    {"--gpu-layers", NULL},
};

static const cli_opt *find_flag(const cli_opt *flat, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (flat[k].flag && flat[k].kind != CLI_ALIAS && !strcmp(flat[k].flag, name)) return &flat[k];
    return NULL;
}

static const struct cli_alias *find_alias(const char *name) {
    for (size_t k = 0; k < ATTND_ARRAY_LEN(ALIASES); k++)
        if (!strcmp(ALIASES[k].alias, name)) return &ALIASES[k];
    return NULL;
}

bool cli_gpu_flag(const char *name) {
    const struct cli_alias *al = find_alias(name);
    return al && !al->to;
}

/* Edit distance of two short strings (99 past 63 bytes). */
static size_t distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b), row[64];
    if (na > 63 || nb > 63) return 99;
    for (size_t j = 0; j <= nb; j++) row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

/* The usage error for a flag the command does not know: an alias of a flag it lacks says so;
 * otherwise the nearest flag or alias it knows (within 2 edits and a third of the name). */
_Noreturn static void unknown_flag(const char *cmd, const char *name, const cli_opt *flat, int n) {
    const struct cli_alias *al = find_alias(name);
    if (al && al->to) cli_usage_error(cmd, "'%s' (%s) is not an option of attnd %s", name, al->to, cmd);
    const char *best = NULL;
    size_t best_d = 3;
    for (int k = 0; k < n; k++) {
        if (!flat[k].flag) continue;
        size_t d = distance(name, flat[k].flag);
        if (d < best_d && d * 3 <= strlen(name)) best_d = d, best = flat[k].flag;
    }
    for (size_t k = 0; k < ATTND_ARRAY_LEN(ALIASES); k++) {
        size_t d = distance(name, ALIASES[k].alias);
        if (ALIASES[k].to && find_flag(flat, n, ALIASES[k].to) && d < best_d && d * 3 <= strlen(name))
            best_d = d, best = ALIASES[k].alias;
    }
    if (best) cli_usage_error(cmd, "unknown option '%s' (did you mean '%s'?)", name, best);
    cli_usage_error(cmd, "unknown option '%s'", name);
}

// ---- the parser ------------------------------------------------------------------------------

#define CLI_MAX_OPTS 96

/* The table with CLI_RUN, CLI_PROMPT and CLI_GROUP entries replaced by the flags they stand for. */
static int flatten(const cli_opt *opts, int n_opts, cli_opt *flat) {
    int n = 0;
    for (int k = 0; k < n_opts; k++) {
        const cli_opt *o = &opts[k];
        if (o->kind == CLI_RUN) {
            cli_run_opts *r = o->dst;
            const cli_opt run[] = {CLI_OPT_STR("--model", &r->model), CLI_OPT_INT("--threads", &r->n_threads, 0, 1024),
                                   CLI_OPT_KV("--kv-type", &r->kv)};
            for (size_t j = 0; j < ATTND_ARRAY_LEN(run); j++) flat[n++] = run[j];
        } else if (o->kind == CLI_PROMPT) {
            cli_prompt *p = o->dst;
            flat[n++] = (cli_opt)CLI_OPT_STR("--prompt", &p->text);
            flat[n++] = (cli_opt)CLI_OPT_STR("--tokens", &p->tokens);
        } else if (o->kind == CLI_GROUP) {
            n += o->expand(o->dst, flat + n, CLI_MAX_OPTS - n);
        } else {
            flat[n++] = *o;
        }
        ATTND_ASSERT(n <= CLI_MAX_OPTS - 16);
    }
    return n;
}

/* Stores value into o's destination; flag is the spelling typed, for messages. */
static void store(const char *cmd, const char *flag, const cli_opt *o, const char *v) {
    switch (o->kind) {
    case CLI_STR: *(const char **)o->dst = v; break;
    case CLI_INT: *(int *)o->dst = (int)cli_parse_int(cmd, flag, v, o->min, o->max); break;
    case CLI_FLOAT: *(float *)o->dst = cli_parse_float(cmd, flag, v, o->lo, o->lo_open, o->hi, o->hi_open); break;
    case CLI_FN: o->fn(cmd, flag, v, o->dst); break;
    case CLI_KV:
        if (kv_type_parse(v, (kv_type *)o->dst) != ATTND_OK)
            cli_usage_error(cmd, "%s: '%s' is not f16, f32, q8_0 or q4_0", flag, v);
        break;
    default: ATTND_ASSERT(!"a flag without a value to store");
    }
}

/* argv[*i] as a positional argument, when the table takes one more. */
static void positional(const char *cmd, const cli_opt *flat, int n, const char *arg) {
    for (int k = 0; k < n; k++) {
        if (flat[k].kind != CLI_ARGS) continue;
        cli_args *a = flat[k].dst;
        if (a->n == a->max) break;
        a->v[a->n++] = arg;
        return;
    }
    cli_usage_error(cmd, "unexpected argument '%s'", arg);
}

/* The entry a flag names: the command's own, through the command's alias, or through ALIASES.
 * NULL for a GPU flag (to be ignored). */
static const cli_opt *resolve(const char *cmd, const char *name, const cli_opt *flat, int n) {
    const cli_opt *o = find_flag(flat, n, name);
    if (o) return o;
    for (int k = 0; k < n; k++)
        if (flat[k].kind == CLI_ALIAS && !strcmp(flat[k].flag, name) && (o = find_flag(flat, n, flat[k].to))) return o;
    const struct cli_alias *al = find_alias(name);
    if (al && !al->to) return NULL;
    if (al && (o = find_flag(flat, n, al->to))) return o;
    unknown_flag(cmd, name, flat, n);
}

bool cli_parse_opts(const char *cmd, const char *usage, int argc, char **argv, const cli_opt *opts, int n_opts) {
    cli_opt flat[CLI_MAX_OPTS];
    int n = flatten(opts, n_opts, flat);
    for (int i = 1; i < argc;) {
        const char *a = argv[i++];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            for (int k = 0; k < n_opts; k++)
                if (opts[k].kind == CLI_GROUP && opts[k].group_usage) fputs(opts[k].group_usage, stdout);
            return false;
        }
        if (a[0] != '-' || !a[1]) {
            positional(cmd, flat, n, a);
            continue;
        }
        char name[64];
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL, *v = eq ? eq + 1 : NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof(name)) cli_usage_error(cmd, "unknown option '%.60s'", a);
        memcpy(name, a, len);
        name[len] = '\0';
        const cli_opt *o = resolve(cmd, name, flat, n);
        if (o && (o->kind == CLI_SET || o->kind == CLI_CLEAR)) {
            if (v) cli_usage_error(cmd, "%s takes no value", name);
            *(bool *)o->dst = o->kind == CLI_SET;
            continue;
        }
        if (!v && i >= argc) cli_usage_error(cmd, "%s needs a value", name);
        if (!v) v = argv[i++];
        if (o) store(cmd, name, o, v);
        else fprintf(stderr, "attnd %s: %s %s ignored: attnd computes on the CPU\n", cmd, name, v);
    }
    return true;
}

int32_t *cli_parse_ids(const char *cmd, const char *flag, const char *s, int *n_out) {
    size_t cap = 16;
    int n = 0;
    int32_t *ids = malloc(cap * sizeof(*ids));
    if (!ids) cli_usage_error(cmd, "out of memory");
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0'))
            cli_usage_error(cmd, "%s: '%s' is not a comma-separated list of token ids", flag, s);
        if (!attnd_grow(&ids, &cap, (size_t)n + 1, sizeof(*ids), 16)) cli_usage_error(cmd, "out of memory");
        ids[n++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (n == 0) cli_usage_error(cmd, "%s: no token ids given", flag);
    *n_out = n;
    return ids;
}

void cli_prompt_check(const char *cmd, cli_prompt *p) {
    if (!p->text == !p->tokens) cli_usage_error(cmd, "give exactly one of --prompt and --tokens");
    if (p->tokens) p->ids = cli_parse_ids(cmd, "--tokens", p->tokens, &p->n);
}

attnd_status cli_prompt_encode(cli_prompt *p, const tokenizer *tok, attnd_err *err) {
    if (!p->text) return ATTND_OK;
    size_t n = 0;
    free(p->ids);
    p->ids = NULL;
    attnd_status st = tok_encode(tok, p->text, strlen(p->text), true, true, &p->ids, &n, err);
    p->n = (int)n;
    return st;
}

void cli_prompt_free(cli_prompt *p) {
    free(p->ids);
    *p = (cli_prompt){0};
}

static char *existing(const char *dir, const char *rel) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s/%s", dir, rel) >= (int)sizeof(buf)) return NULL;
    return access(buf, R_OK) == 0 ? strdup(buf) : NULL;
}

char *cli_default_model_path(void) {
    static const char *MODEL = "attnd-sotu.gguf";
    char *p;
    const char *env = getenv("ATTND_MODEL");
    if (env && *env) return strdup(env);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        char rel[64];
        /* installed tree: bin/attnd -> share/attnd/models/ (works when relocated or staged) */
        snprintf(rel, sizeof(rel), "../share/attnd/models/%s", MODEL);
        if ((p = existing(exe, rel))) return p;
        /* build tree: build/attnd -> models/ of the source tree */
        snprintf(rel, sizeof(rel), "../models/%s", MODEL);
        if ((p = existing(exe, rel))) return p;
    }
    /* a build folder anywhere (cmake -B /elsewhere): the source tree it was built from */
    if ((p = existing(ATTND_SOURCE_MODEL_DIR, MODEL))) return p;
    return existing(ATTND_INSTALL_DATADIR "/models", MODEL);
}

char *cli_hub_model(const char *cmd, const char *ref) {
    char path[4096];
    attnd_err err = {{0}};
    if (hub_cached(ref, NULL, path, sizeof(path), &err) != ATTND_OK) {
        fprintf(stderr, "attnd %s: %s is not in the model cache; pulling it\n", cmd, ref);
        if (hub_pull(ref, NULL, path, sizeof(path), &err) != ATTND_OK) {
            fprintf(stderr, "attnd %s: %s\n", cmd, err.msg);
            exit(1);
        }
    }
    char *p = strdup(path);
    if (!p) cli_usage_error(cmd, "out of memory");
    return p;
}

const char *cli_resolve_model(const char *cmd, const char *model, char **owned) {
    *owned = NULL;
    if (model && !strncmp(model, "hf://", 5)) return *owned = cli_hub_model(cmd, model);
    if (model) return model;
    *owned = cli_default_model_path();
    if (!*owned) cli_usage_error(cmd, "no --model given and no default model found");
    return *owned;
}

int cli_exit(const char *cmd, attnd_status st, const attnd_err *err) {
    if (st == ATTND_OK) return 0;
    fprintf(stderr, "attnd %s: %s\n", cmd, err->msg);
    return 1;
}

attnd_status cli_model_load(model **out, const char *cmd, const char *path, attnd_err *err) {
    char *dflt;
    attnd_status st = model_load(out, cli_resolve_model(cmd, path, &dflt), err);
    free(dflt);
    return st;
}

attnd_status cli_seq_open(cli_seq *c, const model *m, int max_batch, const cli_run_opts *r, attnd_err *err) {
    *c = (cli_seq){0};
    attnd_status st;
    if ((st = engine_create(&c->e, m, max_batch, r->n_threads, err)) != ATTND_OK ||
        (st = kv_pool_create(&c->pool, m, SIZE_MAX, r->kv, err)) != ATTND_OK ||
        (st = kv_seq_create(&c->s, c->pool, err)) != ATTND_OK)
        cli_seq_close(c);
    return st;
}

void cli_seq_close(cli_seq *c) {
    kv_seq_destroy(c->s);
    kv_pool_destroy(c->pool);
    engine_destroy(c->e);
    *c = (cli_seq){0};
}

attnd_status cli_model_context(model *m, const char *cmd, int ctx_size, int *n_ctx, attnd_err *err) {
    int file_ctx = model_info_get(m)->n_ctx;
    if (ctx_size > file_ctx)
        fprintf(stderr, "attnd %s: --ctx-size %d is more than the model's context of %d; using %d\n", cmd, ctx_size,
                file_ctx, file_ctx);
    *n_ctx = ctx_size > 0 && ctx_size < file_ctx ? ctx_size : file_ctx;
    return model_set_context(m, *n_ctx, err);
}

double cli_logprob_of(const float *logits, int n_vocab, int32_t id) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return (double)logits[id] - mx - log(sum);
}
