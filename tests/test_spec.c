/*
 * test_spec.c — speculative decoding (attnd/spec.h, engine_generate with a spec): prompt lookup,
 * draft models and their vocabulary check, greedy and seeded output identical to plain output on
 * a random-weight model and on the shipped model (stop strings, grammar, log-probabilities,
 * n_predict edges), and a chi-square test that sampled tokens keep the target's distribution
 * (with a wrong acceptance rule as the control that the test can fail).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "attnd/engine.h"
#include "attnd/gen.h"
#include "attnd/spec.h"
#include "attnd/tokenizer.h"
#include "engine_rig.h"
#include "test_models.h"
#include "test_scale.h"

// ---- prompt lookup and parameters ---------------------------------------------------------------

Test(spec, lookup_proposes_what_followed_the_latest_match) {
    const int32_t h[] = {5, 6, 7, 8, 1, 6, 7, 9, 4, 2, 6, 7};
    int32_t out[8];
    /* suffix 6 7 last occurred at 5..6 (not 1..2): 9 4 2 6 7 follows */
    int match;
    cr_assert_eq(spec_lookup(h, 12, 1, 3, 8, out, &match), 5);
    cr_assert(out[0] == 9 && out[1] == 4 && out[4] == 7);
    cr_assert_eq(match, 2, "the match is 6 7");
    cr_assert_eq(spec_lookup(h, 12, 1, 3, 2, out, NULL), 2, "max caps the draft");
    /* 3-gram 2 6 7 never occurred before: the 2-gram answers */
    const int32_t h2[] = {1, 2, 3, 1, 2};
    cr_assert_eq(spec_lookup(h2, 5, 1, 3, 4, out, &match), 3);
    cr_assert(out[0] == 3 && out[1] == 1 && out[2] == 2);
    const int32_t h4[] = {1, 2, 3, 4, 5, 9, 2, 3, 4, 5, 7, 1, 2, 3, 4, 5};
    cr_assert_eq(spec_lookup(h4, 16, 2, 8, 4, out, &match), 4);
    cr_assert(match == 5 && out[0] == 9, "the longest match (1 2 3 4 5), not the latest (2 3 4 5): %d", match);
    const int32_t h3[] = {1, 2, 3, 4};
    cr_assert_eq(spec_lookup(h3, 4, 1, 3, 4, out, &match), 0, "no match, no draft");
    cr_assert_eq(match, 0);
    cr_assert_eq(spec_lookup(h3, 1, 1, 3, 4, out, NULL), 0);
    cr_assert_eq(spec_lookup(h2, 5, 3, 3, 4, out, NULL), 0, "ngram_min 3 ignores the shorter matches");
}

Test(spec, parameters_out_of_range_are_refused_by_name) {
    spec_params p;
    spec_params_default(&p);
    attnd_err err;
    cr_assert_eq(spec_params_validate(&p, &err), ATTND_OK);
    p.draft_max = SPEC_MAX_DRAFT + 1;
    cr_assert_eq(spec_params_validate(&p, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "draft_max"), "%s", err.msg);
    spec_params_default(&p);
    p.draft_min_p = NAN;
    cr_assert_eq(spec_params_validate(&p, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "draft_min_p"), "%s", err.msg);
    spec_params_default(&p);
    p.ngram_min = 4, p.ngram_max = 2;
    cr_assert_eq(spec_params_validate(&p, &err), ATTND_ERR_INVALID);
    spec *s;
    cr_assert_eq(spec_create(&s, &p, &err), ATTND_ERR_INVALID);
    cr_assert_null(s);
}

// ---- the controller (deterministic inputs: step costs and outcomes are given, not timed) -------

/* A cost table of every size 1..n: a step of r rows takes base + slope (r - 1) ms, and past knee
 * rows (compute-bound) grows in proportion to the rows. */
static void costs(spec_cost *c, int n, double base, double slope, int knee) {
    *c = (spec_cost){0};
    for (int r = 1; r <= n; r++) {
        double ms = base + slope * (r - 1);
        if (knee && r > knee) ms = (base + slope * (knee - 1)) * r / knee;
        spec_cost_learn(c, r, ms);
    }
}

/* plans of a lone sequence (cls, at most max), each learning `keep(k)` of its k drafts; returns
 * the drafts planned in total, and the plan index of the first draft of at least `until` tokens
 * in *first (-1: none) */
static int plan_many(spec_ctl *c, spec_cost *cost, int cls, int max, int n_plans, int keep_all, int until, int *first) {
    int total = 0;
    *first = -1;
    for (int i = 0; i < n_plans; i++) {
        spec_step st = {cost, 1, 1};
        int k = spec_ctl_plan(c, cls, &st, max);
        cr_assert_eq(st.rows, 1 + k, "a plan adds its drafts to the batch's rows");
        total += k;
        if (k >= until && *first < 0) *first = i;
        spec_ctl_learn(c, cls, k, keep_all ? k : 0);
    }
    return total;
}

Test(spec_ctl, costs_are_measured_interpolated_and_extrapolated) {
    spec_cost c = {0};
    cr_assert_eq(spec_cost_est(&c, 3), 0, "nothing measured, nothing estimated");
    spec_cost_learn(&c, 1, 10);
    cr_assert_float_eq(spec_cost_est(&c, 1), 10, 1e-9);
    cr_assert(spec_cost_est(&c, 5) > 10, "one size: more rows are assumed to cost more");
    spec_cost_learn(&c, 5, 18);
    cr_assert_float_eq(spec_cost_est(&c, 3), 14, 1e-9, "between two sizes: the line through them");
    cr_assert_float_eq(spec_cost_est(&c, 9), 26, 1e-9, "past the largest: the line through the last two");
    spec_cost_learn(&c, 5, 28);
    cr_assert_float_eq(spec_cost_est(&c, 5), 18 * 1.05, 1e-9, "a slower step raises the estimate by 5 %% at most");
    spec_cost_learn(&c, 5, 19);
    cr_assert_float_eq(spec_cost_est(&c, 5), 19, 1e-9, "one within that is taken");
    spec_cost_learn(&c, 5, 12);
    cr_assert_float_eq(spec_cost_est(&c, 5), 12, 1e-9, "a faster one at once");
    spec_cost_learn(&c, 7, 1000);
    cr_assert_float_eq(c.ms[7], 3 * (12 + 2 * (12 - 10) / 4.0), 1e-9, "a new size's spike counts as 3 estimates");
    spec_cost_learn(&c, 0, 5), spec_cost_learn(&c, SPEC_COST_ROWS + 1, 5), spec_cost_learn(&c, 2, -1);
    cr_assert_eq(c.ms[2], 0, "sizes outside the table and bad times are ignored");
}

