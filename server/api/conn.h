/*
 * conn.h — the server's view of its TCP connections, for protections libmicrohttpd does not
 * give by itself:
 *   - a header deadline: a new connection must deliver its request headers within
 *     header_timeout_s; after a response, a keep-alive connection gets MHD's idle timeout plus
 *     header_timeout_s for the next request's headers. Otherwise it is closed. MHD's own timeout
 *     only bounds *idle* time, so a client sending one header line every few seconds could hold
 *     a slot for ever.
 *   - a body deadline: once the headers are in, the body must arrive within body_timeout_s, so
 *     a client sending one body byte every few seconds is cut like one trickling headers.
 *   - answering at the limit: MHD accepts up to twice max_connections; a request arriving while
 *     more than max_connections are open is answered 503 (and its connection closed) instead of
 *     the connection being reset unanswered, except /health and /metrics (a reserved slot).
 *   - a per-address cap: one client address holds at most per_address connections; beyond it
 *     a request is answered 429 and a new connection has one second for its headers.
 *   - framing libmicrohttpd (0.9.7x) lets through (conn_framing_*): a Transfer-Encoding other than
 *     exactly "chunked" (MHD would read an unknown coding's body until the client leaves), one
 *     beside a Content-Length, Content-Lengths that disagree, two Host headers (MHD reads the
 *     first, a proxy may have routed on the other), a header name with a space, a tab or another
 *     non-token byte (so "Transfer-Encoding : chunked" names no header MHD knows), and a control
 *     character (NUL included) in a value. Such a request is refused before its body.
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
typedef struct conn_slot conn_slot; /* one tracked connection */

#define CONN_ADDR_MAX 64 /* a numeric IPv6 address fits */

typedef struct conn_limits {
    int max_connections;  /* requests beyond this many open connections get 503 */
    int header_timeout_s; /* a connection's request headers must arrive within this */
    int idle_timeout_s;   /* MHD's connection timeout (request_timeout_s) */
    int body_timeout_s;   /* a request's body must arrive within this of its headers */
    int per_address;      /* connections one client address may hold (429 above); < 1 = half
                             of max_connections */
} conn_limits;

/* Starts the watchdog thread (limits copied; the ones below 1 are raised to 1). */
attnd_status conn_tracker_create(conn_tracker **out, const conn_limits *lim, attnd_err *err);
/* Stops the watchdog. Call after MHD_stop_daemon (no connection left). Accepts NULL. */
void conn_tracker_destroy(conn_tracker *ct);

/* MHD_OPTION_NOTIFY_CONNECTION callback; cls is the tracker. */
void conn_on_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe);

typedef enum conn_verdict {
    CONN_OK,
    CONN_FULL,         /* more than max_connections are open: answer 503 and close */
    CONN_ADDRESS_FULL, /* its address holds more than per_address: answer 429 and close */
} conn_verdict;

/* A request's headers arrived on c (its first callback): the header deadline no longer
 * applies, the body's (body_timeout_s) starts. reserved: /health and /metrics, answered past
 * both limits (up to the connections MHD accepts), so monitoring sees a server under a flood. */
conn_verdict conn_request_begin(conn_tracker *ct, struct MHD_Connection *c, bool reserved);
/* c's request body is complete (the handler runs now, however long): no deadline. */
void conn_body_done(conn_tracker *ct, struct MHD_Connection *c);
/* The peer's numeric address ("127.0.0.1", "::1") into buf, "?" when unknown. */
void conn_client_address(struct MHD_Connection *c, char *buf, size_t cap);
/* c's request completed: the deadline for the next request's headers starts now. */
void conn_request_end(conn_tracker *ct, struct MHD_Connection *c);

/* The framing of a request's headers, fed one header at a time (what conn_framing_check does
 * with MHD's list; tests/test_server_conn.c feeds its own). Zero it before the first. */
typedef struct conn_framing {
    int status;           /* 0 while the headers are fine; else 400 or 501 (a coding not implemented) */
    char why[160];        /* the refusal, for the error body and the access log */
    int n_host, n_length;
    char length[24];      /* the first Content-Length's value (for a disagreeing second one) */
    char te[128];         /* every Transfer-Encoding value so far, joined by ", " (cut at 127 bytes) */
    bool te_seen, te_long;
} conn_framing;

/* One header: the name's kl bytes and the value's vl bytes (either may hold a NUL, which is how
 * MHD passes it on). The first refusal stays. */
void conn_framing_header(conn_framing *f, const char *key, size_t kl, const char *value, size_t vl);
/* After the last header: f->status set (0: fine) and f->why. */
void conn_framing_end(conn_framing *f);
/* Every request header of c checked: 0 when fine, else the status (400 or 501) with f->why.
 * method: the one MHD gave the request's first callback (where its request line starts). */
int conn_framing_check(struct MHD_Connection *c, const char *method, conn_framing *f);

// ---- the same without MHD (what the callbacks above call; tests/test_server_conn.c) ------------

/* A connection on socket fd from addr opened (counted even when out of memory: then NULL, and
 * the connection goes untracked). Its header deadline starts now. */
conn_slot *conn_open(conn_tracker *ct, int fd, const char *addr);
/* The connection t closed (t freed; NULL: an untracked one). */
void conn_close(conn_tracker *ct, conn_slot *t);
/* conn_request_begin, conn_body_done and conn_request_end for t (NULL: untracked). */
conn_verdict conn_slot_begin(conn_tracker *ct, conn_slot *t, bool reserved);
void conn_slot_body_done(conn_tracker *ct, conn_slot *t);
void conn_slot_end(conn_tracker *ct, conn_slot *t);
/* What the watchdog does twice a second, at a given time: shuts down (shutdown(2)) every
 * connection past its deadline at now (attnd_now_s's clock) and clears it. Returns how many. */
int conn_tracker_sweep(conn_tracker *ct, double now);

#endif
