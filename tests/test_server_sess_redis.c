/*
 * test_server_sess_redis.c — the shared session store: the Redis client (server/runtime/
 * sess_redis.c) and the session store's shared mode on top of it (sess.c), two stores standing in
 * for two attnd instances.
 *
 * The first tests need no Redis (URL, record encoding). The others start their own redis-server
 * (Debian's redis-server package, installed by scripts/dev.sh) on a free loopback port, with no
 * persistence, and stop it by its PID; a missing redis-server fails the test with a message. KV
 * handles are fake non-NULL pointers, as in test_server_sess.c: the store never dereferences them.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sess.h"
#include "sess_redis.h"
#include "slog.h"

#define MODEL "m/vocab64"

// ---- pure: no Redis ---------------------------------------------------------------------------

Test(sess_redis, urls_are_parsed_and_mistakes_named) {
    char host[64];
    int port, db;
    attnd_err err;
    cr_assert_eq(sess_redis_url_parse("redis://127.0.0.1:6380/2", host, sizeof(host), &port, &db, &err), ATTND_OK);
    cr_assert_str_eq(host, "127.0.0.1");
    cr_assert_eq(port, 6380);
    cr_assert_eq(db, 2);
    cr_assert_eq(sess_redis_url_parse("redis://cache.internal", host, sizeof(host), &port, &db, &err), ATTND_OK);
    cr_assert_str_eq(host, "cache.internal");
    cr_assert_eq(port, 6379, "the default port");
    cr_assert_eq(db, 0);
    const char *bad[] = {"127.0.0.1:6379", "redis://", "redis://:6379", "redis://h:0", "redis://h:70000",
                         "redis://h:12x", "redis://h/x", "redis://user:pw@h", "redis://h:1/2/3", "http://h"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        cr_assert_eq(sess_redis_url_parse(bad[i], host, sizeof(host), &port, &db, &err), ATTND_ERR_INVALID, "%s", bad[i]);
        cr_assert(strstr(err.msg, "session_store"), "%s", err.msg);
    }
    cr_assert_eq(sess_redis_url_parse("redis://a-very-long-host-name-indeed.example", host, 8, &port, &db, &err),
                 ATTND_ERR_INVALID, "a host longer than the buffer");
}

Test(sess_redis, records_round_trip_and_name_their_owner_and_id) {
    int32_t toks[] = {1, 415, 0, 2147483647};
    sess_redis_rec rec = {.version = 7, .created_ms = 1000, .last_use_ms = 2000, .tokens = toks, .n_tokens = 4};
    char *text = sess_redis_rec_encode("ab12", "chat-1", MODEL, &rec);
    cr_assert_not_null(text);
    sess_redis_rec back;
    attnd_err err;
    cr_assert_eq(sess_redis_rec_decode("7", text, strlen(text), "ab12", "chat-1", MODEL, &back, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(back.version, 7);
    cr_assert_eq(back.created_ms, 1000);
    cr_assert_eq(back.last_use_ms, 2000);
    cr_assert_eq(back.n_tokens, 4);
    cr_assert_arr_eq(back.tokens, toks, sizeof(toks));
    sess_redis_rec_free(&back);
    /* the key's owner and id must be the record's: a record copied under another key is damaged */
    cr_assert_eq(sess_redis_rec_decode("7", text, strlen(text), "cd34", "chat-1", MODEL, &back, &err), ATTND_ERR_FORMAT);
    cr_assert_eq(sess_redis_rec_decode("7", text, strlen(text), NULL, "chat-1", MODEL, &back, &err), ATTND_ERR_FORMAT);
    cr_assert_eq(sess_redis_rec_decode("7", text, strlen(text), "ab12", "chat-2", MODEL, &back, &err), ATTND_ERR_FORMAT);
    cr_assert_eq(sess_redis_rec_decode("7", text, strlen(text), "ab12", "chat-1", "other/vocab9", &back, &err),
                 ATTND_ERR_UNSUPPORTED, "another model's record");
    const char *versions[] = {"", "0", "x", "7x", "-1", NULL};
    for (size_t i = 0; i < sizeof(versions) / sizeof(*versions); i++)
        cr_assert_eq(sess_redis_rec_decode(versions[i], text, strlen(text), "ab12", "chat-1", MODEL, &back, &err),
                     ATTND_ERR_FORMAT, "version '%s'", versions[i] ? versions[i] : "(null)");
    cr_assert_eq(sess_redis_rec_decode("7", "{\"format\":", 10, "ab12", "chat-1", MODEL, &back, &err), ATTND_ERR_FORMAT);
    cr_assert_eq(sess_redis_rec_decode("7", NULL, 0, "ab12", "chat-1", MODEL, &back, &err), ATTND_ERR_FORMAT);
    free(text);
    rec.n_tokens = 0;
    text = sess_redis_rec_encode(NULL, "empty", MODEL, &rec);
    cr_assert_eq(sess_redis_rec_decode("1", text, strlen(text), "", "empty", MODEL, &back, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(back.n_tokens, 0);
    sess_redis_rec_free(&back);
    free(text);
}

// ---- a real redis-server ----------------------------------------------------------------------

static pid_t redis_pid;
static int redis_port;
static char redis_url[64];

/* A free loopback port below Linux's ephemeral range (32768-60999): no outgoing connection of
 * this machine can take it between this check and redis-server's bind. */
static int free_port(void) {
    srand((unsigned)getpid() ^ (unsigned)time(NULL));
    for (int tries = 0; tries < 200; tries++) {
        int port = 20000 + rand() % 12000, fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (fd >= 0) close(fd);
        if (ok) return port;
    }
    cr_assert_fail("no free loopback port in 20000..31999");
    return 0;
}

static bool port_answers(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

static void redis_start(void) {
    char port[16];
    snprintf(port, sizeof(port), "%d", redis_port);
    redis_pid = fork();
    cr_assert(redis_pid >= 0);
    if (redis_pid == 0) {
        freopen("/dev/null", "w", stdout);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", "/tmp", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500 && !port_answers(redis_port); i++) {
        int st;
        cr_assert_eq(waitpid(redis_pid, &st, WNOHANG), 0, "redis-server did not start (is it installed? scripts/dev.sh installs it)");
        usleep(10000);
    }
    cr_assert(port_answers(redis_port), "redis-server not listening on %d", redis_port);
}

static void redis_stop(void) {
    if (redis_pid <= 0) return;
    kill(redis_pid, SIGKILL);
    waitpid(redis_pid, NULL, 0);
    redis_pid = 0;
}

static void with_redis(void) {
    slog_set_level(SERVER_LOG_ERROR);
    redis_port = free_port();
    snprintf(redis_url, sizeof(redis_url), "redis://127.0.0.1:%d", redis_port);
    redis_start();
}

TestSuite(shared, .init = with_redis, .fini = redis_stop);

static sess_redis *client(const char *prefix) {
    sess_redis *r;
    attnd_err err;
    cr_assert_eq(sess_redis_create(&r, redis_url, prefix, 60, MODEL, &err), ATTND_OK, "%s", err.msg);
    return r;
}

static sess_redis_rec rec_of(uint64_t v, int32_t *toks, int n) {
    return (sess_redis_rec){.version = v, .created_ms = 5, .last_use_ms = 6, .tokens = toks, .n_tokens = n};
}

Test(shared, a_write_names_the_version_it_read_and_exactly_one_racer_wins) {
    sess_redis *r = client("t1:");
    attnd_err err;
    int32_t a[] = {1, 2, 3}, b[] = {1, 2, 9};
    sess_redis_rec v1 = rec_of(1, NULL, 0), v2a = rec_of(2, a, 3), v2b = rec_of(2, b, 3), got;
    cr_assert_eq(sess_redis_put(r, "", "s", 0, &v1, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_redis_put(r, "", "s", 0, &v1, &err), ATTND_ERR_BUSY,
                 "another create of the same id, even with the very same record (same millisecond)");
    sess_redis_rec other = rec_of(1, a, 1);
    cr_assert_eq(sess_redis_put(r, "", "s", 0, &other, &err), ATTND_ERR_BUSY, "the id is taken");
    cr_assert(strstr(err.msg, "already exists"), "%s", err.msg);
    /* two turns read version 1; the first write wins, the second is refused, nothing merged */
    cr_assert_eq(sess_redis_put(r, "", "s", 1, &v2a, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_redis_put(r, "", "s", 1, &v2b, &err), ATTND_ERR_BUSY);
    cr_assert(strstr(err.msg, "another request"), "%s", err.msg);
    cr_assert_eq(sess_redis_get(r, "", "s", &got, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(got.version, 2);
    cr_assert_eq(got.n_tokens, 3);
    cr_assert_arr_eq(got.tokens, a, sizeof(a), "the winner's history, untouched");
    sess_redis_rec_free(&got);
    /* owners: the same id under another key is another session */
    cr_assert_eq(sess_redis_get(r, "ab12", "s", &got, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(sess_redis_delete(r, "", "s", &err), ATTND_OK);
    cr_assert_eq(sess_redis_delete(r, "", "s", &err), ATTND_ERR_NOT_FOUND);
    sess_redis_rec v3 = rec_of(3, a, 3);
    cr_assert_eq(sess_redis_put(r, "", "s", 2, &v3, &err), ATTND_ERR_NOT_FOUND, "a turn on a deleted session");
    sess_redis_destroy(r);
}

Test(shared, an_unreachable_store_is_an_io_error_and_recovers_by_itself) {
    sess_redis *r = client("t2:");
    attnd_err err;
    sess_redis_rec v1 = rec_of(1, NULL, 0), got;
    cr_assert_eq(sess_redis_put(r, "", "s", 0, &v1, &err), ATTND_OK, "%s", err.msg);
    redis_stop();
    cr_assert_eq(sess_redis_get(r, "", "s", &got, &err), ATTND_ERR_IO);
    cr_assert(strstr(err.msg, "unavailable") && strstr(err.msg, redis_url), "%s", err.msg);
    cr_assert_eq(sess_redis_put(r, "", "t", 0, &v1, &err), ATTND_ERR_IO);
    redis_start(); /* empty: no persistence */
    cr_assert_eq(sess_redis_get(r, "", "s", &got, &err), ATTND_ERR_NOT_FOUND, "reconnected: %s", err.msg);
    cr_assert_eq(sess_redis_put(r, "", "s", 0, &v1, &err), ATTND_OK, "%s", err.msg);
    sess_redis_destroy(r);
}

// ---- two session stores on one shared store: two instances -----------------------------------

static struct kv_seq *fake_kv(int i) { return (struct kv_seq *)(uintptr_t)(0x1000 + i * 16); }
static int sunk;
static void sink(void *user, struct kv_seq *kv) {
    (void)user, (void)kv;
    sunk++;
}

static sess_store *instance(const char *prefix) {
    sess_store *st;
    attnd_err err;
    cr_assert_eq(sess_store_create(&st, NULL, MODEL, 8, &err), ATTND_OK, "%s", err.msg);
    sess_store_share(st, client(prefix));
    sess_store_set_kv_sink(st, sink, NULL);
    return st;
}

/* A turn up to its save: acquire, then the scheduler's release with the new history (the KV
 * holding all of it when kv > 0); *t gets the turn's number. Returns the acquire's status. */
static attnd_status release_turn(sess_store *st, const char *owner, const char *id, const int32_t *hist, int n,
                                 int kv, uint64_t *t) {
    sess *s;
    attnd_err err;
    attnd_status rc = sess_acquire(st, owner, id, &s, &err);
    if (rc != ATTND_OK) return rc;
    *t = s->turn;
    if (kv) sess_set_kv(st, s, fake_kv(kv), n, 100);
    cr_assert_eq(sess_release(st, s, hist, n, &err), ATTND_OK);
    return ATTND_OK;
}

/* One turn as the server runs it: release_turn, then the save; returns the save's status. */
static attnd_status turn(sess_store *st, const char *owner, const char *id, const int32_t *hist, int n, int kv) {
    uint64_t t;
    attnd_err err;
    attnd_status rc = release_turn(st, owner, id, hist, n, kv, &t);
    return rc != ATTND_OK ? rc : sess_persist_turn(st, owner, id, t, NULL, &err);
}

static void drop_kv(sess_store *st) {
    for (struct kv_seq *kv; (kv = sess_evict_lru(st));) (void)kv;
}

Test(shared, any_instance_continues_any_session_and_reuses_its_own_kv) {
    sess_store *a = instance("t3:"), *b = instance("t3:");
    char id[SESS_ID_MAX + 1];
    attnd_err err;
    cr_assert_eq(sess_create(a, NULL, "chat", id, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_create(b, NULL, "chat", id, &err), ATTND_ERR_BUSY, "an id taken on another instance");
    int32_t h1[] = {1, 10, 11, 12}, h2[] = {1, 10, 11, 12, 13, 14}, h3[] = {1, 10, 11, 12, 13, 14, 15, 16};
    cr_assert_eq(turn(a, NULL, "chat", h1, 4, 1), ATTND_OK);
    /* B never saw the session: it loads the history, without KV (the prompt is prefilled) */
    sess *s;
    cr_assert_eq(sess_acquire(b, NULL, "chat", &s, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(s->n_tokens, 4);
    cr_assert_arr_eq(s->tokens, h1, sizeof(h1));
    cr_assert_eq(s->kv_len, 0);
    uint64_t t = s->turn;
    cr_assert_eq(sess_release(b, s, h2, 6, &err), ATTND_OK);
    cr_assert_eq(sess_persist_turn(b, NULL, "chat", t, NULL, &err), ATTND_OK, "%s", err.msg);
    /* back on A: the stored history extends A's, so A's KV of the first 4 tokens is kept */
    cr_assert_eq(sess_acquire(a, NULL, "chat", &s, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(s->n_tokens, 6);
    cr_assert_arr_eq(s->tokens, h2, sizeof(h2));
    cr_assert_eq(s->kv, fake_kv(1));
    cr_assert_eq(s->kv_len, 4, "A reuses the KV it holds: %d", s->kv_len);
    t = s->turn;
    sess_set_kv(a, s, fake_kv(1), 8, 100);
    cr_assert_eq(sess_release(a, s, h3, 8, &err), ATTND_OK);
    cr_assert_eq(sess_persist_turn(a, NULL, "chat", t, NULL, &err), ATTND_OK, "%s", err.msg);
    sess_info info;
    cr_assert(sess_get_info(b, NULL, "chat", &info));
    cr_assert_eq(info.n_tokens, 8, "B sees A's last turn");
    sess_info *list;
    cr_assert_eq(sess_list_info(b, NULL, &list), 1);
    cr_assert_str_eq(list[0].id, "chat");
    free(list);
    drop_kv(a);
    sess_store_destroy(a);
    sess_store_destroy(b);
}

Test(shared, a_turn_racing_on_two_instances_is_refused_never_merged) {
    sess_store *a = instance("t4:"), *b = instance("t4:");
    char id[SESS_ID_MAX + 1];
    attnd_err err;
    cr_assert_eq(sess_create(a, NULL, "race", id, &err), ATTND_OK, "%s", err.msg);
    int32_t base[] = {1, 5}, ha[] = {1, 5, 6, 7}, hb[] = {1, 5, 8, 9};
    cr_assert_eq(turn(a, NULL, "race", base, 2, 1), ATTND_OK);
    sess *sa, *sb;
    cr_assert_eq(sess_acquire(a, NULL, "race", &sa, &err), ATTND_OK);
    cr_assert_eq(sess_acquire(b, NULL, "race", &sb, &err), ATTND_OK, "both read version 2");
    uint64_t ta = sa->turn, tb = sb->turn;
    sess_set_kv(a, sa, fake_kv(1), 4, 100);
    cr_assert_eq(sess_release(a, sa, ha, 4, &err), ATTND_OK);
    cr_assert_eq(sess_release(b, sb, hb, 4, &err), ATTND_OK);
    cr_assert_eq(sess_persist_turn(b, NULL, "race", tb, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_persist_turn(a, NULL, "race", ta, NULL, &err), ATTND_ERR_BUSY, "the slower turn is refused");
    /* A's next turn starts from B's history; A's KV keeps only the shared prefix */
    cr_assert_eq(sess_acquire(a, NULL, "race", &sa, &err), ATTND_OK);
    cr_assert_arr_eq(sa->tokens, hb, sizeof(hb), "the stored history is B's alone");
    cr_assert_eq(sa->kv_len, 2, "A's KV past the common prefix is not reused: %d", sa->kv_len);
    sess_abandon(a, sa);
    drop_kv(a);
    sess_store_destroy(a);
    sess_store_destroy(b);
}

Test(shared, a_superseded_turn_is_not_saved) {
    sess_store *a = instance("t5:");
    char id[SESS_ID_MAX + 1];
    attnd_err err;
    cr_assert_eq(sess_create(a, NULL, "s", id, &err), ATTND_OK, "%s", err.msg);
    int32_t h1[] = {1, 2}, h2[] = {1, 3};
    sess *s;
    uint64_t t1;
    cr_assert_eq(release_turn(a, NULL, "s", h1, 2, 0, &t1), ATTND_OK);
    /* before turn 1 saves, turn 2 acquires (a client that did not wait for the answer) */
    cr_assert_eq(sess_acquire(a, NULL, "s", &s, &err), ATTND_OK);
    uint64_t t2 = s->turn;
    cr_assert_eq(s->n_tokens, 0, "turn 2 starts from the stored history");
    cr_assert_eq(sess_release(a, s, h2, 2, &err), ATTND_OK);
    cr_assert_eq(sess_persist_turn(a, NULL, "s", t1, NULL, &err), ATTND_ERR_BUSY, "turn 1 was superseded");
    cr_assert_eq(sess_persist_turn(a, NULL, "s", t2, NULL, &err), ATTND_OK, "%s", err.msg);
    sess_info info;
    cr_assert(sess_get_info(a, NULL, "s", &info));
    cr_assert_eq(info.n_tokens, 2);
    sess_store_destroy(a);
}

Test(shared, ownership_and_deletion_carry_over) {
    sess_store *a = instance("t6:"), *b = instance("t6:");
    char id[SESS_ID_MAX + 1];
    attnd_err err;
    cr_assert_eq(sess_create(a, "ab12", "mine", id, &err), ATTND_OK, "%s", err.msg);
    int32_t h[] = {1, 2, 3};
    cr_assert_eq(turn(a, "ab12", "mine", h, 3, 0), ATTND_OK);
    sess *s;
    cr_assert_eq(sess_acquire(b, "cd34", "mine", &s, &err), ATTND_ERR_NOT_FOUND, "another key's session");
    cr_assert_eq(sess_acquire(b, NULL, "mine", &s, &err), ATTND_ERR_NOT_FOUND);
    sess_info *list;
    cr_assert_eq(sess_list_info(b, "cd34", &list), 0, "not listed for another key");
    free(list);
    cr_assert_eq(sess_list_info(b, NULL, &list), 0, "nor without a key");
    free(list);
    cr_assert_eq(turn(b, "ab12", "mine", h, 3, 2), ATTND_OK, "its own key continues it on B");
    struct kv_seq *kv = NULL;
    cr_assert_eq(sess_delete(a, "cd34", "mine", &kv, NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(sess_delete(a, "ab12", "mine", &kv, NULL, &err), ATTND_OK, "%s", err.msg);
    int before = sunk;
    cr_assert_eq(sess_acquire(b, "ab12", "mine", &s, &err), ATTND_ERR_NOT_FOUND, "deleted on A: gone on B");
    cr_assert_eq(sunk, before + 1, "B's local copy went, its KV to the scheduler");
    cr_assert_eq(sess_count(b), 0);
    sess_store_destroy(a);
    sess_store_destroy(b);
}

Test(shared, a_store_that_is_down_refuses_and_then_serves_again) {
    sess_store *a = instance("t7:");
    char id[SESS_ID_MAX + 1];
    attnd_err err;
    cr_assert_eq(sess_create(a, NULL, "s", id, &err), ATTND_OK, "%s", err.msg);
    int32_t h[] = {1, 2};
    sess *s;
    uint64_t t;
    cr_assert_eq(release_turn(a, NULL, "s", h, 2, 0, &t), ATTND_OK);
    redis_stop();
    cr_assert_eq(sess_persist_turn(a, NULL, "s", t, NULL, &err), ATTND_ERR_IO, "a failed write is never acknowledged");
    cr_assert_eq(sess_acquire(a, NULL, "s", &s, &err), ATTND_ERR_IO);
    cr_assert_eq(sess_create(a, NULL, "t", id, &err), ATTND_ERR_IO);
    redis_start();
    cr_assert_eq(sess_create(a, NULL, "t", id, &err), ATTND_OK, "recovered: %s", err.msg);
    cr_assert_eq(sess_acquire(a, NULL, "t", &s, &err), ATTND_OK, "%s", err.msg);
    sess_abandon(a, s);
    sess_store_destroy(a);
}

// ---- a hung store (stopped, not gone) fails every call within its deadline -------------------

enum { HUNG_N = 24 };

typedef struct hung_call {
    sess_store *st;
    char id[16];
    uint64_t turn;      /* > 0: save this released turn; 0: start a turn (acquire) */
    attnd_status rc;
    double seconds;
} hung_call;

static void *hung_one(void *arg) {
    hung_call *c = arg;
    attnd_err err;
    double t0 = attnd_now_s();
    if (c->turn) {
        c->rc = sess_persist_turn(c->st, NULL, c->id, c->turn, NULL, &err);
    } else {
        sess *s;
        if ((c->rc = sess_acquire(c->st, NULL, c->id, &s, &err)) == ATTND_OK) sess_abandon(c->st, s);
    }
    c->seconds = attnd_now_s() - t0;
    return NULL;
}

/* Redis stopped (SIGSTOP: the socket still accepts, nothing answers) under 24 overlapping
 * session calls, half starting a turn and half saving one: each fails with an I/O error (the
 * API's 503 with Retry-After) within the 2 s deadline, not after the outage (before: one
 * connection behind a mutex, 2 s per command in turn). The prompt cache, which never touches the
 * store, answers meanwhile. No acknowledged turn is lost: once Redis resumes, every session holds
 * at least its last saved history. */
Test(shared, a_hung_store_fails_every_call_within_its_deadline_and_loses_no_saved_turn) {
    sess_store *a;
    attnd_err err;
    cr_assert_eq(sess_store_create(&a, NULL, MODEL, 2 * HUNG_N, &err), ATTND_OK, "%s", err.msg);
    sess_store_share(a, client("t10:"));
    hung_call calls[HUNG_N];
    int32_t h[HUNG_N][3];
    char made[SESS_ID_MAX + 1];
    for (int i = 0; i < HUNG_N; i++) {
        calls[i] = (hung_call){.st = a};
        snprintf(calls[i].id, sizeof(calls[i].id), "s%d", i);
        h[i][0] = 1, h[i][1] = 100 + i, h[i][2] = 200 + i;
        cr_assert_eq(sess_create(a, NULL, calls[i].id, made, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(turn(a, NULL, calls[i].id, h[i], 2, 0), ATTND_OK, "the acknowledged turn of %s", calls[i].id);
        if (i % 2) cr_assert_eq(release_turn(a, NULL, calls[i].id, h[i], 3, 0, &calls[i].turn), ATTND_OK);
    }
    cr_assert_eq(kill(redis_pid, SIGSTOP), 0);
    pthread_t th[HUNG_N];
    for (int i = 0; i < HUNG_N; i++) pthread_create(&th[i], NULL, hung_one, &calls[i]);
    double t0 = attnd_now_s();
    int32_t p[] = {1, 5, 6};
    sess *anon = sess_acquire_anon(a, NULL, p, 3, 4);
    double anon_s = attnd_now_s() - t0;
    cr_assert_not_null(anon);
    sess_abandon(a, anon);
    for (int i = 0; i < HUNG_N; i++) pthread_join(th[i], NULL);
    kill(redis_pid, SIGCONT);
    cr_assert_lt(anon_s, 1.0, "the prompt cache waited %.2f s for a store it never uses", anon_s);
    for (int i = 0; i < HUNG_N; i++) {
        cr_assert_eq(calls[i].rc, ATTND_ERR_IO, "%s: %d", calls[i].id, calls[i].rc);
        cr_assert_leq(calls[i].seconds, 3.0, "%s answered after %.2f s", calls[i].id, calls[i].seconds);
    }
    sess_redis *r = client("t10:");
    for (int i = 0; i < HUNG_N; i++) {
        sess_redis_rec got;
        cr_assert_eq(sess_redis_get(r, "", calls[i].id, &got, &err), ATTND_OK, "%s", err.msg);
        cr_assert_geq(got.n_tokens, 2);
        cr_assert_arr_eq(got.tokens, h[i], 2 * sizeof(int32_t), "%s lost its saved turn", calls[i].id);
        sess_redis_rec_free(&got);
    }
    sess_redis_destroy(r);
    sess_store_destroy(a);
}

// ---- quotas: max_sessions_per_key counted in the shared store --------------------------------

static int list_count(sess_store *st, const char *owner) {
    sess_info *list;
    int n = sess_list_info(st, owner, &list);
    free(list);
    return n;
}

Test(shared, a_key_holds_at_most_its_quota_across_instances) {
    sess_store *a = instance("t8:"), *b;
    attnd_err err;
    sess_store_set_quota(a, 2);
    cr_assert_eq(sess_store_create(&b, NULL, MODEL, 8, &err), ATTND_OK, "%s", err.msg);
    sess_store_set_quota(b, 2); /* before sharing: the shared store takes it then */
    sess_store_share(b, client("t8:"));
    char id[SESS_ID_MAX + 1];
    cr_assert_eq(sess_create(a, "ab12", "s1", id, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_create(b, "ab12", "s2", id, &err), ATTND_OK, "%s", err.msg);
    /* the key's two sessions live on two instances; neither may make a third */
    cr_assert_eq(sess_create(a, "ab12", "s3", id, &err), ATTND_ERR_NOMEM);
    cr_assert(strstr(err.msg, "max_sessions_per_key") && strstr(err.msg, "shared"), "%s", err.msg);
    cr_assert_eq(sess_create(b, "ab12", "s3", id, &err), ATTND_ERR_NOMEM);
    /* other keys have quotas of their own, requests without a key too */
    cr_assert_eq(sess_create(b, "cd34", "s1", id, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_create(a, "cd34", "s2", id, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_create(a, NULL, "s1", id, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_create(b, NULL, "s2", id, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_create(b, NULL, "s3", id, &err), ATTND_ERR_NOMEM);
    /* turns are not creations: a key at its quota keeps using its sessions */
    int32_t h[] = {1, 2, 3};
    cr_assert_eq(turn(b, "ab12", "s1", h, 3, 0), ATTND_OK);
    /* listing shows the sessions, never the count's own key */
    cr_assert_eq(list_count(b, "ab12"), 2);
    cr_assert_eq(list_count(a, NULL), 2);
    /* a deletion on one instance frees the place for a create on the other */
    struct kv_seq *kv = NULL;
    cr_assert_eq(sess_delete(a, "ab12", "s1", &kv, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_create(b, "ab12", "s3", id, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_create(a, "ab12", "s4", id, &err), ATTND_ERR_NOMEM);
    cr_assert_eq(list_count(a, "ab12"), 2);
    sess_store_destroy(a);
    sess_store_destroy(b);
}

Test(shared, an_expired_session_leaves_its_key_s_count) {
    sess_redis *brief, *r = client("t9:"); /* a TTL of 1 s, and of 60 s */
    attnd_err err;
    cr_assert_eq(sess_redis_create(&brief, redis_url, "t9:", 1, MODEL, &err), ATTND_OK, "%s", err.msg);
    sess_redis_set_quota(brief, 2);
    sess_redis_set_quota(r, 2);
    sess_redis_rec v1 = rec_of(1, NULL, 0), got;
    cr_assert_eq(sess_redis_put(brief, "ab12", "old", 0, &v1, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_redis_put(r, "ab12", "keep", 0, &v1, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_redis_put(r, "ab12", "new", 0, &v1, &err), ATTND_ERR_NOMEM);
    /* Redis expires "old" after its 1 s TTL on its own clock: poll to a deadline, no fixed sleep;
     * the count outlives it */
    attnd_status st = ATTND_OK;
    for (double end = attnd_now_s() + 30; st != ATTND_ERR_NOT_FOUND && attnd_now_s() < end; usleep(10 * 1000))
        st = sess_redis_get(r, "ab12", "old", &got, &err);
    cr_assert_eq(st, ATTND_ERR_NOT_FOUND, "'old' did not expire in 30 s");
    cr_assert_eq(sess_redis_put(r, "ab12", "new", 0, &v1, &err), ATTND_OK, "the expired session still counted: %s",
                 err.msg);
    cr_assert_eq(sess_redis_put(r, "ab12", "more", 0, &v1, &err), ATTND_ERR_NOMEM, "keep and new");
    sess_redis_set_quota(r, 0);
    cr_assert_eq(sess_redis_put(r, "ab12", "more", 0, &v1, &err), ATTND_OK, "0 = no cap: %s", err.msg);
    sess_redis_destroy(brief);
    sess_redis_destroy(r);
}
