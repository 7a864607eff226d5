/*
 * cmd_score.c — `attnd score`: teacher-forced evaluation of a token sequence in one prefill.
 * For every position i >= 1 it reports the id the model ranks first given positions < i and the
 * log-probability it gives the actual token i: the measure used to compare attnd with llama.cpp.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/engine.h"
#include "attnd/sampler.h"
#include "commands.h"

static const char *USAGE =
    "usage: attnd score [--model PATH] --tokens 1,2,3,... [--json] [--threads N] [--kv-type f16|f32|q8_0|q4_0]\n"
    "\n"
    "Evaluates the token ids (used exactly as given, no BOS added) in one prefill and prints, for\n"
    "every position i >= 1, the argmax id predicted from positions < i and the log-probability of\n"
    "token i.\n"
    "  --model PATH      the GGUF file (default: the shipped default model)\n"
    "  --tokens IDS      comma-separated token ids (at least 2)\n"
    "  --json            print {\"argmax\":[...],\"logprobs\":[...]} (both of length n-1)\n"
    "  --threads N       threads; 0 (the default) = the CPUs this process may use\n"
    "  --kv-type T       KV cache type: f16 (default), f32, q8_0 or q4_0\n";

typedef struct score_opts {
    const char *tokens;
    cli_run_opts run; /* --model, --threads, --kv-type */
    bool json;
} score_opts;

/* false when --help was printed. */
static bool parse_args(int argc, char **argv, score_opts *o) {
    *o = (score_opts){0};
    const cli_opt opts[] = {
        CLI_OPT_RUN(&o->run),
        CLI_OPT_STR("--tokens", &o->tokens),
        CLI_OPT_SET("--json", &o->json),
    };
    if (!cli_parse_opts("score", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return false;
    if (!o->tokens) cli_usage_error("score", "--tokens is required");
    return true;
}

/* The table (or JSON) of argmax and log-probability per position; steals argmax and lps. */
static void print_scores(bool as_json, const int32_t *ids, int n, json_t *argmax, json_t *lps) {
    if (as_json) {
        json_t *root = json_object();
        json_object_set_new(root, "argmax", argmax); /* steals */
        json_object_set_new(root, "logprobs", lps);
        json_dumpf(root, stdout, JSON_COMPACT | JSON_REAL_PRECISION(9));
        putchar('\n');
        json_decref(root);
        return;
    }
    double total = 0;
    printf("%5s %8s %8s %12s\n", "pos", "token", "argmax", "logprob");
    for (int i = 1; i < n; i++) {
        double lp = json_real_value(json_array_get(lps, i - 1));
        total += lp;
        printf("%5d %8d %8lld %12.6f\n", i, ids[i], (long long)json_integer_value(json_array_get(argmax, i - 1)), lp);
    }
    printf("mean logprob %.6f, perplexity %.4f\n", total / (n - 1), exp(-total / (n - 1)));
    json_decref(argmax);
    json_decref(lps);
}

/* Scores ids[0..n) (n >= 2) with o's model and prints the result. */
static attnd_status score(const score_opts *o, const int32_t *ids, int n, attnd_err *err) {
    model *m = NULL;
    cli_seq q = {0};
    batch_entry *b = NULL;
    float *logits = NULL;
    json_t *argmax = json_array(), *lps = json_array();
    attnd_status st = cli_model_load(&m, "score", o->run.model, err);
    if (st != ATTND_OK) goto out;
    const model_info *mi = model_info_get(m);
    if (n > mi->n_ctx) {
        st = attnd_fail(err, ATTND_ERR_INVALID, "%d tokens exceed the model's context of %d", n, mi->n_ctx);
        goto out;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] >= mi->n_vocab) {
            st = attnd_fail(err, ATTND_ERR_INVALID, "token id %d is outside the vocabulary (0..%d)", ids[i],
                            mi->n_vocab - 1);
            goto out;
        }
    /* One prefill of up to 512 tokens (longer sequences continue in chunks of 512), so the logits
     * buffer stays at 512 x n_vocab floats even for large vocabularies. */
    int max_batch = n < 512 ? n : 512;
    if ((st = cli_seq_open(&q, m, max_batch, &o->run, err)) != ATTND_OK) goto out;
    b = malloc(sizeof(*b) * (size_t)max_batch);
    logits = malloc(sizeof(float) * (size_t)max_batch * mi->n_vocab); /* (max_batch, n_vocab) */
    if (!b || !logits || !argmax || !lps) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int done = 0; done < n - 1;) {
        /* positions done..done+c-1 predict tokens done+1..done+c */
        int c = (n - 1 - done) < max_batch ? n - 1 - done : max_batch;
        for (int i = 0; i < c; i++) b[i] = (batch_entry){q.s, ids[done + i], done + i, true};
        if ((st = engine_eval(q.e, b, c, logits, err)) != ATTND_OK) goto out;
        for (int i = 0; i < c; i++) {
            const float *lg = logits + (size_t)i * mi->n_vocab;
            json_array_append_new(argmax, json_integer(sampler_argmax(lg, mi->n_vocab)));
            json_array_append_new(lps, json_real(cli_logprob_of(lg, mi->n_vocab, ids[done + i + 1])));
        }
        done += c;
    }
    print_scores(o->json, ids, n, argmax, lps); /* steals both */
    argmax = lps = NULL;
out:
    json_decref(argmax);
    json_decref(lps);
    free(b);
    free(logits);
    cli_seq_close(&q);
    model_destroy(m);
    return st;
}

int cmd_score(int argc, char **argv) {
    score_opts o;
    if (!parse_args(argc, argv, &o)) return 0;
    int n;
    int32_t *ids = cli_parse_ids("score", "--tokens", o.tokens, &n);
    if (n < 2) cli_usage_error("score", "--tokens: need at least 2 ids to score");
    attnd_err err;
    attnd_status st = score(&o, ids, n, &err);
    free(ids);
    return cli_exit("score", st, &err);
}
