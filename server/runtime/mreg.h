/*
 * mreg.h — the model registry of a server of several models (models_dir, [model.NAME] presets):
 * which models exist, which are loaded, who is using them, and what to unload to make room.
 * It knows neither HTTP nor what a loaded model is: the owner's ops load a model into an opaque
 * instance and unload it, and the registry decides when.
 *
 *     mreg_create(&reg, &ops, &limits, &err);
 *     mreg_add(reg, "qwen", "/models/qwen.gguf", preset, bytes, &err);   // before serving
 *     mreg_acquire(reg, "qwen", &ref, gone, user, &err);   // loads on first use, waits for it
 *     ... use ref.inst ...
 *     mreg_release(reg, &ref);
 *
 * Lifecycle of one model: UNLOADED → LOADING (a loader thread runs ops.load with no lock held;
 * other models keep serving) → LOADED, or FAILED (its message kept; a request for it is answered
 * with that message at once, POST /models/load tries again). A LOADED model with no reference and
 * no waiter is idle: mreg_unload, or the room a load needs (max_loaded models, memory_bytes of
 * weights plus KV), unloads it, the least recently released first. A model with a reference (a
 * running request) or a waiter (a request waiting for its load) is never unloaded under it.
 *
 * Thread-safety: every function may be called from any thread; ops are called without the
 * registry's lock (load on the loader thread, unload on the caller's or the loader's thread).
 */
#ifndef ATTND_SERVER_MREG_H
#define ATTND_SERVER_MREG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

typedef struct mreg mreg;

#define MREG_NAME_MAX 127

typedef enum mreg_state { MREG_UNLOADED, MREG_LOADING, MREG_LOADED, MREG_FAILED } mreg_state;

/* What the owner does for the registry (user passed back unchanged). */
typedef struct mreg_ops {
    /* Loads model name (its file path and preset index as given to mreg_add) into *inst. On a
     * loader thread; an error's message is kept and shown to the model's requests. *bytes comes
     * in as mreg_add's estimate; the load sets it to what the instance holds when it knows better
     * (a draft model's KV pool is sized only once loaded). Over memory_bytes then, idle models
     * unload, the least recently used first, until it fits or none is idle. */
    attnd_status (*load)(void *user, const char *name, const char *path, int preset, void **inst, size_t *bytes,
                         attnd_err *err);
    /* Unloads an idle instance (no request uses it). */
    void (*unload)(void *user, void *inst);
    /* The clock of the LRU order, ms (NULL = attnd_now_s); tests move it. */
    int64_t (*now_ms)(void *user);
    void *user;
} mreg_ops;

typedef struct mreg_limits {
    int max_loaded;        /* models loaded (or loading) at once; <= 0 = no limit */
    size_t memory_bytes;   /* the sum of loaded models' bytes; 0 = no limit */
    int max_waiters;       /* requests waiting for one model's load or room; <= 0 = 64 */
    int room_wait_ms;      /* how long a request waits for room when every loaded model is busy
                              (the least recently used one drains: it finishes its requests, takes
                              no new ones, and unloads); <= 0 = answer ATTND_ERR_NOMEM at once */
} mreg_limits;

/* A reference to a loaded model: inst stays valid until mreg_release. */
typedef struct mreg_ref {
    void *inst;
    int idx;               /* -1 = none */
    bool quiet;            /* taken by mreg_hold_loaded: its release is not a use */
} mreg_ref;

/* One model as listed (a snapshot). */
typedef struct mreg_info {
    char name[MREG_NAME_MAX + 1];
    const char *path;      /* borrowed: valid while the registry lives */
    int preset;
    mreg_state state;
    size_t bytes;
    int refs, waiters;
    int64_t last_used_ms;  /* when its last reference was released (0 = never used) */
    uint64_t loads, unloads, load_failures;
    char error[512];       /* FAILED: why */
} mreg_info;

/* A registry over ops and limits (copied). ATTND_ERR_NOMEM. */
attnd_status mreg_create(mreg **out, const mreg_ops *ops, const mreg_limits *limits, attnd_err *err);
/* Unloads every loaded model (after waiting for the loads under way) and frees reg (accepts
 * NULL). A model still referenced is not unloaded (its instance is left to the process's end). */
void mreg_destroy(mreg *reg);

/* Adds model name (1..MREG_NAME_MAX bytes) at path (copied) with bytes of memory when loaded.
 * ATTND_ERR_INVALID for a bad or duplicate name (the message says which). Before serving only. */
attnd_status mreg_add(mreg *reg, const char *name, const char *path, int preset, size_t bytes, attnd_err *err);
int mreg_count(const mreg *reg);
/* The index of model name, -1 when none. */
int mreg_find(const mreg *reg, const char *name);
/* Model i's snapshot (0 <= i < mreg_count). */
void mreg_info_get(mreg *reg, int i, mreg_info *out);
/* Calls fn(inst, user) under the registry's lock when model i is loaded (true), to read what
 * the instance says of itself without using it (the LRU order does not move); fn must not call
 * the registry. */
bool mreg_peek(mreg *reg, int i, void (*fn)(void *inst, void *user), void *user);
/* Every model's name, ", "-separated, into buf (cut to cap), for "unknown model" answers. */
void mreg_names(const mreg *reg, char *buf, size_t cap);

/*
 * A reference to model name, loaded for it when needed: waits (100 ms at a time, asking
 * gone(user) whether the requester left; gone may be NULL) while it loads, and up to
 * room_wait_ms while every loaded model is busy (one of them drains for it). Errors:
 * ATTND_ERR_NOT_FOUND (no such model), ATTND_ERR_BUSY (too many requests wait for its load or
 * room, or the requester left), ATTND_ERR_NOMEM (no room within room_wait_ms, or the model is
 * larger than the memory limit), or the load's own status and message (err names the model).
 */
attnd_status mreg_acquire(mreg *reg, const char *name, mreg_ref *ref, bool (*gone)(void *user), void *user,
                          attnd_err *err);
/* A reference to model i (0 <= i < mreg_count) only when it is loaded now and takes requests
 * (not draining): true. Nothing is loaded for it and it is not a use: its release leaves the LRU
 * order as it was (a monitor polling a model's state must not keep it loaded). false (nothing
 * taken) otherwise. */
bool mreg_hold_loaded(mreg *reg, int i, mreg_ref *ref);
/* Gives ref back (accepts an empty one); the model becomes idle when it was the last. */
void mreg_release(mreg *reg, mreg_ref *ref);

/* Starts loading model name in the background (a FAILED one is tried again); ATTND_OK when it
 * is loaded or loading. Errors as mreg_acquire's (without waiting). */
attnd_status mreg_load(mreg *reg, const char *name, attnd_err *err);
/* Unloads model name now: ATTND_ERR_NOT_FOUND, ATTND_ERR_BUSY while requests use it or wait for
 * it (nothing changes), ATTND_ERR_INVALID when it is not loaded. */
attnd_status mreg_unload(mreg *reg, const char *name, attnd_err *err);
/* Waits until no load is under way (tests, shutdown). */
void mreg_wait_loads(mreg *reg);

const char *mreg_state_str(mreg_state s);

#endif
