/*
 * cmd_serve.c — `attnd serve`: settings from flags/env/config file (server/process/config.c), systemd
 * notifications (server/process/sdnotify.c) wired to the server's hooks, then serve until SIGINT or
 * SIGTERM and shut down gracefully (exit 0).
 *
 * Signals are blocked in every thread before any is created and taken synchronously with
 * sigwait() here, so no async-signal handler races with the server's threads.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "attnd/model.h"
#include "attnd/tokenizer.h"
#include "commands.h"
#include "../server/process/config.h"
#include "../server/process/sdnotify.h"
#include "../server/process/server.h"
#include "../server/process/slog.h"

// ---- llama-server's spellings ------------------------------------------------------------------

/* The flags llama-server users type, read as serve's own (server/process/config.c's table). */
static const struct serve_alias {
    const char *alias, *flag;
} SERVE_ALIASES[] = {
    {"-m", "--model"},         {"-c", "--ctx-size"},          {"-t", "--threads"},
    {"-n", "--max-tokens"},    {"--n-predict", "--max-tokens"}, {"--predict", "--max-tokens"},
    {"--n", "--max-tokens"}, /* generate's spelling */
    {"--temp", "--temperature"}, {"-np", "--max-parallel"},   {"--parallel", "--max-parallel"},
    {"-a", "--model-alias"},   {"--alias", "--model-alias"},
};

static const char *SERVE_ALIAS_USAGE =
    "llama-server's spellings work too: -m (--model), -c (--ctx-size), -t (--threads), -n / --n-predict / --n\n"
    "(--max-tokens), --temp (--temperature), -np / --parallel (--max-parallel), -a / --alias\n"
    "(--model-alias); -ngl / --n-gpu-layers N is read and ignored (attnd computes on the CPU).\n\n";

/* argv with every alias spelled as serve's flag and the GPU flags (with their values) left out,
 * noted on stderr. The strings are argv's or kept in *owned (free each, then the array). */
static char **serve_argv(int argc, char **argv, int *argc_out, char ***owned) {
    char **out = calloc((size_t)argc + 1, sizeof(*out));
    *owned = calloc((size_t)argc + 1, sizeof(**owned));
    if (!out || !*owned) return free(out), NULL;
    int n = 0, n_owned = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = i > 0 && !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(len < sizeof(name) ? len : sizeof(name) - 1), a);
        if (i > 0 && cli_gpu_flag(name)) {
            const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : "";
            fprintf(stderr, "attnd serve: %s %s ignored: attnd computes on the CPU\n", name, v);
            continue;
        }
        const struct serve_alias *al = NULL;
        for (size_t k = 0; i > 0 && k < ATTND_ARRAY_LEN(SERVE_ALIASES) && !al; k++)
            if (!strcmp(SERVE_ALIASES[k].alias, name)) al = &SERVE_ALIASES[k];
        if (!al) {
            out[n++] = argv[i];
            continue;
        }
        char *s = malloc(strlen(al->flag) + (eq ? strlen(eq) : 0) + 1);
        if (!s) break;
        sprintf(s, "%s%s", al->flag, eq ? eq : "");
        out[n++] = (*owned)[n_owned++] = s;
    }
    *argc_out = n;
    return out;
}

static void serve_argv_free(char **args, char **owned) {
    for (size_t i = 0; owned && owned[i]; i++) free(owned[i]);
    free(owned);
    free(args);
}

static void hook_ready(void *u) { sdnotify_ready(u); }
static void hook_status(void *u, const char *s) { sdnotify_status(u, s); }
static void hook_watchdog(void *u) { sdnotify_watchdog(u); }
static void hook_stopping(void *u) { sdnotify_stopping(u); }

/* A model in a regular file is loaded once before the port opens (it is only mmapped, so this
 * is quick), so that a wrong --model fails at once with its reason instead of after "listening on".
 * Anything else (a FIFO, a device) is left to the real load, which happens while /health says 503. */
static bool model_precheck(const char *path, int ctx_size) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return true;
    model *m = NULL;
    tokenizer *t = NULL;
    attnd_err err;
    bool ok = model_load(&m, path, &err) == ATTND_OK && tok_load(&t, model_gguf(m), &err) == ATTND_OK;
    if (!ok) slog_error("cannot load %s: %s", path, err.msg);
    int n_ctx = ok ? model_info_get(m)->n_ctx : 0;
    if (ok && ctx_size > n_ctx)
        slog_warn("ctx_size %d is more than the model's context of %d; using %d", ctx_size, n_ctx, n_ctx);
    tok_destroy(t);
    model_destroy(m);
    return ok;
}

/* SIGINT and SIGTERM blocked (sigwait takes them), SIGPIPE ignored: before any thread exists, so
 * that every thread inherits the mask. */
