/*
 * mreg.c — the model registry (see mreg.h): states, references, the LRU order and the room a
 * load needs. One mutex guards every entry; one condition variable wakes the requests waiting
 * for a load. A load runs on a thread of its own, which first unloads the victims chosen (under
 * the lock, so nobody can take them meanwhile) to make its room.
 */
#include "mreg.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct entry {
    char name[MREG_NAME_MAX + 1];
    char *path;               /* owned */
    int preset;
    size_t bytes;             /* what it holds: mreg_add's estimate until a load said better */
    size_t added;             /* mreg_add's estimate: where each load's count starts */
    mreg_state state;
    void *inst;               /* LOADED: the owner's instance */
    int refs, waiters;
    int held;                 /* requests held back: waiting for room to load it, or for it to
                                 unload and load again (it is the model draining) */
    int64_t last_used_ms;
    uint64_t loads, unloads, load_failures;
    char error[512];
} entry;

struct mreg {
    mreg_ops ops;
    mreg_limits lim;
    pthread_mutex_t mu;
    pthread_cond_t changed;   /* a load ended, a reference was released */
    entry *e;                 /* (n, cap) */
    int n, cap;
    int n_threads;            /* loader threads running */
    int drain;                /* a busy model that unloads once its requests end, for the requests
                                 waiting for room; it takes no new ones meanwhile; -1 = none */
};

/* What one loader thread does: unload the victims, then load the model. */
typedef struct load_job {
    mreg *reg;
    int idx;
    void **victims;           /* (n_victims) instances already taken out of the registry */
    int n_victims;
} load_job;

static int64_t now_ms(const mreg *reg) {
    if (reg->ops.now_ms) return reg->ops.now_ms(reg->ops.user);
    return (int64_t)(attnd_now_s() * 1000.0);
}

attnd_status mreg_create(mreg **out, const mreg_ops *ops, const mreg_limits *limits, attnd_err *err) {
    *out = NULL;
    mreg *reg = calloc(1, sizeof(*reg));
    if (!reg) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    reg->ops = *ops;
    reg->lim = *limits;
    if (reg->lim.max_waiters <= 0) reg->lim.max_waiters = 64;
    reg->drain = -1;
    pthread_mutex_init(&reg->mu, NULL);
    pthread_cond_init(&reg->changed, NULL);
    *out = reg;
    return ATTND_OK;
}

void mreg_wait_loads(mreg *reg) {
    pthread_mutex_lock(&reg->mu);
    while (reg->n_threads > 0) pthread_cond_wait(&reg->changed, &reg->mu);
    pthread_mutex_unlock(&reg->mu);
}

void mreg_destroy(mreg *reg) {
    if (!reg) return;
    mreg_wait_loads(reg);
    for (int i = 0; i < reg->n; i++) {
        /* a reference still held (a request the shutdown could not end) keeps its model: leaked
         * rather than freed under it */
        if (reg->e[i].state == MREG_LOADED && reg->e[i].refs == 0) reg->ops.unload(reg->ops.user, reg->e[i].inst);
        free(reg->e[i].path);
    }
    free(reg->e);
    pthread_cond_destroy(&reg->changed);
    pthread_mutex_destroy(&reg->mu);
    free(reg);
}

