/*
 * models_http.c — routing by `model`, and the model list, load and unload endpoints of a server
 * of several models (see models_http.h).
 */
#include "models_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/model.h"
#include "models.h"
#include "oai.h"
#include "scheduler.h"

// ---- routing ----------------------------------------------------------------------------------

static bool client_gone(void *user) { return http_client_gone(user); }

/* The HTTP status of a registry failure. */
static int route_status(attnd_status st) {
    switch (st) {
    case ATTND_ERR_NOT_FOUND: return 404;
    case ATTND_ERR_NOMEM: case ATTND_ERR_BUSY: return 503; /* no room now, or the load queue is full */
    case ATTND_ERR_INVALID: return 400;
    default: return 500;                                    /* the model failed to load */
    }
}

/* name as the registry knows it: itself, or without Ollama's ":latest" (into buf). */
static const char *known_name(mreg *reg, const char *name, char buf[MREG_NAME_MAX + 1]) {
    if (mreg_find(reg, name) >= 0) return name;
    size_t n = strlen(name);
    if (n > 7 && n - 7 <= MREG_NAME_MAX && !strcmp(name + n - 7, ":latest")) {
        memcpy(buf, name, n - 7);
        buf[n - 7] = '\0';
        return buf;
    }
    return name;
}

/* The model a body names; NULL = none given. */
static const char *model_name(mreg *reg, json_t *body, char buf[MREG_NAME_MAX + 1]) {
    const char *name = json_string_value(json_object_get(body, "model"));
    return name && *name ? known_name(reg, name, buf) : NULL;
}

/* The model r asks for: its body's "model", else its ?model= parameter (GET and DELETE have no
 * body); without either, the server's only model when it has one. NULL: the 400 naming the
 * models is queued (*ret). */
static const char *wanted_model(req *r, json_t *body, char buf[MREG_NAME_MAX + 1], http_result *ret) {
    mreg *reg = r->srv->models;
    const char *name = model_name(reg, body, buf), *q = name ? NULL : http_query_get(r, "model");
    if (q && *q) name = known_name(reg, q, buf);
    if (name) return name;
    if (mreg_count(reg) == 1) {
        mreg_info in;
        mreg_info_get(reg, 0, &in);
        memcpy(buf, in.name, sizeof(in.name));
        return buf;
    }
    char names[400], msg[520];
    mreg_names(reg, names, sizeof(names));
    snprintf(msg, sizeof(msg), "\"model\" is required on a server of several models (in the body, or ?model=NAME); "
             "available: %s", names);
    *ret = http_respond_error(r, 400, msg, "model");
    return NULL;
}

bool models_http_route(req *r, json_t *body, genreq_env *env, mreg_ref *ref, http_result *ret) {
    mreg *reg = r->srv->models;
    char buf[MREG_NAME_MAX + 1];
    const char *name = wanted_model(r, body, buf, ret);
    attnd_err err;
    ref->idx = -1;
    ref->inst = NULL;
    if (!name) return false;
    attnd_status st = mreg_acquire(reg, name, ref, client_gone, r, &err);
    if (st != ATTND_OK) {
        *ret = http_respond_error(r, route_status(st), err.msg, "model");
        return false;
    }
    *env = ((server_model *)ref->inst)->env;
    if (http_role_refused(r, http_model_roles(env->m, env->cfg), env->model_id, ret)) { /* a route it does not serve */
        mreg_release(reg, ref);
        return false;
    }
    return true;
}

/* The server's own model as a request borrows it (a server of one model). */
static genreq_env server_env(struct server *s) {
    return (genreq_env){&s->cfg, s->m, s->tok, &s->chat, s->store, s->sch, s->n_ctx, &s->stopping, s->model_id,
                        s->n_vocab};
}

bool models_http_use(req *r, json_t *body, genreq_env *env, mreg_ref *ref, http_result *ret) {
    struct server *s = r->srv;
    *env = server_env(s);
    ref->idx = -1;
    ref->inst = NULL;
    return !s->models || models_http_route(r, body, env, ref, ret);
}

http_result models_http_serve(req *r, models_http_body body, models_http_fn *fn) {
    http_result ret = HTTP_NO;
    json_t *b = body == MODELS_BODY_NONE ? NULL : http_parse_body(r, &ret, body == MODELS_BODY_JSON_OR_EMPTY);
    genreq_env env;
    mreg_ref ref;
    if ((b || body == MODELS_BODY_NONE) && models_http_use(r, b, &env, &ref, &ret)) {
        ret = fn(r, b, &env, &ref);
        models_http_done(r, &ref);
    }
    json_decref(b);
    return ret;
}

