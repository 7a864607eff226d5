/*
 * cmd_attention.c — `attnd attention`: the attention weights the engine computes for a prompt
 * (and optionally a few generated tokens), as the JSON of POST /v1/attention, an SVG heatmap,
 * or a short text summary.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../server/api/attn_api.h"
#include "attn_view.h"
#include "attnd/attn_capture.h"
#include "attnd/embed.h"
#include "attnd/engine.h"
#include "attnd/tokenizer.h"
#include "commands.h"

static const char *USAGE =
    "usage: attnd attention (--prompt TEXT | --tokens 1,2,3) [--layer L] [--head H] [--attn-top-k K]\n"
    "                       [--n N] [sampling flags] [--json | --svg FILE] [--model PATH]\n"
    "                       [--threads N] [--kv-type f16|f32|q8_0|q4_0] [--logit-lens K] [--experts]\n"
    "\n"
    "Shows which earlier tokens each token attends to: the softmax weights the engine computes\n"
    "over the KV cache, per layer and head. On an encoder (bert, nomic-bert, gemma-embedding)\n"
    "every token attends to every token of the prompt: whole rows both ways, no generation.\n"
    "On a hybrid model (qwen35, qwen35moe, qwen3next) a Gated DeltaNet layer shows, per value\n"
    "head, the signed effective weights w with output_t = sum_j w_tj v_j exactly (not a softmax;\n"
    "red below 0 in --svg); its attention layers show softmax rows as usual.\n"
    "Attention weights show where a head looks, not why the model answered.\n"
    "  --prompt TEXT   prompt text (BOS added as the model asks)\n"
    "  --tokens IDS    comma-separated prompt token ids, used as given\n"
    "  --layer L       layer(s), e.g. 3 or 0,5 (default: every layer; --svg draws the first)\n"
    "  --head H        head(s) (default: every head; text and --svg show their mean)\n"
    "  --attn-top-k K  keep the K largest weights of each row, as [position, weight] pairs\n"
    "                  (--top-k is the sampling flag, as in `attnd generate`)\n"
    "  --weights W     attention (default): the softmax weights; norm: each weight times the norm\n"
    "                  of what that position's value adds to the head's output (|a W_O v|),\n"
    "                  renormalised per row\n"
    "  --logit-lens K  with --json: the K most probable tokens of each layer's residual stream\n"
    "                  at each position, read through the final norm and the output head\n"
    "  --experts       with --json, on a Mixture-of-Experts model: the experts the router chose\n"
    "                  for each token in each layer, with their weights\n"
    "  --n N           also generate N tokens (greedy unless --temp) and show their rows (default 0)\n"
    "  --json          print the JSON of POST /v1/attention\n"
    "  --svg FILE      write a heatmap (tokens on both axes, a thumbnail per head) to FILE\n"
    "  --model PATH    the GGUF file (default: the shipped default model)\n"
    "  --threads N     threads; 0 (the default) = the CPUs this process may use\n"
    "  --kv-type T     KV cache type: f16 (default, as the server), f32, q8_0, q4_0\n"
    "\n";

typedef struct attn_opts {
    const char *svg;
    cli_prompt prompt; /* --prompt or --tokens */
    int *layers, n_layers, *heads, n_heads;
    int top_k, n_predict, lens_k;
    attn_weights weights;
    bool json, experts;
    cli_run_opts run; /* --model, --threads, --kv-type */
    cli_sampling sampling;
} attn_opts;

/* "3" or "0,5" into a malloc'd list. */
static int *parse_list(const char *flag, const char *s, int *n) {
    int32_t *ids = cli_parse_ids("attention", flag, s, n);
    int *out = malloc(sizeof(int) * (size_t)*n);
    if (!out) cli_usage_error("attention", "out of memory");
    for (int i = 0; i < *n; i++) out[i] = ids[i];
    free(ids);
    return out;
}

