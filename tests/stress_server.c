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

#include "server_rig.h"

#define N_THREADS 4

static struct server *srv;
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

typedef rig_rec rec;

static void run(rec *c, const char *method, const char *url, const char *body) {
    *c = (rec){0};
    rig_run(srv, c, method, url, body);
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
    json_t *j =
        post("/v1/completions", "{\"prompt\": \"Once upon a time\", \"temperature\": 0, \"max_tokens\": 12}", 200);
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
        snprintf(body, sizeof(body),
                 "{\"input\": \"more\", \"previous_response_id\": \"%s\", \"max_output_tokens\": 4}", id);
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
        if (strcmp(text, reference))
            failf("thread %d: greedy text differs under load: '%s' vs '%s'", t, text, reference);
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
    if (!(srv = rig_open(model_path, state_dir, 2, &err))) {
        fprintf(stderr, "stress_server: %s\n", err.msg);
        return false;
    }
    srv->cfg.access_log = false;
    return true;
}

static void close_server(void) { server_destroy(srv); /* drains, persists every session */ }

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
