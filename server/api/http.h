/*
 * http.h — the HTTP layer of `attnd serve` (server-private): the server's shared state, the
 * per-request state, responses (JSON, text, errors with CORS headers), auth, body caps and the
 * dispatch through the route table (routes.c) to the endpoints (endpoints.h).
 *
 * libmicrohttpd runs one thread per connection. Per-request state (req) is allocated on the
 * first access-handler call (http_on_request) and freed only in the completed callback
 * (http_on_completed), which also writes the access log line and counts the request in
 * /metrics. Everything before routing (auth, CORS, body cap) is common to every route.
 *
 * The modules serving a request keep their own state in its slots (req_set: opaque, with a
 * destructor and an end hook, as nginx's per-module context): the generation request
 * (genreq_http.h), the stream loop, the endpoint. This file never sees their fields. Everything
 * that touches the connection goes through this file (http_reply*, http_header_get,
 * http_client_gone, http_idle_timeout), so with a req_io in place of the connection the whole
 * request layer runs without a socket (http_req_create/run/end). Nothing here needs
 * libmicrohttpd's header: handlers return http_result, and only http.c, conn.c and server.c
 * (through http_mhd.h) see <microhttpd.h>.
 */
#ifndef ATTND_SERVER_HTTP_H
#define ATTND_SERVER_HTTP_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "attnd/buf.h"
#include "attnd/common.h"
#include "chat.h"     /* chat_template, held by value */
#include "cpushare.h" /* cpushare, held by value */
#include "sess.h"     /* SESS_OWNER_MAX */
#include "settings.h" /* server_settings, held by value */
#include "slog.h"     /* SLOG_REQUEST_ID_MAX */

/* What the server points to, declared where it is defined (the transport's in microhttpd.h). */
struct MHD_Connection;
struct MHD_Daemon;
typedef struct conn_tracker conn_tracker;
typedef struct metrics metrics;
typedef struct model model;
typedef struct tokenizer tokenizer;
typedef struct sess_store sess_store;
typedef struct rstore rstore;
typedef struct sched sched;
typedef struct mreg mreg;

/* What a handler or a transport call returns: HTTP_YES = answered (or read on), HTTP_NO = close
 * the connection (libmicrohttpd's MHD_YES / MHD_NO, which http.c passes on). */
typedef enum http_result { HTTP_NO = 0, HTTP_YES = 1 } http_result;

/* What a stream reader returns at its end (libmicrohttpd's MHD_CONTENT_READER_END_*). */
#define HTTP_READER_END ((ssize_t)-1)
#define HTTP_READER_ERROR ((ssize_t)-2)

typedef struct req req;

/* What a route needs or allows. */
enum {
    ROUTE_PREFIX = 1, /* path is a prefix ending in '/': one more path segment follows */
    ROUTE_MODEL = 2,  /* needs the model: 503 while loading */
    ROUTE_OPEN = 4,   /* answered without an API key (/health; the playground holds no data) */
    ROUTE_SEGMENT = 8, /* path holds "{id}": exactly one path segment stands there */
    ROUTE_ANTHROPIC = 16, /* errors in Anthropic's shape (anthropic.h) */
    ROUTE_OLLAMA = 32,    /* errors in Ollama's shape: {"error": "..."} */
    /* 64 was ROUTE_MULTI: every route serves a server of several models now (models_http.h) */
    ROUTE_GENERATE = 128, /* needs a model that generates text (MODEL_ROLE_GENERATE) */
    ROUTE_EMBED = 256,    /* needs one that embeds (MODEL_ROLE_EMBED: the file's, or --embeddings) */
    ROUTE_RANK = 512,     /* needs one that ranks (MODEL_ROLE_RANK: a classification head) */
};

/* One endpoint (routes.c holds them all). */
typedef struct route {
    const char *method;
    const char *path;
    http_result (*fn)(req *r); /* answers through http_respond_* (endpoints.h) */
    const char *label; /* metrics label */
    int flags;         /* ROUTE_* */
} route;

