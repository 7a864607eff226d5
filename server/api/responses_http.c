/*
 * responses_http.c — POST /v1/responses, GET and DELETE /v1/responses/{id} (see endpoints.h):
 * OpenAI's Responses API for text on attnd's durable sessions.
 *
 * A turn is a chat completion underneath: responses.c turns the body (plus the stored
 * conversation of previous_response_id) into chat messages, and the generation request
 * (genreq.c) tokenizes and runs them. With store (OpenAI's default) the turn runs on a named
 * session shared by its whole chain of follow-ups (the first response's id), so each follow-up reuses
 * the KV cache of the turns before it; the Response object and the conversation go to the
 * response store (rstore.c), which lives in state_dir next to the sessions and so survives a
 * restart.
 *
 * A store: true answer is given only once the response is durable: a response that could not be
 * stored fails the turn (507 for a full disk or quota of the file system, 503 with Retry-After
 * for another write failure, 429 naming the tenant's quota when that is full), and the session
 * made for it goes again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "endpoints.h"
#include "genreq_http.h"
#include "models.h"
#include "models_http.h"
#include "responses.h"
#include "rstore.h"
#include "slog.h"
#include "sse.h"

/* The turn's state: the request's REQ_SLOT_ENDPOINT. */
typedef struct rsp_state {
    responses_request rq;
    json_t *chat_body;              /* owned; the genreq's oreq borrows from it */
    json_t *earlier;                /* owned; the conversation before this turn, NULL = none */
    char id[48], msg_id[48];
    char session[SESS_ID_MAX + 1];  /* the chain's session; "" = none */
    bool new_session;               /* made for this turn: dropped if the turn fails */
    int store_status;               /* the response could not be stored: 507 / 503 / 429; 0 = stored */
    char store_msg[240];
    long long created;
    responses_stream ev;
} rsp_state;

static void rsp_state_free(void *p) {
    rsp_state *st = p;
    responses_request_free(&st->rq);
    responses_stream_free(&st->ev);
    json_decref(st->chat_body);
    json_decref(st->earlier);
    free(st);
}

/* The Response as it stands: status from the job's outcome (NULL o = just started). */
static responses_result result_of(req *r, const sched_output *o, const char *text, size_t len) {
    rsp_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    const genreq *g = genreq_http_get(r);
    bool cut = o && o->done && (genreq_was_cut(g, o) || (o->finish_reason && !strcmp(o->finish_reason, "length")));
    const char *status = !o || !o->done ? "in_progress" : cut ? "incomplete" : o->status != ATTND_OK ? "failed" : "completed";
    return (responses_result){
        .id = st->id, .msg_id = st->msg_id, .model = g->env.model_id, .created_at = st->created,
        .status = status, .text = text, .text_len = len, .cut_short = !strcmp(status, "incomplete"),
        .input_tokens = o ? o->n_prompt : 0, .cached_tokens = o ? o->n_cached : 0,
        .output_tokens = o ? o->n_generated : 0, .req = &st->rq,
        .reasoning_tokens = o && o->done ? genreq_reasoning_tokens(g, o) : 0, /* usage is only sent at the end */
        .temperature = g->oreq.sp.temperature, .top_p = g->oreq.sp.top_p,
        .open_reasoning = g->oreq.open_reasoning, .think_to_call = g->oreq.think_to_call,
    };
}

/* The status of a store that failed: 429 for a quota, 507 when the file system is full, 503
 * (with Retry-After) for any other failure. */
static int store_failure_status(attnd_status rc, int sys_errno) {
    if (rc == ATTND_ERR_BUSY) return 429;
    return rc == ATTND_ERR_IO && (sys_errno == ENOSPC || sys_errno == EDQUOT) ? 507 : 503;
}

/* Keeps a finished response for GET and follow-ups (store: true), durably; false (with
 * st->store_status and store_msg set) when it could not be: the turn must not be acknowledged. */
