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

/* A greedy job for the prompt ids (stolen), EOS banned so it always runs max_tokens. */
static sched_job *job_for_ids(int32_t *ids, size_t n, int max_tokens, sess *se) {
    sched_job_spec spec = {.prompt = ids, .n_prompt = (int)n, .max_tokens = max_tokens, .top_logprobs = -1, .se = se};
    sampler_params_default(&spec.sp);
    spec.sp.temperature = 0;
    spec.bias = malloc(sizeof(logit_bias));
    spec.bias[0] = (logit_bias){tok_eos(tok), -INFINITY};
    spec.n_bias = 1;
    sched_job *j;
    cr_assert_eq(sched_job_create(&j, &spec, NULL), ATTND_OK);
    cr_assert_null(spec.prompt, "the prompt was taken over");
    cr_assert_null(spec.bias, "the bias was taken over");
    return j;
}

static sched_job *job_for(const char *text, int max_tokens) {
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(tok, text, strlen(text), true, false, &ids, &n, NULL), ATTND_OK);
    return job_for_ids(ids, n, max_tokens, NULL);
}

/* Waits for the job's end, reading its updates as the HTTP side does; returns its output and
 * checks that the updates added up to the final text. */
static sched_output wait_done(sched_job *j) {
    char *text = NULL;
    size_t len = 0;
    sched_update u = {0};
    int pieces = 0;
    do {
        if (!sched_job_wait(j, 1000, &u)) continue;
        cr_assert_eq(u.from, pieces, "updates continue where the last one stopped");
        pieces = u.to;
        text = realloc(text, len + u.text_len + 1);
        memcpy(text + len, u.text, u.text_len);
        len += u.text_len;
    } while (!u.done);
    sched_output o;
    sched_job_output(j, &o);
    cr_assert(o.done);
    cr_assert_eq(pieces, o.n_pieces);
    cr_assert_eq(len, o.text_len);
    cr_assert(len == 0 || !memcmp(text, o.text, len), "the updates spell the final text");
    free(text);
    return o;
}

static void tokens_of(const sched_output *o, int32_t *out) {
    for (int i = 0; i < o->n_pieces; i++) out[i] = o->pieces[i].id;
}

Test(scheduler, a_job_generates_max_tokens_and_finishes_with_length) {
    if (model_missing()) return;
    start();
    sched_job *j = job_for("Once upon a time", 20);
    cr_assert_eq(sched_submit(sch, j, NULL), ATTND_OK);
    sched_output o = wait_done(j);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    cr_assert_str_eq(o.finish_reason, "length");
    cr_assert_eq(o.n_pieces, 20);
    cr_assert_eq(o.n_generated, 20);
    cr_assert_gt(o.text_len, 0);
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
        sched_output o = wait_done(j);
        tokens_of(&o, alone[i]);
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
        sched_output o = wait_done(js[i]);
        cr_assert_eq(o.n_pieces, 24);
        tokens_of(&o, together[i]);
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
    sched_output oa = wait_done(a);
    sched_submit(sch, b, NULL);
    sched_output ob = wait_done(b);
    cr_assert_eq(oa.n_cached, 0);
    cr_assert_eq(ob.n_cached, ob.n_prompt - 1, "all but the last prompt token are reused");
    cr_assert_arr_eq(oa.pieces, ob.pieces, sizeof(token_logprob) * 4);
    sched_job_unref(a);
    sched_job_unref(b);
}

Test(scheduler, a_session_turn_caches_the_whole_conversation) {
    if (model_missing()) return;
    start();
    char id[SESS_ID_MAX + 1];
    cr_assert_eq(sess_create(store, NULL, "s", id, NULL), ATTND_OK);
    sess *se;
    cr_assert_eq(sess_acquire(store, NULL, "s", &se, NULL), ATTND_OK);
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(tok, "Once upon a time", 16, true, false, &ids, &n, NULL), ATTND_OK);
    sched_job *a = job_for_ids(ids, n, 6, se);
    sched_submit(sch, a, NULL);
    sched_output oa = wait_done(a);
    /* turn 2 = turn 1's tokens + its completion + more */
    int n2 = oa.n_prompt + oa.n_pieces + 3;
    int32_t *p2 = malloc((size_t)n2 * sizeof(int32_t));
    memcpy(p2, oa.prompt, oa.n_prompt * sizeof(int32_t));
    for (int i = 0; i < oa.n_pieces; i++) p2[oa.n_prompt + i] = oa.pieces[i].id;
    for (int i = 0; i < 3; i++) p2[n2 - 3 + i] = 300 + i;
    cr_assert_eq(sess_acquire(store, NULL, "s", &se, NULL), ATTND_OK);
    sched_job *b = job_for_ids(p2, (size_t)n2, 4, se);
    sched_submit(sch, b, NULL);
    sched_output ob = wait_done(b);
    cr_assert_eq(ob.status, ATTND_OK);
    cr_assert_geq(ob.n_cached, oa.n_prompt + oa.n_generated, "cached %d, turn 1 total %d", ob.n_cached,
                  oa.n_prompt + oa.n_generated);
    sched_job_unref(a);
    sched_job_unref(b);
}

Test(scheduler, cancelling_frees_the_slot_within_a_step) {
    if (model_missing()) return;
    start();
    sched_job *j = job_for("Once upon a time", 400);
    sched_submit(sch, j, NULL);
    sched_update u = {0};
    while (u.to < 2 && !u.done) sched_job_wait(j, 1000, &u);
    cr_assert_not(sched_job_cancel(j), "not cancelled before");
    cr_assert(sched_job_cancel(j), "cancelled now");
    while (!u.done) sched_job_wait(j, 1000, &u);
    sched_output o;
    sched_job_output(j, &o);
    cr_assert_neq(o.status, ATTND_OK);
    cr_assert_lt(o.n_pieces, 400);
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
        sched_output o = wait_done(j);
        done += o.status == ATTND_OK && o.n_pieces == 200;
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
