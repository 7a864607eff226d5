/*
 * repl_local.c — `attnd chat`'s turns in this process: the model's own chat template (the order
 * `attnd serve` picks it in, server/api/chat.h), one engine and one KV sequence kept across turns.
 *
 * Each turn renders the whole conversation and tokenizes it; the longest prefix the KV sequence
 * already holds is kept (kv_seq_truncate drops the rest) and only the tokens after it are
 * computed: a follow-up costs its own tokens, and /clear or /load costs a full prefill. The reply
 * streams through the generation pipeline (attnd/gen.h) into the view token by token; generation
 * ends at an end-of-generation token, the template's end marker, --n tokens, the context's end
 * or Ctrl-C.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/engine.h"
#include "attnd/gen.h"
#include "attnd/tokenizer.h"
#include "repl.h"
#include "../server/api/chat.h"

typedef struct repl_local {
    repl_backend base;
    const repl_opts *o;   /* borrowed */
    model *m;
    tokenizer *tok;
    chat_template ct;
    cli_seq q;
    int n_ctx;
    int32_t *hist;        /* (n_ctx) the tokens the KV sequence holds, in order (kv_seq_len of them) */
    int32_t *out;         /* (n_ctx) a reply's tokens */
    const char **stops;   /* --stop strings and the template's end marker */
    char line[256];       /* describe() */
    /* during a turn */
    gen *g;
    repl_view *v;
    stop_reason why;
} repl_local;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* engine_gen's pick: the pipeline's token, its text printed as it is released. */
static int32_t local_pick(void *user, const float *logits) {
    repl_local *l = user;
    gen_token t;
    l->why = gen_next(l->g, logits, NULL, &t);
    repl_view_text(l->v, t.text, t.n_text);
    return t.id;
}

static bool local_on_token(void *user, int32_t id) {
    (void)id;
    repl_local *l = user;
    return l->why == STOP_NONE && !repl_interrupted();
}

/* messages as the template's input: chat_msg views of their role and content (borrowed). */
static chat_msg *msgs_of(const json_t *messages, size_t *n) {
    *n = json_array_size(messages);
    chat_msg *m = calloc(*n ? *n : 1, sizeof(*m));
    for (size_t i = 0; m && i < *n; i++) {
        const json_t *e = json_array_get(messages, i);
        const char *c = json_string_value(json_object_get(e, "content"));
        m[i] = (chat_msg){json_string_value(json_object_get(e, "role")), c ? c : ""};
    }
    return m;
}

/* The conversation as tokens, with the assistant's turn opened. */
static attnd_status render(repl_local *l, const json_t *messages, int32_t **ids, size_t *n, bool *opens,
                           attnd_err *err) {
    size_t n_msgs;
    chat_msg *msgs = msgs_of(messages, &n_msgs);
    if (!msgs) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    chat_request rq = {.msgs = msgs, .n_msgs = n_msgs, .raw = messages, .add_generation_prompt = true,
                       .opens_reasoning = opens};
    attnd_status st = chat_template_encode(&l->ct, l->tok, &rq, ids, n, err);
    free(msgs);
    return st;
}

/* Keeps the longest prefix of ids the KV sequence holds (at least one token is computed, for
 * its logits); returns how many tokens it kept. */
static int reuse_prefix(repl_local *l, const int32_t *ids, int n) {
    int held = kv_seq_len(l->q.s), p = 0;
    while (p < held && p < n && l->hist[p] == ids[p]) p++;
    if (p == n) p--;
    kv_seq_truncate(l->q.s, p);
    return kv_seq_len(l->q.s); /* sliding-window layers may keep less */
}

