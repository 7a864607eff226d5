/*
 * server_rig.h — (tests only) a server without a port, and a recorder transport for its requests:
 * the server is loaded as `attnd serve` loads it (model, stores, scheduler), but the answers of the
 * request layer go to a rig_rec instead of a socket (req_io, http.h). Used by test_server_request.c (Criterion) and
 * stress_server.c (a plain program, for ThreadSanitizer): no Criterion here.
 */
#ifndef ATTND_TESTS_SERVER_RIG_H
#define ATTND_TESTS_SERVER_RIG_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http.h"
#include "server.h"
#include "slog.h"

/* The settings of a rig server over model_path: one engine thread per `threads`, 4 sequences at
 * once, state_dir NULL = no persistence, logging at warnings. */
static inline void rig_settings(server_settings *cfg, const char *model_path, const char *state_dir, int threads) {
    server_settings_default(cfg);
    cfg->model_path = model_path;
    cfg->state_dir = state_dir;
    cfg->threads = threads;
    cfg->max_parallel = 4;
    cfg->max_sessions = 64;
    cfg->log_level = SERVER_LOG_WARN;
    slog_set_level(SERVER_LOG_WARN);
    cfg->host = "127.0.0.1";
    cfg->port = 0;
}

/* A server with cfg, loaded (server_load). bound: it also listens on a free loopback port
 * (server_create, port 0; server_port says which), otherwise it binds none
 * (server_create_unbound). NULL on failure, with the message in err. */
static inline struct server *rig_start(const server_settings *cfg, bool bound, attnd_err *err) {
    struct server *srv;
    if ((bound ? server_create : server_create_unbound)(&srv, cfg, err) != ATTND_OK) return NULL;
    if (server_load(srv, err) != ATTND_OK) {
        server_destroy(srv);
        return NULL;
    }
    return srv;
}

/* A server over model_path (rig_settings, rig_start). session_store: a "redis://..." URL for the
 * shared session store, NULL for none. */
static inline struct server *rig_open_ex(const char *model_path, const char *state_dir, int threads, bool bound,
                                         const char *session_store, attnd_err *err) {
    server_settings cfg;
    rig_settings(&cfg, model_path, state_dir, threads);
    cfg.session_store = session_store;
    return rig_start(&cfg, bound, err);
}

/* rig_open_ex without a port. */
static inline struct server *rig_open(const char *model_path, const char *state_dir, int threads, attnd_err *err) {
    return rig_open_ex(model_path, state_dir, threads, false, NULL, err);
}

// ---- the recorder -------------------------------------------------------------------------

typedef struct rig_rec {
    int status, replies;
    bool streamed, stream_error;
    char *body; /* (len) the answer's bytes, NUL-terminated; the caller frees it */
    size_t len;
    char headers[2048];         /* "Name: value\n" each */
    const char *req_headers[8]; /* name, value pairs of the request */
    bool gone;                  /* the client has left */
} rig_rec;

static inline void rig_append(rig_rec *c, const char *p, size_t n) {
    char *g = realloc(c->body, c->len + n + 1);
    if (!g) abort();
    c->body = g;
    memcpy(c->body + c->len, p, n);
    c->len += n;
    c->body[c->len] = '\0';
}

static inline void rig_headers(rig_rec *c, int status, const http_header *h, int n) {
    c->status = status;
    c->replies++;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(c->headers);
        snprintf(c->headers + l, sizeof(c->headers) - l, "%s: %s\n", h[i].name, h[i].value);
    }
}

static inline http_result rig_reply(req *r, int status, const char *body, size_t len, const http_header *h, int n) {
    rig_rec *c = r->io->user;
    rig_headers(c, status, h, n);
    rig_append(c, body, len);
    return HTTP_YES;
}

/* Drains the stream as libmicrohttpd would, on the request's thread. */
static inline http_result rig_stream(req *r, int status, http_reader reader, void *cls, const http_header *h,
                                         int n) {
    rig_rec *c = r->io->user;
    rig_headers(c, status, h, n);
    c->streamed = true;
    rig_append(c, "", 0);
    char chunk[512];
    for (uint64_t pos = 0;;) {
        ssize_t got = reader(cls, pos, chunk, sizeof(chunk));
        if (got == HTTP_READER_END) break;
        if (got < 0) {
            c->stream_error = true;
            break;
        }
        rig_append(c, chunk, (size_t)got);
        pos += (uint64_t)got;
    }
    return HTTP_YES;
}

static inline const char *rig_header(req *r, const char *name) {
    rig_rec *c = r->io->user;
    for (int i = 0; i < 8 && c->req_headers[i]; i += 2)
        if (!strcasecmp(c->req_headers[i], name)) return c->req_headers[i + 1];
    return NULL;
}

static inline bool rig_gone(req *r) { return ((rig_rec *)r->io->user)->gone; }

/* Runs method url with body (NULL = none) through srv's request layer to its end; the answer is
 * in *c (set its req_headers before). */
static inline void rig_run(struct server *srv, rig_rec *c, const char *method, const char *url, const char *body) {
    req_io io = {rig_reply, rig_stream, rig_header, rig_gone, c};
    req *r = http_req_create(srv, method, url, &io);
    if (!r) abort();
    http_req_run(r, body, body ? strlen(body) : 0);
    http_req_end(r, true);
}

#endif
