/*
 * conn.c — connection tracking: the request-header and body deadlines, the 503 at the
 * connection limit and the per-address cap (see conn.h).
 */
#include "conn.h"

#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
