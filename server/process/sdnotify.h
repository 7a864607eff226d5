/*
 * sdnotify.h — systemd's service notification protocol, spoken directly (no libsystemd).
 *
 * A service started with Type=notify tells the service manager how it is doing by sending
 * datagrams of "KEY=VALUE\n" lines to the AF_UNIX socket named in $NOTIFY_SOCKET: READY=1
 * once it serves requests, STATUS=<text> for `systemctl status`, WATCHDOG=1 keep-alives at
 * least every $WATCHDOG_USEC (we send at half of it, as sd_watchdog_enabled(3) advises), and
 * STOPPING=1 when shutdown begins. A name starting with '@' is an abstract socket.
 *
 * When $NOTIFY_SOCKET is unset (not under systemd) every call is a cheap no-op returning
 * ATTND_OK, so callers never need to ask whether they run under systemd.
 *
 *     sdnotify *n; attnd_err err;
 *     if (sdnotify_create_from_env(&n, &err) != ATTND_OK) log(err.msg);  // n stays usable: NULL
 *     sdnotify_status(n, "loading model");
 *     ... bind, load ...
 *     sdnotify_ready(n);
 *     while (running) { step(); sdnotify_watchdog(n); }   // sends only when due
 *     sdnotify_stopping(n);
 *     sdnotify_destroy(n);
 *
 * Thread-safety: ready/status/stopping/send may be called from any thread (one sendto on a
 * socket that never changes). sdnotify_watchdog keeps the time of its last send and must be
 * called from one thread at a time (the scheduler loop).
 */
#ifndef ATTND_SDNOTIFY_H
#define ATTND_SDNOTIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "attnd/common.h"
#include "settings.h"

typedef struct sdnotify sdnotify;

/*
 * Creates a notifier for the socket `notify_socket` (an absolute path, or '@' + abstract
 * name; NULL or "" = notifications disabled). `watchdog_usec` and `watchdog_pid` are the
 * values of $WATCHDOG_USEC and $WATCHDOG_PID (NULL when unset): the watchdog is enabled when
 * watchdog_usec is a positive integer and watchdog_pid is unset or equals our pid.
 * Errors: ATTND_ERR_INVALID for a malformed socket name or watchdog value,
 * ATTND_ERR_UNSUPPORTED for socket kinds we do not speak (vsock:), ATTND_ERR_IO when the
 * socket cannot be created. On error *out is NULL, which every other function accepts.
 * The strings are copied; the caller keeps ownership.
 */
attnd_status sdnotify_create(sdnotify **out, const char *notify_socket, const char *watchdog_usec,
                             const char *watchdog_pid, attnd_err *err);

/* sdnotify_create() with $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID. */
attnd_status sdnotify_create_from_env(sdnotify **out, attnd_err *err);

/* Closes the socket. Accepts NULL. */
void sdnotify_destroy(sdnotify *n);

/* True when notifications go somewhere ($NOTIFY_SOCKET was set). Accepts NULL (false). */
bool sdnotify_enabled(const sdnotify *n);

/* The keep-alive interval we use: half of $WATCHDOG_USEC, or 0 when the watchdog is off. */
uint64_t sdnotify_watchdog_interval_usec(const sdnotify *n);

/*
 * Sends `state` (one or more "KEY=VALUE" lines separated by '\n') as one datagram.
 * ATTND_OK when sent or when disabled; ATTND_ERR_IO with the errno text when sendto fails
 * (e.g. nobody listens: ECONNREFUSED / ENOENT). Never blocks for long: the socket is
 * non-blocking, so a full receive queue is an ATTND_ERR_BUSY, not a hang.
 */
attnd_status sdnotify_send(sdnotify *n, const char *state, attnd_err *err);

/* READY=1 — the model is loaded and the port is bound. */
attnd_status sdnotify_ready(sdnotify *n);
/* STATUS=<text>; newlines in text are replaced by spaces (one STATUS line). */
attnd_status sdnotify_status(sdnotify *n, const char *text);
/* STOPPING=1 — shutdown has begun. */
attnd_status sdnotify_stopping(sdnotify *n);

/*
 * WATCHDOG=1 if the watchdog is enabled and at least half of $WATCHDOG_USEC has passed since
 * the last keep-alive (monotonic clock); otherwise nothing. Cheap enough to call every
 * scheduler step. Returns ATTND_OK when nothing was due.
 */
attnd_status sdnotify_watchdog(sdnotify *n);

/*
 * Points s->hooks at this notifier (on_ready -> READY=1, on_status -> STATUS=, on_watchdog ->
 * WATCHDOG=1 when due, on_stopping -> STOPPING=1) and, when systemd's watchdog is on, lowers
 * s->watchdog_interval_ms so the scheduler ticks at least as often as keep-alives are due.
 * n is borrowed: it must outlive the server. With n NULL or disabled the hooks are still set
 * and do nothing.
 */
void sdnotify_attach(sdnotify *n, server_settings *s);

#endif /* ATTND_SDNOTIFY_H */
