/*
 * test_sdnotify.c — the systemd notify protocol: datagrams reach a socket the test binds
 * (path and abstract), the watchdog sends at half of WATCHDOG_USEC and honours WATCHDOG_PID,
 * and bad $NOTIFY_SOCKET / $WATCHDOG_USEC values are refused with a message, not a crash.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "sdnotify.h"

/* Binds a datagram socket at `name` (path or '@abstract'); returns its fd. */
static int listen_at(const char *name) {
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    memcpy(a.sun_path, name, len);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    if (name[0] == '@') a.sun_path[0] = '\0';
    else alen += 1;
    cr_assert(bind(fd, (struct sockaddr *)&a, alen) == 0, "bind %s: %s", name, strerror(errno));
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Receives one datagram as a string ("" on timeout). */
static void recv_msg(int fd, char *buf, size_t cap) {
    ssize_t r = recv(fd, buf, cap - 1, 0);
    buf[r > 0 ? r : 0] = '\0';
}

/* True if a datagram is waiting (without blocking). */
static bool pending(int fd) {
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) >= 0;
}

/* A fresh socket path (nothing there). */
static void temp_path(char *buf, size_t cap) {
    snprintf(buf, cap, "/tmp/attnd-sdnotify-test-%d-%ld.sock", (int)getpid(), (long)time(NULL));
    unlink(buf);
}

/* A notifier and the socket the test listens on: a fresh path, or an abstract '@name'. */
typedef struct peer {
    char name[108];
    int fd;
    sdnotify *n;
} peer;

static void peer_open(peer *p, bool abstract, const char *watchdog_usec) {
    if (abstract) snprintf(p->name, sizeof(p->name), "@attnd-sdnotify-test-%d", (int)getpid());
    else temp_path(p->name, sizeof(p->name));
    p->fd = listen_at(p->name);
    attnd_err err;
    cr_assert_eq(sdnotify_create(&p->n, p->name, watchdog_usec, NULL, &err), ATTND_OK, "%s", err.msg);
}

static void peer_close(peer *p) {
    sdnotify_destroy(p->n);
    close(p->fd);
    if (p->name[0] != '@') unlink(p->name);
}

/* The next datagram is `want` (only its start when prefix: systemd may append fields). */
static void expect_msg(const peer *p, const char *want, bool prefix, const char *why) {
    char buf[600];
    recv_msg(p->fd, buf, sizeof(buf));
    bool ok = prefix ? !strncmp(buf, want, strlen(want)) : !strcmp(buf, want);
    cr_assert(ok, "got '%s', want '%s': %s", buf, want, why);
}

Test(sdnotify, ready_status_stopping_reach_a_path_socket) {
    peer p;
    peer_open(&p, false, NULL);
    cr_assert(sdnotify_enabled(p.n));
    cr_assert_eq(sdnotify_status(p.n, "loading model\nstories260K"), ATTND_OK);
    expect_msg(&p, "STATUS=loading model stories260K", false, "newlines must not start a new assignment");
    cr_assert_eq(sdnotify_ready(p.n), ATTND_OK);
    expect_msg(&p, "READY=1", false, "ready");
    cr_assert_eq(sdnotify_stopping(p.n), ATTND_OK);
    expect_msg(&p, "STOPPING=1", true, "stopping");
    peer_close(&p);
}

Test(sdnotify, abstract_socket_names_start_with_at) {
    peer p;
    peer_open(&p, true, NULL);
    cr_assert_eq(sdnotify_ready(p.n), ATTND_OK);
    expect_msg(&p, "READY=1", true, "ready");
    peer_close(&p);
}

Test(sdnotify, unset_socket_makes_every_call_a_no_op) {
    sdnotify *n;
    cr_assert_eq(sdnotify_create(&n, NULL, NULL, NULL, NULL), ATTND_OK);
    cr_assert(!sdnotify_enabled(n));
    cr_assert_eq(sdnotify_ready(n), ATTND_OK);
    cr_assert_eq(sdnotify_watchdog(n), ATTND_OK);
    sdnotify_destroy(n);
    /* NULL notifier (creation failed) is accepted everywhere too. */
    cr_assert_eq(sdnotify_status(NULL, "x"), ATTND_OK);
    cr_assert_eq(sdnotify_stopping(NULL), ATTND_OK);
    sdnotify_destroy(NULL);
}

