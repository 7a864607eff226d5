/*
 * ollama_http.c — Ollama's API (see endpoints.h): POST /api/chat and /api/generate over the
 * generation request (genreq.h), and the model endpoints GET /api/tags, POST /api/show,
 * GET /api/ps, GET /api/version, for apps that speak nothing else.
 *
 * ollama.c translates the body into a chat or completion body, which oai_parse validates; the
 * rest is attnd's usual generation. Streams are NDJSON (sse.c's loop with an Ollama writer:
 * application/x-ndjson, and an empty piece instead of SSE's keep-alive comment). Errors are
 * Ollama's {"error": "..."} through the routes' ROUTE_OLLAMA flag (http_respond_error); a model
 * name other than the one served is a 404 as Ollama answers it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "attnd/embed.h"
#include "attnd/model.h"
#include "endpoints.h"
#include "genreq_http.h"
#include "models_http.h"
#include "ollama.h"
#include "sse.h"

/* The request's state: the request's REQ_SLOT_ENDPOINT. */
typedef struct oll_state {
    ollama_request rq;
    ollama_stream ev;
    bool chat_api;
    char created_at[40];
    char id[48];
} oll_state;

static void oll_state_free(void *p) {
    oll_state *st = p;
    ollama_request_free(&st->rq);
    ollama_stream_free(&st->ev);
    free(st);
}

/* Now as RFC 3339 with nanoseconds, UTC. */
static void rfc3339_now(char out[40]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char day[24];
    strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 40, "%s.%09ldZ", day, (long)ts.tv_nsec);
}

/* A model's name as Ollama clients see it (id): a name matches with or without ":latest". */
static bool model_matches(const char *id, const char *name) { return ollama_model_matches(id, name); }

/* The answer's fields beside the reply (o NULL: running). */
static ollama_result result_of(req *r, const sched_output *o) {
    oll_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    ollama_result res = {.model = st->rq.model, .created_at = st->created_at};
    if (!o || !o->done) return res;
    bool cut = genreq_was_cut(genreq_http_get(r), o) || (o->finish_reason && !strcmp(o->finish_reason, "length"));
    res.done_reason = cut ? "length" : "stop";
    res.prompt_eval_count = o->n_prompt - o->n_cached;
    res.eval_count = o->n_generated;
    res.prompt_ns = (long long)(o->prompt_ms * 1e6);
    res.eval_ns = (long long)(o->gen_ms * 1e6);
    res.total_ns = (long long)((attnd_now_s() - r->t0) * 1e9);
    return res;
}

/* How the reply is read (into *how): a chat body's as every chat reply (oai_reply_reading); NULL
 * for a raw completion, whose text is not split. */
static const toolcall_reading *reading_of(req *r, toolcall_reading *how) {
    const oll_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    *how = oai_reply_reading(&genreq_http_get(r)->oreq, st->id);
    return st->rq.chat ? how : NULL;
}

// ---- streaming: NDJSON lines through sse.c's loop -----------------------------------------

static void oll_begin(req *r, buf *out) {
    oll_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    (void)out; /* Ollama's first line is the first piece */
    toolcall_reading how;
    ollama_stream_init(&st->ev, st->chat_api, reading_of(r, &how));
}

static void oll_update(req *r, int k, const sched_update *u, buf *out) {
    oll_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    (void)k; /* one job */
    if (!st->ev.calls) return; /* out of memory at the start */
    ollama_result res = result_of(r, NULL);
    if (u->text_len) ollama_stream_delta(&st->ev, &res, u->text, u->text_len, out);
    if (!u->done) return;
    genreq *g = genreq_http_get(r);
    bool saved = genreq_persist(g);
    sched_output o;
    sched_job_output(g->job, &o);
    const char *fail = !saved ? g->unsaved.msg : o.status != ATTND_OK && !genreq_was_cut(g, &o) ? (o.errmsg[0] ? o.errmsg : "generation failed") : NULL;
    if (fail) { /* as Ollama ends a stream that failed: an error line */
        json_t *e = json_pack("{s:s}", "error", fail);
        char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
        if (s) buf_printf(out, "%s\n", s);
        free(s);
        json_decref(e);
        return;
    }
    res = result_of(r, &o);
    ollama_stream_end(&st->ev, &res, out);
}

static void oll_idle(req *r, buf *out) {
    oll_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    ollama_result res = result_of(r, NULL);
    ollama_stream_idle(&st->ev, &res, out);
}

static const sse_writer OLL_WRITER = {.begin = oll_begin, .update = oll_update, .content_type = "application/x-ndjson",
                                      .idle = oll_idle};

// ---- generation -----------------------------------------------------------------------------

