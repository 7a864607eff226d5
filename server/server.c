/*
 * server.c — the HTTP front end of `attnd serve` (see server.h).
 *
 * libmicrohttpd runs one thread per connection, so a handler may block while its request is
 * generated (non-streamed) and a streaming response's reader may block until the scheduler
 * publishes more text. Every wait is a 100 ms timed wait that also polls the socket for a hang-up,
 * so a vanished client cancels its sequence within about one decode step.
 *
 * Per-request state (req) is allocated on the first access-handler call and freed only in the
 * completed callback, which also writes the access log line and counts the request in /metrics.
 * Routes come from one table; everything before routing (auth, CORS, body cap) is common.
 */
#define _GNU_SOURCE /* POLLRDHUP: the peer closed its side */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "attnd/engine.h"
#include "attnd/tokenizer.h"
#include "chat.h"
#include "metrics.h"
#include "oai.h"
#include "scheduler.h"
#include "sess.h"
#include "slog.h"

struct server {
    server_settings cfg;
    char *host, *model_path, *model_alias, *state_dir, *api_key, *cors, *chat_template; /* owned copies */
    struct MHD_Daemon *d;
    int port;
    metrics *met;
    // ---- set by server_load, read-only afterwards ----
    model *m;
    tokenizer *tok;
    sess_store *store;
    sched *sch;
    chat_family family;
    char *model_id;
    int n_ctx, n_vocab;
    atomic_bool ready;
    atomic_bool stopping;
    atomic_int in_flight;     /* requests between their first callback and completion */
    bool shut_down;
};

typedef struct route route;

typedef struct req {
    server *srv;
    const route *rt;
    struct MHD_Connection *conn;
    char method[16];
    char path[160];
    double t0;
    char *body; /* (len) request body, NUL-terminated */
    size_t len, cap;
    bool too_big;
    int status;              /* response status (for the access log and metrics) */
    int n_prompt, n_gen;     /* tokens, for the access log */
    bool cancelled;          /* client went away mid-request */
    // ---- generation in flight ----
    sched_job *job;
    oai_request oreq;
    json_t *body_json;       /* keeps oreq's borrowed strings alive */
    char sess_id[SESS_ID_MAX + 1];
    char resp_id[48];
    time_t created;
    // ---- streaming ----
    bool chat;
    bool llama;              /* llama.cpp's POST /completion shapes */
    bool return_tokens;      /* llama.cpp's return_tokens: the generated ids too */
    bool sent_role, finished;
    size_t sent_text;
    int sent_pieces;
    char *out;               /* (out_len) SSE bytes not yet handed to MHD */
    size_t out_len, out_off, out_cap;
} req;

typedef enum MHD_Result (*handler_fn)(req *r);

struct route {
    const char *method;
    const char *path;  /* exact, or a prefix ending in '/' when prefix is set */
    bool prefix;
    bool needs_model;  /* 503 while loading */
    handler_fn fn;
    const char *label; /* metrics label */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ---- responses ----------------------------------------------------------------------------

static void add_common_headers(req *r, struct MHD_Response *resp) {
    const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    const char *allowed = r->srv->cors;
    if (!origin || !allowed || !*allowed) return;
    bool ok = !strcmp(allowed, "*");
    /* comma-separated exact origins */
    for (const char *p = allowed; !ok && *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && t[-1] == ' ') t--;
        if ((size_t)(t - p) == strlen(origin) && !strncmp(p, origin, (size_t)(t - p))) ok = true;
        p = e;
    }
    if (!ok) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(resp, "Vary", "Origin");
}