/* The server's state as the request handlers see it (lifecycle in server.c). */
struct server {
    server_settings cfg;      /* its string settings are owned copies (server.c) */
    bool loopback;            /* bound to a loopback address: Host names are checked (origin.h) */
    struct MHD_Daemon *d;
    conn_tracker *conns;      /* header deadline and the 503 at max_connections (conn.h) */
    int port;
    metrics *met;
    const route *routes;      /* (n_routes) the endpoints (routes.c), borrowed */
    size_t n_routes;
    // ---- set by server_load, read-only afterwards ----
    model *m;
    tokenizer *tok;
    sess_store *store;
    rstore *responses;        /* stored /v1/responses (state_dir, like the sessions) */
    sched *sch;
    chat_template chat;       /* the chat template and where it came from (chat.h) */
    char *model_id;
    int n_ctx, n_vocab;
    pthread_t keepalive;      /* several models: systemd's watchdog while no scheduler runs */
    bool has_keepalive;
    cpushare cpu_share;       /* several models: the threads they share (cpushare.h) */
    mreg *models;             /* several models (models_dir, presets): the registry, and the fields
                                 above stay NULL; NULL = one model (models_http.h) */
    atomic_bool ready;
    atomic_bool stopping;
    atomic_int in_flight;     /* requests between their first callback and completion */
    atomic_int tok_active;    /* /tokenize and /detokenize requests running (tokenize_parallel) */
    atomic_int attn_active;   /* /v1/attention requests running (attention_parallel) */
    _Atomic(char *) heads_json; /* GET /v1/heads' answer once computed (the model never changes) */
    bool shut_down;
};


/* One response header. */
typedef struct http_header {
    const char *name, *value;
} http_header;

/* libmicrohttpd's content reader: the next bytes of a streamed body at out (at most max). */
typedef ssize_t (*http_reader)(void *cls, uint64_t pos, char *out, size_t max);

/*
 * Where a request's answer goes when it has no libmicrohttpd connection: the tests' recorder
 * (tests/test_server_request.c), so the request layer runs without a socket. NULL (the server)
 * = the request's MHD connection. Every function is called on the request's thread.
 */
typedef struct req_io {
    /* A whole answer: len bytes of body (borrowed for the call), n headers. */
    http_result (*reply)(req *r, int status, const char *body, size_t len, const http_header *h, int n);
    /* A streamed answer: read it with reader(cls, ...) until HTTP_READER_END (or HTTP_READER_ERROR). */
    http_result (*stream)(req *r, int status, http_reader reader, void *cls, const http_header *h, int n);
    const char *(*header)(req *r, const char *name); /* a request header, NULL when absent */
    bool (*client_gone)(req *r);
    void *user;
} req_io;

/* The per-request state of the modules serving a request, opaque to http.c (as nginx's
 * per-module ctx): each slot holds one module's state and the destructor the completed callback
 * runs on it. */
typedef enum req_slot {
    REQ_SLOT_GENREQ,   /* the generation request's (genreq_http.h); freed first */
    REQ_SLOT_STREAM,   /* the stream loop's (sse.c) */
    REQ_SLOT_ENDPOINT, /* the endpoint's: its stream writer's or its turn's state */
    REQ_SLOT_COUNT,
} req_slot;

typedef struct req_ctx {
    void *p;                /* owned through free_fn */
    void (*free_fn)(void *p);
    /* NULL, or run when the request ends, before the access log (completed: its answer went out
     * whole); it may set the log's fields of r (n_prompt, n_gen, answer_id, cancelled) */
    void (*end)(req *r, void *p, bool completed);
} req_ctx;

/* One request, from its first callback to its completion. */
struct req {
    struct server *srv;
    const route *rt;
    struct MHD_Connection *conn;  /* NULL with io */
    const req_io *io;        /* NULL = answer through conn (borrowed) */
    char method[16];
    char path[160];
    char query[160];         /* without a connection (io): the url's query, as key NUL value NUL pairs */
    size_t query_len;
    double t0;
    buf body;                /* the request body (NUL-terminated once any arrived); owned */
    bool too_big;
    size_t dropped;          /* body bytes read past the limit (answered 413 when it ends) */
    int status;              /* response status (for the access log and metrics) */
    char owner[SESS_OWNER_MAX + 1]; /* the API key's owner tag ("" = one key or none; sess.h) */
    char reason[160];        /* why the request was refused (error responses), for the log */
    char request_id[SLOG_REQUEST_ID_MAX + 1]; /* X-Request-Id: the client's, or one made here */
    char warning[256];       /* a Warning header for the answer ("" = none): the body's unknown fields */
    // ---- the access log's, set by the slots' end hooks ----
    bool cancelled;          /* client went away mid-request */
    int n_prompt, n_gen;     /* prompt tokens read, tokens generated */
    char answer_id[48];      /* the answer's id ("chatcmpl-...", "resp_..."); "" = none */
    req_ctx ctx[REQ_SLOT_COUNT]; /* ended, then freed in the completed callback, in slot order */
};