static bool store_response(req *r, const responses_result *res) {
    rsp_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    if (!st->rq.store || !st->session[0]) return true;
    json_t *obj = responses_object(res), *conv = responses_conversation(res, st->earlier);
    attnd_err err;
    int e = 0;
    attnd_status rc = obj && conv ? rstore_put(r->srv->responses, r->owner, obj, conv, st->session, &e, &err)
                                  : attnd_fail(&err, ATTND_ERR_NOMEM, "out of memory");
    json_decref(obj);
    json_decref(conv);
    if (rc == ATTND_OK) return true;
    slog_error("response %s not stored: %s", st->id, err.msg);
    st->store_status = store_failure_status(rc, e);
    if (rc == ATTND_ERR_BUSY)
        snprintf(st->store_msg, sizeof(st->store_msg), "response not stored: %.200s", err.msg);
    else
        snprintf(st->store_msg, sizeof(st->store_msg), "response %s could not be stored (%.80s); retry later",
                 st->id, e ? strerror(e) : err.msg);
    return false;
}

/* The session this turn runs on: the chain's (created when missing), or none when it is busy
 * with another turn or no more sessions may be made (the turn then runs uncached but right). */
static void pick_session(req *r) {
    rsp_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    sess_store *store = genreq_http_get(r)->env.store;
    if (!st->rq.store) return;
    if (!st->session[0]) snprintf(st->session, sizeof(st->session), "%s", st->id);
    char made[SESS_ID_MAX + 1];
    sess *se = NULL;
    attnd_err err;
    attnd_status rc = sess_create(store, r->owner, st->session, made, &err);
    st->new_session = rc == ATTND_OK;
    if (rc == ATTND_OK || rc == ATTND_ERR_BUSY) rc = sess_acquire(store, r->owner, st->session, &se, &err);
    if (rc != ATTND_OK) {
        slog_info("response %s runs without its session %s: %s", st->id, st->session, err.msg);
        return;
    }
    sess_abandon(store, se); /* genreq_submit_all acquires it again */
    genreq_http_get(r)->oreq.session_id = st->session;
}

/* A turn that failed stores nothing: the session made for it goes too (the scheduler has
 * released it by the time the job reports its end). */
static void drop_new_session(req *r) {
    rsp_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    struct kv_seq *kv = NULL;
    attnd_err err;
    const genreq_env *env = &genreq_http_get(r)->env;
    if (st->new_session && sess_delete(env->store, r->owner, st->session, &kv, NULL, &err) == ATTND_OK)
        sched_free_kv(env->sch, kv);
    st->new_session = false;
    genreq_http_get(r)->sess_id[0] = '\0'; /* nothing to persist */
}

/* On a server of several models a chain's session belongs to the model that made it: a turn
 * naming another model is a conflict (ATTND_ERR_BUSY, a 409), not a silent switch. prev is the
 * stored response (borrowed; NULL on a one-model server, where any name is that model). */
static attnd_status same_model(const json_t *prev, const char *model, attnd_err *err) {
    const char *was = json_string_value(json_object_get(prev, "model"));
    if (!prev || !was || !strcmp(was, model)) return ATTND_OK;
    return attnd_fail(err, ATTND_ERR_BUSY,
                      "response %.80s belongs to model '%.100s', not '%.100s': its session is that model's; "
                      "continue it with \"model\": \"%.100s\", or start a new conversation",
                      json_string_value(json_object_get(prev, "id")), was, model, was);
}