/* Queues body (stolen) as the response. */
static enum MHD_Result respond_json_h(req *r, int status, json_t *body, const char *hname, const char *hval) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        text = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":\"internal_error\"}}");
        status = 500;
        if (!text) return MHD_NO;
    }
    /* a trailing newline: curl output stays one answer per line */
    size_t n = strlen(text);
    char *nl = realloc(text, n + 2);
    if (nl) {
        text = nl;
        text[n++] = '\n';
        text[n] = '\0';
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (hname) MHD_add_response_header(resp, hname, hval);
    add_common_headers(r, resp);
    r->status = status;
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result respond_json(req *r, int status, json_t *body) {
    return respond_json_h(r, status, body, NULL, NULL);
}

static enum MHD_Result respond_error(req *r, int status, const char *msg, const char *param) {
    const char *hn = NULL, *hv = NULL;
    if (status == 429 || status == 503) hn = "Retry-After", hv = "1";
    if (status == 401) hn = "WWW-Authenticate", hv = "Bearer";
    return respond_json_h(r, status, oai_error(status, msg, param), hn, hv);
}

static enum MHD_Result respond_text(req *r, int status, const char *ctype, char *text /* stolen */) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", ctype);
    add_common_headers(r, resp);
    r->status = status;
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Status for a failure status code from the modules. */
static int http_status_of(attnd_status st) {
    switch (st) {
    case ATTND_ERR_INVALID: case ATTND_ERR_FORMAT: return 400;
    case ATTND_ERR_NOT_FOUND: return 404;
    case ATTND_ERR_BUSY: return 409;
    case ATTND_ERR_NOMEM: return 503;
    default: return 500;
    }
}

/* True when the peer closed its side (checked without blocking). */
static bool client_gone(req *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits up to 100 ms on the job's condition (caller holds j->mu). */
static void job_wait_tick(sched_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + 100000000L;
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

static void random_id(char *out, size_t n, const char *prefix) {
    unsigned char rnd[12];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        for (size_t i = 0; i < sizeof(rnd); i++) rnd[i] = (unsigned char)rand();
    int o = snprintf(out, n, "%s", prefix);
    for (size_t i = 0; i < sizeof(rnd) && (size_t)o + 2 < n; i++) o += snprintf(out + o, n - o, "%02x", rnd[i]);
}

/* Parses the body as JSON; on failure queues the 400 and returns NULL (*ret set). */
static json_t *parse_body(req *r, enum MHD_Result *ret, bool allow_empty) {
    if (r->len == 0 && allow_empty) return json_object();
    json_error_t je;
    json_t *j = json_loadb(r->body ? r->body : "", r->len, 0, &je);
    if (!j) {
        char msg[300];
        snprintf(msg, sizeof(msg), "invalid JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
        *ret = respond_error(r, 400, msg, NULL);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *ret = respond_error(r, 400, "the request body must be a JSON object", NULL);
        return NULL;
    }
    return j;
}

// ---- simple endpoints ---------------------------------------------------------------------

static enum MHD_Result h_health(req *r) {
    if (!atomic_load(&r->srv->ready)) return respond_error(r, 503, "model is loading", NULL);
    json_t *o = json_object();
    json_object_set_new(o, "status", json_string("ok"));
    return respond_json(r, 200, o);
}

static enum MHD_Result h_metrics(req *r) {
    server *s = r->srv;
    sched_stats st;
    bool have = s->sch != NULL && atomic_load(&s->ready);
    if (have) sched_get_stats(s->sch, &st);
    char *text = metrics_render(s->met, have ? &st : NULL, have ? sess_count(s->store) : 0, atomic_load(&s->ready));
    if (!text) return respond_error(r, 500, "out of memory", NULL);
    return respond_text(r, 200, "text/plain; version=0.0.4", text);
}

static enum MHD_Result h_models(req *r) {
    server *s = r->srv;
    const model_info *mi = model_info_get(s->m);
    json_t *mdl = json_object();
    json_object_set_new(mdl, "id", json_string(s->model_id));
    json_object_set_new(mdl, "object", json_string("model"));
    json_object_set_new(mdl, "created", json_integer(time(NULL)));
    json_object_set_new(mdl, "owned_by", json_string("attnd"));
    json_object_set_new(mdl, "context_length", json_integer(s->n_ctx));
    json_t *meta = json_object();
    json_object_set_new(meta, "n_vocab", json_integer(mi->n_vocab));
    json_object_set_new(meta, "n_ctx_train", json_integer(mi->n_ctx));
    json_object_set_new(meta, "n_params", json_integer((json_int_t)mi->n_params));
    json_object_set_new(meta, "chat_template", json_string(chat_family_name(s->family)));
    json_object_set_new(mdl, "meta", meta);
    json_t *root = json_object(), *data = json_array();
    json_array_append_new(data, mdl);
    json_object_set_new(root, "object", json_string("list"));
    json_object_set_new(root, "data", data);
    return respond_json(r, 200, root);
}

static enum MHD_Result h_tokenize(req *r) {
    enum MHD_Result ret = MHD_NO;
    json_t *b = parse_body(r, &ret, false);
    if (!b) return ret;
    json_t *content = json_object_get(b, "content"), *as = json_object_get(b, "add_special"),
           *ps = json_object_get(b, "parse_special"), *wp = json_object_get(b, "with_pieces");
    if (!json_is_string(content)) ret = respond_error(r, 400, "'content' must be a string", "content");
    else if (as && !json_is_boolean(as)) ret = respond_error(r, 400, "'add_special' must be a boolean", "add_special");
    else if (ps && !json_is_boolean(ps)) ret = respond_error(r, 400, "'parse_special' must be a boolean", "parse_special");
    else if (wp && !json_is_boolean(wp)) ret = respond_error(r, 400, "'with_pieces' must be a boolean", "with_pieces");
    else {
        int32_t *ids = NULL;
        size_t n = 0;
        attnd_err err;
        if (tok_encode(r->srv->tok, json_string_value(content), json_string_length(content), json_is_true(as),
                       !ps || json_is_true(ps), &ids, &n, &err) != ATTND_OK) {
            ret = respond_error(r, 400, err.msg, "content");
        } else {
            json_t *arr = json_array();
            for (size_t i = 0; i < n; i++) {
                if (json_is_true(wp)) {
                    json_t *o = json_object();
                    const char *piece = tok_piece(r->srv->tok, ids[i]);
                    json_object_set_new(o, "id", json_integer(ids[i]));
                    json_object_set_new(o, "piece", oai_string(piece ? piece : "", piece ? strlen(piece) : 0));
                    json_array_append_new(arr, o);
                } else {
                    json_array_append_new(arr, json_integer(ids[i]));
                }
            }
            free(ids);
            json_t *o = json_object();
            json_object_set_new(o, "tokens", arr);
            ret = respond_json(r, 200, o);
        }
    }
    json_decref(b);
    return ret;
}

static enum MHD_Result h_detokenize(req *r) {
    enum MHD_Result ret = MHD_NO;
    json_t *b = parse_body(r, &ret, false);
    if (!b) return ret;
    json_t *toks = json_object_get(b, "tokens");
    size_t n = json_array_size(toks);
    int32_t *ids = json_is_array(toks) ? malloc((n ? n : 1) * sizeof(int32_t)) : NULL;
    if (!json_is_array(toks)) {
        ret = respond_error(r, 400, "'tokens' must be an array of token ids", "tokens");
    } else if (!ids) {
        ret = respond_error(r, 500, "out of memory", NULL);
    } else {
        size_t i = 0;
        for (; i < n; i++) {
            json_t *t = json_array_get(toks, i);
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= r->srv->n_vocab) break;
            ids[i] = (int32_t)json_integer_value(t);
        }
        char *text = NULL;
        size_t len = 0;
        attnd_err err;
        if (i < n) {
            char msg[128];
            snprintf(msg, sizeof(msg), "tokens[%zu] is not a token id in 0..%d", i, r->srv->n_vocab - 1);
            ret = respond_error(r, 400, msg, "tokens");
        } else if (tok_decode(r->srv->tok, ids, n, false, &text, &len, &err) != ATTND_OK) {
            ret = respond_error(r, 400, err.msg, "tokens");
        } else {
            json_t *o = json_object();
            json_object_set_new(o, "content", oai_string(text, len));
            ret = respond_json(r, 200, o);
        }
        free(text);
    }
    free(ids);
    json_decref(b);
    return ret;
}

// ---- sessions -----------------------------------------------------------------------------

static enum MHD_Result h_sessions_create(req *r) {
    enum MHD_Result ret = MHD_NO;
    json_t *b = parse_body(r, &ret, true);
    if (!b) return ret;
    json_t *id = json_object_get(b, "id");
    char out[SESS_ID_MAX + 1];
    attnd_err err;
    if (id && !json_is_null(id) && !json_is_string(id)) {
        ret = respond_error(r, 400, "'id' must be a string", "id");
    } else {
        attnd_status st = sess_create(r->srv->store, json_is_string(id) ? json_string_value(id) : NULL, out, &err);
        if (st == ATTND_ERR_INVALID) ret = respond_error(r, 400, err.msg, "id");
        else if (st == ATTND_ERR_BUSY) ret = respond_error(r, 409, err.msg, "id");
        else if (st == ATTND_ERR_NOMEM) ret = respond_error(r, 429, err.msg, NULL);
        else if (st != ATTND_OK) ret = respond_error(r, 500, err.msg, NULL);
        else {
            if (sess_persist(r->srv->store, out, &err) != ATTND_OK) slog_error("%s", err.msg);
            json_t *o = sess_info_json(r->srv->store, out);
            ret = o ? respond_json(r, 200, o) : respond_error(r, 404, "session vanished", NULL);
        }
    }
    json_decref(b);
    return ret;
}

static enum MHD_Result h_sessions_list(req *r) { return respond_json(r, 200, sess_list_json(r->srv->store)); }

static const char *session_id_of(req *r) { return r->path + strlen("/v1/sessions/"); }

static enum MHD_Result h_session_get(req *r) {
    const char *id = session_id_of(r);
    json_t *o = sess_id_valid(id) ? sess_info_json(r->srv->store, id) : NULL;
    if (!o) {
        char msg[128];
        snprintf(msg, sizeof(msg), "session '%.64s' not found", id);
        return respond_error(r, 404, msg, NULL);
    }
    return respond_json(r, 200, o);
}

static enum MHD_Result h_session_delete(req *r) {
    const char *id = session_id_of(r);
    struct kv_seq *kv = NULL;
    attnd_err err;
    attnd_status st = sess_id_valid(id) ? sess_delete(r->srv->store, id, &kv, &err)
                                        : attnd_fail(&err, ATTND_ERR_NOT_FOUND, "session '%.64s' not found", id);
    if (st != ATTND_OK) return respond_error(r, http_status_of(st), err.msg, NULL);
    sched_free_kv(r->srv->sch, kv);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "object", json_string("session.deleted"));
    json_object_set_new(o, "deleted", json_true());
    return respond_json(r, 200, o);
}

// ---- generation: response shapes ----------------------------------------------------------

/* A token's text for logprobs (its bytes on its own, U+2581 as a space; invalid UTF-8 as
 * U+FFFD) and, when bytes is non-NULL, its raw bytes as an array of integers. The same function
 * names chosen tokens and alternatives, so clients can compare them (lm-eval's is_greedy). */
static json_t *token_str(req *r, int32_t id, json_t **bytes) {
    const char *p = "";
    size_t n = 0;
    if (!tok_token_bytes(r->srv->tok, id, false, &p, &n)) p = "", n = 0;
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)p[i]));
    }
    return oai_string(p, n);
}

