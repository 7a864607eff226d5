/*
 * stress_server.c — the server's threads meeting, for ThreadSanitizer: several request threads
 * (libmicrohttpd runs one per connection) send whole and streamed completions, session turns,
 * Responses API turns and /metrics scrapes through the request layer at once (the transport is a
 * recorder, as in test_server_request.c), while the scheduler thread batches them on the engine's
 * worker pool and the session store persists to a state directory.
 *
 * A plain program, not a Criterion suite: Criterion's runner cannot start under ThreadSanitizer
 * (its inheritable arena is placed where TSan keeps its shadow memory: Snaipe/Criterion#274). It
 * exits 0 when every answer was right, 1 with the first wrong one; ctest runs it in every build,
 * and `scripts/dev.sh test` also under -DATTND_TSAN=ON, where a race ends it with TSan's report.
 *
 *   stress_server MODEL.gguf [ROUNDS]
 */
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/engine.h"
#include "attnd/tokenizer.h"
#include "http.h"
#include "routes.h"
#include "slog.h"

#define N_THREADS 4

static struct server srv;
static int rounds = 3;
static char state_dir[64];
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;
static int failures;

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&fail_mu);
    fprintf(stderr, "stress_server: FAIL: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    failures++;
    pthread_mutex_unlock(&fail_mu);
    va_end(ap);
}

// ---- the recorder (one per request) -------------------------------------------------------

typedef struct rec {
    int status;
    char *body;
    size_t len;
} rec;

static void append(rec *c, const char *p, size_t n) {
    char *g = realloc(c->body, c->len + n + 1);
    if (!g) abort();
    c->body = g;
    memcpy(c->body + c->len, p, n);
    c->len += n;
    c->body[c->len] = '\0';
}

static enum MHD_Result on_reply(req *r, int status, const char *body, size_t len, const http_header *h, int n) {
    (void)h, (void)n;
    rec *c = r->io->user;
    c->status = status;
    append(c, body, len);
    return MHD_YES;
}

static enum MHD_Result on_stream(req *r, int status, http_reader reader, void *cls, const http_header *h, int n) {
    (void)h, (void)n;
    rec *c = r->io->user;
    c->status = status;
    append(c, "", 0);
    char chunk[256];
    for (uint64_t pos = 0;;) {
        ssize_t got = reader(cls, pos, chunk, sizeof(chunk));
        if (got < 0) break;
        append(c, chunk, (size_t)got);
        pos += (uint64_t)got;
    }
    return MHD_YES;
}

static const char *no_header(req *r, const char *name) { return (void)r, (void)name, NULL; }
static bool never_gone(req *r) { return (void)r, false; }

/* Runs one request to its end; the answer is in *c (caller frees c->body). */
static void run(rec *c, const char *method, const char *url, const char *body) {
    *c = (rec){0};
    req_io io = {on_reply, on_stream, no_header, never_gone, c};
    req *r = http_req_create(&srv, method, url, &io);
    if (!r) abort();
    http_req_run(r, body, body ? strlen(body) : 0);
    http_req_end(r, MHD_REQUEST_TERMINATED_COMPLETED_OK);
}

/* POSTs body and returns the JSON answer when its status is want (NULL, logged, otherwise). */
static json_t *post(const char *url, const char *body, int want) {
    rec c;
    run(&c, "POST", url, body);
    json_t *j = c.status == want ? json_loads(c.body ? c.body : "", 0, NULL) : NULL;
    if (!j) failf("%s %s: status %d (want %d): %.200s", url, body, c.status, want, c.body ? c.body : "");
    free(c.body);
    return j;
}

// ---- what each thread does ----------------------------------------------------------------

/* The greedy completion of the shared prompt, as every thread must see it. */
static char *reference;

static char *greedy_text(void) {
    json_t *j = post("/v1/completions", "{\"prompt\": \"Once upon a time\", \"temperature\": 0, \"max_tokens\": 12}", 200);
    const char *t = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    char *copy = strdup(t ? t : "");
    json_decref(j);
    return copy;
}

/* A streamed chat: it must end with [DONE]. */
static void streamed_chat(void) {
    rec c;
    run(&c, "POST", "/v1/chat/completions",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story\"}], \"stream\": true, \"max_tokens\": 10}");
    if (c.status != 200 || !c.body || !strstr(c.body, "data: [DONE]\n\n"))
        failf("streamed chat: status %d, %.200s", c.status, c.body ? c.body : "");
    free(c.body);
}

