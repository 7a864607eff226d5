/*
 * test_embed.c — embeddings and relevance scores (attnd/embed.h): roles and pooling read from the
 * file, decoder embeddings against the float64 reference (through the output head: the logits
 * are W h, so W (pooled h) is the pooled logits), many inputs of different lengths in one call
 * equal to each alone, the rank head, and the refusals.
 */
#include <criterion/criterion.h>
#include <jansson.h>
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
    cr_assert(fabs(score[0] - p0) < 1e-5 && fabs(score[0] + score[1] - 1) < 1e-6, "%g %g vs %g", score[0], score[1],
              p0);
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

// ---- encoders (bert) --------------------------------------------------------------------------

#include "encoder_fixture.h"

/* Attention rows captured through the engine's hook: (entry, layer, head) -> weights. */
typedef struct rows_cap {
    int n_entries, n_layer, n_head, max_keys;
    float *w; /* (n_entries, n_layer, n_head, max_keys) */
    int *n_keys;
} rows_cap;

static void cap_rows(void *user, int entry, int layer, int head, const float *w, int n_keys) {
    rows_cap *c = user;
    cr_assert(entry < c->n_entries && n_keys <= c->max_keys);
    size_t at = ((size_t)entry * c->n_layer + layer) * c->n_head + head;
    memcpy(c->w + at * c->max_keys, w, sizeof(float) * (size_t)n_keys);
    c->n_keys[at] = n_keys;
}

static void load_enc(const tiny_spec *sp, char *path, size_t n, const char *tag, model **m, engine **e, int max_batch) {
    tiny_tmpname(path, n, tag);
    cr_assert_eq(enc_write(path, sp), 0);
    attnd_err err = {0};
    cr_assert_eq(model_load(m, path, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(e, *m, max_batch, 2, &err), ATTND_OK, "%s", err.msg);
}

/* Inputs in[0..n) through engine_embed (pooling pool) and the reference: every pooled value within
 * tol (relative to the vector's largest), and every attention row (each input's own keys only)
 * within 1e-4. */
static void check_encoder(const tiny_spec *sp, const char *path, engine *e, const embed_input *in, int n,
                          model_pooling pool, double tol) {
    int E = sp->n_embd, L = sp->n_layer, H = sp->n_head, total = 0, max_len = 0;
    model_pooling want_pool = pool == POOL_FILE ? (model_pooling)(sp->pooling - 1) : pool;
    for (int i = 0; i < n; i++) total += in[i].n_tokens, max_len = in[i].n_tokens > max_len ? in[i].n_tokens : max_len;
    rows_cap c = {total,
                  L,
                  H,
                  max_len,
                  calloc((size_t)total * L * H * max_len, sizeof(float)),
                  calloc((size_t)total * L * H, sizeof(int))};
    engine_set_attention_cb(e, cap_rows, &c);
    float *out = malloc(sizeof(float) * (size_t)n * E);
    attnd_err err = {0};
    cr_assert_eq(engine_embed(e, in, n, pool, out, &err), ATTND_OK, "%s", err.msg);
    engine_set_attention_cb(e, NULL, NULL);
    for (int i = 0, entry = 0; i < n; entry += in[i].n_tokens, i++) {
        int len = in[i].n_tokens;
        double *x = malloc(sizeof(double) * (size_t)len * E),
               *attn = malloc(sizeof(double) * (size_t)L * H * len * len);
        eref_forward(sp, path, in[i].tokens, in[i].types, len, x, attn);
        double mx = 0, dot = 0, na = 0, nb = 0;
        for (int k = 0; k < E; k++) {
            double want = 0;
            for (int t = 0; t < len; t++) want += want_pool == POOL_MEAN ? x[(size_t)t * E + k] / len : 0;
            if (want_pool != POOL_MEAN) want = x[(size_t)(want_pool == POOL_LAST ? len - 1 : 0) * E + k];
            double got = out[(size_t)i * E + k];
            mx = fmax(mx, fabs(got - want)), dot += got * want, na += got * got, nb += want * want;
        }
        cr_assert(mx < tol, "input %d (%s): max difference %g", i, model_pooling_name(pool), mx);
        cr_assert(dot / sqrt(na * nb) >= 0.99999, "input %d: cosine %.8f", i, dot / sqrt(na * nb));
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < len; t++) {
                    size_t at = ((size_t)(entry + t) * L + l) * H + h;
                    cr_assert_eq(c.n_keys[at], len, "entry %d layer %d head %d: %d keys", entry + t, l, h,
                                 c.n_keys[at]);
                    for (int j = 0; j < len; j++) {
                        double want = attn[(((size_t)l * H + h) * len + t) * len + j];
                        cr_assert(fabs(c.w[at * max_len + j] - want) < 1e-4, "input %d l%d h%d row %d key %d: %g vs %g",
                                  i, l, h, t, j, c.w[at * max_len + j], want);
                    }
                }
        free(x), free(attn);
    }
    free(out), free(c.w), free(c.n_keys);
}

