/*
 * metrics.c — Prometheus counters (see metrics.h). A small fixed table of (endpoint, status)
 * pairs: the route table has ~16 labels and a handful of status codes are used.
 */
#include "metrics.h"

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

typedef struct out {
    char *p;
    size_t len, cap;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->p ? o->p + o->len : NULL, o->p ? o->cap - o->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (o->p && o->len + (size_t)n < o->cap) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap ? o->cap * 2 : 4096;
        while (cap < o->len + (size_t)n + 1) cap *= 2;
        char *g = realloc(o->p, cap);
        if (!g) return;
        o->p = g;
        o->cap = cap;
    }
}

char *metrics_render(metrics *m, const sched_stats *st, int n_sessions, int ready) {
    out o = {0};
    put(&o, "# HELP attnd_requests_total HTTP requests by endpoint and status.\n# TYPE attnd_requests_total counter\n");
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < m->n; i++)
        put(&o, "attnd_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->s[i].endpoint, m->s[i].status,
            (unsigned long long)m->s[i].count);
    put(&o, "# HELP attnd_request_seconds_total Time spent answering requests.\n# TYPE attnd_request_seconds_total counter\n");
    for (int i = 0; i < m->n; i++)
        put(&o, "attnd_request_seconds_total{endpoint=\"%s\",status=\"%d\"} %.6f\n", m->s[i].endpoint,
            m->s[i].status, m->s[i].seconds);
    pthread_mutex_unlock(&m->mu);
    put(&o, "# HELP attnd_ready 1 when the model is loaded.\n# TYPE attnd_ready gauge\nattnd_ready %d\n", ready);
    put(&o, "# HELP attnd_sessions Named sessions.\n# TYPE attnd_sessions gauge\nattnd_sessions %d\n", n_sessions);
    if (st) {
        put(&o, "# HELP attnd_prompt_tokens_total Prompt tokens evaluated (prefill; cached ones excluded).\n"
                "# TYPE attnd_prompt_tokens_total counter\nattnd_prompt_tokens_total %llu\n",
            (unsigned long long)st->prompt_tokens);
        put(&o, "# HELP attnd_generated_tokens_total Tokens generated.\n"
                "# TYPE attnd_generated_tokens_total counter\nattnd_generated_tokens_total %llu\n",
            (unsigned long long)st->generated_tokens);
        put(&o, "# HELP attnd_decode_seconds_total Wall time of engine steps that decoded.\n"
                "# TYPE attnd_decode_seconds_total counter\nattnd_decode_seconds_total %.6f\n", st->decode_seconds);
        put(&o, "# HELP attnd_prompt_seconds_total Wall time of engine steps that prefilled.\n"
                "# TYPE attnd_prompt_seconds_total counter\nattnd_prompt_seconds_total %.6f\n", st->prompt_seconds);
        put(&o, "# HELP attnd_tokens_per_second Generated tokens per second over the last second or more.\n"
                "# TYPE attnd_tokens_per_second gauge\nattnd_tokens_per_second %.3f\n", st->last_tok_per_s);
        put(&o, "# HELP attnd_sequences_active Sequences in scheduler slots.\n"
                "# TYPE attnd_sequences_active gauge\nattnd_sequences_active %d\n", st->active);
        put(&o, "# HELP attnd_sequences_queued Requests waiting for a slot.\n"
                "# TYPE attnd_sequences_queued gauge\nattnd_sequences_queued %d\n", st->queued);
        put(&o, "# HELP attnd_kv_bytes_used KV cache bytes in use.\n# TYPE attnd_kv_bytes_used gauge\n"
                "attnd_kv_bytes_used %zu\n", st->kv_used);
        put(&o, "# HELP attnd_kv_bytes_budget KV cache byte budget.\n# TYPE attnd_kv_bytes_budget gauge\n"
                "attnd_kv_bytes_budget %zu\n", st->kv_budget);
        put(&o, "# HELP attnd_kv_bytes_reserved KV bytes reserved by running requests (admission control).\n"
                "# TYPE attnd_kv_bytes_reserved gauge\nattnd_kv_bytes_reserved %zu\n", st->kv_reserved);
        put(&o, "# HELP attnd_prompt_tokens_cached_total Prompt tokens reused from a KV cache.\n"
                "# TYPE attnd_prompt_tokens_cached_total counter\nattnd_prompt_tokens_cached_total %llu\n",
            (unsigned long long)st->cached_tokens);
        put(&o, "# HELP attnd_kv_evictions_total Idle KV caches evicted to stay within the budget.\n"
                "# TYPE attnd_kv_evictions_total counter\nattnd_kv_evictions_total %llu\n",
            (unsigned long long)st->evictions);
        put(&o, "# HELP attnd_engine_steps_total Batched engine evaluations.\n"
                "# TYPE attnd_engine_steps_total counter\nattnd_engine_steps_total %llu\n",
            (unsigned long long)st->steps);
    }
    return o.p;
}
