/*
 * settings.h — every knob `attnd serve` has, as one plain struct, plus the lifecycle hooks the
 * deployment layer (systemd notify) attaches to.
 *
 * Who fills it: server_settings_default() gives safe defaults, from the settings table in
 * config.c where every setting is described once (loopback only, no API key, CORS off, bounded
 * everything); the configuration module (config.c) overlays a config file, environment and
 * flags, as cli/cmd_serve.c asks it to.
 * The server reads the struct once at start and keeps its own copies of the strings it needs.
 *
 * Ownership: string fields are borrowed by server_create(), which copies them; whoever fills
 * them (the config module) keeps them alive until it returns.
 * A NULL string means "not set".
 */
#ifndef ATTND_SERVER_SETTINGS_H
#define ATTND_SERVER_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/sampler.h"

/*
 * Lifecycle callbacks (all optional; NULL = no-op). Called from the server's own threads:
 *   on_ready      once, after the model is loaded and the port is bound (-> READY=1)
 *   on_status     a one-line human status ("loading model", "ready", "serving: 3 active, 0 queued,
 *                 412 tokens/s" at most every 5 s when it changes) (-> STATUS=...)
 *   on_watchdog   from the scheduler loop at least every settings.watchdog_interval_ms while
 *                 the scheduler is alive (-> WATCHDOG=1); a stuck scheduler stops calling it
 *   on_stopping   once, when shutdown begins (-> STOPPING=1)
 * user is passed back unchanged.
 */
typedef struct server_hooks {
    void (*on_ready)(void *user);
    void (*on_status)(void *user, const char *status);
    void (*on_watchdog)(void *user);
    void (*on_stopping)(void *user);
    void *user;
} server_hooks;

typedef enum server_log_level {
    SERVER_LOG_ERROR = 0,
    SERVER_LOG_WARN = 1,
    SERVER_LOG_INFO = 2, /* default: start-up, ready, access log, disconnects */
    SERVER_LOG_DEBUG = 3,
} server_log_level;

