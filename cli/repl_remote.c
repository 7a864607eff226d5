/*
 * repl_remote.c — `attnd chat --url http://HOST:PORT`: the turns run on a running `attnd serve`
 * (or any server with OpenAI's chat completions and attnd's sessions).
 *
 * A minimal HTTP/1.1 client over one socket per request ("Connection: close"), no TLS: enough for
 * a server on this machine or behind an SSH tunnel, and no new dependency. A response body may be
 * chunked, sized by Content-Length, or run to the connection's end. A turn is
 * POST /v1/chat/completions with "stream": true, read as server-sent events: each chunk's
 * delta.content (and delta.reasoning_content, dimmed) goes to the view, the last one's usage
 * gives the cached tokens. The conversation runs in a session of its own (POST /v1/sessions at
 * start, deleted at /clear and at the end), so the server keeps its KV between turns; without
 * one (a server that refuses it) every turn still works, on the server's prompt cache.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "repl.h"

typedef struct repl_remote {
    repl_backend base;
    const repl_opts *o;   /* borrowed */
    char host[256], port[16];
    char session[128];    /* "" = none */
    char line[400];       /* describe() */
} repl_remote;

// ---- HTTP/1.1 over a socket ---------------------------------------------------------------------

typedef struct hconn {
    int fd;
    char buf[8192];
    size_t pos, len;
    int status;
    bool chunked;
    long long left;       /* bytes left in the body (Content-Length) or the chunk; -1 = to the end */
    bool done;
} hconn;

/* One byte of the raw stream; -1 at the end, on an error or on Ctrl-C. */
static int raw_byte(hconn *c) {
    if (c->pos == c->len) {
        ssize_t k = recv(c->fd, c->buf, sizeof(c->buf), 0);
        if (k <= 0) return -1;
        c->pos = 0, c->len = (size_t)k;
    }
    return (unsigned char)c->buf[c->pos++];
}

/* A line of the raw stream without its CR LF into line (cut at cap - 1); false at the end. */
static bool raw_line(hconn *c, char *line, size_t cap) {
    size_t n = 0;
    int ch;
    while ((ch = raw_byte(c)) >= 0 && ch != '\n')
        if (n + 1 < cap) line[n++] = (char)ch;
    if (n && line[n - 1] == '\r') n--;
    line[n] = '\0';
    return ch >= 0 || n > 0;
}

/* One byte of the body, chunks undone; -1 at its end. */
static int body_byte(hconn *c) {
    if (c->done) return -1;
    if (c->chunked && c->left == 0) {
        char line[64];
        if (!raw_line(c, line, sizeof(line))) return c->done = true, -1;
        if (!line[0] && !raw_line(c, line, sizeof(line))) return c->done = true, -1; /* the CR LF after a chunk */
        c->left = strtoll(line, NULL, 16);
        if (c->left <= 0) return c->done = true, -1;
    }
    if (c->left == 0) return c->done = true, -1;
    int ch = raw_byte(c);
    if (ch < 0) return c->done = true, -1;
    if (c->left > 0) c->left--;
    return ch;
}

/* A body line without its line end into b; false at the body's end with nothing read. */
static bool body_line(hconn *c, buf *b) {
    buf_clear(b);
    int ch;
    bool any = false;
    while ((ch = body_byte(c)) >= 0 && ch != '\n') {
        any = true;
        if (ch != '\r') buf_append(b, &(char){(char)ch}, 1);
    }
    return ch >= 0 || any;
}

static int dial(const repl_remote *r, attnd_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int e = getaddrinfo(r->host, r->port, &hints, &res);
    if (e) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", r->host, gai_strerror(e)), -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) close(fd), fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) attnd_fail(err, ATTND_ERR_IO, "cannot connect to %s:%s: %s", r->host, r->port, strerror(errno));
    return fd;
}

/* Sends the request and reads the status line and headers; the body is left to body_line. */
static attnd_status http_open(hconn *c, const repl_remote *r, const char *method, const char *path, const char *body,
                              attnd_err *err) {
    *c = (hconn){.fd = dial(r, err), .left = -1};
    if (c->fd < 0) return ATTND_ERR_IO;
    buf req;
    buf_init(&req);
    size_t n_body = body ? strlen(body) : 0;
    buf_printf(&req, "%s %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\nAccept: application/json, "
                     "text/event-stream\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n",
               method, path, r->host, r->port, n_body);
    if (r->o->api_key) buf_printf(&req, "Authorization: Bearer %s\r\n", r->o->api_key);
    buf_puts(&req, "\r\n");
    if (body) buf_append(&req, body, n_body);
    bool sent = req.p && send(c->fd, req.p, req.len, MSG_NOSIGNAL) == (ssize_t)req.len;
    buf_free(&req);
    char line[1024];
    if (!sent || !raw_line(c, line, sizeof(line)) || sscanf(line, "HTTP/%*s %d", &c->status) != 1)
        return attnd_fail(err, ATTND_ERR_IO, "%s:%s did not answer HTTP", r->host, r->port);
    while (raw_line(c, line, sizeof(line)) && line[0]) {
        if (!strncasecmp(line, "transfer-encoding:", 18) && strcasestr(line + 18, "chunked")) c->chunked = true, c->left = 0;
        if (!strncasecmp(line, "content-length:", 15) && !c->chunked) c->left = strtoll(line + 15, NULL, 10);
    }
    return ATTND_OK;
}

static void http_close(hconn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

/* A whole request: the body's JSON into *out (new reference; NULL when it is not JSON). */
static attnd_status http_json(const repl_remote *r, const char *method, const char *path, const char *body, int *status,
                              json_t **out, attnd_err *err) {
    hconn c;
    *out = NULL;
    attnd_status st = http_open(&c, r, method, path, body, err);
    if (st == ATTND_OK) {
        buf all, line;
        buf_init(&all);
        buf_init(&line);
        while (body_line(&c, &line)) buf_append(&all, line.p ? line.p : "", line.len), buf_puts(&all, "\n");
        *out = all.p ? json_loads(all.p, 0, NULL) : NULL;
        *status = c.status;
        buf_free(&all);
        buf_free(&line);
    }
    http_close(&c);
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
static attnd_status refused(hconn *c, repl_stats *st, attnd_err *err) {
    buf all, line;
    buf_init(&all);
    buf_init(&line);
    while (body_line(c, &line)) buf_append(&all, line.p ? line.p : "", line.len);
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
    hconn c;
    attnd_status rc = http_open(&c, r, "POST", "/v1/chat/completions", body, err);
    free(body);
    if (rc == ATTND_OK && c.status != 200) rc = refused(&c, st, err);
    if (rc == ATTND_OK) {
        buf line;
        buf_init(&line);
        bool failed = false;
        repl_view_begin(v, false);
        while (!repl_interrupted() && body_line(&c, &line))
            if (line.p && !strncmp(line.p, "data:", 5) && !on_event(line.p + 5 + (line.p[5] == ' '), v, st, &failed, err))
                break;
        repl_view_end(v);
        if (repl_interrupted()) st->finish = "interrupted";
        if (failed) rc = ATTND_ERR_IO;
        buf_free(&line);
    }
    http_close(&c);
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
