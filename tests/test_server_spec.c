/*
 * test_server_spec.c — speculative decoding in the scheduler (prompt lookup, draft_max): jobs get
 * the tokens and text they get without it — alone, batched, as n > 1 forks, sampled with a seed,
 * and across a session's turns — the drafted and kept tokens are counted, and speculation backs
 * off when the batch is full; the same with a draft model (the shipped model's Q4_0 copy), and a
 * draft of another vocabulary is refused; a request's draft_min_p; the cost-aware controller
 * (draft_adapt, the default) gives the same tokens. The counting tests draft at a fixed length
 * (draft_adapt = false): the controller's choices depend on timings. Runs on the shipped model,
 * without HTTP.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sched_internal.h" /* sched_draft_room */
#include "sched_rig.h"
#include "test_models.h"

#define SOTU ATTND_SOURCE_DIR "/models/attnd-sotu.gguf"

static model *m;
static tokenizer *tok;
static sess_store *store;
static sched *sch;
static server_settings cfg;
static float job_min_p = -1; /* the jobs' draft_min_p (-1: the server's) */

static void setup(void) {
    sched_rig_open(SOTU, 16, &m, &tok, &store, &cfg);
    cfg.ctx_size = 256;
    cfg.draft_adapt = false;
    job_min_p = -1;
}

static void start(void) { sch = sched_rig_start(m, tok, store, &cfg); }

static void teardown(void) { sched_rig_close(&sch, &store, &tok, &m); }

TestSuite(sched_spec, .init = setup, .fini = teardown, .timeout = 240);

static const char *const TEXTS[] = {
    "Repeat: We will build the roads and bridges of America. Repeat: We will build the roads and bridges of America.",
    "The state of the union is",
    "Tonight I ask the Congress to act. Tonight I ask the Congress to",
    "We must",
};

/* A job for ids (stolen) with draft_max, greedy or seeded; EOS banned so it runs max_tokens. */
static sched_job *job_ids(int32_t *ids, size_t n, int max_tokens, int draft_max, float temp, uint64_t seed, sess *se) {
    sched_job_spec spec = {.prompt = ids, .n_prompt = (int)n, .max_tokens = max_tokens, .top_logprobs = 2,
                           .draft_max = draft_max, .draft_min_p = job_min_p, .se = se};
    sampler_params_default(&spec.sp);
    spec.sp.temperature = temp, spec.sp.seed = seed;
    spec.bias = malloc(sizeof(logit_bias));
    spec.bias[0] = (logit_bias){tok_eos(tok), -INFINITY};
    spec.n_bias = 1;
    spec.stops = calloc(2, sizeof(char *));
    spec.stops[spec.n_stops++] = strdup("Congress to act on");
    sched_job *j;
    cr_assert_eq(sched_job_create(&j, &spec, NULL), ATTND_OK);
    return j;
}

static sched_job *job_text(const char *text, int max_tokens, int draft_max, float temp, uint64_t seed) {
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(tok, text, strlen(text), true, false, &ids, &n, NULL), ATTND_OK);
    return job_ids(ids, n, max_tokens, draft_max, temp, seed, NULL);
}

/* What a finished job said: tokens, logprobs, text, finish reason. */
typedef struct result {
    int n;
    int32_t ids[64];
    float lp[64];
    char text[2048];
    const char *why;
} result;

static result wait_result(sched_job *j) {
    sched_update u = {0};
    while (!u.done) sched_job_wait(j, 1000, &u);
    sched_output o;
    sched_job_output(j, &o);
    cr_assert_eq(o.status, ATTND_OK, "%s", o.errmsg);
    result r = {.n = o.n_pieces, .why = o.finish_reason};
    cr_assert_leq(o.n_pieces, 64);
    for (int i = 0; i < o.n_pieces; i++) r.ids[i] = o.pieces[i].id, r.lp[i] = o.pieces[i].logprob;
    snprintf(r.text, sizeof r.text, "%.*s", (int)o.text_len, o.text);
    return r;
}

static void same(const result *a, const result *b, const char *what) {
    cr_assert_eq(a->n, b->n, "%s: %d tokens, plain %d", what, b->n, a->n);
    cr_assert_eq(memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n), 0, "%s: tokens differ", what);
    cr_assert_eq(memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n), 0, "%s: logprobs differ", what);
    cr_assert_str_eq(a->text, b->text, "%s", what);
    cr_assert_str_eq(a->why, b->why, "%s", what);
}

/* j submitted alone (the reference is dropped): what it said. */
static result run_alone(sched_job *j) {
    cr_assert_eq(sched_submit(sch, j, NULL), ATTND_OK);
    result r = wait_result(j);
    sched_job_unref(j);
    return r;
}

/* Each text alone without speculation, 40 tokens, text i seeded seed + i. */
static void plain_alone(result plain[4], float temp, uint64_t seed) {
    for (int i = 0; i < 4; i++) plain[i] = run_alone(job_text(TEXTS[i], 40, 0, temp, seed + (uint64_t)i));
}