static void parse_args(int argc, char **argv, attn_opts *o) {
    *o = (attn_opts){0};
    cli_sampling_init(&o->sampling);
    const char *layers = NULL, *heads = NULL, *weights = NULL;
    const cli_opt opts[] = {
        CLI_OPT_RUN(&o->run),
        CLI_OPT_PROMPT(&o->prompt),
        CLI_OPT_STR("--svg", &o->svg),
        CLI_OPT_STR("--layer", &layers),
        CLI_OPT_STR("--head", &heads),
        CLI_OPT_INT("--attn-top-k", &o->top_k, 0, 1 << 24),
        CLI_OPT_INT("--n", &o->n_predict, 0, 1 << 20),
        CLI_OPT_STR("--weights", &weights),
        CLI_OPT_INT("--logit-lens", &o->lens_k, 0, 1 << 24),
        CLI_OPT_SAMPLING(&o->sampling),
        CLI_OPT_SET("--json", &o->json),
        CLI_OPT_SET("--experts", &o->experts),
    };
    if (!cli_parse_opts("attention", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) exit(0);
    if (layers) o->layers = parse_list("--layer", layers, &o->n_layers);
    if (heads) o->heads = parse_list("--head", heads, &o->n_heads);
    cli_prompt_check("attention", &o->prompt);
    if (o->json && o->svg) cli_usage_error("attention", "give at most one of --json and --svg");
    if (o->svg && o->top_k) cli_usage_error("attention", "--svg draws whole rows; leave out --attn-top-k");
    if (weights && strcmp(weights, "attention") && strcmp(weights, "norm"))
        cli_usage_error("attention", "--weights: '%s'; give attention or norm", weights);
    o->weights = weights && !strcmp(weights, "norm") ? ATTN_WEIGHTS_NORM : ATTN_WEIGHTS_ATTENTION;
    if (o->lens_k && !o->json) cli_usage_error("attention", "--logit-lens is shown with --json only");
    if (o->experts && !o->json) cli_usage_error("attention", "--experts is shown with --json only");
    if (o->sampling.top_logprobs) cli_usage_error("attention", "--top-logprobs is not available here");
}

/* Display labels: each token's own text (control tokens shown), newlines and tabs visible.
 * A malloc'd array of malloc'd strings. */
static char **make_labels(const tokenizer *tok, const int32_t *ids, int n) {
    char **lab = calloc((size_t)n, sizeof(char *));
    for (int i = 0; lab && i < n; i++) {
        const char *b = "";
        size_t len = 0;
        if (!tok_token_bytes(tok, ids[i], true, &b, &len)) len = 0;
        lab[i] = malloc(len * 3 + 1); /* each byte becomes at most a 3-byte symbol */
        if (!lab[i]) continue;
        char *o = lab[i];
        for (size_t k = 0; k < len; k++) {
            if (b[k] == '\n') o += sprintf(o, "\u21b5");
            else if (b[k] == '\t') o += sprintf(o, "\u21e5");
            else *o++ = b[k];
        }
        *o = '\0';
    }
    return lab;
}

static void free_labels(char **lab, int n) {
    for (int i = 0; lab && i < n; i++) free(lab[i]);
    free(lab);
}

/* An encoder's run: the prompt through engine_embed (one input) with c hooked. */
static attnd_status run_encoder(const attn_opts *o, const model *m, attn_capture *c, const int32_t *ids, int n,
                                attnd_err *err) {
    engine *e = NULL;
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)model_info_get(m)->n_embd);
    if (!out) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    attnd_status st = engine_create(&e, m, n, o->run.n_threads, err);
    if (st == ATTND_OK) {
        attn_hook h;
        attn_hook_install(&h, e, c, NULL, 0);
        st = engine_embed_tokens(e, &(embed_input){ids, n, NULL}, 1, out, err);
        attn_hook_remove(&h);
    }
    engine_destroy(e);
    free(out);
    return st;
}

/* Runs the prompt (and generation) with capture c hooked; *ids receives prompt + generated. */
static attnd_status run(const attn_opts *o, const model *m, const tokenizer *tok, attn_capture *c, int32_t *ids,
                        int n_prompt, int *n_ids, attnd_err *err) {
    cli_seq q = {0};
    cli_gen *cg = NULL;
    attnd_status st;
    if ((st = cli_seq_open(&q, m, n_prompt < 512 ? n_prompt : 512, &o->run, err))) goto done;
    if ((st = cli_gen_create(&cg, &o->sampling, model_info_get(m)->n_vocab, tok, ids, n_prompt, o->n_predict, err)))
        goto done;
    attn_capture_bind(c, q.s);
    attn_hook h;
    attn_hook_install(&h, q.e, c, NULL, 0);
    engine_gen g = {.n_predict = o->n_predict, .pick = cli_gen_pick, .pick_user = cg,
                    .on_token = cli_gen_on_token, .token_user = cg};
    int n_out = 0;
    st = engine_generate(q.e, q.s, ids, n_prompt, &g, ids + n_prompt, &n_out, NULL, err);
    attn_hook_remove(&h);
    *n_ids = n_prompt + n_out;
done:
    cli_gen_destroy(cg);
    cli_seq_close(&q);
    return st;
}

static attnd_status emit(const attn_opts *o, const model *m, const tokenizer *tok, const attn_capture *c,
                         const int32_t *ids, int n_ids, int n_prompt, attnd_err *err) {
    const char *name = model_info_get(m)->name;
    if (o->json) {
        json_t *body = attn_api_response(name, model_info_get(m), tok, ids, n_ids, n_prompt, c);
        char *text = body ? attn_api_dump(body) : NULL;
        json_decref(body);
        if (!text) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        puts(text);
        free(text);
        return ATTND_OK;
    }
    char **labels = make_labels(tok, ids, n_ids);
    attn_view v = {.c = c, .labels = labels, .n_tokens = n_ids, .n_prompt = n_prompt, .model = name};
    /* the main map: the one head asked for (--svg captured every head, in order), or the mean */
    attnd_status st = ATTND_OK;
    int hi = o->n_heads != 1 ? -1 : o->svg ? o->heads[0] : 0;
    if (o->svg) {
        FILE *f = fopen(o->svg, "w");
        bool ok = f && attn_view_svg(f, &v, 0, hi);
        if (f && fclose(f)) ok = false;
        if (!ok) st = attnd_fail(err, ATTND_ERR_IO, "cannot write %s", o->svg);
    } else {
        attn_view_text(stdout, &v, hi);
    }
    free_labels(labels, n_ids);
    return st;
}