/* Two turns on the thread's own session: its history grows by what each turn read and wrote. */
static void session_turns(int t, int round) {
    char body[256], url[64];
    snprintf(body, sizeof(body), "{\"id\": \"s%d-%d\"}", t, round);
    json_decref(post("/v1/sessions", body, 200));
    long long total = 0;
    for (int turn = 0; turn < 2; turn++) {
        snprintf(body, sizeof(body), "{\"prompt\": \" and then\", \"session_id\": \"s%d-%d\", \"max_tokens\": 5}", t,
                 round);
        json_t *j = post("/v1/completions", body, 200);
        json_t *u = json_object_get(j, "usage");
        total += json_integer_value(json_object_get(u, "prompt_tokens")) +
                 json_integer_value(json_object_get(u, "completion_tokens")) -
                 json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
        json_decref(j);
    }
    rec c;
    snprintf(url, sizeof(url), "/v1/sessions/s%d-%d", t, round);
    run(&c, "GET", url, NULL);
    json_t *s = c.status == 200 ? json_loads(c.body, 0, NULL) : NULL;
    if (!s || json_integer_value(json_object_get(s, "tokens")) < total / 2)
        failf("%s: status %d, %.200s (expected about %lld tokens)", url, c.status, c.body ? c.body : "", total);
    json_decref(s);
    free(c.body);
    run(&c, "DELETE", url, NULL); /* its KV goes back to the scheduler thread */
    if (c.status != 200) failf("DELETE %s: status %d", url, c.status);
    free(c.body);
}

/* DELETE /v1/responses/<id of the Response object j>: the last of a chain takes its session along. */
static void delete_response(json_t *j) {
    const char *id = json_string_value(json_object_get(j, "id"));
    if (!id) return;
    char url[128];
    snprintf(url, sizeof(url), "/v1/responses/%s", id);
    rec c;
    run(&c, "DELETE", url, NULL);
    if (c.status != 200) failf("DELETE %s: status %d", url, c.status);
    free(c.body);
}

/* A stored response and its follow-up, then both deleted. */
static void response_chain(void) {
    json_t *a = post("/v1/responses", "{\"input\": \"Hello there\", \"max_output_tokens\": 4}", 200), *b = NULL;
    const char *id = json_string_value(json_object_get(a, "id"));
    if (id) {
        char body[200];
        snprintf(body, sizeof(body), "{\"input\": \"more\", \"previous_response_id\": \"%s\", \"max_output_tokens\": 4}",
                 id);
        b = post("/v1/responses", body, 200);
    }
    delete_response(a);
    delete_response(b);
    json_decref(a);
    json_decref(b);
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    for (int round = 0; round < rounds; round++) {
        char *text = greedy_text();
        if (strcmp(text, reference)) failf("thread %d: greedy text differs under load: '%s' vs '%s'", t, text, reference);
        free(text);
        streamed_chat();
        session_turns(t, round);
        response_chain();
        rec c;
        run(&c, "GET", "/metrics", NULL);
        if (c.status != 200 || !c.body || !strstr(c.body, "attnd_")) failf("/metrics: status %d", c.status);
        free(c.body);
    }
    return NULL;
}

// ---- the server without a port ------------------------------------------------------------

static bool open_server(const char *model_path) {
    attnd_err err;
    server_settings_default(&srv.cfg);
    srv.routes = http_routes;
    srv.n_routes = http_n_routes;
    srv.cfg.threads = 2;
    srv.cfg.max_parallel = 4;
    srv.cfg.access_log = false;
    srv.cfg.state_dir = state_dir;
    if (metrics_create(&srv.met, &err) != ATTND_OK || model_load(&srv.m, model_path, &err) != ATTND_OK ||
        tok_load(&srv.tok, model_gguf(srv.m), &err) != ATTND_OK ||
        sess_store_create(&srv.store, state_dir, "stress", 64, &err) != ATTND_OK ||
        rstore_create(&srv.responses, state_dir, "stress", 64, &err) != ATTND_OK ||
        sched_create(&srv.sch, srv.m, srv.tok, srv.store, &srv.cfg, &err) != ATTND_OK) {
        fprintf(stderr, "stress_server: %s\n", err.msg);
        return false;
    }
    srv.model_id = "stress";
    srv.n_ctx = model_info_get(srv.m)->n_ctx;
    srv.n_vocab = model_info_get(srv.m)->n_vocab;
    atomic_store(&srv.ready, true);
    return true;
}

static void close_server(void) {
    sess_persist_all(srv.store);
    sched_destroy(srv.sch);
    rstore_destroy(srv.responses);
    sess_store_destroy(srv.store);
    tok_destroy(srv.tok);
    model_destroy(srv.m);
    metrics_destroy(srv.met);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: stress_server MODEL.gguf [ROUNDS]\n");
        return 2;
    }
    if (argc > 2) rounds = atoi(argv[2]) > 0 ? atoi(argv[2]) : rounds;
    slog_set_level(SERVER_LOG_WARN);
    snprintf(state_dir, sizeof(state_dir), "/tmp/attnd-stress-XXXXXX");
    if (!mkdtemp(state_dir) || !open_server(argv[1])) return 1;
    reference = greedy_text();
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    free(reference);
    close_server();
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state_dir);
    if (system(cmd) != 0) fprintf(stderr, "stress_server: could not remove %s\n", state_dir);
    printf("stress_server: %d threads x %d rounds, %d failures\n", N_THREADS, rounds, failures);
    return failures ? 1 : 0;
}