/* All the texts at once with draft_max, seeded as plain_alone: each gives plain[i]. */
static void batched_same(const result plain[4], int draft_max, float temp, uint64_t seed) {
    sched_job *js[4];
    for (int i = 0; i < 4; i++) {
        js[i] = job_text(TEXTS[i], 40, draft_max, temp, seed + (uint64_t)i);
        cr_assert_eq(sched_submit(sch, js[i], NULL), ATTND_OK);
    }
    for (int i = 0; i < 4; i++) {
        result fast = wait_result(js[i]);
        same(&plain[i], &fast, TEXTS[i]);
        sched_job_unref(js[i]);
    }
}

/* Each text alone without speculation, then all at once with it: the same results. */
static void batched_equals_plain(float temp, int draft_max, sched_stats *st) {
    result plain[4];
    plain_alone(plain, temp, 9);
    batched_same(plain, draft_max, temp, 9);
    sched_get_stats(sch, st);
}

/* batched_equals_plain greedy with draft_max, where some drafts are kept and some refused, then
 * seeded at 0.8 with draft_max 4, where the sampled jobs draft too. */
static void greedy_and_seeded_equal_plain(int draft_max) {
    sched_stats st;
    batched_equals_plain(0, draft_max, &st);
    cr_assert(st.spec_accepted > 0 && st.spec_drafted > st.spec_accepted, "drafted %llu, kept %llu",
              (unsigned long long)st.spec_drafted, (unsigned long long)st.spec_accepted);
    uint64_t d0 = st.spec_drafted;
    batched_equals_plain(0.8f, 4, &st);
    cr_assert_gt(st.spec_drafted, d0, "sampled jobs draft too");
}

/* n = 3: text's job (seeded seed) and two forks (fork_seed + 1, + 2), without speculation and
 * then with draft_max: the same results, named what. */
static void forks_equal_plain(const char *text, int max_tokens, int draft_max, float temp, uint64_t seed,
                              uint64_t fork_seed, const char *what) {
    result plain[3], fast[3];
    for (int pass = 0; pass < 2; pass++) {
        sched_job *j[3];
        j[0] = job_text(text, max_tokens, pass ? draft_max : 0, temp, seed);
        for (int i = 1; i < 3; i++) cr_assert_eq(sched_job_fork(&j[i], j[0], fork_seed + (uint64_t)i, NULL), ATTND_OK);
        cr_assert_eq(sched_submit(sch, j[0], NULL), ATTND_OK);
        for (int i = 0; i < 3; i++) (pass ? fast : plain)[i] = wait_result(j[i]);
        for (int i = 0; i < 3; i++) sched_job_unref(j[i]);
    }
    for (int i = 0; i < 3; i++) same(&plain[i], &fast[i], what);
}

Test(sched_spec, batched_lookup_gives_the_plain_tokens_greedy_and_seeded) {
    start();
    greedy_and_seeded_equal_plain(8);
}

Test(sched_spec, drafts_take_only_the_room_decoding_leaves) {
    cr_assert_eq(sched_draft_room(4, 4, false), 0, "a full batch drafts nothing");
    cr_assert_eq(sched_draft_room(4, 5, false), 0);
    cr_assert_eq(sched_draft_room(512, 4, false), 508);
    cr_assert_eq(sched_draft_room(512, 4, true), 254, "prompts waiting: half");
}

Test(sched_spec, a_tight_batch_drafts_less_and_still_gives_the_plain_tokens) {
    start();
    sched_stats wide, tight;
    batched_equals_plain(0, 8, &wide);
    sched_destroy(sch);
    cfg.max_batch = 5; /* four decoding streams leave one entry a step */
    start();
    batched_equals_plain(0, 8, &tight);
    cr_assert_lt(tight.spec_drafted, wide.spec_drafted, "tight %llu, wide %llu", (unsigned long long)tight.spec_drafted,
                 (unsigned long long)wide.spec_drafted);
}

Test(sched_spec, the_server_setting_applies_when_a_request_does_not_say) {
    cfg.draft_max = 6;
    start();
    run_alone(job_text(TEXTS[0], 30, -1, 0, 0));
    sched_stats st;
    sched_get_stats(sch, &st);
    cr_assert_gt(st.spec_drafted, 0);
    uint64_t d0 = st.spec_drafted;
    run_alone(job_text(TEXTS[0], 30, 0, 0, 0)); /* a request's 0 turns it off */
    sched_get_stats(sch, &st);
    cr_assert_eq(st.spec_drafted, d0);
}

