/*
 * completions.c — the generation endpoints: POST /v1/completions, /v1/chat/completions and
 * llama.cpp's /completion and /infill (see endpoints.h).
 *
 * A handler validates the body (oai.c), hands it to the generation request (genreq.c: tokenize,
 * session, jobs) and then either streams through sse.c's loop with its own writers (OpenAI
 * chunks, llama.cpp events) or blocks until the jobs are done and answers with the whole
 * response (completion_body.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints.h"
#include "genreq_http.h"
#include "infill.h"
#include "sse.h"

static bool token_bytes(void *user, int32_t id, const char **p, size_t *n) {
    return tok_token_bytes((const tokenizer *)user, id, false, p, n);
}

/* The endpoint's state (REQ_SLOT_ENDPOINT): what the response JSON says about the request and,
 * in a stream, per choice the generated text streamed so far (the logprobs' text_offset) and the
 * parser that splits a chat reply into content, reasoning and calls. */
typedef struct cmpl_state {
    completion_body_ctx rctx;
    bool llama;               /* llama.cpp's POST /completion shapes */
    bool return_tokens;       /* llama.cpp's return_tokens: the generated ids too */
    int n;
    size_t *text_off;         /* (n) */
    toolcall_parser **parse;  /* (n) chat only */
} cmpl_state;

static void cmpl_state_free(void *p) {
    cmpl_state *s = p;
    for (int k = 0; s && s->parse && k < s->n; k++) toolcall_parser_destroy(s->parse[k]);
    if (s) free(s->parse), free(s->text_off);
    free(s);
}

static cmpl_state *state_of(const req *r) { return req_get(r, REQ_SLOT_ENDPOINT); }

/* llama.cpp's /completion names max_tokens n_predict (-1 = until the context is full) and can
 * return the generated ids; maps them onto the OpenAI fields. false: a 400 is queued. */
static bool llama_fields(req *r, json_t *b, http_result *ret) {
    json_t *np = json_object_get(b, "n_predict");
    if (np && !json_is_integer(np)) {
        *ret = http_respond_error(r, 400, "'n_predict' must be an integer", "n_predict");
        return false;
    }
    if (np && json_integer_value(np) >= 0) json_object_set(b, "max_tokens", np);
    else if (np) json_object_set_new(b, "max_tokens", json_integer(r->srv->cfg.max_tokens_cap));
    json_t *rt = json_object_get(b, "return_tokens");
    if (rt && !json_is_boolean(rt)) {
        *ret = http_respond_error(r, 400, "'return_tokens' must be a boolean", "return_tokens");
        return false;
    }
    state_of(r)->return_tokens = json_is_true(rt);
    return true;
}

/* llama-server's /infill: the FIM prompt (infill.h) of the model's tokens replaces the infill
 * fields as a token-id prompt, which then runs as /completion's. A model without FIM tokens is
 * a 400 that says so. false: the error answer is queued. */
static bool infill_fields(req *r, json_t *b, http_result *ret) {
    const genreq *g = genreq_http_get(r);
    const char *param = NULL;
    attnd_err err;
    infill_input in = {0};
    json_t *prompt = NULL;
    json_t *mt = json_object_get(b, "max_tokens");
    json_int_t want = json_is_integer(mt) ? json_integer_value(mt) : g->env.cfg->default_max_tokens;
    attnd_status st = infill_check_model(g->env.tok, &err);
    if (st == ATTND_OK) st = infill_parse(b, &in, &param, &err);
    if (st == ATTND_OK) st = infill_prompt_ids(g->env.tok, &in, g->env.n_ctx, want, &prompt, &err);
    infill_input_free(&in);
    if (st != ATTND_OK) {
        *ret = http_respond_error(r, st == ATTND_ERR_NOMEM ? 503 : 400, err.msg, param);
        return false;
    }
    json_object_set_new(b, "prompt", prompt);
    json_object_del(b, "input_prefix"), json_object_del(b, "input_suffix"), json_object_del(b, "input_extra");
    return true;
}

/* The prompt of choice k as echoed back (completions with echo): the text as given, or the
 * token-id prompt decoded. Owned by the caller; NULL when not echoing (or out of memory). */
static char *echo_text(req *r, int k, const sched_output *o, size_t *len) {
    genreq *g = genreq_http_get(r);
    *len = 0;
    if (g->chat || !g->oreq.echo) return NULL;
    const char *text = g->oreq.prompts[k / g->oreq.n].text;
    if (text) {
        *len = strlen(text);
        return strdup(text);
    }
    char *d = NULL;
    if (tok_decode(g->env.tok, o->prompt, (size_t)o->n_prompt, false, &d, len, NULL) == ATTND_OK) return d;
    *len = 0;
    return strdup(""); /* still an echo: the logprobs keep the prompt's entries */
}

