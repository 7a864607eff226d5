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

static void temp_path(char *buf, size_t cap) {
    snprintf(buf, cap, "/tmp/attnd-sdnotify-test-%d-%ld.sock", (int)getpid(), (long)time(NULL));
    unlink(buf);
}

Test(sdnotify, ready_status_stopping_reach_a_path_socket) {
    char path[108];
    temp_path(path, sizeof(path));
    int fd = listen_at(path);
    sdnotify *n;
    attnd_err err;
    cr_assert_eq(sdnotify_create(&n, path, NULL, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert(sdnotify_enabled(n));
    char buf[600];
    cr_assert_eq(sdnotify_status(n, "loading model\nstories260K"), ATTND_OK);
    recv_msg(fd, buf, sizeof(buf));
    cr_assert_str_eq(buf, "STATUS=loading model stories260K", "newlines must not start a new assignment");
    cr_assert_eq(sdnotify_ready(n), ATTND_OK);
    recv_msg(fd, buf, sizeof(buf));
    cr_assert_str_eq(buf, "READY=1");
    cr_assert_eq(sdnotify_stopping(n), ATTND_OK);
    recv_msg(fd, buf, sizeof(buf));
    cr_assert(!strncmp(buf, "STOPPING=1", 10), "got '%s'", buf);
    sdnotify_destroy(n);
    close(fd);
    unlink(path);
}

Test(sdnotify, abstract_socket_names_start_with_at) {
    char name[64];
    snprintf(name, sizeof(name), "@attnd-sdnotify-test-%d", (int)getpid());
    int fd = listen_at(name);
    sdnotify *n;
    attnd_err err;
    cr_assert_eq(sdnotify_create(&n, name, NULL, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sdnotify_ready(n), ATTND_OK);
    char buf[64];
    recv_msg(fd, buf, sizeof(buf));
    cr_assert(!strncmp(buf, "READY=1", 7), "got '%s'", buf);
    sdnotify_destroy(n);
    close(fd);
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
    char path[108];
    temp_path(path, sizeof(path));
    int fd = listen_at(path);
    sdnotify *n;
    attnd_err err;
    /* 400 ms watchdog -> keep-alive every 200 ms */
    cr_assert_eq(sdnotify_create(&n, path, "400000", NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sdnotify_watchdog_interval_usec(n), 200000u);
    char buf[64];
    cr_assert_eq(sdnotify_watchdog(n), ATTND_OK);
    recv_msg(fd, buf, sizeof(buf));
    cr_assert_str_eq(buf, "WATCHDOG=1", "the first tick sends at once");
    cr_assert_eq(sdnotify_watchdog(n), ATTND_OK);
    cr_assert(!pending(fd), "a second tick right away must not send");
    usleep(250000);
    cr_assert_eq(sdnotify_watchdog(n), ATTND_OK);
    recv_msg(fd, buf, sizeof(buf));
    cr_assert_str_eq(buf, "WATCHDOG=1", "a tick after the interval sends again");
    sdnotify_destroy(n);
    close(fd);
    unlink(path);
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
    char path[108];
    temp_path(path, sizeof(path));
    int fd = listen_at(path);
    sdnotify *n;
    /* 600 ms watchdog -> keep-alives every 300 ms, so the scheduler must tick at least that often */
    cr_assert_eq(sdnotify_create(&n, path, "600000", NULL, NULL), ATTND_OK);
    server_settings s;
    server_settings_default(&s);
    s.watchdog_interval_ms = 1000;
    sdnotify_attach(n, &s);
    cr_assert_eq(s.watchdog_interval_ms, 300);
    cr_assert_eq(s.hooks.user, n);
    char buf[64];
    s.hooks.on_status(s.hooks.user, "loading");
    recv_msg(fd, buf, sizeof(buf));
    cr_assert_str_eq(buf, "STATUS=loading");
    s.hooks.on_ready(s.hooks.user);
    recv_msg(fd, buf, sizeof(buf));
    cr_assert(!strncmp(buf, "READY=1", 7), "got '%s'", buf);
    s.hooks.on_watchdog(s.hooks.user);
    recv_msg(fd, buf, sizeof(buf));
    cr_assert_str_eq(buf, "WATCHDOG=1");
    s.hooks.on_stopping(s.hooks.user);
    recv_msg(fd, buf, sizeof(buf));
    cr_assert(!strncmp(buf, "STOPPING=1", 10), "got '%s'", buf);
    sdnotify_destroy(n);
    close(fd);
    unlink(path);

    /* Without a watchdog the tick is left alone; a NULL notifier gives no-op hooks. */
    server_settings_default(&s);
    int tick = s.watchdog_interval_ms;
    sdnotify_attach(NULL, &s);
    cr_assert_eq(s.watchdog_interval_ms, tick);
    s.hooks.on_ready(s.hooks.user);
}
