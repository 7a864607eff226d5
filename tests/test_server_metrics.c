/*
 * test_server_metrics.c — the Prometheus rendering of server/process/metrics.c: request counters by
 * endpoint and status, scheduler gauges when a model is loaded, nothing of them while loading;
 * the latency histograms (cumulative buckets), the routing gauges and status classes.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

static const double LE[] = {0.1, 0.5, 1, 5};

static metrics *m; /* a fresh registry for every test */
static void setup(void) { cr_assert_eq(metrics_create(&m, NULL), ATTND_OK); }
static void teardown(void) { metrics_destroy(m); }
TestSuite(metrics, .init = setup, .fini = teardown);

/* Every line of want (n of them) is somewhere in the rendered text t. */
static void expect_lines(const char *t, const char *const *want, size_t n) {
    for (size_t i = 0; i < n; i++) cr_assert(strstr(t, want[i]), "missing %s in\n%s", want[i], t);
}

Test(metrics, requests_are_counted_by_endpoint_and_status) {
    metrics_request(m, "completions", 200, 0.5);
    metrics_request(m, "completions", 200, 0.25);
    metrics_request(m, "completions", 400, 0.01);
    metrics_request(m, "health", 200, 0.001);
    char *t = metrics_render(m, NULL, 0, 0);
    cr_assert(strstr(t, "attnd_requests_total{endpoint=\"completions\",status=\"200\"} 2\n"), "%s", t);
    cr_assert(strstr(t, "attnd_requests_total{endpoint=\"completions\",status=\"400\"} 1\n"));
    cr_assert(strstr(t, "attnd_requests_total{endpoint=\"health\",status=\"200\"} 1\n"));
    cr_assert(strstr(t, "attnd_request_seconds_total{endpoint=\"completions\",status=\"200\"} 0.750000\n"));
    cr_assert(strstr(t, "# TYPE attnd_requests_total counter\n"));
    cr_assert(strstr(t, "attnd_ready 0\n"));
    cr_assert_null(strstr(t, "attnd_kv_bytes_used"), "no scheduler series while loading");
    free(t);
}

Test(metrics, scheduler_series_are_rendered_when_ready) {
    sched_stats st = {.active = 3, .queued = 2, .kv_used = 4096, .kv_budget = 1 << 20, .kv_reserved = 8192,
                      .kv_checkpoint_bytes = 2048,
                      .prompt_tokens = 100, .generated_tokens = 50, .evictions = 1, .last_tok_per_s = 12.5,
                      .threads = 2, .threads_in_use = 1, .spec_drafted = 40, .spec_accepted = 30};
    char *t = metrics_render(m, &st, 7, 1);
    const char *want[] = {"attnd_ready 1\n", "attnd_sessions 7\n", "attnd_sequences_active 3\n",
                          "attnd_sequences_queued 2\n", "attnd_kv_bytes_used 4096\n", "attnd_kv_bytes_budget 1048576\n",
                          "attnd_kv_bytes_reserved 8192\n", "attnd_kv_checkpoint_bytes 2048\n",
                          "attnd_prompt_tokens_total 100\n", "attnd_generated_tokens_total 50\n",
                          "attnd_tokens_per_second 12.500\n", "attnd_kv_evictions_total 1\n",
                          "attnd_engine_threads 2\n", "attnd_engine_threads_in_use 1\n",
                          "attnd_spec_drafted_tokens_total 40\n", "attnd_spec_accepted_tokens_total 30\n"};
    expect_lines(t, want, ATTND_ARRAY_LEN(want));
    free(t);
}

Test(metrics, histograms_routing_gauges_and_status_classes) {
    metrics_request(m, "completions", 200, 0.5);
    metrics_request(m, "completions", 201, 0.5);
    metrics_request(m, "completions", 503, 0.1);
    sched_stats st = {.active = 2, .queued = 5, .kv_budget = 1000, .kv_reserved = 250};
    for (int k = 0; k < SCHED_H_COUNT; k++)
        for (int a = 0; a < SCHED_N_APIS; a++) histo_init(&st.hist[k][a], LE, 4);
    histo_observe(&st.hist[SCHED_H_TTFT][METRICS_API_OPENAI], 0.3);
    histo_observe(&st.hist[SCHED_H_TTFT][METRICS_API_OPENAI], 2);
    histo_observe(&st.hist[SCHED_H_TTFT][METRICS_API_ANTHROPIC], 0.05);
    char *t = metrics_render(m, &st, 0, 1);
    const char *want[] = {
        "# TYPE attnd_time_to_first_token_seconds histogram\n",
        "attnd_time_to_first_token_seconds_bucket{api=\"openai\",le=\"0.1\"} 0\n",
        "attnd_time_to_first_token_seconds_bucket{api=\"openai\",le=\"0.5\"} 1\n",
        "attnd_time_to_first_token_seconds_bucket{api=\"openai\",le=\"5\"} 2\n",
        "attnd_time_to_first_token_seconds_bucket{api=\"openai\",le=\"+Inf\"} 2\n",
        "attnd_time_to_first_token_seconds_sum{api=\"openai\"} 2.300000\n",
        "attnd_time_to_first_token_seconds_count{api=\"openai\"} 2\n",
        "attnd_time_to_first_token_seconds_bucket{api=\"anthropic\",le=\"0.1\"} 1\n",
        "attnd_time_to_first_token_seconds_count{api=\"anthropic\"} 1\n",
        "# TYPE attnd_inter_token_latency_seconds histogram\n",
        "attnd_requests_waiting 5\n",
        "attnd_requests_running 2\n",
        "attnd_requests_swapped 0\n",
        "attnd_kv_cache_usage_ratio 0.250000\n",
        "attnd_requests_by_class_total{endpoint=\"completions\",class=\"2xx\"} 2\n",
        "attnd_requests_by_class_total{endpoint=\"completions\",class=\"5xx\"} 1\n",
    };
    expect_lines(t, want, ATTND_ARRAY_LEN(want));
    cr_assert_eq(strstr(strstr(t, "class=\"2xx\"") + 1, "class=\"2xx\""), NULL, "one 2xx series per endpoint");
    cr_assert_null(strstr(t, "api=\"ollama\""), "an API without observations has no series");
    cr_assert_null(strstr(t, "attnd_inter_token_latency_seconds_count"), "nor a histogram without any");
    free(t);
}