/* Parses the body into the state and the genreq's oreq; false: an error is queued. */
static bool parse_body(req *r, json_t *b, bool chat_api, http_result *ret) {
    struct server *s = r->srv;
    genreq *g = genreq_http_get(r);
    oll_state *st = req_get(r, REQ_SLOT_ENDPOINT);
    const char *param = NULL;
    attnd_err err;
    attnd_status rc = ollama_parse(b, chat_api, &s->cfg, &st->rq, &param, &err);
    if (rc == ATTND_OK && !model_matches(g->env.model_id, st->rq.model)) {
        char msg[300];
        snprintf(msg, sizeof(msg), "model '%.200s' not found", st->rq.model);
        *ret = http_respond_error(r, 404, msg, "model");
        return false;
    }
    if (rc == ATTND_OK && st->rq.suffix) { /* Ollama checks the model's "insert" capability first */
        rc = ollama_fim_prompt(&st->rq, g->env.tok, g->env.n_ctx, g->env.cfg->default_max_tokens, &err);
        param = "suffix";
    }
    g->chat = st->rq.chat;
    if (rc == ATTND_OK) rc = oai_parse(st->rq.body, g->chat, g->env.cfg, g->env.n_vocab, &g->oreq, &param, &err);
    if (rc == ATTND_OK && g->chat)
        rc = oai_bind_template(&g->oreq, g->env.chat->takes_tools, g->env.chat->tool_format, &err);
    if (rc == ATTND_OK) return true;
    int status = rc == ATTND_ERR_UNSUPPORTED ? 400 : http_status_of(rc, HTTP_CTX_PARSE); /* no FIM tokens */
    *ret = http_respond_error(r, status, err.msg, param);
    return false;
}

static http_result generate(req *r, bool chat_api) {
    http_result ret = HTTP_NO;
    json_t *b;
    genreq *g = genreq_http_begin(r, &b, &ret);
    if (!g) return ret;
    g->api = METRICS_API_OLLAMA;
    oll_state *st = calloc(1, sizeof(*st));
    if (!st) return http_respond_error(r, 503, "out of memory", NULL);
    req_set(r, REQ_SLOT_ENDPOINT, st, oll_state_free);
    st->chat_api = chat_api;
    rfc3339_now(st->created_at);
    attnd_random_id(st->id, sizeof(st->id), "oll_");
    snprintf(g->id, sizeof(g->id), "%s", st->id);
    if (!parse_body(r, b, chat_api, &ret)) return ret;
    if (st->rq.load_only) { /* Ollama's way to load a model: the model is loaded */
        ollama_result res = {.model = st->rq.model, .created_at = st->created_at, .done_reason = "load"};
        return http_respond_json(r, 200, ollama_answer(&res, "", 0, false, NULL));
    }
    genreq_err e;
    if (genreq_submit_all(g, &e) != ATTND_OK) return http_respond_error(r, genreq_http_status(&e), e.msg, e.param);
    if (st->rq.stream) return sse_stream(r, g, &OLL_WRITER);
    if (!genreq_wait_all(g)) return HTTP_NO;
    if (g->unsaved.fail) return http_respond_error(r, genreq_http_status(&g->unsaved), g->unsaved.msg, NULL);
    sched_output o;
    sched_job_output(g->job, &o);
    if (o.status != ATTND_OK && !genreq_was_cut(g, &o))
        return http_respond_error(r, http_status_of(o.status, HTTP_CTX_GENERATE), o.errmsg[0] ? o.errmsg : "generation failed", NULL);
    ollama_result res = result_of(r, &o);
    toolcall_reading how;
    json_t *a = ollama_answer(&res, o.text ? o.text : "", o.text_len, chat_api, reading_of(r, &how));
    return a ? http_respond_json(r, 200, a) : http_respond_error(r, 503, "out of memory", NULL);
}

http_result ep_ollama_chat(req *r) { return generate(r, true); }
http_result ep_ollama_generate(req *r) { return generate(r, false); }

// ---- the model endpoints ------------------------------------------------------------------

/* "8.0B", "125M": the parameter count as Ollama writes it. */
static void param_size(uint64_t n, char out[16]) {
    if (n >= 1000000000ull) snprintf(out, 16, "%.1fB", (double)n / 1e9);
    else snprintf(out, 16, "%.0fM", (double)n / 1e6);
}

/* The served model as /api/tags and /api/ps list it (new reference). digest is an identifier of
 * the file (its path, size and modification time), not its SHA-256. */
static json_t *model_entry(const model *mod, const char *path, const char *id) {
    const model_info *mi = model_info_get(mod);
    struct stat sb;
    long long size = stat(path, &sb) == 0 ? (long long)sb.st_size : 0;
    char name[200], digest[65], ps[16], when[40];
    snprintf(name, sizeof(name), "%s:latest", id);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = path; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    h ^= (uint64_t)size * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 4; i++) snprintf(digest + 16 * i, 17, "%016llx", (unsigned long long)(h * (2ull * (uint64_t)i + 1)));
    param_size(mi->n_params, ps);
    struct tm tm;
    time_t mt = stat(path, &sb) == 0 ? sb.st_mtime : time(NULL);
    gmtime_r(&mt, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return json_pack("{s:s, s:s, s:s, s:I, s:s, s:{s:s, s:s, s:s, s:[s], s:s, s:s}}", "name", name, "model", name,
                     "modified_at", when, "size", (json_int_t)size, "digest", digest, "details", "parent_model", "",
                     "format", "gguf", "family", mi->arch, "families", mi->arch, "parameter_size", ps,
                     "quantization_level", "");
}

