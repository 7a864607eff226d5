/*
 * test_server_scheduler.c — the scheduler (server/runtime/scheduler.c) on the stories260K fixture (and
 * the repository's default model where a KV budget must be sized to its context),
 * without HTTP: jobs run to completion, continuous batching gives every job the same tokens as
 * running it alone, prefix reuse is reported, cancellation frees the slot, a full queue is
 * refused, the KV budget evicts idle caches, admission waits for KV instead of failing, a budget
 * below one context is refused, a long prompt is prefilled in chunks beside a decoding stream,
 * and the watchdog hook ticks.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "sched_internal.h" /* the pacing functions, tested on their own below */
#include "sched_rig.h"

#define MODEL ATTND_DATA_DIR "/models/stories260K.gguf"
#define SOTU ATTND_SOURCE_DIR "/models/attnd-sotu.gguf" /* 6 KiB of KV a token; capped at 256 tokens below */

static model *m;
static tokenizer *tok;
static sess_store *store;
static sched *sch;
static server_settings cfg;
static atomic_int ticks;

static void on_tick(void *u) { (void)u; atomic_fetch_add(&ticks, 1); }

static void setup(void) {
    if (access(MODEL, R_OK) != 0) return;
    sched_rig_open(MODEL, 4, &m, &tok, &store, &cfg);
    cfg.watchdog_interval_ms = 40;
    cfg.hooks.on_watchdog = on_tick;
}

static void start(void) { sch = sched_rig_start(m, tok, store, &cfg); }

static void teardown(void) { sched_rig_close(&sch, &store, &tok, &m); }

static bool model_missing(void) {
    cr_assert(m, "%s did not load", MODEL);
    return !m;
}

TestSuite(scheduler, .init = setup, .fini = teardown, .timeout = 120);

/* A greedy job for the prompt ids (stolen), EOS banned so it always runs max_tokens. */
/* Swaps the fixture for the default model capped at a 256-token context (ctx_size), whose 1.5 MiB
 * lets MiB-sized budgets hold exactly one request (stories260K's 320 KiB cannot). */
static void use_sotu(void) {
    cfg.ctx_size = 256; /* the model has 512; the budgets below are sized for 256 */
    tok_destroy(tok);
    model_destroy(m);
    sched_rig_load(SOTU, &m, &tok);
}

static const char *cur_tenant; /* the tenant of the jobs job_for_ids makes (NULL = none) */

