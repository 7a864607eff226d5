/*
 * test_embed.c — embeddings and relevance scores (attnd/embed.h): roles and pooling read from the
 * file, decoder embeddings against the float64 reference (through the output head: the logits
 * are W h, so W (pooled h) is the pooled logits), many inputs of different lengths in one call
 * equal to each alone, the rank head, and the refusals.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/embed.h"
#include "attnd/engine.h"
#include "engine_fixture.h"

/* A tiny qwen3 (tied output: logits = token_embd h) written to path, loaded into *m with an
 * engine of max_batch entries. */
static void load_tiny(tiny_spec *sp, char *path, size_t n, const char *tag, model **m, engine **e, int max_batch) {
    tiny_tmpname(path, n, tag);
    cr_assert_eq(tiny_write(path, sp), 0);
    attnd_err err = {0};
    cr_assert_eq(model_load(m, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(e, *m, max_batch, 1, &err), ATTND_OK, "%s", err.msg);
}

static tiny_spec qwen3_spec(void) {
    tiny_spec sp = tiny_default("qwen3");
    sp.tied = true;
    sp.pooling = 1 + POOL_LAST;
    return sp;
}

/* lg (n_vocab) = token_embd v, in double. */
static void through_head(const char *path, const float *v, int E, int V, double *lg) {
    gguf_file *f;
    cr_assert_eq(gguf_open(&f, path, NULL), ATTND_OK);
    const gguf_tensor *w = gguf_find_tensor(f, "token_embd.weight");
    for (int r = 0; r < V; r++) {
        double s = 0;
        for (int c = 0; c < E; c++) s += ref_elem(w, (uint64_t)r * E + c) * v[c];
        lg[r] = s;
    }
    gguf_close(f);
}

Test(embed, roles_and_pooling_come_from_the_file) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = tiny_default("qwen3");
    load_tiny(&sp, path, sizeof(path), "plain", &m, &e, 8);
    cr_assert_eq(model_roles(m), MODEL_ROLE_GENERATE);
    cr_assert_eq(model_pooling_type(m), POOL_LAST); /* a decoder without the key */
    cr_assert_eq(model_n_cls_out(m), 0);
    cr_assert_not(model_is_encoder(m));
    engine_destroy(e), model_destroy(m), unlink(path);

    sp = qwen3_spec();
    sp.pooling = 1 + POOL_MEAN;
    load_tiny(&sp, path, sizeof(path), "mean", &m, &e, 8);
    cr_assert_eq(model_roles(m), MODEL_ROLE_GENERATE | MODEL_ROLE_EMBED);
    cr_assert_eq(model_pooling_type(m), POOL_MEAN);
    cr_assert_eq(model_embed_dim(m), 32);
    engine_destroy(e), model_destroy(m), unlink(path);

    sp = qwen3_spec();
    sp.pooling = 1 + POOL_RANK, sp.n_cls_out = 2;
    load_tiny(&sp, path, sizeof(path), "rank", &m, &e, 8);
    cr_assert_eq(model_roles(m), MODEL_ROLE_GENERATE | MODEL_ROLE_RANK);
    cr_assert_eq(model_embed_dim(m), 2);
    cr_assert_eq(model_pool_dim(m, POOL_MEAN), 32);
    engine_destroy(e), model_destroy(m), unlink(path);
}

Test(embed, bad_pooling_type_or_rank_without_head_is_refused) {
    char path[256];
    tiny_spec sp = qwen3_spec();
    sp.pooling = 1 + 7;
    tiny_tmpname(path, sizeof(path), "badpool");
    cr_assert_eq(tiny_write(path, &sp), 0);
    model *m = NULL;
    attnd_err err = {0};
    cr_assert_eq(model_load(&m, path, &err), ATTND_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "pooling_type"), "%s", err.msg);
    unlink(path);
    sp.pooling = 1 + POOL_RANK;
    cr_assert_eq(tiny_write(path, &sp), 0);
    cr_assert_eq(model_load(&m, path, &err), ATTND_ERR_FORMAT);
    cr_assert(strstr(err.msg, "cls.output"), "%s", err.msg);
    unlink(path);
}

/* The last token's vector through the output head equals the reference's logits there; the mean
 * through the head equals the mean of the reference's logits (the head is linear). */
Test(embed, decoder_last_and_mean_match_float64_reference) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = qwen3_spec();
    load_tiny(&sp, path, sizeof(path), "ref", &m, &e, 64);
    const int32_t toks[9] = {1, 7, 30, 2, 44, 9, 17, 3, 25};
    int n = 9, V = sp.n_vocab, E = sp.n_embd;
    double *ref = malloc(sizeof(double) * (size_t)n * V), lg[48];
    ref_forward(&sp, path, toks, n, ref);
    float v[32];
    attnd_err err = {0};
    embed_input in = {toks, n, NULL};
    for (int which = 0; which < 2; which++) {
        model_pooling pool = which ? POOL_MEAN : POOL_LAST;
        cr_assert_eq(engine_embed(e, &in, 1, pool, v, &err), ATTND_OK, "%s", err.msg);
        through_head(path, v, E, V, lg);
        for (int r = 0; r < V; r++) {
            double want = 0;
            for (int t = 0; t < n; t++) want += pool == POOL_MEAN ? ref[(size_t)t * V + r] / n : 0;
            if (pool == POOL_LAST) want = ref[(size_t)(n - 1) * V + r];
            cr_assert(fabs(lg[r] - want) < 2e-4 * (1 + fabs(want)), "%s row %d: %g vs %g", model_pooling_name(pool), r,
                      lg[r], want);
        }
    }
    free(ref);
    engine_destroy(e), model_destroy(m), unlink(path);
}