typedef struct server_settings {
    // ---- network ----
    const char *host;        /* bind address; default "127.0.0.1" (loopback only) */
    int port;                /* default 8080; 0 = any free port (tests read it back) */
    int max_connections;     /* concurrent HTTP connections; default 256 */

    // ---- model / engine ----
    const char *model_path;  /* GGUF file; required */
    const char *model_alias; /* id reported by /v1/models; NULL = file name without .gguf */
    int threads;             /* engine threads; <= 0 = all CPUs this process may use */
    int ctx_size;            /* per-sequence context cap; 0 = the model's context length */
    int max_batch;           /* most tokens per engine step (prefill chunk + decodes); default 512 */
    int draft_max;           /* speculative decoding: tokens drafted per step for requests that do
                                not say (draft_max); 0 = off (the default) */
    const char *draft_model; /* a GGUF with the model's vocabulary drafting for requests that
                                speculate; NULL = prompt lookup */
    float draft_min_p;       /* the draft model stops below this top probability; default 0.5 */
    bool draft_adapt;        /* draft only as much as measured cost and acceptance say pays;
                                false = draft_max every step; default true */
    bool mtp;                /* draft with the model's own MTP block (nextn) when the file has one and
                                no draft_model is set; default true */
    int mtp_draft_max;       /* with the MTP block: draft_max when draft_max is 0; default 3 */
    int prefill_budget_ms;   /* a step's time while a prompt prefills beside decoding streams;
                                0 = auto (3 decode steps); default 0 */
    size_t kv_budget_mb;     /* KV memory budget for all sessions together; default 1024 */
    int kv_type;             /* kv_type (attnd/kv.h) of K and V; default KV_F16 */
    bool kv_f32;             /* store KV as f32 whatever kv_type says; default false */
    int kv_checkpoints;      /* recurrent state checkpoints a sequence keeps (hybrid models, kv.h);
                                0 = off; default 8 */
    int kv_checkpoint_interval; /* a checkpoint each time a sequence passes a multiple of this many
                                   tokens; 0 = only at prompt and turn ends; default 512 */
    const char *chat_template; /* built-in family by name ("chatml", "llama3", ...) for a model without a
                                * template of its own; NULL = detect */
    const char *chat_template_file; /* a Jinja chat template file for a model without one; NULL = none */

    // ---- several models (docs/models.md) ----
    const char *models_dir;  /* every GGUF in it is a model named by its file stem (a split set is
                                one); NULL = none: one model, as model_path says */
    bool models_cache;       /* with models_dir or presets, the models `attnd pull` cached count
                                too; default true */
    int models_max_loaded;   /* models loaded at once; 0 = no limit; default 0 */
    int models_wait_s;       /* a request's wait for room while every loaded model is busy; 0 = a
                                503 at once; default 120 */
    size_t models_memory_mb; /* the loaded models' weights plus KV budgets, MiB; 0 = no limit */
    const struct server_preset *presets; /* (n_presets) the config file's [model.NAME] sections;
                                borrowed: valid while the config object lives */
    int n_presets;

    // ---- sessions ----
    int max_sessions;        /* named sessions kept (in memory and on disk); default 1024 */
    const char *state_dir;   /* where session histories persist; NULL = no persistence */
    int max_parallel;        /* sequences decoded together per step; default 16 */
    int session_ttl_s;       /* idle named sessions older than this are removed; 0 = never;
                                default 259200 (3 days) */
    bool session_evict_lru;  /* at a key's quota or max_sessions, creating one evicts that key's least
                                recently used idle session instead of answering 429; default true */
    int max_sessions_per_key; /* named sessions one API key keeps (requests without a key: one
                                tenant); 0 = max_sessions / the number of keys; default 0 */
    int max_responses_per_key; /* stored responses one API key keeps; 0 = max_sessions / keys */
    size_t response_bytes_per_key; /* bytes of stored responses one key keeps; 0 = no cap; 64 MiB */
    int response_ttl_s;      /* stored responses older than this are removed; 0 = never; 30 days */
    const char *session_store; /* shared store of several instances, "redis://host:port[/db]";
                                  NULL or "" = sessions are this instance's (state_dir) */
    const char *session_store_prefix; /* key prefix there; default "attnd:session:" */
    int session_store_ttl_s; /* a record unused this long expires; 0 = never; default 259200 */
    int session_store_timeout_ms; /* one shared-store call's deadline (pool wait, connect, answer);
                                     default 2000 */

    // ---- limits ----
    size_t body_limit;       /* request body cap in bytes; default 1 MiB (413 above) */
    int queue_limit;         /* requests waiting for the scheduler; default 64 (429 above) */
    int tokenize_parallel;   /* /tokenize and /detokenize requests at once; default 4 (429 above) */
    int max_tokens_cap;      /* upper bound on max_tokens per request; default 4096 */
    int max_request_tokens;  /* upper bound on max_tokens x n x prompts per request (400 above);
                                default 32768 */
    int attention_max_weights; /* most weights one POST /v1/attention answer carries; default 1000000 */
    size_t attention_max_bytes; /* most bytes of JSON one /v1/attention answer takes; default 16 MiB */
    int attention_parallel;  /* /v1/attention requests at once; default 2 (429 above) */
    bool embeddings;         /* a generation model also serves /v1/embeddings and /api/embed
                                (llama-server's --embeddings); default false */
    int embed_max_inputs;    /* inputs of one embedding request, documents of one rerank; default 2048 */
    int embed_max_tokens;    /* tokens of one embedding input or rerank pair (also at most max_batch
                                and the context); default 8192 */
    int request_timeout_s;   /* idle HTTP connection timeout (slow loris); default 30 */
    int header_timeout_s;    /* a connection's request headers must arrive within this; default 10 */
    int body_timeout_s;      /* a request's body must arrive within this of its headers; default 20 */
    int max_connections_per_address; /* connections one client address may hold (429 above);
                                0 = half of max_connections; default 0 */
    int shutdown_timeout_s;  /* SIGTERM: how long in-flight work may finish; default 10 */
    int sse_keepalive_s;     /* a waiting stream sends ": keep-alive" this often; 0 = never;
                                default 5 (at most half of request_timeout_s) */
    int watchdog_interval_ms;/* how often on_watchdog is called at least; default 1000 */

    // ---- security ----
    const char *api_key;     /* required Bearer token; NULL or "" = no authentication */
    const char *admin_api_key; /* with api_key: the token POST /models/load and /models/unload need
                                  (it is accepted everywhere else too); NULL = they are refused */
    const char *cors_origins;/* comma-separated allowed origins, "*" for any; NULL = CORS off */
    const char *allowed_hosts; /* extra Host names a loopback-bound server answers (comma-separated);
                                * NULL = loopback names only (DNS rebinding, see origin.h) */

    // ---- logging ----
    server_log_level log_level; /* default SERVER_LOG_INFO */
    bool access_log;         /* one line per request on stderr; default true */

    // ---- default sampling (a request's fields override these) ----
    sampler_params sampling; /* sampler_params_default; the config sets temperature, top_k, top_p,
                                min_p, repeat_penalty, repeat_last_n (bias always NULL) */
    int default_max_tokens;  /* when a request gives none; default 256 */

    server_hooks hooks;
    struct cpushare *cpu_share; /* several models: the server's threads, shared by the models that
                                   work (cpushare.h; borrowed); NULL = the scheduler's own */
} server_settings;

/* One [model.NAME] section: a model's settings, the server's with the section's lines over them. */
typedef struct server_preset {
    const char *name;
    const char *role;        /* "generation" (default), "embedding" or "rerank" */
    server_settings cfg;     /* its presets NULL; model_path NULL = models_dir's file of that name */
} server_preset;

/* True when the server serves several models by name (models_dir or presets). */
static inline bool server_settings_multi(const server_settings *s) {
    return (s->models_dir && *s->models_dir) || s->n_presets > 0;
}

/* Fills *s with the defaults documented above (all hooks NULL, model_path NULL). */
void server_settings_default(server_settings *s);

#endif /* ATTND_SERVER_SETTINGS_H */