/* A greedy job of the prompt ids (taken over), end-of-sequence banned so it runs max_tokens. */
static sched_job *job_make(int32_t *ids, size_t n, int max_tokens, sess *se, const char *tenant) {
    sched_job_spec spec = {.prompt = ids, .n_prompt = (int)n, .max_tokens = max_tokens, .top_logprobs = -1, .se = se,
                           .tenant = tenant};
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

static sched_job *job_for_ids(int32_t *ids, size_t n, int max_tokens, sess *se) {
    return job_make(ids, n, max_tokens, se, cur_tenant);
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
    sess *se = sched_rig_session(store, "s");
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
    double end = attnd_now_s() + 30; /* the ticks' own pace; a loaded machine gets time, not a failure */
    while (atomic_load(&ticks) < 3 && attnd_now_s() < end) usleep(2000);
    cr_assert_geq(atomic_load(&ticks), 3, "ticks: %d", atomic_load(&ticks));
}

Test(scheduler, admission_waits_for_kv_instead_of_failing) {
    if (model_missing()) return;
    use_sotu();
    cfg.kv_budget_mb = 2; /* 341 tokens: each job below reserves 4 of its 5 blocks */
    cfg.queue_limit = 8;
    start();
    sched_job *js[6];
    for (int i = 0; i < 6; i++) {
        char text[32];
        snprintf(text, sizeof(text), "Job %d of six", i);
        js[i] = job_for(text, 200);
        cr_assert_eq(sched_submit(sch, js[i], NULL), ATTND_OK);
    }
    int most_active = 0;
    while (!sched_wait_idle(sch, 2)) {
        sched_stats st;
        sched_get_stats(sch, &st);
        if (st.active > most_active) most_active = st.active;
        cr_assert_leq(st.kv_reserved, st.kv_budget);
    }
    for (int i = 0; i < 6; i++) {
        sched_output o = wait_done(js[i]);
        cr_assert_eq(o.status, ATTND_OK, "job %d: %s", i, o.errmsg);
        cr_assert_eq(o.n_pieces, 200, "job %d ran to its end", i);
        sched_job_unref(js[i]);
    }
    cr_assert_eq(most_active, 1, "one job's reservation fills the budget, so they took turns");
    sched_stats st;
    sched_get_stats(sch, &st);
    cr_assert_eq(st.kv_reserved, 0, "every reservation was given back");
}

Test(scheduler, a_budget_below_one_context_is_refused_at_creation) {
    if (model_missing()) return;
    use_sotu();
    cfg.kv_budget_mb = 1; /* attnd-sotu's 256-token context needs 1.5 MiB */
    attnd_err err;
    cr_assert_eq(sched_create(&sch, m, tok, store, &cfg, &err), ATTND_ERR_INVALID);
    cr_assert_null(sch);
    cr_assert(strstr(err.msg, "kv_budget_mb >= 2"), "%s", err.msg);
    cr_assert(strstr(err.msg, "ctx_size <= 128"), "%s", err.msg);
}

Test(scheduler, a_long_prompt_is_prefilled_in_chunks_beside_a_decoding_stream) {
    if (model_missing()) return;
    use_sotu();
    cfg.prefill_budget_ms = 1; /* the smallest chunks: the cap's floor */
    start();
    sched_job *d = job_for("The nation", 240);
    cr_assert_eq(sched_submit(sch, d, NULL), ATTND_OK);
    sched_update u = {0};
    while (u.to < 3) sched_job_wait(d, 1000, &u);
    int32_t *ids = malloc(200 * sizeof(int32_t));
    for (int i = 0; i < 200; i++) ids[i] = i ? 300 + i : tok_bos(tok);
    sched_output before;
    sched_job_output(d, &before);
    sched_job *p = job_for_ids(ids, 200, 2, NULL);
    cr_assert_eq(sched_submit(sch, p, NULL), ATTND_OK);
    sched_update pu = {0};
    while (pu.to < 1 && !pu.done) sched_job_wait(p, 1000, &pu);
    sched_output during;
    sched_job_output(d, &during);
    cr_assert_lt(during.n_pieces, 240, "the stream was still running");
    /* 200 prompt tokens in chunks of a few tokens take many steps, each with a decode token */
    cr_assert_geq(during.n_pieces - before.n_pieces, 3, "the stream got %d tokens while the prompt was read",
                  during.n_pieces - before.n_pieces);
    while (!pu.done) sched_job_wait(p, 1000, &pu); /* both were read already: just wait */
    while (!u.done) sched_job_wait(d, 1000, &u);
    sched_output po, dout;
    sched_job_output(p, &po);
    sched_job_output(d, &dout);
    cr_assert_eq(po.status, ATTND_OK);
    cr_assert_eq(dout.n_pieces, 240);
    sched_job_unref(p);
    sched_job_unref(d);
}

/*
 * Prefill pacing on its own, against a simulated machine: a step costs 20 ms of decode plus, per
 * prompt token, 1 ms + 1 ms per 1000 tokens already read (attention over the prefix: steeper
 * than on the TinyLlama shape), and on a budget of 100 ms the chunks must shrink as the prompt
 * grows, so every step after the first few stays within the budget while the prompt still uses
 * most of it.
 */
static double sim_step_ms(int pos, int chunk) {
    double ms = 20;
    for (int i = 0; i < chunk; i++) ms += 1.0 + (pos + i) / 1000.0;
    return ms;
}

Test(sched_pacing, chunks_follow_the_growing_cost_of_a_long_prompt) {
    sched s = {.max_batch = 512, .budget_ms = 100};
    sched_learn_costs(&s, 20, 2, 0, 0); /* a decode-only step: 20 ms */
    cr_assert_eq(sched_prefill_cap(&s, 0, 1, 0), 512, "a prompt alone goes in max_batch chunks");
    sched_learn_costs(&s, 900, 0, 512, 256); /* alone, it teaches nothing about pacing */
    int pos = 0, steps = 0, first_cap = 0, last_cap = 0;
    while (pos < 3000) {
        int cap = sched_prefill_cap(&s, 2, 1, pos);
        double ms = sim_step_ms(pos, cap);
        if (steps == 5) first_cap = cap;
        if (steps >= 5) {
            cr_assert_leq(ms, 100 * 1.05, "step %d at position %d: %d tokens took %.1f ms", steps, pos, cap, ms);
            cr_assert_geq(ms, 100 * 0.85, "step %d at position %d: %d tokens used only %.1f ms", steps, pos, cap, ms);
        }
        sched_learn_costs(&s, ms, 2, cap, pos + (cap - 1) / 2.0);
        pos += cap;
        last_cap = cap;
        steps++;
    }
    cr_assert_lt(last_cap, first_cap, "the chunks shrink as attention over the prefix grows (%d -> %d)", first_cap,
                 last_cap);
}

/* Several tenants decoding: a step holds as many rows as keep it within twice the lightest
 * tenant's step alone, by the line through the learned step costs. Rows that cost much (a big
 * vocabulary's output rows on a small model) are rationed; rows that cost little all go in. */
Test(sched_pacing, decode_rows_beside_a_light_tenant_keep_its_step_within_twice_its_cost) {
    sched s = {.max_batch = 512};
    cr_assert_eq(sched_decode_rows(&s, 1, 17), 17, "nothing learned: every row (and its cost is learned)");
    sched_learn_costs(&s, 2, 1, 0, 0); /* 1 row: 2 ms */
    cr_assert_eq(sched_decode_rows(&s, 1, 17), 17, "one size learned: still every row");
    sched_learn_costs(&s, 34, 17, 0, 0); /* 17 rows: 34 ms: 2 ms a row, nothing shared */
    cr_assert_eq(sched_decode_rows(&s, 1, 17), 2, "twice one row's cost holds two rows");
    cr_assert_eq(sched_decode_rows(&s, 4, 17), 8);
    sched t = {.max_batch = 512};
    sched_learn_costs(&t, 20, 1, 0, 0);
    sched_learn_costs(&t, 21.6, 17, 0, 0); /* 0.1 ms a row beyond 19.9 ms shared */
    cr_assert_eq(sched_decode_rows(&t, 1, 17), 17, "cheap rows all go in");
}

Test(sched_pacing, the_auto_budget_is_a_few_decode_steps_and_the_prompt_always_moves) {
    sched s = {.max_batch = 512};
    sched_learn_costs(&s, 30, 2, 0, 0);
    cr_assert_eq(sched_prefill_cap(&s, 2, 1, 0), 32, "before any chunk was measured: a first chunk of about a budget");
    sched_learn_costs(&s, 30 + 8 * 5.0, 2, 8, 3.5); /* 5 ms per prompt token */
    int cap = sched_prefill_cap(&s, 2, 1, 8);
    cr_assert(cap >= 11 && cap <= 12, "auto budget 3 x 30 ms: (90 - 30) / 5 = 12 tokens, got %d", cap);
    s.budget_ms = 1;
    cr_assert_eq(sched_prefill_cap(&s, 2, 1, 8), 4, "a budget below one decode step still moves the prompt");
}

Test(sched_pacing, a_prompt_is_paced_against_the_decode_cost_of_the_streams_beside_it) {
    sched s = {.max_batch = 512};
    sched_learn_costs(&s, 100, 1, 8, 4); /* no decode step measured yet: nothing to learn */
    cr_assert_eq(sched_prefill_cap(&s, 1, 1, 8), 32, "still the first chunk");
    sched_learn_costs(&s, 20, 1, 0, 0);  /* one stream: 20 ms a step */
    sched_learn_costs(&s, 50, 8, 0, 0);  /* eight: 50 ms */
    sched_learn_costs(&s, 50 + 10 * 5.0, 8, 10, 5); /* beside eight: 5 ms per prompt token, not (100 - 20) / 10 */
    int cap = sched_prefill_cap(&s, 8, 1, 10);
    cr_assert(cap >= 19 && cap <= 20, "3 x 50 ms: (150 - 50) / 5 = 20 tokens, got %d", cap);
    cap = sched_prefill_cap(&s, 4, 1, 10);
    cr_assert(cap >= 7 && cap <= 8, "4 streams, not measured: paced as the one measured below, (60 - 20) / 5 = 8, got %d",
              cap);
    cap = sched_prefill_cap(&s, 1, 7, 10);
    cr_assert(cap >= 79 && cap <= 80, "7 prompts beside one stream share 7 budgets: (420 - 20) / 5 = 80, got %d", cap);
    cr_assert_eq(sched_prefill_cap(&s, 8, 7, 10), sched_prefill_cap(&s, 8, 1, 10), "fewer prompts than streams: one budget");
}

// ---- forks: n choices of one prompt (on the repository's own model) ------------------------

#define OWN_MODEL ATTND_SOURCE_DIR "/models/attnd-sotu.gguf"

static void setup_own(void) {
    sched_rig_open(OWN_MODEL, 8, &m, &tok, &store, &cfg);
    cfg.ctx_size = 256; /* the block counts below are sized for a 256-token context */
    start();
}

TestSuite(sched_fork, .init = setup_own, .fini = teardown, .timeout = 120);

/* A job for text with the given temperature and seed; EOS banned so it runs max_tokens. */
static sched_job *job_seeded(const char *text, int max_tokens, float temperature, uint64_t seed) {
    sched_job *j;
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(tok, text, strlen(text), true, false, &ids, &n, NULL), ATTND_OK);
    sched_job_spec spec = {.prompt = ids, .n_prompt = (int)n, .max_tokens = max_tokens, .top_logprobs = -1};
    sampler_params_default(&spec.sp);
    spec.sp.temperature = temperature;
    spec.sp.seed = seed;
    spec.bias = malloc(sizeof(logit_bias));
    spec.bias[0] = (logit_bias){tok_eos(tok), -INFINITY};
    spec.n_bias = 1;
    cr_assert_eq(sched_job_create(&j, &spec, NULL), ATTND_OK);
    return j;
}

/* Runs a parent and 3 forks (seeds 1..3) and collects every choice's tokens (4, 12). */
static void run_forked(const char *text, float temperature, int32_t toks[4][12], sched_output *outs) {
    sched_job *j[4];
    j[0] = job_seeded(text, 12, temperature, 100);
    for (int i = 1; i < 4; i++) cr_assert_eq(sched_job_fork(&j[i], j[0], 100 + (uint64_t)i, NULL), ATTND_OK);
    cr_assert_eq(sched_submit(sch, j[0], NULL), ATTND_OK);
    for (int i = 0; i < 4; i++) {
        outs[i] = wait_done(j[i]);
        cr_assert_eq(outs[i].status, ATTND_OK, "choice %d: %s", i, outs[i].errmsg);
        cr_assert_eq(outs[i].n_pieces, 12);
        tokens_of(&outs[i], toks[i]);
    }
    for (int i = 0; i < 4; i++) sched_job_unref(j[i]);
}

