/*
 * cmd_embed.c — `attnd embed` (one JSON array of floats per input, a line each) and `attnd
 * rerank` (a query's documents sorted by relevance) on a model file, without a server: the same
 * pooling, normalisation and pair prompts as /v1/embeddings and /v1/rerank (server/api/embreq.h,
 * rerank.h), the inputs evaluated by engine_embed in one call.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/embed.h"
#include "attnd/gguf.h"
#include "attnd/tokenizer.h"
#include "commands.h"
#include "../server/api/embreq.h"
#include "../server/api/rerank.h"

static const char *EMBED_USAGE =
    "usage: attnd embed [--model PATH] [--dimensions N] [--no-normalize] [--threads N] [TEXT...]\n"
    "\n"
    "Prints one embedding per input, each a JSON array of floats on a line of its own. The inputs\n"
    "are the arguments, else the lines of standard input. Pooled as the model file says (a\n"
    "generation model: its last token), L2-normalised as /v1/embeddings answers.\n"
    "  --model PATH      the GGUF file (default: the shipped default model)\n"
    "  --dimensions N    keep the first N components, then normalise (Matryoshka)\n"
    "  --no-normalize    the raw pooled vectors\n"
    "  --threads N       threads; 0 (the default) = the CPUs this process may use\n";

static const char *RERANK_USAGE =
    "usage: attnd rerank [--model PATH] --query TEXT [--top-n N] [--json] [--threads N] [DOCUMENT...]\n"
    "\n"
    "Scores each document against the query with a reranking model (a classification head) and\n"
    "prints them best first: score, index and text, tab-separated. The documents are the\n"
    "arguments, else the lines of standard input.\n"
    "  --model PATH      the GGUF file (default: the shipped default model)\n"
    "  --query TEXT      the query (required)\n"
    "  --top-n N         only the N best\n"
    "  --json            print the answer POST /v1/rerank gives (with the documents)\n"
    "  --threads N       threads; 0 (the default) = the CPUs this process may use\n";

#define MAX_INPUTS 4096

typedef struct embed_opts {
    cli_run_opts run;
    const char *query;
    int dimensions, top_n;
    bool raw, json;
    const char *pos[MAX_INPUTS];
    cli_args args;
} embed_opts;

/* The inputs: the arguments, else stdin's non-empty lines (owned by *lines). */
static int read_inputs(embed_opts *o, char ***lines) {
    *lines = NULL;
    if (o->args.n > 0) return o->args.n;
    int n = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    char **v = malloc(MAX_INPUTS * sizeof(*v));
    while (v && n < MAX_INPUTS && (len = getline(&line, &cap, stdin)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len > 0) v[n++] = strdup(line);
    }
    free(line);
    for (int i = 0; i < n; i++) o->pos[i] = v[i];
    *lines = v;
    return n;
}

/* The model, its tokenizer and an engine whose batch holds the longest input. */
typedef struct embed_run {
    model *m;
    tokenizer *tok;
    engine *e;
    embed_input in[MAX_INPUTS];
    int n;
} embed_run;

static void run_free(embed_run *r) {
    for (int i = 0; i < r->n; i++) free((int32_t *)r->in[i].tokens);
    engine_destroy(r->e);
    tok_destroy(r->tok);
    model_destroy(r->m);
}

static attnd_status run_open(embed_run *r, const char *cmd, const embed_opts *o, attnd_err *err) {
    attnd_status st = cli_model_load(&r->m, cmd, o->run.model, err);
    if (st == ATTND_OK) st = tok_load(&r->tok, model_gguf(r->m), err);
    return st;
}

/* Evaluates r->in into out (r->n, dim) with an engine sized for the longest input. */
static attnd_status run_eval(embed_run *r, const embed_opts *o, model_pooling pool, float *out, attnd_err *err) {
    if (r->n == 0) return ATTND_OK;
    int longest = 1, n_ctx = model_info_get(r->m)->n_ctx;
    for (int i = 0; i < r->n; i++) {
        if (r->in[i].n_tokens > n_ctx)
            return attnd_fail(err, ATTND_ERR_INVALID, "input %d has %d tokens; the model's context is %d", i, r->in[i].n_tokens, n_ctx);
        if (r->in[i].n_tokens > longest) longest = r->in[i].n_tokens;
    }
    attnd_status st = engine_create(&r->e, r->m, longest, o->run.n_threads, err);
    return st == ATTND_OK ? engine_embed(r->e, r->in, r->n, pool, out, err) : st;
}