static void block_stop_signals(sigset_t *sigs) {
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* A second SIGINT / SIGTERM during the drain: exit now, as the countdown says (what is in
 * flight is lost, sessions not yet saved are not saved). */
static void *second_signal(void *arg) {
    static sigset_t sigs; /* the thread may outlive the caller's copy */
    sigs = *(const sigset_t *)arg;
    int sig = 0;
    sigwait(&sigs, &sig);
    slog_warn("%s received again; exiting without waiting", sig == SIGINT ? "SIGINT" : "SIGTERM");
    _exit(1);
}

/* The settings from argv (llama-server's spellings read as serve's), the environment and the
 * config file; exits 2 with the reason on a usage error. */
static config *serve_config(int argc, char **argv, server_settings *st) {
    int n;
    char **owned = NULL, **args = serve_argv(argc, argv, &n, &owned);
    config *cfg = NULL;
    attnd_err err;
    attnd_status rc = args ? config_load(&cfg, st, n, args, NULL, &err) : attnd_fail(&err, ATTND_ERR_NOMEM, "out of memory");
    serve_argv_free(args, owned);
    if (rc != ATTND_OK) {
        fprintf(stderr, "attnd serve: %s\nTry 'attnd serve --help'.\n", err.msg);
        exit(2);
    }
    return cfg;
}

int cmd_serve(int argc, char **argv) {
    server_settings st;
    attnd_err err;
    config *cfg = serve_config(argc, argv, &st);
    if (config_wants_help(cfg)) {
        fputs("usage: attnd serve [--model PATH] [--host 127.0.0.1] [--port 8080] [--threads N] [--config FILE] ...\n\n",
              stdout);
        fputs(SERVE_ALIAS_USAGE, stdout);
        config_usage(stdout);
        config_destroy(cfg);
        return 0;
    }
    char *dflt = NULL;
    bool several = server_settings_multi(&st); /* models_dir or [model.NAME]: no one model */
    if (!several && (!st.model_path || !*st.model_path)) {
        dflt = cli_default_model_path();
        if (dflt && config_set_default(cfg, &st, "model", dflt, "default model", &err) != ATTND_OK) {
            fprintf(stderr, "attnd serve: %s\n", err.msg);
            free(dflt);
            config_destroy(cfg);
            return 2;
        }
    }
    if (config_wants_print(cfg)) {
        config_print(cfg, &st, stdout);
        free(dflt);
        config_destroy(cfg);
        return 0;
    }
    if (!several && (!st.model_path || !*st.model_path)) {
        fprintf(stderr, "attnd serve: no --model given and no default model found\n");
        config_destroy(cfg);
        return 2;
    }
    slog_set_level(st.log_level);
    if (config_scrub_argv(argc, argv))
        slog_warn("--api-key on the command line is visible to local users until start-up hides it; "
                  "use api_key_file or ATTND_API_KEY instead");

    sdnotify *notify = NULL;
    if (sdnotify_create_from_env(&notify, &err) != ATTND_OK) slog_warn("systemd notify disabled: %s", err.msg);
    st.hooks = (server_hooks){hook_ready, hook_status, hook_watchdog, hook_stopping, notify};
    uint64_t wd = sdnotify_watchdog_interval_usec(notify);
    if (wd && (uint64_t)st.watchdog_interval_ms * 1000 > wd) st.watchdog_interval_ms = (int)(wd / 1000);

    sigset_t sigs;
    block_stop_signals(&sigs);

    int rc = 1;
    server *srv = NULL;
    char *pulled = NULL; /* model = hf://org/repo:QUANT: the cached (or just pulled) file */
    if (!several && !strncmp(st.model_path, "hf://", 5)) st.model_path = pulled = cli_hub_model("serve", st.model_path);
    if (!several && !model_precheck(st.model_path, st.ctx_size)) goto out;
    if (server_create(&srv, &st, &err) != ATTND_OK) {
        slog_error("%s", err.msg);
        goto out;
    }
    slog_info("listening on http://%s%s%s:%d", strchr(st.host, ':') ? "[" : "", st.host,
              strchr(st.host, ':') ? "]" : "", server_port(srv));
    if (server_load(srv, &err) != ATTND_OK) {
        slog_error("cannot load %s: %s", several ? "the models" : st.model_path, err.msg);
        goto out;
    }
    int sig = 0;
    sigwait(&sigs, &sig);
    slog_info("%s received; shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    pthread_t second;
    if (pthread_create(&second, NULL, second_signal, &sigs) == 0) pthread_detach(second);
    server_shutdown(srv);
    rc = 0;
out:
    server_destroy(srv);
    sdnotify_destroy(notify);
    free(pulled);
    free(dflt);
    config_destroy(cfg);
    return rc;
}