bool models_http_look(req *r, genreq_env *env, mreg_ref *ref, mreg_info *info, http_result *ret) {
    struct server *s = r->srv;
    *env = server_env(s);
    ref->idx = -1;
    ref->inst = NULL;
    if (!s->models) return true;
    char buf[MREG_NAME_MAX + 1];
    const char *name = wanted_model(r, NULL, buf, ret);
    if (!name) return false;
    int i = mreg_find(s->models, name);
    if (i < 0) { /* as mreg_acquire says it: the names available */
        char names[400], msg[600];
        mreg_names(s->models, names, sizeof(names));
        snprintf(msg, sizeof(msg), "model '%.120s' not found; available: %s", name, names);
        *ret = http_respond_error(r, 404, msg, "model");
        return false;
    }
    if (mreg_hold_loaded(s->models, i, ref)) *env = ((server_model *)ref->inst)->env;
    else mreg_info_get(s->models, i, info);
    return true;
}

_Atomic(char *) *models_http_heads_cache(req *r, const mreg_ref *ref) {
    return ref->inst ? &((server_model *)ref->inst)->heads_json : &r->srv->heads_json;
}

bool models_http_session_elsewhere(req *r, const mreg_ref *ref, const char *id, http_result *ret) {
    char home[MREG_NAME_MAX + 1];
    if (!r->srv->models || ref->idx < 0 || !models_session_home(r->srv, ref->idx, r->owner, id, home)) return false;
    const char *here = ((server_model *)ref->inst)->name;
    char msg[900];
    snprintf(msg, sizeof(msg), "session '%.64s' belongs to model '%s', not '%s': a session is its model's; "
             "use it with \"model\": \"%s\" (GET and DELETE: ?model=%s)", id, home, here, home, home);
    *ret = http_respond_error(r, 409, msg, "model");
    return true;
}

void models_http_done(req *r, mreg_ref *ref) {
    if (r->srv->models) mreg_release(r->srv->models, ref);
}

// ---- listing ----------------------------------------------------------------------------------

static void read_context(void *inst, void *user) { *(int *)user = ((server_model *)inst)->n_ctx; }

/* Model i as /v1/models lists it (new reference): OpenAI's fields, llama-server's router
 * "status", and ours (role, size, context when loaded). */
static json_t *model_object(struct server *s, int i) {
    mreg_info in;
    mreg_info_get(s->models, i, &in);
    const server_preset *p = in.preset >= 0 ? &s->cfg.presets[in.preset] : NULL;
    json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:{s:s}, s:s, s:I, s:s}", "id", in.name, "object", "model", "owned_by",
                          "attnd", "created", (json_int_t)time(NULL), "status", "value", mreg_state_str(in.state),
                          "role", p ? p->role : "generation", "size", (json_int_t)in.bytes, "path", in.path);
    if (in.state == MREG_FAILED) json_object_set_new(json_object_get(o, "status"), "error", json_string(in.error));
    int n_ctx = 0; /* read under the registry's lock: listing does not count as a use */
    if (mreg_peek(s->models, i, read_context, &n_ctx)) json_object_set_new(o, "context_length", json_integer(n_ctx));
    return o;
}