static attnd_status embed(embed_opts *o, attnd_err *err) {
    char **lines;
    int n = read_inputs(o, &lines);
    embed_run r = {0};
    float *raw = NULL, *vec = NULL;
    attnd_status st = run_open(&r, "embed", o, err);
    model_pooling pool = st == ATTND_OK ? model_pooling_type(r.m) : POOL_NONE;
    if (pool == POOL_RANK) pool = model_is_encoder(r.m) ? POOL_CLS : POOL_LAST;
    int dim = st == ATTND_OK ? model_pool_dim(r.m, pool) : 0;
    if (st == ATTND_OK && dim <= 0) st = attnd_fail(err, ATTND_ERR_INVALID, "the model's pooling type is 'none'");
    for (int i = 0; st == ATTND_OK && i < n; i++) {
        int32_t *ids;
        size_t k;
        if ((st = tok_encode(r.tok, o->pos[i], strlen(o->pos[i]), true, false, &ids, &k, err)) != ATTND_OK) break;
        r.in[r.n++] = (embed_input){.tokens = ids, .n_tokens = (int)k};
        if (k == 0) st = attnd_fail(err, ATTND_ERR_INVALID, "input %d gives no tokens", i);
    }
    if (st == ATTND_OK && (!(raw = malloc(((size_t)n + 1) * dim * sizeof(float))) || !(vec = malloc((size_t)dim * sizeof(float)))))
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    if (st == ATTND_OK) st = run_eval(&r, o, pool, raw, err);
    for (int i = 0; st == ATTND_OK && i < n; i++) {
        int k = embreq_finish(raw + (size_t)i * dim, dim, o->dimensions, o->raw ? EMBREQ_NORM_NONE : EMBREQ_NORM_L2, vec);
        for (int j = 0; j < k; j++) printf("%s%.9g", j ? "," : "[", vec[j]);
        printf("]\n");
    }
    free(raw);
    free(vec);
    run_free(&r);
    for (int i = 0; lines && i < n; i++) free(lines[i]);
    free(lines);
    return st;
}

static void print_ranked(const json_t *a, bool as_json) {
    if (as_json) {
        json_dumpf(a, stdout, JSON_COMPACT | JSON_REAL_PRECISION(9));
        putchar('\n');
        return;
    }
    json_t *res = json_object_get(a, "results");
    for (size_t i = 0; i < json_array_size(res); i++) {
        json_t *e = json_array_get(res, i);
        printf("%.6f\t%" JSON_INTEGER_FORMAT "\t%s\n", json_real_value(json_object_get(e, "relevance_score")),
               json_integer_value(json_object_get(e, "index")),
               json_string_value(json_object_get(json_object_get(e, "document"), "text")));
    }
}

static attnd_status rerank(embed_opts *o, attnd_err *err) {
    char **lines;
    int n = read_inputs(o, &lines);
    embed_run r = {0};
    float *raw = NULL, *scores = NULL;
    rerank_doc docs[MAX_INPUTS];
    const char *tmpl = NULL;
    attnd_status st = run_open(&r, "rerank", o, err);
    if (st == ATTND_OK && !(model_roles(r.m) & MODEL_ROLE_RANK))
        st = attnd_fail(err, ATTND_ERR_INVALID, "the model does not rank (no classification head)");
    if (st == ATTND_OK) gguf_get_str(model_gguf(r.m), "tokenizer.chat_template.rerank", &tmpl, NULL);
    int dim = st == ATTND_OK ? model_pool_dim(r.m, POOL_RANK) : 0;
    for (int i = 0; st == ATTND_OK && i < n; i++) {
        int32_t *ids;
        size_t k;
        docs[i] = (rerank_doc){o->pos[i], strlen(o->pos[i])};
        st = rerank_pair_tokens(r.tok, tmpl, o->query, strlen(o->query), docs[i].text, docs[i].len, &ids, &k, err);
        if (st == ATTND_OK) r.in[r.n++] = (embed_input){.tokens = ids, .n_tokens = (int)k};
    }
    if (st == ATTND_OK && (!(raw = malloc(((size_t)n + 1) * dim * sizeof(float))) || !(scores = malloc(((size_t)n + 1) * sizeof(float)))))
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    if (st == ATTND_OK) st = run_eval(&r, o, POOL_RANK, raw, err);
    if (st == ATTND_OK) {
        long n_tokens = 0;
        for (int i = 0; i < n; i++) scores[i] = raw[(size_t)i * dim], n_tokens += r.in[i].n_tokens;
        rerank_request rq = {.query = o->query, .docs = docs, .n_docs = n, .return_documents = true, .model = "",
                             .top_n = o->top_n > 0 && o->top_n < n ? o->top_n : n};
        json_t *a = rerank_answer(&rq, scores, n_tokens, model_info_get(r.m)->name);
        if (a) print_ranked(a, o->json);
        else st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        json_decref(a);
    }
    free(raw);
    free(scores);
    run_free(&r);
    for (int i = 0; lines && i < n; i++) free(lines[i]);
    free(lines);
    return st;
}

int cmd_embed(int argc, char **argv) {
    embed_opts o = {.args = {.max = MAX_INPUTS}};
    o.args.v = o.pos;
    const cli_opt opts[] = {
        CLI_OPT_RUN(&o.run),
        CLI_OPT_INT("--dimensions", &o.dimensions, 1, 1 << 20),
        CLI_OPT_SET("--no-normalize", &o.raw),
        CLI_OPT_ARGS(&o.args),
    };
    if (!cli_parse_opts("embed", EMBED_USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    attnd_err err;
    return cli_exit("embed", embed(&o, &err), &err);
}

int cmd_rerank(int argc, char **argv) {
    embed_opts o = {.args = {.max = MAX_INPUTS}};
    o.args.v = o.pos;
    const cli_opt opts[] = {
        CLI_OPT_RUN(&o.run),
        CLI_OPT_STR("--query", &o.query),
        CLI_OPT_INT("--top-n", &o.top_n, 1, 1 << 20),
        CLI_OPT_SET("--json", &o.json),
        CLI_OPT_ARGS(&o.args),
    };
    if (!cli_parse_opts("rerank", RERANK_USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    if (!o.query) cli_usage_error("rerank", "--query is required");
    attnd_err err;
    return cli_exit("rerank", rerank(&o, &err), &err);
}