/* Parses the turn into the turn state and the genreq's oreq; false: a 4xx is queued. */
static bool parse_turn(req *r, json_t *b, http_result *ret) {
    struct server *s = r->srv;
    genreq *g = genreq_http_get(r);
    rsp_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    const char *param = NULL;
    attnd_err err;
    attnd_status rc = responses_parse(b, &s->cfg, &st->rq, &param, &err);
    if (rc == ATTND_OK && st->rq.previous_id) {
        json_t *prev = NULL;
        rc = rstore_get(s->responses, r->owner, st->rq.previous_id, s->models ? &prev : NULL, &st->earlier,
                        st->session, &err);
        if (rc == ATTND_OK) rc = same_model(prev, g->env.model_id, &err);
        json_decref(prev);
        if (rc != ATTND_OK) param = "previous_response_id";
    }
    if (rc == ATTND_OK) {
        st->chat_body = responses_chat_body(&st->rq, st->earlier);
        rc = st->chat_body ? oai_parse(st->chat_body, true, g->env.cfg, g->env.n_vocab, &g->oreq, &param, &err)
                           : attnd_fail(&err, ATTND_ERR_NOMEM, "out of memory");
        if (rc == ATTND_OK)
            rc = oai_bind_template(&g->oreq, g->env.chat->takes_tools, g->env.chat->tool_format, &err);
        if (param && !strcmp(param, "messages")) param = "input";
    }
    if (rc == ATTND_OK) return true;
    int status = rc == ATTND_ERR_NOT_FOUND ? 404 : rc == ATTND_ERR_BUSY ? 409 : http_status_of(rc, HTTP_CTX_PARSE);
    *ret = http_respond_error(r, status, err.msg, param);
    return false;
}

// ---- streaming: the Responses API's events, through sse.c's stream loop ------------------

static void out_take(buf *out, char *frames) {
    if (frames) buf_puts(out, frames);
    free(frames);
}

static void rsp_begin(req *r, buf *out) {
    responses_result res = result_of(r, NULL, "", 0);
    rsp_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    out_take(out, responses_stream_begin(&st->ev, &res));
}

/* A delta per piece of text; at the end the closing events: response.completed, or
 * response.incomplete when the reply was cut (max_output_tokens, cancellation, shutdown), or
 * response.failed. */
static void rsp_update(req *r, int k, const sched_update *u, buf *out) {
    rsp_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    (void)k; /* one job: a response has one output */
    responses_result res = result_of(r, NULL, "", 0);
    if (u->text_len) out_take(out, responses_stream_delta(&st->ev, &res, u->text, u->text_len));
    if (!u->done) return;
    genreq *g = genreq_http_get(r);
    bool saved = genreq_persist(g); /* the chain's session is durable before the final events */
    sched_output o;
    sched_job_output(g->job, &o);
    res = result_of(r, &o, o.text ? o.text : "", o.text_len);
    if (!saved) {
        out_take(out, responses_stream_failed(&st->ev, &res, g->unsaved.msg));
    } else if (o.status != ATTND_OK && !genreq_was_cut(g, &o)) {
        out_take(out, responses_stream_failed(&st->ev, &res, o.errmsg[0] ? o.errmsg : "generation failed"));
        drop_new_session(r);
    } else if (!store_response(r, &res)) { /* stored before the answer says so */
        out_take(out, responses_stream_failed(&st->ev, &res, st->store_msg));
        drop_new_session(r);
    } else {
        out_take(out, responses_stream_end(&st->ev, &res));
    }
}

static const sse_writer RSP_WRITER = {.begin = rsp_begin, .update = rsp_update};

// ---- the endpoints ------------------------------------------------------------------------