static const int32_t ENC_A[9] = {1, 300, 17, 45, 260, 301, 99, 8, 2}, ENC_B[5] = {1, 270, 280, 290, 2}, ENC_C[1] = {1};
static const uint8_t ENC_A_TYPES[9] = {0, 0, 0, 0, 1, 1, 1, 1, 1};

Test(embed, bert_matches_float64_reference_each_input_seeing_only_itself) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = enc_small();
    load_enc(&sp, path, sizeof(path), "bert", &m, &e, 64);
    cr_assert(model_is_encoder(m));
    cr_assert_eq(model_roles(m), MODEL_ROLE_EMBED);
    cr_assert_eq(model_pooling_type(m), POOL_MEAN);
    embed_input in[3] = {{ENC_A, 9, NULL}, {ENC_B, 5, NULL}, {ENC_C, 1, NULL}};
    check_encoder(&sp, path, e, in, 3, POOL_FILE, 1e-4);
    check_encoder(&sp, path, e, in, 3, POOL_CLS, 1e-4);
    check_encoder(&sp, path, e, in, 3, POOL_LAST, 1e-4);
    in[0].types = ENC_A_TYPES; /* segment ids (llama.cpp ignores them; attnd adds their rows) */
    check_encoder(&sp, path, e, in, 3, POOL_MEAN, 1e-4);
    engine_destroy(e), model_destroy(m), unlink(path);
}

/* XLM-RoBERTa's one token type (bge-m3, multilingual-e5): token_types is [E, 1] from today's
 * converter and [E] from older ones, which squeezed it; both load and match the reference. */
Test(embed, one_token_type_loads_as_a_row_or_a_vector) {
    tiny_spec sp = enc_small();
    sp.n_types = 1, sp.rms_eps = 1e-5f, sp.pooling = 1 + 2, sp.seed = 13;
    for (int dims = 2; dims >= 1; dims--) {
        char path[256];
        tiny_tmpname(path, sizeof(path), "xlmr-types");
        tiny_tensor *ts = calloc(TINY_MAX_TENSORS, sizeof(*ts));
        int nt = enc_tensors(&sp, ts);
        for (int i = 0; i < nt; i++)
            if (!strcmp(ts[i].name, "token_types.weight")) ts[i].n_dims = dims;
        cr_assert_eq(tiny_write_tensors(path, &sp, ts, nt), 0);
        free(ts);
        model *m;
        engine *e;
        attnd_err err = {0};
        cr_assert_eq(model_load(&m, path, &err), ATTND_OK, "token_types of %d dimension(s): %s", dims, err.msg);
        cr_assert_eq(engine_create(&e, m, 32, 1, &err), ATTND_OK, "%s", err.msg);
        embed_input in[2] = {{ENC_A, 9, NULL}, {ENC_B, 5, NULL}};
        check_encoder(&sp, path, e, in, 2, POOL_FILE, 1e-4);
        engine_destroy(e), model_destroy(m), unlink(path);
    }
}

Test(embed, bert_of_bge_base_shape_matches_float64_reference) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = enc_bge_base();
    load_enc(&sp, path, sizeof(path), "bge", &m, &e, 32);
    embed_input in[2] = {{ENC_A, 9, NULL}, {ENC_B, 5, NULL}};
    check_encoder(&sp, path, e, in, 2, POOL_FILE, 1e-4);
    engine_destroy(e), model_destroy(m), unlink(path);
}