attnd_status mreg_add(mreg *reg, const char *name, const char *path, int preset, size_t bytes, attnd_err *err) {
    size_t len = strlen(name);
    if (len == 0 || len > MREG_NAME_MAX)
        return attnd_fail(err, ATTND_ERR_INVALID, "model name '%.60s' must have 1 to %d bytes", name, MREG_NAME_MAX);
    if (mreg_find(reg, name) >= 0) return attnd_fail(err, ATTND_ERR_INVALID, "two models are named '%s'", name);
    if (reg->n == reg->cap) {
        int cap = reg->cap ? 2 * reg->cap : 8;
        entry *e = realloc(reg->e, (size_t)cap * sizeof(*e));
        if (!e) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        reg->e = e;
        reg->cap = cap;
    }
    entry *e = &reg->e[reg->n];
    memset(e, 0, sizeof(*e));
    memcpy(e->name, name, len + 1);
    if (!(e->path = strdup(path))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    e->preset = preset;
    e->bytes = e->added = bytes;
    reg->n++;
    return ATTND_OK;
}

int mreg_count(const mreg *reg) { return reg->n; }

int mreg_find(const mreg *reg, const char *name) {
    for (int i = 0; i < reg->n; i++)
        if (!strcmp(reg->e[i].name, name)) return i;
    return -1;
}

void mreg_info_get(mreg *reg, int i, mreg_info *out) {
    ATTND_ASSERT(i >= 0 && i < reg->n);
    pthread_mutex_lock(&reg->mu);
    const entry *e = &reg->e[i];
    memcpy(out->name, e->name, sizeof(out->name));
    memcpy(out->error, e->error, sizeof(out->error));
    out->path = e->path;
    out->preset = e->preset;
    out->state = e->state;
    out->bytes = e->bytes;
    out->refs = e->refs;
    out->waiters = e->waiters + e->held;
    out->last_used_ms = e->last_used_ms;
    out->loads = e->loads;
    out->unloads = e->unloads;
    out->load_failures = e->load_failures;
    pthread_mutex_unlock(&reg->mu);
}

bool mreg_peek(mreg *reg, int i, void (*fn)(void *inst, void *user), void *user) {
    ATTND_ASSERT(i >= 0 && i < reg->n);
    pthread_mutex_lock(&reg->mu);
    bool loaded = reg->e[i].state == MREG_LOADED;
    if (loaded) fn(reg->e[i].inst, user);
    pthread_mutex_unlock(&reg->mu);
    return loaded;
}

void mreg_names(const mreg *reg, char *buf, size_t cap) {
    size_t at = 0;
    if (cap) buf[0] = '\0';
    for (int i = 0; i < reg->n && at < cap; i++) {
        int w = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", reg->e[i].name);
        if (w < 0) break;
        at += (size_t)w;
    }
}

const char *mreg_state_str(mreg_state s) {
    switch (s) {
    case MREG_UNLOADED: return "unloaded";
    case MREG_LOADING: return "loading";
    case MREG_LOADED: return "loaded";
    case MREG_FAILED: return "failed";
    }
    return "?";
}

// ---- loading ----------------------------------------------------------------------------------

static int take_overflow_locked(mreg *reg, int loaded, void **out);

static void *load_main(void *arg) {
    load_job *job = arg;
    mreg *reg = job->reg;
    for (int i = 0; i < job->n_victims; i++) reg->ops.unload(reg->ops.user, job->victims[i]);
    pthread_mutex_lock(&reg->mu);
    entry *e = &reg->e[job->idx];
    char name[MREG_NAME_MAX + 1], *path = e->path;
    int preset = e->preset;
    memcpy(name, e->name, sizeof(name));
    size_t bytes = e->added; /* each load counts from mreg_add's estimate */
    pthread_mutex_unlock(&reg->mu);
    void *inst = NULL;
    attnd_err err = {0};
    attnd_status st = reg->ops.load(reg->ops.user, name, path, preset, &inst, &bytes, &err);
    pthread_mutex_lock(&reg->mu);
    e = &reg->e[job->idx];
    int n_over = 0;
    if (st == ATTND_OK) {
        e->state = MREG_LOADED;
        e->inst = inst;
        e->bytes = bytes;
        e->loads++;
        e->last_used_ms = now_ms(reg);
        n_over = take_overflow_locked(reg, job->idx, job->victims);
    } else {
        e->state = MREG_FAILED;
        e->load_failures++;
        snprintf(e->error, sizeof(e->error), "%s", err.msg[0] ? err.msg : "the load failed");
    }
    pthread_cond_broadcast(&reg->changed);
    pthread_mutex_unlock(&reg->mu);
    for (int i = 0; i < n_over; i++) reg->ops.unload(reg->ops.user, job->victims[i]);
    free(job->victims);
    pthread_mutex_lock(&reg->mu);
    reg->n_threads--; /* last: mreg_destroy waits for it before the registry goes */
    pthread_cond_broadcast(&reg->changed);
    pthread_mutex_unlock(&reg->mu);
    free(job);
    return NULL;
}

/* The memory and the count of the models loaded or loading (under the lock). */
static void usage_locked(const mreg *reg, size_t *bytes, int *count) {
    *bytes = 0;
    *count = 0;
    for (int i = 0; i < reg->n; i++)
        if (reg->e[i].state == MREG_LOADED || reg->e[i].state == MREG_LOADING) {
            *bytes += reg->e[i].bytes;
            (*count)++;
        }
}

static bool fits_locked(const mreg *reg, size_t want) {
    size_t bytes;
    int count;
    usage_locked(reg, &bytes, &count);
    return (reg->lim.max_loaded <= 0 || count + 1 <= reg->lim.max_loaded) &&
           (reg->lim.memory_bytes == 0 || bytes + want <= reg->lim.memory_bytes);
}

/* The least recently used idle loaded model but skip, -1 when none. */
static int lru_idle_locked(const mreg *reg, int skip) {
    int best = -1;
    for (int i = 0; i < reg->n; i++) {
        const entry *e = &reg->e[i];
        if (i == skip || e->state != MREG_LOADED || e->refs > 0 || e->waiters > 0) continue;
        if (best < 0 || e->last_used_ms < reg->e[best].last_used_ms) best = i;
    }
    return best;
}

/* After model loaded's load set its true size: while the loaded models exceed memory_bytes, the
 * least recently used idle one but it is taken out into out[] (unloaded by the caller, unlocked).
 * Returns how many. */
static int take_overflow_locked(mreg *reg, int loaded, void **out) {
    int n = 0;
    for (;;) {
        size_t bytes;
        int count;
        usage_locked(reg, &bytes, &count);
        int v = reg->lim.memory_bytes && bytes > reg->lim.memory_bytes ? lru_idle_locked(reg, loaded) : -1;
        if (v < 0) return n;
        entry *e = &reg->e[v];
        e->state = MREG_UNLOADED;
        out[n++] = e->inst;
        e->inst = NULL;
        e->unloads++;
        if (reg->drain == v) reg->drain = -1;
    }
}

/* Starts model idx's load (it is UNLOADED or FAILED), unloading idle models for its room. */
static attnd_status start_load_locked(mreg *reg, int idx, bool *no_room, attnd_err *err) {
    entry *e = &reg->e[idx];
    if (reg->lim.memory_bytes && e->bytes > reg->lim.memory_bytes)
        return attnd_fail(err, ATTND_ERR_NOMEM, "model '%s' needs %zu MiB, more than models_memory_mb (%zu MiB)",
                          e->name, e->bytes >> 20, reg->lim.memory_bytes >> 20);
    load_job *job = calloc(1, sizeof(*job));
    if (job) job->victims = calloc((size_t)reg->n, sizeof(void *));
    if (!job || !job->victims) {
        if (job) free(job);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    }
    /* choose the victims first and take them only when they make enough room */
    int chosen[reg->n > 0 ? reg->n : 1], n_chosen = 0;
    while (!fits_locked(reg, e->bytes)) {
        int v = lru_idle_locked(reg, idx);
        if (v < 0) break;
        reg->e[v].state = MREG_UNLOADED; /* out of the count: fits_locked sees the room */
        chosen[n_chosen++] = v;
    }
    if (!fits_locked(reg, e->bytes)) {
        for (int i = 0; i < n_chosen; i++) reg->e[chosen[i]].state = MREG_LOADED;
        free(job->victims);
        free(job);
        if (no_room) *no_room = true;
        return attnd_fail(err, ATTND_ERR_NOMEM, "no room to load model '%s': every loaded model is in use", e->name);
    }
    for (int i = 0; i < n_chosen; i++) {
        entry *v = &reg->e[chosen[i]];
        job->victims[job->n_victims++] = v->inst;
        v->inst = NULL;
        v->unloads++;
        if (reg->drain == chosen[i]) reg->drain = -1; /* drained: its held requests load it again */
    }
    job->reg = reg;
    job->idx = idx;
    e->state = MREG_LOADING;
    e->error[0] = '\0';
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, load_main, job);
    pthread_attr_destroy(&attr);
    if (rc != 0) { /* the victims are out already: unload them here */
        e->state = MREG_FAILED;
        snprintf(e->error, sizeof(e->error), "cannot start a loader thread");
        pthread_mutex_unlock(&reg->mu);
        for (int i = 0; i < job->n_victims; i++) reg->ops.unload(reg->ops.user, job->victims[i]);
        pthread_mutex_lock(&reg->mu);
        free(job->victims);
        free(job);
        return attnd_fail(err, ATTND_ERR_NOMEM, "model '%s': cannot start a loader thread", e->name);
    }
    reg->n_threads++;
    return ATTND_OK;
}

