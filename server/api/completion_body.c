/*
 * completion_body.c — building the generation endpoints' response JSON (see completion_body.h).
 * Field order follows what OpenAI and llama.cpp send, so diffs against their answers stay small.
 */
#include "completion_body.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"

json_t *completion_body_token_str(const completion_body_ctx *c, int32_t id, json_t **bytes) {
    const char *p = "";
    size_t n = 0;
    if (!c->token_bytes || !c->token_bytes(c->token_user, id, &p, &n)) p = "", n = 0;
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)p[i]));
    }
    return oai_string(p, n);
}

/* {"token", "bytes", "logprob"} for one token (chat logprobs). */
static json_t *chat_token(const completion_body_ctx *c, const token_logprob *t) {
    json_t *o = json_object(), *bytes, *ts = completion_body_token_str(c, t->id, &bytes);
    json_object_set_new(o, "token", ts);
    json_object_set_new(o, "bytes", bytes);
    json_object_set_new(o, "logprob", json_real(t->logprob));
    return o;
}

json_t *completion_body_chat_logprobs(const completion_body_ctx *c, const completion_body_gen *g, int from, int to) {
    json_t *content = json_array();
    for (int i = from; i < to; i++) {
        json_t *e = chat_token(c, &g->pieces[i]);
        json_t *tops = json_array();
        for (int k = 0; k < g->top_logprobs; k++)
            json_array_append_new(tops, chat_token(c, &g->tops[(size_t)i * g->top_logprobs + k]));
        json_object_set_new(e, "top_logprobs", tops);
        json_array_append_new(content, e);
    }
    json_t *o = json_object();
    json_object_set_new(o, "content", content);
    return o;
}

/* {"<token text>": logprob, ...} for n alternatives. */
static json_t *top_map(const completion_body_ctx *c, const token_logprob *tops, int n) {
    json_t *o = json_object();
    for (int k = 0; k < n; k++) {
        json_t *ts = completion_body_token_str(c, tops[k].id, NULL);
        json_object_set_new(o, json_string_value(ts), json_real(tops[k].logprob));
        json_decref(ts);
    }
    return o;
}

/* The legacy logprobs arrays, gathered token by token. */
typedef struct lp_arrays {
    json_t *tokens, *lps, *tops, *offs;
} lp_arrays;

static void lp_add(const completion_body_ctx *c, lp_arrays *a, int32_t id, json_t *lp, json_t *top, size_t *text_off) {
    json_t *t = completion_body_token_str(c, id, NULL);
    json_array_append_new(a->offs, json_integer((json_int_t)*text_off));
    *text_off += json_string_length(t);
    json_array_append_new(a->tokens, t);
    json_array_append_new(a->lps, lp);
    json_array_append_new(a->tops, top);
}

json_t *completion_body_completion_logprobs(const completion_body_ctx *c, const completion_body_gen *g, int from, int to, bool with_prompt,
                                size_t *text_off) {
    lp_arrays a = {json_array(), json_array(), json_array(), json_array()};
    int ntop = g->top_logprobs;
    for (int i = 0; with_prompt && i < g->n_prompt; i++) {
        bool have = i > 0 && g->prompt_lp;
        json_t *top = have && ntop > 0 && g->prompt_tops ? top_map(c, g->prompt_tops + (size_t)i * ntop, ntop)
                                                         : json_null();
        lp_add(c, &a, g->prompt[i], have ? json_real(g->prompt_lp[i]) : json_null(), top, text_off);
    }
    for (int i = from; i < to; i++)
        lp_add(c, &a, g->pieces[i].id, json_real(g->pieces[i].logprob),
               top_map(c, g->tops ? g->tops + (size_t)i * ntop : NULL, ntop > 0 ? ntop : 0), text_off);
    json_t *o = json_object();
    json_object_set_new(o, "tokens", a.tokens);
    json_object_set_new(o, "token_logprobs", a.lps);
    json_object_set_new(o, "top_logprobs", a.tops);
    json_object_set_new(o, "text_offset", a.offs);
    return o;
}

