/*
 * metrics.c — Prometheus counters (see metrics.h). A small fixed table of (endpoint, status)
 * pairs: the route table has ~16 labels and a handful of status codes are used.
 */
#include "metrics.h"

#include "attnd/buf.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERIES 256

typedef struct series {
    const char *endpoint;
    int status;
    uint64_t count;
    double seconds;
} series;

struct metrics {
    pthread_mutex_t mu;
    series s[MAX_SERIES];
    int n;
    uint64_t overflow; /* requests past the table (should not happen) */
};

attnd_status metrics_create(metrics **out, attnd_err *err) {
    *out = calloc(1, sizeof(**out));
    if (!*out) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&(*out)->mu, NULL);
    return ATTND_OK;
}

void metrics_destroy(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_request(metrics *m, const char *endpoint, int status, double seconds) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n && !(m->s[i].status == status && !strcmp(m->s[i].endpoint, endpoint))) i++;
    if (i == m->n && m->n < MAX_SERIES) m->s[m->n++] = (series){endpoint, status, 0, 0};
    if (i < m->n) {
        m->s[i].count++;
        m->s[i].seconds += seconds;
    } else {
        m->overflow++;
    }
    pthread_mutex_unlock(&m->mu);
}

/* One sample with its HELP and TYPE lines. */
static void metric(buf *o, const char *name, const char *type, const char *help, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void metric(buf *o, const char *name, const char *type, const char *help, const char *fmt, ...) {
    buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s ", name, help, name, type, name);
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(o, fmt, ap);
    va_end(ap);
    buf_puts(o, "\n");
}

char *metrics_render(metrics *m, const sched_stats *st, int n_sessions, int ready) {
    buf o;
    buf_init(&o);
    buf_printf(&o, "# HELP attnd_requests_total HTTP requests by endpoint and status.\n"
               "# TYPE attnd_requests_total counter\n");
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < m->n; i++)
        buf_printf(&o, "attnd_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->s[i].endpoint, m->s[i].status,
                   (unsigned long long)m->s[i].count);
    buf_printf(&o, "# HELP attnd_request_seconds_total Time spent answering requests.\n"
               "# TYPE attnd_request_seconds_total counter\n");
    for (int i = 0; i < m->n; i++)
        buf_printf(&o, "attnd_request_seconds_total{endpoint=\"%s\",status=\"%d\"} %.6f\n", m->s[i].endpoint,
                   m->s[i].status, m->s[i].seconds);
    pthread_mutex_unlock(&m->mu);
    metric(&o, "attnd_ready", "gauge", "1 when the model is loaded.", "%d", ready);
    metric(&o, "attnd_sessions", "gauge", "Named sessions.", "%d", n_sessions);
    if (st) {
        metric(&o, "attnd_prompt_tokens_total", "counter", "Prompt tokens evaluated (prefill; cached ones excluded).",
               "%llu", (unsigned long long)st->prompt_tokens);
        metric(&o, "attnd_generated_tokens_total", "counter", "Tokens generated.",
               "%llu", (unsigned long long)st->generated_tokens);
        metric(&o, "attnd_decode_seconds_total", "counter", "Wall time of engine steps that decoded.",
               "%.6f", st->decode_seconds);
        metric(&o, "attnd_prompt_seconds_total", "counter", "Wall time of engine steps that prefilled.",
               "%.6f", st->prompt_seconds);
        metric(&o, "attnd_tokens_per_second", "gauge", "Generated tokens per second over the last second or more.",
               "%.3f", st->last_tok_per_s);
        metric(&o, "attnd_sequences_active", "gauge", "Sequences in scheduler slots.", "%d", st->active);
        metric(&o, "attnd_sequences_queued", "gauge", "Requests waiting for a slot.", "%d", st->queued);
        metric(&o, "attnd_kv_bytes_used", "gauge", "KV cache bytes in use.", "%zu", st->kv_used);
        metric(&o, "attnd_kv_bytes_budget", "gauge", "KV cache byte budget.", "%zu", st->kv_budget);
        metric(&o, "attnd_kv_bytes_reserved", "gauge", "KV bytes reserved by running requests (admission control).",
               "%zu", st->kv_reserved);
        metric(&o, "attnd_prompt_tokens_cached_total", "counter", "Prompt tokens reused from a KV cache.",
               "%llu", (unsigned long long)st->cached_tokens);
        metric(&o, "attnd_kv_evictions_total", "counter", "Idle KV caches evicted to stay within the budget.",
               "%llu", (unsigned long long)st->evictions);
        metric(&o, "attnd_engine_steps_total", "counter", "Batched engine evaluations.",
               "%llu", (unsigned long long)st->steps);
        metric(&o, "attnd_engine_threads", "gauge", "Engine threads configured.", "%d", st->threads);
        metric(&o, "attnd_engine_threads_in_use", "gauge",
               "Engine threads a step may use now: fewer while other busy processes keep descheduling one.", "%d",
               st->threads_in_use);
    }
    return o.p;
}