static attnd_status local_turn(repl_backend *b, const json_t *messages, repl_view *v, repl_stats *st, attnd_err *err) {
    repl_local *l = (repl_local *)b;
    double t0 = now_ms();
    int32_t *ids = NULL;
    size_t n_ids = 0;
    bool opens = false;
    *st = (repl_stats){.finish = "stop"};
    attnd_status rc = render(l, messages, &ids, &n_ids, &opens, err);
    if (rc != ATTND_OK) return rc;
    int n = (int)n_ids, room = l->n_ctx - n;
    st->prompt_tokens = n;
    if (room < 1) {
        free(ids);
        st->too_long = true;
        return attnd_fail(err, ATTND_ERR_INVALID, "the conversation is %d tokens, the context %d", n, l->n_ctx);
    }
    int n_predict = l->o->n_predict > 0 && l->o->n_predict < room ? l->o->n_predict : room;
    int p = reuse_prefix(l, ids, n);
    st->cached_tokens = p;
    const cli_sampling *s = &l->o->sampling;
    gen_params gp = {.sp = s->params, .stops = l->stops, .n_stops = s->n_stops + 1, .top_logprobs = -1,
                     .ignore_eog = s->ignore_eos};
    rc = gen_create(&l->g, &gp, model_info_get(l->m)->n_vocab, l->tok, ids, n, err);
    if (rc == ATTND_OK) {
        l->v = v;
        l->why = STOP_NONE;
        repl_view_begin(v, opens);
        engine_gen g = {.n_predict = n_predict, .pick = local_pick, .pick_user = l, .on_token = local_on_token,
                        .token_user = l};
        int n_out = 0;
        rc = engine_generate(l->q.e, l->q.s, ids + p, n - p, &g, l->out, &n_out, NULL, err);
        const char *tail;
        size_t n_tail;
        gen_finish(l->g, &tail, &n_tail);
        repl_view_text(v, tail, n_tail);
        repl_view_end(v);
        /* the sequence holds the prompt and all but the last generated token */
        memcpy(l->hist, ids, sizeof(*ids) * (size_t)n);
        memcpy(l->hist + n, l->out, sizeof(*ids) * (size_t)n_out);
        st->completion_tokens = n_out;
        st->finish = repl_interrupted() ? "interrupted" : l->why == STOP_NONE ? "length" : "stop";
        if (rc != ATTND_OK) kv_seq_truncate(l->q.s, 0); /* what it holds is not known to match hist */
    }
    gen_destroy(l->g);
    l->g = NULL;
    free(ids);
    st->ms = now_ms() - t0;
    return rc;
}

static void local_forget(repl_backend *b) { kv_seq_truncate(((repl_local *)b)->q.s, 0); }

static const char *local_describe(repl_backend *b) { return ((repl_local *)b)->line; }

static void local_destroy(repl_backend *b) {
    repl_local *l = (repl_local *)b;
    if (!l) return;
    cli_seq_close(&l->q);
    chat_template_free(&l->ct);
    tok_destroy(l->tok);
    model_destroy(l->m);
    free(l->hist);
    free(l->out);
    free(l->stops);
    free(l);
}

attnd_status repl_local_open(repl_backend **out, const repl_opts *o, attnd_err *err) {
    *out = NULL;
    repl_local *l = calloc(1, sizeof(*l));
    if (!l) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    l->base = (repl_backend){local_turn, local_forget, local_describe, local_destroy};
    l->o = o;
    const char *tmpl = NULL;
    attnd_status st = cli_model_load(&l->m, "chat", o->run.model, err);
    if (st == ATTND_OK) st = cli_model_context(l->m, "chat", o->ctx_size, &l->n_ctx, err);
    if (st == ATTND_OK) st = tok_load(&l->tok, model_gguf(l->m), err);
    if (st != ATTND_OK) goto fail;
    gguf_get_str(model_gguf(l->m), "tokenizer.chat_template", &tmpl, NULL);
    if ((st = chat_template_load(&l->ct, tmpl, NULL, NULL, l->tok, err)) != ATTND_OK) goto fail;
    cli_sampling_check("chat", &o->sampling, model_info_get(l->m)->n_vocab);
    if ((st = cli_seq_open(&l->q, l->m, 512, &o->run, err)) != ATTND_OK) goto fail;
    l->hist = malloc(sizeof(*l->hist) * (size_t)l->n_ctx);
    l->out = malloc(sizeof(*l->out) * (size_t)l->n_ctx);
    l->stops = calloc((size_t)o->sampling.n_stops + 1, sizeof(*l->stops));
    if (!l->hist || !l->out || !l->stops) {
        st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < o->sampling.n_stops; i++) l->stops[i] = o->sampling.stops[i];
    l->stops[o->sampling.n_stops] = chat_end_marker(l->ct.family);
    const model_info *mi = model_info_get(l->m);
    snprintf(l->line, sizeof(l->line), "%s (%s), context %d tokens, chat template %s", *mi->name ? mi->name : mi->arch,
             mi->arch, l->n_ctx, chat_source_str(&l->ct));
    *out = &l->base;
    return ATTND_OK;
fail:
    local_destroy(&l->base);
    return st;
}
