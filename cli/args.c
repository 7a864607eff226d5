/* args.c — strict command-line parsing shared by the subcommands (see commands.h). */
#include "commands.h"
#include "../server/runtime/hub.h"

#include <errno.h>
#include <limits.h>
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

bool cli_flag_value(const char *cmd, int argc, char **argv, int *i, const char *flag, const char **value) {
    const char *a = argv[*i];
    size_t n = strlen(flag);
    if (strncmp(a, flag, n) != 0) return false;
    if (a[n] == '=') {
        *value = a + n + 1;
        *i += 1;
        return true;
    }
    if (a[n] != '\0') return false;
    if (*i + 1 >= argc) cli_usage_error(cmd, "%s needs a value", flag);
    *value = argv[*i + 1];
    *i += 2;
    return true;
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

/* One table entry for argv[*i], consumed; false when no entry matches. */
static bool match_opt(const char *cmd, int argc, char **argv, int *i, const cli_opt *o) {
    const char *v;
    switch (o->kind) {
    case CLI_SET:
    case CLI_CLEAR:
        if (strcmp(argv[*i], o->flag)) return false;
        *(bool *)o->dst = o->kind == CLI_SET;
        *i += 1;
        return true;
    case CLI_GROUP: return o->group(cmd, argc, argv, i, o->dst);
    case CLI_PROMPT: {
        cli_prompt *p = o->dst;
        const cli_opt prompt[] = {CLI_OPT_STR("--prompt", &p->text), CLI_OPT_STR("--tokens", &p->tokens)};
        return match_opt(cmd, argc, argv, i, &prompt[0]) || match_opt(cmd, argc, argv, i, &prompt[1]);
    }
    case CLI_RUN: {
        cli_run_opts *r = o->dst;
        const cli_opt run[] = {CLI_OPT_STR("--model", &r->model), CLI_OPT_INT("--threads", &r->n_threads, 0, 1024),
                               CLI_OPT_KV("--kv-type", &r->kv)};
        for (size_t k = 0; k < ATTND_ARRAY_LEN(run); k++)
            if (match_opt(cmd, argc, argv, i, &run[k])) return true;
        return false;
    }
    case CLI_ARGS: {
        cli_args *a = o->dst;
        const char *arg = argv[*i];
        if (arg[0] == '-' && arg[1]) return false;
        if (a->n == a->max) cli_usage_error(cmd, "unexpected argument '%s'", arg);
        a->v[a->n++] = arg;
        *i += 1;
        return true;
    }
    default: break;
    }
    if (!cli_flag_value(cmd, argc, argv, i, o->flag, &v)) return false;
    if (o->kind == CLI_STR) *(const char **)o->dst = v;
    else if (o->kind == CLI_INT) *(int *)o->dst = (int)cli_parse_int(cmd, o->flag, v, o->min, o->max);
    else if (kv_type_parse(v, (kv_type *)o->dst) != ATTND_OK)
        cli_usage_error(cmd, "%s: '%s' is not f16, f32, q8_0 or q4_0", o->flag, v);
    return true;
}

bool cli_parse_opts(const char *cmd, const char *usage, int argc, char **argv, const cli_opt *opts, int n_opts) {
    for (int i = 1; i < argc;) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            for (int k = 0; k < n_opts; k++)
                if (opts[k].kind == CLI_GROUP && opts[k].group_usage) fputs(opts[k].group_usage, stdout);
            return false;
        }
        int k = 0;
        while (k < n_opts && !match_opt(cmd, argc, argv, &i, &opts[k])) k++;
        if (k == n_opts) cli_usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    return true;
}

int32_t *cli_parse_ids(const char *cmd, const char *flag, const char *s, int *n_out) {
    int cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof(*ids));
    if (!ids) cli_usage_error(cmd, "out of memory");
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0'))
            cli_usage_error(cmd, "%s: '%s' is not a comma-separated list of token ids", flag, s);
        if (n == cap) {
            cap *= 2;
            int32_t *g = realloc(ids, cap * sizeof(*ids));
            if (!g) cli_usage_error(cmd, "out of memory");
            ids = g;
        }
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
