/*
 * test_server_sched_mla.c — the scheduler on a latent-attention model (deepseek2, the V3-class
 * small model of family_specs.h): whatever the scheduler does with a sequence's latent cache
 * (batching beside another prompt, prompt reuse, a session turn extending its history, forks for
 * n > 1), the tokens are those of llama.cpp (tests/data/reference-mla.json) and of the engine run
 * directly. (Apart from test_server_scheduler.c: its fixtures are stories260K's.)
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "family_specs.h"
#include "sched_rig.h"

#define MODEL_CASE 2 /* "deepseek3" in reference-mla.json and MLA_NAMES */

static char path[256];
static model *m;
static tokenizer *tok;
static sess_store *store;
static sched *sch;
static server_settings cfg;

static void setup(void) {
    ml_spec ms = mla_small(MLA_NAMES[MODEL_CASE]);
    tiny_tmpname(path, sizeof(path), "mlasched");
    cr_assert_eq(ml_write(path, &ms), 0);
    sched_rig_open(path, 8, &m, &tok, &store, &cfg);
    cfg.ctx_size = 256;
    cfg.kv_f32 = true; /* as llama.cpp's reference was made */
    sch = sched_rig_start(m, tok, store, &cfg);
}

static void teardown(void) {
    sched_rig_close(&sch, &store, &tok, &m);
    unlink(path);
}

TestSuite(sched_mla, .init = setup, .fini = teardown, .timeout = 300);

/* A greedy job of n ids (copied), end-of-sequence banned so it runs max_tokens. */
static sched_job *job_of(const int32_t *ids, int n, int max_tokens, sess *se) {
    sched_job_spec spec = {.n_prompt = n, .max_tokens = max_tokens, .top_logprobs = -1, .se = se};
    spec.prompt = malloc(sizeof(int32_t) * (size_t)n);
    memcpy(spec.prompt, ids, sizeof(int32_t) * (size_t)n);
    sampler_params_default(&spec.sp);
    spec.sp.temperature = 0;
    spec.bias = malloc(sizeof(logit_bias));
    spec.bias[0] = (logit_bias){tok_eos(tok), -INFINITY};
    spec.n_bias = 1;
    sched_job *j;
    cr_assert_eq(sched_job_create(&j, &spec, NULL), ATTND_OK);
    return j;
}

/* Waits for j's end; its tokens into out. */
static sched_output finish(sched_job *j, int32_t *out) {
    sched_update u = {0};
    do {
        sched_job_wait(j, 1000, &u);
    } while (!u.done);
    sched_output o;
    sched_job_output(j, &o);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    for (int i = 0; i < o.n_pieces; i++) out[i] = o.pieces[i].id;
    return o;
}

/* llama.cpp's first n greedy tokens after hybrid_prompt (none of them the end of sequence). */
static void llama_cpp_tokens(int32_t *want, int n) {
    json_error_t je;
    json_t *refj = json_load_file(ATTND_DATA_DIR "/reference-mla.json", 0, &je);
    cr_assert(refj, "%s", je.text);
    json_t *c = json_array_get(json_object_get(refj, "cases"), MODEL_CASE);
    cr_assert_str_eq(json_string_value(json_object_get(c, "family")), MLA_NAMES[MODEL_CASE]);
    json_t *t = json_object_get(c, "tokens");
    for (int i = 0; i < n; i++) want[i] = (int32_t)json_integer_value(json_array_get(t, (size_t)i));
    json_decref(refj);
}

