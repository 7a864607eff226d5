/*
 * cmd_generate.c — `attnd generate`: one prompt, one continuation, on the command line.
 *
 * Flag parsing lives in parse_args() and fills one gen_opts struct: new sampling flags are added
 * there (and to USAGE) only. The generation loop itself is engine_generate().
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/engine.h"
#include "attnd/spec.h"
#include "attnd/tokenizer.h"
#include "attnd/utf8.h"
#include "commands.h"

static const char *USAGE =
    "usage: attnd generate [--model PATH] (--prompt TEXT | --tokens 1,2,3) [--n 64] [sampling flags]\n"
    "                      [--json] [--ctx-size N] [--threads N] [--kv-type f16|f32|q8_0|q4_0]\n"
    "\n"
    "Generates a continuation of the prompt. With --tokens the ids are used exactly as given (no\n"
    "BOS added). Generation runs for --n tokens, until an end-of-generation token (EOS, EOT...;\n"
    "see --ignore-eos), or until a --stop string.\n"
    "  -m, --model PATH  the GGUF file (default: the shipped default model)\n"
    "  -p, --prompt TEXT prompt text, tokenized with the model's vocabulary (BOS added as the model asks)\n"
    "  --tokens IDS      comma-separated prompt token ids\n"
    "  -n, --n N         tokens to generate (default 64; also --n-predict, --max-tokens)\n"
    "  --json            print {\"prompt_tokens\",\"tokens\",\"text\",\"timings\"} as one JSON object\n"
    "  -c, --ctx-size N  the context: prompt + --n must fit (default 0: the model's; more is cut to it)\n"
    "  -t, --threads N   threads; 0 (the default) = the CPUs this process may use\n"
    "  --kv-type T       KV cache type: f16 (default), f32, q8_0 or q4_0\n"
    "Speculative decoding (off, but on a model with an MTP block; same output: docs/sampling.md):\n"
    "  --draft-max N     draft up to N tokens per step (1..32) and verify them in one batch;\n"
    "                    without --draft-model the drafts come from the model's MTP block (nextn\n"
    "                    layers: then on by default, 3 tokens) or else from prompt lookup\n"
    "  --no-mtp          do not draft with the model's MTP block\n"
    "  --draft-model P   draft with this GGUF (the target's vocabulary; Q4_0 of the same model)\n"
    "  --draft-min-p X   stop a draft model's draft below this top probability (default 0.5)\n"
    "  --lookup-ngram N  prompt lookup matches the last 2..N tokens (default 8)\n"
    "  --draft-fixed     draft N every step; by default the draft length follows the measured\n"
    "                    step costs and acceptance, and drafting stops where it does not pay\n"
    "\n";

typedef struct gen_opts {
    cli_prompt prompt;     /* --prompt or --tokens */
    int n_predict;
    int ctx_size;          /* 0 = the model's */
    cli_sampling sampling; /* --temp, --seed, --stop, --top-logprobs... (cli/sampling_args.c) */
    cli_run_opts run;      /* --model, --threads, --kv-type */
    bool json;
    int draft_max;           /* 0 = no speculation */
    const char *draft_model; /* NULL = prompt lookup */
    const char *draft_min_p;
    int lookup_ngram;
    bool draft_fixed;
    bool no_mtp;             /* --no-mtp */
    bool mtp;                /* drafts come from the model's MTP block (set from the model) */
} gen_opts;

