/*
 * test_server_sched_hybrid.c — the scheduler on a hybrid Gated DeltaNet model (qwen35): whatever
 * the scheduler does with a sequence's cache (batching, prompt reuse, session turns, forks for
 * n > 1), the tokens are those of llama.cpp (tests/data/reference-hybrid.json) and of the engine
 * run directly. A recurrent state cannot be cut back: a reuse that needs a truncation recomputes
 * from the newest state checkpoint at or before it (a prompt's end, a turn's end: kv.h), and a turn
 * that extends the cached history reuses all of it. (Apart from
 * test_server_scheduler.c: its fixtures are stories260K's.)
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "family_specs.h"
#include "sched_internal.h" /* the admission arithmetic, checked below */
#include "sched_rig.h"

static char path[256];
static model *m;
static tokenizer *tok;
static sess_store *store;
static sched *sch;
static server_settings cfg;

static void setup(void) {
    hy_spec hs = hybrid_small("qwen35");
    tiny_tmpname(path, sizeof(path), "q35sched");
    cr_assert_eq(hy_write(path, &hs), 0);
    sched_rig_open(path, 8, &m, &tok, &store, &cfg);
    cfg.ctx_size = 256;
    sch = sched_rig_start(m, tok, store, &cfg);
}

static void teardown(void) {
    sched_rig_close(&sch, &store, &tok, &m);
    unlink(path);
}

TestSuite(sched_hybrid, .init = setup, .fini = teardown, .timeout = 300);

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

/* Waits for j's end; its tokens into out (n_pieces of them). */
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