Test(spec_ctl, no_draft_before_a_step_is_measured) {
    spec_ctl c;
    spec_ctl_init(&c);
    spec_cost cost = {0};
    spec_step st = {&cost, 1, 1};
    cr_assert_eq(spec_ctl_plan(&c, 3, &st, 8), 0);
    cr_assert(st.rows == 1 && st.tokens == 1, "the batch is left as it was");
    spec_cost_learn(&cost, 1, 10);
    cr_assert_gt(spec_ctl_plan(&c, 3, &st, 8), 0, "with the step measured, the prior (3/5 kept for a 3-token match) drafts");
}

Test(spec_ctl, nearly_free_verification_drafts_long_when_drafts_are_kept) {
    spec_ctl c;
    spec_ctl_init(&c);
    spec_cost cost;
    costs(&cost, 33, 10, 0.2, 0); /* memory-bound: a row more costs 2 % of a step */
    int first;
    plan_many(&c, &cost, 0, 8, 12, 1, 8, &first);
    cr_assert(first >= 0 && first < 12, "kept drafts grow the draft to draft_max (first at plan %d)", first);
    cr_assert_gt(spec_ctl_accept(&c, 0), 0.9);
}

Test(spec_ctl, when_rows_cost_what_they_could_save_drafting_stops_and_probes_rarely) {
    spec_ctl c;
    spec_ctl_init(&c);
    spec_cost cost;
    costs(&cost, 33, 10, 11, 0); /* compute-bound: k drafts cost 1.1 k steps, nothing can pay */
    int probes[8], n = 0;
    for (int i = 0; i < 300; i++) {
        spec_step st = {&cost, 1, 1};
        int k = spec_ctl_plan(&c, 0, &st, 8);
        cr_assert_leq(k, 1, "no drafts but probes of the length that loses least");
        if (k && n < 8) probes[n++] = i;
        spec_ctl_learn(&c, 0, k, k); /* even kept probes cannot make it pay */
    }
    /* a probe every SPEC_PROBE_MAX plans, only to keep the costs measured */
    cr_assert(n == 4 && probes[0] == SPEC_PROBE_MAX - 1, "%d probes, the first at %d", n, n ? probes[0] : -1);
    cr_assert(probes[1] - probes[0] == SPEC_PROBE_MAX && probes[3] - probes[2] == SPEC_PROBE_MAX);
    /* a draft model does not probe for costs (each probe catches its KV up first), nor stop */
    spec_ctl_init(&c);
    c.probe_limit[0] = 2;
    int first;
    cr_assert_eq(plan_many(&c, &cost, 0, 8, 600, 1, 1, &first), 0, "no probes");
    cr_assert(!c.stopped[0], "the batch, not the draft, is what does not pay");
}

Test(spec_ctl, rejected_drafts_back_off_and_kept_probes_bring_drafting_back) {
    spec_ctl c;
    spec_ctl_init(&c);
    spec_cost cost;
    costs(&cost, 33, 10, 3, 0); /* a row more costs 30 % of a step: pays from ~40 % kept */
    int first;
    int drafted = plan_many(&c, &cost, 0, 8, 200, 0, 1, &first);
    cr_assert_eq(first, 0, "the prior drafts first");
    cr_assert_lt(drafted, 16, "nothing kept: drafting stops after a few tries (%d drafted in 200 plans)", drafted);
    cr_assert_lt(spec_ctl_accept(&c, 0), 0.2);
    /* backed off: probes after 16, 32, 64, 64 ... plans */
    spec_ctl_init(&c);
    int probes[8], n = 0;
    for (int i = 0; i < 300; i++) {
        spec_step st = {&cost, 1, 1};
        int k = spec_ctl_plan(&c, 0, &st, 8);
        if (k && n < 8) probes[n++] = i;
        spec_ctl_learn(&c, 0, k, 0);
    }
    cr_assert(n == 6 && probes[1] == SPEC_PROBE_FIRST + 2, "%d drafts, the second at %d", n, n > 1 ? probes[1] : -1);
    cr_assert_eq(probes[2] - probes[1], 2 * SPEC_PROBE_FIRST + 1);
    cr_assert_eq(probes[3] - probes[2], SPEC_PROBE_MAX + 1);
    cr_assert_eq(probes[4] - probes[3], SPEC_PROBE_MAX + 1, "probe intervals stop growing at SPEC_PROBE_MAX");
    /* the text turns repetitive: the probes are kept, then everything */
    plan_many(&c, &cost, 0, 8, 600, 1, 4, &first);
    cr_assert(first > 0 && first < 400, "drafting resumed (4+ tokens at plan %d)", first);
    int d2 = plan_many(&c, &cost, 0, 8, 10, 1, 8, &first);
    cr_assert(d2 >= 60, "and runs at full length again (%d in 10 plans)", d2);
    spec_ctl_init(&c);
    c.probe_limit[0] = SPEC_DRAFT_PROBES;
    cr_assert_eq(plan_many(&c, &cost, 0, 8, 600, 0, 1, &first), 1 + SPEC_DRAFT_PROBES,
                 "a draft model: its first draft, then SPEC_DRAFT_PROBES probes");
}

/* The plans at which a lone draft-model class drafts in n plans, nothing kept, into at (a ring of
 * cap: draft d at at[d % cap]); returns how many. */
static int draft_plans(spec_ctl *c, spec_cost *cost, int n, int *at, int cap) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        spec_step st = {cost, 1, 1};
        int k = spec_ctl_plan(c, 0, &st, 8);
        if (k) at[m % cap] = i;
        m += k > 0;
        spec_ctl_learn(c, 0, k, 0);
    }
    return m;
}