/* nomic-bert: RoPE on q and k at each input's own positions, fused qkv, SwiGLU; small and at
 * nomic-embed-text v1.5's width (F32). */
Test(embed, nomic_bert_matches_float64_reference) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = enc_small();
    sp.arch = "nomic-bert", sp.rope_base = 1000.0f;
    load_enc(&sp, path, sizeof(path), "nomic", &m, &e, 64);
    embed_input in[3] = {{ENC_A, 9, ENC_A_TYPES}, {ENC_B, 5, NULL}, {ENC_C, 1, NULL}};
    check_encoder(&sp, path, e, in, 3, POOL_FILE, 1e-4);
    engine_destroy(e), model_destroy(m), unlink(path);
    sp = enc_named("nomic-bert");
    sp.wtype = GGUF_TYPE_F32;
    load_enc(&sp, path, sizeof(path), "nomic768", &m, &e, 64);
    check_encoder(&sp, path, e, in + 1, 1, POOL_FILE, 1e-4);
    engine_destroy(e), model_destroy(m), unlink(path);
}

/* gemma-embedding: gemma3's layers attending both ways, local layers within window / 2 on either
 * side: attention rows against the float64 reference within 1e-4, and the mean vector through the
 * (tied) output head equal to the mean of the reference's logits. */
Test(embed, gemma_embedding_matches_float64_reference) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = gemma_emb_small();
    load_tiny(&sp, path, sizeof(path), "gemb", &m, &e, 64);
    cr_assert_eq(model_roles(m), MODEL_ROLE_EMBED);
    int n = 11, V = sp.n_vocab, E = sp.n_embd, L = sp.n_layer, H = sp.n_head;
    const int32_t toks[11] = {2, 300, 17, 45, 260, 301, 99, 8, 270, 33, 1};
    double *ref = malloc(sizeof(double) * (size_t)n * V), *attn = malloc(sizeof(double) * (size_t)L * H * n * n);
    ref_forward_attn(&sp, path, toks, n, ref, attn);
    rows_cap c = {n, L, H, n, calloc((size_t)n * L * H * n, sizeof(float)), calloc((size_t)n * L * H, sizeof(int))};
    engine_set_attention_cb(e, cap_rows, &c);
    float v[64];
    attnd_err err = {0};
    cr_assert_eq(engine_embed(e, &(embed_input){toks, n, NULL}, 1, POOL_FILE, v, &err), ATTND_OK, "%s", err.msg);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < n; t++)
                for (int j = 0; j < n; j++) {
                    size_t at = ((size_t)t * L + l) * H + h;
                    double want = attn[(((size_t)l * H + h) * n + t) * n + j];
                    cr_assert(fabs(c.w[at * n + j] - want) < 1e-4, "l%d h%d row %d key %d: %g vs %g", l, h, t, j,
                              c.w[at * n + j], want);
                    if (l < 5 && abs(t - j) > 3) cr_assert_eq(c.w[at * n + j], 0.0f); /* outside the window */
                }
    double *lg = malloc(sizeof(double) * V);
    gguf_file *f;
    cr_assert_eq(gguf_open(&f, path, NULL), ATTND_OK);
    const gguf_tensor *w = gguf_find_tensor(f, "token_embd.weight");
    for (int r = 0; r < V; r++) {
        double got = 0, want = 0;
        for (int k = 0; k < E; k++) got += ref_elem(w, (uint64_t)r * E + k) * v[k];
        for (int t = 0; t < n; t++) want += ref[(size_t)t * V + r] / n;
        cr_assert(fabs(got - want) < 2e-4 * (1 + fabs(want)), "row %d: %g vs %g", r, got, want);
    }
    gguf_close(f);
    free(ref), free(attn), free(lg), free(c.w), free(c.n_keys);
    engine_destroy(e), model_destroy(m), unlink(path);
}

/* EmbeddingGemma's Dense modules: the pooled vector through dense_2 (n_embd -> 96) then dense_3
 * (96 -> n_embd), no activation between, as llama.cpp's build_dense_out. */
