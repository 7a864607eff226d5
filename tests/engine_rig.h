/*
 * engine_rig.h — (tests only) a generated model (engine_fixture.h) written to a temporary file,
 * loaded, with an engine and a cache pool, and the sequences a test makes: the setup the engine
 * tests share. Every step asserts, so a test that gets a rig has a working one.
 */
#ifndef ATTND_TEST_ENGINE_RIG_H
#define ATTND_TEST_ENGINE_RIG_H

#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "attnd/engine.h"
#include "engine_fixture.h"

typedef struct tiny_rig {
    char path[256];
    tiny_spec sp;
    model *m;
    engine *e;
    kv_pool *pool;
    kv_seq *seqs[8]; /* made by tiny_rig_seq, destroyed by tiny_rig_close */
    int n_seqs;
} tiny_rig;

/* Loads the model file at path into r (zeroed first; r->sp is the caller's to set) with an engine
 * of `threads` threads for batches of up to max_batch entries and a pool_mib MiB pool of kv-typed
 * caches. The file stays the caller's: tiny_rig_close removes only what tiny_rig_open wrote. */
static inline void tiny_rig_load(tiny_rig *r, const char *path, kv_type kv, int max_batch, int threads,
                                 size_t pool_mib) {
    memset(r, 0, sizeof(*r));
    attnd_err err;
    cr_assert_eq(model_load(&r->m, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(&r->e, r->m, max_batch, threads, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_pool_create(&r->pool, r->m, pool_mib << 20, kv, &err), ATTND_OK, "%s", err.msg);
}

/* Writes sp and loads it as tiny_rig_load does, with `threads` threads and a pool_mib MiB pool. */
static inline void tiny_rig_open_with(tiny_rig *r, const tiny_spec *sp, kv_type kv, int max_batch, int threads,
                                      size_t pool_mib) {
    char path[sizeof(r->path)];
    tiny_tmpname(path, sizeof(path), sp->arch);
    cr_assert_eq(tiny_write(path, sp), 0, "cannot write %s", path);
    tiny_rig_load(r, path, kv, max_batch, threads, pool_mib);
    r->sp = *sp;
    memcpy(r->path, path, sizeof(path));
}

/* Writes sp, loads it, and makes an engine (2 threads) for batches of up to max_batch entries and
 * a 64 MiB pool of kv-typed caches. */
static inline void tiny_rig_open(tiny_rig *r, const tiny_spec *sp, kv_type kv, int max_batch) {
    tiny_rig_open_with(r, sp, kv, max_batch, 2, 64);
}

/* A new empty sequence in r's pool, owned by r. */
static inline kv_seq *tiny_rig_seq(tiny_rig *r) {
    cr_assert_lt(r->n_seqs, (int)(sizeof(r->seqs) / sizeof(r->seqs[0])));
    kv_seq **s = &r->seqs[r->n_seqs++];
    cr_assert_eq(kv_seq_create(s, r->pool, NULL), ATTND_OK);
    return *s;
}

static inline void tiny_rig_close(tiny_rig *r) {
    for (int i = 0; i < r->n_seqs; i++) kv_seq_destroy(r->seqs[i]);
    engine_destroy(r->e);
    kv_pool_destroy(r->pool);
    model_destroy(r->m);
    if (r->path[0]) unlink(r->path);
}

/* n token ids below vocab, the same for the same seed. */
static inline void tiny_random_tokens(int32_t *t, int n, int vocab, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(tiny_rng(&seed) % (uint64_t)vocab);
}

#endif