Test(spec_ctl, a_draft_model_that_never_agrees_probes_soon_then_stops_for_good) {
    spec_ctl c;
    spec_ctl_init(&c);
    c.probe_limit[0] = SPEC_DRAFT_PROBES;
    spec_cost cost;
    costs(&cost, 33, 10, 3, 0); /* a row more costs 30 % of a step: pays from ~40 % kept */
    int at[8];
    int n = draft_plans(&c, &cost, 300, at, 8);
    cr_assert_eq(n, 1 + SPEC_DRAFT_PROBES, "its first draft, then SPEC_DRAFT_PROBES probes (%d)", n);
    cr_assert_eq(at[1], 1 + SPEC_PROBE_EAGER + 1, "backed off at plan 1, a probe after SPEC_PROBE_EAGER plans");
    for (int i = 2; i < n; i++) cr_assert_eq(at[i] - at[i - 1], SPEC_PROBE_EAGER + 1, "probe %d at %d", i, at[i]);
    cr_assert(c.stopped[0], "then it stops for good");
    costs(&cost, 33, 10, 0, 0); /* rows for free, and every draft kept: still nothing */
    int first;
    cr_assert_eq(plan_many(&c, &cost, 0, 8, 100, 1, 1, &first), 0, "a stopped class never drafts again");
    /* one that paid once probes at the usual intervals before it stops */
    spec_ctl_init(&c);
    c.probe_limit[0] = SPEC_DRAFT_PROBES;
    costs(&cost, 33, 10, 3, 0);
    cost.draft_ms = 0.5;
    plan_many(&c, &cost, 0, 8, 20, 1, 1, &first);
    cr_assert(c.paid[0], "every draft kept: drafting paid");
    n = draft_plans(&c, &cost, 400, at, 8);
    int gap = n >= 2 ? at[(n - 1) % 8] - at[(n - 2) % 8] : -1;
    cr_assert(gap > SPEC_PROBE_FIRST, "%d drafts, the last two %d apart", n, gap);
    cr_assert(c.stopped[0] && !c.stopped[1], "it stops for good too, and only its own class");
}

Test(spec_ctl, lookup_matches_learn_their_acceptance_by_length) {
    spec_ctl c;
    spec_ctl_init(&c);
    spec_cost cost;
    costs(&cost, 33, 10, 3, 0);
    int first;
    plan_many(&c, &cost, 2, 8, 100, 0, 1, &first); /* 2-token matches: rejected */
    plan_many(&c, &cost, 8, 8, 100, 1, 1, &first); /* 8+-token matches: kept */
    int short_d = plan_many(&c, &cost, 2, 8, 16, 0, 1, &first);
    int long_d = plan_many(&c, &cost, 8, 8, 16, 1, 1, &first);
    cr_assert(short_d <= 1 && long_d == 16 * 8, "short matches %d drafts (a probe at most), long ones %d", short_d, long_d);
    cr_assert_eq(spec_ctl_accept(&c, 99), spec_ctl_accept(&c, 8), "classes past the table share the last");
}

Test(spec_ctl, a_batch_drafts_only_where_rows_are_still_cheap) {
    spec_ctl c;
    spec_ctl_init(&c);
    spec_cost cost;
    costs(&cost, 64, 10, 0, 8); /* flat to 8 rows, then proportional */
    for (int i = 0; i < 20; i++) spec_ctl_learn(&c, 0, 4, 3); /* ~3/4 kept */
    spec_step lone = {&cost, 1, 1};
    int k1 = spec_ctl_plan(&c, 0, &lone, 16);
    cr_assert(k1 >= 4 && k1 <= 7, "a lone sequence drafts into the free rows (%d)", k1);
    cr_assert(lone.rows == 1 + k1 && lone.tokens > 2 && lone.tokens < 1 + k1, "the batch now expects %.2f tokens",
              lone.tokens);
    spec_step full = {&cost, 8, 8}; /* eight streams fill the free rows */
    cr_assert_eq(spec_ctl_plan(&c, 0, &full, 16), 0, "a full batch drafts nothing");
    cr_assert_not(c.backed[0], "which is not the acceptance's fault: no back-off");
    cr_assert(full.rows == 8 && full.tokens == 8);
    spec_step two = {&cost, 2, 2};
    int a = spec_ctl_plan(&c, 0, &two, 16), b = spec_ctl_plan(&c, 0, &two, 16);
    cr_assert(a > 0 && b >= 0 && two.rows == 2 + a + b && two.rows <= 9, "two streams share the free rows (%d, %d)", a, b);
}

Test(spec_ctl, a_slow_draft_model_drafts_less) {
    spec_ctl c1, c2;
    spec_ctl_init(&c1), spec_ctl_init(&c2);
    spec_cost fast, slow;
    costs(&fast, 33, 10, 0.5, 0);
    costs(&slow, 33, 10, 0.5, 0);
    for (int i = 0; i < 20; i++) spec_ctl_learn(&c1, 0, 4, 2), spec_ctl_learn(&c2, 0, 4, 2);
    spec_cost_learn_draft(&slow, 4, 4 * 6.0); /* 6 ms a drafted token, 60 % of a target step */
    spec_step a = {&fast, 1, 1}, b = {&slow, 1, 1};
    int ka = spec_ctl_plan(&c1, 0, &a, 8), kb = spec_ctl_plan(&c2, 0, &b, 8);
    cr_assert(ka > 0 && kb == 0, "a free draft %d tokens, a slow one %d", ka, kb);
}