/* llama.cpp's first n greedy tokens after hybrid_prompt. */
static void llama_cpp_tokens(int32_t *want, int n) {
    json_error_t je;
    json_t *refj = json_load_file(ATTND_DATA_DIR "/reference-hybrid.json", 0, &je);
    cr_assert(refj, "%s", je.text);
    json_t *t = json_object_get(json_array_get(json_object_get(refj, "cases"), 0), "tokens");
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
    cr_assert_eq(kv_pool_create(&pool, m, 64 << 20, KV_F16, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_seq_create(&s, pool, &err), ATTND_OK);
    engine_gen g = {.n_predict = n_gen};
    int n_out;
    cr_assert_eq(engine_generate(e, s, ids, n, &g, out, &n_out, NULL, &err), ATTND_OK, "%s", err.msg);
    kv_seq_destroy(s);
    kv_pool_destroy(pool);
    engine_destroy(e);
}

Test(sched_hybrid, batched_and_repeated_prompts_give_llama_cpp_tokens) {
    enum { G = 12 };
    int32_t prompt[HYBRID_N_PROMPT], want[G], got[3][G];
    hybrid_prompt(prompt);
    llama_cpp_tokens(want, G);
    sched_job *a = job_of(prompt, HYBRID_N_PROMPT, G, NULL);
    cr_assert_eq(sched_submit(sch, a, NULL), ATTND_OK);
    finish(a, got[0]);
    /* the same prompt again (its cache needs a truncation: from the prompt's checkpoint) beside another one */
    sched_job *b = job_of(prompt, HYBRID_N_PROMPT, G, NULL), *c = job_of(prompt + 8, HYBRID_N_PROMPT - 8, G, NULL);
    cr_assert_eq(sched_submit(sch, b, NULL), ATTND_OK);
    cr_assert_eq(sched_submit(sch, c, NULL), ATTND_OK);
    sched_output ob = finish(b, got[1]);
    finish(c, got[2]);
    cr_assert_arr_eq(got[0], want, sizeof(want), "alone");
    cr_assert_arr_eq(got[1], want, sizeof(want), "repeated, batched beside another prompt");
    cr_assert_eq(ob.n_cached, HYBRID_N_PROMPT - SCHED_CKPT_BACK, "restored from the checkpoint before the prompt's end");
    int32_t other[G];
    direct_tokens(prompt + 8, HYBRID_N_PROMPT - 8, G, other);
    cr_assert_arr_eq(got[2], other, sizeof(other));
    sched_job_unref(a), sched_job_unref(b), sched_job_unref(c);
}

Test(sched_hybrid, a_session_turn_that_extends_the_history_reuses_its_state) {
    enum { G = 6 };
    int32_t prompt[HYBRID_N_PROMPT], t1[G], t2[G], want[G];
    hybrid_prompt(prompt);
    sess *se = sched_rig_session(store, "h");
    sched_job *a = job_of(prompt, 40, G, se);
    cr_assert_eq(sched_submit(sch, a, NULL), ATTND_OK);
    sched_output oa = finish(a, t1);
    /* turn 2 = turn 1's prompt, its completion, and more */
    int n2 = 40 + G + 20;
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

Test(sched_hybrid, greedy_forks_continue_as_the_parent_does) {
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

/* Admission of a job with forks reserves the prompt's whole blocks once and each choice's own part,
 * its recurrent state and checkpoints included: the state is not one of the prompt blocks the forks share. And a
 * budget too small for a full context says how many tokens would fit beside the state. */
Test(sched_hybrid, fork_admission_counts_the_shared_blocks_once_and_a_state_per_choice) {
    int32_t prompt[HYBRID_N_PROMPT];
    hybrid_prompt(prompt);
    sched_job *j = job_of(prompt, HYBRID_N_PROMPT, 16, NULL), *f = NULL;
    cr_assert_eq(sched_job_fork(&f, j, 3, NULL), ATTND_OK);
    const kv_pool *pool = sch->pool;
    size_t state = kv_pool_bytes_for(pool, 0), block = kv_pool_bytes_for(pool, 1) - state;
    cr_assert_eq(state, (size_t)(1 + cfg.kv_checkpoints) * kv_state_bytes(m), "a state and its checkpoints");
    cr_assert_gt(state, 0);
    /* each member's room for a backup of its state, for the yield of a step (kv_seq_keep_room) */
    size_t job = kv_pool_bytes_for(pool, HYBRID_N_PROMPT + 16 + 1) + kv_pool_steps_bytes(pool, 1), full = HYBRID_N_PROMPT / 64 * block;
    size_t want = kv_pool_bytes_for(pool, HYBRID_N_PROMPT) + 2 * (job - full);
    cr_expect_eq(sched_group_kv_bytes(sch, j), want, "%zu bytes reserved, %zu expected", sched_group_kv_bytes(sch, j),
                 want);
    attnd_err err;
    size_t budget = state + 2 * block; /* a state and 128 positions */
    cr_assert_eq(sched_check_budget(sch, budget, &err), ATTND_ERR_INVALID);
    cr_expect(strstr(err.msg, "ctx_size <= 128") != NULL, "%s", err.msg);
    sched_job_unref(f);
    sched_job_unref(j);
}

/* An edited last turn of a session goes back to the checkpoint of the previous turn's end, and a
 * regenerated one to its prompt's checkpoint: only the tokens after them are computed again
 * (n_cached counts the rest), and the tokens are the engine's from 0. Checkpoints off, the edit
 * recomputes everything. */
static void edit_the_last_turn(int *cached_edit, int *cached_regen) {
    enum { G = 6, P1 = 40, MORE = 20, N2 = P1 + G + MORE };
    int32_t prompt[HYBRID_N_PROMPT], t1[G], t2[G], want[G], p2[N2], e2[N2];
    hybrid_prompt(prompt);
    sess *se = sched_rig_session(store, "e");
    sched_job *a = job_of(prompt, P1, G, se);
    cr_assert_eq(sched_submit(sch, a, NULL), ATTND_OK);
    finish(a, t1);
    memcpy(p2, prompt, sizeof(int32_t) * P1); /* turn 2: turn 1, its reply, 20 more */
    memcpy(p2 + P1, t1, sizeof(t1));
    memcpy(p2 + P1 + G, prompt + P1, sizeof(int32_t) * MORE);
    memcpy(e2, p2, sizeof(p2)); /* turn 2 edited: the 20 are others */
    memcpy(e2 + P1 + G, prompt + HYBRID_N_PROMPT - MORE, sizeof(int32_t) * MORE);
    sched_job *b = NULL, *c = NULL, *d = NULL;
    const int32_t *turns[] = {p2, e2, e2};
    sched_job **jobs[] = {&b, &c, &d};
    sched_output o[3];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sess_acquire(store, NULL, "e", &se, NULL), ATTND_OK);
        *jobs[i] = job_of(turns[i], N2, G, se);
        cr_assert_eq(sched_submit(sch, *jobs[i], NULL), ATTND_OK);
        o[i] = finish(*jobs[i], t2);
    }
    cr_assert_geq(o[0].n_cached, P1 + G - 1, "turn 2 extends turn 1");
    direct_tokens(e2, N2, G, want);
    cr_assert_arr_eq(t2, want, sizeof(want), "the regenerated edit");
    *cached_edit = o[1].n_cached, *cached_regen = o[2].n_cached;
    sched_job_unref(a), sched_job_unref(b), sched_job_unref(c), sched_job_unref(d);
}

Test(sched_hybrid, an_edited_or_regenerated_turn_recomputes_from_its_checkpoint) {
    enum { G = 6, P1 = 40, N2 = P1 + G + 20 };
    int edit, regen;
    edit_the_last_turn(&edit, &regen);
    /* the checkpoint of turn 1's end (its KV: the prompt and the reply), where the edit begins */
    cr_expect_eq(edit, P1 + G, "edit: %d of %d cached (%d recomputed)", edit, N2, N2 - edit);
    cr_expect_eq(regen, N2 - SCHED_CKPT_BACK, "regenerate: %d of %d cached", regen, N2);
    if (getenv("ATTND_TEST_VERBOSE"))
        fprintf(stderr, "checkpoints on: edit recomputes %d of %d, regenerate %d\n", N2 - edit, N2, N2 - regen);
    sched_rig_close(&sch, &store, &tok, &m);
    unlink(path);
    hy_spec hs = hybrid_small("qwen35");
    cr_assert_eq(hy_write(path, &hs), 0);
    sched_rig_open(path, 8, &m, &tok, &store, &cfg);
    cfg.ctx_size = 256, cfg.kv_checkpoints = 0;
    sch = sched_rig_start(m, tok, store, &cfg);
    edit_the_last_turn(&edit, &regen);
    cr_expect_eq(edit, 0, "checkpoints off: the edit recomputes all");
    cr_expect_eq(regen, 0);
    if (getenv("ATTND_TEST_VERBOSE"))
        fprintf(stderr, "checkpoints off: edit recomputes %d of %d, regenerate %d\n", N2 - edit, N2, N2 - regen);
}

/* Speculative decoding on the hybrid model (prompt lookup, draft_max 4 every step): each verify
 * keeps its states and rejected drafts roll back exactly, so the greedy tokens are the engine's
 * plain ones. The prompt is a text, the model's own continuation of it, and the text again: the
 * lookup proposes that continuation after the second copy, which the model mostly follows. */
Test(sched_hybrid, speculative_tokens_are_the_plain_ones) {
    enum { P = 32, G = 24 };
    sched_rig_close(&sch, &store, &tok, &m);
    hy_spec hs = hybrid_small("qwen35");
    cr_assert_eq(hy_write(path, &hs), 0);
    sched_rig_open(path, 8, &m, &tok, &store, &cfg);
    cfg.ctx_size = 256, cfg.draft_adapt = false;
    sch = sched_rig_start(m, tok, store, &cfg);
    int32_t prompt[HYBRID_N_PROMPT], p[2 * P + G], got[G], want[G];
    hybrid_prompt(prompt);
    memcpy(p, prompt, sizeof(int32_t) * P);
    direct_tokens(p, P, G, p + P);
    memcpy(p + P + G, prompt, sizeof(int32_t) * P);
    sched_job *j = job_of(p, 2 * P + G, G, NULL);
    j->draft_max = 4;
    cr_assert_eq(sched_submit(sch, j, NULL), ATTND_OK);
    finish(j, got);
    direct_tokens(p, 2 * P + G, G, want);
    cr_assert_arr_eq(got, want, sizeof(want));
    sched_stats st;
    sched_get_stats(sch, &st);
    if (getenv("ATTND_TEST_VERBOSE"))
        fprintf(stderr, "drafted %llu accepted %llu\n", (unsigned long long)st.spec_drafted,
                (unsigned long long)st.spec_accepted);
    cr_expect_gt(st.spec_drafted, st.spec_accepted, "drafts were rejected");
    cr_expect_gt(st.spec_accepted, 0, "drafts were kept");
    sched_job_unref(j);
}

/* A file with an MTP block drafts with it by default (mtp, mtp_draft_max while draft_max is 0),
 * with the tokens of the engine run directly; mtp = false drafts nothing. */
Test(sched_hybrid, an_mtp_block_drafts_by_default_with_the_plain_tokens) {
    enum { P = 24, G = 24 };
    for (int on = 1; on >= 0; on--) {
        sched_rig_close(&sch, &store, &tok, &m);
        hy_spec hs = hybrid_small("qwen35");
        hs.n_mtp = 1;
        cr_assert_eq(hy_write(path, &hs), 0);
        sched_rig_open(path, 8, &m, &tok, &store, &cfg);
        cr_assert(cfg.mtp && cfg.mtp_draft_max == 3 && cfg.draft_max == 0, "the defaults");
        cfg.ctx_size = 256, cfg.draft_adapt = false, cfg.mtp = on;
        sch = sched_rig_start(m, tok, store, &cfg);
        int32_t prompt[HYBRID_N_PROMPT], got[G], want[G];
        hybrid_prompt(prompt);
        direct_tokens(prompt, P, G, want);
        sched_job *j = job_of(prompt, P, G, NULL);
        j->draft_max = -1; /* the server's */
        cr_assert_eq(sched_submit(sch, j, NULL), ATTND_OK);
        finish(j, got);
        cr_assert_arr_eq(got, want, sizeof(want));
        sched_stats st;
        sched_get_stats(sch, &st);
        if (on) cr_expect_gt(st.spec_drafted, 0, "the MTP block drafted");
        else cr_expect_eq(st.spec_drafted, 0, "mtp = false: no drafts");
        sched_job_unref(j);
    }
}