json_t *completion_body_usage(const completion_body_gen *g) {
    json_t *u = json_object(), *d = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(g->n_prompt));
    json_object_set_new(u, "completion_tokens", json_integer(g->n_generated));
    json_object_set_new(u, "total_tokens", json_integer(g->n_prompt + g->n_generated));
    json_object_set_new(d, "cached_tokens", json_integer(g->n_cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    if (g->n_reasoning >= 0)
        json_object_set_new(u, "completion_tokens_details", json_pack("{s:i}", "reasoning_tokens", g->n_reasoning));
    return u;
}

json_t *completion_body_timings(const completion_body_gen *g) {
    json_t *t = json_object();
    json_object_set_new(t, "cached_n", json_integer(g->n_cached));
    json_object_set_new(t, "prompt_n", json_integer(g->n_prompt - g->n_cached));
    json_object_set_new(t, "prompt_ms", json_real(g->prompt_ms));
    json_object_set_new(t, "predicted_n", json_integer(g->n_generated));
    json_object_set_new(t, "predicted_ms", json_real(g->gen_ms));
    json_object_set_new(t, "predicted_per_second", json_real(g->gen_ms > 0 ? g->n_generated * 1e3 / g->gen_ms : 0));
    return t;
}

json_t *completion_body_envelope(const completion_body_ctx *c, const char *object) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(c->created));
    json_object_set_new(o, "model", json_string(c->model));
    return o;
}

static bool has_session(const completion_body_ctx *c) { return c->session_id && c->session_id[0]; }

json_t *completion_body_llama(const completion_body_ctx *c, const completion_body_gen *g, const char *text, size_t n, bool tokens,
                           int from, int to, bool final) {
    json_t *o = json_object();
    json_object_set_new(o, "content", oai_string(text, n));
    json_object_set_new(o, "stop", json_boolean(final));
    if (tokens) {
        json_t *ids = json_array();
        for (int i = from; i < to; i++) json_array_append_new(ids, json_integer(g->pieces[i].id));
        json_object_set_new(o, "tokens", ids);
    }
    if (!final) return o;
    json_object_set_new(o, "model", json_string(c->model));
    json_object_set_new(o, "tokens_predicted", json_integer(g->n_generated));
    json_object_set_new(o, "tokens_evaluated", json_integer(g->n_prompt));
    json_object_set_new(o, "tokens_cached", json_integer(g->n_cached));
    /* no finish_reason: the stream was cut (cancellation), which is neither; "shutdown": the
     * server's shutdown cut it (completions.c) */
    bool limit = g->finish_reason && !strcmp(g->finish_reason, "length"), cut = !g->finish_reason;
    bool shut = g->finish_reason && !strcmp(g->finish_reason, "shutdown"); /* cut by the server's shutdown */
    json_object_set_new(o, "stop_type", json_string(cut ? "none" : shut ? "shutdown" : limit ? "limit" : "eos"));
    json_object_set_new(o, "stopped_limit", json_boolean(limit));
    json_object_set_new(o, "stopped_eos", json_boolean(!limit && !cut && !shut));
    json_object_set_new(o, "timings", completion_body_timings(g));
    if (has_session(c)) json_object_set_new(o, "session_id", json_string(c->session_id));
    return o;
}

/* The completion's "text": the echoed prompt (if any) then the generated text. */
static json_t *completion_text(const completion_body_gen *g, const char *echo, size_t echo_len) {
    if (!echo) return oai_string(g->text, g->text_len);
    char *t = malloc(echo_len + g->text_len + 1);
    if (!t) return oai_string(g->text, g->text_len);
    memcpy(t, echo, echo_len);
    memcpy(t + echo_len, g->text, g->text_len);
    json_t *s = oai_string(t, echo_len + g->text_len);
    free(t);
    return s;
}

json_t *completion_body_final(const completion_body_ctx *c, const completion_body_gen *g, const char *echo, size_t echo_len) {
    json_t *o = completion_body_envelope(c, c->chat ? "chat.completion" : "text_completion");
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    bool lp = g->top_logprobs >= 0;
    if (c->chat) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", oai_string(g->text, g->text_len));
        json_object_set_new(choice, "message", msg);
        json_object_set_new(choice, "logprobs", lp ? completion_body_chat_logprobs(c, g, 0, g->n_pieces) : json_null());
    } else {
        size_t off = 0;
        json_object_set_new(choice, "text", completion_text(g, echo, echo_len));
        json_object_set_new(choice, "logprobs",
                            lp ? completion_body_completion_logprobs(c, g, 0, g->n_pieces, echo != NULL, &off) : json_null());
    }
    json_object_set_new(choice, "finish_reason", json_string(g->finish_reason ? g->finish_reason : "stop"));
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", completion_body_usage(g));
    json_object_set_new(o, "timings", completion_body_timings(g));
    if (has_session(c)) json_object_set_new(o, "session_id", json_string(c->session_id));
    return o;
}

