/*
 * repl_remote.c — `attnd chat --url http://HOST:PORT`: the turns run on a running `attnd serve`
 * (or any server with OpenAI's chat completions and attnd's sessions).
 *
 * Over http_client.h's minimal HTTP/1.1 client, a turn is
 * POST /v1/chat/completions with "stream": true, read as server-sent events: each chunk's
 * delta.content (and delta.reasoning_content, dimmed) goes to the view, the last one's usage
 * gives the cached tokens. The conversation runs in a session of its own (POST /v1/sessions at
 * start, deleted at /clear and at the end), so the server keeps its KV between turns; without
 * one (a server that refuses it) every turn still works, on the server's prompt cache.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http_client.h"
#include "repl.h"

typedef struct repl_remote {
    repl_backend base;
    const repl_opts *o;   /* borrowed */
    char host[256], port[16];
    char session[128];    /* "" = none */
    char line[400];       /* describe() */
} repl_remote;

/* Opens a request to r's server, with its API key. */
static attnd_status http_open(hclient *c, const repl_remote *r, const char *method, const char *path, const char *body,
                              attnd_err *err) {
    char auth[600] = "";
    if (r->o->api_key) snprintf(auth, sizeof(auth), "Authorization: Bearer %.500s\r\n", r->o->api_key);
    return hclient_request(c, r->host, r->port, method, path, auth, body, err);
}

/* A whole request: the body's JSON into *out (new reference; NULL when it is not JSON). */
static attnd_status http_json(const repl_remote *r, const char *method, const char *path, const char *body, int *status,
                              json_t **out, attnd_err *err) {
    hclient c;
    *out = NULL;
    attnd_status st = http_open(&c, r, method, path, body, err);
    if (st == ATTND_OK) {
        buf all, line;
        buf_init(&all);
        buf_init(&line);
        while (hclient_line(&c, &line)) buf_append(&all, line.p ? line.p : "", line.len), buf_puts(&all, "\n");
        *out = all.p ? json_loads(all.p, 0, NULL) : NULL;
        *status = c.status;
        buf_free(&all);
        buf_free(&line);
    }
    hclient_close(&c);
    return st;
}

/* The error an answer carries ({"error": {"message"}}), or the status alone. */
static attnd_status answer_error(int status, const json_t *j, attnd_err *err) {
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    return attnd_fail(err, status == 404 ? ATTND_ERR_NOT_FOUND : ATTND_ERR_INVALID, "HTTP %d: %s", status,
                      msg ? msg : "(no message)");
}

// ---- sessions -----------------------------------------------------------------------------------

static void session_delete(repl_remote *r) {
    if (!r->session[0]) return;
    char path[200];
    snprintf(path, sizeof(path), "/v1/sessions/%s", r->session);
    int status;
    json_t *j = NULL;
    attnd_err err;
    http_json(r, "DELETE", path, NULL, &status, &j, &err);
    json_decref(j);
    r->session[0] = '\0';
}

/* A new session for the conversation; without one (an error, said once) turns run without. */
static void session_create(repl_remote *r) {
    int status = 0;
    json_t *j = NULL;
    attnd_err err;
    attnd_status st = http_json(r, "POST", "/v1/sessions", "{}", &status, &j, &err);
    const char *id = json_string_value(json_object_get(j, "id"));
    if (st == ATTND_OK && status / 100 == 2 && id && strlen(id) < sizeof(r->session)) {
        snprintf(r->session, sizeof(r->session), "%s", id);
    } else {
        if (st == ATTND_OK) answer_error(status, j, &err);
        fprintf(stderr, "attnd chat: no session on the server (%s); each turn relies on its prompt cache\n", err.msg);
    }
    json_decref(j);
}

// ---- a turn -------------------------------------------------------------------------------------

/* The request body: the conversation, streamed with usage, and the flags that differ from the
 * server's defaults. */
static char *turn_body(const repl_remote *r, const json_t *messages) {
    json_t *b = json_pack("{s:O, s:b, s:{s:b}}", "messages", messages, "stream", 1, "stream_options", "include_usage", 1);
    if (!b) return NULL;
    if (r->session[0]) json_object_set_new(b, "session_id", json_string(r->session));
    if (r->o->n_predict > 0) json_object_set_new(b, "max_tokens", json_integer(r->o->n_predict));
    sampler_params d, p = r->o->sampling.params;
    sampler_params_default(&d);
    if (p.temperature != d.temperature) json_object_set_new(b, "temperature", json_real(p.temperature));
    if (p.top_k != d.top_k) json_object_set_new(b, "top_k", json_integer(p.top_k));
    if (p.top_p != d.top_p) json_object_set_new(b, "top_p", json_real(p.top_p));
    if (p.min_p != d.min_p) json_object_set_new(b, "min_p", json_real(p.min_p));
    if (p.repeat_penalty != d.repeat_penalty) json_object_set_new(b, "repeat_penalty", json_real(p.repeat_penalty));
    if (p.seed != d.seed) json_object_set_new(b, "seed", json_integer((json_int_t)p.seed));
    json_t *stops = json_array();
    for (int i = 0; i < r->o->sampling.n_stops; i++) json_array_append_new(stops, json_string(r->o->sampling.stops[i]));
    if (json_array_size(stops)) json_object_set_new(b, "stop", stops);
    else json_decref(stops);
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}

/* One server-sent event's data: text to the view, usage and finish_reason to st. False: the
 * stream ended ([DONE]) or carried an error (in err, *failed set). */
