/*
 * models_http.h — a server of several models (models_dir, [model.NAME] presets; docs/models.md)
 * as the HTTP layer sees it (server-private): one loaded model (server_model, the process
 * layer's models.c makes and unloads them through the registry, runtime/mreg.h), the routing of
 * a generation request by its `model` field to that model's genreq_env, and the endpoints that
 * list, load and unload models.
 *
 * A server of one model (no models_dir, no presets) never comes here: its requests use the
 * server's own model whatever their `model` says, as before.
 */
#ifndef ATTND_SERVER_MODELS_HTTP_H
#define ATTND_SERVER_MODELS_HTTP_H

#include <stdatomic.h>

#include "genreq.h"
#include "http.h"
#include "mreg.h"

/* One loaded model: everything its requests use, owned here (models.c builds and frees it). */
typedef struct server_model {
    genreq_env env;           /* what a generation request on it borrows (points into this struct) */
    server_settings cfg;      /* its settings: its preset's over the server's; strings borrowed */
    model *m;
    tokenizer *tok;
    chat_template chat;
    sess_store *store;
    sched *sch;
    char name[MREG_NAME_MAX + 1];
    int n_ctx;
    size_t pulled_bytes;      /* an hf:// model's file set as pulled (its preset counted 0) */
    _Atomic(char *) heads_json; /* GET /v1/heads' answer once computed; owned */
} server_model;

/*
 * The model a request names in body's "model" (Ollama's "name:latest" is "name"), else in its
 * ?model= query parameter (GET and DELETE, which have no body; body may be NULL), else the
 * server's only model when it has exactly one: acquired into *ref (loaded first when needed,
 * waiting while it loads) and its env into *env. false: the answer is queued (*ret): 400 without
 * a model (naming the available ones) or when it does not serve the route's role
 * (http_role_refused), 404 naming the available ones, 503 with Retry-After when there is no room
 * or the load queue is full, 500 naming a model that failed to load.
 */
bool models_http_route(req *r, json_t *body, genreq_env *env, mreg_ref *ref, http_result *ret);

/* The model of a request that runs no generation request (/tokenize, /v1/heads, /apply-template,
 * /v1/sessions...): on a one-model server the server's, and ref stays empty; on a server of
 * several, as models_http_route. Give it back with models_http_done. false: the answer is queued
 * (*ret). */
bool models_http_use(req *r, json_t *body, genreq_env *env, mreg_ref *ref, http_result *ret);
void models_http_done(req *r, mreg_ref *ref);

/* What an endpoint that works on one model (and generates nothing) does once the model is
 * chosen: body is the request's JSON object (NULL when the endpoint takes none), env and ref
 * the model's (models_http_use); all borrowed for the call. Returns the answer it queued. */
typedef http_result models_http_fn(req *r, json_t *body, const genreq_env *env, const mreg_ref *ref);

/* The body such an endpoint takes. */
typedef enum models_http_body {
    MODELS_BODY_NONE,          /* none (GET, DELETE): the model by ?model= */
    MODELS_BODY_JSON,          /* a JSON object; an empty body is a 400 (http_parse_body) */
    MODELS_BODY_JSON_OR_EMPTY, /* a JSON object; an empty body reads as {} */
} models_http_body;

/* Runs such an endpoint: parses the body as `body` says (the 400 of a bad one is queued), takes
 * the model it names (models_http_use; its 4xx / 5xx is queued), runs fn, gives the model back
 * (models_http_done) and frees the body. Returns fn's answer, or the error queued before it. */
http_result models_http_serve(req *r, models_http_body body, models_http_fn *fn);

/* The model a read-only GET names (/props, /slots: ?model=, as models_http_use), never loaded for
 * it and not counted as a use (mreg_hold_loaded): true with *env (and *ref, give it back with
 * models_http_done) when it is loaded or the server has one model; true with ref->inst NULL and
 * *info its registry entry (state, path) when it is not loaded. false: the 400 or 404 is queued. */
bool models_http_look(req *r, genreq_env *env, mreg_ref *ref, mreg_info *info, http_result *ret);

/* Where the GET /v1/heads answer of ref's model is kept (the server's own with an empty ref). */
_Atomic(char *) *models_http_heads_cache(req *r, const mreg_ref *ref);

/* A session is its model's (each model has its own store): when session id of r's caller, not
 * found on ref's model, belongs to another model (models_session_home), queues the 409 naming
 * that model and returns true. false on a one-model server and when no other model has it. */
bool models_http_session_elsewhere(req *r, const mreg_ref *ref, const char *id, http_result *ret);

/* GET /v1/models, /models: every model with its state. */
http_result models_http_list(req *r);
/* GET /v1/models/{id}. */
http_result models_http_get(req *r);
/* GET /api/tags (every model) and /api/ps (the loaded ones), Ollama's shapes. */
http_result models_http_tags(req *r, bool loaded_only);
/* POST /models/load and /models/unload {"model": NAME}: llama-server's router endpoints. */
http_result ep_models_load(req *r);
http_result ep_models_unload(req *r);
/* Prometheus lines per model (state, loads, unloads, requests in use), appended to /metrics
 * (new string, NULL when out of memory). */
char *models_http_metrics(struct server *s);
/* /health's "models": {name: state} (new reference). */
json_t *models_http_health(struct server *s);

#endif
