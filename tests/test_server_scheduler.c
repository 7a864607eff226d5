/*
 * test_server_scheduler.c — the scheduler (server/scheduler.c) on the stories260K fixture,
 * without HTTP: jobs run to completion, continuous batching gives every job the same tokens as
 * running it alone, prefix reuse is reported, cancellation frees the slot, a full queue is
 * refused, the KV budget evicts idle caches, and the watchdog hook ticks.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "attnd/engine.h"
#include "attnd/tokenizer.h"
#include "scheduler.h"
#include "sess.h"

#define MODEL ATTND_DATA_DIR "/models/stories260K.gguf"

static model *m;
static tokenizer *tok;
static sess_store *store;
static sched *sch;
static server_settings cfg;
static atomic_int ticks;

static void on_tick(void *u) { (void)u; atomic_fetch_add(&ticks, 1); }

static void setup(void) {
    if (access(MODEL, R_OK) != 0) return;
    attnd_err err;
    cr_assert_eq(model_load(&m, MODEL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&tok, model_gguf(m), &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_store_create(&store, NULL, "t", 16, &err), ATTND_OK);
    server_settings_default(&cfg);
    cfg.threads = 1;
    cfg.max_parallel = 4;
    cfg.queue_limit = 4;
    cfg.watchdog_interval_ms = 40;
    cfg.hooks.on_watchdog = on_tick;
}

static void start(void) {
    attnd_err err;
    cr_assert_eq(sched_create(&sch, m, tok, store, &cfg, &err), ATTND_OK, "%s", err.msg);
}

static void teardown(void) {
    sched_destroy(sch);
    sess_store_destroy(store);
    tok_destroy(tok);
    model_destroy(m);
    sch = NULL, store = NULL, tok = NULL, m = NULL;
}

static bool model_missing(void) {
    cr_assert(m, "%s did not load", MODEL);
    return !m;
}

TestSuite(scheduler, .init = setup, .fini = teardown, .timeout = 120);

/* A greedy job for text, EOS banned so it always runs max_tokens. */
static sched_job *job_for(const char *text, int max_tokens) {
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(tok, text, strlen(text), true, false, &ids, &n, NULL), ATTND_OK);
    sched_job *j;
    cr_assert_eq(sched_job_create(&j, (int)n, max_tokens, -1, false, NULL), ATTND_OK);
    memcpy(j->prompt, ids, n * sizeof(int32_t));
    free(ids);
    sampler_params_default(&j->sp);
    j->sp.temperature = 0;
    j->bias = malloc(sizeof(logit_bias));
    j->bias[0] = (logit_bias){tok_eos(tok), -INFINITY};
    j->sp.bias = j->bias;
    j->sp.n_bias = 1;
    return j;
}

