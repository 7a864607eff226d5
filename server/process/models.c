/*
 * models.c — a server of several models (docs/models.md): the registry's entries from the
 * presets, models_dir and the pull cache, and what loading and unloading one model does
 * (model, tokenizer, chat template, its own sessions and scheduler). server.c calls
 * models_open instead of loading one model when settings say several (server_settings_multi).
 */
#include "models.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "attnd/model.h"
#include "hub.h"
#include "models_http.h"
#include "scheduler.h"
#include "sess_file.h"
#include "slog.h"
#include "statedir.h"

// ---- loading one model --------------------------------------------------------------------------

/* The settings model name runs with: its preset's, else the server's. */
static const server_settings *settings_of(const struct server *s, int preset) {
    return preset >= 0 ? &s->cfg.presets[preset].cfg : &s->cfg;
}

/* Its sessions' folder: state_dir/models/NAME (made when make), NULL without a state_dir. */
static const char *model_state_dir(const server_settings *c, const char *name, bool make, char *buf, size_t cap) {
    if (!c->state_dir) return NULL;
    snprintf(buf, cap, "%s/models", c->state_dir);
    if (make) mkdir(buf, 0700);
    snprintf(buf, cap, "%s/models/%s", c->state_dir, name);
    if (make) mkdir(buf, 0700);
    return buf;
}

static size_t file_bytes(const char *path);

static attnd_status open_model(server_model *sm, const char *path, const model_load_opts *lo, attnd_err *err) {
    char pulled[4096];
    if (!strncmp(path, "hf://", 5)) { /* in the cache, or pulled now: this is the loader's thread */
        if (hub_cached(path, NULL, pulled, sizeof(pulled), err) != ATTND_OK &&
            hub_pull(path, NULL, pulled, sizeof(pulled), err) != ATTND_OK)
            return ATTND_ERR_IO;
        path = pulled;
        sm->pulled_bytes = file_bytes(path);
    }
    attnd_status rc = model_load_with(&sm->m, path, lo, err);
    if (rc == ATTND_OK) rc = tok_load(&sm->tok, model_gguf(sm->m), err);
    if (rc != ATTND_OK) return rc;
    const model_info *mi = model_info_get(sm->m);
    sm->n_ctx = sm->cfg.ctx_size > 0 && sm->cfg.ctx_size < mi->n_ctx ? sm->cfg.ctx_size : mi->n_ctx;
    if ((rc = model_set_context(sm->m, sm->n_ctx, err)) != ATTND_OK) return rc;
    const char *tmpl = NULL;
    gguf_get_str(model_gguf(sm->m), "tokenizer.chat_template", &tmpl, NULL);
    return chat_template_load(&sm->chat, tmpl, sm->cfg.chat_template_file, sm->cfg.chat_template, sm->tok, err);
}

/* How much lower the CPU priority of the thread that reads and packs a model's weights is (a
 * niceness above the server's): the models serving meanwhile keep their speed, and the load
 * takes the CPU they leave (issue 50's isolation target, tools/bench/models_isolation.py). */
#define LOAD_NICE 10

/* The longest a load waits before one slice (1 MB) of its packing while other models have work:
 * it packs in their gaps, and still moves on when they never rest (at least 1 MB per
 * LOAD_PACE_MAX_MS, ~50 MB/s). */
#define LOAD_PACE_MAX_MS 20

/* model_load_opts.pace: waits (1 ms at a time, LOAD_PACE_MAX_MS at most) while some model's
 * scheduler works (cpushare: the loading model has none yet), so that packing's CPU time and
 * its traffic through the caches and memory fall in the gaps between their steps. */
static void pace_load(void *user, size_t done, size_t total) {
    (void)done, (void)total;
    cpushare *cs = user;
    for (int ms = 0; ms < LOAD_PACE_MAX_MS && cpushare_working(cs) > 0; ms++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
}

typedef struct open_job {
    server_model *sm;
    const char *path;
    const model_load_opts *lo;
    attnd_err *err;
    attnd_status rc;
} open_job;

static void *open_niced(void *arg) {
    open_job *j = arg;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)tid);
    if (errno == 0) (void)setpriority(PRIO_PROCESS, (id_t)tid, nice + LOAD_NICE); /* advice: failure changes nothing */
    j->rc = open_model(j->sm, j->path, j->lo, j->err);
    return NULL;
}

