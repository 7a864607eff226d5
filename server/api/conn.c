/*
 * conn.c — connection tracking: the request-header and body deadlines, the 503 at the
 * connection limit and the per-address cap; the framing checks of a request's headers (see
 * conn.h).
 */
#include "conn.h"

#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "slog.h"

struct conn_slot {
    int fd;
    double deadline;          /* monotonic s by which the request headers (or the body, in_body)
                                 must have arrived; 0 = none (a request being answered) */
    bool in_body;             /* the deadline is the body's */
    bool holds;               /* one of its address's max_connections_per_address places (from its
                                 first admitted request until it closes) */
    char addr[CONN_ADDR_MAX]; /* the peer's numeric address */
    conn_slot *prev, *next;
};

struct conn_tracker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool stop;
    conn_limits lim;
    int n_open;
    conn_slot *head;
};

/* Shuts down the connections past their deadline at now (lock held); returns how many. */
static int sweep_locked(conn_tracker *ct, double now) {
    int n = 0;
    for (conn_slot *t = ct->head; t; t = t->next)
        if (t->deadline > 0 && now > t->deadline) {
            shutdown(t->fd, SHUT_RDWR); /* MHD sees the end of the stream and closes the fd */
            t->deadline = 0;
            n++;
            if (t->in_body)
                slog_info("closed a connection from %s whose request body did not arrive within %d s", t->addr,
                          ct->lim.body_timeout_s);
            else
                slog_debug("closed a connection from %s that sent no complete request headers in time", t->addr);
        }
    return n;
}

int conn_tracker_sweep(conn_tracker *ct, double now) {
    pthread_mutex_lock(&ct->mu);
    int n = sweep_locked(ct, now);
    pthread_mutex_unlock(&ct->mu);
    return n;
}

/* The watchdog: twice a second, shut down connections past their deadline. */
static void *watchdog(void *arg) {
    conn_tracker *ct = arg;
    pthread_mutex_lock(&ct->mu);
    while (!ct->stop) {
        sweep_locked(ct, attnd_now_s());
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 500 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&ct->cv, &ct->mu, &until);
    }
    pthread_mutex_unlock(&ct->mu);
    return NULL;
}

attnd_status conn_tracker_create(conn_tracker **out, const conn_limits *lim, attnd_err *err) {
    *out = NULL;
    conn_tracker *ct = calloc(1, sizeof(*ct));
    if (!ct) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    ct->lim = *lim;
    if (ct->lim.max_connections < 1) ct->lim.max_connections = 1;
    if (ct->lim.header_timeout_s < 1) ct->lim.header_timeout_s = 1;
    if (ct->lim.idle_timeout_s < 0) ct->lim.idle_timeout_s = 0;
    if (ct->lim.body_timeout_s < 1) ct->lim.body_timeout_s = 1;
    if (ct->lim.per_address < 1) ct->lim.per_address = ct->lim.max_connections / 2 > 0 ? ct->lim.max_connections / 2 : 1;
    pthread_mutex_init(&ct->mu, NULL);
    pthread_cond_init(&ct->cv, NULL);
    if (pthread_create(&ct->thread, NULL, watchdog, ct) != 0) {
        pthread_cond_destroy(&ct->cv);
        pthread_mutex_destroy(&ct->mu);
        free(ct);
        return attnd_fail(err, ATTND_ERR_NOMEM, "cannot start the connection watchdog thread");
    }
    *out = ct;
    return ATTND_OK;
}

void conn_tracker_destroy(conn_tracker *ct) {
    if (!ct) return;
    attnd_thread_stop(ct->thread, &ct->mu, &ct->cv, &ct->stop);
    for (conn_slot *t = ct->head, *n; t; t = n) n = t->next, free(t);
    pthread_cond_destroy(&ct->cv);
    pthread_mutex_destroy(&ct->mu);
    free(ct);
}

void conn_client_address(struct MHD_Connection *c, char *buf, size_t cap) {
    const union MHD_ConnectionInfo *ci = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS) : NULL;
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    socklen_t len = sa && sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (!sa || getnameinfo(sa, len, buf, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0) snprintf(buf, cap, "?");
}

/* Connections from addr holding a place (lock held). */
static int count_from(const conn_tracker *ct, const char *addr) {
    int n = 0;
    for (const conn_slot *t = ct->head; t; t = t->next) n += t->holds && !strcmp(t->addr, addr);
    return n;
}

/* A new connection: its header deadline. One from an address already at its cap gets only a
 * second to send its headers (enough for a client's request, answered 429), so one address
 * trickling headers cannot fill the slots MHD accepts. */