Test(spec, an_adaptive_lookup_drafts_from_the_spec_s_own_measurements) {
    spec_params p;
    spec_params_default(&p);
    spec *s;
    attnd_err err;
    cr_assert_eq(spec_create(&s, &p, &err), ATTND_OK);
    int32_t h[40], out[SPEC_MAX_DRAFT];
    for (int i = 0; i < 40; i++) h[i] = i % 13; /* repeats: lookup has a long match */
    cr_assert_eq(spec_push(s, h, 40, &err), ATTND_OK);
    int n;
    cr_assert_eq(spec_draft(s, NULL, SPEC_MAX_DRAFT, out, &n, &err), ATTND_OK);
    cr_assert_eq(n, 0, "no step measured yet");
    for (int r = 1; r <= 9; r++) spec_time(s, r, 10 + 0.1 * r);
    cr_assert_gt(spec_costs(s)->ms[9], 0);
    cr_assert_eq(spec_draft(s, NULL, SPEC_MAX_DRAFT, out, &n, &err), ATTND_OK);
    cr_assert(n > 0 && n <= 8 && out[0] == 40 % 13, "%d drafted", n);
    spec_count(s, n, n);
    int64_t d, a;
    spec_totals(s, &d, &a);
    cr_assert(d == n && a == n);
    spec_destroy(s);
    p.fixed = true, p.draft_max = 5;
    cr_assert_eq(spec_create(&s, &p, &err), ATTND_OK);
    cr_assert_eq(spec_push(s, h, 40, &err), ATTND_OK);
    cr_assert_eq(spec_draft(s, NULL, SPEC_MAX_DRAFT, out, &n, &err), ATTND_OK);
    cr_assert_eq(n, 5, "fixed: draft_max whatever was measured");
    spec_destroy(s);
}

// ---- a random-weight model ----------------------------------------------------------------------

/* A rig of the default llama fixture with the given weights' seed (another seed: a poor draft). */
static void open_rig_kv(tiny_rig *r, uint64_t seed, kv_type kv) {
    tiny_spec sp = tiny_default("llama");
    sp.seed = seed;
    if (kv == KV_Q8_0 || kv == KV_Q4_0) sp.head_dim = 32; /* quantized KV tiles are 32 wide */
    tiny_rig_open(r, &sp, kv, 64);
}

static void open_rig(tiny_rig *r, uint64_t seed) { open_rig_kv(r, seed, KV_F32); }

/* Greedy generation of n tokens after prompt in a fresh sequence, with sp (NULL: plain). */
static int run_greedy(tiny_rig *r, spec *sp, const int32_t *prompt, int n_prompt, int n, int32_t *out,
                      engine_timings *tm, int *kv_len) {
    kv_seq *s;
    attnd_err err;
    cr_assert_eq(kv_seq_create(&s, r->pool, &err), ATTND_OK);
    engine_gen g = {.n_predict = n, .spec = sp};
    int n_out;
    cr_assert_eq(engine_generate(r->e, s, prompt, n_prompt, &g, out, &n_out, tm, &err), ATTND_OK, "%s", err.msg);
    *kv_len = kv_seq_len(s);
    kv_seq_destroy(s);
    return n_out;
}

/* Prompts: random, and random with its own first part repeated (so lookup matches). */
static int make_prompt(int k, int32_t *p, int V) {
    int n = 10 + 9 * k;
    tiny_random_tokens(p, n, V, 40 + (uint64_t)k);
    if (k % 2) {
        memcpy(p + n, p, sizeof(int32_t) * (size_t)n);
        n *= 2;
    }
    return n;
}

/* Every drafter of the list against plain greedy generation, prompt by prompt and length by length. */
static void greedy_equals_plain(tiny_rig *r, spec *const *drafters, int n_drafters, int64_t *drafted,
                                int64_t *accepted) {
    const int lengths[] = {0, 1, 2, 3, 9, 40};
    int32_t prompt[256], plain[64], fast[64];
    for (int k = 0; k < 4; k++) {
        int n_prompt = make_prompt(k, prompt, r->sp.n_vocab);
        for (int li = 0; li < (int)ATTND_ARRAY_LEN(lengths); li++) {
            engine_timings t0, t1;
            int kv0, kv1, n = lengths[li];
            int n0 = run_greedy(r, NULL, prompt, n_prompt, n, plain, &t0, &kv0);
            for (int d = 0; d < n_drafters; d++) {
                int n1 = run_greedy(r, drafters[d], prompt, n_prompt, n, fast, &t1, &kv1);
                cr_assert_eq(n1, n0, "drafter %d, prompt %d, n %d: %d tokens, plain %d", d, k, n, n1, n0);
                for (int i = 0; i < n0; i++)
                    cr_assert_eq(fast[i], plain[i], "drafter %d, prompt %d, n %d: token %d is %d, plain %d", d, k, n, i,
                                 fast[i], plain[i]);
                cr_assert_eq(kv1, kv0, "the sequence holds the prompt and all but the last token");
                cr_assert_eq(t1.n_decode, t0.n_decode);
                drafted[d] += t1.n_drafted, accepted[d] += t1.n_accepted;
            }
        }
    }
}

/* Rejected drafts are truncated out of quantized KV blocks too (q8_0, q4_0 tiles). */
static void greedy_on_random(kv_type kv) {
    tiny_rig r, poor;
    open_rig_kv(&r, 0, kv);
    open_rig(&poor, 77);
    attnd_err err;
    cr_assert_eq(spec_vocab_check(r.m, poor.m, &err), ATTND_OK, "%s", err.msg);
    spec *sp[5];
    spec_params p;
    spec_params_default(&p);
    p.draft_max = 8; /* adaptive: drafts as the (timed) costs say; only its output is checked */
    cr_assert_eq(spec_create(&sp[4], &p, &err), ATTND_OK);
    p.fixed = true, p.draft_max = 1;
    cr_assert_eq(spec_create(&sp[0], &p, &err), ATTND_OK);
    p.draft_max = SPEC_MAX_DRAFT;
    cr_assert_eq(spec_create(&sp[1], &p, &err), ATTND_OK);
    p.draft_max = 5, p.draft = r.e, p.draft_pool = r.pool, p.draft_min_p = 0; /* the target drafts itself */
    cr_assert_eq(spec_create(&sp[2], &p, &err), ATTND_OK, "%s", err.msg);
    p.draft = poor.e, p.draft_pool = poor.pool;
    cr_assert_eq(spec_create(&sp[3], &p, &err), ATTND_OK, "%s", err.msg);
    int64_t drafted[5] = {0}, accepted[5] = {0};
    greedy_equals_plain(&r, sp, 5, drafted, accepted);
    for (int d = 0; d < 4; d++) {
        int64_t a, b;
        spec_totals(sp[d], &a, &b);
        cr_assert(a == drafted[d] && b == accepted[d], "the totals count what the timings saw");
        cr_assert(drafted[d] > 0, "drafter %d drafted nothing", d);
    }
    cr_assert(accepted[0] > 0 && accepted[1] > 0, "lookup on repeated prompts keeps some drafts");
    cr_assert_eq(accepted[2], drafted[2], "the target as its own draft is always right");
    cr_assert(accepted[3] < drafted[3], "another model's drafts are sometimes rejected");
    for (int d = 0; d < 5; d++) spec_destroy(sp[d]);
    tiny_rig_close(&poor);
    tiny_rig_close(&r);
}