http_result ep_ollama_tags(req *r) {
    if (r->srv->models) return models_http_tags(r, false);
    json_t *m = model_entry(r->srv->m, r->srv->cfg.model_path, r->srv->model_id);
    return http_respond_json(r, 200, json_pack("{s:[o]}", "models", m));
}

http_result ep_ollama_ps(req *r) {
    if (r->srv->models) return models_http_tags(r, true);
    json_t *m = model_entry(r->srv->m, r->srv->cfg.model_path, r->srv->model_id);
    if (m) {
        json_object_set_new(m, "size_vram", json_integer(0));
        json_object_set_new(m, "context_length", json_integer(r->srv->n_ctx));
        json_object_set_new(m, "expires_at", json_string("2318-01-01T00:00:00Z")); /* never unloaded */
    }
    return http_respond_json(r, 200, json_pack("{s:[o]}", "models", m));
}

http_result ep_ollama_version(req *r) { return http_respond_json(r, 200, json_pack("{s:s}", "version", OLLAMA_API_VERSION)); }

/* /api/show's answer for the model of env (new reference). */
static json_t *show_answer(const genreq_env *env) {
    const model_info *mi = model_info_get(env->m);
    const sampler_params *sp = &env->cfg->sampling;
    char params[300], key[80], tmpl[200];
    snprintf(params, sizeof(params), "temperature %g\ntop_k %d\ntop_p %g\nmin_p %g\nrepeat_penalty %g\nnum_ctx %d",
             sp->temperature, sp->top_k, sp->top_p, sp->min_p, sp->repeat_penalty, env->n_ctx);
    snprintf(tmpl, sizeof(tmpl), "%s (%s)", chat_family_name(env->chat->family), chat_source_str(env->chat));
    json_t *entry = model_entry(env->m, env->cfg->model_path, env->model_id);
    json_t *info = json_pack("{s:s, s:I}", "general.architecture", mi->arch, "general.parameter_count",
                             (json_int_t)mi->n_params);
    snprintf(key, sizeof(key), "%s.context_length", mi->arch);
    json_object_set_new(info, key, json_integer(mi->n_ctx));
    snprintf(key, sizeof(key), "%s.block_count", mi->arch);
    json_object_set_new(info, key, json_integer(mi->n_layer));
    snprintf(key, sizeof(key), "%s.embedding_length", mi->arch);
    json_object_set_new(info, key, json_integer(mi->n_embd));
    unsigned roles = http_model_roles(env->m, env->cfg);
    json_t *caps = json_array(); /* Ollama's: "completion", "tools", "embedding" */
    if (roles & MODEL_ROLE_GENERATE) json_array_append_new(caps, json_string("completion"));
    if ((roles & MODEL_ROLE_GENERATE) && env->chat->takes_tools) json_array_append_new(caps, json_string("tools"));
    if (roles & MODEL_ROLE_EMBED) json_array_append_new(caps, json_string("embedding"));
    json_t *ans = json_pack("{s:s, s:s, s:s, s:O, s:o, s:o, s:O}", "modelfile", "", "parameters", params, "template", tmpl,
                            "details", json_object_get(entry, "details"), "model_info", info, "capabilities", caps,
                            "modified_at", json_object_get(entry, "modified_at"));
    json_decref(entry);
    return ans;
}

http_result ep_ollama_show(req *r) {
    struct server *s = r->srv;
    http_result ret = HTTP_NO;
    json_t *b = http_parse_body(r, &ret, false);
    if (!b) return ret;
    const char *name = json_string_value(json_object_get(b, "model"));
    if (!name) name = json_string_value(json_object_get(b, "name")); /* the older field */
    /* the model shown: the server's, or on a server of several the one named (loaded for it) */
    genreq_env env = {.cfg = &s->cfg, .m = s->m, .chat = &s->chat, .n_ctx = s->n_ctx, .model_id = s->model_id};
    mreg_ref ref = {.idx = -1};
    if (s->models && name && !json_object_get(b, "model")) json_object_set_new(b, "model", json_string(name));
    if (s->models && !models_http_route(r, b, &env, &ref, &ret)) {
        json_decref(b);
        return ret;
    }
    if (!s->models && (!name || !model_matches(s->model_id, name))) {
        char msg[300];
        snprintf(msg, sizeof(msg), "model '%.200s' not found", name ? name : "");
        json_decref(b);
        return http_respond_error(r, name ? 404 : 400, name ? msg : "model is required", "model");
    }
    json_decref(b);
    json_t *ans = show_answer(&env);
    if (s->models) mreg_release(s->models, &ref);
    return http_respond_json(r, 200, ans);
}
