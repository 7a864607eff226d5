/*
 * server.c — the lifecycle of `attnd serve` (see server.h): bind, load the model and start the
 * scheduler, drain and stop. Requests are handled in http.c (routing, auth, caps), endpoints.c
 * and completions.c (the endpoints), sse.c (streaming) and completion_body.c (response JSON).
 *
 * libmicrohttpd runs one thread per connection, so a handler may block while its request is
 * generated (non-streamed) and a streaming response's reader may block until the scheduler
 * publishes more text. Every wait is a 100 ms timed wait that also polls the socket for a
 * hang-up, so a vanished client cancels its sequence within about one decode step.
 */
#include "server.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "attnd/cpuinfo.h"
#include "attnd/kv.h"
#include "conn.h"
#include "http_mhd.h"
#include "metrics.h"
#include "models.h"
#include "origin.h"
#include "routes.h"
#include "rstore.h"
#include "scheduler.h"
#include "sess_redis.h"
#include "slog.h"

// ---- lifecycle ----------------------------------------------------------------------------

/* The string settings the server keeps its own copies of in s->cfg (the caller's may go away):
 * server_create copies them, server_destroy frees them. */
static const size_t OWNED_STRINGS[] = {
    offsetof(server_settings, host),          offsetof(server_settings, model_path),
    offsetof(server_settings, model_alias),   offsetof(server_settings, state_dir),
    offsetof(server_settings, api_key),       offsetof(server_settings, cors_origins),
    offsetof(server_settings, chat_template), offsetof(server_settings, allowed_hosts),
    offsetof(server_settings, chat_template_file),
    offsetof(server_settings, session_store), offsetof(server_settings, session_store_prefix),
    offsetof(server_settings, models_dir),    offsetof(server_settings, admin_api_key),
};

static const char **string_setting(server_settings *c, size_t off) { return (const char **)((char *)c + off); }

/* false when out of memory (the fields copied so far stay owned, the others NULL). */
static bool copy_strings(server_settings *c) {
    bool ok = true;
    for (size_t i = 0; i < ATTND_ARRAY_LEN(OWNED_STRINGS); i++) {
        const char **f = string_setting(c, OWNED_STRINGS[i]);
        if (*f && !(*f = strdup(*f))) ok = false;
    }
    return ok;
}

static void status_hook(server *s, const char *msg) {
    if (s->cfg.hooks.on_status) s->cfg.hooks.on_status(s->cfg.hooks.user, msg);
}

/* Binds and listens on host:port ourselves, so that a port in use is an error that says so
 * (errno), and never shared: only SO_REUSEADDR (restart over TIME_WAIT), no SO_REUSEPORT, so a
 * second server on a busy port fails with "address in use" instead of taking half its
 * connections. *fd is handed to libmicrohttpd, which closes it at stop. */
static attnd_status listen_socket(const char *host, int port, int *fd, attnd_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int gai = getaddrinfo(host, ps, &hints, &ai);
    if (gai != 0 || !ai) return attnd_fail(err, ATTND_ERR_INVALID, "cannot resolve host '%s': %s", host, gai_strerror(gai));
    int one = 1;
    *fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0 || setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(*fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(*fd, 128) != 0) {
        int e = errno;
        if (*fd >= 0) close(*fd);
        *fd = -1;
        freeaddrinfo(ai);
        return attnd_fail(err, ATTND_ERR_IO, "cannot listen on %s:%d: %s", host, port, strerror(e));
    }
    freeaddrinfo(ai);
    return ATTND_OK;
}

