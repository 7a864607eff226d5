/*
 * cmd_heads.c — `attnd heads`: each attention head's previous-token, induction, first-token
 * (sink) and local-window scores on repeated random probes from the model's vocabulary, and the
 * labels they earn (attnd/head_roles.h); the JSON of GET /v1/heads with --json.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

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
    "  --model PATH    the GGUF file (default: the shipped default model)\n"
    "  --threads N     threads; 0 (the default) = the CPUs this process may use\n"
    "  --kv-type T     KV cache type, f16 (default, as the server) or f32\n"
    "\n";

static void print_table(const head_roles *hr) {
    printf("layer head  prev   induct sink   local  labels\n");
    for (int c = 0; c < hr->n_layer * hr->n_head; c++) {
        const head_scores *s = &hr->scores[c];
        const char *lab[4];
        int n = head_roles_labels(s, lab);
        printf("%5d %4d  %.3f  %.3f  %.3f  %.3f ", c / hr->n_head, c % hr->n_head, s->previous_token, s->induction,
               s->sink, s->local);
        for (int i = 0; i < n; i++) printf(" %s", lab[i]);
        printf("\n");
    }
}

static attnd_status heads(const cli_run_opts *run, bool json, attnd_err *err) {
    model *m = NULL;
    tokenizer *tok = NULL;
    int32_t *cand = NULL;
    cli_seq q = {0};
    head_roles hr = {0};
    head_roles_params p;
    attnd_status st;
    if ((st = cli_model_load(&m, "heads", run->model, err)) || (st = tok_load(&tok, model_gguf(m), err))) goto out;
    if (!heads_api_params(tok, &p, &cand)) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = cli_seq_open(&q, m, 128, run, err)) || (st = head_roles_compute(q.e, q.pool, &p, &hr, err))) goto out;
    if (json) {
        json_t *body = heads_api_json(model_info_get(m)->name, &hr, &p);
        char *text = body ? attn_api_dump(body) : NULL;
        json_decref(body);
        if (!text) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        else puts(text);
        free(text);
    } else {
        print_table(&hr);
    }
out:
    head_roles_free(&hr);
    cli_seq_close(&q);
    free(cand);
    tok_destroy(tok);
    model_destroy(m);
    return st;
}

int cmd_heads(int argc, char **argv) {
    cli_run_opts run = {0};
    bool json = false;
    const cli_opt opts[] = {CLI_OPT_RUN(&run), CLI_OPT_SET("--json", &json)};
    if (!cli_parse_opts("heads", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) exit(0);
    attnd_err err;
    return cli_exit("heads", heads(&run, json, &err), &err);
}