conn_slot *conn_open(conn_tracker *ct, int fd, const char *addr) {
    pthread_mutex_lock(&ct->mu);
    ct->n_open++;
    conn_slot *t = calloc(1, sizeof(*t));
    if (t) {
        t->fd = fd;
        snprintf(t->addr, sizeof(t->addr), "%s", addr);
        bool over = count_from(ct, t->addr) >= ct->lim.per_address;
        t->deadline = attnd_now_s() + (over ? 1 : ct->lim.header_timeout_s);
        t->next = ct->head;
        if (ct->head) ct->head->prev = t;
        ct->head = t;
    }
    pthread_mutex_unlock(&ct->mu);
    return t;
}

void conn_close(conn_tracker *ct, conn_slot *t) {
    pthread_mutex_lock(&ct->mu);
    if (t) {
        if (t->prev) t->prev->next = t->next;
        else ct->head = t->next;
        if (t->next) t->next->prev = t->prev;
        free(t);
    }
    ct->n_open--;
    pthread_mutex_unlock(&ct->mu);
}

void conn_on_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    conn_tracker *ct = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        char addr[CONN_ADDR_MAX];
        conn_client_address(c, addr, sizeof(addr));
        *socket_context = conn_open(ct, ci ? ci->connect_fd : -1, addr);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_close(ct, *socket_context);
        *socket_context = NULL;
    }
}

static conn_slot *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

conn_verdict conn_slot_begin(conn_tracker *ct, conn_slot *t, bool reserved) {
    pthread_mutex_lock(&ct->mu);
    conn_verdict v = CONN_OK;
    if (!reserved && ct->n_open > ct->lim.max_connections) v = CONN_FULL;
    else if (!reserved && t && !t->holds) {
        /* a connection takes one of its address's places with its first request and keeps it until
         * it closes; counting only those makes the cap exact whatever order connections send their
         * headers in (counting every open one refused early arrivals while later ones got in) */
        if (count_from(ct, t->addr) >= ct->lim.per_address) v = CONN_ADDRESS_FULL;
        else t->holds = true;
    }
    if (t) { /* the body must follow within body_timeout_s */
        t->deadline = attnd_now_s() + ct->lim.body_timeout_s;
        t->in_body = true;
    }
    pthread_mutex_unlock(&ct->mu);
    return v;
}

void conn_slot_body_done(conn_tracker *ct, conn_slot *t) {
    pthread_mutex_lock(&ct->mu);
    if (t) t->deadline = 0, t->in_body = false;
    pthread_mutex_unlock(&ct->mu);
}

void conn_slot_end(conn_tracker *ct, conn_slot *t) {
    pthread_mutex_lock(&ct->mu);
    /* an idle keep-alive connection is MHD's to time out (idle_timeout_s); a next request that
     * starts within it gets header_timeout_s more, so trickled headers are still bounded */
    if (t) t->deadline = attnd_now_s() + ct->lim.idle_timeout_s + ct->lim.header_timeout_s, t->in_body = false;
    pthread_mutex_unlock(&ct->mu);
}

conn_verdict conn_request_begin(conn_tracker *ct, struct MHD_Connection *c, bool reserved) {
    return conn_slot_begin(ct, conn_of(c), reserved);
}
void conn_body_done(conn_tracker *ct, struct MHD_Connection *c) { conn_slot_body_done(ct, conn_of(c)); }
void conn_request_end(conn_tracker *ct, struct MHD_Connection *c) { conn_slot_end(ct, conn_of(c)); }

// ---- framing: what MHD lets through -----------------------------------------------------------

static void framing_refuse(conn_framing *f, int status, const char *why, const char *name, size_t nl) {
    if (f->status) return;
    f->status = status;
    snprintf(f->why, sizeof(f->why), why, (int)(nl < 40 ? nl : 40), name);
}

/* RFC 9110's tchar: what a header name (and a transfer coding) is made of. */
static bool token_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool name_is(const char *key, size_t kl, const char *name) {
    return kl == strlen(name) && !strncasecmp(key, name, kl);
}

void conn_framing_header(conn_framing *f, const char *key, size_t kl, const char *value, size_t vl) {
    for (size_t i = 0; i < kl; i++)
        if (!token_char((unsigned char)key[i]))
            return framing_refuse(f, 400, "malformed header name '%.*s' (a space before the colon?)", key, kl);
    if (kl == 0) return framing_refuse(f, 400, "a header without a name%.*s", "", 0);
    for (size_t i = 0; i < vl; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return framing_refuse(f, 400, "a control character in the value of header '%.*s'", key, kl);
    }
    if (name_is(key, kl, "Host") && ++f->n_host > 1) return framing_refuse(f, 400, "more than one %.*s header", key, kl);
    if (name_is(key, kl, "Content-Length")) {
        if (f->n_length++ == 0) snprintf(f->length, sizeof(f->length), "%.*s", (int)(vl < 23 ? vl : 23), value);
        else if (strlen(f->length) != vl || strncmp(f->length, value, vl))
            return framing_refuse(f, 400, "two %.*s headers that disagree", key, kl);
    }
    if (name_is(key, kl, "Transfer-Encoding")) {
        size_t l = strlen(f->te);
        if (l + (f->te_seen ? 2 : 0) + vl >= sizeof(f->te)) f->te_long = true;
        else snprintf(f->te + l, sizeof(f->te) - l, "%s%.*s", f->te_seen ? ", " : "", (int)vl, value);
        f->te_seen = true;
    }
}