/* Choice k's whole response; NULL with *failed set when its job failed. */
static json_t *choice_body(req *r, int k, sched_output *failed) {
    genreq *g = genreq_http_get(r);
    sched_output o;
    sched_job_output(genreq_job(g, k), &o);
    if (o.status != ATTND_OK) {
        *failed = o;
        return NULL;
    }
    completion_body_gen v;
    genreq_view(&o, &v);
    if (g->chat) v.n_reasoning = genreq_reasoning_tokens(g, &o);
    size_t echo_len;
    char *echo = echo_text(r, k, &o, &echo_len);
    json_t *body = completion_body_final(&state_of(r)->rctx, &v, echo, echo_len);
    free(echo);
    toolcall_reading how = oai_reply_reading(&g->oreq, NULL);
    if (body && g->chat) toolcall_apply(json_array_get(json_object_get(body, "choices"), 0), v.text, v.text_len, &how);
    return body;
}

// ---- streaming: OpenAI chunks and llama.cpp events, through sse.c's stream loop -----------

/* Sets the index of a chunk's single choice (completion_body_chunk writes 0). */
static json_t *at_index(json_t *chunk, int k) {
    json_t *c = json_array_get(json_object_get(chunk, "choices"), 0);
    if (c && k) json_object_set_new(c, "index", json_integer(k));
    return chunk;
}

/* The finish_reason of a stream cut by its cancellation: the text is cut short, which "length"
 * says in the words every OpenAI client knows. A stream cut by shutdown ends with an error event
 * instead (genreq_shut_down): its client must not take the cut text for a whole answer. */
static const char *CUT_REASON = "length";

/* The end of one choice: its final chunk (a cut one included), or an error event. The
 * session's history is made durable first. */
static void choice_end_oai(req *r, int k, const sched_output *o, buf *out) {
    genreq *g = genreq_http_get(r);
    cmpl_state *ss = state_of(r);
    if (!genreq_persist(g)) { /* not saved: an error event, never a "stop" the client would trust */
        sse_event(out, genreq_http_error(&g->unsaved));
    } else if (genreq_was_cut(g, o)) {
        sse_event(out, at_index(completion_body_chunk(&ss->rctx, g->chat ? json_object() : json_string(""), NULL, CUT_REASON), k));
    } else if (o->status != ATTND_OK) {
        int code = http_status_of(o->status, HTTP_CTX_GENERATE);
        sse_event(out, oai_error(code, o->errmsg[0] ? o->errmsg : "generation failed", NULL));
    } else {
        const char *finish = o->finish_reason;
        if (g->chat && ss->parse) finish = toolcall_parser_finish_reason(ss->parse[k], finish);
        sse_event(out, at_index(completion_body_chunk(&ss->rctx, g->chat ? json_object() : json_string(""), NULL, finish), k));
    }
}

/* The end of an OpenAI stream, once every choice ended: usage (summed), [DONE]. */
static void stream_end_oai(req *r, buf *out) {
    genreq *g = genreq_http_get(r);
    if (g->oreq.include_usage) {
        completion_body_gen sum;
        genreq_usage_sum(g, &sum);
        sse_event(out, completion_body_usage_chunk(&state_of(r)->rctx, &sum));
    }
    buf_puts(out, "data: [DONE]\n\n");
}

/* llama.cpp's stream: an event per update, ending with the stop:true event (no [DONE]). */
static void update_llama(req *r, int k, const sched_update *u, buf *out) {
    genreq *g = genreq_http_get(r);
    cmpl_state *ss = state_of(r);
    sched_output o;
    completion_body_gen v;
    sched_job_output(genreq_job(g, k), &o);
    genreq_view(&o, &v);
    if (u->text_len || (ss->return_tokens && u->to > u->from))
        sse_event(out, completion_body_llama(&ss->rctx, &v, u->text, u->text_len, ss->return_tokens, u->from, u->to, false));
    if (!u->done) return;
    if (!genreq_persist(g))
        sse_event(out, genreq_http_error(&g->unsaved));
    else if (genreq_shut_down(g, &o)) { /* the stop event says why, then an error event says it failed */
        v.finish_reason = "shutdown";
        sse_event(out, completion_body_llama(&ss->rctx, &v, "", 0, ss->return_tokens, u->to, u->to, true));
        sse_event(out, oai_error(503, o.errmsg[0] ? o.errmsg : "server is shutting down", NULL));
    } else if (o.status != ATTND_OK && !genreq_was_cut(g, &o))
        sse_event(out, oai_error(503, o.errmsg[0] ? o.errmsg : "generation failed", NULL));
    else
        sse_event(out, completion_body_llama(&ss->rctx, &v, "", 0, ss->return_tokens, u->to, u->to, true));
}

