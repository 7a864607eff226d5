/*
 * http.c — requests, responses, auth, CORS, body caps and routing for `attnd serve` (see
 * http.h). The endpoints live in endpoints.c, completions.c, responses_http.c and attention.c.
 */
#define _GNU_SOURCE /* POLLRDHUP: the peer closed its side */
#include "http.h"

#include "api_fields.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/embed.h"
#include "anthropic.h"
#include "conn.h"
#include "http_mhd.h"
#include "metrics.h"
#include "oai.h"
#include "origin.h"
#include "slog.h"

/* http.h's results and reader ends are libmicrohttpd's, passed on as they are */
_Static_assert(HTTP_YES == (int)MHD_YES && HTTP_NO == (int)MHD_NO, "http_result is MHD_Result");
_Static_assert(HTTP_READER_END == MHD_CONTENT_READER_END_OF_STREAM &&
                   HTTP_READER_ERROR == MHD_CONTENT_READER_END_WITH_ERROR,
               "the stream reader's ends are MHD's");

// ---- responses ----------------------------------------------------------------------------

const char *http_header_get(req *r, const char *name) {
    if (r->io) return r->io->header(r, name);
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

static void add_cors_headers(req *r, struct MHD_Response *resp) {
    const char *origin = http_header_get(r, "Origin");
    const char *allowed = r->srv->cfg.cors_origins;
    if (!origin || !allowed || !*allowed || !origin_list_has(allowed, origin, strlen(origin), true)) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(resp, "Vary", "Origin");
}

/* Queues resp (stolen: queue -> destroy -> return) with its headers and the CORS headers. A NULL
 * resp (its creation failed) is HTTP_NO. */
static http_result send_mhd(req *r, int status, struct MHD_Response *resp, const http_header *h, int n) {
    if (!resp) return HTTP_NO;
    for (int i = 0; i < n; i++) MHD_add_response_header(resp, h[i].name, h[i].value);
    add_cors_headers(r, resp);
    if (r->request_id[0]) MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret == MHD_YES ? HTTP_YES : HTTP_NO;
}

/* h (n entries) with the request's Warning header added when it has one, in tmp. */
static const http_header *with_warning(const req *r, const http_header *h, int *n, http_header tmp[8]) {
    if (!r->warning[0]) return h;
    ATTND_ASSERT(*n < 8);
    for (int i = 0; i < *n; i++) tmp[i] = h[i];
    tmp[(*n)++] = (http_header){"Warning", r->warning};
    return tmp;
}

http_result http_reply(req *r, int status, char *body, size_t len, bool owned, const http_header *h, int n) {
    http_header tmp[8];
    h = with_warning(r, h, &n, tmp);
    r->status = status;
    if (r->io) {
        http_result ret = r->io->reply(r, status, body, len, h, n);
        if (owned) free(body);
        return ret;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp && owned) free(body);
    return send_mhd(r, status, resp, h, n);
}

/* MHD's free callback of a stream: the request owns the reader's state (freed with it). */
static void stream_free(void *cls) { (void)cls; }

http_result http_reply_stream(req *r, int status, http_reader reader, void *cls, const http_header *h, int n) {
    http_header tmp[8];
    h = with_warning(r, h, &n, tmp);
    r->status = status;
    if (r->io) return r->io->stream(r, status, reader, cls, h, n);
    return send_mhd(r, status, MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, reader, cls, stream_free), h,
                    n);
}

const char *http_query_get(req *r, const char *name) {
    if (r->conn) return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
    for (size_t at = 0; at < r->query_len;) { /* key NUL value NUL, pair after pair (request_new) */
        const char *key = r->query + at, *val = key + strlen(key) + 1;
        if (!strcmp(key, name)) return val;
        at = (size_t)(val + strlen(val) + 1 - r->query);
    }
    return NULL;
}

/* A url's query string ("a=1&b") as r->query's pairs: "a\0" "1\0" "b\0" "\0" (no decoding: the
 * tests' urls need none). One that does not fit is dropped whole. */
