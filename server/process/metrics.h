/*
 * metrics.h — request counters for GET /metrics (Prometheus text format 0.0.4).
 * Endpoint labels come from the route table (a fixed set), so the label space is bounded; the
 * latency histograms are labelled by API (metrics_api), also a fixed set.
 * Thread-safety: all functions may be called from any thread.
 */
#ifndef ATTND_SERVER_METRICS_H
#define ATTND_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler.h"

typedef struct metrics metrics;

/* The APIs a generation request comes through: the latency histograms' `api` label
 * (sched_job_spec.api). Only grows at the end. */
typedef enum metrics_api {
    METRICS_API_OTHER = 0, /* attention inspection and anything not below */
    METRICS_API_OPENAI,    /* /v1/completions, /v1/chat/completions */
    METRICS_API_RESPONSES, /* /v1/responses */
    METRICS_API_ANTHROPIC, /* /v1/messages */
    METRICS_API_OLLAMA,    /* /api/chat, /api/generate */
    METRICS_API_LLAMACPP,  /* /completion, /infill */
    METRICS_API_COUNT
} metrics_api;

attnd_status metrics_create(metrics **out, attnd_err *err);
void metrics_destroy(metrics *m);
/* Counts one finished request; endpoint is a static string (the route's label). */
void metrics_request(metrics *m, const char *endpoint, int status, double seconds);
/*
 * Renders everything: request counters, plus the scheduler's gauges and counters from st
 * (may be NULL while the model loads) and the number of sessions. Returns a malloc'd string.
 */
char *metrics_render(metrics *m, const sched_stats *st, int n_sessions, int ready);

#endif