/* Chat logprobs content entries for pieces [from, to) (caller holds j->mu). */
static json_t *chat_logprobs(req *r, int from, int to) {
    sched_job *j = r->job;
    json_t *content = json_array();
    for (int i = from; i < to; i++) {
        json_t *e = json_object(), *bytes, *tok = token_str(r, j->pieces[i].token, &bytes);
        json_object_set_new(e, "token", tok);
        json_object_set_new(e, "bytes", bytes);
        json_object_set_new(e, "logprob", json_real(j->pieces[i].logprob));
        json_t *tops = json_array();
        for (int k = 0; k < j->top_logprobs; k++) {
            const token_logprob *t = &j->tops[(size_t)i * j->top_logprobs + k];
            json_t *o = json_object(), *bytes, *ts = token_str(r, t->id, &bytes);
            json_object_set_new(o, "token", ts);
            json_object_set_new(o, "bytes", bytes);
            json_object_set_new(o, "logprob", json_real(t->logprob));
            json_array_append_new(tops, o);
        }
        json_object_set_new(e, "top_logprobs", tops);
        json_array_append_new(content, e);
    }
    json_t *o = json_object();
    json_object_set_new(o, "content", content);
    return o;
}

/* Legacy completions logprobs for pieces [from, to), with the prompt's first when echo. */
static json_t *completion_logprobs(req *r, int from, int to, bool with_prompt, size_t *text_off) {
    sched_job *j = r->job;
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    int ntop = j->top_logprobs;
    if (with_prompt)
        for (int i = 0; i < j->n_prompt; i++) {
            json_t *t = token_str(r, j->prompt[i], NULL);
            json_array_append_new(offs, json_integer((json_int_t)*text_off));
            *text_off += json_string_length(t);
            json_array_append_new(tokens, t);
            bool have = i > 0 && j->prompt_lp;
            json_array_append_new(lps, have ? json_real(j->prompt_lp[i]) : json_null());
            if (have && ntop > 0 && j->prompt_tops) {
                json_t *o = json_object();
                for (int k = 0; k < ntop; k++) {
                    const token_logprob *t2 = &j->prompt_tops[(size_t)i * ntop + k];
                    json_t *ts = token_str(r, t2->id, NULL);
                    json_object_set_new(o, json_string_value(ts), json_real(t2->logprob));
                    json_decref(ts);
                }
                json_array_append_new(tops, o);
            } else {
                json_array_append_new(tops, json_null());
            }
        }
    for (int i = from; i < to; i++) {
        json_t *t = token_str(r, j->pieces[i].token, NULL);
        json_array_append_new(offs, json_integer((json_int_t)*text_off));
        *text_off += json_string_length(t);
        json_array_append_new(tokens, t);
        json_array_append_new(lps, json_real(j->pieces[i].logprob));
        json_t *o = json_object();
        for (int k = 0; k < ntop; k++) {
            const token_logprob *t2 = &j->tops[(size_t)i * ntop + k];
            json_t *ts = token_str(r, t2->id, NULL);
            json_object_set_new(o, json_string_value(ts), json_real(t2->logprob));
            json_decref(ts);
        }
        json_array_append_new(tops, o);
    }
    json_t *o = json_object();
    json_object_set_new(o, "tokens", tokens);
    json_object_set_new(o, "token_logprobs", lps);
    json_object_set_new(o, "top_logprobs", tops);
    json_object_set_new(o, "text_offset", offs);
    return o;
}

