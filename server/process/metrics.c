/*
 * metrics.c — Prometheus counters (see metrics.h). A small fixed table of (endpoint, status)
 * pairs: the route table has ~16 labels and a handful of status codes are used.
 */
#include "metrics.h"

#include "attnd/buf.h"

#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
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

/* The scheduler's counters and gauges, in the order /metrics lists them: each a field of
 * sched_stats, found by its offset and printed by its C type. */
typedef enum stat_kind { STAT_U64, STAT_INT, STAT_SIZE, STAT_SECONDS, STAT_RATE } stat_kind;

#define STAT(name, type, help, kind, field) {name, type, help, kind, offsetof(sched_stats, field)}
static const struct stat_row {
    const char *name, *type, *help;
    stat_kind kind;
    size_t off;
} STATS[] = {
    STAT("attnd_prompt_tokens_total", "counter", "Prompt tokens evaluated (prefill; cached ones excluded).", STAT_U64,
         prompt_tokens),
    STAT("attnd_generated_tokens_total", "counter", "Tokens generated.", STAT_U64, generated_tokens),
    STAT("attnd_spec_drafted_tokens_total", "counter", "Speculative decoding: tokens drafted (prompt lookup).",
         STAT_U64, spec_drafted),
    STAT("attnd_spec_accepted_tokens_total", "counter", "Speculative decoding: drafted tokens kept.", STAT_U64,
         spec_accepted),
    STAT("attnd_decode_seconds_total", "counter", "Wall time of engine steps that decoded.", STAT_SECONDS,
         decode_seconds),
    STAT("attnd_prompt_seconds_total", "counter", "Wall time of engine steps that prefilled.", STAT_SECONDS,
         prompt_seconds),
    STAT("attnd_tokens_per_second", "gauge", "Generated tokens per second over the last second or more.", STAT_RATE,
         last_tok_per_s),
    STAT("attnd_sequences_active", "gauge", "Sequences in scheduler slots.", STAT_INT, active),
    STAT("attnd_sequences_queued", "gauge", "Requests waiting for a slot.", STAT_INT, queued),
    STAT("attnd_kv_bytes_used", "gauge", "KV cache bytes in use.", STAT_SIZE, kv_used),
    STAT("attnd_kv_bytes_budget", "gauge", "KV cache byte budget.", STAT_SIZE, kv_budget),
    STAT("attnd_kv_checkpoint_bytes", "gauge", "KV cache bytes held by recurrent state checkpoints (hybrid models).",
         STAT_SIZE, kv_checkpoint_bytes),
    STAT("attnd_kv_bytes_reserved", "gauge", "KV bytes reserved by running requests (admission control).", STAT_SIZE,
         kv_reserved),
    STAT("attnd_prompt_tokens_cached_total", "counter", "Prompt tokens reused from a KV cache.", STAT_U64,
         cached_tokens),
    STAT("attnd_kv_evictions_total", "counter", "Idle KV caches evicted to stay within the budget.", STAT_U64,
         evictions),
    STAT("attnd_engine_steps_total", "counter", "Batched engine evaluations.", STAT_U64, steps),
    STAT("attnd_engine_steps_yielded_total", "counter",
         "Decode steps given up mid-way so that a newly arrived request starts first.", STAT_U64, steps_yielded),
    STAT("attnd_engine_threads", "gauge", "Engine threads configured.", STAT_INT, threads),
    STAT("attnd_engine_threads_in_use", "gauge",
         "Engine threads a step may use now: fewer while other busy processes keep descheduling one.", STAT_INT,
         threads_in_use),
};
#undef STAT

/* Row r of STATS for st; the offset points at a field of r->kind's C type. */
static void stat_metric(buf *o, const struct stat_row *r, const sched_stats *st) {
    const char *f = (const char *)st + r->off, *n = r->name, *t = r->type, *h = r->help;
    switch (r->kind) {
    case STAT_U64: metric(o, n, t, h, "%llu", (unsigned long long)*(const uint64_t *)(const void *)f); break;
    case STAT_INT: metric(o, n, t, h, "%d", *(const int *)(const void *)f); break;
    case STAT_SIZE: metric(o, n, t, h, "%zu", *(const size_t *)(const void *)f); break;
    case STAT_SECONDS: metric(o, n, t, h, "%.6f", *(const double *)(const void *)f); break;
    case STAT_RATE: metric(o, n, t, h, "%.3f", *(const double *)(const void *)f); break;
    }
}