// ---- references -------------------------------------------------------------------------------

static attnd_status not_found(const mreg *reg, const char *name, attnd_err *err) {
    char names[300];
    mreg_names(reg, names, sizeof(names));
    return attnd_fail(err, ATTND_ERR_NOT_FOUND, "model '%.120s' not found; available: %s", name, names);
}

static attnd_status failed(const entry *e, attnd_err *err) {
    return attnd_fail(err, ATTND_ERR_IO, "model '%s' failed to load: %s", e->name, e->error);
}

/* Waits (as a waiter of e) while e loads; false: the requester left. */
static bool wait_loaded_locked(mreg *reg, int idx, bool (*gone)(void *user), void *user) {
    reg->e[idx].waiters++;
    bool left = false;
    while (reg->e[idx].state == MREG_LOADING && !left) {
        struct timespec ts;
        attnd_deadline(&ts, 100);
        pthread_cond_timedwait(&reg->changed, &reg->mu, &ts);
        if (gone && reg->e[idx].state == MREG_LOADING) {
            pthread_mutex_unlock(&reg->mu); /* gone() may poll a socket */
            left = gone(user);
            pthread_mutex_lock(&reg->mu);
        }
    }
    reg->e[idx].waiters--;
    return !left;
}

/* The busy model to drain for a request waiting for room: the least recently used loaded one
 * with requests (the idle ones are unloaded at once), not idx itself; -1 = none (all loading). */
