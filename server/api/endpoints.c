/*
 * endpoints.c — the small endpoints of `attnd serve`: health, metrics, the model list,
 * tokenize/detokenize and the sessions API (see endpoints.h).
 */
#include "endpoints.h"
#include "statedir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "attnd/embed.h"
#include "attnd/model.h"
#include "completion_body.h"
#include "metrics.h"
#include "models_http.h"
#include "oai.h"
#include "scheduler.h"
#include "sess_json.h"
#include "slog.h"
#include "web_assets.h"

// ---- simple endpoints ---------------------------------------------------------------------

/* The playground page, from the binary. Its policy allows requests to this server only (the page
 * needs nothing else), and no framing by other sites. */
http_result ep_playground(req *r) {
    static const http_header h[] = {
        {"Content-Type", "text/html; charset=utf-8"},
        {"Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                    "connect-src 'self'; img-src data:; frame-ancestors 'none'"},
        {"X-Content-Type-Options", "nosniff"},
        {"Cache-Control", "no-cache"},
    };
    return http_reply(r, 200, (char *)attnd_playground_html, attnd_playground_html_len, false, h,
                      (int)ATTND_ARRAY_LEN(h));
}

http_result ep_health(req *r) {
    if (!atomic_load(&r->srv->ready)) return http_respond_error(r, 503, "model is loading", NULL);
    json_t *o = json_object();
    statedir_stats sd;
    statedir_health(&sd);
    /* still serving, but what it acknowledges cannot be saved until the state dir works again */
    json_object_set_new(o, "status", json_string(sd.degraded ? "degraded" : "ok"));
    if (r->srv->models) json_object_set_new(o, "models", models_http_health(r->srv));
    if (r->srv->cfg.state_dir)
        json_object_set_new(o, "state_dir", json_pack("{s:s, s:I}", "status", sd.degraded ? "failing" : "ok",
                                                      "write_failures", (json_int_t)sd.failures));
    return http_respond_json(r, 200, o);
}

http_result ep_metrics(req *r) {
    struct server *s = r->srv;
    sched_stats st;
    bool have = s->sch != NULL && atomic_load(&s->ready);
    if (have) sched_get_stats(s->sch, &st);
    char *text = metrics_render(s->met, have ? &st : NULL, have ? sess_count(s->store) : 0, atomic_load(&s->ready));
    if (!text) return http_respond_error(r, 500, "out of memory", NULL);
    statedir_stats sd;
    statedir_health(&sd);
    char extra[400];
    int n = snprintf(extra, sizeof(extra),
                     "# HELP attnd_state_write_failures_total State directory writes and removals that failed.\n"
                     "# TYPE attnd_state_write_failures_total counter\nattnd_state_write_failures_total %lu\n"
                     "# HELP attnd_state_degraded 1 while the last state directory write failed.\n"
                     "# TYPE attnd_state_degraded gauge\nattnd_state_degraded %d\n",
                     sd.failures, sd.degraded ? 1 : 0);
    size_t len = strlen(text);
    char *all = realloc(text, len + (size_t)n + 1);
    if (!all) {
        free(text);
        return http_respond_error(r, 500, "out of memory", NULL);
    }
    memcpy(all + len, extra, (size_t)n + 1);
    text = all;
    char *per_model = s->models ? models_http_metrics(s) : NULL;
    if (per_model) {
        len = strlen(text);
        size_t pm = strlen(per_model);
        char *more = realloc(text, len + pm + 1);
        if (more) memcpy(more + len, per_model, pm + 1), text = more;
        free(per_model);
    }
    return http_respond_text(r, 200, "text/plain; version=0.0.4", text);
}

static completion_body_model_desc model_desc(const struct server *s) {
    const model_info *mi = model_info_get(s->m);
    return (completion_body_model_desc){s->model_id, (long long)time(NULL), s->n_ctx, mi->n_vocab, mi->n_ctx,
                            (long long)mi->n_params, chat_family_name(s->chat.family), &s->cfg.sampling,
                            s->cfg.default_max_tokens, http_model_roles(s->m, &s->cfg), mi->n_embd};
}

http_result ep_models(req *r) {
    if (r->srv->models) return models_http_list(r);
    completion_body_model_desc d = model_desc(r->srv);
    return http_respond_json(r, 200, completion_body_models(&d));
}

http_result ep_model_get(req *r) {
    if (r->srv->models) return models_http_get(r);
    const char *id = strrchr(r->path, '/') + 1; /* the route is a prefix ending in '/' */
    if (strcmp(id, r->srv->model_id)) return http_respond_json(r, 404, oai_error_model_not_found(id));
    completion_body_model_desc d = model_desc(r->srv);
    return http_respond_json(r, 200, completion_body_model(&d));
}

// ---- tokenize / detokenize ---------------------------------------------------------------

/* Tokenizing runs on the connection's thread, outside the scheduler's queue; these requests are
 * bounded like generation instead: at most tokenize_parallel at once (429 above), and the
 * answer is written as text (a few bytes per token) rather than as a JSON tree (~150 bytes per
 * token), so a body of body_limit bytes cannot turn into hundreds of MB. */
static http_result tok_serve(req *r, models_http_fn *fn) {
    struct server *s = r->srv;
    int limit = s->cfg.tokenize_parallel > 0 ? s->cfg.tokenize_parallel : 4;
    if (atomic_fetch_add(&s->tok_active, 1) >= limit) {
        atomic_fetch_sub(&s->tok_active, 1);
        return http_respond_error(r, 429, "too many tokenize/detokenize requests at once (tokenize_parallel); "
                                  "retry shortly", NULL);
    }
    http_result ret = models_http_serve(r, MODELS_BODY_JSON, fn); /* a server of several: the model named */
    atomic_fetch_sub(&s->tok_active, 1);
    return ret;
}

/* A text being built; oom latches (an append failed, the text is incomplete). */
typedef struct tbuf {
    buf text;
    bool oom;
} tbuf;

static void tb_put(tbuf *b, const char *s, size_t n) {
    if (!b->oom && !buf_append(&b->text, s, n)) b->oom = true;
}

/* {"tokens":[...]} for ids, as ids or {"id","piece"} objects; NULL when out of memory. */
static char *tokens_answer(const tokenizer *tok, const int32_t *ids, size_t n, bool pieces) {
    tbuf b = {0};
    tb_put(&b, "{\"tokens\":[", 11);
    char num[48];
    for (size_t i = 0; i < n && !b.oom; i++) {
        if (i) tb_put(&b, ",", 1);
        if (!pieces) {
            tb_put(&b, num, (size_t)snprintf(num, sizeof(num), "%d", ids[i]));
            continue;
        }
        const char *piece = tok_piece(tok, ids[i]);
        json_t *js = oai_string(piece ? piece : "", piece ? strlen(piece) : 0);
        char *q = js ? json_dumps(js, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        json_decref(js);
        if (!q) b.oom = true;
        tb_put(&b, num, (size_t)snprintf(num, sizeof(num), "{\"id\":%d,\"piece\":", ids[i]));
        if (q) tb_put(&b, q, strlen(q));
        tb_put(&b, "}", 1);
        free(q);
    }
    tb_put(&b, "]}\n", 3);
    if (b.oom) {
        buf_free(&b.text);
        return NULL;
    }
    return b.text.p; /* the buffer's storage, now the caller's */
}

static http_result tokenize(req *r, json_t *b, const genreq_env *env, const mreg_ref *ref) {
    (void)ref;
    const tokenizer *tok = env->tok;
    json_t *content = json_object_get(b, "content"), *as = json_object_get(b, "add_special"),
           *ps = json_object_get(b, "parse_special"), *wp = json_object_get(b, "with_pieces");
    if (!json_is_string(content)) return http_respond_error(r, 400, "'content' must be a string", "content");
    if (as && !json_is_boolean(as)) return http_respond_error(r, 400, "'add_special' must be a boolean", "add_special");
    if (ps && !json_is_boolean(ps))
        return http_respond_error(r, 400, "'parse_special' must be a boolean", "parse_special");
    if (wp && !json_is_boolean(wp)) return http_respond_error(r, 400, "'with_pieces' must be a boolean", "with_pieces");
    int32_t *ids = NULL;
    size_t n = 0;
    attnd_err err;
    if (tok_encode(tok, json_string_value(content), json_string_length(content), json_is_true(as),
                   !ps || json_is_true(ps), &ids, &n, &err) != ATTND_OK)
        return http_respond_error(r, 400, err.msg, "content");
    char *text = tokens_answer(tok, ids, n, json_is_true(wp));
    free(ids);
    if (!text) return http_respond_error(r, 500, "out of memory", NULL);
    return http_respond_text(r, 200, "application/json", text);
}

http_result ep_tokenize(req *r) { return tok_serve(r, tokenize); }

static http_result detokenize(req *r, json_t *b, const genreq_env *env, const mreg_ref *ref) {
    (void)ref;
    const tokenizer *tok = env->tok;
    int n_vocab = env->n_vocab;
    http_result ret = HTTP_NO;
    json_t *toks = json_object_get(b, "tokens");
    size_t n = json_array_size(toks);
    int32_t *ids = json_is_array(toks) ? malloc((n ? n : 1) * sizeof(int32_t)) : NULL;
    if (!json_is_array(toks)) {
        ret = http_respond_error(r, 400, "'tokens' must be an array of token ids", "tokens");
    } else if (!ids) {
        ret = http_respond_error(r, 500, "out of memory", NULL);
    } else {
        size_t i = 0;
        for (; i < n; i++) {
            json_t *t = json_array_get(toks, i);
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab) break;
            ids[i] = (int32_t)json_integer_value(t);
        }
        char *text = NULL;
        size_t len = 0;
        attnd_err err;
        if (i < n) {
            char msg[128];
            snprintf(msg, sizeof(msg), "tokens[%zu] is not a token id in 0..%d", i, n_vocab - 1);
            ret = http_respond_error(r, 400, msg, "tokens");
        } else if (tok_decode(tok, ids, n, false, &text, &len, &err) != ATTND_OK) {
            ret = http_respond_error(r, 400, err.msg, "tokens");
        } else {
            json_t *o = json_object();
            json_object_set_new(o, "content", oai_string(text, len));
            ret = http_respond_json(r, 200, o);
        }
        free(text);
    }
    free(ids);
    return ret;
}

http_result ep_detokenize(req *r) { return tok_serve(r, detokenize); }

// ---- sessions -----------------------------------------------------------------------------

/* POST /v1/sessions on env's model: b's "id" (may be NULL). */
static http_result session_create(req *r, json_t *b, const genreq_env *env, const mreg_ref *ref) {
    http_result ret = HTTP_NO;
    json_t *id = json_object_get(b, "id");
    char out[SESS_ID_MAX + 1];
    attnd_err err;
    if (id && !json_is_null(id) && !json_is_string(id)) return http_respond_error(r, 400, "'id' must be a string", "id");
    const char *want = json_is_string(id) ? json_string_value(id) : NULL;
    if (want && models_http_session_elsewhere(r, ref, want, &ret)) return ret; /* the id is another model's */
    attnd_status st = sess_create(env->store, r->owner, want, out, &err);
    int code = http_status_of(st, HTTP_CTX_SESSION);
    if (st != ATTND_OK) return http_respond_error(r, code, err.msg, code == 400 || code == 409 ? "id" : NULL);
    int e = 0;
    if (sess_persist(env->store, r->owner, out, &e, &err) != ATTND_OK) { /* removed again */
        slog_error("%s", err.msg);
        char msg[200];
        snprintf(msg, sizeof(msg), "session '%s' could not be saved (%s); retry later", out,
                 e ? strerror(e) : "I/O error");
        return http_respond_error(r, e == ENOSPC || e == EDQUOT ? 507 : 503, msg, NULL);
    }
    json_t *o = sess_info_json(env->store, r->owner, out);
    return o ? http_respond_json(r, 200, o) : http_respond_error(r, 503, "the session store could not be read back; retry later", NULL);
}

/* A server of several: the model named in the body. */
http_result ep_sessions_create(req *r) { return models_http_serve(r, MODELS_BODY_JSON_OR_EMPTY, session_create); }

static http_result sessions_list(req *r, json_t *b, const genreq_env *env, const mreg_ref *ref) {
    (void)b, (void)ref;
    json_t *list = sess_list_json(env->store, r->owner);
    if (!list) return http_respond_error(r, 503, "sessions cannot be listed now (out of memory, or the shared session store is unreachable)", NULL);
    return http_respond_json(r, 200, list);
}

/* A server of several: the model of ?model=. */
http_result ep_sessions_list(req *r) { return models_http_serve(r, MODELS_BODY_NONE, sessions_list); }

static const char *session_id_of(req *r) { return r->path + strlen("/v1/sessions/"); }

static http_result session_get(req *r, json_t *b, const genreq_env *env, const mreg_ref *ref) {
    (void)b;
    const char *id = session_id_of(r);
    sess_info info;
    attnd_err err;
    http_result ret;
    attnd_status st = sess_id_valid(id) ? sess_lookup_info(env->store, r->owner, id, &info, &err)
                                        : attnd_fail(&err, ATTND_ERR_NOT_FOUND, "session '%.64s' not found", id);
    if (st == ATTND_ERR_NOT_FOUND && models_http_session_elsewhere(r, ref, id, &ret)) return ret;
    if (st != ATTND_OK) return http_respond_error(r, http_status_of(st, HTTP_CTX_SESSION), err.msg, NULL);
    return http_respond_json(r, 200, sess_info_to_json(&info));
}

http_result ep_session_get(req *r) { return models_http_serve(r, MODELS_BODY_NONE, session_get); }

static http_result session_delete(req *r, json_t *b, const genreq_env *env, const mreg_ref *ref) {
    (void)b;
    const char *id = session_id_of(r);
    struct kv_seq *kv = NULL;
    attnd_err err;
    int e = 0;
    http_result ret;
    attnd_status st = sess_id_valid(id) ? sess_delete(env->store, r->owner, id, &kv, &e, &err)
                                        : attnd_fail(&err, ATTND_ERR_NOT_FOUND, "session '%.64s' not found", id);
    if (st == ATTND_ERR_IO) { /* the file (or record) stays, and so does the session */
        char msg[200];
        snprintf(msg, sizeof(msg), "session '%.64s' could not be deleted (%.80s); retry later", id,
                 e ? strerror(e) : err.msg);
        return http_respond_error(r, e == ENOSPC || e == EDQUOT ? 507 : 503, msg, NULL);
    }
    if (st == ATTND_ERR_NOT_FOUND && models_http_session_elsewhere(r, ref, id, &ret)) return ret;
    if (st != ATTND_OK) return http_respond_error(r, http_status_of(st, HTTP_CTX_DEFAULT), err.msg, NULL);
    sched_free_kv(env->sch, kv);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "object", json_string("session.deleted"));
    json_object_set_new(o, "deleted", json_true());
    return http_respond_json(r, 200, o);
}

http_result ep_session_delete(req *r) { return models_http_serve(r, MODELS_BODY_NONE, session_delete); }