/* The next element of the list s at *i (OWS and empty elements skipped) into [*at, *at + *len). */
static bool list_next(const char *s, size_t *i, size_t *at, size_t *len) {
    while (s[*i] == ' ' || s[*i] == '\t' || s[*i] == ',') (*i)++;
    if (!s[*i]) return false;
    *at = *i;
    while (s[*i] && s[*i] != ',') (*i)++;
    size_t e = *i;
    while (e > *at && (s[e - 1] == ' ' || s[e - 1] == '\t')) e--;
    *len = e - *at;
    return true;
}

/* Transfer-Encoding: only exactly "chunked" (any case, nothing around it) is what MHD reads as
 * chunked; any other value has MHD read the body until the client leaves. A list that ends in
 * chunked after codings MHD does not implement is 501; anything else (chunked not last or twice,
 * identity, blanks MHD would keep, a malformed element) is 400, as RFC 9112 asks of a request
 * whose framing cannot be trusted. */
static void framing_te(conn_framing *f) {
    size_t i = 0, at, len, n = 0;
    bool last_chunked = false, chunked_before = false, tokens = !f->te_long;
    while (list_next(f->te, &i, &at, &len)) {
        chunked_before = chunked_before || last_chunked;
        last_chunked = len == 7 && !strncasecmp(f->te + at, "chunked", 7);
        for (size_t k = 0; k < len; k++) tokens = tokens && token_char((unsigned char)f->te[at + k]);
        n++;
    }
    if (!f->te_long && !strcasecmp(f->te, "chunked")) return; /* exactly what MHD reads (one header) */
    if (tokens && last_chunked && !chunked_before && n > 1)
        return framing_refuse(f, 501, "Transfer-Encoding '%.*s' is not implemented (only chunked)", f->te, strlen(f->te));
    framing_refuse(f, 400, "Transfer-Encoding '%.*s': only chunked is accepted", f->te, strlen(f->te));
}

void conn_framing_end(conn_framing *f) {
    if (f->status || !f->te_seen) return;
    if (f->n_length) return framing_refuse(f, 400, "both Transfer-Encoding and %.*s", "Content-Length", 14);
    framing_te(f);
}

/* libmicrohttpd before 1.0 (whose rewritten parser gives a value's true length, so that the byte
 * check above sees a NUL) parses the request in place, each line's CR LF turned to NULs, and ends a value at its first
 * NUL: the rest of the line is dropped unseen. The bytes are still there, though: from a value's
 * end to the next header's name there is only its line end (CR LF or LF), and from the last
 * value to the end of the headers (MHD's header size from the method) two; more means a value
 * hid bytes behind a NUL (or a folded line continued it). A gap that does not fit (a buffer MHD
 * moved) tells nothing and is let through. */
typedef struct framing_walk {
    conn_framing *f;
    const char *value, *key; /* the previous header's (in MHD's buffer) */
    size_t vl, kl;
} framing_walk;

static void framing_hidden(framing_walk *w, const char *next, size_t line_ends) {
#if MHD_VERSION < 0x01000000
    if (!w->value || !next) return;
    uintptr_t from = (uintptr_t)(w->value + w->vl), to = (uintptr_t)next;
    if (to > from && to - from <= 8192 && to - from > 2 * line_ends)
        framing_refuse(w->f, 400, "a NUL in the value of header '%.*s' (or a folded line)", w->key, w->kl);
#else
    (void)w, (void)next, (void)line_ends;
#endif
}

static enum MHD_Result framing_each(void *cls, enum MHD_ValueKind kind, const char *key, size_t kl, const char *value,
                                    size_t vl) {
    (void)kind;
    framing_walk *w = cls;
    framing_hidden(w, key, 1);
    conn_framing_header(w->f, key ? key : "", key ? kl : 0, value ? value : "", value ? vl : 0);
    *w = (framing_walk){w->f, value, key, vl, kl};
    return MHD_YES;
}

int conn_framing_check(struct MHD_Connection *c, const char *method, conn_framing *f) {
    memset(f, 0, sizeof(*f));
    framing_walk w = {.f = f};
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, framing_each, &w); /* every header, duplicates included */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (ci && method) framing_hidden(&w, method + ci->header_size, 2); /* the last: its line end and the blank line */
    conn_framing_end(f);
    return f->status;
}
