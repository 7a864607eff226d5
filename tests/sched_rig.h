/*
 * sched_rig.h — (tests only) a scheduler without a server: a model and its tokenizer, an
 * in-memory session store, the settings of a small scheduler and the scheduler over them, for the
 * Criterion tests of server/runtime (test_server_scheduler.c, test_server_spec.c,
 * test_server_attn_api.c). Every step asserts, so a test that gets a rig has a working one.
 * (server_rig.h is the whole server, without Criterion.)
 */
#ifndef ATTND_TESTS_SCHED_RIG_H
#define ATTND_TESTS_SCHED_RIG_H

#include <criterion/criterion.h>

#include "attnd/engine.h"
#include "attnd/tokenizer.h"
#include "scheduler.h"
#include "sess.h"

/* Loads the model at path into *m and its tokenizer into *tok. */
static inline void sched_rig_load(const char *path, model **m, tokenizer **tok) {
    attnd_err err;
    cr_assert_eq(model_load(m, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(tok, model_gguf(*m), &err), ATTND_OK, "%s", err.msg);
}

/* The model at path with its tokenizer (sched_rig_load), an in-memory session store of 16
 * sessions, and in *cfg the settings of a small scheduler: one thread, 4 sequences at once,
 * queue_limit waiting. */
static inline void sched_rig_open(const char *path, int queue_limit, model **m, tokenizer **tok, sess_store **store,
                                  server_settings *cfg) {
    sched_rig_load(path, m, tok);
    attnd_err err;
    cr_assert_eq(sess_store_create(store, NULL, "t", 16, &err), ATTND_OK);
    server_settings_default(cfg);
    cfg->threads = 1;
    cfg->max_parallel = 4;
    cfg->queue_limit = queue_limit;
}

/* A scheduler over m, tok and store with cfg (all borrowed: they outlive it). */
static inline sched *sched_rig_start(model *m, tokenizer *tok, sess_store *store, const server_settings *cfg) {
    sched *s;
    attnd_err err;
    cr_assert_eq(sched_create(&s, m, tok, store, cfg, &err), ATTND_OK, "%s", err.msg);
    return s;
}

/* A new session named id in store, acquired: the caller (or the job it is given to) holds it. */
static inline sess *sched_rig_session(sess_store *store, const char *id) {
    char made[SESS_ID_MAX + 1];
    cr_assert_eq(sess_create(store, NULL, id, made, NULL), ATTND_OK);
    sess *se;
    cr_assert_eq(sess_acquire(store, NULL, id, &se, NULL), ATTND_OK);
    return se;
}

/* Destroys the scheduler, the store, the tokenizer and the model (each may be NULL), in that
 * order, and sets the four pointers to NULL. */
static inline void sched_rig_close(sched **sch, sess_store **store, tokenizer **tok, model **m) {
    sched_destroy(*sch);
    sess_store_destroy(*store);
    tok_destroy(*tok);
    model_destroy(*m);
    *sch = NULL, *store = NULL, *tok = NULL, *m = NULL;
}

#endif