/* Inputs of different lengths in one call (and more than one batch: passes of 16 tokens) give
 * what each gives alone: each attends to itself only. */
Test(embed, many_inputs_in_one_call_equal_each_alone) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = qwen3_spec();
    sp.pooling = 1 + POOL_MEAN;
    load_tiny(&sp, path, sizeof(path), "many", &m, &e, 16);
    int32_t toks[5][16];
    int lens[5] = {3, 16, 1, 9, 7};
    embed_input in[5];
    for (int i = 0; i < 5; i++) {
        for (int t = 0; t < lens[i]; t++) toks[i][t] = (int32_t)((i * 7 + t * 5 + 3) % 48);
        in[i] = (embed_input){toks[i], lens[i], NULL};
    }
    float all[5 * 32], one[32];
    attnd_err err = {0};
    cr_assert_eq(engine_embed(e, in, 5, POOL_FILE, all, &err), ATTND_OK, "%s", err.msg);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(engine_embed(e, &in[i], 1, POOL_MEAN, one, &err), ATTND_OK, "%s", err.msg);
        for (int k = 0; k < 32; k++)
            cr_assert(fabsf(all[i * 32 + k] - one[k]) <= 1e-5f * (1 + fabsf(one[k])), "input %d [%d]: %g vs %g", i, k,
                      all[i * 32 + k], one[k]);
    }
    cr_assert_eq(engine_embed(e, in, 0, POOL_FILE, NULL, &err), ATTND_OK);
    engine_destroy(e), model_destroy(m), unlink(path);
}

/* Rank with a decoder's head: softmax of cls.output's rows times the last token's vector. */
Test(embed, decoder_rank_is_softmax_of_head_on_last_token) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = qwen3_spec();
    sp.pooling = 1 + POOL_RANK, sp.n_cls_out = 2;
    load_tiny(&sp, path, sizeof(path), "rank", &m, &e, 32);
    const int32_t toks[6] = {1, 5, 9, 40, 41, 2};
    embed_input in = {toks, 6, NULL};
    float last[32], score[2];
    attnd_err err = {0};
    cr_assert_eq(engine_embed(e, &in, 1, POOL_LAST, last, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_embed(e, &in, 1, POOL_FILE, score, &err), ATTND_OK, "%s", err.msg);
    gguf_file *f;
    cr_assert_eq(gguf_open(&f, path, NULL), ATTND_OK);
    const gguf_tensor *w = gguf_find_tensor(f, "cls.output.weight");
    double z[2];
    for (int r = 0; r < 2; r++) {
        z[r] = 0;
        for (int c = 0; c < 32; c++) z[r] += ref_elem(w, (uint64_t)r * 32 + c) * last[c];
    }
    gguf_close(f);
    double p0 = 1 / (1 + exp(z[1] - z[0]));
    cr_assert(fabs(score[0] - p0) < 1e-5 && fabs(score[0] + score[1] - 1) < 1e-6, "%g %g vs %g", score[0], score[1], p0);
    engine_destroy(e), model_destroy(m), unlink(path);
}

static int attn_calls;
static void count_attn(void *user, int entry, int layer, int head, const float *w, int n_keys) {
    (void)user, (void)entry, (void)layer, (void)head, (void)w, (void)n_keys;
    attn_calls++;
}

Test(embed, bad_inputs_are_refused_and_hooks_stay_silent) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = qwen3_spec();
    load_tiny(&sp, path, sizeof(path), "bad", &m, &e, 8);
    engine_set_attention_cb(e, count_attn, NULL);
    int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, bad[2] = {1, 48};
    float out[32];
    attnd_err err = {0};
    cr_assert_eq(engine_embed(e, &(embed_input){toks, 9, NULL}, 1, POOL_FILE, out, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "1..8"), "%s", err.msg);
    cr_assert_eq(engine_embed(e, &(embed_input){bad, 2, NULL}, 1, POOL_FILE, out, &err), ATTND_ERR_INVALID);
    cr_assert_eq(engine_embed(e, &(embed_input){toks, 0, NULL}, 1, POOL_FILE, out, &err), ATTND_ERR_INVALID);
    cr_assert_eq(engine_embed(e, &(embed_input){toks, 3, NULL}, 1, POOL_NONE, out, &err), ATTND_ERR_INVALID);
    cr_assert_eq(engine_embed(e, &(embed_input){toks, 3, NULL}, 1, POOL_RANK, out, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "classification head"), "%s", err.msg);
    cr_assert_eq(engine_embed(e, &(embed_input){toks, 3, NULL}, 1, POOL_CLS, out, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(attn_calls, 0);
    /* the engine's sequences are untouched: a generation batch still works and calls the hook */
    kv_pool *pool;
    kv_seq *s;
    cr_assert_eq(kv_pool_create(&pool, m, (size_t)1 << 20, KV_F32, &err), ATTND_OK);
    cr_assert_eq(kv_seq_create(&s, pool, &err), ATTND_OK);
    float logits[48];
    cr_assert_eq(engine_eval(e, &(batch_entry){s, 1, 0, true}, 1, logits, &err), ATTND_OK, "%s", err.msg);
    cr_assert_gt(attn_calls, 0);
    kv_seq_destroy(s), kv_pool_destroy(pool);
    engine_destroy(e), model_destroy(m), unlink(path);
}