/* The scheduler's distributions, by sched_hist, as Prometheus names them. */
static const struct {
    const char *name, *help;
} HISTS[SCHED_H_COUNT] = {
    [SCHED_H_QUEUE] = {"attnd_request_queue_time_seconds", "Time a request waited for a scheduler slot."},
    [SCHED_H_TTFT] = {"attnd_time_to_first_token_seconds", "Time from queueing a request to its first token."},
    [SCHED_H_ITL] = {"attnd_inter_token_latency_seconds", "Time between consecutive tokens of one sequence."},
    [SCHED_H_E2E] = {"attnd_e2e_request_latency_seconds", "Time from queueing to the end of requests that ended well."},
    [SCHED_H_PROMPT] = {"attnd_request_prompt_tokens", "Prompt tokens per request."},
    [SCHED_H_GEN] = {"attnd_request_generation_tokens", "Generated tokens per sequence (each of n choices counts)."},
};

/* The api label's values, by metrics_api (sched_job_spec.api). */
static const char *const API_NAMES[METRICS_API_COUNT] = {
    [METRICS_API_OTHER] = "other",         [METRICS_API_OPENAI] = "openai",   [METRICS_API_RESPONSES] = "responses",
    [METRICS_API_ANTHROPIC] = "anthropic", [METRICS_API_OLLAMA] = "ollama",   [METRICS_API_LLAMACPP] = "llamacpp",
};
_Static_assert(METRICS_API_COUNT <= SCHED_N_APIS, "the scheduler keeps a series per API");

/* One histogram, a series per API that has observations (h: SCHED_N_APIS of them). */
static void histogram(buf *o, const char *name, const char *help, const histo *h) {
    buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int a = 0; a < METRICS_API_COUNT; a++) {
        const histo *x = &h[a];
        const char *api = API_NAMES[a];
        if (!x->count) continue;
        for (int i = 0; i < x->n; i++)
            buf_printf(o, "%s_bucket{api=\"%s\",le=\"%g\"} %llu\n", name, api, x->le[i],
                       (unsigned long long)histo_cumulative(x, i));
        buf_printf(o, "%s_bucket{api=\"%s\",le=\"+Inf\"} %llu\n%s_sum{api=\"%s\"} %.6f\n%s_count{api=\"%s\"} %llu\n", name,
                   api, (unsigned long long)x->count, name, api, x->sum, name, api, (unsigned long long)x->count);
    }
}

/* Requests by endpoint and status class (2xx, 4xx, 5xx...), summed over the (endpoint, status)
 * series. Caller holds m->mu. */
static void by_class(buf *o, const metrics *m) {
    buf_printf(o, "# HELP attnd_requests_by_class_total HTTP requests by endpoint and status class.\n"
                  "# TYPE attnd_requests_by_class_total counter\n");
    for (int i = 0; i < m->n; i++) {
        int cls = m->s[i].status / 100;
        bool first = true; /* the first series of this (endpoint, class) prints the sum */
        for (int k = 0; k < i && first; k++)
            first = !(m->s[k].status / 100 == cls && !strcmp(m->s[k].endpoint, m->s[i].endpoint));
        if (!first) continue;
        uint64_t n = 0;
        for (int k = i; k < m->n; k++)
            if (m->s[k].status / 100 == cls && !strcmp(m->s[k].endpoint, m->s[i].endpoint)) n += m->s[k].count;
        buf_printf(o, "attnd_requests_by_class_total{endpoint=\"%s\",class=\"%dxx\"} %llu\n", m->s[i].endpoint, cls,
                   (unsigned long long)n);
    }
}

/* The gauges a load-aware router reads (the Gateway API Inference Extension's model-server
 * protocol: queued requests, running requests, KV-cache utilisation as a fraction). */
static void routing_gauges(buf *o, const sched_stats *st) {
    metric(o, "attnd_requests_waiting", "gauge", "Requests queued for a scheduler slot.", "%d", st->queued);
    metric(o, "attnd_requests_running", "gauge", "Requests (sequences) in scheduler slots.", "%d", st->active);
    metric(o, "attnd_requests_swapped", "gauge",
           "Requests whose KV was moved out while running: always 0 (attnd never preempts a running request).", "0");
    double use = st->kv_budget ? (double)st->kv_reserved / (double)st->kv_budget : 0;
    metric(o, "attnd_kv_cache_usage_ratio", "gauge",
           "KV cache reserved by running requests as a fraction of the budget (0-1); idle caches are evictable and "
           "not counted.", "%.6f", use > 1 ? 1.0 : use);
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
    by_class(&o, m);
    pthread_mutex_unlock(&m->mu);
    metric(&o, "attnd_ready", "gauge", "1 when the model is loaded.", "%d", ready);
    metric(&o, "attnd_sessions", "gauge", "Named sessions.", "%d", n_sessions);
    if (st) {
        for (size_t k = 0; k < sizeof(STATS) / sizeof(STATS[0]); k++) stat_metric(&o, &STATS[k], st);
        routing_gauges(&o, st);
        for (int k = 0; k < SCHED_H_COUNT; k++) histogram(&o, HISTS[k].name, HISTS[k].help, st->hist[k]);
    }
    return o.p;
}