/* open_model on a thread of its own at a lower priority (threads inherit their creator's: the
 * scheduler's and the engine's, made afterwards by the caller, keep the server's), packing the
 * weights on that thread alone (the engine's pool stays the serving models'), paced by pace_load. */
static attnd_status open_model_niced(server_model *sm, const char *path, cpushare *cs, attnd_err *err) {
    model_load_opts lo = {.pack_alone = true, .pace = pace_load, .pace_user = cs};
    open_job j = {sm, path, &lo, err, ATTND_OK};
    pthread_t t;
    if (pthread_create(&t, NULL, open_niced, &j) != 0) return open_model(sm, path, &lo, err);
    pthread_join(t, NULL);
    return j.rc;
}

static void model_free(server_model *sm) {
    if (!sm) return;
    sched_destroy(sm->sch);
    if (sm->store) {
        int fails = sess_persist_all(sm->store);
        if (fails) slog_error("model %s: %d sessions could not be saved", sm->name, fails);
    }
    sess_store_destroy(sm->store);
    free(atomic_load(&sm->heads_json));
    chat_template_free(&sm->chat);
    tok_destroy(sm->tok);
    model_destroy(sm->m);
    free(sm);
}

static attnd_status load_op(void *user, const char *name, const char *path, int preset, void **inst, size_t *bytes,
                            attnd_err *err) {
    struct server *s = user;
    server_model *sm = calloc(1, sizeof(*sm));
    if (!sm) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    snprintf(sm->name, sizeof(sm->name), "%s", name);
    sm->cfg = *settings_of(s, preset);
    sm->cfg.model_path = path; /* the registry's copy, valid while it lives (Ollama's digest) */
    sm->cfg.hooks.on_ready = NULL;
    sm->cfg.hooks.on_stopping = NULL;
    sm->cfg.cpu_share = &s->cpu_share; /* fair threads between the models that work */
    double t0 = attnd_now_s();
    slog_info("model %s: loading %s", name, path);
    attnd_status rc = open_model_niced(sm, path, &s->cpu_share, err);
    char dir[4096], tag[200];
    snprintf(tag, sizeof(tag), "%s/vocab%d", name, sm->m ? model_info_get(sm->m)->n_vocab : 0);
    if (rc == ATTND_OK)
        rc = sess_store_create(&sm->store, model_state_dir(&sm->cfg, name, true, dir, sizeof(dir)), tag, sm->cfg.max_sessions, err);
    if (rc == ATTND_OK) {
        sess_store_set_lifetime(sm->store, (int64_t)sm->cfg.session_ttl_s * 1000, sm->cfg.session_evict_lru);
        rc = sched_create(&sm->sch, sm->m, sm->tok, sm->store, &sm->cfg, err);
    }
    if (rc != ATTND_OK) {
        slog_error("model %s: cannot load %s: %s", name, path, err ? err->msg : "");
        model_free(sm);
        return rc;
    }
    sm->env = (genreq_env){&sm->cfg, sm->m, sm->tok, &sm->chat, sm->store, sm->sch, sm->n_ctx, &s->stopping,
                           sm->name, model_info_get(sm->m)->n_vocab};
    slog_info("model %s: loaded in %.1f s (context %d, chat template %s)", name, attnd_now_s() - t0, sm->n_ctx,
              chat_family_name(sm->chat.family));
    *bytes += sm->pulled_bytes + sched_draft_kv_bytes(sm->sch); /* known now; add() could not know them */
    *inst = sm;
    return ATTND_OK;
}

static void unload_op(void *user, void *inst) {
    (void)user;
    server_model *sm = inst;
    slog_info("model %s: unloading", sm->name);
    model_free(sm);
}

// ---- whose session ------------------------------------------------------------------------------

typedef struct session_look {
    const char *owner, *id;
    bool found;
} session_look;

static void look_session(void *inst, void *user) {
    session_look *l = user;
    sess_info info;
    l->found = sess_get_info(((server_model *)inst)->store, l->owner, l->id, &info);
}

