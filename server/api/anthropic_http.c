/*
 * anthropic_http.c — POST /v1/messages and /v1/messages/count_tokens (see endpoints.h):
 * Anthropic's Messages API over the generation request (genreq.h).
 *
 * anthropic.c translates the body into a chat completion body, which oai_parse validates into
 * the genreq's request; the rest is a chat completion's: the chat template, tools and their
 * grammars, the prefix cache, fair scheduling. Errors take Anthropic's shape through the route's
 * ROUTE_ANTHROPIC flag (http_respond_error), also those of the checks before the handler.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anthropic.h"
#include "attnd/tokenizer.h"
#include "endpoints.h"
#include "genreq_http.h"
#include "sse.h"

/* The request's state: the request's REQ_SLOT_ENDPOINT. */
typedef struct amsg_state {
    anthropic_request rq;
    anthropic_stream ev;
    char id[48];
} amsg_state;

static void amsg_state_free(void *p) {
    amsg_state *st = p;
    anthropic_request_free(&st->rq);
    anthropic_stream_free(&st->ev);
    free(st);
}

/* Parses the body into the state and the genreq's oreq; false: a 4xx is queued. */
static bool parse_messages(req *r, json_t *b, bool count_only, http_result *ret) {
    struct server *s = r->srv;
    genreq *g = genreq_http_get(r);
    amsg_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    const char *param = NULL;
    attnd_err err;
    attnd_status rc = anthropic_parse(b, &s->cfg, count_only, &st->rq, &param, &err);
    if (rc == ATTND_OK) rc = oai_parse(st->rq.chat_body, true, g->env.cfg, g->env.n_vocab, &g->oreq, &param, &err);
    if (rc == ATTND_OK) rc = oai_bind_template(&g->oreq, g->env.chat->takes_tools, g->env.chat->tool_format, &err);
    if (rc == ATTND_OK) return true;
    if (param && !strcmp(param, "stop")) { /* the chat body's name for stop_sequences */
        char msg[sizeof(err.msg)];
        const char *at = strstr(err.msg, "'stop");
        snprintf(msg, sizeof(msg), "%.*s'stop_sequences%s", at ? (int)(at - err.msg) : 0, err.msg, at ? at + 5 : "");
        if (at) memcpy(err.msg, msg, sizeof(msg));
        param = "stop_sequences";
    }
    *ret = http_respond_error(r, http_status_of(rc, HTTP_CTX_PARSE), err.msg, param);
    return false;
}

/* The stop sequence that ended o (NULL: the end-of-generation token or none): the stop string
 * met first in the generated tokens' bytes. */
static const char *stop_sequence_of(req *r, const sched_output *o) {
    const oai_request *q = &genreq_http_get(r)->oreq;
    tokenizer *tok = genreq_http_get(r)->env.tok;
    if (!q->n_stops || !o->n_pieces || tok_is_eog(tok, o->pieces[o->n_pieces - 1].id)) return NULL;
    buf raw;
    buf_init(&raw);
    for (int i = 0; i < o->n_pieces; i++) {
        const char *p;
        size_t n;
        if (tok_token_bytes(tok, o->pieces[i].id, false, &p, &n)) buf_append(&raw, p, n);
    }
    const char *best = NULL;
    size_t at = (size_t)-1;
    for (int k = 0; raw.p && k < q->n_stops; k++) {
        const char *hit = strstr(raw.p, q->stops[k]);
        if (hit && (size_t)(hit - raw.p) < at) at = (size_t)(hit - raw.p), best = q->stops[k];
    }
    buf_free(&raw);
    return best;
}

/* The Message's numbers so far (o NULL: just started). */
static anthropic_result result_of(req *r, const sched_output *o) {
    amsg_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    const genreq *g = genreq_http_get(r);
    anthropic_result res = {.id = st->id, .model = g->env.model_id, .input_tokens = g->n_prompt};
    if (!o) return res;
    res.cache_read_tokens = o->n_cached;
    res.input_tokens = o->n_prompt - o->n_cached;
    res.output_tokens = o->n_generated;
    if (!o->done) return res;
    bool cut = genreq_was_cut(g, o) || (o->finish_reason && !strcmp(o->finish_reason, "length"));
    res.stop_sequence = cut ? NULL : stop_sequence_of(r, o);
    res.stop_reason = cut ? "max_tokens" : res.stop_sequence ? "stop_sequence" : "end_turn";
    return res;
}


