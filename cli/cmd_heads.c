/*
 * cmd_heads.c — `attnd heads`: each attention head's previous-token, induction, first-token
 * (sink) and local-window scores on repeated random probes from the model's vocabulary, and the
 * labels they earn (attnd/head_roles.h); the JSON of GET /v1/heads with --json.
 *
 * The answer is cached per model file: $XDG_CACHE_HOME/attnd/heads (or ~/.cache/attnd/heads),
 * one JSON file named by a hash of the model's real path, size and modification time, the KV
 * type and the probe seed. A file that does not read back as this model's answer is recomputed.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../server/api/attn_api.h"
#include "../server/api/heads_api.h"
#include "attnd/head_roles.h"
#include "commands.h"

static const char *USAGE =
    "usage: attnd heads [--json] [--model PATH] [--threads N] [--kv-type f16|f32]\n"
    "\n"
    "Scores every attention head on probes of random tokens from the model's vocabulary, each\n"
    "run of tokens repeated once: weight on the previous token, on the token after the earlier\n"
    "occurrence of the current one (induction), on the first token (sink), and on the last 4\n"
    "positions (local). A label where a score clears its threshold (docs/server.md, GET /v1/heads).\n"
    "Patterns on random text, not proof of what a head does: ablate it to see that.\n"
    "  --json          print the JSON of GET /v1/heads\n"
    "  --no-cache      compute again, ignoring (and not writing) the cache of this model file\n"
    "  --model PATH    the GGUF file (default: the shipped default model)\n"
    "  --threads N     threads; 0 (the default) = the CPUs this process may use\n"
    "  --kv-type T     KV cache type, f16 (default, as the server) or f32\n"
    "\n";

static void print_table(const head_roles *hr) {
    printf("layer head  prev   induct sink   local  labels\n");
    for (int c = 0; c < hr->n_layer * hr->n_head; c++) {
        const head_scores *s = &hr->scores[c];
        const char *lab[4];
        if (!head_roles_scored(hr, c / hr->n_head)) continue; /* a hybrid model's DeltaNet layer */
        int n = head_roles_labels(s, lab);
        printf("%5d %4d  %.3f  %.3f  %.3f  %.3f ", c / hr->n_head, c % hr->n_head, s->previous_token, s->induction,
               s->sink, s->local);
        for (int i = 0; i < n; i++) printf(" %s", lab[i]);
        printf("\n");
    }
}

// ---- the cache ---------------------------------------------------------------------------

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

/* The cache file of the model at path into out; false when the model or no cache dir is found. */
static bool cache_path(char *out, size_t n, const char *path, kv_type kv) {
    char real[PATH_MAX];
    struct stat st;
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (!realpath(path, real) || stat(real, &st) || (!(x && *x) && !(home && *home))) return false;
    long long fields[] = {(long long)st.st_size, (long long)st.st_mtim.tv_sec, (long long)st.st_mtim.tv_nsec,
                          (long long)kv, (long long)HEADS_API_SEED};
    uint64_t h = fnv(fnv(0xcbf29ce484222325ull, real, strlen(real)), fields, sizeof(fields));
    int k = x && *x ? snprintf(out, n, "%s/attnd/heads/%016llx.json", x, (unsigned long long)h)
                    : snprintf(out, n, "%s/.cache/attnd/heads/%016llx.json", home, (unsigned long long)h);
    return k > 0 && (size_t)k < n;
}

/* The cached answer for this model (new reference), or NULL when absent or not this model's. */
static json_t *cache_read(const char *file, const model_info *mi) {
    json_t *j = json_load_file(file, 0, NULL), *heads = json_object_get(j, "heads");
    bool ok = json_is_array(heads) && json_array_size(heads) == (size_t)mi->n_layer * (size_t)mi->n_head &&
              json_integer_value(json_object_get(j, "n_layer")) == mi->n_layer &&
              json_integer_value(json_object_get(j, "n_head")) == mi->n_head;
    for (size_t i = 0; ok && i < json_array_size(heads); i++) {
        const json_t *h = json_array_get(heads, i);
        static const char *const keys[] = {"previous_token", "induction", "sink", "local"};
        for (size_t k = 0; k < ATTND_ARRAY_LEN(keys); k++) ok &= json_is_number(json_object_get(h, keys[k]));
    }
    if (!ok) json_decref(j), j = NULL;
    return j;
}

