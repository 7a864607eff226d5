/*
 * sse.c — the stream loop of every streamed answer (see sse.h): hands the jobs' updates to the
 * endpoint's writer and drains the SSE bytes it writes into libmicrohttpd's content reader.
 */
#include "sse.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "oai.h"

typedef struct sse_state {
    const sse_writer *w;     /* borrowed (a static table) */
    genreq *g;               /* the request's, borrowed */
    bool began, finished;
    double last_out;         /* when bytes last went to MHD (keep-alive clock) */
    buf out;                 /* SSE bytes */
    size_t out_off;          /* bytes of out already handed to MHD */
    int n_ended;
    bool *ended;             /* (genreq_n_jobs) job k's last update went to the writer */
} sse_state;

static void state_free(void *p) {
    sse_state *st = p;
    buf_free(&st->out);
    free(st->ended);
    free(st);
}

/* Appends "data: <json>\n\n" (o stolen). Out of memory drops the event. */
void sse_event(buf *out, json_t *o) {
    char *s = o ? json_dumps(o, OAI_DUMP_FLAGS) : NULL;
    json_decref(o);
    if (!s) return;
    size_t n = strlen(s);
    if (buf_reserve(out, n + 8)) {
        buf_append(out, "data: ", 6);
        buf_append(out, s, n);
        buf_append(out, "\n\n", 2);
    }
    free(s);
}

// ---- the stream loop, shared by every streamed endpoint ----------------------------------

/* Hands update u of job k to the writer and counts the jobs that ended. */
static void stream_update(req *r, int k, const sched_update *u) {
    sse_state *st = req_get(r, REQ_SLOT_STREAM);
    st->w->update(r, k, u, &st->out);
    if (u->done && !st->ended[k]) {
        st->ended[k] = true;
        st->n_ended++;
    }
}

/* Collects what every running choice has ready; when none has, waits up to 100 ms on the first
 * running one. Returns false when the client left (everything cancelled). */
static bool stream_poll(req *r) {
    sse_state *st = req_get(r, REQ_SLOT_STREAM);
    genreq *g = st->g;
    int n = genreq_n_jobs(g), first = -1;
    bool news = false;
    sched_update u;
    for (int k = 0; k < n; k++) {
        if (st->ended[k]) continue;
        if (first < 0) first = k;
        if (sched_job_wait(genreq_job(g, k), 0, &u)) {
            stream_update(r, k, &u);
            news = true;
        }
    }
    if (news || first < 0) return true;
    if (sched_job_wait(genreq_job(g, first), 100, &u)) {
        stream_update(r, first, &u);
        return true;
    }
    if (!http_client_gone(r)) return true;
    genreq_cancel(g);
    return false;
}

/* True when a waiting stream has sent nothing for sse_keepalive_s (at most half of
 * request_timeout_s): an SSE comment then tells proxies and clients it is alive. */
static bool keepalive_due(req *r) {
    const server_settings *c = &r->srv->cfg;
    if (c->sse_keepalive_s <= 0) return false;
    double every = c->sse_keepalive_s, half = c->request_timeout_s > 0 ? c->request_timeout_s / 2.0 : every;
    if (half < every) every = half;
    return attnd_now_s() - ((sse_state *)req_get(r, REQ_SLOT_STREAM))->last_out >= every;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    req *r = cls;
    sse_state *st = req_get(r, REQ_SLOT_STREAM);
    while (st->out_off == st->out.len) {
        if (st->finished) return HTTP_READER_END;
        buf_clear(&st->out);
        st->out_off = 0;
        /* the writer's opening frames go out at once; then wait for news */
        if (!st->began) {
            if (st->w->begin) st->w->begin(r, &st->out);
            st->began = true;
        } else if (!stream_poll(r)) {
            return HTTP_READER_ERROR;
        }
        if (st->n_ended == genreq_n_jobs(st->g)) {
            if (st->w->end) st->w->end(r, &st->out);
            st->finished = true;
        }
        if (st->out.len == 0 && keepalive_due(r)) {
            if (st->w->idle) st->w->idle(r, &st->out);
            else buf_puts(&st->out, ": keep-alive\n\n");
        }
    }
    st->last_out = attnd_now_s();
    size_t n = st->out.len - st->out_off;
    if (n > max) n = max;
    memcpy(out, st->out.p + st->out_off, n);
    st->out_off += n;
    return (ssize_t)n;
}

http_result sse_stream(req *r, genreq *g, const sse_writer *w) {
    sse_state *st = calloc(1, sizeof(*st));
    if (!st) return HTTP_NO;
    req_set(r, REQ_SLOT_STREAM, st, state_free);
    if (!(st->ended = calloc((size_t)genreq_n_jobs(g), sizeof(bool)))) return HTTP_NO;
    st->w = w;
    st->g = g;
    st->last_out = attnd_now_s();
    const http_header h[] = {{"Content-Type", w->content_type ? w->content_type : "text/event-stream"},
                             {"Cache-Control", "no-cache"}};
    return http_reply_stream(r, 200, stream_reader, r, h, (int)ATTND_ARRAY_LEN(h));
}