Test(sched_fork, forks_read_the_prompt_once_and_continue_it_as_the_parent_does) {
    const char *text = "The state of the union is strong, and our economy";
    int32_t toks[4][12], alone[12];
    sched_output outs[4];
    run_forked(text, 0, toks, outs);
    sched_stats st;
    sched_get_stats(sch, &st);
    cr_assert_eq(st.prompt_tokens, (uint64_t)outs[0].n_prompt, "the prompt was evaluated once, by the parent");
    for (int i = 1; i < 4; i++) {
        cr_assert_eq(outs[i].n_cached, outs[i].n_prompt, "a fork's whole prompt comes from the parent's cache");
        cr_assert_eq(memcmp(toks[i], toks[0], sizeof(toks[0])), 0, "greedy forks continue exactly as the parent");
    }
    /* and as the same job run on its own, on a fresh cache */
    sched_job *j = job_seeded(text, 12, 0, 7);
    cr_assert_eq(sched_submit(sch, j, NULL), ATTND_OK);
    sched_output o = wait_done(j);
    tokens_of(&o, alone);
    cr_assert_eq(memcmp(alone, toks[0], sizeof(alone)), 0);
    sched_job_unref(j);
}

Test(sched_fork, sampled_forks_differ_and_repeat_with_their_seeds) {
    const char *text = "Our economy";
    int32_t a[4][12], b[4][12];
    sched_output outs[4];
    run_forked(text, 1.0f, a, outs);
    run_forked(text, 1.0f, b, outs);
    int differ = 0;
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(memcmp(a[i], b[i], sizeof(a[i])), 0, "choice %d is reproducible from its seed", i);
        differ += i > 0 && memcmp(a[i], a[0], sizeof(a[0])) != 0;
    }
    cr_assert_geq(differ, 2, "each fork samples with its own seed");
}

Test(sched_fork, forks_of_a_parent_that_never_runs_fail_with_it) {
    sched_job *p = job_seeded("Our economy", 4, 0, 1), *f;
    cr_assert_eq(sched_job_fork(&f, p, 2, NULL), ATTND_OK);
    sched_job_cancel(p);
    cr_assert_eq(sched_submit(sch, p, NULL), ATTND_OK);
    sched_output o = wait_done(f);
    cr_assert_neq(o.status, ATTND_OK);
    cr_assert(sched_wait_idle(sch, 5000), "nothing is left running");
    sched_job_unref(f);
    sched_job_unref(p);
    /* a fork never submitted at all is freed with its parent */
    p = job_seeded("Our economy", 4, 0, 1);
    cr_assert_eq(sched_job_fork(&f, p, 2, NULL), ATTND_OK);
    sched_job_unref(f);
    sched_job_unref(p);
}

Test(sched_fork, forks_reserve_the_shared_prompt_once) {
    /* 2 MiB = 5 blocks of 64 tokens. A 70-token prompt with 50 tokens to generate needs 2 blocks
     * alone; with forks the group reserves the prompt's 2 blocks once plus 1 block per choice
     * (its copy of the partly filled block and its growth). */
    sched_destroy(sch); /* the suite's scheduler, restarted with a small budget */
    cfg.kv_budget_mb = 2;
    start();
    attnd_err err;
    char text[1024] = "";
    for (int i = 0; i < 68; i++) strcat(text, "We ");
    sched_job *p = job_seeded(text, 50, 1.0f, 1), *f[3];
    sched_output po;
    sched_job_output(p, &po);
    cr_assert_gt(po.n_prompt, 64, "a prompt past one block (%d tokens)", po.n_prompt);
    cr_assert_lt(po.n_prompt, 78, "and under two (%d tokens)", po.n_prompt);
    for (int i = 0; i < 3; i++) cr_assert_eq(sched_job_fork(&f[i], p, 2 + i, NULL), ATTND_OK);
    cr_assert_eq(sched_submit(sch, p, &err), ATTND_ERR_INVALID, "4 choices need 6 blocks: never fits");
    cr_assert(strstr(err.msg, "4 choices"), "%s", err.msg);
    for (int i = 0; i < 3; i++) sched_job_unref(f[i]);
    sched_job_unref(p);

    p = job_seeded(text, 50, 1.0f, 1);
    for (int i = 0; i < 2; i++) cr_assert_eq(sched_job_fork(&f[i], p, 2 + i, NULL), ATTND_OK);
    cr_assert_eq(sched_submit(sch, p, &err), ATTND_OK, "3 choices fit in 5 blocks only because they share: %s",
                 err.msg);
    sched_job *all[3] = {p, f[0], f[1]};
    for (int i = 0; i < 3; i++) {
        sched_update u = {0};
        while (!u.done) sched_job_wait(all[i], 1000, &u);
        sched_output o;
        sched_job_output(all[i], &o);
        cr_assert_eq(o.status, ATTND_OK, "choice %d: %s", i, o.errmsg);
        cr_assert_eq(o.n_pieces, 50);
    }
    cr_assert(sched_wait_idle(sch, 5000));
    sched_stats st;
    sched_get_stats(sch, &st);
    cr_assert_eq(st.kv_reserved, 0, "the group's reservation was given back in full");
    for (int i = 0; i < 3; i++) sched_job_unref(all[i]);
}

// ---- admission: nothing it cannot evict is left out of its accounts -----------------------

/* stories260K at f32 KV: 1280 bytes a token, 80 KiB a 64-token block, so 1 MiB = 12 blocks and
 * a 512-token context = 8. */
static void setup_tight(void) {
    sched_rig_open(MODEL, 64, &m, &tok, &store, &cfg);
    cfg.kv_f32 = true;
    cfg.kv_budget_mb = 1;
}

TestSuite(sched_admission, .init = setup_tight, .fini = teardown, .timeout = 600);

/* n random token ids (stolen by the job made from them). */
static int32_t *random_ids(unsigned *seed, int n) {
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    for (int i = 0; i < n; i++) ids[i] = 3 + (int32_t)(rand_r(seed) % 500);
    return ids;
}

/* A session turn: the session's history so far (prompt) continued by its own output o and n_new
 * new tokens; the returned job holds the acquired session. */
static sched_job *session_turn(const char *id, const sched_output *o, unsigned *seed, int n_new, int max_tokens) {
    sess *se;
    cr_assert_eq(sess_acquire(store, NULL, id, &se, NULL), ATTND_OK);
    int n_old = o ? o->n_prompt + o->n_pieces : 0;
    int32_t *ids = random_ids(seed, n_old + n_new);
    for (int i = 0; o && i < o->n_prompt; i++) ids[i] = o->prompt[i];
    for (int i = 0; o && i < o->n_pieces; i++) ids[o->n_prompt + i] = o->pieces[i].id;
    return job_for_ids(ids, (size_t)(n_old + n_new), max_tokens, se);
}