static int drain_pick_locked(const mreg *reg, int idx) {
    int best = -1;
    for (int i = 0; i < reg->n; i++) {
        const entry *e = &reg->e[i];
        if (i == idx || e->state != MREG_LOADED || e->waiters > 0) continue; /* just loaded for its waiters */
        if (best < 0 || e->last_used_ms < reg->e[best].last_used_ms) best = i;
    }
    return best;
}

/* One wait of a held-back request (room, or its model draining): an error when the requester
 * left or the deadline passed. */
static attnd_status hold_locked(mreg *reg, int idx, double deadline, bool (*gone)(void *user), void *user,
                                attnd_err *err) {
    entry *e = &reg->e[idx];
    if (attnd_now_s() >= deadline)
        return attnd_fail(err, ATTND_ERR_NOMEM, "no room to load model '%s': the loaded models stayed in use for %.1f s",
                          e->name, reg->lim.room_wait_ms / 1000.0);
    struct timespec ts;
    attnd_deadline(&ts, 100);
    pthread_cond_timedwait(&reg->changed, &reg->mu, &ts);
    pthread_mutex_unlock(&reg->mu); /* gone() may poll a socket */
    bool left = gone && gone(user);
    pthread_mutex_lock(&reg->mu);
    if (left) return attnd_fail(err, ATTND_ERR_BUSY, "the client left while model '%s' waited for room", e->name);
    return ATTND_OK;
}

/* Ends the drain when no request waits for room any more (they left, or their loads began): the
 * drained model takes requests again. */
static void drain_check_locked(mreg *reg) {
    if (reg->drain < 0) return;
    for (int i = 0; i < reg->n; i++)
        if (reg->e[i].held > 0 && (reg->e[i].state == MREG_UNLOADED || reg->e[i].state == MREG_FAILED)) return;
    reg->drain = -1;
    pthread_cond_broadcast(&reg->changed);
}

/* One step towards a reference to model idx: ATTND_OK with *done when taken; ATTND_OK without
 * it when the caller should look again (a load started or ended, or it must hold); an error ends. */
static attnd_status acquire_step_locked(mreg *reg, int idx, mreg_ref *ref, bool *hold, bool (*gone)(void *user),
                                        void *user, attnd_err *err, bool *done) {
    entry *e = &reg->e[idx];
    *hold = false;
    if (e->state == MREG_FAILED) return failed(e, err);
    if (e->state == MREG_LOADED && reg->drain != idx) {
        e->refs++;
        ref->inst = e->inst;
        ref->idx = idx;
        *done = true;
        return ATTND_OK;
    }
    if (e->state == MREG_LOADED) { /* draining for another model's room: it loads again after */
        *hold = true;
        return ATTND_OK;
    }
    if (e->state == MREG_LOADING) {
        if (e->waiters >= reg->lim.max_waiters)
            return attnd_fail(err, ATTND_ERR_BUSY, "model '%s' is loading and %d requests wait for it already",
                              e->name, e->waiters);
        if (!wait_loaded_locked(reg, idx, gone, user))
            return attnd_fail(err, ATTND_ERR_BUSY, "the client left while model '%s' loaded", e->name);
        return ATTND_OK;
    }
    bool no_room = false;
    attnd_status st = start_load_locked(reg, idx, &no_room, err);
    if (st == ATTND_OK || !no_room || reg->lim.room_wait_ms <= 0) return st;
    if (reg->drain < 0) reg->drain = drain_pick_locked(reg, idx);
    *hold = true; /* every loaded model is busy: wait for the drained one's requests to end */
    return ATTND_OK;
}

