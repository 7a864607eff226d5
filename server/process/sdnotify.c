/*
 * sdnotify.c — systemd notify protocol over an AF_UNIX datagram socket (see sdnotify.h).
 *
 * The socket is created once and kept for the life of the notifier, so a notification costs
 * one sendto(). It is non-blocking: if the service manager stops reading, a keep-alive is
 * dropped with ATTND_ERR_BUSY rather than stalling the scheduler that sends it.
 */
#include "sdnotify.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct sdnotify {
    int fd;                    /* datagram socket, or -1 when disabled */
    struct sockaddr_un addr;   /* destination; abstract names start with '\0' */
    socklen_t addr_len;        /* significant bytes of addr (abstract names are not NUL-ended) */
    uint64_t watchdog_usec;    /* keep-alive interval: half of $WATCHDOG_USEC, 0 = off */
    uint64_t last_watchdog;    /* now_usec() of the last WATCHDOG=1, 0 = never */
};

/* The monotonic clock in µs (attnd_now_s: the clock tests move). */
static uint64_t now_usec(void) { return (uint64_t)(attnd_now_s() * 1e6); }

/* Strict unsigned decimal: the whole string, no sign, no overflow. */
static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

attnd_status sdnotify_create(sdnotify **out, const char *notify_socket, const char *watchdog_usec,
                             const char *watchdog_pid, attnd_err *err) {
    attnd_status st = ATTND_OK;
    *out = NULL;
    sdnotify *n = calloc(1, sizeof(*n));
    if (!n) return attnd_fail(err, ATTND_ERR_NOMEM, "sdnotify: out of memory");
    n->fd = -1;

    if (watchdog_usec && *watchdog_usec) {
        uint64_t usec, pid = 0;
        if (!parse_u64(watchdog_usec, &usec)) {
            st = attnd_fail(err, ATTND_ERR_INVALID, "WATCHDOG_USEC='%s' is not a number of microseconds",
                            watchdog_usec);
            goto fail;
        }
        if (watchdog_pid && *watchdog_pid && !parse_u64(watchdog_pid, &pid)) {
            st = attnd_fail(err, ATTND_ERR_INVALID, "WATCHDOG_PID='%s' is not a process id", watchdog_pid);
            goto fail;
        }
        /* The watchdog is meant for the process named in WATCHDOG_PID (when given), not for
         * every process that inherited the environment. */
        bool ours = !(watchdog_pid && *watchdog_pid) || pid == (uint64_t)getpid();
        n->watchdog_usec = ours ? usec / 2 : 0;
    }

    if (!notify_socket || !*notify_socket) {
        *out = n;
        return ATTND_OK;
    }
    size_t len = strlen(notify_socket);
    if (notify_socket[0] != '/' && notify_socket[0] != '@') {
        st = attnd_fail(err, !strncmp(notify_socket, "vsock:", 6) ? ATTND_ERR_UNSUPPORTED : ATTND_ERR_INVALID,
                        "NOTIFY_SOCKET='%s': expected an absolute path or '@abstract-name'", notify_socket);
        goto fail;
    }
    if (len < 2 || len > sizeof(n->addr.sun_path) - (notify_socket[0] == '/')) {
        st = attnd_fail(err, ATTND_ERR_INVALID, "NOTIFY_SOCKET='%s': name must be 1..%zu bytes long",
                        notify_socket, sizeof(n->addr.sun_path) - 1);
        goto fail;
    }
    n->addr.sun_family = AF_UNIX;
    memcpy(n->addr.sun_path, notify_socket, len);
    if (notify_socket[0] == '@') n->addr.sun_path[0] = '\0';
    /* A path is NUL-terminated (calloc); an abstract name is exactly its bytes. */
    n->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (notify_socket[0] == '/'));

    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (n->fd < 0) {
        st = attnd_fail(err, ATTND_ERR_IO, "sdnotify: socket(AF_UNIX, SOCK_DGRAM): %s", strerror(errno));
        goto fail;
    }
    *out = n;
    return ATTND_OK;

fail:
    sdnotify_destroy(n);
    return st;
}

attnd_status sdnotify_create_from_env(sdnotify **out, attnd_err *err) {
    return sdnotify_create(out, getenv("NOTIFY_SOCKET"), getenv("WATCHDOG_USEC"), getenv("WATCHDOG_PID"), err);
}

void sdnotify_destroy(sdnotify *n) {
    if (!n) return;
    if (n->fd >= 0) close(n->fd);
    free(n);
}

bool sdnotify_enabled(const sdnotify *n) { return n && n->fd >= 0; }

uint64_t sdnotify_watchdog_interval_usec(const sdnotify *n) { return n ? n->watchdog_usec : 0; }

attnd_status sdnotify_send(sdnotify *n, const char *state, attnd_err *err) {
    if (!sdnotify_enabled(n)) return ATTND_OK;
    ATTND_ASSERT(state);
    ssize_t r;
    do {
        r = sendto(n->fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&n->addr, n->addr_len);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        int e = errno;
        return attnd_fail(err, e == EAGAIN || e == EWOULDBLOCK ? ATTND_ERR_BUSY : ATTND_ERR_IO,
                          "sdnotify: sending '%.40s' to $NOTIFY_SOCKET: %s", state, strerror(e));
    }
    return ATTND_OK;
}

attnd_status sdnotify_ready(sdnotify *n) { return sdnotify_send(n, "READY=1", NULL); }

attnd_status sdnotify_stopping(sdnotify *n) { return sdnotify_send(n, "STOPPING=1", NULL); }

attnd_status sdnotify_status(sdnotify *n, const char *text) {
    if (!sdnotify_enabled(n)) return ATTND_OK;
    char buf[512];
    int len = snprintf(buf, sizeof(buf), "STATUS=%s", text ? text : "");
    if (len < 0) return ATTND_ERR_INVALID;
    /* One STATUS line: a newline inside text would start a new (bogus) assignment. */
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return sdnotify_send(n, buf, NULL);
}

attnd_status sdnotify_watchdog(sdnotify *n) {
    if (!sdnotify_enabled(n) || n->watchdog_usec == 0) return ATTND_OK;
    uint64_t t = now_usec();
    if (n->last_watchdog != 0 && t - n->last_watchdog < n->watchdog_usec) return ATTND_OK;
    attnd_status st = sdnotify_send(n, "WATCHDOG=1", NULL);
    if (st == ATTND_OK) n->last_watchdog = t;
    return st;
}

// ---- server hooks ------------------------------------------------------------------------------

static void hook_ready(void *user) { sdnotify_ready(user); }
static void hook_status(void *user, const char *status) { sdnotify_status(user, status); }
static void hook_watchdog(void *user) { sdnotify_watchdog(user); }
static void hook_stopping(void *user) { sdnotify_stopping(user); }

void sdnotify_attach(sdnotify *n, server_settings *s) {
    s->hooks.on_ready = hook_ready;
    s->hooks.on_status = hook_status;
    s->hooks.on_watchdog = hook_watchdog;
    s->hooks.on_stopping = hook_stopping;
    s->hooks.user = n;
    uint64_t ms = sdnotify_watchdog_interval_usec(n) / 1000;
    if (ms > 0 && (s->watchdog_interval_ms <= 0 || (uint64_t)s->watchdog_interval_ms > ms))
        s->watchdog_interval_ms = (int)(ms > 0 ? ms : 1);
}