bool models_session_home(struct server *s, int except, const char *owner, const char *id,
                         char home[MREG_NAME_MAX + 1]) {
    if (!s->models || !sess_id_valid(id)) return false;
    for (int i = 0; i < mreg_count(s->models); i++) {
        if (i == except) continue;
        session_look l = {owner, id, false};
        bool loaded = mreg_peek(s->models, i, look_session, &l); /* in memory: saved or not yet */
        mreg_info in;
        mreg_info_get(s->models, i, &in);
        char dir[4096];
        const server_settings *c = settings_of(s, in.preset);
        if (!loaded && model_state_dir(c, in.name, false, dir, sizeof(dir)))
            l.found = statedir_exists_in(dir, owner, id, SESS_FILE_SUFFIX);
        if (l.found) {
            memcpy(home, in.name, sizeof(in.name));
            return true;
        }
    }
    return false;
}

// ---- the models: presets, models_dir, the pull cache -------------------------------------------

/* The bytes a file set takes: a split set's parts ("-00001-of-00003.gguf") all counted. */
static size_t file_bytes(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    size_t total = (size_t)sb.st_size;
    const char *of = strstr(path, "-00001-of-");
    int n = of ? atoi(of + 10) : 1;
    char part[4096];
    for (int i = 2; of && i <= n && i < 10000; i++) {
        snprintf(part, sizeof(part), "%.*s-%05d-of-%s", (int)(of - path), path, i, of + 10);
        if (stat(part, &sb) == 0) total += (size_t)sb.st_size;
    }
    return total;
}

/* A model file's name: the stem without .gguf; a split set's first part named without its
 * "-00001-of-0000N"; false for what is no model (other parts, other files). */
static bool model_name_of(const char *file, char *name, size_t cap) {
    size_t n = strlen(file);
    if (n <= 5 || strcmp(file + n - 5, ".gguf") || file[0] == '.') return false;
    n -= 5;
    const char *of = n >= 15 ? file + n - 15 : NULL; /* "-00001-of-00003" */
    if (of && of[0] == '-' && !strncmp(of + 6, "-of-", 4)) {
        if (strncmp(of, "-00001", 6)) return false;
        n -= 15;
    }
    if (n == 0 || n >= cap) return false;
    memcpy(name, file, n);
    name[n] = '\0';
    return true;
}

/* What a model counts against models_memory_mb: its file set, its draft model's (a preset's
 * draft_model, loaded with it) and its KV budget. The draft's own KV pool (its context for every
 * slot) is sized once it is loaded: load_op adds it then, and the registry makes room for it. */
static attnd_status add(struct server *s, const char *name, const char *path, int preset, attnd_err *err) {
    const server_settings *c = settings_of(s, preset);
    size_t kv = (size_t)c->kv_budget_mb << 20;
    if (mreg_find(s->models, name) >= 0) {
        slog_warn("models: %s is served already; %s is not", name, path);
        return ATTND_OK;
    }
    size_t bytes = strncmp(path, "hf://", 5) ? file_bytes(path) : 0;
    if (c->draft_model && *c->draft_model) bytes += file_bytes(c->draft_model);
    return mreg_add(s->models, name, path, preset, bytes + kv, err);
}

/* Every model in dir (depth levels of subfolders too: the pull cache's org/repo/); a dir that
 * cannot be read is an error when must_exist (models_dir), else nothing (the cache, not made yet). */
static attnd_status scan(struct server *s, const char *dir, int depth, bool must_exist, attnd_err *err) {
    struct dirent **list = NULL;
    int n = scandir(dir, &list, NULL, alphasort);
    if (n < 0) return must_exist ? attnd_fail(err, ATTND_ERR_IO, "models_dir %s: %s", dir, strerror(errno)) : ATTND_OK;
    attnd_status rc = ATTND_OK;
    for (int i = 0; i < n; i++) {
        char path[4096], name[MREG_NAME_MAX + 1];
        snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
        struct stat sb;
        if (rc == ATTND_OK && list[i]->d_name[0] != '.' && stat(path, &sb) == 0) {
            if (S_ISDIR(sb.st_mode) && depth > 0) rc = scan(s, path, depth - 1, false, err);
            else if (S_ISREG(sb.st_mode) && model_name_of(list[i]->d_name, name, sizeof(name)))
                rc = add(s, name, path, -1, err);
        }
        free(list[i]);
    }
    free(list);
    return rc;
}

