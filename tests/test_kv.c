/*
 * test_kv.c — the KV cache: block-wise growth against a byte budget, truncation and re-extension,
 * all-or-nothing reservation when the budget runs out, F16/F32 storage, blocks recycled
 * between sequences. Uses small generated models (engine_fixture.h), so it needs no shared files.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "attnd/engine.h"
#include "engine_rig.h"
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

static attnd_status feed_on(engine *e, kv_seq *s, const int32_t *tok, int n, float *logits, attnd_err *err) {
    batch_entry b[160];
    cr_assert(n <= 160);
    int pos0 = kv_seq_len(s);
    for (int i = 0; i < n; i++) b[i] = (batch_entry){s, tok[i], pos0 + i, true};
    return engine_eval(e, b, n, logits, err);
}

static attnd_status feed(kv_seq *s, const int32_t *tok, int n, float *logits, attnd_err *err) {
    return feed_on(g_e, s, tok, n, logits, err);
}

static void tokens(int32_t *t, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(tiny_rng(&seed) % (uint64_t)g_spec.n_vocab);
}

/* A 16 MiB pool of kv-typed blocks over g_m, asserted to open. */
static kv_pool *pool_16m(kv_type kv) {
    kv_pool *p;
    attnd_err err;
    cr_assert_eq(kv_pool_create(&p, g_m, (size_t)16 << 20, kv, &err), ATTND_OK, "%s", err.msg);
    return p;
}