/* Slot s's state (NULL when none was set). */
static inline void *req_get(const req *r, req_slot s) { return r->ctx[s].p; }
/* Gives p (owned from now on; NULL allowed) to slot s with its destructor (NULL = free()).
 * ATTND_ASSERTs that the slot is empty: one owner per slot. */
void req_set(req *r, req_slot s, void *p, void (*free_fn)(void *p));
/* Sets slot s's end hook (req_ctx.end). */
void req_set_end(req *r, req_slot s, void (*end)(req *r, void *p, bool completed));

/* A whole answer of len bytes (body stolen when owned, else static) with n headers, through the
 * connection (CORS headers added) or r->io. */
http_result http_reply(req *r, int status, char *body, size_t len, bool owned, const http_header *h, int n);
/* A streamed answer read from reader(cls) with n headers. */
http_result http_reply_stream(req *r, int status, http_reader reader, void *cls, const http_header *h, int n);
/* A request header (NULL when absent). */
const char *http_header_get(req *r, const char *name);
/* The value of the url's query parameter name (GET /props?model=NAME), NULL when absent:
 * libmicrohttpd's (percent-decoded), or read from the url given with a req_io. Borrowed for the
 * request's life. */
const char *http_query_get(req *r, const char *name);
/* Sets the connection's idle timeout in seconds (0 = none); nothing without a connection. */
void http_idle_timeout(req *r, unsigned seconds);

/* Queues body (stolen) as a JSON response, with one extra header when hname is non-NULL. */
http_result http_respond_json_h(req *r, int status, json_t *body, const char *hname, const char *hval);
http_result http_respond_json(req *r, int status, json_t *body);
/* An OpenAI-shaped error body; 429/503 add Retry-After, 401 WWW-Authenticate. */
http_result http_respond_error(req *r, int status, const char *msg, const char *param);
http_result http_respond_text(req *r, int status, const char *ctype, char *text /* stolen */);

/* The HTTP status for a module's failure status, in the context it happened. */
typedef enum http_ctx {
    HTTP_CTX_DEFAULT,    /* invalid/format 400, not found 404, busy 409, out of memory 503 */
    HTTP_CTX_SESSION,    /* creating or deleting a session: out of memory (too many sessions) is
                            429, the shared session store unreachable 503 */
    HTTP_CTX_ACQUIRE,    /* using a session: not found 404, store unreachable or out of memory
                            503, anything else 409 (in use) */
    HTTP_CTX_GENERATE,   /* a generation that failed: out of memory / busy 503, else 500 */
    HTTP_CTX_PARSE,      /* validating a request body: invalid 400, else 500 */
} http_ctx;
int http_status_of(attnd_status st, http_ctx ctx);

/* Parses the body as a JSON object (new reference); on failure queues the 400 and returns NULL
 * with *ret set. allow_empty: an empty body reads as {}. */
json_t *http_parse_body(req *r, http_result *ret, bool allow_empty);

/* The body of a request that will start work (generation, attention): 503 while shutting down,
 * else http_parse_body (a new reference). */
json_t *http_work_body(req *r, http_result *ret);

/* What a model does (attnd/embed.h's MODEL_ROLE_* bits): the file's roles, plus embedding for
 * a generation model when cfg's embeddings setting is on; 0 when m is NULL (not loaded). */
unsigned http_model_roles(const model *m, const server_settings *cfg);
/* When r's route needs a role (ROUTE_GENERATE, _EMBED, _RANK) that roles lack: queues the 400
 * that names what the model `name` serves, sets *ret and returns true. */
bool http_role_refused(req *r, unsigned roles, const char *name, http_result *ret);
/* Who asked, for the scheduler's fair admission: "key:<owner>" with several API keys, else
 * "addr:<client address>" (into buf, SCHED_TENANT_MAX + 1 bytes). */
void http_tenant(const req *r, char *buf, size_t cap);

/* True when r may administer the server (POST /models/load, /models/unload): no API keys are
 * configured, or it carries admin_api_key. */
bool http_is_admin(req *r);

/* True when the peer closed its side (checked without blocking). */
bool http_client_gone(req *r);

/* The request layer without libmicrohttpd (the tests): a request of method on url answered
 * through io (borrowed), run with body (len bytes) as the server runs one: the checks before the
 * body, the body, the route's handler. End it with http_req_end. NULL when out of memory. */
req *http_req_create(struct server *s, const char *method, const char *url, const req_io *io);
http_result http_req_run(req *r, const char *body, size_t len);
/* The completed callback's work: the slots' end hooks (completed: the answer went out whole),
 * metrics, the access log, freeing r. */
void http_req_end(req *r, bool completed);

#endif