Test(spec, greedy_output_is_the_plain_output_on_a_random_model) {
    greedy_on_random(KV_F32);
    greedy_on_random(KV_Q8_0);
    greedy_on_random(KV_Q4_0);
}

/* Counts the rows an engine evaluates (the residual hook runs once per row and layer). */
static void count_rows(void *user, int entry, int layer, int pos, const float *x, int n_embd) {
    (void)entry, (void)pos, (void)x, (void)n_embd;
    if (layer == 0) ++*(int *)user;
}

Test(spec, a_draft_model_that_never_agrees_stops_and_runs_no_more_rows) {
    tiny_rig poor;
    open_rig(&poor, 77);
    int rows = 0;
    engine_set_attention_cb(poor.e, NULL, &rows);
    engine_set_residual_cb(poor.e, count_rows);
    spec_params p;
    spec_params_default(&p);
    p.draft = poor.e, p.draft_pool = poor.pool, p.draft_min_p = 0;
    spec *s;
    attnd_err err;
    cr_assert_eq(spec_create(&s, &p, &err), ATTND_OK, "%s", err.msg);
    /* a target step of 1 s, a row more 30 % of it: the draft's own (timed) steps weigh nothing */
    spec_cost cost;
    costs(&cost, 33, 1000, 300, 0);
    int32_t prompt[6] = {1, 5, 9, 2, 7, 3}, out[SPEC_MAX_DRAFT];
    cr_assert_eq(spec_push(s, prompt, 6, &err), ATTND_OK);
    int drafts = 0, rows_at_stop = -1, stop = -1;
    for (int i = 0; i < 60; i++) {
        spec_step st = {&cost, 1, 1};
        int n;
        cr_assert_eq(spec_draft(s, &st, 8, out, &n, &err), ATTND_OK, "%s", err.msg);
        drafts += n > 0;
        spec_count(s, n, 0); /* the target never agrees */
        int32_t next = 3 + i % 20;
        cr_assert_eq(spec_push(s, &next, 1, &err), ATTND_OK);
        if (spec_draft_stopped(s) && stop < 0) rows_at_stop = rows, stop = i;
    }
    cr_assert_eq(drafts, 1 + SPEC_DRAFT_PROBES, "its first draft and the probes (%d)", drafts);
    cr_assert_eq(stop, 1 + (SPEC_DRAFT_PROBES + 1) * (SPEC_PROBE_EAGER + 1), "stopped at plan %d", stop);
    cr_assert_gt(rows_at_stop, 6 + SPEC_DRAFT_PROBES, "it had caught up on the history (%d rows)", rows_at_stop);
    cr_assert_eq(rows, rows_at_stop, "the stopped draft model ran %d rows more", rows - rows_at_stop);
    cr_assert_eq(kv_pool_bytes_used(poor.pool), 0, "its KV sequence is gone");
    spec_reset(s);
    cr_assert_eq(spec_push(s, prompt, 6, &err), ATTND_OK);
    int n;
    spec_step st = {&cost, 1, 1};
    cr_assert_eq(spec_draft(s, &st, 8, out, &n, &err), ATTND_OK);
    cr_assert(n == 0 && rows == rows_at_stop, "not even for a new history");
    spec_destroy(s);
    tiny_rig_close(&poor);
}

/* Counts an engine's evaluations (its first row's first layer). */
static void count_evals(void *user, int entry, int layer, int pos, const float *x, int n_embd) {
    (void)pos, (void)x, (void)n_embd;
    if (layer == 0 && entry == 0) ++*(int *)user;
}

Test(spec, sequences_drafting_together_cost_one_evaluation_a_position) {
    tiny_rig d;
    open_rig(&d, 77); /* F32 weights: the same results whatever the batch */
    int evals = 0;
    engine_set_attention_cb(d.e, NULL, &evals);
    engine_set_residual_cb(d.e, count_evals);
    spec_params p;
    spec_params_default(&p);
    p.draft = d.e, p.draft_pool = d.pool, p.draft_min_p = 0, p.fixed = true, p.draft_max = 4;
    spec *one[3], *many[3];
    attnd_err err;
    spec_batch *b;
    cr_assert_eq(spec_batch_create(&b, d.e, 3, &err), ATTND_OK);
    int32_t hist[3][12];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(spec_create(&one[i], &p, &err), ATTND_OK);
        cr_assert_eq(spec_create(&many[i], &p, &err), ATTND_OK);
        for (int t = 0; t < 12; t++) hist[i][t] = (int32_t)(1 + (t * 7 + i * 5) % 40);
        spec_push(one[i], hist[i], 6 + 3 * i, &err), spec_push(many[i], hist[i], 6 + 3 * i, &err);
    }
    for (int round = 0; round < 2; round++) {
        int32_t a[3][SPEC_MAX_DRAFT], bb[3][SPEC_MAX_DRAFT], *outs[3] = {bb[0], bb[1], bb[2]};
        int na[3], k[3];
        for (int i = 0; i < 3; i++) cr_assert_eq(spec_draft(one[i], NULL, 4, a[i], &na[i], &err), ATTND_OK);
        int alone = evals;
        for (int i = 0; i < 3; i++) k[i] = spec_plan(many[i], NULL, 4);
        cr_assert(k[0] == 4 && k[1] == 4 && k[2] == 4, "fixed: each plans draft_max");
        cr_assert_eq(spec_draft_batch(b, many, k, outs, 3, NULL, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(alone, 3 * 4 * (round + 1) + 4 * round, "alone: a catch-up and 3 steps each");
        cr_assert_eq(evals - alone, 4, "together: one catch-up and one step a position (%d)", evals - alone);
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(k[i], na[i], "sequence %d: %d drafts, alone %d", i, k[i], na[i]);
            cr_assert_eq(memcmp(a[i], bb[i], sizeof(int32_t) * (size_t)k[i]), 0, "sequence %d: other drafts", i);
        }
        /* the target kept two drafts of the first, none of the others, then its own token */
        int32_t next[3] = {a[0][0], a[0][1], 9};
        spec_push(one[0], next, 3, &err), spec_push(many[0], next, 3, &err);
        for (int i = 1; i < 3; i++) spec_push(one[i], &next[2], 1, &err), spec_push(many[i], &next[2], 1, &err);
    }
    for (int i = 0; i < 3; i++) spec_destroy(one[i]), spec_destroy(many[i]);
    spec_batch_destroy(b);
    tiny_rig_close(&d);
}