/* The chat role chunk of every choice, first thing in a chat stream. Its content is null, so
 * that a client library that joins the deltas (OpenAI's Python and Node ones) ends with what the
 * whole answer says: null for a reply without text (only calls, only reasoning), the text
 * otherwise. */
static void begin_oai(req *r, buf *out) {
    genreq *g = genreq_http_get(r);
    for (int k = 0; g->chat && k < genreq_n_jobs(g); k++) {
        json_t *d = json_object();
        json_object_set_new(d, "role", json_string("assistant"));
        json_object_set_new(d, "content", json_null());
        sse_event(out, at_index(completion_body_chunk(&state_of(r)->rctx, d, NULL, NULL), k));
    }
}

/* A chat update through choice k's parser: a chunk per delta it releases (the first carries the
 * update's logprobs, stolen; an update that releases nothing still sends them). */
static void chat_deltas(req *r, int k, const char *text, size_t n, bool done, json_t *lps, buf *out) {
    cmpl_state *ss = state_of(r);
    json_t *deltas = json_array();
    toolcall_parser_feed(ss->parse[k], text, n, deltas);
    if (done) toolcall_parser_finish(ss->parse[k], deltas);
    for (size_t i = 0; i < json_array_size(deltas); i++) {
        sse_event(out, at_index(completion_body_chunk(&ss->rctx, json_incref(json_array_get(deltas, i)), lps, NULL), k));
        lps = NULL;
    }
    if (lps) sse_event(out, at_index(completion_body_chunk(&ss->rctx, json_object(), lps, NULL), k));
    json_decref(deltas);
}

/* Turns one update of choice k into OpenAI chunks. */
static void update_oai(req *r, int k, const sched_update *u, buf *out) {
    genreq *g = genreq_http_get(r);
    cmpl_state *ss = state_of(r);
    sched_output o;
    completion_body_gen v;
    sched_job_output(genreq_job(g, k), &o);
    genreq_view(&o, &v);
    bool lp = v.top_logprobs >= 0;
    if (g->chat) {
        json_t *lps = lp && u->to > u->from ? completion_body_chat_logprobs(&ss->rctx, &v, u->from, u->to) : NULL;
        chat_deltas(r, k, u->text, u->text_len, u->done, lps, out);
    } else if (u->text_len || (u->to > u->from && lp)) {
        size_t off = ss->text_off[k];
        json_t *lps = lp ? completion_body_completion_logprobs(&ss->rctx, &v, u->from, u->to, false, &off) : NULL;
        sse_event(out, at_index(completion_body_chunk(&ss->rctx, oai_string(u->text, u->text_len), lps, NULL), k));
    }
    ss->text_off[k] += u->text_len;
    if (u->done) choice_end_oai(r, k, &o, out);
}

static const sse_writer OAI_WRITER = {.begin = begin_oai, .update = update_oai, .end = stream_end_oai};
static const sse_writer LLAMA_WRITER = {.update = update_llama};

/* Streams g's jobs: each choice's text offset (bytes of generated text streamed so far, for the
 * logprobs' text_offset) and, in chat, its reply parser. */
static http_result respond_stream(req *r, genreq *g) {
    cmpl_state *ss = state_of(r);
    ss->n = genreq_n_jobs(g);
    if (!(ss->text_off = calloc((size_t)ss->n, sizeof(size_t)))) return HTTP_NO;
    if (g->chat && !ss->llama) {
        if (!(ss->parse = calloc((size_t)ss->n, sizeof(*ss->parse)))) return HTTP_NO;
        toolcall_reading how = oai_reply_reading(&g->oreq, NULL);
        for (int k = 0; k < ss->n; k++)
            if (!(ss->parse[k] = toolcall_parser_open(&how))) return HTTP_NO;
    }
    return sse_stream(r, g, ss->llama ? &LLAMA_WRITER : &OAI_WRITER);
}

/* waiting: lifts the connection's idle timeout (request_timeout_s) while the request waits for
 * the scheduler (queue, prefill), which is the server's slowness, not the client's; a vanished
 * client is still noticed by polling (http_client_gone). false: puts it back. */