static void wait_done(sched_job *j) {
    pthread_mutex_lock(&j->mu);
    while (!j->done) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

static void tokens_of(sched_job *j, int32_t *out) {
    for (int i = 0; i < j->n_pieces; i++) out[i] = j->pieces[i].token;
}

Test(scheduler, a_job_generates_max_tokens_and_finishes_with_length) {
    if (model_missing()) return;
    start();
    sched_job *j = job_for("Once upon a time", 20);
    cr_assert_eq(sched_submit(sch, j, NULL), ATTND_OK);
    wait_done(j);
    cr_assert_eq(j->status, ATTND_OK, "%s", j->errmsg);
    cr_assert_str_eq(j->finish_reason, "length");
    cr_assert_eq(j->n_pieces, 20);
    cr_assert_eq(j->n_generated, 20);
    cr_assert_gt(j->text_len, 0);
    sched_job_unref(j);
}

Test(scheduler, batched_jobs_get_the_same_tokens_as_alone) {
    if (model_missing()) return;
    start();
    const char *texts[4] = {"Once upon a time", "The cat", "A", "In a small town there lived"};
    int32_t alone[4][24], together[4][24];
    for (int i = 0; i < 4; i++) {
        sched_job *j = job_for(texts[i], 24);
        sched_submit(sch, j, NULL);
        wait_done(j);
        tokens_of(j, alone[i]);
        sched_job_unref(j);
    }
    sched_stats before;
    sched_get_stats(sch, &before);
    sched_job *js[4];
    for (int i = 0; i < 4; i++) {
        js[i] = job_for(texts[i], 24);
        cr_assert_eq(sched_submit(sch, js[i], NULL), ATTND_OK);
    }
    for (int i = 0; i < 4; i++) {
        wait_done(js[i]);
        cr_assert_eq(js[i]->n_pieces, 24);
        tokens_of(js[i], together[i]);
        cr_assert_arr_eq(alone[i], together[i], sizeof(alone[i]), "job %d differs when batched", i);
        sched_job_unref(js[i]);
    }
    sched_stats st;
    sched_get_stats(sch, &st);
    /* one after another would take 4 x 24 steps; batched, the four share their steps */
    uint64_t steps = st.steps - before.steps;
    cr_assert_lt(steps, 2 * 24, "continuous batching: %llu steps for 4 x 24 tokens", (unsigned long long)steps);
}

Test(scheduler, a_repeated_prompt_reuses_the_cached_prefix) {
    if (model_missing()) return;
    start();
    sched_job *a = job_for("Once upon a time there was", 4), *b = job_for("Once upon a time there was", 4);
    sched_submit(sch, a, NULL);
    wait_done(a);
    sched_submit(sch, b, NULL);
    wait_done(b);
    cr_assert_eq(a->n_cached, 0);
    cr_assert_eq(b->n_cached, b->n_prompt - 1, "all but the last prompt token are reused");
    cr_assert_arr_eq(a->pieces, b->pieces, sizeof(sched_piece) * 4);
    sched_job_unref(a);
    sched_job_unref(b);
}

Test(scheduler, a_session_turn_caches_the_whole_conversation) {
    if (model_missing()) return;
    start();
    char id[SESS_ID_MAX + 1];
    cr_assert_eq(sess_create(store, "s", id, NULL), ATTND_OK);
    sess *se;
    cr_assert_eq(sess_acquire(store, "s", &se, NULL), ATTND_OK);
    sched_job *a = job_for("Once upon a time", 6);
    a->se = se;
    sched_submit(sch, a, NULL);
    wait_done(a);
    /* turn 2 = turn 1's tokens + its completion + more */
    int n2 = a->n_prompt + a->n_pieces + 3;
    sched_job *b;
    cr_assert_eq(sched_job_create(&b, n2, 4, -1, false, NULL), ATTND_OK);
    memcpy(b->prompt, a->prompt, a->n_prompt * sizeof(int32_t));
    for (int i = 0; i < a->n_pieces; i++) b->prompt[a->n_prompt + i] = a->pieces[i].token;
    for (int i = 0; i < 3; i++) b->prompt[n2 - 3 + i] = 300 + i;
    sampler_params_default(&b->sp);
    b->sp.temperature = 0;
    cr_assert_eq(sess_acquire(store, "s", &se, NULL), ATTND_OK);
    b->se = se;
    sched_submit(sch, b, NULL);
    wait_done(b);
    cr_assert_eq(b->status, ATTND_OK);
    cr_assert_geq(b->n_cached, a->n_prompt + a->n_generated, "cached %d, turn 1 total %d", b->n_cached,
                  a->n_prompt + a->n_generated);
    sched_job_unref(a);
    sched_job_unref(b);
}

Test(scheduler, cancelling_frees_the_slot_within_a_step) {
    if (model_missing()) return;
    start();
    sched_job *j = job_for("Once upon a time", 400);
    sched_submit(sch, j, NULL);
    pthread_mutex_lock(&j->mu);
    while (j->n_pieces < 2) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    atomic_store(&j->cancel, true);
    wait_done(j);
    cr_assert_neq(j->status, ATTND_OK);
    cr_assert_lt(j->n_pieces, 400);
    cr_assert(sched_wait_idle(sch, 5000));
    sched_stats st;
    sched_get_stats(sch, &st);
    cr_assert_eq(st.active, 0);
    sched_job_unref(j);
}

Test(scheduler, a_full_queue_is_refused) {
    if (model_missing()) return;
    cfg.max_parallel = 1;
    cfg.queue_limit = 1;
    start();
    sched_job *js[6];
    int refused = 0;
    for (int i = 0; i < 6; i++) {
        js[i] = job_for("Once upon a time", 200);
        if (sched_submit(sch, js[i], NULL) == ATTND_ERR_BUSY) refused++;
    }
    cr_assert_geq(refused, 3, "one runs, one waits, the rest are refused (%d refused)", refused);
    sched_cancel_all(sch);
    cr_assert(sched_wait_idle(sch, 10000));
    for (int i = 0; i < 6; i++) sched_job_unref(js[i]);
}

Test(scheduler, the_kv_budget_evicts_idle_caches) {
    if (model_missing()) return;
    cfg.kv_budget_mb = 1; /* stories260K: 640 bytes a token at f16, so ~1600 tokens */
    start();
    int done = 0;
    for (int i = 0; i < 12; i++) {
        char text[64];
        snprintf(text, sizeof(text), "%c%c story number %d", 'A' + i, 'a' + i, i);
        sched_job *j = job_for(text, 200);
        sched_submit(sch, j, NULL);
        wait_done(j);
        done += j->status == ATTND_OK && j->n_pieces == 200;
        sched_job_unref(j);
    }
    cr_assert_eq(done, 12, "every job completes although their caches together exceed the budget");
    sched_stats st;
    sched_get_stats(sch, &st);
    cr_assert_leq(st.kv_used, st.kv_budget);
    cr_assert_gt(st.evictions, 0, "the caches did not fit together, so some were evicted");
}

Test(scheduler, the_watchdog_hook_ticks_while_idle) {
    if (model_missing()) return;
    start();
    usleep(300 * 1000);
    cr_assert_geq(atomic_load(&ticks), 3, "ticks: %d", atomic_load(&ticks));
}