Test(sched_spec, forks_and_session_turns_continue_as_without_it) {
    start();
    forks_equal_plain(TEXTS[2], 24, 8, 0.9f, 50, 50, "fork");
    /* two turns of a named session with speculation: the second finds the first cached */
    sess *se = sched_rig_session(store, "s");
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(tok, TEXTS[0], strlen(TEXTS[0]), true, false, &ids, &n, NULL), ATTND_OK);
    int32_t first[256];
    memcpy(first, ids, n * sizeof(int32_t));
    sched_job *a = job_ids(ids, n, 20, 8, 0, 0, se);
    cr_assert_eq(sched_submit(sch, a, NULL), ATTND_OK);
    result ra = wait_result(a);
    int n2 = (int)n + ra.n + 2;
    int32_t *p2 = malloc((size_t)n2 * sizeof(int32_t));
    memcpy(p2, first, n * sizeof(int32_t));
    memcpy(p2 + n, ra.ids, (size_t)ra.n * sizeof(int32_t));
    p2[n2 - 2] = ra.ids[0], p2[n2 - 1] = ra.ids[1];
    cr_assert_eq(sess_acquire(store, NULL, "s", &se, NULL), ATTND_OK);
    sched_job *b = job_ids(p2, (size_t)n2, 10, 8, 0, 0, se);
    cr_assert_eq(sched_submit(sch, b, NULL), ATTND_OK);
    result rb = wait_result(b);
    sched_output ob;
    sched_job_output(b, &ob);
    cr_assert_geq(ob.n_cached, (int)n + ra.n, "cached %d, turn 1 total %d", ob.n_cached, (int)n + ra.n);
    /* and the second turn's tokens are the plain ones */
    int32_t *p3 = malloc((size_t)n2 * sizeof(int32_t));
    memcpy(p3, p2, (size_t)n2 * sizeof(int32_t));
    sched_job *c = job_ids(p3, (size_t)n2, 10, 0, 0, 0, NULL);
    cr_assert_eq(sched_submit(sch, c, NULL), ATTND_OK);
    result rc = wait_result(c);
    same(&rc, &rb, "session turn");
    sched_job_unref(a), sched_job_unref(b), sched_job_unref(c);
}

Test(sched_spec, a_draft_model_gives_the_plain_tokens_batched_and_forked) {
    char path[1024];
    cfg.draft_model = test_model_path("attnd-sotu-Q4_0.gguf", path, sizeof path);
    cfg.draft_min_p = 0.2f;
    start();
    greedy_and_seeded_equal_plain(6);
    forks_equal_plain(TEXTS[1], 20, 5, 0.9f, 60, 60, "fork with a draft model");
}

Test(sched_spec, a_draft_model_of_another_vocabulary_is_refused_at_creation) {
    char path[1024];
    cfg.draft_model = test_model_path("stories260K.gguf", path, sizeof path);
    attnd_err err;
    cr_assert_eq(sched_create(&sch, m, tok, store, &cfg, &err), ATTND_ERR_INVALID);
    cr_assert_null(sch);
    cr_assert(strstr(err.msg, "vocabulary differs"), "%s", err.msg);
}

Test(sched_spec, a_request_s_draft_min_p_overrides_the_server_s) {
    char path[1024];
    cfg.draft_model = test_model_path("attnd-sotu-Q4_0.gguf", path, sizeof path);
    cfg.draft_min_p = 0;
    start();
    sched_stats st;
    job_min_p = 1; /* no top probability is above 1: nothing is drafted */
    batched_equals_plain(0, 6, &st);
    cr_assert_eq(st.spec_drafted, 0, "draft_min_p 1 drafts nothing (%llu)", (unsigned long long)st.spec_drafted);
    job_min_p = -1; /* the server's 0: every step drafts */
    batched_equals_plain(0, 6, &st);
    cr_assert_gt(st.spec_drafted, 0);
}

Test(sched_spec, the_cost_aware_controller_gives_the_plain_tokens) {
    cfg.draft_adapt = true;
    start();
    sched_stats st;
    batched_equals_plain(0, 8, &st);
    batched_equals_plain(0.8f, 8, &st);
    forks_equal_plain(TEXTS[0], 40, 8, 0, 0, 70, "adaptive fork");
    cr_assert_leq(st.spec_accepted, st.spec_drafted);
}

/* Counts an engine's evaluations (its first row's first layer). */
static void count_evals(void *user, int entry, int layer, int pos, const float *x, int n_embd) {
    (void)pos, (void)x, (void)n_embd;
    if (layer == 0 && entry == 0) ++*(int *)user;
}

Test(sched_spec, slots_drafting_with_a_draft_model_draft_together) {
    char path[1024];
    cfg.draft_model = test_model_path("attnd-sotu-Q4_0.gguf", path, sizeof path);
    cfg.draft_min_p = 0; /* every draft runs its full length */
    start();
    int evals = 0;
    engine_set_attention_cb(sch->deng, NULL, &evals);
    engine_set_residual_cb(sch->deng, count_evals);
    result plain[4];
    plain_alone(plain, 0, 0); /* greedy: the seeds (0 to 3) draw nothing */
    sched_stats st0, st1;
    sched_get_stats(sch, &st0);
    cr_assert_eq(evals, 0, "plain jobs never run the draft model");
    batched_same(plain, 4, 0, 0);
    sched_get_stats(sch, &st1);
    uint64_t steps = st1.steps - st0.steps;
    cr_assert_gt(st1.spec_drafted, 0);
    /* 4 drafts: a catch-up and 3 steps for all the slots together, at most, a step (one at a
     * time it would be that for each of the 4 slots decoding at once) */
    cr_assert(evals > 0 && (uint64_t)evals <= 4 * steps, "%d draft evaluations in %llu steps", evals,
              (unsigned long long)steps);
}
