/*
 * genreq_http.c — a generation request inside an HTTP request (see genreq_http.h).
 */
#include "genreq_http.h"

#include <stdio.h>
#include <stdlib.h>

#include "models.h"
#include "models_http.h"

/* The completed callback's part of the generation: its jobs' end, and what the log says. */
static void genreq_on_end(req *r, void *p, bool completed) {
    genreq *g = ((genreq_http_slot *)p)->g;
    if (!g) return;
    char what[200];
    snprintf(what, sizeof(what), "%s %s", r->method, r->path);
    r->n_gen = genreq_end(g, completed, what);
    r->n_prompt = g->n_prompt;
    r->cancelled = r->cancelled || g->cancelled;
    snprintf(r->answer_id, sizeof(r->answer_id), "%s", g->id);
}

/* The request's genreq, then its model (the jobs referencing the model are gone by then). */
static void slot_free(void *p) {
    genreq_http_slot *slot = p;
    genreq_destroy(slot->g);
    if (slot->reg) mreg_release(slot->reg, &slot->ref);
    free(slot);
}

static bool client_gone(void *user) { return http_client_gone(user); }

/* genreq's session_home on a server of several models (user: the request, whose slot holds its
 * model): another model's session. */
static bool session_home(void *user, const char *owner, const char *id, char *home, size_t cap) {
    req *r = user;
    const genreq_http_slot *slot = req_get(r, REQ_SLOT_GENREQ);
    char name[MREG_NAME_MAX + 1];
    if (!models_session_home(r->srv, slot->ref.idx, owner, id, name)) return false;
    snprintf(home, cap, "%s", name);
    return true;
}

genreq *genreq_http_begin(req *r, json_t **body, http_result *ret) {
    struct server *s = r->srv;
    *body = http_work_body(r, ret);
    if (!*body) return NULL;
    char tenant[SCHED_TENANT_MAX + 1];
    http_tenant(r, tenant, sizeof(tenant));
    genreq_env env = {&s->cfg, s->m, s->tok, &s->chat, s->store, s->sch, s->n_ctx, &s->stopping, s->model_id, s->n_vocab};
    genreq_http_slot *slot = calloc(1, sizeof(*slot));
    if (!slot) {
        json_decref(*body);
        *ret = http_respond_error(r, 503, "out of memory", NULL);
        return NULL;
    }
    slot->reg = s->models;
    slot->ref.idx = -1;
    req_set(r, REQ_SLOT_GENREQ, slot, slot_free); /* from here the slot holds the model until the end */
    if (s->models && !models_http_route(r, *body, &env, &slot->ref, ret)) {
        json_decref(*body);
        return NULL;
    }
    env.stopping = &s->stopping;
    genreq_who who = {r->owner, r->request_id, tenant, http_header_get(r, "X-Session-Id"), client_gone, r};
    genreq *g = slot->g = genreq_create(&env, &who);
    if (!g) {
        json_decref(*body);
        *ret = http_respond_error(r, 503, "out of memory", NULL);
        return NULL;
    }
    g->body = *body;
    if (s->models) g->session_home = session_home, g->home_user = r;
    req_set_end(r, REQ_SLOT_GENREQ, genreq_on_end);
    return g;
}

int genreq_http_status(const genreq_err *e) {
    switch (e->fail) {
    case GENREQ_OK: break;
    case GENREQ_BAD_REQUEST: case GENREQ_TOO_LONG: return 400;
    case GENREQ_SESSION: return http_status_of(e->st, HTTP_CTX_ACQUIRE);
    case GENREQ_OVERLOADED: return e->st == ATTND_ERR_BUSY ? 429 : 503;
    case GENREQ_STOPPING: return 503;
    case GENREQ_UNSAVED: return e->no_space ? 507 : e->st == ATTND_ERR_BUSY ? 409 : 503;
    }
    return 500;
}

http_result genreq_http_respond(req *r, const genreq_err *e) {
    int status = genreq_http_status(e);
    if (e->code) return http_respond_json(r, status, oai_error_coded(status, NULL, e->code, e->msg, e->param));
    return http_respond_error(r, status, e->msg, e->param);
}

json_t *genreq_http_error(const genreq_err *e) { return oai_error(genreq_http_status(e), e->msg, e->param); }
