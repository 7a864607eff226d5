/*
 * stress_server.c — the server's threads meeting, for ThreadSanitizer: several request threads
 * (libmicrohttpd runs one per connection) send whole and streamed completions, session turns,
 * Responses API turns and /metrics scrapes through the request layer at once (the transport is a
 * recorder, as in test_server_request.c), while the scheduler thread batches them on the engine's
 * worker pool and the session store persists to a state directory. The same server also listens
 * on a loopback port, and each thread sends requests over real sockets too, so libmicrohttpd's
 * connection threads, the connection tracker and its watchdog take part: a whole streamed chat,
 * /health, and a streamed completion whose client hangs up mid-stream (its job is cancelled on the
 * scheduler thread from the connection's).
 *
 * A plain program, not a Criterion suite: Criterion's runner cannot start under ThreadSanitizer
 * (its inheritable arena is placed where TSan keeps its shadow memory: Snaipe/Criterion#274). It
 * exits 0 when every answer was right, 1 with the first wrong one; ctest runs it in every build,
 * and `scripts/dev.sh test` also under -DATTND_TSAN=ON, where a race ends it with TSan's report.
 *
 *   stress_server MODEL.gguf [ROUNDS]     (redis-server must be on PATH: scripts/dev.sh installs it)
 */
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
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

// ---- over a real socket (libmicrohttpd's threads) ---------------------------------------------

/* One HTTP/1.1 request (Connection: close) to the listening server; the answer's bytes, up to
 * cap - 1, go to out (NUL-terminated). leave_early: the client closes its socket once the first
 * bytes of the answer are in. Returns the answer's status, -1 when the exchange failed. */
static int over_socket(const char *method, const char *path, const char *body, bool leave_early, char *out,
                       size_t cap) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = 120};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)server_port(srv))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char head[512];
    size_t n_body = body ? strlen(body) : 0;
    int hn = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      method, path, server_port(srv), n_body);
    size_t got = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && send(fd, head, (size_t)hn, MSG_NOSIGNAL) == hn &&
        (!n_body || send(fd, body, n_body, MSG_NOSIGNAL) == (ssize_t)n_body)) {
        for (ssize_t r; got + 1 < cap && (r = recv(fd, out + got, cap - 1 - got, 0)) > 0;) {
            got += (size_t)r;
            out[got] = '\0';
            if (leave_early && strstr(out, "data: ")) break;
        }
    }
    out[got] = '\0';
    close(fd);
    int status = -1;
    if (sscanf(out, "HTTP/1.1 %d", &status) != 1) status = -1;
    return status;
}

static void socket_requests(void) {
    enum { CAP = 16384 };
    char *b = malloc(CAP);
    if (!b) abort();
    int st = over_socket("POST", "/v1/chat/completions",
                         "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"stream\": true, "
                         "\"max_tokens\": 8}",
                         false, b, CAP);
    if (st != 200 || !strstr(b, "data: [DONE]")) failf("socket: streamed chat: status %d, %.200s", st, b);
    st = over_socket("GET", "/health", NULL, false, b, CAP);
    if (st != 200) failf("socket: /health: status %d, %.200s", st, b);
    /* long enough to be still running when the client leaves */
    st = over_socket("POST", "/v1/completions",
                     "{\"prompt\": \"Once upon a time\", \"stream\": true, \"max_tokens\": 200}", true, b,
                     CAP);
    if (st != 200) failf("socket: streamed completion left early: status %d, %.200s", st, b);
    free(b);
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    for (int round = 0; round < rounds; round++) {
        char *text = greedy_text();
        if (strcmp(text, reference))
            failf("thread %d: greedy text differs under load: '%s' vs '%s'", t, text, reference);
        free(text);
        streamed_chat();
        socket_requests();
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

static bool open_server(const char *model_path, const char *session_store) {
    attnd_err err;
    if (!(srv = rig_open_ex(model_path, state_dir, 2, true, session_store, &err))) {
        fprintf(stderr, "stress_server: %s\n", err.msg);
        return false;
    }
    srv->cfg.access_log = false;
    return true;
}

static void close_server(void) { server_destroy(srv); /* drains, persists every session */ }

/* Every thread's rounds on srv; false when a thread could not start. */
static bool run_threads(void) {
    reference = greedy_text();
    pthread_t th[N_THREADS];
    int started = 0;
    for (int t = 0; t < N_THREADS; t++) started += pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0;
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    free(reference);
    return started == N_THREADS;
}

// ---- a redis-server of its own -----------------------------------------------------------------

static bool port_answers(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* Starts redis-server (no persistence) on a free port in 20000-31999, below Linux's ephemeral
 * range; its pid in *pid, the port returned (0 when it did not start). */
static int redis_start(pid_t *pid) {
    srand((unsigned)getpid() ^ (unsigned)time(NULL));
    int port = 0;
    for (int tries = 0; tries < 200 && !port; tries++) {
        int p = 20000 + rand() % 12000, fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0) port = p;
        if (fd >= 0) close(fd);
    }
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    if (!port || (*pid = fork()) < 0) return 0;
    if (*pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--save", "", "--appendonly",
               "no", "--dir", "/tmp", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500 && !port_answers(port); i++) {
        if (waitpid(*pid, NULL, WNOHANG) != 0) return 0; /* it exited: not installed, or the port was taken */
        usleep(10000);
    }
    return port_answers(port) ? port : 0;
}

static void redis_stop(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: stress_server MODEL.gguf [ROUNDS]\n");
        return 2;
    }
    if (argc > 2) rounds = atoi(argv[2]) > 0 ? atoi(argv[2]) : rounds;
    slog_set_level(SERVER_LOG_WARN);
    snprintf(state_dir, sizeof(state_dir), "/tmp/attnd-stress-XXXXXX");
    if (!mkdtemp(state_dir) || !open_server(argv[1], NULL)) return 1;
    if (!run_threads()) failf("could not start %d threads", N_THREADS);
    close_server();
    pid_t rpid = 0;
    int rport = redis_start(&rpid);
    if (!rport) failf("redis-server did not start (is it installed? scripts/dev.sh test installs it)");
    else {
        char url[64];
        snprintf(url, sizeof(url), "redis://127.0.0.1:%d", rport);
        if (!open_server(argv[1], url)) failf("no server on the Redis session store %s", url);
        else {
            if (!run_threads()) failf("could not start %d threads", N_THREADS);
            close_server();
        }
    }
    redis_stop(rpid);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state_dir);
    if (system(cmd) != 0) fprintf(stderr, "stress_server: could not remove %s\n", state_dir);
    printf("stress_server: %d threads x %d rounds, file and Redis session stores, %d failures\n", N_THREADS, rounds,
           failures);
    return failures ? 1 : 0;
}