/* Captures the attention over the prompt (--prompt is encoded here) and the generated tokens,
 * and prints it. */
static attnd_status attention(attn_opts *o, attnd_err *err) {
    int n_ids = 0;
    int32_t *ids = NULL;
    model *m = NULL;
    tokenizer *tok = NULL;
    attn_capture *c = NULL;
    attnd_status st;
    if ((st = cli_model_load(&m, "attention", o->run.model, err)) || (st = tok_load(&tok, model_gguf(m), err)))
        goto out;
    const model_info *mi = model_info_get(m);
    if ((st = cli_prompt_encode(&o->prompt, tok, err))) goto out;
    const int32_t *given = o->prompt.ids;
    int n_prompt = o->prompt.n;
    for (int i = 0; i < n_prompt; i++)
        if (given[i] < 0 || given[i] >= mi->n_vocab)
            cli_usage_error("attention", "--tokens: id %d is outside 0..%d", given[i], mi->n_vocab - 1);
    if (n_prompt < 1 || (long long)n_prompt + o->n_predict > mi->n_ctx)
        cli_usage_error("attention", "%d prompt tokens + %d to generate: the model's context holds 1..%d", n_prompt,
                        o->n_predict, mi->n_ctx);
    cli_sampling_check("attention", &o->sampling, mi->n_vocab);
    /* --svg draws one layer, with a thumbnail of every head: capture them all. */
    bool enc = model_is_encoder(m);
    if (enc && o->n_predict)
        cli_usage_error("attention", "--n: '%s' is an encoder; it generates nothing (leave out --n)", mi->arch);
    attn_capture_params p = {.layers = o->layers, .n_layers = o->svg && o->n_layers ? 1 : o->n_layers,
                             .heads = o->svg ? NULL : o->heads, .n_heads = o->svg ? 0 : o->n_heads,
                             .top_k = o->top_k, .n_positions = n_prompt + o->n_predict, .weights = o->weights,
                             .lens_k = o->lens_k, .experts = o->experts,
                             .inputs = enc ? &n_prompt : NULL, .n_inputs = enc, .deltanet = true};
    static const int layer0 = 0;
    if (o->svg && !o->n_layers) p.layers = &layer0, p.n_layers = 1;
    const char *field;
    if (attn_capture_check(mi, &p, &field, err))
        cli_usage_error("attention", "%s (%s)", err->msg,
                        !strcmp(field, "layers") ? "--layer" : !strcmp(field, "heads") ? "--head"
                        : !strcmp(field, "logit_lens") ? "--logit-lens"
                        : !strcmp(field, "experts")    ? "--experts"
                        : !strcmp(field, "weights")    ? "--weights"
                        : !strcmp(field, "top_k")      ? "--attn-top-k"
                        : !strcmp(field, "model")      ? "--model"
                                                       : "--prompt");
    if (o->svg && o->n_heads > 1)
        cli_usage_error("attention", "--svg draws one head or the mean of all: give one --head");
    if ((st = attn_capture_create(&c, m, &p, err))) goto out;
    if (o->svg && o->n_heads == 1 && o->heads[0] >= attn_capture_layer_heads(c, 0))
        cli_usage_error("attention", "--head: %d is out of range; layer %d has %d heads", o->heads[0],
                        attn_capture_layer(c, 0), attn_capture_layer_heads(c, 0));
    if (!(ids = malloc(sizeof(int32_t) * (size_t)(n_prompt + o->n_predict)))) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(ids, given, sizeof(int32_t) * (size_t)n_prompt);
    if (enc) st = run_encoder(o, m, c, ids, n_prompt, err), n_ids = n_prompt;
    else st = run(o, m, tok, c, ids, n_prompt, &n_ids, err);
    if (st) goto out;
    st = emit(o, m, tok, c, ids, n_ids, n_prompt, err);
out:
    attn_capture_destroy(c);
    tok_destroy(tok);
    model_destroy(m);
    free(ids);
    return st;
}

int cmd_attention(int argc, char **argv) {
    attn_opts o;
    parse_args(argc, argv, &o);
    attnd_err err;
    attnd_status st = attention(&o, &err);
    cli_prompt_free(&o.prompt);
    cli_sampling_free(&o.sampling);
    free(o.layers), free(o.heads);
    return cli_exit("attention", st, &err);
}