Test(embed, dense_projections_follow_pooling) {
    tiny_spec sp = gemma_emb_small();
    char plain[256], dense[256];
    model *m;
    engine *e;
    load_tiny(&sp, plain, sizeof(plain), "gplain", &m, &e, 32);
    const int32_t toks[7] = {2, 300, 17, 45, 260, 301, 1};
    float v[64], vd[64];
    attnd_err err = {0};
    cr_assert_eq(engine_embed(e, &(embed_input){toks, 7, NULL}, 1, POOL_FILE, v, &err), ATTND_OK, "%s", err.msg);
    engine_destroy(e), model_destroy(m), unlink(plain);
    tiny_tensor *ts = calloc(TINY_MAX_TENSORS, sizeof(*ts));
    int nt = tiny_tensors(&sp, ts); /* the same trunk, then the two projections */
    uint64_t seed = 99;
    tiny_add(ts, &nt, &seed, "dense_2.weight", 64, 96, GGUF_TYPE_F32, 0.2f, 0.0f);
    tiny_add(ts, &nt, &seed, "dense_3.weight", 96, 64, GGUF_TYPE_F32, 0.2f, 0.0f);
    double d2[96 * 64], d3[64 * 96];
    for (int i = 0; i < 96 * 64; i++) d2[i] = ts[nt - 2].vals[i], d3[i] = ts[nt - 1].vals[i];
    tiny_tmpname(dense, sizeof(dense), "gdense");
    cr_assert_eq(tiny_write_tensors(dense, &sp, ts, nt), 0);
    free(ts);
    cr_assert_eq(model_load(&m, dense, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(&e, m, 32, 1, &err), ATTND_OK);
    cr_assert_eq(engine_embed(e, &(embed_input){toks, 7, NULL}, 1, POOL_FILE, vd, &err), ATTND_OK, "%s", err.msg);
    double y[96];
    for (int r = 0; r < 96; r++) {
        y[r] = 0;
        for (int c = 0; c < 64; c++) y[r] += d2[r * 64 + c] * v[c];
    }
    for (int r = 0; r < 64; r++) {
        double want = 0;
        for (int c = 0; c < 96; c++) want += d3[r * 96 + c] * y[c];
        cr_assert(fabs(vd[r] - want) < 1e-4 * (1 + fabs(want)), "[%d] %g vs %g", r, vd[r], want);
    }
    engine_destroy(e), model_destroy(m), unlink(dense);
}

/* Passes of at most 8 tokens: inputs of 9 tokens do not fit; of 5 + 1 + 1 do, in one pass. */
Test(embed, bert_inputs_split_into_passes_equal_one_pass) {
    char path[256];
    model *m;
    engine *e, *e8;
    tiny_spec sp = enc_small();
    load_enc(&sp, path, sizeof(path), "passes", &m, &e, 64);
    attnd_err err = {0};
    cr_assert_eq(engine_create(&e8, m, 8, 1, &err), ATTND_OK);
    embed_input in[4] = {{ENC_B, 5, NULL}, {ENC_C, 1, NULL}, {ENC_C, 1, NULL}, {ENC_A + 1, 7, NULL}};
    float a[4 * 32], b[4 * 32];
    cr_assert_eq(engine_embed(e, in, 4, POOL_MEAN, a, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_embed(e8, in, 4, POOL_MEAN, b, &err), ATTND_OK, "%s", err.msg);
    for (int i = 0; i < 4 * 32; i++) cr_assert(fabsf(a[i] - b[i]) < 1e-5f, "[%d] %g vs %g", i, a[i], b[i]);
    cr_assert_eq(engine_embed(e8, &(embed_input){ENC_A, 9, NULL}, 1, POOL_MEAN, a, &err), ATTND_ERR_INVALID);
    uint8_t bad[5] = {0, 2, 0, 0, 0};
    cr_assert_eq(engine_embed(e, &(embed_input){ENC_B, 5, bad}, 1, POOL_MEAN, a, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "token type 2"), "%s", err.msg);
    kv_pool *pool;
    kv_seq *s;
    cr_assert_eq(kv_pool_create(&pool, m, (size_t)1 << 20, KV_F32, &err), ATTND_OK);
    cr_assert_eq(kv_seq_create(&s, pool, &err), ATTND_OK);
    cr_assert_eq(engine_eval(e, &(batch_entry){s, 1, 0, false}, 1, NULL, &err), ATTND_ERR_UNSUPPORTED);
    kv_seq_destroy(s), kv_pool_destroy(pool);
    engine_destroy(e8), engine_destroy(e), model_destroy(m), unlink(path);
}

/* A cross-encoder (bge-reranker class): the first token through cls (tanh) and cls.output. */
Test(embed, bert_rank_head_matches_float64_reference) {
    char path[256];
    model *m;
    engine *e;
    tiny_spec sp = enc_small();
    sp.pooling = 1 + POOL_RANK, sp.n_cls_out = 1;
    load_enc(&sp, path, sizeof(path), "rerank", &m, &e, 64);
    cr_assert_eq(model_roles(m), MODEL_ROLE_RANK);
    cr_assert_eq(model_embed_dim(m), 1);
    embed_input in[2] = {{ENC_A, 9, ENC_A_TYPES}, {ENC_B, 5, NULL}};
    float score[2];
    attnd_err err = {0};
    cr_assert_eq(engine_embed(e, in, 2, POOL_FILE, score, &err), ATTND_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++) {
        double *x = malloc(sizeof(double) * (size_t)in[i].n_tokens * 32), want;
        eref_forward(&sp, path, in[i].tokens, in[i].types, in[i].n_tokens, x, NULL);
        eref_rank(&sp, path, x, &want);
        cr_assert(fabs(score[i] - want) < 1e-4, "input %d: %g vs %g", i, score[i], want);
        free(x);
    }
    engine_destroy(e), model_destroy(m), unlink(path);
}

/* tests/data/reference-embed.json (regenerate.sh --only-embed): llama.cpp's pooled vectors of the
 * generated encoders and decoder embedders (the same files tiny_model writes), each input alone.
 * attnd's, all inputs in one call: cosine >= 0.9999 per input; the rerankers' scores (a
 * cross-encoder's logit, Qwen3-Reranker's softmax) within 1e-3, in the same order. */
Test(embed, encoders_match_llama_cpp) {
    json_error_t je;
    json_t *refj = json_load_file(ATTND_DATA_DIR "/reference-embed.json", 0, &je);
    cr_assert(refj, "tests/data/reference-embed.json: %s", je.text);
    json_t *cases = json_object_get(refj, "cases");
    cr_assert_eq(json_array_size(cases), N_ENC);
    int32_t ids[ENC_N_INPUTS][ENC_MAX_LEN];
    int len[ENC_N_INPUTS];
    enc_inputs(ids, len);
    embed_input in[ENC_N_INPUTS];
    for (int i = 0; i < ENC_N_INPUTS; i++) in[i] = (embed_input){ids[i], len[i], NULL};
    for (size_t c = 0; c < N_ENC; c++) {
        json_t *cj = json_array_get(cases, c), *want = json_object_get(cj, "vectors");
        cr_assert_str_eq(json_string_value(json_object_get(cj, "model")), ENC_NAMES[c]);
        tiny_spec sp = enc_named(ENC_NAMES[c]);
        char path[256];
        model *m;
        engine *e;
        load_enc(&sp, path, sizeof(path), ENC_NAMES[c], &m, &e, 128);
        int dim = model_embed_dim(m);
        bool rank = model_pooling_type(m) == POOL_RANK;
        float *out = malloc(sizeof(float) * ENC_N_INPUTS * (size_t)dim);
        attnd_err err = {0};
        cr_assert_eq(engine_embed(e, in, ENC_N_INPUTS, POOL_FILE, out, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(json_array_size(json_array_get(want, 0)), (size_t)dim);
        for (int i = 0; i < ENC_N_INPUTS; i++) {
            double dot = 0, na = 0, nb = 0, worst = 0;
            for (int k = 0; k < dim; k++) {
                double a = out[(size_t)i * dim + k], b = json_number_value(json_array_get(json_array_get(want, i), k));
                dot += a * b, na += a * a, nb += b * b, worst = fmax(worst, fabs(a - b));
            }
            cr_log_info("%s input %d: cosine %.8f, largest difference %.3g", ENC_NAMES[c], i, dot / sqrt(na * nb),
                        worst);
            if (rank)
                cr_assert(worst <= 1e-3, "%s input %d: score %g, llama.cpp %g", ENC_NAMES[c], i, out[(size_t)i * dim],
                          json_number_value(json_array_get(json_array_get(want, i), 0)));
            else
                cr_assert(dot / sqrt(na * nb) >= 0.9999, "%s input %d: cosine %.6f", ENC_NAMES[c], i,
                          dot / sqrt(na * nb));
        }
        for (int i = 0; rank && i < ENC_N_INPUTS; i++) /* the same order */
            for (int j = 0; j < ENC_N_INPUTS; j++) {
                double wi = json_number_value(json_array_get(json_array_get(want, i), 0));
                double wj = json_number_value(json_array_get(json_array_get(want, j), 0));
                if (wi > wj)
                    cr_assert_gt(out[(size_t)i * dim], out[(size_t)j * dim], "%s: inputs %d and %d change order",
                                 ENC_NAMES[c], i, j);
            }
        free(out);
        engine_destroy(e), model_destroy(m), unlink(path);
    }
    json_decref(refj);
}

/* engine_embed_tokens: every token's vector, inputs one after another (passes of 8 tokens here):
 * their mean is the mean pooling, the first the cls one, the last the last one. */
static void check_tokens_pool(model *m, engine *e, const embed_input *in, int n) {
    int E = model_info_get(m)->n_embd, total = 0;
    for (int i = 0; i < n; i++) total += in[i].n_tokens;
    float *tok = malloc(sizeof(float) * (size_t)total * E), *pooled = malloc(sizeof(float) * (size_t)n * E);
    attnd_err err = {0};
    cr_assert_eq(engine_embed_tokens(e, in, n, tok, &err), ATTND_OK, "%s", err.msg);
    model_pooling pools[3] = {POOL_MEAN, POOL_CLS, POOL_LAST};
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(engine_embed(e, in, n, pools[k], pooled, &err), ATTND_OK, "%s", err.msg);
        for (int i = 0, at = 0; i < n; at += in[i].n_tokens, i++)
            for (int c = 0; c < E; c++) {
                double want = 0;
                for (int t = 0; t < in[i].n_tokens; t++) want += tok[(size_t)(at + t) * E + c] / in[i].n_tokens;
                if (pools[k] == POOL_CLS) want = tok[(size_t)at * E + c];
                if (pools[k] == POOL_LAST) want = tok[(size_t)(at + in[i].n_tokens - 1) * E + c];
                cr_assert(fabs(pooled[(size_t)i * E + c] - want) < 1e-5, "%s input %d [%d]: %g vs %g",
                          model_pooling_name(pools[k]), i, c, pooled[(size_t)i * E + c], want);
            }
    }
    free(tok), free(pooled);
}

Test(embed, token_vectors_are_what_pooling_pools) {
    char path[256];
    model *m;
    engine *e;
    embed_input in[3] = {{ENC_B, 5, NULL}, {ENC_A + 1, 7, NULL}, {ENC_C, 1, NULL}};
    tiny_spec sp = enc_small();
    load_enc(&sp, path, sizeof(path), "tokens", &m, &e, 8);
    check_tokens_pool(m, e, in, 3);
    engine_destroy(e), model_destroy(m), unlink(path);
    static const int32_t d0[5] = {1, 7, 30, 2, 44}, d1[7] = {9, 17, 3, 25, 40, 41, 2}, d2[1] = {5};
    embed_input din[3] = {{d0, 5, NULL}, {d1, 7, NULL}, {d2, 1, NULL}};
    sp = qwen3_spec();
    load_tiny(&sp, path, sizeof(path), "dtokens", &m, &e, 8);
    check_tokens_pool(m, e, din, 3);
    engine_destroy(e), model_destroy(m), unlink(path);
}
