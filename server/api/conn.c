/*
 * conn.c — connection tracking: the request-header deadline and the 503 at the connection limit
 * (see conn.h).
 */
#include "conn.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "slog.h"

typedef struct tconn {
    int fd;
    double deadline;          /* monotonic s by which request headers must have arrived; 0 = in a request */
    struct tconn *prev, *next;
} tconn;

struct conn_tracker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool stop;
    int max_connections, header_timeout_s, idle_timeout_s;
    int n_open;
    tconn *head;
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The watchdog: twice a second, shut down connections past their deadline. */
static void *watchdog(void *arg) {
    conn_tracker *ct = arg;
    pthread_mutex_lock(&ct->mu);
    while (!ct->stop) {
        double now = mono_s();
        for (tconn *t = ct->head; t; t = t->next)
            if (t->deadline > 0 && now > t->deadline) {
                shutdown(t->fd, SHUT_RDWR); /* MHD sees the end of the stream and closes the fd */
                t->deadline = 0;
                slog_debug("closed a connection that sent no complete request headers within %d s",
                           ct->header_timeout_s);
            }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 500 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&ct->cv, &ct->mu, &until);
    }
    pthread_mutex_unlock(&ct->mu);
    return NULL;
}

attnd_status conn_tracker_create(conn_tracker **out, int max_connections, int header_timeout_s, int idle_timeout_s,
                                 attnd_err *err) {
    *out = NULL;
    conn_tracker *ct = calloc(1, sizeof(*ct));
    if (!ct) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    ct->max_connections = max_connections > 0 ? max_connections : 1;
    ct->header_timeout_s = header_timeout_s > 0 ? header_timeout_s : 1;
    ct->idle_timeout_s = idle_timeout_s > 0 ? idle_timeout_s : 0;
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
    pthread_mutex_lock(&ct->mu);
    ct->stop = true;
    pthread_cond_signal(&ct->cv);
    pthread_mutex_unlock(&ct->mu);
    pthread_join(ct->thread, NULL);
    for (tconn *t = ct->head, *n; t; t = n) n = t->next, free(t);
    pthread_cond_destroy(&ct->cv);
    pthread_mutex_destroy(&ct->mu);
    free(ct);
}

void conn_on_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    conn_tracker *ct = cls;
    pthread_mutex_lock(&ct->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        tconn *t = calloc(1, sizeof(*t));
        if (t && ci) {
            t->fd = ci->connect_fd;
            t->deadline = mono_s() + ct->header_timeout_s;
            t->next = ct->head;
            if (ct->head) ct->head->prev = t;
            ct->head = t;
        } else {
            free(t);
            t = NULL;
        }
        *socket_context = t;
        ct->n_open++;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        tconn *t = *socket_context;
        if (t) {
            if (t->prev) t->prev->next = t->next;
            else ct->head = t->next;
            if (t->next) t->next->prev = t->prev;
            free(t);
        }
        *socket_context = NULL;
        ct->n_open--;
    }
    pthread_mutex_unlock(&ct->mu);
}

static tconn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

bool conn_request_begin(conn_tracker *ct, struct MHD_Connection *c) {
    tconn *t = conn_of(c);
    pthread_mutex_lock(&ct->mu);
    if (t) t->deadline = 0;
    bool ok = ct->n_open <= ct->max_connections;
    pthread_mutex_unlock(&ct->mu);
    return ok;
}

void conn_request_end(conn_tracker *ct, struct MHD_Connection *c) {
    tconn *t = conn_of(c);
    pthread_mutex_lock(&ct->mu);
    /* an idle keep-alive connection is MHD's to time out (idle_timeout_s); a next request that
     * starts within it gets header_timeout_s more, so trickled headers are still bounded */
    if (t) t->deadline = mono_s() + ct->idle_timeout_s + ct->header_timeout_s;
    pthread_mutex_unlock(&ct->mu);
}