Test(sched_admission, a_queued_session_turn_never_starves_the_stream_before_it) {
    if (model_missing()) return;
    cfg.max_parallel = 1; /* the turns wait in the queue behind the stream */
    start();
    /* three sessions each cache 7 blocks of conversation (idle: evictable) */
    sched_output prev[3];
    sched_job *first[3];
    unsigned seed = 1;
    for (int i = 0; i < 3; i++) {
        char id[SESS_ID_MAX + 1];
        snprintf(id, sizeof(id), "s%d", i);
        char made[SESS_ID_MAX + 1];
        cr_assert_eq(sess_create(store, NULL, id, made, NULL), ATTND_OK);
        first[i] = session_turn(id, NULL, &seed, 400, 40);
        cr_assert_eq(sched_submit(sch, first[i], NULL), ATTND_OK);
        prev[i] = wait_done(first[i]);
        cr_assert_eq(prev[i].status, ATTND_OK, "%s", prev[i].errmsg);
    }
    /* a stream reserving a whole context (8 of 12 blocks), then a turn of each session queued
     * behind it: the sessions are busy but not running, and their 21 blocks must give way */
    sched_job *stream = job_for_ids(random_ids(&seed, 8), 8, 500, NULL), *turn[3];
    cr_assert_eq(sched_submit(sch, stream, NULL), ATTND_OK);
    sched_update u = {0};
    while (u.to < 2 && !u.done) sched_job_wait(stream, 1000, &u);
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof(id), "s%d", i);
        turn[i] = session_turn(id, &prev[i], &seed, 4, 8);
        cr_assert_eq(sched_submit(sch, turn[i], NULL), ATTND_OK);
    }
    while (!u.done) sched_job_wait(stream, 1000, &u);
    sched_output o;
    sched_job_output(stream, &o);
    cr_assert_eq(o.status, ATTND_OK, "the stream ran to its end: %s", o.errmsg);
    cr_assert_eq(o.n_pieces, 500);
    for (int i = 0; i < 3; i++) {
        sched_output t = wait_done(turn[i]);
        cr_assert_eq(t.status, ATTND_OK, "turn %d: %s", i, t.errmsg);
        cr_assert_eq(t.n_pieces, 8);
        sched_job_unref(turn[i]);
        sched_job_unref(first[i]);
    }
    sched_stats st;
    sched_get_stats(sch, &st);
    cr_assert_gt(st.evictions, 0, "the queued sessions' KV was evicted");
    sched_job_unref(stream);
}

/* One randomized admission run: a scheduler with a random shape and budget, rounds of requests
 * (single prompts, arrays of prompts, n > 1 choices, turns of named sessions; of three tenants)
 * submitted together. Returns the jobs that failed after submit accepted them (mid-stream failures). */
typedef struct adm_job {
    sched_job *j;
    int sess;   /* the session index, or -1 */
    int max_tokens;
} adm_job;

static int admission_round(unsigned *seed, int n_ctx, int n_sess, sched_output *hist, sched_job **hist_job,
                           int *n_ok) {
    adm_job jobs[32];
    int n = 0, failed = 0;
    bool sess_used[4] = {false};
    int n_req = 1 + (int)(rand_r(seed) % 6);
    for (int r = 0; r < n_req && n < 24; r++) {
        static const char *tenants[3] = {NULL, "key:a", "addr:10.0.0.2"};
        cur_tenant = tenants[rand_r(seed) % 3];
        int kind = (int)(rand_r(seed) % 5), len = 1 + (int)(rand_r(seed) % (unsigned)(n_ctx - 1));
        int max_tokens = (int)(rand_r(seed) % (unsigned)(n_ctx + 1));
        int si = n_sess ? (int)(rand_r(seed) % (unsigned)n_sess) : -1;
        if (kind >= 3 && si >= 0 && !sess_used[si]) { /* a session turn continuing its history */
            char id[16];
            snprintf(id, sizeof(id), "p%d", si);
            const sched_output *o = hist_job[si] ? &hist[si] : NULL;
            int n_new = 1 + (int)(rand_r(seed) % 16);
            if (o && o->n_prompt + o->n_pieces + n_new >= n_ctx) o = NULL; /* too long: starts afresh */
            jobs[n++] = (adm_job){session_turn(id, o, seed, n_new, max_tokens), si, max_tokens};
            sess_used[si] = true;
            continue;
        }
        int copies = kind == 1 ? 2 + (int)(rand_r(seed) % 3) : 1; /* an array of prompts */
        for (int c = 0; c < copies && n < 24; c++) {
            jobs[n++] = (adm_job){job_for_ids(random_ids(seed, len), (size_t)len, max_tokens, NULL), -1, max_tokens};
            if (kind != 2) continue;
            int nf = 1 + (int)(rand_r(seed) % 3); /* n > 1: forks of this prompt */
            sched_job *parent = jobs[n - 1].j;
            for (int f = 0; f < nf; f++) {
                cr_assert_eq(sched_job_fork(&jobs[n].j, parent, 10 + (uint64_t)f, NULL), ATTND_OK);
                jobs[n].sess = -1, jobs[n].max_tokens = max_tokens;
                n++;
            }
        }
    }
    bool accepted[32];
    for (int i = 0; i < n; i++) {
        if (jobs[i].j->is_fork) {
            accepted[i] = accepted[i - 1]; /* goes with its parent */
            continue;
        }
        attnd_err err;
        attnd_status rc = sched_submit(sch, jobs[i].j, &err);
        accepted[i] = rc == ATTND_OK;
        cr_assert(rc == ATTND_OK || rc == ATTND_ERR_INVALID, "only a request that can never fit is refused: %s", err.msg);
        if (!accepted[i] && jobs[i].sess >= 0) sess_abandon(store, jobs[i].j->se);
    }
    for (int i = 0; i < n; i++) {
        if (!accepted[i]) {
            sched_job_unref(jobs[i].j);
            continue;
        }
        sched_output o = wait_done(jobs[i].j);
        bool ok = o.status == ATTND_OK && o.finish_reason &&
                  (o.n_pieces == jobs[i].max_tokens || o.n_prompt + o.n_pieces >= n_ctx);
        if (!ok) cr_log_error("job %d: status %d, %d of %d tokens: %s", i, o.status, o.n_pieces, jobs[i].max_tokens, o.errmsg);
        failed += !ok;
        *n_ok += ok;
        if (jobs[i].sess >= 0 && ok) { /* the next turn continues this one */
            sched_job_unref(hist_job[jobs[i].sess]);
            hist_job[jobs[i].sess] = jobs[i].j;
            hist[jobs[i].sess] = o;
        } else {
            sched_job_unref(jobs[i].j);
        }
    }
    return failed;
}

static int admission_run(unsigned seed, int *n_ok) {
    static const int ctxs[] = {64, 128, 256, 512};
    cfg.ctx_size = ctxs[rand_r(&seed) % 4];
    cfg.kv_budget_mb = 1 + rand_r(&seed) % 2;
    cfg.kv_f32 = rand_r(&seed) % 3 != 0;
    cfg.max_parallel = 1 + (int)(rand_r(&seed) % 4);
    cfg.max_batch = 0;
    attnd_err err;
    cr_assert_eq(sess_store_create(&store, NULL, "t", 16, &err), ATTND_OK);
    start();
    int n_sess = (int)(rand_r(&seed) % 5), failed = 0; /* 0..4 */
    for (int i = 0; i < n_sess; i++) {
        char id[SESS_ID_MAX + 1];
        snprintf(id, sizeof(id), "p%d", i);
        char made[SESS_ID_MAX + 1];
        cr_assert_eq(sess_create(store, NULL, id, made, NULL), ATTND_OK);
    }
    sched_output hist[4];
    sched_job *hist_job[4] = {NULL};
    int rounds = 2 + (int)(rand_r(&seed) % 3);
    for (int r = 0; r < rounds; r++) failed += admission_round(&seed, cfg.ctx_size, n_sess, hist, hist_job, n_ok);
    cr_assert(sched_wait_idle(sch, 10000));
    sched_stats st;
    sched_get_stats(sch, &st);
    cr_assert_eq(st.kv_reserved, 0, "every reservation was given back");
    cr_assert_leq(st.kv_used, st.kv_budget);
    for (int i = 0; i < 4; i++) sched_job_unref(hist_job[i]);
    sched_destroy(sch);
    sess_store_destroy(store);
    sch = NULL, store = NULL;
    return failed;
}