http_result models_http_list(req *r) {
    json_t *data = json_array();
    for (int i = 0; i < mreg_count(r->srv->models); i++) json_array_append_new(data, model_object(r->srv, i));
    return http_respond_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

http_result models_http_get(req *r) {
    const char *id = r->path + strlen("/v1/models/");
    int i = mreg_find(r->srv->models, id);
    if (i < 0) return http_respond_json(r, 404, oai_error_model_not_found(id));
    return http_respond_json(r, 200, model_object(r->srv, i));
}

http_result models_http_tags(req *r, bool loaded_only) {
    json_t *list = json_array();
    for (int i = 0; i < mreg_count(r->srv->models); i++) {
        mreg_info in;
        mreg_info_get(r->srv->models, i, &in);
        if (loaded_only && in.state != MREG_LOADED) continue;
        char name[MREG_NAME_MAX + 16];
        snprintf(name, sizeof(name), "%s:latest", in.name);
        json_t *m = json_pack("{s:s, s:s, s:I, s:{s:s}}", "name", name, "model", name, "size", (json_int_t)in.bytes,
                              "details", "format", "gguf");
        if (loaded_only) {
            json_object_set_new(m, "size_vram", json_integer(0));
            json_object_set_new(m, "expires_at", json_string("2318-01-01T00:00:00Z"));
        }
        json_array_append_new(list, m);
    }
    return http_respond_json(r, 200, json_pack("{s:o}", "models", list));
}

// ---- load and unload --------------------------------------------------------------------------

/* POST /models/load or /models/unload: body {"model": NAME}. */
static http_result load_or_unload(req *r, bool load) {
    if (!r->srv->models)
        return http_respond_error(r, 400, "this server serves one model, always loaded (models_dir serves several)", NULL);
    if (!http_is_admin(r))
        return http_respond_error(r, 403, "loading and unloading models needs the admin key (admin_api_key)", NULL);
    http_result ret = HTTP_NO;
    json_t *b = http_parse_body(r, &ret, false);
    if (!b) return ret;
    char buf[MREG_NAME_MAX + 1];
    const char *name = model_name(r->srv->models, b, buf);
    attnd_err err;
    attnd_status st = !name ? attnd_fail(&err, ATTND_ERR_INVALID, "\"model\" is required")
                      : load ? mreg_load(r->srv->models, name, &err)
                             : mreg_unload(r->srv->models, name, &err);
    json_decref(b);
    if (st == ATTND_OK) return http_respond_json(r, 200, json_pack("{s:b}", "success", 1));
    int status = st == ATTND_ERR_BUSY && !load ? 409 : route_status(st);
    return http_respond_error(r, status, err.msg, "model");
}

http_result ep_models_load(req *r) { return load_or_unload(r, true); }
http_result ep_models_unload(req *r) { return load_or_unload(r, false); }

// ---- health and metrics -----------------------------------------------------------------------

json_t *models_http_health(struct server *s) {
    json_t *o = json_object();
    for (int i = 0; i < mreg_count(s->models); i++) {
        mreg_info in;
        mreg_info_get(s->models, i, &in);
        json_object_set_new(o, in.name, json_string(mreg_state_str(in.state)));
    }
    return o;
}

static void read_stats(void *inst, void *user) { sched_get_stats(((server_model *)inst)->sch, user); }

/* The scheduler's series of every loaded model, labelled with its name (they start again from 0
 * when a model loads again: a new scheduler, which Prometheus reads as a counter reset). */
static void scheduler_series(struct server *s, buf *b) {
    static const struct {
        const char *name, *type, *help;
    } M[] = {
        {"attnd_model_sequences_active", "gauge", "Sequences the model's scheduler is running."},
        {"attnd_model_sequences_queued", "gauge", "Sequences waiting for the model's scheduler."},
        {"attnd_model_kv_used_bytes", "gauge", "KV cache bytes the model holds."},
        {"attnd_model_kv_budget_bytes", "gauge", "The model's KV budget (kv_budget_mb)."},
        {"attnd_model_prompt_tokens_total", "counter", "Prompt tokens the model read since it loaded."},
        {"attnd_model_generated_tokens_total", "counter", "Tokens the model generated since it loaded."},
        {"attnd_model_threads", "gauge", "Engine threads of the model's last step (its share of threads)."},
        {"attnd_model_steps_shared_total", "counter", "Steps the model ran on a share of the threads."},
    };
    int n = mreg_count(s->models);
    sched_stats *st = calloc((size_t)(n > 0 ? n : 1), sizeof(*st));
    bool *loaded = calloc((size_t)(n > 0 ? n : 1), sizeof(*loaded));
    for (int i = 0; st && loaded && i < n; i++) loaded[i] = mreg_peek(s->models, i, read_stats, &st[i]);
    for (size_t k = 0; st && loaded && k < ATTND_ARRAY_LEN(M); k++) {
        buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", M[k].name, M[k].help, M[k].name, M[k].type);
        for (int i = 0; i < n; i++) {
            if (!loaded[i]) continue;
            mreg_info in;
            mreg_info_get(s->models, i, &in);
            const sched_stats *t = &st[i];
            unsigned long long v = k == 0 ? (unsigned long long)t->active : k == 1 ? (unsigned long long)t->queued
                                 : k == 2 ? t->kv_used : k == 3 ? t->kv_budget : k == 4 ? t->prompt_tokens
                                 : k == 5 ? t->generated_tokens : k == 6 ? (unsigned long long)t->threads
                                 : t->steps_shared;
            buf_printf(b, "%s{model=\"%s\"} %llu\n", M[k].name, in.name, v);
        }
    }
    free(st);
    free(loaded);
}

char *models_http_metrics(struct server *s) {
    static const struct {
        const char *name, *type, *help;
    } M[] = {
        {"attnd_model_loaded", "gauge", "1 while the model is loaded (models_dir, presets)."},
        {"attnd_model_loads_total", "counter", "Loads of the model that succeeded."},
        {"attnd_model_load_failures_total", "counter", "Loads of the model that failed."},
        {"attnd_model_unloads_total", "counter", "Unloads of the model (explicit, or for room)."},
        {"attnd_model_requests_active", "gauge", "Requests using the model or waiting for its load."},
    };
    buf b = {0};
    for (size_t k = 0; k < ATTND_ARRAY_LEN(M); k++) {
        buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", M[k].name, M[k].help, M[k].name, M[k].type);
        for (int i = 0; i < mreg_count(s->models); i++) {
            mreg_info in;
            mreg_info_get(s->models, i, &in);
            unsigned long long v = k == 0 ? in.state == MREG_LOADED : k == 1 ? in.loads : k == 2 ? in.load_failures
                                 : k == 3 ? in.unloads : (unsigned long long)(in.refs + in.waiters);
            buf_printf(&b, "%s{model=\"%s\"} %llu\n", M[k].name, in.name, v);
        }
    }
    scheduler_series(s, &b);
    return b.p;
}