json_t *completion_body_chunk(const completion_body_ctx *c, json_t *delta_or_text, json_t *logprobs, const char *finish) {
    json_t *o = completion_body_envelope(c, c->chat ? "chat.completion.chunk" : "text_completion");
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(0));
    json_object_set_new(ch, c->chat ? "delta" : "text", delta_or_text);
    json_object_set_new(ch, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *arr = json_array();
    json_array_append_new(arr, ch);
    json_object_set_new(o, "choices", arr);
    if (c->include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

json_t *completion_body_usage_chunk(const completion_body_ctx *c, const completion_body_gen *g) {
    json_t *o = completion_body_envelope(c, c->chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", completion_body_usage(g));
    return o;
}

/* A float setting as the number a user typed (0.8, not 0.800000011920929). */
json_t *completion_body_float(float v) {
    char t[32];
    for (int digits = 1; digits <= 9; digits++) { /* 9 significant digits always round-trip a float */
        snprintf(t, sizeof(t), "%.*g", digits, (double)v);
        if (strtof(t, NULL) == v) break;
    }
    return json_real(strtod(t, NULL));
}

json_t *completion_body_roles(unsigned roles) {
    static const char *const names[] = {"generate", "embed", "rank"}; /* bit k: names[k] */
    json_t *a = json_array();
    for (unsigned k = 0; k < ATTND_ARRAY_LEN(names); k++)
        if (roles & (1u << k)) json_array_append_new(a, json_string(names[k]));
    return a;
}

json_t *completion_body_model(const completion_body_model_desc *m) {
    json_t *mdl = json_object();
    json_object_set_new(mdl, "id", json_string(m->id));
    json_object_set_new(mdl, "object", json_string("model"));
    json_object_set_new(mdl, "created", json_integer(m->created));
    json_object_set_new(mdl, "owned_by", json_string("attnd"));
    json_object_set_new(mdl, "context_length", json_integer(m->context_length));
    json_t *meta = json_object();
    json_object_set_new(meta, "n_vocab", json_integer(m->n_vocab));
    json_object_set_new(meta, "n_ctx_train", json_integer(m->n_ctx_train));
    json_object_set_new(meta, "n_params", json_integer(m->n_params));
    json_object_set_new(meta, "chat_template", json_string(m->chat_template));
    json_object_set_new(meta, "roles", completion_body_roles(m->roles));
    if (m->roles & ~1u) json_object_set_new(meta, "n_embd", json_integer(m->n_embd));
    if (m->defaults) { /* what a request that sets nothing gets: clients (the playground) start from it */
        json_t *d = json_object();
        json_object_set_new(d, "max_tokens", json_integer(m->default_max_tokens));
        json_object_set_new(d, "temperature", completion_body_float(m->defaults->temperature));
        json_object_set_new(d, "top_k", json_integer(m->defaults->top_k));
        json_object_set_new(d, "top_p", completion_body_float(m->defaults->top_p));
        json_object_set_new(d, "min_p", completion_body_float(m->defaults->min_p));
        json_object_set_new(d, "repeat_penalty", completion_body_float(m->defaults->repeat_penalty));
        json_object_set_new(d, "repeat_last_n", json_integer(m->defaults->repeat_last_n));
        json_object_set_new(meta, "defaults", d);
    }
    json_object_set_new(mdl, "meta", meta);
    return mdl;
}

json_t *completion_body_models(const completion_body_model_desc *m) {
    json_t *root = json_object(), *data = json_array();
    json_array_append_new(data, completion_body_model(m));
    json_object_set_new(root, "object", json_string("list"));
    json_object_set_new(root, "data", data);
    return root;
}