static json_t *usage_json(sched_job *j) {
    json_t *u = json_object(), *d = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(j->n_prompt));
    json_object_set_new(u, "completion_tokens", json_integer(j->n_generated));
    json_object_set_new(u, "total_tokens", json_integer(j->n_prompt + j->n_generated));
    json_object_set_new(d, "cached_tokens", json_integer(j->n_cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

/* llama.cpp-style timings (prefill and decode time of this request). */
static json_t *timings_json(sched_job *j) {
    json_t *t = json_object();
    int pn = j->n_prompt - j->n_cached;
    json_object_set_new(t, "cached_n", json_integer(j->n_cached));
    json_object_set_new(t, "prompt_n", json_integer(pn));
    json_object_set_new(t, "prompt_ms", json_real(j->prompt_ms));
    json_object_set_new(t, "predicted_n", json_integer(j->n_generated));
    json_object_set_new(t, "predicted_ms", json_real(j->gen_ms));
    json_object_set_new(t, "predicted_per_second", json_real(j->gen_ms > 0 ? j->n_generated * 1e3 / j->gen_ms : 0));
    return t;
}

static json_t *envelope(req *r, const char *object) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->resp_id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(r->created));
    json_object_set_new(o, "model", json_string(r->srv->model_id));
    return o;
}

/* llama.cpp's /completion answer: the text so far plus, at the end, the counts and timings. */
static json_t *llama_response(req *r, const char *text, size_t n, bool final) {
    sched_job *j = r->job;
    json_t *o = json_object();
    json_object_set_new(o, "content", oai_string(text, n));
    json_object_set_new(o, "stop", json_boolean(final));
    if (r->return_tokens) {
        /* streamed: the ids since the last event; final (or not streamed): all of them */
        json_t *ids = json_array();
        int from = final && !r->oreq.stream ? 0 : r->sent_pieces, to = final && r->oreq.stream ? from : j->n_pieces;
        for (int i = from; i < to; i++) json_array_append_new(ids, json_integer(j->pieces[i].token));
        json_object_set_new(o, "tokens", ids);
    }
    if (final) {
        json_object_set_new(o, "model", json_string(r->srv->model_id));
        json_object_set_new(o, "tokens_predicted", json_integer(j->n_generated));
        json_object_set_new(o, "tokens_evaluated", json_integer(j->n_prompt));
        json_object_set_new(o, "tokens_cached", json_integer(j->n_cached));
        bool limit = j->finish_reason && !strcmp(j->finish_reason, "length");
        json_object_set_new(o, "stop_type", json_string(limit ? "limit" : "eos"));
        json_object_set_new(o, "stopped_limit", json_boolean(limit));
        json_object_set_new(o, "stopped_eos", json_boolean(!limit));
        json_object_set_new(o, "timings", timings_json(j));
        if (r->sess_id[0]) json_object_set_new(o, "session_id", json_string(r->sess_id));
    }
    return o;
}

/* The whole non-streamed response (caller holds j->mu, job done and OK). */
static json_t *final_response(req *r) {
    sched_job *j = r->job;
    if (r->llama) return llama_response(r, j->text, j->text_len, true);
    json_t *o = envelope(r, r->chat ? "chat.completion" : "text_completion");
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    if (r->chat) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", oai_string(j->text, j->text_len));
        json_object_set_new(choice, "message", msg);
        json_object_set_new(choice, "logprobs", j->top_logprobs >= 0 ? chat_logprobs(r, 0, j->n_pieces) : json_null());
    } else {
        json_t *text;
        if (r->oreq.echo) {
            /* the prompt as given (text) or as decoded (token ids), then the completion */
            char *pt = NULL;
            size_t pl = 0;
            if (r->oreq.prompt) {
                pl = strlen(r->oreq.prompt);
                pt = malloc(pl + j->text_len + 1);
                if (pt) memcpy(pt, r->oreq.prompt, pl);
            } else {
                char *d = NULL;
                if (tok_decode(r->srv->tok, j->prompt, (size_t)j->n_prompt, false, &d, &pl, NULL) == ATTND_OK) {
                    pt = realloc(d, pl + j->text_len + 1);
                    if (!pt) free(d);
                }
            }
            if (pt) {
                memcpy(pt + pl, j->text, j->text_len);
                text = oai_string(pt, pl + j->text_len);
                free(pt);
            } else {
                text = oai_string(j->text, j->text_len);
            }
        } else {
            text = oai_string(j->text, j->text_len);
        }
        json_object_set_new(choice, "text", text);
        size_t off = 0;
        json_object_set_new(choice, "logprobs",
                            j->top_logprobs >= 0 ? completion_logprobs(r, 0, j->n_pieces, r->oreq.echo, &off)
                                                 : json_null());
    }
    json_object_set_new(choice, "finish_reason", json_string(j->finish_reason ? j->finish_reason : "stop"));
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(j));
    json_object_set_new(o, "timings", timings_json(j));
    if (r->sess_id[0]) json_object_set_new(o, "session_id", json_string(r->sess_id));
    return o;
}

// ---- generation: streaming ----------------------------------------------------------------

static void out_put(req *r, const char *p, size_t n) {
    if (r->out_off == r->out_len) r->out_off = r->out_len = 0;
    if (r->out_len + n > r->out_cap) {
        size_t cap = r->out_cap ? r->out_cap * 2 : 4096;
        while (cap < r->out_len + n) cap *= 2;
        char *g = realloc(r->out, cap);
        if (!g) return;
        r->out = g;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, p, n);
    r->out_len += n;
}

/* Appends "data: <json>\n\n" (o stolen). */
static void sse_event(req *r, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) return;
    out_put(r, "data: ", 6);
    out_put(r, s, strlen(s));
    out_put(r, "\n\n", 2);
    free(s);
}