attnd_status server_create_unbound(server **out, const server_settings *cfg, attnd_err *err) {
    *out = NULL;
#ifdef __GLIBC__
    /* blocks of 256 KiB and more (an attention answer, a big request's JSON) are mapped and go
     * back to the system when freed; glibc would otherwise raise the threshold after the first
     * such free and keep the next ones in its per-thread arenas for good */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
    server *s = calloc(1, sizeof(*s));
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    s->routes = http_routes;
    s->n_routes = http_n_routes;
    if (!s->cfg.host) s->cfg.host = "127.0.0.1";
    if (s->cfg.cors_origins && !*s->cfg.cors_origins) s->cfg.cors_origins = NULL; /* "" = no CORS */
    if (!copy_strings(&s->cfg)) {
        server_destroy(s);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    s->loopback = origin_bind_is_loopback(s->cfg.host);
    if (s->cfg.body_limit == 0) s->cfg.body_limit = 1u << 20;
    if (s->cfg.max_tokens_cap <= 0) s->cfg.max_tokens_cap = 4096;
    if (s->cfg.max_request_tokens <= 0) s->cfg.max_request_tokens = 32768;
    if (s->cfg.default_max_tokens <= 0) s->cfg.default_max_tokens = 256;
    attnd_status rc = metrics_create(&s->met, err);
    if (rc == ATTND_OK && !s->cfg.model_path && !server_settings_multi(&s->cfg)) rc = attnd_fail(err, ATTND_ERR_INVALID, "no model path given");
    if (rc != ATTND_OK) {
        server_destroy(s);
        return rc;
    }
    *out = s;
    return ATTND_OK;
}

attnd_status server_create(server **out, const server_settings *cfg, attnd_err *err) {
    server *s;
    attnd_status rc = server_create_unbound(&s, cfg, err);
    *out = NULL;
    if (rc != ATTND_OK) return rc;
    if (cfg->port < 0 || cfg->port > 65535) {
        rc = attnd_fail(err, ATTND_ERR_INVALID, "port %d is outside 0..65535", cfg->port);
        goto fail;
    }
    int max_conns = cfg->max_connections > 0 ? cfg->max_connections : 256;
    int idle_s = cfg->request_timeout_s > 0 ? cfg->request_timeout_s : 30;
    conn_limits lim = {.max_connections = max_conns, .header_timeout_s = cfg->header_timeout_s > 0 ? cfg->header_timeout_s : 10,
                       .idle_timeout_s = idle_s, .body_timeout_s = cfg->body_timeout_s > 0 ? cfg->body_timeout_s : 20,
                       .per_address = cfg->max_connections_per_address};
    if ((rc = conn_tracker_create(&s->conns, &lim, err))) goto fail;
    int fd = -1;
    if ((rc = listen_socket(s->cfg.host, cfg->port, &fd, err)) != ATTND_OK) goto fail;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_POLL;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, http_on_request, s,
                            MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)idle_s,
                            /* room above max_connections, so the excess is answered 503 (conn.h) */
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(max_conns <= 32767 ? 2 * max_conns : 65535),
                            MHD_OPTION_NOTIFY_CONNECTION, conn_on_notify, s->conns,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
                            MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, s,
                            MHD_OPTION_END);
    if (!s->d) {
        close(fd);
        rc = attnd_fail(err, ATTND_ERR_IO, "cannot start the HTTP server on %s:%d", s->cfg.host, cfg->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return ATTND_OK;
fail:
    server_destroy(s);
    return rc;
}

int server_port(const server *s) { return s->port; }

/* The start-up facts a person reading the log needs: threads, kernels, KV sizing, state dir. */
static void log_engine_setup(const server *s) {
    kv_type kt = s->cfg.kv_f32 ? KV_F32 : (kv_type)s->cfg.kv_type;
    size_t budget = s->cfg.kv_budget_mb ? s->cfg.kv_budget_mb << 20 : (size_t)1 << 30; /* as the scheduler */
    size_t per_ctx = kv_context_bytes(s->m, s->n_ctx, kt);
    slog_info("engine: %d threads, %s kernels; KV budget %zu MiB (%s, %zu bytes/token) = %zu full contexts of "
              "%d tokens; state dir %s",
              cpuinfo_threads(s->cfg.threads), cpuinfo_kernels(),
              budget >> 20, kv_type_name(kt), kv_bytes_per_token(s->m, kt), per_ctx ? budget / per_ctx : 0,
              s->n_ctx, s->cfg.state_dir ? s->cfg.state_dir : "none (sessions are not persisted)");
}

/* Each API key's share of the stores (requests without a key are one tenant): the configured
 * quota, else max_sessions split evenly between the keys. */
static void set_tenant_quotas(server *s) {
    int keys = 1;
    for (const char *k = s->cfg.api_key; k && *k; k++) keys += *k == '\n' && k[1];
    int share = s->cfg.max_sessions / keys > 0 ? s->cfg.max_sessions / keys : 1;
    int sessions = s->cfg.max_sessions_per_key > 0 ? s->cfg.max_sessions_per_key : share;
    int responses = s->cfg.max_responses_per_key > 0 ? s->cfg.max_responses_per_key : share;
    sess_store_set_quota(s->store, sessions);
    rstore_set_limits(s->responses, &(rstore_limits){.per_owner = responses,
                                                      .per_owner_bytes = s->cfg.response_bytes_per_key,
                                                      .ttl_ms = (int64_t)s->cfg.response_ttl_s * 1000});
    char who[64];
    if (!s->cfg.api_key || !*s->cfg.api_key) snprintf(who, sizeof(who), "no API key, so one tenant for every client,");
    else snprintf(who, sizeof(who), "%d key%s, each", keys, keys == 1 ? "" : "s");
    slog_info("tenants: %s keeps up to %d sessions and %d stored responses (%zu bytes), responses expire after %d s",
              who, sessions, responses, s->cfg.response_bytes_per_key, s->cfg.response_ttl_s);
}

/* The session store: this instance's (state_dir), or a cache of the shared one (session_store),
 * which then holds every named session instead of state_dir. */
static attnd_status sessions_open(server *s, const char *tag, attnd_err *err) {
    const char *url = s->cfg.session_store && *s->cfg.session_store ? s->cfg.session_store : NULL;
    sess_redis *shared = NULL;
    attnd_status rc = url ? sess_redis_create(&shared, url, s->cfg.session_store_prefix, s->cfg.session_store_ttl_s,
                                             tag, err)
                          : ATTND_OK;
    if (rc != ATTND_OK) return rc;
    rc = sess_store_create(&s->store, url ? NULL : s->cfg.state_dir, tag, s->cfg.max_sessions, err);
    if (rc != ATTND_OK) {
        sess_redis_destroy(shared);
        return rc;
    }
    if (!url) return ATTND_OK;
    sess_redis_set_timeout(shared, s->cfg.session_store_timeout_ms);
    sess_store_share(s->store, shared);
    slog_info("sessions: shared store %s, keys %s*, TTL %d s (connects on first use)", sess_redis_url(shared),
              s->cfg.session_store_prefix ? s->cfg.session_store_prefix : "", s->cfg.session_store_ttl_s);
    return ATTND_OK;
}

/* Several models: none loads until a request names it; the responses store is the server's. */
static attnd_status load_several(server *s, attnd_err *err) {
    attnd_status rc = models_open(s, err);
    if (rc == ATTND_OK) rc = rstore_create(&s->responses, s->cfg.state_dir, "models", s->cfg.max_sessions, err);
    if (rc != ATTND_OK) return rc;
    atomic_store(&s->ready, true);
    status_hook(s, "ready");
    if (s->cfg.hooks.on_ready) s->cfg.hooks.on_ready(s->cfg.hooks.user);
    return ATTND_OK;
}

attnd_status server_load(server *s, attnd_err *err) {
    if (server_settings_multi(&s->cfg)) return load_several(s, err);
    status_hook(s, "loading model");
    attnd_status rc = model_load(&s->m, s->cfg.model_path, err);
    if (rc != ATTND_OK) return rc;
    if ((rc = tok_load(&s->tok, model_gguf(s->m), err)) != ATTND_OK) return rc;
    const model_info *mi = model_info_get(s->m);
    s->n_vocab = mi->n_vocab;
    s->n_ctx = s->cfg.ctx_size > 0 && s->cfg.ctx_size < mi->n_ctx ? s->cfg.ctx_size : mi->n_ctx;
    /* LongRoPE's factors follow the context served, as llama.cpp's follow its n_ctx */
    if ((rc = model_set_context(s->m, s->n_ctx, err)) != ATTND_OK) return rc;
    if (gguf_find_tensor(model_gguf(s->m), "rope_factors_long.weight"))
        slog_info("LongRoPE: the %s factors (a context of %d %s rope.scaling.original_context_length)",
                  mi->rope_long ? "long" : "short", s->n_ctx, mi->rope_long ? "beyond" : "within");
    // ---- model id: alias, else the file name without .gguf ----
    const char *base = strrchr(s->cfg.model_path, '/');
    base = base ? base + 1 : s->cfg.model_path;
    s->model_id = strdup(s->cfg.model_alias ? s->cfg.model_alias : base);
    if (!s->model_id) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    size_t l = strlen(s->model_id);
    if (!s->cfg.model_alias && l > 5 && !strcmp(s->model_id + l - 5, ".gguf")) s->model_id[l - 5] = '\0';
    // ---- chat template ----
    const char *tmpl = NULL;
    gguf_get_str(model_gguf(s->m), "tokenizer.chat_template", &tmpl, NULL);
    if ((rc = chat_template_load(&s->chat, tmpl, s->cfg.chat_template_file, s->cfg.chat_template, s->tok, err)) !=
        ATTND_OK)
        return rc;
    if (s->chat.source == CHAT_SRC_GGUF && s->cfg.chat_template && *s->cfg.chat_template)
        slog_warn("the configured chat_template family is not used: the model carries its own template "
                  "(chat_template_file replaces it)");
    if (s->chat.source == CHAT_SRC_FILE && tmpl && *tmpl)
        slog_info("chat_template_file %s replaces the model's own template", s->cfg.chat_template_file);
    if (s->chat.source == CHAT_SRC_DETECTED || s->chat.source == CHAT_SRC_FALLBACK)
        slog_warn("%s; using the built-in %s template (set chat_template or chat_template_file to override)",
                  s->chat.why, chat_family_name(s->chat.family));
    // ---- sessions: the model tag ties saved token ids to this vocabulary ----
    char tag[200];
    snprintf(tag, sizeof(tag), "%s/vocab%d", s->model_id, s->n_vocab);
    if ((rc = sessions_open(s, tag, err)) != ATTND_OK) return rc;
    sess_store_set_lifetime(s->store, (int64_t)s->cfg.session_ttl_s * 1000, s->cfg.session_evict_lru);
    if ((rc = rstore_create(&s->responses, s->cfg.state_dir, tag, s->cfg.max_sessions, err)) != ATTND_OK) return rc;
    set_tenant_quotas(s);
    if ((rc = sched_create(&s->sch, s->m, s->tok, s->store, &s->cfg, err)) != ATTND_OK) return rc;
    atomic_store(&s->ready, true);
    slog_info("model ready: %s (%s, %d layers, vocab %d, context %d, chat template %s (%s), %d sessions restored)",
              s->model_id, mi->arch, mi->n_layer, mi->n_vocab, s->n_ctx, chat_family_name(s->chat.family),
              chat_source_str(&s->chat),
              sess_count(s->store));
    log_engine_setup(s);
    status_hook(s, "ready");
    if (s->cfg.hooks.on_ready) s->cfg.hooks.on_ready(s->cfg.hooks.user);
    return ATTND_OK;
}

/* Waits until no request is in flight and the scheduler is idle, or timeout_ms passed. */
static bool drain(server *s, int timeout_ms) {
    double end = attnd_now_s() + timeout_ms / 1e3, next_log = 0;
    for (;;) {
        int n = atomic_load(&s->in_flight);
        bool idle = n == 0 && (!s->sch || sched_wait_idle(s->sch, 0));
        if (idle) return true;
        double now = attnd_now_s();
        if (now >= end) return false;
        if (now >= next_log) { /* a countdown once a second: the operator sees what it waits for */
            slog_info("shutdown: waiting for %d request%s to finish, %.0f s left (a second signal exits now)", n,
                      n == 1 ? "" : "s", end - now);
            next_log = now + 1.0;
        }
        usleep(10 * 1000);
    }
}

void server_shutdown(server *s) {
    if (!s || s->shut_down) return;
    s->shut_down = true;
    atomic_store(&s->stopping, true);
    if (s->cfg.hooks.on_stopping) s->cfg.hooks.on_stopping(s->cfg.hooks.user);
    status_hook(s, "stopping");
    if (s->d) {
        /* stop accepting; connections already open finish their requests */
        MHD_socket fd = MHD_quiesce_daemon(s->d);
        if (fd != MHD_INVALID_SOCKET) close(fd);
    }
    /* drain: every request already received finishes (new ones get 503), within the timeout;
     * then what is left is cancelled and gets a short grace to send its final chunk */
    int ms = (s->cfg.shutdown_timeout_s > 0 ? s->cfg.shutdown_timeout_s : 10) * 1000;
    if (!drain(s, ms)) {
        slog_warn("shutdown: in-flight requests did not finish in %d s; cancelling them", ms / 1000);
        if (s->sch) sched_cancel_all(s->sch);
        models_cancel_all(s);
        drain(s, 2000);
    }
    if (s->d) {
        MHD_stop_daemon(s->d);
        s->d = NULL;
    }
    conn_tracker_destroy(s->conns);
    s->conns = NULL;
    if (s->store) {
        int fails = sess_persist_all(s->store);
        if (fails) slog_error("shutdown: %d sessions could not be saved", fails);
    }
    sched_destroy(s->sch);
    s->sch = NULL;
    models_close(s);
    slog_info("stopped");
}

void server_destroy(server *s) {
    if (!s) return;
    server_shutdown(s);
    sess_store_destroy(s->store);
    rstore_destroy(s->responses);
    chat_template_free(&s->chat);
    tok_destroy(s->tok);
    model_destroy(s->m);
    metrics_destroy(s->met);
    free(s->model_id);
    free(atomic_load(&s->heads_json));
    for (size_t i = 0; i < ATTND_ARRAY_LEN(OWNED_STRINGS); i++)
        free((char *)*string_setting(&s->cfg, OWNED_STRINGS[i]));
    conn_tracker_destroy(s->conns);
    free(s);
}