static void query_split(req *r, const char *q) {
    size_t n = 0, cap = sizeof(r->query);
    for (const char *p = q; *p;) {
        size_t len = strcspn(p, "&"), eq = strcspn(p, "=");
        if (eq > len) eq = len;
        if (n + len + 2 > cap) {
            n = 0;
            break;
        }
        memcpy(r->query + n, p, eq);
        r->query[n + eq] = '\0';
        size_t vl = eq < len ? len - eq - 1 : 0;
        memcpy(r->query + n + eq + 1, p + eq + 1, vl);
        r->query[n + eq + 1 + vl] = '\0';
        n += eq + vl + 2;
        p += len + (p[len] == '&');
    }
    r->query_len = n;
}

void http_idle_timeout(req *r, unsigned seconds) {
    if (r->conn) MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, seconds);
}

http_result http_respond_json_h(req *r, int status, json_t *body, const char *hname, const char *hval) {
    /* every error body names its request, however it was built (coded errors too) */
    json_t *e = status >= 400 ? json_object_get(body, "error") : NULL;
    if (json_is_object(e) && r->request_id[0] && !json_object_get(e, "request_id"))
        json_object_set_new(e, "request_id", json_string(r->request_id));
    char *text = body ? json_dumps(body, OAI_DUMP_FLAGS) : NULL;
    json_decref(body);
    if (!text) {
        text = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":\"internal_error\"}}");
        status = 500;
        if (!text) return HTTP_NO;
    }
    /* a trailing newline: curl output stays one answer per line */
    size_t n = strlen(text);
    char *nl = realloc(text, n + 2);
    if (nl) {
        text = nl;
        text[n++] = '\n';
        text[n] = '\0';
    }
    http_header h[2] = {{"Content-Type", "application/json"}, {hname, hval}};
    return http_reply(r, status, text, n, true, h, hname ? 2 : 1);
}

http_result http_respond_json(req *r, int status, json_t *body) {
    return http_respond_json_h(r, status, body, NULL, NULL);
}

http_result http_respond_error(req *r, int status, const char *msg, const char *param) {
    const char *hn = NULL, *hv = NULL;
    size_t n = strnlen(msg, sizeof(r->reason) - 1); /* cut long messages: a log line, not the answer */
    memcpy(r->reason, msg, n);
    r->reason[n] = '\0';
    if (status == 429 || status == 503) hn = "Retry-After", hv = "1";
    if (status == 401) hn = "WWW-Authenticate", hv = "Bearer";
    bool anthropic = r->rt && (r->rt->flags & ROUTE_ANTHROPIC);
    bool ollama = r->rt && (r->rt->flags & ROUTE_OLLAMA);
    json_t *body = anthropic ? anthropic_error(status, msg)
                   : ollama  ? json_pack("{s:s}", "error", msg)
                             : oai_error(status, msg, param);
    return http_respond_json_h(r, status, body, hn, hv); /* which adds request_id to an error object */
}

http_result http_respond_text(req *r, int status, const char *ctype, char *text) {
    http_header h = {"Content-Type", ctype};
    return http_reply(r, status, text, strlen(text), true, &h, 1);
}

int http_status_of(attnd_status st, http_ctx ctx) {
    switch (ctx) {
    case HTTP_CTX_SESSION:
        if (st == ATTND_ERR_NOMEM) return 429; /* the session limit: retry after deleting one */
        if (st == ATTND_ERR_IO) return 503;    /* the shared store: retry shortly */
        break;
    case HTTP_CTX_ACQUIRE:
        return st == ATTND_ERR_NOT_FOUND ? 404 : st == ATTND_ERR_IO || st == ATTND_ERR_NOMEM ? 503 : 409;
    case HTTP_CTX_GENERATE: return st == ATTND_ERR_NOMEM || st == ATTND_ERR_BUSY ? 503 : 500;
    case HTTP_CTX_PARSE: return st == ATTND_ERR_INVALID ? 400 : 500;
    case HTTP_CTX_DEFAULT: break;
    }
    switch (st) {
    case ATTND_ERR_INVALID: case ATTND_ERR_FORMAT: return 400;
    case ATTND_ERR_NOT_FOUND: return 404;
    case ATTND_ERR_BUSY: return 409;
    case ATTND_ERR_NOMEM: return 503;
    default: return 500;
    }
}