static bool on_event(const char *data, repl_view *v, repl_stats *st, bool *failed, attnd_err *err) {
    if (!strcmp(data, "[DONE]")) return false;
    json_t *j = json_loads(data, 0, NULL), *e = json_object_get(j, "error");
    if (e) {
        const char *msg = json_string_value(json_object_get(e, "message"));
        attnd_fail(err, ATTND_ERR_IO, "the server ended the reply: %s", msg ? msg : "(no message)");
        *failed = true;
        json_decref(j);
        return false;
    }
    json_t *c = json_array_get(json_object_get(j, "choices"), 0), *d = json_object_get(c, "delta");
    const char *rs = json_string_value(json_object_get(d, "reasoning_content"));
    const char *cs = json_string_value(json_object_get(d, "content"));
    const char *fin = json_string_value(json_object_get(c, "finish_reason"));
    if (rs && *rs) repl_view_reasoning(v, rs, strlen(rs));
    if (cs && *cs) repl_view_text(v, cs, strlen(cs));
    if (fin) st->finish = !strcmp(fin, "length") ? "length" : "stop";
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        st->prompt_tokens = (int)json_integer_value(json_object_get(u, "prompt_tokens"));
        st->completion_tokens = (int)json_integer_value(json_object_get(u, "completion_tokens"));
        st->cached_tokens =
            (int)json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    }
    json_decref(j);
    return true;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A refused turn: its error, and whether it was the context that did not hold the conversation. */
static attnd_status refused(hclient *c, repl_stats *st, attnd_err *err) {
    buf all, line;
    buf_init(&all);
    buf_init(&line);
    while (hclient_line(c, &line)) buf_append(&all, line.p ? line.p : "", line.len);
    json_t *j = all.p ? json_loads(all.p, 0, NULL) : NULL;
    const char *code = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    st->too_long = code && !strcmp(code, "context_length_exceeded");
    attnd_status rc = answer_error(c->status, j, err);
    json_decref(j);
    buf_free(&all);
    buf_free(&line);
    return rc;
}

static attnd_status remote_turn(repl_backend *b, const json_t *messages, repl_view *v, repl_stats *st,
                                attnd_err *err) {
    repl_remote *r = (repl_remote *)b;
    double t0 = now_ms();
    *st = (repl_stats){.finish = "stop"};
    char *body = turn_body(r, messages);
    if (!body) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    hclient c;
    attnd_status rc = http_open(&c, r, "POST", "/v1/chat/completions", body, err);
    free(body);
    if (rc == ATTND_OK && c.status != 200) rc = refused(&c, st, err);
    if (rc == ATTND_OK) {
        buf line;
        buf_init(&line);
        bool failed = false;
        repl_view_begin(v, false);
        while (!repl_interrupted() && hclient_line(&c, &line))
            if (line.p && !strncmp(line.p, "data:", 5) && !on_event(line.p + 5 + (line.p[5] == ' '), v, st, &failed, err))
                break;
        repl_view_end(v);
        if (repl_interrupted()) st->finish = "interrupted";
        if (failed) rc = ATTND_ERR_IO;
        buf_free(&line);
    }
    hclient_close(&c);
    st->ms = now_ms() - t0;
    return rc;
}

static void remote_forget(repl_backend *b) {
    repl_remote *r = (repl_remote *)b;
    session_delete(r);
    session_create(r);
}

static const char *remote_describe(repl_backend *b) { return ((repl_remote *)b)->line; }

static void remote_destroy(repl_backend *b) {
    if (!b) return;
    session_delete((repl_remote *)b);
    free(b);
}

/* "http://HOST[:PORT][/]" into r->host and r->port (80 by default; [v6] in brackets). */
static attnd_status parse_url(repl_remote *r, const char *url, attnd_err *err) {
    if (strncmp(url, "http://", 7) != 0)
        return attnd_fail(err, ATTND_ERR_INVALID, "--url: '%s' is not http://HOST:PORT (no TLS here: use a local "
                                                  "port or an SSH tunnel)", url);
    const char *h = url + 7, *end = h + strcspn(h, "/"), *colon;
    if (*end && strcmp(end, "/") != 0) return attnd_fail(err, ATTND_ERR_INVALID, "--url: give the server, no path ('%s')", end);
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (!rb) return attnd_fail(err, ATTND_ERR_INVALID, "--url: unclosed '[' in '%s'", url);
        snprintf(r->host, sizeof(r->host), "%.*s", (int)(rb - h - 1), h + 1);
        colon = rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
        snprintf(r->host, sizeof(r->host), "%.*s", (int)((colon ? colon : end) - h), h);
    }
    snprintf(r->port, sizeof(r->port), "%.*s", colon ? (int)(end - colon - 1) : 2, colon ? colon + 1 : "80");
    if (!r->host[0] || !r->port[0] || strspn(r->port, "0123456789") != strlen(r->port))
        return attnd_fail(err, ATTND_ERR_INVALID, "--url: '%s' is not http://HOST:PORT", url);
    return ATTND_OK;
}

attnd_status repl_remote_open(repl_backend **out, const repl_opts *o, attnd_err *err) {
    *out = NULL;
    repl_remote *r = calloc(1, sizeof(*r));
    if (!r) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    r->base = (repl_backend){remote_turn, remote_forget, remote_describe, remote_destroy};
    r->o = o;
    attnd_status st = parse_url(r, o->url, err);
    int status = 0;
    json_t *j = NULL;
    if (st == ATTND_OK) st = http_json(r, "GET", "/v1/models", NULL, &status, &j, err);
    if (st == ATTND_OK && status != 200) st = answer_error(status, j, err);
    if (st != ATTND_OK) {
        json_decref(j);
        free(r);
        return st;
    }
    const char *id = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
    snprintf(r->line, sizeof(r->line), "%s on %s", id ? id : "a model", o->url);
    json_decref(j);
    session_create(r);
    *out = &r->base;
    return ATTND_OK;
}