// ---- streaming ------------------------------------------------------------------------------

static void amsg_begin(req *r, buf *out) {
    amsg_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    const genreq *g = genreq_http_get(r);
    anthropic_result res = result_of(r, NULL);
    toolcall_reading how = oai_reply_reading(&g->oreq, st->id);
    if (!anthropic_stream_init(&st->ev, &how)) return;
    anthropic_stream_begin(&st->ev, &res, out);
}

static void amsg_update(req *r, int k, const sched_update *u, buf *out) {
    amsg_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    (void)k; /* one job: a message has one reply */
    if (!st->ev.tp) return; /* out of memory at the start */
    if (u->text_len) anthropic_stream_delta(&st->ev, u->text, u->text_len, out);
    if (!u->done) return;
    genreq *g = genreq_http_get(r);
    bool saved = genreq_persist(g);
    sched_output o;
    sched_job_output(g->job, &o);
    anthropic_result res = result_of(r, &o);
    if (!saved)
        anthropic_stream_error(&st->ev, genreq_http_status(&g->unsaved), g->unsaved.msg, out);
    else if (o.status != ATTND_OK && !genreq_was_cut(g, &o))
        anthropic_stream_error(&st->ev, http_status_of(o.status, HTTP_CTX_GENERATE), o.errmsg[0] ? o.errmsg : "generation failed", out);
    else
        anthropic_stream_end(&st->ev, &res, out);
}

static const sse_writer AMSG_WRITER = {.begin = amsg_begin, .update = amsg_update};

// ---- the endpoints ------------------------------------------------------------------------

/* The generation request with its parsed body; NULL: an answer is queued in *ret. */
static genreq *begin(req *r, bool count_only, http_result *ret) {
    json_t *b;
    genreq *g = genreq_http_begin(r, &b, ret);
    if (!g) return NULL;
    g->chat = true;
    g->api = METRICS_API_ANTHROPIC;
    amsg_state *st = calloc(1, sizeof(*st));
    if (!st) {
        *ret = http_respond_error(r, 503, "out of memory", NULL);
        return NULL;
    }
    st->ev.open = -1;
    req_set(r, REQ_SLOT_ENDPOINT, st, amsg_state_free);
    if (!parse_messages(r, b, count_only, ret)) return NULL;
    attnd_random_id(st->id, sizeof(st->id), "msg_");
    snprintf(g->id, sizeof(g->id), "%s", st->id);
    return g;
}

static http_result respond_genreq_err(req *r, const genreq_err *e) {
    return http_respond_error(r, genreq_http_status(e), e->msg, e->param);
}

http_result ep_messages(req *r) {
    http_result ret = HTTP_NO;
    genreq *g = begin(r, false, &ret);
    if (!g) return ret;
    amsg_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    genreq_err e;
    if (genreq_submit_all(g, &e) != ATTND_OK) return respond_genreq_err(r, &e);
    if (st->rq.stream) return sse_stream(r, g, &AMSG_WRITER);
    if (!genreq_wait_all(g)) return HTTP_NO;
    if (g->unsaved.fail) return respond_genreq_err(r, &g->unsaved);
    sched_output o;
    sched_job_output(g->job, &o);
    if (o.status != ATTND_OK && !genreq_was_cut(g, &o))
        return http_respond_error(r, http_status_of(o.status, HTTP_CTX_GENERATE), o.errmsg[0] ? o.errmsg : "generation failed",
                                  NULL);
    anthropic_result res = result_of(r, &o);
    toolcall_reading how = oai_reply_reading(&g->oreq, st->id);
    json_t *m = anthropic_message(&res, o.text ? o.text : "", o.text_len, &how);
    return m ? http_respond_json(r, 200, m) : http_respond_error(r, 503, "out of memory", NULL);
}

http_result ep_messages_count_tokens(req *r) {
    http_result ret = HTTP_NO;
    genreq *g = begin(r, true, &ret);
    if (!g) return ret;
    int32_t *ids = NULL;
    size_t n = 0;
    genreq_err e;
    if (genreq_prompt_tokens(g, 0, &ids, &n, &e) != ATTND_OK) return respond_genreq_err(r, &e);
    free(ids);
    return http_respond_json(r, 200, json_pack("{s:I}", "input_tokens", (json_int_t)n));
}