/* The engine's own greedy tokens for ids, on a fresh sequence of another pool. */
static void direct_tokens(const int32_t *ids, int n, int n_gen, int32_t *out) {
    engine *e;
    kv_pool *pool;
    kv_seq *s;
    attnd_err err;
    cr_assert_eq(engine_create(&e, m, 64, 1, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_pool_create(&pool, m, 64 << 20, KV_F32, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_seq_create(&s, pool, &err), ATTND_OK);
    engine_gen g = {.n_predict = n_gen};
    int n_out;
    cr_assert_eq(engine_generate(e, s, ids, n, &g, out, &n_out, NULL, &err), ATTND_OK, "%s", err.msg);
    kv_seq_destroy(s);
    kv_pool_destroy(pool);
    engine_destroy(e);
}

Test(sched_mla, batched_and_repeated_prompts_give_llama_cpp_tokens) {
    enum { G = 12 };
    int32_t prompt[HYBRID_N_PROMPT], want[G], got[3][G];
    hybrid_prompt(prompt);
    llama_cpp_tokens(want, G);
    sched_job *a = job_of(prompt, HYBRID_N_PROMPT, G, NULL);
    cr_assert_eq(sched_submit(sch, a, NULL), ATTND_OK);
    finish(a, got[0]);
    /* the same prompt again (its latent rows reused from the prompt cache) beside another one */
    sched_job *b = job_of(prompt, HYBRID_N_PROMPT, G, NULL), *c = job_of(prompt + 8, HYBRID_N_PROMPT - 8, G, NULL);
    cr_assert_eq(sched_submit(sch, b, NULL), ATTND_OK);
    cr_assert_eq(sched_submit(sch, c, NULL), ATTND_OK);
    sched_output ob = finish(b, got[1]);
    finish(c, got[2]);
    cr_assert_arr_eq(got[0], want, sizeof(want), "alone");
    cr_assert_arr_eq(got[1], want, sizeof(want), "repeated, batched beside another prompt");
    cr_assert_geq(ob.n_cached, 64, "the repeated prompt reused its cache (%d cached)", ob.n_cached);
    int32_t other[G];
    direct_tokens(prompt + 8, HYBRID_N_PROMPT - 8, G, other);
    cr_assert_arr_eq(got[2], other, sizeof(other));
    sched_job_unref(a), sched_job_unref(b), sched_job_unref(c);
}

Test(sched_mla, a_session_turn_that_extends_the_history_reuses_its_cache) {
    enum { G = 6 };
    int32_t prompt[HYBRID_N_PROMPT], t1[G], t2[G], want[G];
    hybrid_prompt(prompt);
    sess *se = sched_rig_session(store, "h");
    sched_job *a = job_of(prompt, 40, G, se);
    cr_assert_eq(sched_submit(sch, a, NULL), ATTND_OK);
    sched_output oa = finish(a, t1);
    int n2 = 40 + G + 20; /* turn 2 = turn 1's prompt, its completion, and more */
    int32_t p2[40 + G + 20];
    memcpy(p2, prompt, sizeof(int32_t) * 40);
    memcpy(p2 + 40, t1, sizeof(t1));
    memcpy(p2 + 40 + G, prompt + 40, sizeof(int32_t) * 20);
    cr_assert_eq(sess_acquire(store, NULL, "h", &se, NULL), ATTND_OK);
    sched_job *b = job_of(p2, n2, G, se);
    cr_assert_eq(sched_submit(sch, b, NULL), ATTND_OK);
    sched_output ob = finish(b, t2);
    cr_assert_geq(ob.n_cached, oa.n_prompt + oa.n_generated - 1, "cached %d of turn 1's %d", ob.n_cached,
                  oa.n_prompt + oa.n_generated);
    direct_tokens(p2, n2, G, want);
    cr_assert_arr_eq(t2, want, sizeof(want));
    sched_job_unref(a), sched_job_unref(b);
}

Test(sched_mla, greedy_forks_continue_as_the_parent_does) {
    enum { G = 8 };
    int32_t prompt[HYBRID_N_PROMPT], want[G], got[3][G];
    hybrid_prompt(prompt);
    llama_cpp_tokens(want, G);
    sched_job *j[3];
    j[0] = job_of(prompt, HYBRID_N_PROMPT, G, NULL);
    for (int i = 1; i < 3; i++) cr_assert_eq(sched_job_fork(&j[i], j[0], 7 + (uint64_t)i, NULL), ATTND_OK);
    cr_assert_eq(sched_submit(sch, j[0], NULL), ATTND_OK);
    for (int i = 0; i < 3; i++) {
        finish(j[i], got[i]);
        cr_assert_arr_eq(got[i], want, sizeof(want), "choice %d", i);
    }
    for (int i = 0; i < 3; i++) sched_job_unref(j[i]);
}