/* The presets: their own file, or models_dir's file of their name. */
static attnd_status add_presets(struct server *s, attnd_err *err) {
    for (int p = 0; p < s->cfg.n_presets; p++) {
        const server_preset *ps = &s->cfg.presets[p];
        char path[4096];
        if (ps->cfg.model_path) snprintf(path, sizeof(path), "%s", ps->cfg.model_path);
        else if (s->cfg.models_dir) snprintf(path, sizeof(path), "%s/%s.gguf", s->cfg.models_dir, ps->name);
        else
            return attnd_fail(err, ATTND_ERR_INVALID, "[model.%s] has no `model = FILE` line and there is no models_dir",
                              ps->name);
        attnd_status rc = add(s, ps->name, path, p, err);
        if (rc != ATTND_OK) return rc;
    }
    return ATTND_OK;
}

/* `model = FILE` (--model) beside models_dir: one more model, named model_alias or by its file. */
static attnd_status add_model_flag(struct server *s, attnd_err *err) {
    const char *base = strrchr(s->cfg.model_path, '/');
    base = base ? base + 1 : s->cfg.model_path;
    char name[MREG_NAME_MAX + 1];
    if (s->cfg.model_alias) snprintf(name, sizeof(name), "%s", s->cfg.model_alias);
    else if (!model_name_of(base, name, sizeof(name))) snprintf(name, sizeof(name), "%s", base);
    return add(s, name, s->cfg.model_path, -1, err);
}

/* systemd's watchdog while no scheduler runs (one per loaded model sends it otherwise). */
static void *keepalive_main(void *arg) {
    struct server *s = arg;
    double next = 0;
    while (!atomic_load(&s->stopping)) { /* short naps: shutdown joins this thread without waiting */
        if (attnd_now_s() >= next) {
            s->cfg.hooks.on_watchdog(s->cfg.hooks.user);
            next = attnd_now_s() + s->cfg.watchdog_interval_ms / 1e3;
        }
        usleep(20 * 1000);
    }
    return NULL;
}

attnd_status models_open(struct server *s, attnd_err *err) {
    cpushare_init(&s->cpu_share, s->cfg.threads);
    mreg_ops ops = {load_op, unload_op, NULL, s};
    mreg_limits lim = {.max_loaded = s->cfg.models_max_loaded, .memory_bytes = s->cfg.models_memory_mb << 20,
                       .max_waiters = s->cfg.queue_limit, .room_wait_ms = s->cfg.models_wait_s * 1000};
    attnd_status rc = mreg_create(&s->models, &ops, &lim, err);
    if (rc == ATTND_OK) rc = add_presets(s, err);
    if (rc == ATTND_OK && s->cfg.model_path) rc = add_model_flag(s, err);
    if (rc == ATTND_OK && s->cfg.models_dir) rc = scan(s, s->cfg.models_dir, 0, true, err);
    char cache[4096];
    if (rc == ATTND_OK && s->cfg.models_cache && hub_cache_dir(cache, sizeof(cache), NULL) == ATTND_OK)
        rc = scan(s, cache, 3, false, err);
    if (rc != ATTND_OK) return rc;
    if (mreg_count(s->models) == 0)
        return attnd_fail(err, ATTND_ERR_NOT_FOUND, "no models: models_dir %s holds no .gguf file",
                          s->cfg.models_dir ? s->cfg.models_dir : "(unset)");
    char names[1000];
    mreg_names(s->models, names, sizeof(names));
    slog_info("models: %d, loaded on first use (%s); at most %d loaded, %zu MiB", mreg_count(s->models), names,
              s->cfg.models_max_loaded, s->cfg.models_memory_mb);
    if (s->cfg.hooks.on_watchdog && pthread_create(&s->keepalive, NULL, keepalive_main, s) == 0) s->has_keepalive = true;
    return ATTND_OK;
}

static void cancel_model(void *inst, void *user) {
    (void)user;
    sched_cancel_all(((server_model *)inst)->sch);
}

void models_cancel_all(struct server *s) {
    for (int i = 0; s->models && i < mreg_count(s->models); i++) mreg_peek(s->models, i, cancel_model, NULL);
}

void models_close(struct server *s) {
    if (s->has_keepalive) {
        pthread_join(s->keepalive, NULL);
        s->has_keepalive = false;
    }
    mreg_destroy(s->models);
    s->models = NULL;
}