/* Writes text as file (its folders made, a temporary renamed over it); a failure only warns. */
static void cache_write(const char *file, const char *text) {
    char dir[PATH_MAX + 64], tmp[PATH_MAX + 96];
    snprintf(dir, sizeof(dir), "%s", file);
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(dir, 0755) && errno != EEXIST) break;
            *p = '/';
        }
    snprintf(tmp, sizeof(tmp), "%s.tmp%ld", file, (long)getpid());
    FILE *f = fopen(tmp, "w");
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f)) ok = false;
    if (!ok || rename(tmp, file)) {
        remove(tmp);
        fprintf(stderr, "attnd heads: warning: cannot write the cache %s\n", file);
    }
}

/* head_roles from a cached answer (scores owned by hr). */
static bool roles_from_json(head_roles *hr, const json_t *j) {
    const json_t *heads = json_object_get(j, "heads");
    *hr = (head_roles){.n_layer = (int)json_integer_value(json_object_get(j, "n_layer")),
                       .n_head = (int)json_integer_value(json_object_get(j, "n_head")),
                       .scores = calloc(json_array_size(heads) + 1, sizeof(head_scores))};
    for (size_t i = 0; hr->scores && i < json_array_size(heads); i++) {
        const json_t *h = json_array_get(heads, i);
        hr->scores[i] = (head_scores){json_number_value(json_object_get(h, "previous_token")),
                                      json_number_value(json_object_get(h, "induction")),
                                      json_number_value(json_object_get(h, "sink")),
                                      json_number_value(json_object_get(h, "local"))};
    }
    return hr->scores != NULL;
}

// ---- the command ---------------------------------------------------------------------------

/* Prints the answer (JSON text, or the table of hr). */
static attnd_status print_answer(const char *text, const head_roles *hr, bool json, attnd_err *err) {
    if (!text) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    if (json) puts(text);
    else print_table(hr);
    return ATTND_OK;
}

static attnd_status heads(const cli_run_opts *run, bool json, bool no_cache, attnd_err *err) {
    model *m = NULL;
    tokenizer *tok = NULL;
    int32_t *cand = NULL;
    cli_seq q = {0};
    head_roles hr = {0};
    head_roles_params p;
    attnd_status st;
    char *owned = NULL, file[PATH_MAX + 64];
    const char *path = cli_resolve_model("heads", run->model, &owned);
    bool cached = !no_cache && cache_path(file, sizeof(file), path, run->kv);
    if ((st = cli_model_load(&m, "heads", path, err)) || (st = tok_load(&tok, model_gguf(m), err))) goto out;
    json_t *hit = cached ? cache_read(file, model_info_get(m)) : NULL;
    char *text = hit ? attn_api_dump(hit) : NULL;
    if (hit && roles_from_json(&hr, hit)) {
        json_decref(hit);
        st = print_answer(text, &hr, json, err);
        free(text);
        goto out;
    }
    json_decref(hit), free(text);
    if (!heads_api_params(tok, &p, &cand)) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = cli_seq_open(&q, m, 128, run, err)) || (st = head_roles_compute(q.e, q.pool, &p, &hr, err))) goto out;
    json_t *body = heads_api_json(model_info_get(m)->name, &hr, &p);
    text = body ? attn_api_dump(body) : NULL;
    json_decref(body);
    if (text && cached) cache_write(file, text);
    st = print_answer(text, &hr, json, err);
    free(text);
out:
    free(owned);
    head_roles_free(&hr);
    cli_seq_close(&q);
    free(cand);
    tok_destroy(tok);
    model_destroy(m);
    return st;
}

int cmd_heads(int argc, char **argv) {
    cli_run_opts run = {0};
    bool json = false, no_cache = false;
    const cli_opt opts[] = {CLI_OPT_RUN(&run), CLI_OPT_SET("--json", &json), CLI_OPT_SET("--no-cache", &no_cache)};
    if (!cli_parse_opts("heads", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) exit(0);
    attnd_err err;
    return cli_exit("heads", heads(&run, json, no_cache, &err), &err);
}