bool http_client_gone(req *r) {
    if (r->io) return r->io->client_gone(r);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

json_t *http_parse_body(req *r, http_result *ret, bool allow_empty) {
    if (r->body.len == 0 && allow_empty) return json_object();
    json_error_t je;
    json_t *j = json_loadb(r->body.p ? r->body.p : "", r->body.len, 0, &je);
    if (!j) {
        char msg[300];
        snprintf(msg, sizeof(msg), "invalid JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
        *ret = http_respond_error(r, 400, msg, NULL);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *ret = http_respond_error(r, 400, "the request body must be a JSON object", NULL);
        return NULL;
    }
    return j;
}

/* Names the body's fields that r's route does not know, in the log and the answer's Warning
 * header (RFC 9110's 299, "miscellaneous persistent warning"): they are ignored, as OpenAI ignores
 * them, but a misspelt one must not pass unnoticed. */
static void warn_unknown_fields(req *r, const json_t *body, const api_fields *known) {
    char names[200];
    size_t n = json_is_object(body) ? api_fields_unknown(body, known, names, sizeof(names)) : 0;
    if (!n) return;
    slog_warn("%s %s: unknown field%s ignored: %s", r->method, r->path, n == 1 ? "" : "s", names);
    snprintf(r->warning, sizeof(r->warning), "299 attnd \"unknown field%s ignored: %s\"", n == 1 ? "" : "s", names);
}

json_t *http_work_body(req *r, http_result *ret) {
    if (atomic_load(&r->srv->stopping)) {
        *ret = http_respond_error(r, 503, "server is shutting down", NULL);
        return NULL;
    }
    json_t *body = http_parse_body(r, ret, false);
    const api_fields *known = r->rt ? api_fields_of(r->rt->label) : NULL;
    if (body && known) warn_unknown_fields(r, body, known);
    return body;
}

void req_set(req *r, req_slot s, void *p, void (*free_fn)(void *p)) {
    ATTND_ASSERT(r->ctx[s].p == NULL);
    r->ctx[s] = (req_ctx){p, free_fn ? free_fn : free, NULL};
}

void req_set_end(req *r, req_slot s, void (*end)(req *r, void *p, bool completed)) { r->ctx[s].end = end; }

// ---- routing ------------------------------------------------------------------------------

static bool path_matches(const route *rt, const char *path) {
    if (rt->flags & ROUTE_SEGMENT) {
        const char *at = strstr(rt->path, "{id}"), *tail = at + 4;
        size_t n = (size_t)(at - rt->path), pl = strlen(path), tl = strlen(tail);
        if (strncmp(rt->path, path, n) || pl < n + tl + 1 || strcmp(path + pl - tl, tail)) return false;
        const char *slash = strchr(path + n, '/');
        return !slash || slash == path + pl - tl;
    }
    if (!(rt->flags & ROUTE_PREFIX)) return !strcmp(rt->path, path);
    size_t n = strlen(rt->path);
    return !strncmp(rt->path, path, n) && path[n] && !strchr(path + n, '/');
}

/* Finds the route in the server's table; sets *allow to the methods the path supports (for
 * 405) and *open when a route of the path needs no API key. */
static const route *route_find(const struct server *s, const char *method, const char *path, char *allow,
                               size_t allow_n, bool *open) {
    allow[0] = '\0';
    *open = false;
    const route *hit = NULL;
    for (size_t i = 0; i < s->n_routes; i++) {
        const route *rt = &s->routes[i];
        if (!path_matches(rt, path)) continue;
        /* HEAD is GET without the body (load-balancer health checks); MHD drops the body */
        bool head_get = !strcmp(method, "HEAD") && !strcmp(rt->method, "GET");
        if (!strcmp(rt->method, method) || head_get) hit = rt;
        *open = *open || (rt->flags & ROUTE_OPEN);
        size_t l = strlen(allow);
        snprintf(allow + l, allow_n - l, "%s%s", l ? ", " : "", rt->method);
    }
    return hit;
}

// ---- before the body: auth, CORS preflight, caps ------------------------------------------

/* Constant-time comparison of given with the kl bytes of key. */
static bool key_equal(const char *key, size_t kl, const char *given) {
    size_t gl = strlen(given);
    unsigned diff = (unsigned)(gl ^ kl);
    /* always walk the whole key: the time does not depend on where a mismatch is */
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

/* The owner tag of a key: 16 hex digits of a salted FNV-1a hash (never the key itself). */
static void owner_tag(const char *key, size_t kl, char out[SESS_OWNER_MAX + 1]) {
    uint64_t h = 0xcbf29ce484222325ull ^ 0x6174746e64ull; /* "attnd" */
    for (size_t i = 0; i < kl; i++) h = (h ^ (unsigned char)key[i]) * 0x100000001b3ull;
    snprintf(out, SESS_OWNER_MAX + 1, "%016llx", (unsigned long long)h);
}

/* Checks "Authorization: Bearer <key>" against the API keys (one per line of s->cfg.api_key; every
 * key is compared, so the time does not tell which matched). With several keys, owner gets the
 * matching key's tag: sessions and the prompt cache are scoped to it. */
static bool auth_ok(req *r, char owner[SESS_OWNER_MAX + 1]) {
    struct server *s = r->srv;
    owner[0] = '\0';
    if (!s->cfg.api_key || !*s->cfg.api_key) return true;
    const char *h = http_header_get(r, "Authorization");
    const char *given = h && !strncmp(h, "Bearer ", 7) ? h + 7 : http_header_get(r, "x-api-key"); /* Anthropic's */
    bool several = strchr(s->cfg.api_key, '\n') != NULL, ok = false;
    for (const char *k = s->cfg.api_key; *k;) {
        const char *e = strchr(k, '\n');
        size_t kl = e ? (size_t)(e - k) : strlen(k);
        if (given && key_equal(k, kl, given) && !ok) {
            ok = true;
            if (several) owner_tag(k, kl, owner);
        }
        k += kl + (e ? 1 : 0);
    }
    const char *admin = s->cfg.admin_api_key;
    if (given && admin && *admin && key_equal(admin, strlen(admin), given) && !ok) {
        ok = true;
        if (several) owner_tag(admin, strlen(admin), owner);
    }
    return ok;
}

bool http_is_admin(req *r) {
    struct server *s = r->srv;
    if (!s->cfg.api_key || !*s->cfg.api_key) return true;
    const char *admin = s->cfg.admin_api_key;
    const char *h = http_header_get(r, "Authorization");
    const char *given = h && !strncmp(h, "Bearer ", 7) ? h + 7 : http_header_get(r, "x-api-key");
    return admin && *admin && given && key_equal(admin, strlen(admin), given);
}

static http_result preflight(req *r) {
    static const http_header h[] = {{"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"},
                                    {"Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta"},
                                    {"Access-Control-Max-Age", "600"}};
    return http_reply(r, 204, (char *)"", 0, false, h, (int)ATTND_ARRAY_LEN(h));
}

static http_result too_big(req *r) {
    char msg[160];
    snprintf(msg, sizeof(msg), "request body too large (limit %zu bytes)", r->srv->cfg.body_limit);
    r->too_big = true;
    return http_respond_error(r, 413, msg, NULL);
}

/* Checks done before the body is read: route, method, auth, Content-Length. Returns HTTP_YES
 * to continue reading, or the result of a queued error response (*done set). */
static http_result precheck(req *r, bool *done) {
    struct server *s = r->srv;
    *done = true;
    if (!strcmp(r->method, "OPTIONS") && s->cfg.cors_origins) return preflight(r);
    char allow[64];
    bool open;
    r->rt = route_find(s, r->method, r->path, allow, sizeof(allow), &open);
    if (!r->rt && !allow[0]) {
        char msg[220];
        snprintf(msg, sizeof(msg), "no endpoint %.160s", r->path);
        return http_respond_error(r, 404, msg, NULL);
    }
    const char *host = http_header_get(r, "Host");
    if (s->loopback && !origin_host_ok(host, s->cfg.allowed_hosts))
        return http_respond_error(r, 421, "this server answers only loopback host names (add the name to allowed_hosts)",
                                  NULL);
    bool safe = !strcmp(r->method, "GET") || !strcmp(r->method, "HEAD") || !strcmp(r->method, "OPTIONS");
    const char *origin = http_header_get(r, "Origin");
    if (!safe && !origin_request_ok(origin, host, s->cfg.cors_origins))
        return http_respond_error(r, 403, "cross-origin request refused (the origin is not in cors_origins)", NULL);
    if (!auth_ok(r, r->owner) && !open)
        return http_respond_error(r, 401, "missing or invalid API key (Authorization: Bearer ...)", NULL);
    if (!r->rt) {
        char msg[320];
        snprintf(msg, sizeof(msg), "method %s is not allowed on %.120s (allowed: %s)", r->method, r->path, allow);
        return http_respond_json_h(r, 405, oai_error(405, msg, NULL), "Allow", allow);
    }
    const char *cl = http_header_get(r, "Content-Length");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (errno || end == cl || v > s->cfg.body_limit) return too_big(r);
    }
    *done = false;
    return HTTP_YES;
}

// ---- libmicrohttpd callbacks --------------------------------------------------------------

/* The first callback of a request: its state, then the checks that need no body. */
static req *request_new(struct server *s, struct MHD_Connection *c, const char *url, const char *method,
                        const req_io *io) {
    req *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    atomic_fetch_add(&s->in_flight, 1);
    r->srv = s;
    r->conn = c;
    r->io = io;
    r->t0 = attnd_now_s();
    snprintf(r->method, sizeof(r->method), "%s", method);
    /* libmicrohttpd hands the path alone (its query through http_query_get); a url without a
     * connection (the tests') may carry one */
    const char *q = io ? strchr(url, '?') : NULL;
    size_t plen = q ? (size_t)(q - url) : strlen(url);
    snprintf(r->path, sizeof(r->path), "%.*s", (int)plen, url);
    if (plen >= sizeof(r->path)) r->path[sizeof(r->path) - 2] = '~'; /* never matches a route */
    if (q) query_split(r, q + 1);
    /* the client's id ties its logs to ours; one that cannot go into a header or a log line as
     * it is gets replaced (the answer's X-Request-Id says by what) */
    const char *rid = http_header_get(r, "X-Request-Id");
    if (rid && slog_request_id_valid(rid)) snprintf(r->request_id, sizeof(r->request_id), "%s", rid);
    else attnd_random_id(r->request_id, sizeof(r->request_id), "req-");
    slog_set_request(r->request_id);
    return r;
}

req *http_req_create(struct server *s, const char *method, const char *url, const req_io *io) {
    return request_new(s, NULL, url, method, io);
}

static http_result request_begin(struct server *s, struct MHD_Connection *c, const char *url,
                                     const char *method, void **con_cls) {
    req *r = request_new(s, c, url, method, NULL);
    if (!r) return HTTP_NO;
    *con_cls = r;
    /* monitoring is answered past the connection limits (a reserved slot) */
    bool reserved = !strcmp(r->path, "/health") || !strcmp(r->path, "/metrics");
    conn_verdict v = s->conns ? conn_request_begin(s->conns, c, reserved) : CONN_OK;
    if (v != CONN_OK) { /* answered, then the connection closes */
        r->rt = NULL;
        int code = v == CONN_FULL ? 503 : 429;
        const char *msg = v == CONN_FULL ? "too many connections; retry shortly"
                                         : "too many connections from this address (max_connections_per_address)";
        snprintf(r->reason, sizeof(r->reason), "%s", msg);
        return http_respond_json_h(r, code, oai_error(code, msg, NULL), "Connection", "close");
    }
    conn_framing f;
    if (conn_framing_check(c, method, &f)) { /* framing MHD lets through: refused before any body, and closed */
        r->rt = NULL;
        snprintf(r->reason, sizeof(r->reason), "%s", f.why);
        return http_respond_json_h(r, f.status, oai_error(f.status, f.why, NULL), "Connection", "close");
    }
    bool done;
    http_result ret = precheck(r, &done);
    if (done) r->rt = NULL;
    return ret;
}

/* A piece of the body. Past the limit (a chunked upload: the Content-Length case is answered
 * before any body) the rest is read and dropped, and the 413 is queued once the upload ends:
 * MHD cannot send a response queued in the middle of an upload and would only close the
 * connection. An upload that goes on past 4 times the limit (at least 1 MiB) is cut; one that
 * trickles is cut at body_timeout_s (conn.h). */
static http_result request_body(req *r, const char *upload, size_t n) {
    size_t limit = r->srv->cfg.body_limit;
    if (r->too_big || r->body.len + n > limit) {
        if (!r->too_big) slog_info("%s %s: request body over %zu bytes; reading it to answer 413", r->method, r->path, limit);
        r->too_big = true;
        r->dropped += n;
        size_t most = limit < ((size_t)1 << 18) ? (size_t)1 << 20 : 4 * limit;
        return r->dropped > most ? HTTP_NO : HTTP_YES;
    }
    return buf_append(&r->body, upload, n) ? HTTP_YES : HTTP_NO;
}

unsigned http_model_roles(const model *m, const server_settings *cfg) {
    if (!m) return 0; /* not loaded (yet) */
    unsigned roles = model_roles(m);
    if (cfg->embeddings && (roles & MODEL_ROLE_GENERATE)) roles |= MODEL_ROLE_EMBED;
    return roles;
}

/* The role a route needs (MODEL_ROLE_*), 0 = any model. */
static unsigned route_role(const route *rt) {
    return (rt->flags & ROUTE_GENERATE ? MODEL_ROLE_GENERATE : 0u) | (rt->flags & ROUTE_EMBED ? MODEL_ROLE_EMBED : 0u) |
           (rt->flags & ROUTE_RANK ? MODEL_ROLE_RANK : 0u);
}

bool http_role_refused(req *r, unsigned roles, const char *name, http_result *ret) {
    unsigned need = r->rt ? route_role(r->rt) : 0;
    if (!need || (roles & need)) return false;
    static const char *const what[] = {"generate text", "embed", "rank"};
    buf b;
    buf_init(&b);
    buf_printf(&b, "the model '%s' does not %s%s; it serves", name, what[need & MODEL_ROLE_GENERATE ? 0 : need & MODEL_ROLE_EMBED ? 1 : 2],
               need & MODEL_ROLE_EMBED && (roles & MODEL_ROLE_GENERATE) ? " (start the server with --embeddings)" : "");
    const char *sep = " ";
    for (size_t i = 0; i < r->srv->n_routes; i++) { /* what it serves, from the route table */
        const route *rt = &r->srv->routes[i];
        if (!strcmp(rt->method, "POST") && (route_role(rt) & roles)) {
            buf_printf(&b, "%s%s", sep, rt->path);
            sep = ", ";
        }
    }
    *ret = http_respond_error(r, 400, b.p ? b.p : "the model does not serve this endpoint", NULL);
    buf_free(&b);
    return true;
}

/* The whole body is in: the route's handler. */
static http_result dispatch(req *r) {
    if (r->too_big) return too_big(r);
    if (!r->rt) return http_respond_error(r, 404, "no such endpoint", NULL);
    if ((r->rt->flags & ROUTE_MODEL) && !atomic_load(&r->srv->ready)) return http_respond_error(r, 503, "model is loading", NULL);
    http_result ret;
    /* Several models: models_http_route checks the one a request names. Only a route that needs a
     * role asks the model (the open ones, /health, are answered while it loads). */
    if (!r->srv->models && route_role(r->rt) &&
        http_role_refused(r, http_model_roles(r->srv->m, &r->srv->cfg), r->srv->model_id, &ret))
        return ret;
    return r->rt->fn(r);
}

static http_result on_request(struct server *s, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *upload, size_t *upload_size, void **con_cls) {
    req *r = *con_cls;
    if (!r) return request_begin(s, c, url, method, con_cls);
    slog_set_request(r->request_id);
    if (r->status) { /* an early response is queued: discard whatever body still arrives */
        *upload_size = 0;
        return HTTP_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        return request_body(r, upload, n);
    }
    if (s->conns) conn_body_done(s->conns, c); /* the body is in: no deadline while it is answered */
    return dispatch(r);
}

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    http_result ret = on_request(cls, c, url, method, upload, upload_size, con_cls);
    slog_set_request(NULL); /* the MHD thread serves other connections next */
    return ret == HTTP_YES ? MHD_YES : MHD_NO;
}

http_result http_req_run(req *r, const char *body, size_t len) {
    bool done;
    http_result ret = precheck(r, &done);
    if (done) {
        r->rt = NULL;
        return ret;
    }
    if (len && (ret = request_body(r, body, len)) != HTTP_YES) return ret;
    return r->status ? HTTP_YES : dispatch(r);
}

void http_tenant(const req *r, char *buf, size_t cap) {
    if (r->owner[0]) {
        snprintf(buf, cap, "key:%s", r->owner);
        return;
    }
    char addr[INET6_ADDRSTRLEN + 1];
    conn_client_address(r->conn, addr, sizeof(addr));
    snprintf(buf, cap, "addr:%s", addr);
}

void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    struct server *s = cls;
    if (s->conns) conn_request_end(s->conns, c); /* keep-alive: the next headers' deadline starts */
    req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    http_req_end(r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
}

void http_req_end(req *r, bool completed) {
    struct server *s = r->srv;
    struct MHD_Connection *c = r->conn;
    slog_set_request(r->request_id);
    double dt = attnd_now_s() - r->t0;
    for (int i = 0; i < REQ_SLOT_COUNT; i++)
        if (r->ctx[i].end) r->ctx[i].end(r, r->ctx[i].p, completed);
    int status = r->status ? r->status : 500;
    if (r->cancelled) status = 499; /* nginx's "client closed request" */
    metrics_request(s->met, r->rt ? r->rt->label : "other", status, dt);
    /* the access log; a refused request says why and who asked, also at debug level without it */
    server_log_level lvl = s->cfg.access_log ? SERVER_LOG_INFO : SERVER_LOG_DEBUG;
    if ((s->cfg.access_log || r->reason[0]) && slog_enabled(lvl)) {
        char addr[INET6_ADDRSTRLEN + 1];
        conn_client_address(c, addr, sizeof(addr));
        slog(lvl, "%s %s %d prompt=%d gen=%d %.3fs %s%s%sclient=%s%s%s%s", r->method, r->path, status, r->n_prompt,
             r->n_gen, dt, r->answer_id[0] ? "id=" : "", r->answer_id, r->answer_id[0] ? " " : "", addr,
             r->reason[0] ? " error=\"" : "", r->reason, r->reason[0] ? "\"" : "");
    }
    for (int i = 0; i < REQ_SLOT_COUNT; i++)
        if (r->ctx[i].p) r->ctx[i].free_fn(r->ctx[i].p);
    buf_free(&r->body);
    slog_set_request(NULL);
    free(r);
    atomic_fetch_sub(&s->in_flight, 1);
}