static void parse_args(int argc, char **argv, gen_opts *o) {
    *o = (gen_opts){.n_predict = 64, .lookup_ngram = 8};
    cli_sampling_init(&o->sampling);
    const cli_opt opts[] = {
        CLI_OPT_RUN(&o->run),
        CLI_OPT_PROMPT(&o->prompt),
        CLI_OPT_INT("--n", &o->n_predict, 0, 1 << 24),
        CLI_OPT_INT("--ctx-size", &o->ctx_size, 0, 1 << 24),
        CLI_OPT_SAMPLING(&o->sampling),
        CLI_OPT_SET("--json", &o->json),
        CLI_OPT_INT("--draft-max", &o->draft_max, 0, SPEC_MAX_DRAFT),
        CLI_OPT_STR("--draft-model", &o->draft_model),
        CLI_OPT_STR("--draft-min-p", &o->draft_min_p),
        CLI_OPT_INT("--lookup-ngram", &o->lookup_ngram, 1, 8),
        CLI_OPT_SET("--draft-fixed", &o->draft_fixed),
        CLI_OPT_SET("--no-mtp", &o->no_mtp),
    };
    if (!cli_parse_opts("generate", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) exit(0);
    cli_prompt_check("generate", &o->prompt);
    if (o->sampling.top_logprobs && !o->json) cli_usage_error("generate", "--top-logprobs needs --json");
    if ((o->draft_model || o->draft_min_p || o->draft_fixed) && !o->draft_max)
        cli_usage_error("generate", "--draft-model, --draft-min-p and --draft-fixed need --draft-max");
}

// ---- speculative decoding -----------------------------------------------------------------------

/* The drafter of --draft-max: prompt lookup, the model's MTP block on the target's sequence q, or
 * --draft-model in its own engine and KV pool. */
typedef struct cli_spec {
    model *dm;
    cli_seq dq;
    spec *sp;
} cli_spec;

static attnd_status cli_spec_open(cli_spec *c, const gen_opts *o, const model *target, const cli_seq *q,
                                  attnd_err *err) {
    *c = (cli_spec){0};
    if (!o->draft_max) return ATTND_OK;
    spec_params p;
    spec_params_default(&p);
    p.draft_max = o->draft_max, p.ngram_max = o->lookup_ngram, p.fixed = o->draft_fixed;
    if (p.ngram_min > p.ngram_max) p.ngram_min = p.ngram_max;
    if (o->draft_min_p) {
        char *end;
        p.draft_min_p = strtof(o->draft_min_p, &end);
        if (end == o->draft_min_p || *end) return attnd_fail(err, ATTND_ERR_INVALID, "--draft-min-p: \"%.40s\" is not a number", o->draft_min_p);
    }
    if (!spec_supported(target)) fprintf(stderr, "attnd generate: speculation is off for models with sliding-window layers\n");
    attnd_status st = ATTND_OK;
    if (o->draft_model) {
        if ((st = model_load(&c->dm, o->draft_model, err)) || (st = spec_vocab_check(target, c->dm, err))) return st;
        if (!spec_supported(c->dm) || model_info_get(c->dm)->n_recurrent_layers) return attnd_fail(err, ATTND_ERR_UNSUPPORTED, "the draft model has sliding-window or recurrent layers, which speculation cannot roll back");
        if ((st = cli_seq_open(&c->dq, c->dm, 512, &o->run, err))) return st;
        p.draft = c->dq.e, p.draft_pool = c->dq.pool;
    } else if (o->mtp) {
        p.mtp = q->e, p.mtp_seq = q->s;
    }
    return spec_create(&c->sp, &p, err);
}

static void cli_spec_close(cli_spec *c) {
    spec_destroy(c->sp);
    cli_seq_close(&c->dq);
    model_destroy(c->dm);
}

/* A JSON string of len bytes, invalid UTF-8 sequences (a continuation cut short by --n, raw
 * byte tokens) replaced by U+FFFD so the output is always valid JSON. */
static json_t *text_json(const char *text, size_t len) {
    size_t n;
    char *fixed = utf8_valid(text, len, false) ? NULL : utf8_sanitize(text, len, false, &n);
    json_t *j = fixed ? json_stringn(fixed, n) : json_stringn(text, len);
    free(fixed);
    return j ? j : json_string("");
}

static json_t *ids_json(const int32_t *ids, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* The target's measured step times by rows (the cost speculation weighs; spec.h), and the draft
 * model's per drafted token. */
static json_t *step_costs_json(const spec *sp) {
    const spec_cost *c = spec_costs(sp);
    json_t *o = json_object();
    for (int n = 1; n <= SPEC_COST_ROWS; n++) {
        if (c->ms[n] <= 0) continue;
        char key[16];
        snprintf(key, sizeof(key), "%d", n);
        json_object_set_new(o, key, json_real(c->ms[n]));
    }
    if (c->draft_ms > 0) json_object_set_new(o, "draft_per_token", json_real(c->draft_ms));
    return o;
}

/* The result: one JSON object (--json), or the text (ids without a vocabulary) then a timing
 * line on stderr. */
static void print_result(const gen_opts *o, bool has_tok, const int32_t *prompt, int n_prompt, const int32_t *out,
                         int n_out, const char *text, size_t text_len, const cli_gen *cg, const engine_timings *tm,
                         const spec *sp) {
    double tps = tm->decode_ms > 0 ? tm->n_decode / (tm->decode_ms / 1e3) : 0;
    if (o->json) {
        json_t *root = json_object();
        json_object_set_new(root, "prompt_tokens", ids_json(prompt, n_prompt));
        json_object_set_new(root, "tokens", ids_json(out, n_out));
        json_object_set_new(root, "text", text_json(text, text_len));
        if (o->sampling.top_logprobs) json_object_set_new(root, "logprobs", cli_gen_logprobs_json(cg));
        json_t *t = json_object();
        json_object_set_new(t, "prefill_ms", json_real(tm->prefill_ms));
        json_object_set_new(t, "decode_ms", json_real(tm->decode_ms));
        json_object_set_new(t, "decode_tok_per_s", json_real(tps));
        if (o->draft_max) {
            json_object_set_new(t, "drafted", json_integer(tm->n_drafted));
            json_object_set_new(t, "accepted", json_integer(tm->n_accepted));
            if (sp) json_object_set_new(t, "step_ms", step_costs_json(sp));
        }
        json_object_set_new(root, "timings", t);
        json_dumpf(root, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(root);
        return;
    }
    /* Text when there is a vocabulary (the prompt as given, then the continuation), else ids. */
    if (has_tok) {
        if (o->prompt.text) fputs(o->prompt.text, stdout);
        fwrite(text, 1, text_len, stdout);
    } else {
        for (int i = 0; i < n_out; i++) printf("%s%d", i ? "," : "", out[i]);
    }
    putchar('\n');
    fflush(stdout); /* the timing line on stderr comes after the text */
    fprintf(stderr, "prefill %d tokens in %.1f ms, decode %d tokens in %.1f ms (%.1f tok/s)\n", tm->n_prefill,
            tm->prefill_ms, tm->n_decode, tm->decode_ms, tps);
    if (o->draft_max)
        fprintf(stderr, "speculation: %d drafted, %d accepted (%.0f %%)\n", tm->n_drafted, tm->n_accepted,
                tm->n_drafted ? 100.0 * tm->n_accepted / tm->n_drafted : 0.0);
}

/* Generates a continuation of the prompt (--prompt is encoded here) and prints the result. */
static attnd_status generate(gen_opts *o, attnd_err *err) {
    model *m = NULL;
    cli_seq q = {0};
    int32_t *out = NULL;
    tokenizer *tok = NULL;
    cli_gen *cg = NULL;
    cli_spec cs = {0};
    int n_ctx;
    attnd_status st = cli_model_load(&m, "generate", o->run.model, err);
    if (st == ATTND_OK) st = cli_model_context(m, "generate", o->ctx_size, &n_ctx, err);
    if (st != ATTND_OK) goto out;
    const model_info *mi = model_info_get(m);
    /* The tokenizer is needed for --prompt and for the text; with --tokens a model without a
     * usable vocabulary still generates ids. */
    attnd_err tok_err;
    if (tok_load(&tok, model_gguf(m), &tok_err) != ATTND_OK) {
        tok = NULL;
        if (o->prompt.text) {
            st = attnd_fail(err, ATTND_ERR_UNSUPPORTED, "cannot tokenize --prompt: %.400s", tok_err.msg);
            goto out;
        }
    }
    if ((st = cli_prompt_encode(&o->prompt, tok, err))) goto out;
    const int32_t *prompt = o->prompt.ids;
    int n_prompt = o->prompt.n;
    if (n_prompt == 0) {
        st = attnd_fail(err, ATTND_ERR_INVALID, "the prompt encodes to no tokens");
        goto out;
    }
    if ((long long)n_prompt + o->n_predict > n_ctx) {
        st = attnd_fail(err, ATTND_ERR_INVALID, "%d prompt tokens + %d to generate exceed the context of %d",
                        n_prompt, o->n_predict, n_ctx);
        goto out;
    }
    /* the model's own MTP block drafts unless told otherwise (3 tokens when --draft-max is not given) */
    o->mtp = mi->mtp && !o->no_mtp && !o->draft_model && spec_supported(m);
    if (o->mtp && !o->draft_max) o->draft_max = 3;
    int rows = o->draft_max + 1 > n_prompt ? o->draft_max + 1 : n_prompt; /* prefill chunks, verify batches */
    if ((st = cli_seq_open(&q, m, rows < 512 ? rows : 512, &o->run, err))) goto out;
    if (!o->mtp && mi->mtp) { /* its cache unused: out of the pool, before the sequence is made */
        kv_seq_destroy(q.s), q.s = NULL;
        if ((st = kv_pool_set_mtp(q.pool, false, err)) || (st = kv_seq_create(&q.s, q.pool, err))) goto out;
    }
    if ((st = cli_spec_open(&cs, o, m, &q, err))) goto out;
    if (!(out = malloc(sizeof(*out) * (size_t)(o->n_predict ? o->n_predict : 1)))) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        goto out;
    }
    cli_sampling_check("generate", &o->sampling, mi->n_vocab);
    if ((st = cli_gen_create(&cg, &o->sampling, mi->n_vocab, tok, prompt, n_prompt, o->n_predict, err))) goto out;
    engine_gen g = {.n_predict = o->n_predict, .pick = cli_gen_pick, .pick_user = cg,
                    .on_token = cli_gen_on_token, .token_user = cg, .spec = cs.sp};
    engine_timings tm;
    int n_out;
    if ((st = engine_generate(q.e, q.s, prompt, n_prompt, &g, out, &n_out, &tm, err))) goto out;
    size_t text_len = 0;
    const char *text = cli_gen_text(cg, &text_len); /* cut at a --stop string */
    print_result(o, tok != NULL, prompt, n_prompt, out, n_out, text, text_len, cg, &tm, cs.sp);
out:
    free(out);
    cli_gen_destroy(cg);
    tok_destroy(tok);
    cli_spec_close(&cs);
    cli_seq_close(&q);
    model_destroy(m);
    return st;
}

int cmd_generate(int argc, char **argv) {
    gen_opts o;
    parse_args(argc, argv, &o);
    attnd_err err;
    attnd_status st = generate(&o, &err);
    cli_prompt_free(&o.prompt);
    cli_sampling_free(&o.sampling);
    return cli_exit("generate", st, &err);
}