/* ATTND_ADMISSION_RUNS runs (default 24, 3 under ASan) of random mixes through the scheduler: not one job the
 * scheduler accepted may fail or stop short for lack of KV. */
Test(sched_admission, random_mixes_never_fail_an_admitted_job) {
    if (model_missing()) return;
    sess_store_destroy(store); /* each run makes its own */
    store = NULL;
    const char *env = getenv("ATTND_ADMISSION_RUNS");
#if defined(__SANITIZE_ADDRESS__)
    int dflt = 3; /* a Debug ASan build runs ~20x slower: a few runs keep the suite in its time */
#else
    int dflt = 24;
#endif
    int runs = env && atoi(env) > 0 ? atoi(env) : dflt, failed = 0, ok = 0;
    for (int r = 0; r < runs; r++) {
        int f = admission_run(0x5eed0000u + (unsigned)r, &ok);
        if (f) cr_log_error("run %d (seed 0x%x): %d admitted jobs failed", r, 0x5eed0000u + (unsigned)r, f);
        failed += f;
    }
    cr_log_info("%d randomized admission runs: %d jobs completed, %d failed after admission", runs, ok, failed);
    cr_assert_eq(failed, 0, "%d admitted jobs failed in %d runs", failed, runs);
    cr_assert_gt(ok, runs, "the runs did run jobs");
}

// ---- fair admission across tenants ---------------------------------------------------------

TestSuite(sched_fair, .init = setup, .fini = teardown, .timeout = 120);

/* A greedy job of tenant for text, EOS banned. */
static sched_job *job_of(const char *tenant, const char *text, int max_tokens) {
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(tok, text, strlen(text), true, false, &ids, &n, NULL), ATTND_OK);
    return job_make(ids, n, max_tokens, NULL, tenant);
}

static bool job_done(sched_job *j) {
    sched_output o;
    sched_job_output(j, &o);
    return o.done;
}

Test(sched_fair, a_short_request_of_another_tenant_runs_beside_a_long_batch) {
    if (model_missing()) return;
    cfg.max_parallel = 2;
    cfg.queue_limit = 16;
    start();
    sched_job *big[8];
    for (int i = 0; i < 8; i++) {
        big[i] = job_of("key:a", "Once upon a time", 400);
        cr_assert_eq(sched_submit(sch, big[i], NULL), ATTND_OK);
    }
    sched_update u = {0};
    while (u.to < 2 && !u.done) sched_job_wait(big[0], 1000, &u); /* the batch is running */
    sched_job *small = job_of("key:b", "The cat", 4);
    cr_assert_eq(sched_submit(sch, small, NULL), ATTND_OK);
    sched_output o = wait_done(small);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    cr_assert_eq(o.n_pieces, 4);
    /* it took the slot one tenant cannot hold: the batch's first two are still generating */
    cr_assert_not(job_done(big[0]), "the short request did not wait for the batch");
    sched_stats st;
    sched_get_stats(sch, &st);
    cr_assert_eq(st.slots, 2, "max_parallel as configured");
    sched_cancel_all(sch);
    cr_assert(sched_wait_idle(sch, 10000));
    for (int i = 0; i < 8; i++) sched_job_unref(big[i]);
    sched_job_unref(small);
}

Test(sched_fair, tenants_take_turns_in_the_queue) {
    if (model_missing()) return;
    cfg.max_parallel = 1; /* two slots, one each at most */
    cfg.queue_limit = 16;
    start();
    const char *who[3] = {"addr:10.0.0.1", "addr:10.0.0.2", "addr:10.0.0.3"};
    sched_job *js[3][4];
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 4; i++) {
            js[t][i] = job_of(who[t], "Once upon a time", 60);
            cr_assert_eq(sched_submit(sch, js[t][i], NULL), ATTND_OK);
        }
    /* first come, first served would start the third tenant after all eight others */
    sched_output o = wait_done(js[2][0]);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    int a_done = 0;
    for (int i = 0; i < 4; i++) a_done += job_done(js[0][i]);
    cr_assert_leq(a_done, 2, "the first tenant had %d of 4 done before the third's first", a_done);
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 4; i++) {
            sched_output oi;
            if (t == 2 && i == 0) sched_job_output(js[t][i], &oi); /* read above */
            else oi = wait_done(js[t][i]);
            cr_assert_eq(oi.status, ATTND_OK, "%s", oi.errmsg);
            cr_assert_eq(oi.n_pieces, 60);
            sched_job_unref(js[t][i]);
        }
    cr_assert(sched_wait_idle(sch, 5000));
}

/* A greedy job's tokens, alone on an idle scheduler (n of them into out). */
static void solo_tokens(const char *tenant, const char *text, int n, int32_t *out) {
    sched_job *j = job_of(tenant, text, n);
    cr_assert_eq(sched_submit(sch, j, NULL), ATTND_OK);
    sched_output o = wait_done(j);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    cr_assert_eq(o.n_pieces, n);
    tokens_of(&o, out);
    sched_job_unref(j);
}

/* Requests of another tenant arrive while eight streams decode: a decode step gives way to each
 * (engine_set_yield) and is evaluated again after the newcomer's first step. Nobody's tokens
 * change: the streams' and the newcomers' equal what each gets alone. */
Test(sched_fair, decode_steps_give_way_to_newcomers_and_no_token_changes) {
    if (model_missing()) return;
    cfg.max_parallel = 8;
    cfg.queue_limit = 32;
    start();
    int32_t want_big[160], want_small[6], got[160];
    solo_tokens("key:a", "Once upon a time", 160, want_big);
    solo_tokens("key:b", "The cat", 6, want_small);
    sched_job *big[8];
    for (int i = 0; i < 8; i++) {
        big[i] = job_of("key:a", "Once upon a time", 160);
        cr_assert_eq(sched_submit(sch, big[i], NULL), ATTND_OK);
    }
    for (sched_output o = {0}; o.n_pieces < 2 && !o.done; usleep(500)) sched_job_output(big[7], &o); /* all decode */
    int newcomers = 0;
    for (; newcomers < 20 && !job_done(big[0]); newcomers++) {
        sched_job *small = job_of("key:b", "The cat", 6);
        cr_assert_eq(sched_submit(sch, small, NULL), ATTND_OK);
        sched_output o = wait_done(small);
        cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
        tokens_of(&o, got);
        cr_assert(!memcmp(got, want_small, sizeof(want_small)), "newcomer %d's tokens differ", newcomers);
        sched_job_unref(small);
        usleep(700u + 300u * (unsigned)newcomers); /* arrive at different points of a step */
    }
    for (int i = 0; i < 8; i++) {
        sched_output o = wait_done(big[i]);
        cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
        tokens_of(&o, got);
        cr_assert(!memcmp(got, want_big, sizeof(want_big)), "stream %d's tokens differ", i);
        sched_job_unref(big[i]);
    }
    sched_stats st;
    sched_get_stats(sch, &st);
    cr_log_info("%d newcomers, %llu decode steps given up", newcomers, (unsigned long long)st.steps_yielded);
    cr_assert_gt(newcomers, 4, "the streams ended before the newcomers came");
    cr_assert_gt(st.steps_yielded, 0, "no decode step gave way to any of %d newcomers", newcomers);
    cr_assert_leq(st.steps_yielded, (uint64_t)newcomers, "at most one step given up per newcomer");
}