static json_t *chunk(req *r, json_t *delta_or_text, json_t *logprobs, const char *finish) {
    json_t *o = envelope(r, r->chat ? "chat.completion.chunk" : "text_completion");
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(0));
    json_object_set_new(c, r->chat ? "delta" : "text", delta_or_text);
    json_object_set_new(c, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *arr = json_array();
    json_array_append_new(arr, c);
    json_object_set_new(o, "choices", arr);
    if (r->oreq.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* Turns whatever the job published since the last call into SSE events (caller holds j->mu). */
static void stream_collect(req *r) {
    sched_job *j = r->job;
    if (r->chat && !r->sent_role) {
        json_t *d = json_object();
        json_object_set_new(d, "role", json_string("assistant"));
        json_object_set_new(d, "content", json_string(""));
        sse_event(r, chunk(r, d, NULL, NULL));
        r->sent_role = true;
    }
    bool new_text = j->text_len > r->sent_text, new_pieces = j->n_pieces > r->sent_pieces;
    if (r->llama) {
        if (new_text || (r->return_tokens && new_pieces))
            sse_event(r, llama_response(r, j->text + r->sent_text, j->text_len - r->sent_text, false));
        r->sent_text = j->text_len;
        r->sent_pieces = j->n_pieces;
        if (!j->done) return;
        if (j->status != ATTND_OK) sse_event(r, oai_error(503, j->errmsg[0] ? j->errmsg : "generation failed", NULL));
        else sse_event(r, llama_response(r, "", 0, true));
        r->finished = true; /* llama.cpp ends with the stop:true event, no [DONE] */
        return;
    }
    if (new_text || (new_pieces && j->top_logprobs >= 0)) {
        json_t *text = oai_string(j->text + r->sent_text, j->text_len - r->sent_text), *lp = NULL;
        if (j->top_logprobs >= 0) {
            size_t off = r->sent_text;
            lp = r->chat ? chat_logprobs(r, r->sent_pieces, j->n_pieces)
                         : completion_logprobs(r, r->sent_pieces, j->n_pieces, false, &off);
        }
        json_t *payload = text;
        if (r->chat) {
            payload = json_object();
            json_object_set_new(payload, "content", text);
        }
        sse_event(r, chunk(r, payload, lp, NULL));
        r->sent_text = j->text_len;
        r->sent_pieces = j->n_pieces;
    }
    if (!j->done) return;
    if (j->status != ATTND_OK) {
        int st = j->status == ATTND_ERR_NOMEM || j->status == ATTND_ERR_BUSY ? 503 : 500;
        sse_event(r, oai_error(st, j->errmsg[0] ? j->errmsg : "generation failed", NULL));
    } else {
        sse_event(r, chunk(r, r->chat ? json_object() : json_string(""), NULL, j->finish_reason));
        if (r->oreq.include_usage) {
            json_t *o = envelope(r, r->chat ? "chat.completion.chunk" : "text_completion");
            json_object_set_new(o, "choices", json_array());
            json_object_set_new(o, "usage", usage_json(j));
            sse_event(r, o);
        }
    }
    out_put(r, "data: [DONE]\n\n", 14);
    r->finished = true;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    req *r = cls;
    sched_job *j = r->job;
    while (r->out_off == r->out_len) {
        if (r->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&j->mu);
        bool first = r->chat && !r->sent_role;
        while (!first && !j->done && j->text_len == r->sent_text &&
               !(j->top_logprobs >= 0 && j->n_pieces > r->sent_pieces)) {
            job_wait_tick(j);
            if (!j->done && client_gone(r)) {
                pthread_mutex_unlock(&j->mu);
                atomic_store(&j->cancel, true);
                r->cancelled = true;
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        stream_collect(r);
        pthread_mutex_unlock(&j->mu);
    }
    size_t n = r->out_len - r->out_off;
    if (n > max) n = max;
    memcpy(buf, r->out + r->out_off, n);
    r->out_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) { (void)cls; /* req owns everything; freed in completed() */ }

// ---- generation: the handler --------------------------------------------------------------

static enum MHD_Result h_generate(req *r, bool chat) {
    server *s = r->srv;
    enum MHD_Result ret = MHD_NO;
    if (atomic_load(&s->stopping)) return respond_error(r, 503, "server is shutting down", NULL);
    json_t *b = parse_body(r, &ret, false);
    if (!b) return ret;
    r->body_json = b;
    r->chat = chat;
    if (r->llama) {
        /* llama.cpp names max_tokens n_predict (-1 = until the context is full) */
        json_t *np = json_object_get(b, "n_predict");
        if (np && !json_is_integer(np)) return respond_error(r, 400, "'n_predict' must be an integer", "n_predict");
        if (np && json_integer_value(np) >= 0) json_object_set(b, "max_tokens", np);
        else if (np) json_object_set_new(b, "max_tokens", json_integer(s->cfg.max_tokens_cap));
        json_t *rt = json_object_get(b, "return_tokens");
        if (rt && !json_is_boolean(rt)) return respond_error(r, 400, "'return_tokens' must be a boolean", "return_tokens");
        r->return_tokens = json_is_true(rt);
    }
    const char *param = NULL;
    attnd_err err;
    attnd_status st = oai_parse(b, chat, &s->cfg, s->n_vocab, &r->oreq, &param, &err);
    if (st != ATTND_OK) return respond_error(r, st == ATTND_ERR_INVALID ? 400 : 500, err.msg, param);
    oai_request *q = &r->oreq;

    // ---- the prompt's tokens ----
    int32_t *ids = NULL;
    size_t n = 0;
    if (chat) {
        char *text = NULL;
        if (chat_render(s->family, q->msgs, q->n_msgs, &text, &err) != ATTND_OK)
            return respond_error(r, 400, err.msg, "messages");
        st = tok_encode(s->tok, text, strlen(text), true, true, &ids, &n, &err);
        free(text);
    } else if (q->prompt) {
        st = tok_encode(s->tok, q->prompt, strlen(q->prompt), true, true, &ids, &n, &err);
    } else {
        n = (size_t)q->n_prompt_ids;
        ids = malloc(n * sizeof(int32_t));
        if (ids) memcpy(ids, q->prompt_ids, n * sizeof(int32_t));
        else st = attnd_fail(&err, ATTND_ERR_NOMEM, "out of memory");
    }
    if (st != ATTND_OK) {
        free(ids);
        return respond_error(r, 400, err.msg, chat ? "messages" : "prompt");
    }
    const char *pname = chat ? "messages" : "prompt";
    int need = q->max_tokens == 0 ? 0 : 1;
    if (n == 0) {
        free(ids);
        return respond_error(r, 400, "the prompt is empty (no tokens)", pname);
    }
    if (n + (size_t)need > (size_t)s->n_ctx) {
        free(ids);
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "the prompt is %zu tokens but the context length is %d (%d token%s must remain for the completion)", n,
                 s->n_ctx, need, need == 1 ? "" : "s");
        return respond_error(r, 400, msg, pname);
    }
    int room = s->n_ctx - (int)n;
    int max_tokens = q->max_tokens >= 0 ? q->max_tokens : s->cfg.default_max_tokens;
    if (max_tokens > room) max_tokens = room;
    r->n_prompt = (int)n;

    // ---- the session ----
    sess *se = NULL;
    if (q->session_id) {
        if (!sess_id_valid(q->session_id)) {
            free(ids);
            return respond_error(r, 400, "'session_id' must be 1..64 characters of A-Z a-z 0-9 . _ -", "session_id");
        }
        st = sess_acquire(s->store, q->session_id, &se, &err);
        if (st != ATTND_OK) {
            free(ids);
            return respond_error(r, st == ATTND_ERR_NOT_FOUND ? 404 : 409, err.msg, "session_id");
        }
        snprintf(r->sess_id, sizeof(r->sess_id), "%s", q->session_id);
    }

    // ---- the job ----
    sched_job *j = NULL;
    bool prompt_lp = !chat && q->echo && q->logprobs >= 0;
    st = sched_job_create(&j, (int)n, max_tokens, q->logprobs, prompt_lp, &err);
    if (st != ATTND_OK) {
        free(ids);
        if (se) sess_abandon(s->store, se);
        return respond_error(r, 503, err.msg, NULL);
    }
    memcpy(j->prompt, ids, n * sizeof(int32_t));
    free(ids);
    j->sp = q->sp;
    j->bias = q->bias; /* ownership moves to the job */
    q->bias = NULL;
    j->sp.bias = j->bias;
    j->stops = q->stops;
    j->n_stops = q->n_stops;
    q->stops = NULL;
    q->n_stops = 0;
    if (chat) {
        /* the turn's end marker stops generation even where the vocabulary spells it as text */
        char **g = realloc(j->stops, (size_t)(j->n_stops + 1) * sizeof(char *));
        if (g) {
            j->stops = g;
            if ((g[j->n_stops] = strdup(chat_end_marker(s->family)))) j->n_stops++;
        }
    }
    j->se = se;
    r->job = j;
    random_id(r->resp_id, sizeof(r->resp_id), chat ? "chatcmpl-" : "cmpl-");
    r->created = time(NULL);
    if (sched_submit(s->sch, j, &err) != ATTND_OK) {
        if (se) sess_abandon(s->store, se);
        j->se = NULL;
        return respond_error(r, atomic_load(&s->stopping) ? 503 : 429, err.msg, NULL);
    }

    if (q->stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r,
                                                                      stream_free);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        add_common_headers(r, resp);
        r->status = 200;
        ret = MHD_queue_response(r->conn, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        job_wait_tick(j);
        if (!j->done && client_gone(r)) {
            pthread_mutex_unlock(&j->mu);
            atomic_store(&j->cancel, true);
            r->cancelled = true;
            return MHD_NO;
        }
    }
    json_t *o = NULL;
    int code = 200;
    char msg[300];
    if (j->status == ATTND_OK) o = final_response(r);
    else {
        code = j->status == ATTND_ERR_NOMEM || j->status == ATTND_ERR_BUSY ? 503 : 500;
        snprintf(msg, sizeof(msg), "%s", j->errmsg[0] ? j->errmsg : "generation failed");
    }
    pthread_mutex_unlock(&j->mu);
    return o ? respond_json(r, 200, o) : respond_error(r, code, msg, NULL);
}

static enum MHD_Result h_completions(req *r) { return h_generate(r, false); }
static enum MHD_Result h_llama_completion(req *r) {
    r->llama = true;
    return h_generate(r, false);
}
static enum MHD_Result h_chat(req *r) { return h_generate(r, true); }

// ---- routing ------------------------------------------------------------------------------

static const route ROUTES[] = {
    {"GET", "/health", false, false, h_health, "health"},
    {"GET", "/metrics", false, false, h_metrics, "metrics"},
    {"GET", "/v1/models", false, true, h_models, "models"},
    {"GET", "/models", false, true, h_models, "models"},
    {"POST", "/v1/completions", false, true, h_completions, "completions"},
    {"POST", "/completions", false, true, h_completions, "completions"},
    {"POST", "/completion", false, true, h_llama_completion, "llama_completion"},
    {"POST", "/v1/chat/completions", false, true, h_chat, "chat_completions"},
    {"POST", "/chat/completions", false, true, h_chat, "chat_completions"},
    {"POST", "/tokenize", false, true, h_tokenize, "tokenize"},
    {"POST", "/detokenize", false, true, h_detokenize, "detokenize"},
    {"POST", "/v1/sessions", false, true, h_sessions_create, "sessions"},
    {"GET", "/v1/sessions", false, true, h_sessions_list, "sessions"},
    {"GET", "/v1/sessions/", true, true, h_session_get, "session"},
    {"DELETE", "/v1/sessions/", true, true, h_session_delete, "session"},
};

static bool path_matches(const route *rt, const char *path) {
    if (!rt->prefix) return !strcmp(rt->path, path);
    size_t n = strlen(rt->path);
    return !strncmp(rt->path, path, n) && path[n] && !strchr(path + n, '/');
}

/* Finds the route; sets *allow to the methods the path supports (for 405). */
static const route *route_find(const char *method, const char *path, char *allow, size_t allow_n) {
    allow[0] = '\0';
    const route *hit = NULL;
    for (size_t i = 0; i < ATTND_ARRAY_LEN(ROUTES); i++) {
        if (!path_matches(&ROUTES[i], path)) continue;
        /* HEAD is GET without the body (load-balancer health checks); MHD drops the body */
        bool head_get = !strcmp(method, "HEAD") && !strcmp(ROUTES[i].method, "GET");
        if (!strcmp(ROUTES[i].method, method) || head_get) hit = &ROUTES[i];
        size_t l = strlen(allow);
        snprintf(allow + l, allow_n - l, "%s%s", l ? ", " : "", ROUTES[i].method);
    }
    return hit;
}

/* Constant-time comparison of the Authorization header with "Bearer <key>". */
static bool auth_ok(server *s, struct MHD_Connection *c) {
    if (!s->api_key || !*s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return false;
    const char *given = h + 7;
    size_t gl = strlen(given), kl = strlen(s->api_key);
    unsigned diff = (unsigned)(gl ^ kl);
    /* always walk the whole key: the time does not depend on where a mismatch is */
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)s->api_key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

static enum MHD_Result preflight(req *r) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    add_common_headers(r, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    r->status = 204;
    enum MHD_Result ret = MHD_queue_response(r->conn, 204, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Checks done before the body is read: route, method, auth, Content-Length. Returns MHD_YES
 * to continue reading, or the result of a queued error response (*done set). */
static enum MHD_Result precheck(req *r, bool *done) {
    server *s = r->srv;
    *done = true;
    if (!strcmp(r->method, "OPTIONS") && s->cors) return preflight(r);
    char allow[64];
    r->rt = route_find(r->method, r->path, allow, sizeof(allow));
    if (!r->rt && !allow[0]) {
        char msg[220];
        snprintf(msg, sizeof(msg), "no endpoint %.160s", r->path);
        return respond_error(r, 404, msg, NULL);
    }
    if (strcmp(r->path, "/health") && !auth_ok(s, r->conn))
        return respond_error(r, 401, "missing or invalid API key (Authorization: Bearer ...)", NULL);
    if (!r->rt) {
        char msg[320];
        snprintf(msg, sizeof(msg), "method %s is not allowed on %.120s (allowed: %s)", r->method, r->path, allow);
        return respond_json_h(r, 405, oai_error(405, msg, NULL), "Allow", allow);
    }
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (errno || end == cl || v > s->cfg.body_limit) {
            char msg[160];
            snprintf(msg, sizeof(msg), "request body too large (limit %zu bytes)", s->cfg.body_limit);
            r->too_big = true;
            return respond_error(r, 413, msg, NULL);
        }
    }
    *done = false;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *s = cls;
    req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r) return MHD_NO;
        *con_cls = r;
        atomic_fetch_add(&s->in_flight, 1);
        r->srv = s;
        r->conn = c;
        r->t0 = now_s();
        snprintf(r->method, sizeof(r->method), "%s", method);
        snprintf(r->path, sizeof(r->path), "%s", url);
        if (strlen(url) >= sizeof(r->path)) r->path[sizeof(r->path) - 2] = '~'; /* never matches a route */
        bool done;
        enum MHD_Result ret = precheck(r, &done);
        if (done) r->rt = NULL;
        return ret;
    }
    if (r->status) { /* an early response is queued: discard whatever body still arrives */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_big || r->len + n > s->cfg.body_limit) {
            /* answer now instead of reading an endless chunked upload; MHD closes the
             * connection after the response since the body was not consumed */
            r->too_big = true;
            char msg[160];
            snprintf(msg, sizeof(msg), "request body too large (limit %zu bytes)", s->cfg.body_limit);
            return respond_error(r, 413, msg, NULL);
        }
        if (r->len + n + 1 > r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 4096;
            while (cap < r->len + n + 1) cap *= 2;
            if (cap > s->cfg.body_limit + 1) cap = s->cfg.body_limit + 1;
            char *g = realloc(r->body, cap);
            if (!g) return MHD_NO;
            r->body = g;
            r->cap = cap;
        }
        memcpy(r->body + r->len, upload, n);
        r->len += n;
        r->body[r->len] = '\0';
        return MHD_YES;
    }
    if (r->too_big) {
        char msg[160];
        snprintf(msg, sizeof(msg), "request body too large (limit %zu bytes)", s->cfg.body_limit);
        return respond_error(r, 413, msg, NULL);
    }
    if (!r->rt) return respond_error(r, 404, "no such endpoint", NULL);
    if (r->rt->needs_model && !atomic_load(&s->ready)) return respond_error(r, 503, "model is loading", NULL);
    return r->rt->fn(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    server *s = cls;
    req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    double dt = now_s() - r->t0;
    if (r->job) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || r->cancelled) {
            if (!atomic_exchange(&r->job->cancel, true) || r->cancelled)
                slog_info("client disconnected from %s %s; sequence cancelled", r->method, r->path);
            r->cancelled = true;
        }
        pthread_mutex_lock(&r->job->mu);
        r->n_gen = r->job->n_generated;
        bool done = r->job->done;
        pthread_mutex_unlock(&r->job->mu);
        if (r->sess_id[0] && done) {
            attnd_err err;
            if (sess_persist(s->store, r->sess_id, &err) != ATTND_OK) slog_error("%s", err.msg);
        }
    }
    int status = r->status ? r->status : 500;
    if (r->cancelled) status = 499; /* nginx's "client closed request" */
    metrics_request(s->met, r->rt ? r->rt->label : "other", status, dt);
    if (s->cfg.access_log)
        slog_info("%s %s %d prompt=%d gen=%d %.3fs", r->method, r->path, status, r->n_prompt, r->n_gen, dt);
    sched_job_unref(r->job);
    oai_request_free(&r->oreq);
    json_decref(r->body_json);
    free(r->body);
    free(r->out);
    free(r);
    atomic_fetch_sub(&s->in_flight, 1);
}

// ---- lifecycle ----------------------------------------------------------------------------

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static void status_hook(server *s, const char *msg) {
    if (s->cfg.hooks.on_status) s->cfg.hooks.on_status(s->cfg.hooks.user, msg);
}

attnd_status server_create(server **out, const server_settings *cfg, attnd_err *err) {
    *out = NULL;
    server *s = calloc(1, sizeof(*s));
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    s->host = dup_or_null(cfg->host ? cfg->host : "127.0.0.1");
    s->model_path = dup_or_null(cfg->model_path);
    s->model_alias = dup_or_null(cfg->model_alias);
    s->state_dir = dup_or_null(cfg->state_dir);
    s->api_key = dup_or_null(cfg->api_key);
    s->cors = cfg->cors_origins && *cfg->cors_origins ? strdup(cfg->cors_origins) : NULL;
    s->chat_template = dup_or_null(cfg->chat_template);
    s->cfg.host = s->host;
    s->cfg.model_path = s->model_path;
    s->cfg.model_alias = s->model_alias;
    s->cfg.state_dir = s->state_dir;
    s->cfg.api_key = s->api_key;
    s->cfg.cors_origins = s->cors;
    s->cfg.chat_template = s->chat_template;
    if (s->cfg.body_limit == 0) s->cfg.body_limit = 1u << 20;
    if (s->cfg.max_tokens_cap <= 0) s->cfg.max_tokens_cap = 4096;
    if (s->cfg.default_max_tokens <= 0) s->cfg.default_max_tokens = 256;
    attnd_status rc = metrics_create(&s->met, err);
    if (rc != ATTND_OK) goto fail;
    if (!s->model_path) {
        rc = attnd_fail(err, ATTND_ERR_INVALID, "no model path given");
        goto fail;
    }
    if (cfg->port < 0 || cfg->port > 65535) {
        rc = attnd_fail(err, ATTND_ERR_INVALID, "port %d is outside 0..65535", cfg->port);
        goto fail;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof(port), "%d", cfg->port);
    int gai = getaddrinfo(s->host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        rc = attnd_fail(err, ATTND_ERR_INVALID, "cannot resolve host '%s': %s", s->host, gai_strerror(gai));
        goto fail;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(cfg->request_timeout_s > 0 ? cfg->request_timeout_s : 30),
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(cfg->max_connections > 0 ? cfg->max_connections : 256),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, 1,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        rc = attnd_fail(err, ATTND_ERR_IO, "cannot listen on %s:%d (address in use or not permitted?)", s->host,
                        cfg->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return ATTND_OK;
fail:
    server_destroy(s);
    return rc;
}

int server_port(const server *s) { return s->port; }

attnd_status server_load(server *s, attnd_err *err) {
    status_hook(s, "loading model");
    attnd_status rc = model_load(&s->m, s->model_path, err);
    if (rc != ATTND_OK) return rc;
    if ((rc = tok_load(&s->tok, model_gguf(s->m), err)) != ATTND_OK) return rc;
    const model_info *mi = model_info_get(s->m);
    s->n_vocab = mi->n_vocab;
    s->n_ctx = s->cfg.ctx_size > 0 && s->cfg.ctx_size < mi->n_ctx ? s->cfg.ctx_size : mi->n_ctx;
    // ---- model id: alias, else the file name without .gguf ----
    const char *base = strrchr(s->model_path, '/');
    base = base ? base + 1 : s->model_path;
    s->model_id = strdup(s->model_alias ? s->model_alias : base);
    if (!s->model_id) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    size_t l = strlen(s->model_id);
    if (!s->model_alias && l > 5 && !strcmp(s->model_id + l - 5, ".gguf")) s->model_id[l - 5] = '\0';
    // ---- chat template ----
    if (s->chat_template && *s->chat_template) {
        if ((rc = chat_family_from_name(s->chat_template, &s->family, err)) != ATTND_OK) return rc;
    } else {
        const char *tmpl = NULL;
        gguf_get_str(model_gguf(s->m), "tokenizer.chat_template", &tmpl, NULL);
        if (!chat_detect(tmpl, &s->family))
            slog_warn("%s; using ChatML (set chat_template to override)",
                      tmpl && *tmpl ? "unrecognised chat template in the model" : "the model has no chat template");
    }
    // ---- sessions: the model tag ties saved token ids to this vocabulary ----
    char tag[200];
    snprintf(tag, sizeof(tag), "%s/vocab%d", s->model_id, s->n_vocab);
    if ((rc = sess_store_create(&s->store, s->state_dir, tag, s->cfg.max_sessions, err)) != ATTND_OK) return rc;
    if ((rc = sched_create(&s->sch, s->m, s->tok, s->store, &s->cfg, err)) != ATTND_OK) return rc;
    atomic_store(&s->ready, true);
    slog_info("model ready: %s (%s, %d layers, vocab %d, context %d, chat template %s, %d sessions restored)",
              s->model_id, mi->arch, mi->n_layer, mi->n_vocab, s->n_ctx, chat_family_name(s->family),
              sess_count(s->store));
    status_hook(s, "ready");
    if (s->cfg.hooks.on_ready) s->cfg.hooks.on_ready(s->cfg.hooks.user);
    return ATTND_OK;
}

/* Waits until no request is in flight and the scheduler is idle, or timeout_ms passed. */
static bool drain(server *s, int timeout_ms) {
    double end = now_s() + timeout_ms / 1e3;
    for (;;) {
        bool idle = atomic_load(&s->in_flight) == 0 && (!s->sch || sched_wait_idle(s->sch, 0));
        if (idle) return true;
        if (now_s() >= end) return false;
        usleep(10 * 1000);
    }
}

void server_shutdown(server *s) {
    if (!s || s->shut_down) return;
    s->shut_down = true;
    atomic_store(&s->stopping, true);
    if (s->cfg.hooks.on_stopping) s->cfg.hooks.on_stopping(s->cfg.hooks.user);
    status_hook(s, "stopping");
    if (s->d) {
        /* stop accepting; connections already open finish their requests */
        MHD_socket fd = MHD_quiesce_daemon(s->d);
        if (fd != MHD_INVALID_SOCKET) close(fd);
    }
    /* drain: every request already received finishes (new ones get 503), within the timeout;
     * then what is left is cancelled and gets a short grace to send its final chunk */
    int ms = (s->cfg.shutdown_timeout_s > 0 ? s->cfg.shutdown_timeout_s : 10) * 1000;
    if (!drain(s, ms)) {
        slog_warn("shutdown: in-flight requests did not finish in %d s; cancelling them", ms / 1000);
        if (s->sch) sched_cancel_all(s->sch);
        drain(s, 2000);
    }
    if (s->d) {
        MHD_stop_daemon(s->d);
        s->d = NULL;
    }
    if (s->store) {
        int fails = sess_persist_all(s->store);
        if (fails) slog_error("shutdown: %d sessions could not be saved", fails);
    }
    sched_destroy(s->sch);
    s->sch = NULL;
    slog_info("stopped");
}

void server_destroy(server *s) {
    if (!s) return;
    server_shutdown(s);
    sess_store_destroy(s->store);
    tok_destroy(s->tok);
    model_destroy(s->m);
    metrics_destroy(s->met);
    free(s->model_id);
    free(s->host);
    free(s->model_path);
    free(s->model_alias);
    free(s->state_dir);
    free(s->api_key);
    free(s->cors);
    free(s->chat_template);
    free(s);
}