http_result ep_responses_create(req *r) {
    struct server *s = r->srv;
    http_result ret = HTTP_NO;
    json_t *b;
    genreq *g = genreq_http_begin(r, &b, &ret);
    if (!g) return ret;
    g->chat = true;
    g->api = METRICS_API_RESPONSES;
    g->prompt_param = "input";
    rsp_state *st = calloc(1, sizeof(*st));
    if (!st) return http_respond_error(r, 503, "out of memory", NULL);
    req_set(r, REQ_SLOT_ENDPOINT, st, rsp_state_free);
    if (!parse_turn(r, b, &ret)) return ret;
    attnd_random_id(st->id, sizeof(st->id), "resp_");
    attnd_random_id(st->msg_id, sizeof(st->msg_id), "msg_");
    st->created = (long long)time(NULL);
    snprintf(g->id, sizeof(g->id), "%s", st->id);
    attnd_err qerr;
    if (st->rq.store && rstore_admit(s->responses, r->owner, &qerr) != ATTND_OK) /* full: say so before the work */
        return http_respond_error(r, 429, qerr.msg, "store");
    pick_session(r);
    genreq_err e;
    if (genreq_submit_all(g, &e) != ATTND_OK) {
        drop_new_session(r);
        return genreq_http_respond(r, &e);
    }
    if (st->rq.stream) return sse_stream(r, g, &RSP_WRITER);
    if (!genreq_wait_all(g)) return HTTP_NO;
    if (g->unsaved.fail) return genreq_http_respond(r, &g->unsaved);
    sched_output o;
    sched_job_output(g->job, &o);
    if (o.status != ATTND_OK) {
        drop_new_session(r);
        return http_respond_error(r, http_status_of(o.status, HTTP_CTX_GENERATE),
                                  o.errmsg[0] ? o.errmsg : "generation failed", NULL);
    }
    responses_result res = result_of(r, &o, o.text ? o.text : "", o.text_len);
    if (!store_response(r, &res)) {
        drop_new_session(r);
        return http_respond_error(r, st->store_status, st->store_msg, st->store_status == 429 ? "store" : NULL);
    }
    return http_respond_json(r, 200, responses_object(&res));
}

static const char *response_id_of(req *r) { return r->path + strlen("/v1/responses/"); }

http_result ep_response_get(req *r) {
    json_t *o = NULL;
    attnd_err err;
    attnd_status rc = rstore_get(r->srv->responses, r->owner, response_id_of(r), &o, NULL, NULL, &err);
    if (rc != ATTND_OK) return http_respond_error(r, http_status_of(rc, HTTP_CTX_DEFAULT), err.msg, NULL);
    return http_respond_json(r, 200, o);
}

/* Several models: the chain's session lives in the store of the model that holds it (loaded for
 * it when it is not: a session file outlives an unload). A model that cannot be had keeps the
 * session, as a busy one does; the response is deleted either way. */
static void delete_chain_session(req *r, const char *id) {
    char home[MREG_NAME_MAX + 1];
    if (!models_session_home(r->srv, -1, r->owner, id, home)) return;
    mreg_ref ref = {.idx = -1};
    attnd_err err;
    if (mreg_acquire(r->srv->models, home, &ref, NULL, NULL, &err) != ATTND_OK) {
        slog_warn("session %s of model %s kept: %s", id, home, err.msg);
        return;
    }
    server_model *sm = ref.inst;
    struct kv_seq *kv = NULL;
    if (sess_delete(sm->store, r->owner, id, &kv, NULL, &err) == ATTND_OK) sched_free_kv(sm->sch, kv);
    mreg_release(r->srv->models, &ref);
}

http_result ep_response_delete(req *r) {
    struct server *s = r->srv;
    const char *id = response_id_of(r);
    char orphan[SESS_ID_MAX + 1];
    attnd_err err;
    int e = 0;
    attnd_status rc = rstore_delete(s->responses, r->owner, id, orphan, &e, &err);
    /* the last response of a chain takes its session along (a busy one stays until next time);
     * also when only the directory sync of the removal failed: the response is gone then */
    struct kv_seq *kv = NULL;
    attnd_err serr;
    if (orphan[0] && s->store && sess_delete(s->store, r->owner, orphan, &kv, NULL, &serr) == ATTND_OK) sched_free_kv(s->sch, kv);
    if (orphan[0] && s->models) delete_chain_session(r, orphan);
    if (rc == ATTND_ERR_IO) /* not durably deleted: the client hears so */
        return http_respond_error(r, store_failure_status(rc, e), err.msg, NULL);
    if (rc != ATTND_OK) return http_respond_error(r, http_status_of(rc, HTTP_CTX_DEFAULT), err.msg, NULL);
    return http_respond_json(r, 200, responses_deleted(id));
}
