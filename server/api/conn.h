/*
 * conn.h — the server's view of its TCP connections, for two protections libmicrohttpd does not
 * give by itself:
 *   - a header deadline: a new connection must deliver its request headers within
 *     header_timeout_s; after a response, a keep-alive connection gets MHD's idle timeout plus
 *     header_timeout_s for the next request's headers. Otherwise it is closed. MHD's own timeout
 *     only bounds *idle* time, so a client sending one header line every few seconds could hold
 *     a slot for ever.
 *   - answering at the limit: MHD accepts up to twice max_connections; a request arriving while
 *     more than max_connections are open is answered 503 (and its connection closed) instead of
 *     the connection being reset unanswered.
 *
 * A watchdog thread closes late connections with shutdown(2) on their socket, which MHD sees as
 * the peer going away; the fd itself is only ever closed by MHD. Thread-safe: every function
 * takes the tracker's mutex (MHD calls them from its connection threads).
 */
#ifndef ATTND_SERVER_CONN_H
#define ATTND_SERVER_CONN_H

#include <microhttpd.h>
#include <stdbool.h>

#include "attnd/common.h"

typedef struct conn_tracker conn_tracker;

/* Starts the watchdog thread. max_connections > 0, header_timeout_s > 0; idle_timeout_s is
 * MHD's connection timeout (request_timeout_s). */
attnd_status conn_tracker_create(conn_tracker **out, int max_connections, int header_timeout_s, int idle_timeout_s,
                                 attnd_err *err);
/* Stops the watchdog. Call after MHD_stop_daemon (no connection left). Accepts NULL. */
void conn_tracker_destroy(conn_tracker *ct);

/* MHD_OPTION_NOTIFY_CONNECTION callback; cls is the tracker. */
void conn_on_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe);

/* A request's headers arrived on c (its first callback): the deadline no longer applies.
 * Returns false when more than max_connections connections are open: answer 503 and close. */
bool conn_request_begin(conn_tracker *ct, struct MHD_Connection *c);
/* c's request completed: the deadline for the next request's headers starts now. */
void conn_request_end(conn_tracker *ct, struct MHD_Connection *c);

#endif