// ---- fresh prompts: a step of their own before the next decode step -------------------------

/* Submits jobs from the scheduler thread, between two steps (so the next step admits them all
 * at once), after noting the step count and how many tokens the running stream has. */
typedef struct submit_between {
    sched_job *stream, *jobs[2];
    int n_jobs;
    uint64_t steps;
    int stream_tokens;
} submit_between;

static attnd_status submit_task(void *user, sched_task_turn *turn, attnd_err *err) {
    submit_between *t = user;
    if (turn->plan) return ATTND_OK;
    sched_stats st;
    sched_get_stats(sch, &st);
    t->steps = st.steps;
    pthread_mutex_lock(&t->stream->mu);
    t->stream_tokens = t->stream->n_generated;
    pthread_mutex_unlock(&t->stream->mu);
    for (int i = 0; i < t->n_jobs; i++) {
        attnd_status rc = sched_submit(sch, t->jobs[i], err);
        if (rc != ATTND_OK) return rc;
    }
    return ATTND_OK;
}

/* A greedy job of tenant reading n made-up prompt tokens. */
static sched_job *long_prompt_job(const char *tenant, int n, int max_tokens) {
    int32_t *ids = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) ids[i] = i ? 300 + i % 200 : tok_bos(tok);
    return job_make(ids, (size_t)n, max_tokens, NULL, tenant);
}

Test(sched_fair, a_new_prompt_gets_its_first_token_before_the_next_decode_step_of_a_batch) {
    if (model_missing()) return;
    cfg.queue_limit = 16;
    start();
    sched_job *alone = job_of("key:a", "Once upon a time", 120);
    cr_assert_eq(sched_submit(sch, alone, NULL), ATTND_OK);
    sched_output solo = wait_done(alone);
    int32_t solo_toks[120];
    tokens_of(&solo, solo_toks);
    sched_job_unref(alone);
    sched_job *a = job_of("key:a", "Once upon a time", 120);
    cr_assert_eq(sched_submit(sch, a, NULL), ATTND_OK);
    sched_update u = {0};
    while (u.to < 2 && !u.done) sched_job_wait(a, 1000, &u); /* decoding */
    submit_between t = {.stream = a, .jobs = {job_of("key:b", "The cat", 4)}, .n_jobs = 1};
    attnd_err err;
    cr_assert_eq(sched_run_task(sch, &(sched_task_spec){.fn = submit_task, .user = &t}, &err), ATTND_OK, "%s", err.msg);
    sched_output o = wait_done(t.jobs[0]);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    cr_assert_eq(o.n_pieces, 4);
    /* its prompt (shorter than any chunk) was read, and its first token sampled, in a step that
     * held no decode token: the stream's next token came after it */
    cr_assert(t.jobs[0]->first_chunk_alone, "the new prompt shared its first step with the stream's decode");
    cr_assert_eq(t.jobs[0]->first_chunk_step, t.steps, "it was read in the first step after it came");
    cr_assert_lt(t.stream_tokens, 120, "the stream was decoding when the prompt came");
    while (!u.done) sched_job_wait(a, 1000, &u);
    sched_output ao;
    sched_job_output(a, &ao);
    cr_assert_eq(ao.status, ATTND_OK, "%s", ao.errmsg);
    cr_assert_eq(ao.n_pieces, 120);
    int32_t toks[120];
    tokens_of(&ao, toks);
    cr_assert_arr_eq(toks, solo_toks, sizeof(toks), "the stream's greedy tokens are those it gets alone");
    sched_job_unref(t.jobs[0]);
    sched_job_unref(a);
}

Test(sched_fair, fresh_prompts_go_in_fair_turns_with_a_decode_step_between_each) {
    if (model_missing()) return;
    cfg.queue_limit = 16;
    start();
    sched_job *a = job_of("key:a", "Once upon a time", 400);
    cr_assert_eq(sched_submit(sch, a, NULL), ATTND_OK);
    sched_update u = {0};
    while (u.to < 2 && !u.done) sched_job_wait(a, 1000, &u);
    /* both admitted in one step, key:b's first although key:a's was queued first (fair
     * admission); each prompt is longer than the first chunk (none was measured beside a stream
     * yet: 32 tokens per prompt waiting per stream) */
    submit_between t = {.stream = a, .jobs = {long_prompt_job("key:a", 200, 2), long_prompt_job("key:b", 200, 2)},
                        .n_jobs = 2};
    attnd_err err;
    cr_assert_eq(sched_run_task(sch, &(sched_task_spec){.fn = submit_task, .user = &t}, &err), ATTND_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++) {
        sched_output o = wait_done(t.jobs[i]);
        cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    }
    submit_between after = {.stream = a};
    cr_assert_eq(sched_run_task(sch, &(sched_task_spec){.fn = submit_task, .user = &after}, &err), ATTND_OK, "%s", err.msg);
    cr_assert_lt(after.stream_tokens, 400, "the stream was still running");
    /* the first step took key:b's first chunk alone; key:a's waited for a step of its own after
     * the stream's next decode step, never two such steps in a row */
    sched_job *ja = t.jobs[0], *jb = t.jobs[1];
    cr_assert(jb->first_chunk_alone && ja->first_chunk_alone);
    cr_assert_eq(jb->first_chunk_step, t.steps, "key:b's prompt was read in the first step after it came");
    cr_assert_geq(ja->first_chunk_step, jb->first_chunk_step + 2, "key:b's step at %llu, key:a's at %llu",
                  (unsigned long long)jb->first_chunk_step, (unsigned long long)ja->first_chunk_step);
    /* the stream decoded one token in every step but those two */
    int steps = (int)(after.steps - t.steps), decoded = after.stream_tokens - t.stream_tokens;
    cr_assert_eq(steps - decoded, 2, "%d steps, %d with the stream's decode", steps, decoded);
    sched_cancel_all(sch);
    cr_assert(sched_wait_idle(sch, 10000));
    for (int i = 0; i < 2; i++) sched_job_unref(t.jobs[i]);
    sched_job_unref(a);
}

// ---- sched_run_task: work on the scheduler thread ------------------------------------------

typedef struct task_probe {
    pthread_t caller, ran_on;
    int calls;
    size_t pool_used;
    bool fail;
} task_probe;

static attnd_status probe_task(void *user, sched_task_turn *turn, attnd_err *err) {
    task_probe *t = user;
    if (turn->plan) return ATTND_OK;
    engine *e = turn->e;
    kv_pool *pool = turn->pool;
    t->ran_on = pthread_self();
    t->calls++;
    kv_seq *s = NULL; /* the engine and the pool are usable here, between two steps */
    attnd_status st = kv_seq_create(&s, pool, err);
    batch_entry b = {s, 1, 0, false};
    if (st == ATTND_OK) st = engine_eval(e, &b, 1, NULL, err);
    t->pool_used = kv_pool_bytes_used(pool);
    kv_seq_destroy(s);
    if (st == ATTND_OK && t->fail) st = attnd_fail(err, ATTND_ERR_INVALID, "the task says no");
    return st;
}