static void hold_connection(req *r, bool waiting) {
    int t = r->srv->cfg.request_timeout_s;
    http_idle_timeout(r, waiting ? 0u : (unsigned)(t > 0 ? t : 30));
}

/* Blocks until the job is done (or the client leaves), then answers with the whole response:
 * one choice per prompt and n, in order, with the usage summed. */
static http_result respond_whole(req *r, genreq *g) {
    cmpl_state *ss = state_of(r);
    if (!genreq_wait_all(g)) return HTTP_NO;
    if (g->unsaved.fail) return genreq_http_respond(r, &g->unsaved); /* never a 200 for a turn a restart loses */
    hold_connection(r, false); /* the idle timeout guards sending the body again */
    sched_output o;
    sched_job_output(g->job, &o);
    if (ss->llama && o.status == ATTND_OK) {
        completion_body_gen v;
        genreq_view(&o, &v);
        return http_respond_json(r, 200, completion_body_llama(&ss->rctx, &v, v.text, v.text_len, ss->return_tokens, 0,
                                                            v.n_pieces, true));
    }
    sched_output failed;
    json_t *body = choice_body(r, 0, &failed);
    json_t *choices = json_object_get(body, "choices");
    for (int k = 1; body && k < genreq_n_jobs(g); k++) {
        json_t *other = choice_body(r, k, &failed), *c = json_array_get(json_object_get(other, "choices"), 0);
        if (c) {
            json_object_set_new(c, "index", json_integer(k));
            json_array_append(choices, c);
        } else {
            json_decref(body);
            body = NULL;
        }
        json_decref(other);
    }
    if (!body)
        return http_respond_error(r, http_status_of(failed.status, HTTP_CTX_GENERATE),
                                  failed.errmsg[0] ? failed.errmsg : "generation failed", NULL);
    if (genreq_n_jobs(g) > 1) {
        completion_body_gen sum;
        genreq_usage_sum(g, &sum);
        json_object_set_new(body, "usage", completion_body_usage(&sum));
    }
    return http_respond_json(r, 200, body);
}

static http_result generate(req *r, bool chat, bool llama, bool infill) {
    http_result ret = HTTP_NO;
    json_t *b;
    genreq *g = genreq_http_begin(r, &b, &ret);
    cmpl_state *ss = g ? calloc(1, sizeof(*ss)) : NULL;
    if (!g) return ret;
    if (!ss) return http_respond_error(r, 503, "out of memory", NULL);
    req_set(r, REQ_SLOT_ENDPOINT, ss, cmpl_state_free);
    g->chat = chat;
    g->api = llama ? METRICS_API_LLAMACPP : METRICS_API_OPENAI;
    ss->llama = llama;
    if (llama && !llama_fields(r, b, &ret)) return ret;
    if (infill) g->prompt_param = "input_prefix";
    if (infill && !infill_fields(r, b, &ret)) return ret;
    const char *param = NULL;
    attnd_err err;
    attnd_status st = oai_parse(b, chat, g->env.cfg, g->env.n_vocab, &g->oreq, &param, &err);
    if (st == ATTND_OK) st = oai_bind_template(&g->oreq, g->env.chat->takes_tools, g->env.chat->tool_format, &err);
    if (st != ATTND_OK) return http_respond_error(r, http_status_of(st, HTTP_CTX_PARSE), err.msg, param);
    attnd_random_id(g->id, sizeof(g->id), chat ? "chatcmpl-" : "cmpl-");
    ss->rctx = (completion_body_ctx){g->id, g->env.model_id, (long long)time(NULL), chat, g->oreq.include_usage,
                                     g->sess_id, token_bytes, g->env.tok};
    if (llama && g->oreq.n_prompts * g->oreq.n > 1)
        return http_respond_error(r, 400, "/completion takes one prompt; use /v1/completions for prompt lists",
                                  "prompt");
    genreq_err e;
    if (genreq_submit_all(g, &e) != ATTND_OK) return genreq_http_respond(r, &e);
    hold_connection(r, true);
    return g->oreq.stream ? respond_stream(r, g) : respond_whole(r, g);
}

http_result ep_completions(req *r) { return generate(r, false, false, false); }
http_result ep_chat(req *r) { return generate(r, true, false, false); }
http_result ep_llama_completion(req *r) { return generate(r, false, true, false); }
http_result ep_infill(req *r) { return generate(r, false, true, true); }