attnd_status mreg_acquire(mreg *reg, const char *name, mreg_ref *ref, bool (*gone)(void *user), void *user,
                          attnd_err *err) {
    ref->inst = NULL;
    ref->idx = -1;
    ref->quiet = false;
    int idx = mreg_find(reg, name);
    if (idx < 0) return not_found(reg, name, err);
    double deadline = attnd_now_s() + reg->lim.room_wait_ms / 1000.0;
    pthread_mutex_lock(&reg->mu);
    entry *e = &reg->e[idx];
    attnd_status st = ATTND_OK;
    bool done = false, held = false, hold = false;
    while (st == ATTND_OK && !done) {
        drain_check_locked(reg);
        st = acquire_step_locked(reg, idx, ref, &hold, gone, user, err, &done);
        if (st != ATTND_OK || !hold) continue;
        if (!held) { /* first held: counted against the model's queue, and as a room waiter */
            if (e->waiters + e->held >= reg->lim.max_waiters) {
                st = attnd_fail(err, ATTND_ERR_BUSY, "model '%s' waits for room and %d requests wait for it already",
                                e->name, e->held);
                break;
            }
            e->held++;
            held = true;
        }
        st = hold_locked(reg, idx, deadline, gone, user, err);
    }
    if (held) {
        e->held--;
        drain_check_locked(reg);
    }
    pthread_mutex_unlock(&reg->mu);
    return st;
}

bool mreg_hold_loaded(mreg *reg, int i, mreg_ref *ref) {
    ATTND_ASSERT(i >= 0 && i < reg->n);
    ref->inst = NULL;
    ref->idx = -1;
    ref->quiet = true;
    pthread_mutex_lock(&reg->mu);
    entry *e = &reg->e[i];
    bool ok = e->state == MREG_LOADED && reg->drain != i;
    if (ok) {
        e->refs++;
        ref->inst = e->inst;
        ref->idx = i;
    }
    pthread_mutex_unlock(&reg->mu);
    return ok;
}

void mreg_release(mreg *reg, mreg_ref *ref) {
    if (!ref || ref->idx < 0) return;
    pthread_mutex_lock(&reg->mu);
    entry *e = &reg->e[ref->idx];
    ATTND_ASSERT(e->refs > 0);
    e->refs--;
    if (!ref->quiet) e->last_used_ms = now_ms(reg);
    pthread_cond_broadcast(&reg->changed);
    pthread_mutex_unlock(&reg->mu);
    ref->idx = -1;
    ref->inst = NULL;
}

attnd_status mreg_load(mreg *reg, const char *name, attnd_err *err) {
    int idx = mreg_find(reg, name);
    if (idx < 0) return not_found(reg, name, err);
    pthread_mutex_lock(&reg->mu);
    attnd_status st = ATTND_OK;
    mreg_state s = reg->e[idx].state;
    if (s == MREG_UNLOADED || s == MREG_FAILED) st = start_load_locked(reg, idx, NULL, err);
    pthread_mutex_unlock(&reg->mu);
    return st;
}

attnd_status mreg_unload(mreg *reg, const char *name, attnd_err *err) {
    int idx = mreg_find(reg, name);
    if (idx < 0) return not_found(reg, name, err);
    pthread_mutex_lock(&reg->mu);
    entry *e = &reg->e[idx];
    attnd_status st = ATTND_OK;
    void *inst = NULL;
    if (e->state != MREG_LOADED)
        st = attnd_fail(err, ATTND_ERR_INVALID, "model '%s' is not loaded (%s)", e->name, mreg_state_str(e->state));
    else if (e->refs > 0 || e->waiters > 0)
        st = attnd_fail(err, ATTND_ERR_BUSY, "model '%s' is in use by %d request%s", e->name, e->refs + e->waiters,
                        e->refs + e->waiters == 1 ? "" : "s");
    else {
        inst = e->inst;
        e->inst = NULL;
        e->state = MREG_UNLOADED;
        e->unloads++;
        if (reg->drain == idx) reg->drain = -1;
        pthread_cond_broadcast(&reg->changed);
    }
    pthread_mutex_unlock(&reg->mu);
    if (inst) reg->ops.unload(reg->ops.user, inst);
    return st;
}