Test(scheduler, a_task_runs_on_the_scheduler_thread_between_steps_of_a_running_job) {
    if (model_missing()) return;
    start();
    sched_job *j = job_for("Once upon a time", 40);
    cr_assert_eq(sched_submit(sch, j, NULL), ATTND_OK);
    task_probe t = {.caller = pthread_self()};
    attnd_err err;
    cr_assert_eq(sched_run_task(sch, &(sched_task_spec){.fn = probe_task, .user = &t}, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(t.calls, 1);
    cr_assert(!pthread_equal(t.ran_on, t.caller), "the task ran on the caller's thread");
    cr_assert_gt(t.pool_used, 0, "the task's sequence took KV from the pool");
    t.fail = true;
    cr_assert_eq(sched_run_task(sch, &(sched_task_spec){.fn = probe_task, .user = &t}, &err), ATTND_ERR_INVALID);
    cr_assert_str_eq(err.msg, "the task says no");
    sched_output o = wait_done(j);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    cr_assert_eq(o.n_pieces, 40, "the job ran on around the tasks");
    sched_job_unref(j);
}

/* What a task saw at each of its turns: the scheduler's steps, the job's tokens, the batch it
 * was given, the KV reserved, and what its tenant was charged. */
typedef struct turn_log {
    sched_job *job;        /* the job decoding beside it */
    int turns, want;       /* turns taken; turns it asks for */
    size_t kv_bytes;       /* its plan */
    uint64_t steps[64];
    int tokens[64], max_entries[64];
    size_t reserved[64];
    double served;         /* its tenant's charge at its last turn */
} turn_log;

static int job_tokens(sched_job *j) {
    pthread_mutex_lock(&j->mu);
    int n = j->n_generated;
    pthread_mutex_unlock(&j->mu);
    return n;
}

static attnd_status logged_task(void *user, sched_task_turn *turn, attnd_err *err) {
    (void)err;
    turn_log *t = user;
    if (turn->plan || turn->stop) {
        turn->kv_bytes = t->kv_bytes;
        return ATTND_OK;
    }
    sched_stats st;
    sched_get_stats(sch, &st);
    int k = t->turns++;
    t->steps[k] = st.steps, t->tokens[k] = t->job ? job_tokens(t->job) : 0;
    t->max_entries[k] = turn->max_entries, t->reserved[k] = st.kv_reserved;
    turn->work = 100;
    turn->more = t->turns < t->want;
    pthread_mutex_lock(&sch->mu);
    for (int i = 0; i < sch->n_tenants; i++)
        if (sch->tenants[i].live && !strcmp(sch->tenants[i].name, "key:sweeper")) t->served = sch->tenants[i].served;
    pthread_mutex_unlock(&sch->mu);
    return ATTND_OK;
}

/* A long task (an ablation sweep) goes in turns: one between two steps, each sized to about a
 * decode step beside the stream, its KV reserved while it runs, its work charged to its tenant;
 * the stream gets a token between every two turns. */
Test(scheduler, a_task_in_turns_interleaves_with_the_decode_steps_and_is_charged_to_its_tenant) {
    if (model_missing()) return;
    start();
    sched_job *j = job_for("Once upon a time", 200);
    cr_assert_eq(sched_submit(sch, j, NULL), ATTND_OK);
    sched_update u = {0};
    while (u.to < 2 && !u.done) sched_job_wait(j, 1000, &u); /* decoding */
    turn_log t = {.job = j, .want = 12, .kv_bytes = 4096};
    sched_stats st;
    sched_get_stats(sch, &st);
    size_t job_reserved = st.kv_reserved;
    attnd_err err;
    cr_assert_eq(sched_run_task(sch, &(sched_task_spec){logged_task, &t, "key:sweeper"}, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(t.turns, 12);
    for (int k = 1; k < t.turns; k++) {
        cr_assert_gt(t.steps[k], t.steps[k - 1], "turns %d and %d ran with no step between them", k - 1, k);
        cr_assert_gt(t.tokens[k], t.tokens[k - 1], "the stream got no token between turns %d and %d", k - 1, k);
    }
    for (int k = 0; k < t.turns; k++) {
        cr_assert_lt(t.max_entries[k], engine_max_batch(sch->eng), "turn %d may take a whole batch beside a stream", k);
        cr_assert_eq(t.reserved[k], job_reserved + t.kv_bytes, "turn %d: the task's KV is not reserved", k);
    }
    cr_assert_geq(t.served, 11 * 100.0, "the tenant was charged %g for 1,200 positions", t.served);
    sched_get_stats(sch, &st);
    cr_assert_eq(st.kv_reserved, job_reserved, "the reservation outlived the task");
    sched_job_unref(j);
}

/* A client that sends task after task (an ablation sweep in a loop) gets one turn between two
 * steps with the others': tasks queued while one runs wait for the next turn, so two such clients
 * never hold the streams up (before, the queue was drained, new arrivals included, and no step
 * ran while they kept coming). */
typedef struct looper {
    atomic_bool *stop;
    sched_job *job;
    int n;
    int tokens[400];
} looper;

static attnd_status one_turn(void *user, sched_task_turn *turn, attnd_err *err) {
    (void)err;
    looper *l = user;
    if (!turn->plan && !turn->stop && l->n < (int)ATTND_ARRAY_LEN(l->tokens)) l->tokens[l->n++] = job_tokens(l->job);
    return ATTND_OK;
}

static void *loop_tasks(void *arg) {
    looper *l = arg;
    attnd_err err;
    while (!atomic_load(l->stop) && l->n < (int)ATTND_ARRAY_LEN(l->tokens))
        cr_assert_eq(sched_run_task(sch, &(sched_task_spec){one_turn, l, "key:loop"}, &err), ATTND_OK, "%s", err.msg);
    return NULL;
}

Test(scheduler, two_clients_looping_tasks_never_starve_a_stream) {
    if (model_missing()) return;
    start();
    sched_job *j = job_for("Once upon a time", 60);
    cr_assert_eq(sched_submit(sch, j, NULL), ATTND_OK);
    sched_update u = {0};
    while (u.to < 2 && !u.done) sched_job_wait(j, 1000, &u);
    atomic_bool stop = false;
    looper a = {.stop = &stop, .job = j}, b = {.stop = &stop, .job = j};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, loop_tasks, &a);
    pthread_create(&tb, NULL, loop_tasks, &b);
    /* the loopers stop by themselves after 400 tasks each: a starved stream fails, not hangs */
    while (!u.done) sched_job_wait(j, 1000, &u);
    sched_output o;
    sched_job_output(j, &o);
    atomic_store(&stop, true);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    cr_assert_eq(o.n_pieces, 60, "the stream ended with %d tokens beside the loops", o.n_pieces);
    /* a task of each client ran in turn with the stream's steps: of their turns while it ran,
     * no client's two came without a token between them */
    for (looper *l = &a; l; l = l == &a ? &b : NULL)
        for (int k = 1; k < l->n; k++)
            if (l->tokens[k] < 60) cr_assert_gt(l->tokens[k], l->tokens[k - 1], "turns %d, %d: no token between", k - 1, k);
    sched_job_unref(j);
}

// ---- grammar masks: bounded per step, charged to their tenant ----------------------------

/* A job of tenant under grammar src (ambiguous: every vocabulary mask costs many times a decode
 * step of this model), greedy, max_tokens tokens. */
static sched_job *grammar_job(const char *tenant, const char *src, int max_tokens) {
    grammar *g;
    attnd_err err;
    cr_assert_eq(grammar_compile(&g, src, strlen(src), &err), ATTND_OK, "%s", err.msg);
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(tok, "Once upon a time", 16, true, false, &ids, &n, NULL), ATTND_OK);
    sched_job_spec spec = {.prompt = ids, .n_prompt = (int)n, .max_tokens = max_tokens, .top_logprobs = -1,
                           .tenant = tenant, .grammar = g};
    sampler_params_default(&spec.sp);
    spec.sp.temperature = 0;
    sched_job *j;
    cr_assert_eq(sched_job_create(&j, &spec, &err), ATTND_OK, "%s", err.msg);
    return j;
}

static const char *AMBIGUOUS = "root ::= [^e]{0,4} (\"x\" | \"y\")? [^e]+ root \"]\" | \"]\"";

/* One tenant's grammar (its masks over the vocabulary far costlier than a decode step) runs beside
 * another tenant's stream: a step's mask work is cut at about a decode step, the rest goes on in
 * the next steps while the stream decodes, so the stream gets several tokens between two of the
 * grammar's (before, every mask ran whole inside the step, and each stream token waited for it);
 * the grammar's time is charged to its tenant. The grammar's output is the one it gets alone. */
Test(sched_fair, a_tenant_s_grammar_masks_are_cut_per_step_and_charged_to_it) {
    if (model_missing()) return;
    cfg.queue_limit = 16;
    start();
    sched_job *alone = grammar_job("key:g", AMBIGUOUS, 6);
    cr_assert_eq(sched_submit(sch, alone, NULL), ATTND_OK);
    sched_output solo = wait_done(alone);
    cr_assert_eq(solo.status, ATTND_OK, "%s", solo.errmsg);
    sched_job *s = job_of("key:s", "Once upon a time", 120);
    cr_assert_eq(sched_submit(sch, s, NULL), ATTND_OK);
    sched_update u = {0};
    while (u.to < 2 && !u.done) sched_job_wait(s, 1000, &u);
    sched_job *g = grammar_job("key:g", AMBIGUOUS, 6);
    cr_assert_eq(sched_submit(sch, g, NULL), ATTND_OK);
    /* the stream's tokens at each of the grammar job's tokens */
    int at[8], seen = 0, most = 0;
    sched_update gu = {0};
    while (!gu.done) {
        if (!sched_job_wait(g, 1000, &gu)) continue;
        for (; seen < gu.to && seen < 8; seen++) at[seen] = job_tokens(s);
    }
    for (int k = 1; k < seen; k++) most = at[k] - at[k - 1] > most ? at[k] - at[k - 1] : most;
    sched_output o;
    sched_job_output(g, &o);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    cr_assert_eq(o.n_pieces, solo.n_pieces);
    for (int i = 0; i < o.n_pieces; i++) cr_assert_eq(o.pieces[i].id, solo.pieces[i].id, "token %d", i);
    cr_assert_gt(seen, 2, "the grammar ended after %d tokens", seen);
    cr_assert_geq(most, 2, "the stream never got two tokens between the grammar's (%d grammar tokens)", seen);
    /* key:g came back at key:s's charge, then was charged its prompt and max_tokens: the rest
     * is its masks' time */
    double served_g = 0, served_s = 0;
    pthread_mutex_lock(&sch->mu);
    for (int i = 0; i < sch->n_tenants; i++) {
        if (!strcmp(sch->tenants[i].name, "key:g")) served_g = sch->tenants[i].served;
        if (!strcmp(sch->tenants[i].name, "key:s")) served_s = sch->tenants[i].served;
    }
    pthread_mutex_unlock(&sch->mu);
    cr_assert_gt(served_g - served_s, o.n_prompt + 6 + 1, "key:g was charged %g beyond key:s's %g: its masks are free",
                 served_g - served_s, served_s);
    sched_cancel_all(sch);
    cr_assert(sched_wait_idle(sch, 10000));
    sched_job_unref(alone), sched_job_unref(g), sched_job_unref(s);
}

// ---- tasks of several tenants take turns by tenant, not by task --------------------------------

/* A task of `turns` turns of 10 positions each; every turn appends its tenant letter to the log
 * (scheduler thread only; read once every task returned). */
typedef struct tenant_task {
    char letter;
    int turns, done;
    char *log;
    atomic_int *n_log;
} tenant_task;

/* True once tenant name has work queued or running (its entry is live). */
static bool tenant_live(const char *name) {
    pthread_mutex_lock(&sch->mu);
    bool live = false;
    for (int i = 0; i < sch->n_tenants; i++) live |= sch->tenants[i].live > 0 && !strcmp(sch->tenants[i].name, name);
    pthread_mutex_unlock(&sch->mu);
    return live;
}

static attnd_status tenant_turn(void *user, sched_task_turn *turn, attnd_err *err) {
    (void)err;
    tenant_task *t = user;
    if (turn->plan || turn->stop) return ATTND_OK;
    int k = atomic_fetch_add(t->n_log, 1);
    t->log[k] = t->letter;
    if (k == 5) /* the 6th turn holds the scheduler until key:b's task is queued */
        for (double t0 = attnd_now_s(); !tenant_live("key:b") && attnd_now_s() - t0 < 10;) sched_yield();
    turn->work = 10;
    turn->more = ++t->done < t->turns;
    return ATTND_OK;
}

typedef struct tenant_thread {
    tenant_task task;
    const char *tenant;
    attnd_status st;
} tenant_thread;

static void *run_tenant_task(void *p) {
    tenant_thread *th = p;
    attnd_err err;
    th->st = sched_run_task(sch, &(sched_task_spec){.fn = tenant_turn, .user = &th->task, .tenant = th->tenant}, &err);
    return NULL;
}

Test(sched_fair, a_tenants_one_task_takes_turns_with_another_tenants_many) {
    if (model_missing()) return;
    start();
    static char log[256];
    atomic_int n_log = 0;
    tenant_thread th[4];
    pthread_t tid[4];
    for (int i = 0; i < 4; i++) {
        bool b = i == 3;
        th[i] = (tenant_thread){{b ? 'B' : 'A', b ? 4 : 40, 0, log, &n_log}, b ? "key:b" : "key:a", ATTND_OK};
        if (b) /* the three tasks of key:a are under way when key:b's one arrives */
            for (double t0 = attnd_now_s(); atomic_load(&n_log) < 6 && attnd_now_s() - t0 < 10;) sched_yield();
        cr_assert_eq(pthread_create(&tid[i], NULL, run_tenant_task, &th[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(tid[i], NULL);
        cr_assert_eq(th[i].st, ATTND_OK);
    }
    int n = atomic_load(&n_log), first = -1, last = -1, a_between = 0;
    for (int i = 0; i < n; i++)
        if (log[i] == 'B') last = i, first = first < 0 ? i : first;
    cr_assert(first >= 6 && last > first, "B ran at %d..%d of %.*s", first, last, n, log);
    for (int i = first; i < last; i++) a_between += log[i] == 'A';
    /* by task, B would get one turn in four: 9 of A's between its first and its last */
    cr_assert_leq(a_between, 4, "key:a took %d turns during key:b's 4: %.*s", a_between, n, log);
}
