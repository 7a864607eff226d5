/*
 * sess_fork.c — POST /v1/sessions/{id}/fork: a new named session whose history is the first
 * `at` tokens of another's (default all of it), for branching a conversation. Its KV starts as a
 * fork of the source's (kv_seq_fork: the blocks are shared, copy-on-write), made on the
 * scheduler thread, which is the only one that evicts or evaluates KV; without KV (evicted) the
 * fork holds the history alone and its first turn rebuilds it. The new session is an ordinary
 * one of the same owner: durable as any (written before the answer), deleted on its own.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "attnd/kv.h"
#include "endpoints.h"
#include "models_http.h"
#include "scheduler.h"
#include "sess_json.h"

/* The {id} of /v1/sessions/{id}/fork, into id. */
static void fork_source(const req *r, char id[SESS_ID_MAX + 2]) {
    const char *p = r->path + strlen("/v1/sessions/");
    size_t n = strcspn(p, "/");
    snprintf(id, SESS_ID_MAX + 2, "%.*s", (int)(n > SESS_ID_MAX + 1 ? SESS_ID_MAX + 1 : n), p);
}

typedef struct fork_task {
    sess_store *store;
    sess *src, *dst;
    int n;
} fork_task;

/* On the scheduler thread: dst's KV = the source's first n positions, shared. Out of KV
 * memory leaves dst without KV (its history is enough). */
static attnd_status fork_kv(void *user, sched_task_turn *turn, attnd_err *err) {
    fork_task *t = user;
    if (turn->plan || turn->stop) return ATTND_OK;
    int keep = t->n < t->src->kv_len ? t->n : t->src->kv_len;
    kv_seq *child = NULL;
    if (!t->src->kv || keep <= 0 || kv_seq_fork(&child, t->src->kv, err) != ATTND_OK) return ATTND_OK;
    kv_seq_truncate(child, keep);
    sess_set_kv(t->store, t->dst, child, kv_seq_len(child), kv_seq_bytes(child));
    return ATTND_OK;
}

/* The body's "id" (new session's, may be NULL) and "at" (history kept; -1 = all). false: 400. */
static bool fork_fields(req *r, const json_t *b, const char **want, int *at, http_result *ret) {
    const json_t *id = b ? json_object_get(b, "id") : NULL, *a = b ? json_object_get(b, "at") : NULL;
    *want = json_is_string(id) ? json_string_value(id) : NULL;
    *at = -1;
    if (id && !json_is_null(id) && !json_is_string(id)) {
        *ret = http_respond_error(r, 400, "'id' must be a string", "id");
        return false;
    }
    if (a && !json_is_null(a)) {
        if (!json_is_integer(a) || json_integer_value(a) < 0 || json_integer_value(a) > 1 << 30) {
            *ret = http_respond_error(r, 400, "'at' must be a number of history tokens (0 or more)", "at");
            return false;
        }
        *at = (int)json_integer_value(a);
    }
    return true;
}

/* Makes the fork of the acquired src as out (history src->tokens[0..n)) on env's model, and saves it. */
static http_result make_fork(req *r, const genreq_env *env, sess *src, const char *want, int n) {
    char out[SESS_ID_MAX + 1];
    attnd_err err;
    sess *dst = NULL;
    attnd_status st = sess_create(env->store, r->owner, want, out, &err);
    if (st == ATTND_OK) st = sess_acquire(env->store, r->owner, out, &dst, &err);
    if (st != ATTND_OK) {
        int code = http_status_of(st, HTTP_CTX_SESSION);
        return http_respond_error(r, code, err.msg, code == 400 || code == 409 ? "id" : NULL);
    }
    attnd_err kerr;
    char tenant[SCHED_TENANT_MAX + 1];
    http_tenant(r, tenant, sizeof(tenant));
    (void)sched_run_task(env->sch, &(sched_task_spec){fork_kv, &(fork_task){env->store, src, dst, n}, tenant}, &kerr);
    if ((st = sess_release(env->store, dst, src->tokens, n, &err)) != ATTND_OK) { /* out of memory: no half fork */
        struct kv_seq *kv = NULL;
        attnd_err derr;
        int de = 0;
        if (sess_delete(env->store, r->owner, out, &kv, &de, &derr) == ATTND_OK) sched_free_kv(env->sch, kv);
        return http_respond_error(r, 503, err.msg, NULL);
    }
    int e = 0;
    if (sess_persist(env->store, r->owner, out, &e, &err) != ATTND_OK) { /* removed again */
        char msg[200];
        snprintf(msg, sizeof(msg), "session '%s' could not be saved (%s); retry later", out, e ? strerror(e) : "I/O error");
        return http_respond_error(r, e == ENOSPC || e == EDQUOT ? 507 : 503, msg, NULL);
    }
    json_t *o = sess_info_json(env->store, r->owner, out);
    if (!o) return http_respond_error(r, 503, "the session store could not be read back; retry later", NULL);
    json_object_set_new(o, "forked_from", json_string(src->id));
    json_object_set_new(o, "at", json_integer(n));
    return http_respond_json(r, 200, o);
}

/* The fork on env's model (a server of several: the one the body names). */
static http_result fork_on(req *r, json_t *b, const genreq_env *env, const mreg_ref *ref) {
    http_result ret = HTTP_NO;
    char id[SESS_ID_MAX + 2];
    fork_source(r, id);
    const char *want;
    int at;
    sess *src = NULL;
    attnd_err err;
    if (!fork_fields(r, b, &want, &at, &ret)) return ret;
    /* the new id must not be another model's session, nor the source */
    if (want && models_http_session_elsewhere(r, ref, want, &ret)) return ret;
    /* a fork counts against the key's sessions (sess_create checks again under its lock) */
    attnd_status st = sess_quota_check(env->store, r->owner, &err);
    if (st == ATTND_OK)
        st = sess_id_valid(id) ? sess_acquire(env->store, r->owner, id, &src, &err)
                               : attnd_fail(&err, ATTND_ERR_NOT_FOUND, "session '%.64s' not found", id);
    if (st == ATTND_ERR_NOT_FOUND && models_http_session_elsewhere(r, ref, id, &ret)) return ret;
    if (st != ATTND_OK) return http_respond_error(r, http_status_of(st, HTTP_CTX_SESSION), err.msg, NULL);
    if (at > src->n_tokens) {
        char msg[160];
        snprintf(msg, sizeof(msg), "'at' is %d; session '%s' holds %d tokens", at, id, src->n_tokens);
        ret = http_respond_error(r, 400, msg, "at");
    } else {
        ret = make_fork(r, env, src, want, at < 0 ? src->n_tokens : at);
    }
    sess_abandon(env->store, src); /* the source's history is unchanged */
    return ret;
}

/* A server of several: the model named in the body. */
http_result ep_session_fork(req *r) { return models_http_serve(r, MODELS_BODY_JSON_OR_EMPTY, fork_on); }
