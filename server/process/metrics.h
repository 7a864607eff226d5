/*
 * metrics.h — request counters for GET /metrics (Prometheus text format 0.0.4).
 * Endpoint labels come from the route table (a fixed set), so the label space is bounded.
 * Thread-safety: all functions may be called from any thread.
 */
#ifndef ATTND_SERVER_METRICS_H
#define ATTND_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler.h"

typedef struct metrics metrics;

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