Test(kv, memory_grows_by_blocks_with_tokens_held) {
    kv_pool *p = pool_16m(KV_F16);
    attnd_err err;
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
        kv_pool *p = pool_16m(ty ? KV_F32 : KV_F16);
        attnd_err err;
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

// ---- forked sequences (shared blocks, copy-on-write) ---------------------------------------

/* One decode step: token toks[i] for each of seqs[0..n), in one batch; logits (n, n_vocab). */
static attnd_status step(kv_seq *const *seqs, const int32_t *toks, int n, float *logits, attnd_err *err) {
    batch_entry b[16];
    cr_assert(n <= 16);
    for (int i = 0; i < n; i++) b[i] = (batch_entry){seqs[i], toks[i], kv_seq_len(seqs[i]), true};
    return engine_eval(g_e, b, n, logits, err);
}

/* Decodes `steps` tokens per sequence, cont[i][j] for sequence i, the sequences batched
 * together; all logits (steps, n, n_vocab) go to out. */
static void decode_all(kv_seq *const *seqs, int n, int32_t cont[][8], int steps, float *out) {
    attnd_err err;
    int V = g_spec.n_vocab;
    for (int j = 0; j < steps; j++) {
        int32_t t[16];
        for (int i = 0; i < n; i++) t[i] = cont[i][j];
        cr_assert_eq(step(seqs, t, n, out + (size_t)j * n * V, &err), ATTND_OK, "%s", err.msg);
    }
}

static size_t block_size(kv_pool *p) { return kv_pool_bytes_per_token(p) * KV_BLOCK; }

/* A prompt that ends inside its second block (100 tokens), so every child's first write lands in
 * a shared, partly filled block. The children run in the same batch shape as independent
 * sequences that were prefilled with the same prompt in the same way: they read the same cached
 * bytes and run the same arithmetic, so their logits are equal, not merely close. */
Test(kv, forked_sequences_evaluate_exactly_as_independent_ones) {
    for (int ty = 0; ty < 2; ty++) {
        kv_pool *p = pool_16m(ty ? KV_F32 : KV_F16);
        attnd_err err;
        int V = g_spec.n_vocab, N = 3, steps = 8;
        int32_t prompt[100], cont[3][8];
        tokens(prompt, 100, 11);
        for (int i = 0; i < N; i++) tokens(cont[i], steps, 20 + (uint64_t)i);
        float *lg = malloc(sizeof(float) * 100 * V);
        float *a = malloc(sizeof(float) * steps * N * V), *b = malloc(sizeof(float) * steps * N * V);

        kv_seq *parent, *child[3], *ind[3];
        cr_assert_eq(kv_seq_create(&parent, p, NULL), ATTND_OK);
        cr_assert_eq(feed(parent, prompt, 100, lg, &err), ATTND_OK, "%s", err.msg);
        for (int i = 0; i < N; i++) {
            cr_assert_eq(kv_seq_fork(&child[i], parent, &err), ATTND_OK, "%s", err.msg);
            cr_assert_eq(kv_seq_len(child[i]), 100);
            cr_assert_eq(kv_seq_create(&ind[i], p, NULL), ATTND_OK);
            cr_assert_eq(feed(ind[i], prompt, 100, lg, &err), ATTND_OK, "%s", err.msg);
        }
        decode_all(child, N, cont, steps, a);
        decode_all(ind, N, cont, steps, b);
        cr_assert_eq(memcmp(a, b, sizeof(float) * steps * N * V), 0, "a fork evaluates as an independent sequence");
        /* The continuations differ, so the children really are separate after the copy. */
        cr_assert_neq(memcmp(a + (size_t)(steps - 1) * N * V, a + (size_t)(steps - 1) * N * V + V, sizeof(float) * V),
                      0);
        /* The parent was not disturbed by its children's writes: it continues like ind[0]. */
        kv_seq_truncate(ind[0], 100);
        float *pa = malloc(sizeof(float) * V), *pb = malloc(sizeof(float) * V);
        cr_assert_eq(step(&parent, &cont[1][0], 1, pa, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(step(&ind[0], &cont[1][0], 1, pb, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(memcmp(pa, pb, sizeof(float) * V), 0);
        for (int i = 0; i < N; i++) kv_seq_destroy(child[i]), kv_seq_destroy(ind[i]);
        kv_seq_destroy(parent);
        cr_assert_eq(kv_pool_bytes_used(p), 0);
        free(lg), free(a), free(b), free(pa), free(pb);
        kv_pool_destroy(p);
    }
}

Test(kv, shared_blocks_are_counted_once_and_copied_only_when_written) {
    kv_pool *p = pool_16m(KV_F16);
    attnd_err err;
    size_t B = block_size(p);
    int V = g_spec.n_vocab;
    int32_t prompt[128], cont[3][8];
    tokens(prompt, 128, 30);
    for (int i = 0; i < 3; i++) tokens(cont[i], 8, 31 + (uint64_t)i);
    float *lg = malloc(sizeof(float) * 128 * V);

    /* A prompt ending inside a block: the partly filled block is copied by each writer. */
    kv_seq *parent, *c[3];
    cr_assert_eq(kv_seq_create(&parent, p, NULL), ATTND_OK);
    cr_assert_eq(feed(parent, prompt, 100, lg, &err), ATTND_OK, "%s", err.msg);
    for (int i = 0; i < 3; i++) cr_assert_eq(kv_seq_fork(&c[i], parent, NULL), ATTND_OK);
    cr_assert_eq(kv_pool_bytes_used(p), 2 * B, "forking takes no memory");
    cr_assert_eq(kv_seq_bytes(c[0]), 2 * B);
    cr_assert_eq(kv_seq_bytes_shared(c[0]), 2 * B);
    cr_assert_eq(kv_seq_bytes_shared(parent), 2 * B);
    decode_all(c, 3, cont, 1, lg);
    cr_assert_eq(kv_pool_bytes_used(p), 5 * B, "each child copied the shared last block once");
    cr_assert_eq(kv_seq_bytes_shared(c[0]), B, "the full first block stays shared");
    decode_all(c, 3, cont, 4, lg);
    cr_assert_eq(kv_pool_bytes_used(p), 5 * B, "a copied block is the child's own: no further copies");
    for (int i = 0; i < 3; i++) kv_seq_destroy(c[i]);
    cr_assert_eq(kv_pool_bytes_used(p), 2 * B);
    cr_assert_eq(kv_seq_bytes_shared(parent), 0);

    /* Parent gone before the children write: the last writer keeps the original block. */
    for (int i = 0; i < 3; i++) cr_assert_eq(kv_seq_fork(&c[i], parent, NULL), ATTND_OK);
    kv_seq_destroy(parent);
    cr_assert_eq(kv_pool_bytes_used(p), 2 * B, "the children keep the parent's blocks alive");
    decode_all(c, 3, cont, 1, lg);
    cr_assert_eq(kv_pool_bytes_used(p), 4 * B, "two copies, the third child writes into the original");
    for (int i = 0; i < 3; i++) kv_seq_destroy(c[i]);
    cr_assert_eq(kv_pool_bytes_used(p), 0);

    /* A prompt ending on a block boundary: nothing shared is written, each child takes a new block. */
    cr_assert_eq(kv_seq_create(&parent, p, NULL), ATTND_OK);
    cr_assert_eq(feed(parent, prompt, 128, lg, &err), ATTND_OK, "%s", err.msg);
    for (int i = 0; i < 3; i++) cr_assert_eq(kv_seq_fork(&c[i], parent, NULL), ATTND_OK);
    decode_all(c, 3, cont, 1, lg);
    cr_assert_eq(kv_pool_bytes_used(p), 5 * B);
    cr_assert_eq(kv_seq_bytes_shared(c[2]), 2 * B);
    for (int i = 0; i < 3; i++) kv_seq_destroy(c[i]);
    kv_seq_destroy(parent);
    cr_assert_eq(kv_pool_bytes_used(p), 0);
    free(lg);
    kv_pool_destroy(p);
}

/* Truncating into shared blocks, forks of forks, and every destroy order leave the other holders
 * intact: a sibling's continuation matches an independent sequence's, and the pool ends empty. */
Test(kv, truncate_and_destroy_in_any_order_leave_the_other_holders_intact) {
    kv_pool *p = pool_16m(KV_F32);
    attnd_err err;
    size_t B = block_size(p);
    int V = g_spec.n_vocab;
    int32_t prompt[150], other[150];
    tokens(prompt, 150, 40);
    tokens(other, 150, 41);
    float *lg = malloc(sizeof(float) * 160 * V), *ref = malloc(sizeof(float) * 160 * V);
    int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int o = 0; o < 6; o++) {
        kv_seq *s[3], *ind;
        cr_assert_eq(kv_seq_create(&s[0], p, NULL), ATTND_OK);
        cr_assert_eq(feed(s[0], prompt, 150, lg, &err), ATTND_OK, "%s", err.msg); /* 3 blocks */
        cr_assert_eq(kv_seq_fork(&s[1], s[0], NULL), ATTND_OK);
        kv_seq_truncate(s[1], 40); /* back into the shared first block */
        cr_assert_eq(kv_seq_fork(&s[2], s[1], NULL), ATTND_OK); /* a fork of a fork */
        cr_assert_eq(kv_seq_len(s[2]), 40);
        cr_assert_eq(kv_pool_bytes_used(p), 3 * B);
        /* s[1] rewrites positions 40.. that s[0] and s[2] still hold (s[2] only up to 40). */
        cr_assert_eq(feed(s[1], other + 40, 60, lg, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(kv_pool_bytes_used(p), 5 * B, "s[1] copied block 0 and took a new block 1");
        for (int k = 0; k < 3; k++) {
            int victim = orders[o][k];
            kv_seq_destroy(s[victim]);
            s[victim] = NULL;
            /* Each survivor continues exactly like an independent sequence of its tokens. */
            for (int j = 0; j < 3; j++) {
                if (!s[j]) continue;
                int len = kv_seq_len(s[j]);
                const int32_t *src = j == 1 ? other : prompt;
                int32_t toks[160];
                memcpy(toks, prompt, sizeof(int32_t) * 40);
                memcpy(toks + 40, src + 40, sizeof(int32_t) * (size_t)(len - 40));
                toks[len] = (int32_t)(7 + j);
                cr_assert_eq(kv_seq_create(&ind, p, NULL), ATTND_OK);
                cr_assert_eq(feed(ind, toks, len + 1, ref, &err), ATTND_OK, "%s", err.msg);
                kv_seq_destroy(ind);
                cr_assert_eq(feed(s[j], toks + len, 1, lg, &err), ATTND_OK, "%s", err.msg);
                kv_seq_truncate(s[j], len);
                for (int v = 0; v < V; v++)
                    cr_assert(fabsf(lg[v] - ref[(size_t)len * V + v]) < 1e-4f, "order %d: survivor %d differs", o, j);
            }
        }
        cr_assert_eq(kv_pool_bytes_used(p), 0, "order %d: every block returned", o);
    }
    free(lg), free(ref);
    kv_pool_destroy(p);
}

/* The copies forked children need count against the budget like any block: a batch whose copies
 * do not fit is refused whole and leaves every sequence and the sharing as it was. */
Test(kv, budget_exhausted_by_copies_refuses_the_batch_and_keeps_the_sharing) {
    kv_pool *p, *big;
    attnd_err err;
    big = pool_16m(KV_F16);
    size_t B = block_size(big);
    cr_assert_eq(kv_pool_create(&p, g_m, 3 * B, KV_F16, &err), ATTND_OK, "%s", err.msg);
    int V = g_spec.n_vocab;
    int32_t prompt[100], cont[2][8] = {{1, 2, 3, 4, 5, 6, 7, 8}, {9, 10, 11, 12, 13, 14, 15, 16}};
    tokens(prompt, 100, 50);
    float *lg = malloc(sizeof(float) * 100 * V), *a = malloc(sizeof(float) * 2 * V), *b = malloc(sizeof(float) * 2 * V);
    kv_seq *parent, *c[2];
    cr_assert_eq(kv_seq_create(&parent, p, NULL), ATTND_OK);
    cr_assert_eq(feed(parent, prompt, 100, lg, &err), ATTND_OK, "%s", err.msg); /* 2 of 3 blocks */
    for (int i = 0; i < 2; i++) cr_assert_eq(kv_seq_fork(&c[i], parent, NULL), ATTND_OK);

    /* Both children writing needs two copies; one block is left. */
    int32_t t[2] = {cont[0][0], cont[1][0]};
    cr_assert_eq(step(c, t, 2, a, &err), ATTND_ERR_NOMEM);
    cr_assert(strstr(err.msg, "budget"), "%s", err.msg);
    cr_assert_eq(kv_seq_len(c[0]), 100);
    cr_assert_eq(kv_seq_len(c[1]), 100);
    cr_assert_eq(kv_pool_bytes_used(p), 2 * B);
    cr_assert_eq(kv_seq_bytes_shared(parent), 2 * B, "a refused batch keeps the blocks shared");

    /* One child fits; the other does not, until the parent lets go of the original. */
    cr_assert_eq(step(&c[0], &t[0], 1, a, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_pool_bytes_used(p), 3 * B);
    cr_assert_eq(step(&c[1], &t[1], 1, a + V, &err), ATTND_ERR_NOMEM);
    kv_seq_destroy(parent);
    cr_assert_eq(step(&c[1], &t[1], 1, a + V, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_pool_bytes_used(p), 3 * B, "the last holder writes into the original");

    /* Both give the logits of independent sequences (evaluated in a pool with room). */
    for (int i = 0; i < 2; i++) {
        kv_seq *ind;
        cr_assert_eq(kv_seq_create(&ind, big, NULL), ATTND_OK);
        cr_assert_eq(feed(ind, prompt, 100, lg, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(step(&ind, &t[i], 1, b + (size_t)i * V, &err), ATTND_OK, "%s", err.msg);
        kv_seq_destroy(ind);
    }
    cr_assert_eq(memcmp(a, b, sizeof(float) * 2 * V), 0);
    for (int i = 0; i < 2; i++) kv_seq_destroy(c[i]);
    cr_assert_eq(kv_pool_bytes_used(p), 0);
    free(lg), free(a), free(b);
    kv_pool_destroy(p);
    kv_pool_destroy(big);
}

/* engine_set_yield: a step given up after any layer leaves no trace. Each sequence here is a fork
 * of one 100-token prompt (its next write lands in a shared block: the copy-on-write path); a
 * step given up after layer L, then evaluated in full, gives the logits of the same step
 * evaluated in full at once, bit for bit, and the prompt's other holder reads what it did. */
typedef struct {
    int calls, at;
} yield_at;

static bool yield_after(void *user) {
    yield_at *y = user;
    return y->calls++ == y->at;
}

Test(kv, a_step_given_up_after_any_layer_changes_nothing) {
    /* a deeper copy of the fixture, so that a step can be given up after several layers */
    tiny_spec sp = tiny_default("llama");
    sp.n_layer = 4;
    tiny_rig r; /* 1 thread, batches of up to 160, a 16 MiB pool */
    tiny_rig_open_with(&r, &sp, KV_F16, 160, 1, 16);
    attnd_err err;
    int V = sp.n_vocab, L = sp.n_layer;
    int32_t prompt[100], next[5];
    tokens(prompt, 100, 11);
    tokens(next, 5, 12);
    float *lg = malloc(sizeof(float) * 100 * V), *want = malloc(sizeof(float) * 5 * V), *got = malloc(sizeof(float) * 5 * V);
    kv_seq *parent, *ref;
    cr_assert_eq(kv_seq_create(&parent, r.pool, NULL), ATTND_OK);
    cr_assert_eq(feed_on(r.e, parent, prompt, 100, lg, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_seq_fork(&ref, parent, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(feed_on(r.e, ref, next, 5, want, &err), ATTND_OK, "%s", err.msg);
    for (int at = 0; at < L - 1; at++) {
        kv_seq *s;
        cr_assert_eq(kv_seq_fork(&s, parent, &err), ATTND_OK, "%s", err.msg);
        yield_at y = {0, at};
        engine_set_yield(r.e, yield_after, &y);
        cr_assert_eq(feed_on(r.e, s, next, 5, got, &err), ATTND_ERR_BUSY, "the step was not given up after layer %d",
                     at);
        cr_expect_eq(y.calls, at + 1, "asked %d times, given up at the %d-th", y.calls, at + 1);
        cr_assert_eq(kv_seq_len(s), 100, "a given-up step grew the sequence to %d", kv_seq_len(s));
        engine_set_yield(r.e, NULL, NULL);
        cr_assert_eq(feed_on(r.e, s, next, 5, got, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(kv_seq_len(s), 105);
        cr_assert(!memcmp(got, want, sizeof(float) * 5 * V), "given up after layer %d: the rerun differs", at);
        kv_seq_destroy(s);
    }
    /* never asked after the last layer: a yield function that always says yes cannot stop a
     * one-layer-from-the-end step, and an ablating batch is never asked (engine.h) */
    yield_at never = {0, -1};
    engine_set_yield(r.e, yield_after, &never);
    kv_seq *s;
    cr_assert_eq(kv_seq_fork(&s, parent, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(feed_on(r.e, s, next, 5, got, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(never.calls, L - 1, "asked %d times for %d layers", never.calls, L);
    cr_assert(!memcmp(got, want, sizeof(float) * 5 * V));
    engine_set_yield(r.e, NULL, NULL);
    /* the prompt's other holder still reads the prompt it wrote */
    float *again = malloc(sizeof(float) * 5 * V);
    kv_seq *ref2;
    cr_assert_eq(kv_seq_fork(&ref2, parent, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(feed_on(r.e, ref2, next, 5, again, &err), ATTND_OK, "%s", err.msg);
    cr_assert(!memcmp(again, want, sizeof(float) * 5 * V));
    kv_seq_destroy(ref2), kv_seq_destroy(s), kv_seq_destroy(ref), kv_seq_destroy(parent);
    free(lg), free(want), free(got), free(again);
    tiny_rig_close(&r);
}