Test(sdnotify, watchdog_sends_at_half_the_interval) {
    peer p;
    peer_open(&p, false, "60000000"); /* 60 s watchdog -> keep-alive every 30 s (on the clock the test moves) */
    cr_assert_eq(sdnotify_watchdog_interval_usec(p.n), 30000000u);
    cr_assert_eq(sdnotify_watchdog(p.n), ATTND_OK);
    expect_msg(&p, "WATCHDOG=1", false, "the first tick sends at once");
    cr_assert_eq(sdnotify_watchdog(p.n), ATTND_OK);
    cr_assert(!pending(p.fd), "a second tick right away must not send");
    attnd_clock_advance_ms(25000);
    cr_assert_eq(sdnotify_watchdog(p.n), ATTND_OK);
    cr_assert(!pending(p.fd), "25 s after the first: still too early");
    attnd_clock_advance_ms(6000);
    cr_assert_eq(sdnotify_watchdog(p.n), ATTND_OK);
    expect_msg(&p, "WATCHDOG=1", false, "a tick after the interval sends again");
    peer_close(&p);
}

Test(sdnotify, watchdog_for_another_pid_is_off) {
    sdnotify *n;
    char other[32];
    snprintf(other, sizeof(other), "%d", (int)getpid() + 1);
    cr_assert_eq(sdnotify_create(&n, "@x", "1000000", other, NULL), ATTND_OK);
    cr_assert_eq(sdnotify_watchdog_interval_usec(n), 0u);
    sdnotify_destroy(n);
    char self[32];
    snprintf(self, sizeof(self), "%d", (int)getpid());
    cr_assert_eq(sdnotify_create(&n, "@x", "1000000", self, NULL), ATTND_OK);
    cr_assert_eq(sdnotify_watchdog_interval_usec(n), 500000u);
    sdnotify_destroy(n);
}

Test(sdnotify, bad_environment_values_are_refused_with_a_message) {
    sdnotify *n = (sdnotify *)1;
    attnd_err err = {{0}};
    cr_assert_eq(sdnotify_create(&n, "relative/path", NULL, NULL, &err), ATTND_ERR_INVALID);
    cr_assert_null(n);
    cr_assert(strstr(err.msg, "NOTIFY_SOCKET"), "%s", err.msg);
    cr_assert_eq(sdnotify_create(&n, "vsock:2:1234", NULL, NULL, &err), ATTND_ERR_UNSUPPORTED);
    cr_assert_eq(sdnotify_create(&n, "@", NULL, NULL, &err), ATTND_ERR_INVALID);
    char longname[200];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[0] = '/';
    longname[sizeof(longname) - 1] = '\0';
    cr_assert_eq(sdnotify_create(&n, longname, NULL, NULL, &err), ATTND_ERR_INVALID);
    cr_assert_eq(sdnotify_create(&n, "@x", "12s", NULL, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "WATCHDOG_USEC"), "%s", err.msg);
    cr_assert_eq(sdnotify_create(&n, "@x", "-5", NULL, &err), ATTND_ERR_INVALID);
    cr_assert_eq(sdnotify_create(&n, "@x", "99999999999999999999999", NULL, &err), ATTND_ERR_INVALID);
    cr_assert_eq(sdnotify_create(&n, "@x", "1000", "pid1", &err), ATTND_ERR_INVALID);
}

Test(sdnotify, nobody_listening_is_an_error_not_a_crash) {
    char path[108];
    temp_path(path, sizeof(path));
    sdnotify *n;
    cr_assert_eq(sdnotify_create(&n, path, NULL, NULL, NULL), ATTND_OK);
    attnd_err err;
    cr_assert_eq(sdnotify_send(n, "READY=1", &err), ATTND_ERR_IO);
    cr_assert(strstr(err.msg, "NOTIFY_SOCKET"), "%s", err.msg);
    sdnotify_destroy(n);
}

Test(sdnotify, attach_fills_the_server_hooks_and_bounds_the_tick) {
    peer p;
    /* 600 ms watchdog -> keep-alives every 300 ms, so the scheduler must tick at least that often */
    peer_open(&p, false, "600000");
    server_settings s;
    server_settings_default(&s);
    s.watchdog_interval_ms = 1000;
    sdnotify_attach(p.n, &s);
    cr_assert_eq(s.watchdog_interval_ms, 300);
    cr_assert_eq(s.hooks.user, p.n);
    s.hooks.on_status(s.hooks.user, "loading");
    expect_msg(&p, "STATUS=loading", false, "on_status");
    s.hooks.on_ready(s.hooks.user);
    expect_msg(&p, "READY=1", true, "on_ready");
    s.hooks.on_watchdog(s.hooks.user);
    expect_msg(&p, "WATCHDOG=1", false, "on_watchdog");
    s.hooks.on_stopping(s.hooks.user);
    expect_msg(&p, "STOPPING=1", true, "on_stopping");
    peer_close(&p);

    /* Without a watchdog the tick is left alone; a NULL notifier gives no-op hooks. */
    server_settings_default(&s);
    int tick = s.watchdog_interval_ms;
    sdnotify_attach(NULL, &s);
    cr_assert_eq(s.watchdog_interval_ms, tick);
    s.hooks.on_ready(s.hooks.user);
}
