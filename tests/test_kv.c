/*
 * test_kv.c — the KV cache: block-wise growth against a byte budget, truncation and re-extension,
 * all-or-nothing reservation when the budget runs out, F16/F32 storage, blocks recycled
 * between sequences. Uses small generated models (engine_fixture.h), so it needs no shared files.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "attnd/engine.h"
#include "engine_fixture.h"
#include "kv_layout.h"

static char g_path[256];
static tiny_spec g_spec;
static model *g_m;
static engine *g_e;

static void setup(void) {
    g_spec = tiny_default("llama");
    tiny_tmpname(g_path, sizeof(g_path), "kv");
    cr_assert_eq(tiny_write(g_path, &g_spec), 0);
    attnd_err err;
    cr_assert_eq(model_load(&g_m, g_path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(&g_e, g_m, 160, 1, &err), ATTND_OK, "%s", err.msg);
}

static void teardown(void) {
    engine_destroy(g_e);
    model_destroy(g_m);
    unlink(g_path);
}

TestSuite(kv, .init = setup, .fini = teardown);

static attnd_status feed(kv_seq *s, const int32_t *tok, int n, float *logits, attnd_err *err) {
    batch_entry b[160];
    cr_assert(n <= 160);
    int pos0 = kv_seq_len(s);
    for (int i = 0; i < n; i++) b[i] = (batch_entry){s, tok[i], pos0 + i, true};
    return engine_eval(g_e, b, n, logits, err);
}

static void tokens(int32_t *t, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(tiny_rng(&seed) % (uint64_t)g_spec.n_vocab);
}

Test(kv, memory_grows_by_blocks_with_tokens_held) {
    kv_pool *p;
    attnd_err err;
    cr_assert_eq(kv_pool_create(&p, g_m, (size_t)16 << 20, KV_F16, &err), ATTND_OK, "%s", err.msg);
    size_t per_tok = kv_pool_bytes_per_token(p);
    /* layers x (K and V) x kv_dim x 2 bytes */
    cr_assert_eq(per_tok, (size_t)g_spec.n_layer * 2 * (g_spec.n_embd / g_spec.n_head * g_spec.n_head_kv) * 2);
    kv_seq *s;
    cr_assert_eq(kv_seq_create(&s, p, &err), ATTND_OK);
    cr_assert_eq(kv_pool_bytes_used(p), 0, "an empty sequence holds no memory");
    int32_t t[130];
    tokens(t, 130, 1);
    float *lg = malloc(sizeof(float) * 130 * g_spec.n_vocab);
    cr_assert_eq(feed(s, t, 1, lg, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_seq_bytes(s), per_tok * KV_BLOCK);
    cr_assert_eq(feed(s, t + 1, 64, lg, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_seq_len(s), 65);
    cr_assert_eq(kv_seq_bytes(s), 2 * per_tok * KV_BLOCK);
    cr_assert_eq(kv_pool_bytes_used(p), 2 * per_tok * KV_BLOCK);
    kv_seq_truncate(s, 64);
    cr_assert_eq(kv_seq_bytes(s), per_tok * KV_BLOCK, "truncation returns whole blocks to the pool");
    kv_seq_truncate(s, 0);
    cr_assert_eq(kv_pool_bytes_used(p), 0);
    kv_seq_destroy(s);
    free(lg);
    kv_pool_destroy(p);
}

Test(kv, f32_pool_uses_twice_the_bytes_of_f16) {
    kv_pool *a, *b;
    cr_assert_eq(kv_pool_create(&a, g_m, (size_t)1 << 20, KV_F16, NULL), ATTND_OK);
    cr_assert_eq(kv_pool_create(&b, g_m, (size_t)1 << 20, KV_F32, NULL), ATTND_OK);
    cr_assert_eq(kv_pool_bytes_per_token(b), 2 * kv_pool_bytes_per_token(a));
    cr_assert_eq(kv_pool_bytes_budget(a), (size_t)1 << 20);
    kv_pool_destroy(a);
    kv_pool_destroy(b);
}

Test(kv, truncate_then_reextend_gives_same_logits_as_fresh_prefill) {
    for (int ty = 0; ty < 2; ty++) {
        kv_pool *p;
        attnd_err err;
        cr_assert_eq(kv_pool_create(&p, g_m, (size_t)16 << 20, ty ? KV_F32 : KV_F16, &err), ATTND_OK);
        int V = g_spec.n_vocab;
        int32_t a[150], b[150];
        tokens(a, 150, 2);
        memcpy(b, a, sizeof(a));
        tokens(b + 40, 110, 3); /* shares the first 40 tokens with a */
        float *lg = malloc(sizeof(float) * 150 * V), *fresh = malloc(sizeof(float) * 150 * V);
        kv_seq *s, *f;
        cr_assert_eq(kv_seq_create(&s, p, NULL), ATTND_OK);
        cr_assert_eq(kv_seq_create(&f, p, NULL), ATTND_OK);
        cr_assert_eq(feed(s, a, 150, lg, &err), ATTND_OK, "%s", err.msg);
        kv_seq_truncate(s, 40); /* crosses back over two block boundaries */
        cr_assert_eq(kv_seq_len(s), 40);
        cr_assert_eq(feed(s, b + 40, 110, lg, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(feed(f, b, 150, fresh, &err), ATTND_OK, "%s", err.msg);
        for (int i = 0; i < 110; i++)
            for (int v = 0; v < V; v++)
                cr_assert(fabsf(lg[(size_t)i * V + v] - fresh[(size_t)(40 + i) * V + v]) < 1e-4f,
                          "position %d differs after truncate + re-extend", 40 + i);
        kv_seq_destroy(s);
        kv_seq_destroy(f);
        free(lg), free(fresh);
        kv_pool_destroy(p);
    }
}

Test(kv, budget_exhaustion_returns_nomem_and_leaves_sequences_intact) {
    kv_pool *p;
    attnd_err err;
    cr_assert_eq(kv_pool_create(&p, g_m, 1, KV_F16, &err), ATTND_ERR_INVALID, "a budget below one block is refused");
    cr_assert(strstr(err.msg, "budget"), "%s", err.msg);
    kv_pool *probe;
    cr_assert_eq(kv_pool_create(&probe, g_m, (size_t)1 << 20, KV_F16, NULL), ATTND_OK);
    size_t block = kv_pool_bytes_per_token(probe) * KV_BLOCK;
    kv_pool_destroy(probe);
    cr_assert_eq(kv_pool_create(&p, g_m, 3 * block, KV_F16, &err), ATTND_OK, "%s", err.msg);

    int V = g_spec.n_vocab;
    int32_t t[160];
    tokens(t, 160, 4);
    float *lg = malloc(sizeof(float) * 160 * V), *after = malloc(sizeof(float) * V);
    kv_seq *a, *b;
    cr_assert_eq(kv_seq_create(&a, p, NULL), ATTND_OK);
    cr_assert_eq(kv_seq_create(&b, p, NULL), ATTND_OK);
    cr_assert_eq(feed(a, t, 100, lg, &err), ATTND_OK, "%s", err.msg); /* 2 blocks */
    cr_assert_eq(feed(b, t, 10, lg, &err), ATTND_OK, "%s", err.msg);  /* 1 block: budget full */
    size_t used = kv_pool_bytes_used(p);

    /* A batch that needs a block for b and one for a: refused as a whole. */
    batch_entry batch[60];
    for (int i = 0; i < 60; i++) batch[i] = (batch_entry){b, t[10 + i], 10 + i, false};
    cr_assert_eq(engine_eval(g_e, batch, 60, NULL, &err), ATTND_ERR_NOMEM);
    cr_assert(strstr(err.msg, "budget"), "%s", err.msg);
    /* b's part fits in its block, a's part (to 130 tokens) needs a third block: still nothing
     * is appended to either. */
    batch_entry mixed[32];
    for (int i = 0; i < 2; i++) mixed[i] = (batch_entry){b, t[10 + i], 10 + i, false};
    for (int i = 0; i < 30; i++) mixed[2 + i] = (batch_entry){a, t[100 + i], 100 + i, false};
    cr_assert_eq(engine_eval(g_e, mixed, 32, NULL, &err), ATTND_ERR_NOMEM);
    cr_assert_eq(kv_seq_len(a), 100);
    cr_assert_eq(kv_seq_len(b), 10);
    cr_assert_eq(kv_pool_bytes_used(p), used);

    /* Both sequences still work: b continues within its block and gives the same logits as a
     * fresh evaluation of its 11 tokens would. */
    cr_assert_eq(feed(b, t + 10, 1, after, &err), ATTND_OK, "%s", err.msg);
    kv_seq_truncate(a, 0);
    cr_assert_eq(feed(a, t, 11, lg, &err), ATTND_OK, "%s", err.msg);
    for (int v = 0; v < V; v++) cr_assert(fabsf(after[v] - lg[(size_t)10 * V + v]) < 1e-4f);
    kv_seq_destroy(a);
    kv_seq_destroy(b);
    free(lg), free(after);
    kv_pool_destroy(p);
}

Test(kv, blocks_return_to_the_pool_when_many_sequences_come_and_go) {
    kv_pool *p;
    attnd_err err;
    cr_assert_eq(kv_pool_create(&p, g_m, (size_t)64 << 20, KV_F32, &err), ATTND_OK, "%s", err.msg);
    size_t block = kv_pool_bytes_per_token(p) * KV_BLOCK;
    int32_t t[65];
    tokens(t, 65, 6);
    float *lg = malloc(sizeof(float) * 65 * g_spec.n_vocab), *first = malloc(sizeof(float) * g_spec.n_vocab);
    for (int round = 0; round < 3; round++) {
        kv_seq *s[10];
        for (int i = 0; i < 10; i++) {
            cr_assert_eq(kv_seq_create(&s[i], p, NULL), ATTND_OK);
            cr_assert_eq(feed(s[i], t, 65, lg, &err), ATTND_OK, "%s", err.msg);
            if (round == 0 && i == 0) memcpy(first, lg + 64 * g_spec.n_vocab, sizeof(float) * g_spec.n_vocab);
            /* recycled blocks hold old data: results must not depend on it */
            cr_assert_eq(memcmp(first, lg + 64 * g_spec.n_vocab, sizeof(float) * g_spec.n_vocab), 0);
        }
        cr_assert_eq(kv_pool_bytes_used(p), 20 * block);
        kv_seq_truncate(s[0], 65); /* no-op: not shorter */
        kv_seq_truncate(s[0], 200);
        cr_assert_eq(kv_seq_len(s[0]), 65);
        for (int i = 0; i < 10; i++) kv_seq_destroy(s[i]);
        cr_assert_eq(kv_pool_bytes_used(p), 0);
    }
    kv_seq_destroy(NULL);
    free(lg), free(first);
    kv_pool_destroy(p);
    kv_pool_destroy(NULL);
}
