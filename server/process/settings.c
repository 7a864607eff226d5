/*
 * settings.c — the defaults of `attnd serve` (see settings.h). Safe by default: loopback only,
 * no CORS, every queue, body and context bounded.
 */
#include "settings.h"

#include <string.h>

void server_settings_default(server_settings *s) {
    memset(s, 0, sizeof(*s));
    s->host = "127.0.0.1";
    s->port = 8080;
    s->max_connections = 256;
    s->threads = 0;
    s->ctx_size = 0;
    s->max_batch = 512;
    s->kv_budget_mb = 1024;
    s->max_sessions = 1024;
    s->max_parallel = 16;
    s->session_ttl_s = 259200;
    s->session_evict_lru = true;
    s->body_limit = 1u << 20;
    s->queue_limit = 64;
    s->tokenize_parallel = 4;
    s->max_tokens_cap = 4096;
    s->attention_max_weights = 1000000;
    s->request_timeout_s = 30;
    s->header_timeout_s = 10;
    s->shutdown_timeout_s = 10;
    s->sse_keepalive_s = 5;
    s->watchdog_interval_ms = 1000;
    s->log_level = SERVER_LOG_INFO;
    s->access_log = true;
    sampler_params_default(&s->sampling);
    s->default_max_tokens = 256;
}