Test(spec, a_draft_with_another_vocabulary_is_refused_with_a_message) {
    tiny_rig r, other;
    open_rig(&r, 0);
    tiny_spec sp = tiny_default("llama");
    sp.n_vocab = 50;
    tiny_rig_open(&other, &sp, KV_F32, 8);
    attnd_err err;
    cr_assert_eq(spec_vocab_check(r.m, other.m, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "vocabulary differs"), "%s", err.msg);
    char path[1024];
    model *sotu;
    cr_assert_eq(model_load(&sotu, test_model_path("attnd-sotu.gguf", path, sizeof path), &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(spec_vocab_check(sotu, r.m, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "vocabulary differs"), "%s", err.msg);
    model_destroy(sotu);
    tiny_rig_close(&other);
    tiny_rig_close(&r);
}

// ---- the target's distribution under sampling ---------------------------------------------------

#define T_SAMPLE 0.7f

/* p[v] ∝ exp(logits[v] / T): the sampler's distribution with every truncation off. */
static void softmax_t(const float *l, int V, double *p) {
    double m = -INFINITY, z = 0;
    for (int v = 0; v < V; v++) m = fmax(m, l[v]);
    for (int v = 0; v < V; v++) z += p[v] = exp((l[v] - m) / T_SAMPLE);
    for (int v = 0; v < V; v++) p[v] /= z;
}

/* The target's distribution after prompt + tail (n_tail tokens), evaluated in a forked sequence. */
static void dist_after(tiny_rig *r, kv_seq *base, const int32_t *tail, int n_tail, float *lg, double *p) {
    kv_seq *s;
    cr_assert_eq(kv_seq_fork(&s, base, NULL), ATTND_OK);
    for (int i = 0; i < n_tail; i++) {
        batch_entry b = {s, tail[i], kv_seq_len(s), true};
        cr_assert_eq(engine_eval(r->e, &b, 1, lg, NULL), ATTND_OK);
    }
    softmax_t(lg, r->sp.n_vocab, p);
    kv_seq_destroy(s);
}

/* Pearson's statistic of counts (n draws) against probabilities, cells under 5 expected pooled;
 * *df receives the degrees of freedom. */
static double chi_square(const int *count, const double *p, int V, int n, int *df) {
    double x2 = 0, pool_o = 0, pool_e = 0;
    int cells = 0;
    for (int v = 0; v < V; v++) {
        double e = p[v] * n;
        if (e < 5) {
            pool_o += count[v], pool_e += e;
            continue;
        }
        x2 += (count[v] - e) * (count[v] - e) / e, cells++;
    }
    if (pool_e > 0) x2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e, cells++;
    *df = cells - 1;
    return x2;
}

static int32_t pick_gen(void *user, const float *logits) {
    gen_token t;
    gen_next(user, logits, NULL, &t);
    return t.id;
}

Test(spec, sampled_tokens_keep_the_target_distribution) {
    tiny_rig r;
    open_rig(&r, 0);
    int V = r.sp.n_vocab, N = 6000;
    int32_t prompt[60];
    tiny_random_tokens(prompt, 60, V, 3);
    float *lg = malloc(sizeof(float) * V);
    double *p1 = malloc(sizeof(double) * V), *p2 = malloc(sizeof(double) * V * V), *m2 = calloc(V, sizeof(double));
    double *m3 = calloc(V, sizeof(double)), *p3 = malloc(sizeof(double) * V);
    kv_seq *base;
    cr_assert_eq(kv_seq_create(&base, r.pool, NULL), ATTND_OK);
    batch_entry b[60];
    for (int i = 0; i < 60; i++) b[i] = (batch_entry){base, prompt[i], i, i == 59};
    cr_assert_eq(engine_eval(r.e, b, 60, lg, NULL), ATTND_OK);
    softmax_t(lg, V, p1);
    /* exact marginals of the second and third tokens: sum over the first (and second) */
    for (int a = 0; a < V; a++) {
        dist_after(&r, base, (int32_t[]){a}, 1, lg, p2 + (size_t)a * V);
        for (int c = 0; c < V; c++) {
            double pac = p1[a] * p2[(size_t)a * V + c];
            m2[c] += pac;
            dist_after(&r, base, (int32_t[]){a, c}, 2, lg, p3);
            for (int v = 0; v < V; v++) m3[v] += pac * p3[v];
        }
    }
    spec_params sp_p;
    spec_params_default(&sp_p);
    sp_p.draft_max = 4, sp_p.draft = r.e, sp_p.draft_pool = r.pool, sp_p.draft_min_p = 0; /* greedy self-draft */
    sp_p.fixed = true;
    spec *sp;
    attnd_err err;
    cr_assert_eq(spec_create(&sp, &sp_p, &err), ATTND_OK);
    sampler_params smp = {.temperature = T_SAMPLE, .top_p = 1, .typical_p = 1, .repeat_penalty = 1, .repeat_last_n = 64};
    int *c2 = calloc(V, sizeof(int)), *c3 = calloc(V, sizeof(int)), *wrong = calloc(V, sizeof(int));
    int64_t drafted = 0, kept = 0;
    for (int i = 0; i < N; i++) {
        smp.seed = 1000 + (uint64_t)i;
        gen *g;
        gen_params gp = {.sp = smp, .top_logprobs = -1};
        cr_assert_eq(gen_create(&g, &gp, V, NULL, prompt, 60, &err), ATTND_OK, "%s", err.msg);
        kv_seq *s;
        cr_assert_eq(kv_seq_create(&s, r.pool, NULL), ATTND_OK);
        engine_gen eg = {.n_predict = 3, .pick = pick_gen, .pick_user = g, .spec = sp};
        int32_t out[3];
        int n_out;
        engine_timings tm;
        cr_assert_eq(engine_generate(r.e, s, prompt, 60, &eg, out, &n_out, &tm, &err), ATTND_OK, "%s", err.msg);
        cr_assert_eq(n_out, 3);
        c2[out[1]]++, c3[out[2]]++;
        drafted += tm.n_drafted, kept += tm.n_accepted;
        /* the control: a rule that keeps every draft of the second token (the argmax) */
        const double *row = p2 + (size_t)out[0] * V;
        int d = 0;
        for (int v = 1; v < V; v++) d = row[v] > row[d] ? v : d;
        wrong[d]++;
        kv_seq_destroy(s);
        gen_destroy(g);
    }
    int df2, df3, dfw;
    double x2 = chi_square(c2, m2, V, N, &df2), x3 = chi_square(c3, m3, V, N, &df3);
    double xw = chi_square(wrong, m2, V, N, &dfw);
    /* about 5 standard deviations above the mean df (p < 1e-5 in the normal approximation) */
    double lim2 = df2 + 5 * sqrt(2.0 * df2), lim3 = df3 + 5 * sqrt(2.0 * df3);
    cr_assert(drafted >= N && kept > N / 20, "the draws exercised drafting (%lld drafted, %lld kept)",
              (long long)drafted, (long long)kept);
    cr_assert(kept < drafted, "and rejection (%lld of %lld kept)", (long long)kept, (long long)drafted);
    cr_log_info("chi-square: second token %.1f, third %.1f, control %.1f (df %d, %d, %d)", x2, x3, xw, df2, df3, dfw);
    cr_assert(x2 < lim2, "second token: chi-square %.1f, df %d (limit %.1f)", x2, df2, lim2);
    cr_assert(x3 < lim3, "third token: chi-square %.1f, df %d (limit %.1f)", x3, df3, lim3);
    cr_assert(xw > lim2, "the control must fail: chi-square %.1f, df %d (limit %.1f)", xw, dfw, lim2);
    spec_destroy(sp);
    kv_seq_destroy(base);
    free(c2), free(c3), free(wrong), free(lg), free(p1), free(p2), free(p3), free(m2), free(m3);
    tiny_rig_close(&r);
}

// ---- the shipped model: the whole pipeline ------------------------------------------------------

typedef struct piped {
    gen *g;
    stop_reason why;
    buf text;
    token_logprob lp[128][4]; /* chosen + 3 alternatives per token */
    int n;
} piped;

static int32_t pick_piped(void *user, const float *logits) {
    piped *q = user;
    gen_token t;
    q->why = gen_next(q->g, logits, q->lp[q->n] + 1, &t);
    q->lp[q->n][0] = (token_logprob){t.id, t.logprob};
    q->n++;
    buf_append(&q->text, t.text, t.n_text);
    return t.id;
}

static bool go_on(void *user, int32_t id) {
    (void)id;
    return ((piped *)user)->why == STOP_NONE;
}

typedef struct sotu {
    model *m, *dm;
    engine *e, *de;
    kv_pool *pool, *dpool;
    tokenizer *tok;
    grammar_vocab *gv;
} sotu;

/* target: the shipped model (F16) or a quantized variant of it; the draft is its Q2_K copy (a
 * coarse one: it disagrees often enough that both verification paths are taken). */
static void sotu_open(sotu *o, const char *target) {
    char path[1024];
    attnd_err err;
    memset(o, 0, sizeof(*o));
    cr_assert_eq(model_load(&o->m, test_model_path(target, path, sizeof path), &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(model_load(&o->dm, test_model_path("attnd-sotu-Q2_K.gguf", path, sizeof path), &err), ATTND_OK, "%s",
                 err.msg);
    cr_assert_eq(spec_vocab_check(o->m, o->dm, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(&o->e, o->m, 64, 2, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(engine_create(&o->de, o->dm, 64, 2, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_pool_create(&o->pool, o->m, (size_t)256 << 20, KV_F16, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(kv_pool_create(&o->dpool, o->dm, (size_t)256 << 20, KV_F16, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(tok_load(&o->tok, model_gguf(o->m), &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(grammar_vocab_from_tokenizer(&o->gv, o->tok, &err), ATTND_OK, "%s", err.msg);
}

static void sotu_close(sotu *o) {
    grammar_vocab_destroy(o->gv);
    tok_destroy(o->tok);
    kv_pool_destroy(o->dpool);
    kv_pool_destroy(o->pool);
    engine_destroy(o->de);
    engine_destroy(o->e);
    model_destroy(o->dm);
    model_destroy(o->m);
}

/* One generation through the whole pipeline; q receives tokens' logprobs and the text. */
static void run_piped(sotu *o, spec *sp, const gen_params *gp, const char *text, int n, piped *q, int32_t *out,
                      int *n_out, engine_timings *tm) {
    attnd_err err;
    int32_t *ids;
    size_t n_ids;
    cr_assert_eq(tok_encode(o->tok, text, strlen(text), true, false, &ids, &n_ids, &err), ATTND_OK);
    memset(q, 0, sizeof(*q));
    cr_assert_eq(gen_create(&q->g, gp, model_info_get(o->m)->n_vocab, o->tok, ids, (int)n_ids, &err), ATTND_OK, "%s",
                 err.msg);
    kv_seq *s;
    cr_assert_eq(kv_seq_create(&s, o->pool, &err), ATTND_OK);
    engine_gen g = {.n_predict = n, .pick = pick_piped, .pick_user = q, .on_token = go_on, .token_user = q, .spec = sp};
    cr_assert_eq(engine_generate(o->e, s, ids, (int)n_ids, &g, out, n_out, tm, &err), ATTND_OK, "%s", err.msg);
    const char *tail;
    size_t nt;
    if (q->why == STOP_NONE) gen_finish(q->g, &tail, &nt), buf_append(&q->text, tail, nt);
    kv_seq_destroy(s);
    gen_destroy(q->g);
    free(ids);
}

static const char *const PROMPTS[] = {
    "Repeat this text: We will build the roads and bridges of America. We will build the roads and bridges of America.",
    "The state of the union is",
    "Tonight I ask the Congress to",
};

/* Generations of each prompt, plain and with each drafter, must agree token for token. */
static void pipeline_equals_plain(sotu *o, spec *const *sp, int n_sp, const gen_params *gp, int n) {
    static piped a, b;
    int32_t ta[128], tb[128];
    for (int k = 0; k < (int)ATTND_ARRAY_LEN(PROMPTS); k++) {
        int na, nb;
        engine_timings tm;
        run_piped(o, NULL, gp, PROMPTS[k], n, &a, ta, &na, &tm);
        for (int d = 0; d < n_sp; d++) {
            run_piped(o, sp[d], gp, PROMPTS[k], n, &b, tb, &nb, &tm);
            cr_assert_eq(nb, na, "prompt %d, drafter %d: %d tokens, plain %d", k, d, nb, na);
            cr_assert_eq(memcmp(ta, tb, sizeof(int32_t) * (size_t)na), 0, "prompt %d, drafter %d: tokens differ", k, d);
            cr_assert_eq(b.why, a.why);
            cr_assert_eq(b.text.len, a.text.len, "prompt %d drafter %d: \"%.*s\" vs \"%.*s\"", k, d, (int)b.text.len,
                         b.text.p, (int)a.text.len, a.text.p);
            cr_assert_eq(memcmp(a.text.p, b.text.p, a.text.len), 0);
            cr_assert_eq(memcmp(a.lp, b.lp, sizeof(a.lp[0]) * (size_t)na), 0, "log-probabilities agree");
            buf_free(&b.text);
        }
        buf_free(&a.text);
    }
}

/* Prompt lookup (draft_max 8 when max is 0) and the Q2_K draft (6), or both at max; fixed, so
 * that both paths (kept, rejected) are taken whatever the machine's costs, and with no
 * draft_min_p, so that the draft also proposes the tokens it is unsure of (with 0.3 it proposed
 * only what the shipped model then kept: 152 of 152). */
static void make_drafters(sotu *o, spec **sp, int max) {
    spec_params p;
    spec_params_default(&p);
    p.fixed = true;
    attnd_err err;
    if (max) p.draft_max = max;
    cr_assert_eq(spec_create(&sp[0], &p, &err), ATTND_OK);
    p.draft = o->de, p.draft_pool = o->dpool, p.draft_max = max ? max : 6, p.draft_min_p = 0;
    cr_assert_eq(spec_create(&sp[1], &p, &err), ATTND_OK, "%s", err.msg);
}

/* Greedy generations with and without speculation, bit for bit. A Q8_0 target runs with
 * draft_max 2: on AVX-512 its batches of 4+ tokens take the tile kernels, which add a row's
 * blocks in another float order than the row kernels of 1-3 tokens (docs/kernels.md), so only
 * verification batches of at most 3 are bit-identical to decode steps there (docs/sampling.md). */
static void greedy_on_shipped(const char *target, int max) {
    sotu o;
    sotu_open(&o, target);
    spec *sp[2];
    make_drafters(&o, sp, max);
    const char *stops[] = {"roads and", "\n\n"};
    gen_params gp = {.sp = {.temperature = 0, .top_p = 1, .typical_p = 1, .repeat_penalty = 1, .repeat_last_n = 64},
                     .top_logprobs = 3};
    const int lengths[] = {1, 2, 5, test_size(48, 24)}; /* shorter runs under the sanitizers */
    for (int li = 0; li < 4; li++) pipeline_equals_plain(&o, sp, 2, &gp, lengths[li]);
    gp.stops = stops, gp.n_stops = 2;
    pipeline_equals_plain(&o, sp, 2, &gp, test_size(64, 32));
    for (int d = 0; d < 2; d++) {
        int64_t dr, ac;
        spec_totals(sp[d], &dr, &ac);
        cr_assert(ac > 0 && dr > ac, "drafter %d: %lld of %lld kept: both paths taken", d, (long long)ac,
                  (long long)dr);
        spec_destroy(sp[d]);
    }
    sotu_close(&o);
}

Test(spec, greedy_output_is_the_plain_output_on_the_shipped_model, .timeout = 300) {
    greedy_on_shipped("attnd-sotu.gguf", 0);
    greedy_on_shipped("attnd-sotu-Q8_0.gguf", 2);
}

Test(spec, seeded_sampling_with_grammar_penalties_and_stops_is_the_plain_output, .timeout = 300) {
    sotu o;
    sotu_open(&o, "attnd-sotu.gguf");
    spec *sp[2];
    make_drafters(&o, sp, 0);
    grammar *gr;
    attnd_err err;
    const char *src = "root ::= ( [a-z ]+ \".\" )+";
    cr_assert_eq(grammar_compile(&gr, src, strlen(src), &err), ATTND_OK, "%s", err.msg);
    const char *stops[] = {"America"};
    gen_params gp = {.sp = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .typical_p = 1,
                            .repeat_penalty = 1.1f, .repeat_last_n = 64, .presence_penalty = 0.2f, .seed = 7},
                     .top_logprobs = 3, .stops = stops, .n_stops = 1};
    pipeline_equals_plain(&o, sp, 2, &gp, test_size(48, 24));
    gp.grammar = gr, gp.gvocab = o.gv, gp.sp.seed = 8;
    pipeline_equals_plain(&o, sp, 2, &gp, test_size(48, 24));
    grammar_unref(gr);
    for (int d = 0; d < 2; d++) spec_destroy(sp[d]);
    sotu_close(&o);
}
