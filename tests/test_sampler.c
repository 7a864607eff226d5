/*
 * test_sampler.c — the sampling chain, log-probabilities and stop-string matcher
 * (attnd/sampler.h).
 *
 * Deterministic tests compare with a straightforward reference (argmax, full sort, log-softmax
 * in double, strstr on the whole text). Statistical tests draw 10 000 tokens with a fixed seed
 * and apply a chi-square test at a generous threshold; with the seed fixed they are repeatable,
 * and the threshold is far enough from the expected value (the degrees of freedom) that a correct
 * sampler passes with any seed.
 */
#define _GNU_SOURCE /* qsort_r */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/sampler.h"
#include "attnd/stop.h"

// ---- helpers --------------------------------------------------------------------------------

/* A small deterministic generator for test data (not the sampler's). */
static uint64_t test_rng_state = 12345;
static double test_uniform(void) {
    test_rng_state = test_rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(test_rng_state >> 11) * 0x1.0p-53;
}

static void random_logits(float *l, int n, float scale) {
    for (int i = 0; i < n; i++) l[i] = (float)((test_uniform() * 2 - 1) * scale);
}

/* Sampler params with every truncation off: draws follow softmax(logits / temperature). */
static sampler_params plain(float temperature, uint64_t seed) {
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.seed = seed;
    return p;
}

static sampler *make(const sampler_params *p, int n_vocab) {
    sampler *s = NULL;
    attnd_err err = {{0}};
    attnd_status st = sampler_create(&s, p, n_vocab, &err);
    cr_assert_eq(st, ATTND_OK, "sampler_create: %s", err.msg);
    return s;
}

static int ref_argmax(const float *l, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

/* Draws n_draws tokens and counts them per id. */
static void draw_counts(sampler *s, const float *logits, int n_vocab, int n_draws, int *counts) {
    memset(counts, 0, sizeof(int) * (size_t)n_vocab);
    for (int i = 0; i < n_draws; i++) {
        int32_t id = sampler_sample(s, logits);
        cr_assert(id >= 0 && id < n_vocab, "sampled id %d out of range", id);
        counts[id]++;
    }
}

/* Pearson chi-square of counts against expected probabilities (over ids with expected > 0;
 * a count where the expectation is 0 fails the test outright). */
static double chi_square(const int *counts, const double *expect, int n, int n_draws) {
    double chi = 0;
    for (int i = 0; i < n; i++) {
        if (expect[i] == 0) {
            cr_assert_eq(counts[i], 0, "id %d has probability 0 but was drawn %d times", i, counts[i]);
            continue;
        }
        double e = expect[i] * n_draws;
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi;
}

static void expect_softmax(double *out, const float *logits, int n, double temperature) {
    double max = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        if (logits[i] > max) max = logits[i];
    for (int i = 0; i < n; i++) sum += out[i] = exp((logits[i] - max) / temperature);
    for (int i = 0; i < n; i++) out[i] /= sum;
}

// ---- parameter validation -------------------------------------------------------------------

static void assert_rejected(const sampler_params *p, int n_vocab, const char *name) {
    attnd_err err = {{0}};
    cr_assert_eq(sampler_params_validate(p, n_vocab, &err), ATTND_ERR_INVALID, "%s accepted", name);
    cr_assert(strstr(err.msg, name), "message '%s' does not name %s", err.msg, name);
    sampler *s = (sampler *)1;
    cr_assert_eq(sampler_create(&s, p, n_vocab, NULL), ATTND_ERR_INVALID);
    cr_assert_null(s);
}

Test(sampler, defaults_are_valid_and_documented) {
    sampler_params p;
    sampler_params_default(&p);
    cr_assert_eq(sampler_params_validate(&p, 32000, NULL), ATTND_OK);
    cr_assert_float_eq(p.temperature, 0.8f, 1e-6);
    cr_assert_eq(p.top_k, 40);
    cr_assert_float_eq(p.top_p, 0.95f, 1e-6);
    cr_assert_float_eq(p.min_p, 0.05f, 1e-6);
    cr_assert_eq(p.repeat_last_n, 64);
}

Test(sampler, bad_values_are_rejected_with_their_name) {
    sampler_params p;
    sampler_params_default(&p);
    p.top_k = -1;
    assert_rejected(&p, 100, "top_k");
    sampler_params_default(&p);
    p.top_p = 1.5f;
    assert_rejected(&p, 100, "top_p");
    p.top_p = 0;
    assert_rejected(&p, 100, "top_p");
    p.top_p = NAN;
    assert_rejected(&p, 100, "top_p");
    sampler_params_default(&p);
    p.temperature = NAN;
    assert_rejected(&p, 100, "temperature");
    p.temperature = -0.5f;
    assert_rejected(&p, 100, "temperature");
    p.temperature = INFINITY;
    assert_rejected(&p, 100, "temperature");
    sampler_params_default(&p);
    p.min_p = 1.01f;
    assert_rejected(&p, 100, "min_p");
    p.min_p = -0.1f;
    assert_rejected(&p, 100, "min_p");
    sampler_params_default(&p);
    p.typical_p = 0;
    assert_rejected(&p, 100, "typical_p");
    sampler_params_default(&p);
    p.repeat_penalty = 0;
    assert_rejected(&p, 100, "repeat_penalty");
    p.repeat_penalty = NAN;
    assert_rejected(&p, 100, "repeat_penalty");
    sampler_params_default(&p);
    p.repeat_last_n = -2;
    assert_rejected(&p, 100, "repeat_last_n");
    sampler_params_default(&p);
    p.presence_penalty = NAN;
    assert_rejected(&p, 100, "presence_penalty");
    sampler_params_default(&p);
    p.frequency_penalty = INFINITY;
    assert_rejected(&p, 100, "frequency_penalty");
}

Test(sampler, logit_bias_outside_vocabulary_or_not_a_number_is_rejected) {
    sampler_params p;
    sampler_params_default(&p);
    logit_bias b[2] = {{3, 1.0f}, {100, 2.0f}};
    p.bias = b;
    p.n_bias = 2;
    assert_rejected(&p, 100, "logit_bias");
    b[1].id = -1;
    assert_rejected(&p, 100, "logit_bias");
    b[1] = (logit_bias){99, NAN};
    assert_rejected(&p, 100, "logit_bias");
    b[1] = (logit_bias){99, INFINITY};
    assert_rejected(&p, 100, "logit_bias");
    b[1] = (logit_bias){99, -INFINITY};
    cr_assert_eq(sampler_params_validate(&p, 100, NULL), ATTND_OK);
}

Test(sampler, banning_every_token_is_rejected) {
    logit_bias b[4] = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}, {1, -INFINITY}};
    sampler_params p;
    sampler_params_default(&p);
    p.bias = b;
    p.n_bias = 4;
    assert_rejected(&p, 3, "logit_bias");
    cr_assert_eq(sampler_params_validate(&p, 4, NULL), ATTND_OK); /* id 3 is still allowed */
}

Test(sampler, edge_values_are_accepted_not_clamped) {
    sampler_params p = plain(0, 1);
    p.top_k = 1000; /* more than the vocabulary: keeps everything */
    p.min_p = 1;
    p.typical_p = 1;
    p.repeat_last_n = -1;
    p.presence_penalty = -3;
    cr_assert_eq(sampler_params_validate(&p, 10, NULL), ATTND_OK);
    cr_assert_eq(sampler_params_validate(&p, 0, NULL), ATTND_ERR_INVALID);
}

// ---- greedy ---------------------------------------------------------------------------------

Test(sampler, temperature_zero_is_argmax) {
    enum { V = 1000 };
    static float l[V];
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0;
    sampler *s = make(&p, V);
    for (int t = 0; t < 200; t++) {
        random_logits(l, V, 10);
        cr_assert_eq(sampler_sample(s, l), ref_argmax(l, V));
    }
    sampler_destroy(s);
}

Test(sampler, greedy_ties_go_to_the_lowest_id) {
    float l[6] = {1, 3, 2, 3, 3, 0};
    sampler_params p = plain(0, 0);
    sampler *s = make(&p, 6);
    cr_assert_eq(sampler_sample(s, l), 1);
    sampler_destroy(s);
    p = plain(5.0f, 9);
    p.top_k = 1;
    s = make(&p, 6);
    for (int i = 0; i < 100; i++) cr_assert_eq(sampler_sample(s, l), 1);
    sampler_destroy(s);
}

/* A sampler with p draws the argmax of each of `rounds` random logit vectors over n_vocab ids. */
static void expect_argmax_draws(const sampler_params *p, int n_vocab, int rounds) {
    sampler *s = make(p, n_vocab);
    float *l = malloc(sizeof(float) * (size_t)n_vocab);
    for (int r = 0; r < rounds; r++) {
        random_logits(l, n_vocab, 3);
        cr_assert_eq(sampler_sample(s, l), ref_argmax(l, n_vocab), "temperature %g", p->temperature);
    }
    free(l);
    sampler_destroy(s);
}

Test(sampler, top_k_one_is_argmax_at_any_temperature) {
    const float temps[] = {0.01f, 0.5f, 1.0f, 3.0f, 100.0f};
    for (size_t t = 0; t < ATTND_ARRAY_LEN(temps); t++) {
        sampler_params p = plain(temps[t], 42 + t);
        p.top_k = 1;
        expect_argmax_draws(&p, 500, 100);
    }
}

Test(sampler, a_vanishing_temperature_is_argmax) {
    const float temps[] = {1e-45f, 1e-30f, 1e-8f};
    for (size_t t = 0; t < ATTND_ARRAY_LEN(temps); t++) {
        sampler_params p = plain(temps[t], 4);
        expect_argmax_draws(&p, 300, 50);
    }
}

Test(sampler, the_logits_are_not_modified) {
    float l[5] = {1, 2, 3, 4, 5}, copy[5];
    memcpy(copy, l, sizeof(l));
    logit_bias b = {4, -INFINITY};
    sampler_params p;
    sampler_params_default(&p);
    p.repeat_penalty = 1.5f;
    p.bias = &b;
    p.n_bias = 1;
    sampler *s = make(&p, 5);
    sampler_accept(s, 3);
    for (int i = 0; i < 50; i++) sampler_sample(s, l);
    cr_assert_arr_eq(l, copy, sizeof(l));
    sampler_destroy(s);
}

// ---- distributions --------------------------------------------------------------------------

/* 10 000 draws; df = 5; P(chi2 > 30) < 2e-5 for a correct sampler. */
Test(sampler, draws_follow_the_softmax) {
    const double probs[6] = {0.4, 0.25, 0.15, 0.1, 0.06, 0.04};
    float l[6];
    for (int i = 0; i < 6; i++) l[i] = (float)log(probs[i]) + 7.0f; /* shift: softmax-invariant */
    sampler_params p = plain(1.0f, 2024);
    sampler *s = make(&p, 6);
    int counts[6];
    draw_counts(s, l, 6, 10000, counts);
    double chi = chi_square(counts, probs, 6, 10000);
    cr_assert_lt(chi, 30.0, "chi-square %.2f: counts %d %d %d %d %d %d", chi, counts[0], counts[1], counts[2],
                 counts[3], counts[4], counts[5]);
    sampler_destroy(s);
}

Test(sampler, temperature_reshapes_the_softmax) {
    const float l[5] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f};
    const float temps[] = {0.5f, 2.0f};
    for (size_t t = 0; t < 2; t++) {
        double expect[5];
        expect_softmax(expect, l, 5, temps[t]);
        sampler_params p = plain(temps[t], 77);
        sampler *s = make(&p, 5);
        int counts[5];
        draw_counts(s, l, 5, 10000, counts);
        double chi = chi_square(counts, expect, 5, 10000);
        cr_assert_lt(chi, 30.0, "temperature %g: chi-square %.2f", temps[t], chi);
        sampler_destroy(s);
    }
}

Test(sampler, top_k_never_emits_excluded_ids_and_renormalises) {
    enum { V = 200, K = 5 };
    float l[V];
    random_logits(l, V, 2);
    /* Reference: the K best ids by full sort. */
    int order[V];
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < K; i++)
        for (int j = i + 1; j < V; j++)
            if (l[order[j]] > l[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    float kept[V];
    for (int i = 0; i < V; i++) kept[i] = -INFINITY;
    for (int i = 0; i < K; i++) kept[order[i]] = l[order[i]];
    double expect[V];
    expect_softmax(expect, kept, V, 1.0);
    sampler_params p = plain(1.0f, 5);
    p.top_k = K;
    sampler *s = make(&p, V);
    int counts[V];
    draw_counts(s, l, V, 10000, counts);
    double chi = chi_square(counts, expect, V, 10000); /* fails on any excluded id */
    cr_assert_lt(chi, 25.0, "chi-square %.2f (df 4)", chi);
    sampler_destroy(s);
}

Test(sampler, top_p_keeps_the_smallest_set_reaching_p) {
    const double probs[6] = {0.5, 0.2, 0.15, 0.1, 0.04, 0.01};
    float l[6];
    for (int i = 0; i < 6; i++) l[i] = (float)log(probs[i]);
    sampler_params p = plain(1.0f, 11);
    p.top_p = 0.8f; /* 0.5 + 0.2 < 0.8 <= 0.5 + 0.2 + 0.15 */
    sampler *s = make(&p, 6);
    int counts[6];
    draw_counts(s, l, 6, 10000, counts);
    const double expect[6] = {0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85, 0, 0, 0};
    double chi = chi_square(counts, expect, 6, 10000);
    cr_assert_lt(chi, 25.0, "chi-square %.2f (df 2)", chi);
    sampler_destroy(s);
}

Test(sampler, min_p_drops_tokens_below_the_fraction_of_the_best) {
    const double probs[5] = {0.5, 0.3, 0.1, 0.06, 0.04};
    float l[5];
    for (int i = 0; i < 5; i++) l[i] = (float)log(probs[i]);
    sampler_params p = plain(1.0f, 13);
    p.min_p = 0.15f; /* threshold 0.075: keeps 0.5, 0.3, 0.1 */
    sampler *s = make(&p, 5);
    int counts[5];
    draw_counts(s, l, 5, 10000, counts);
    const double expect[5] = {0.5 / 0.9, 0.3 / 0.9, 0.1 / 0.9, 0, 0};
    double chi = chi_square(counts, expect, 5, 10000);
    cr_assert_lt(chi, 25.0, "chi-square %.2f (df 2)", chi);
    sampler_destroy(s);
}

/* probs 1/2, 1/4, 1/8, 1/8: entropy 1.75 bits; surprisals 1, 2, 3, 3 bits; distances 0.75,
 * 0.25, 1.25, 1.25. typical order: id 1, id 0, id 2, id 3. */
Test(sampler, typical_p_keeps_tokens_nearest_the_entropy) {
    const float l[4] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f)};
    sampler_params p = plain(1.0f, 17);
    p.typical_p = 0.2f; /* id 1 alone (mass 0.25) -- not the most likely token */
    sampler *s = make(&p, 4);
    for (int i = 0; i < 200; i++) cr_assert_eq(sampler_sample(s, l), 1);
    sampler_destroy(s);
    p.typical_p = 0.7f; /* ids 1 and 0 (mass 0.75) */
    s = make(&p, 4);
    int counts[4];
    draw_counts(s, l, 4, 10000, counts);
    const double expect[4] = {0.5 / 0.75, 0.25 / 0.75, 0, 0};
    double chi = chi_square(counts, expect, 4, 10000);
    cr_assert_lt(chi, 25.0, "chi-square %.2f (df 1)", chi);
    sampler_destroy(s);
}

static int cmp_desc_by(const void *a, const void *b, void *ctx) {
    const float *l = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    if (l[x] != l[y]) return l[x] > l[y] ? -1 : 1;
    return x - y;
}

/* How many of the ids in order it takes for their probabilities exp(l - ref) / sum to reach mass
 * (all n when they never do). */
static int mass_cut(const float *l, const int *order, int n, double ref, double sum, double mass) {
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += exp(l[order[i]] - ref) / sum;
        if (cum >= mass) return i + 1;
    }
    return n;
}

/* Draws 400 ids from s over logits l (n_vocab): each must be one of the first keep of the n
 * ranked ids in order (or the id just inside or outside that edge, which rounding in the
 * cumulative sum may move by one), and at least 396 strictly among them. */
static void expect_draws_within(sampler *s, const float *l, int n_vocab, const int *order, int n, int keep,
                                const char *what) {
    bool *allowed = calloc((size_t)n_vocab, sizeof(bool));
    for (int i = 0; i < keep; i++) allowed[order[i]] = true;
    int hits = 0;
    for (int i = 0; i < 400; i++) {
        int32_t id = sampler_sample(s, l);
        bool edge = (keep < n && id == order[keep]) || (keep > 1 && id == order[keep - 1]);
        cr_assert(allowed[id] || edge, "%s: id %d outside the first %d", what, id, keep);
        hits += allowed[id];
    }
    cr_assert_gt(hits, 395, "%s", what);
    free(allowed);
}

/* A flat distribution over a large vocabulary makes top-p's partial selection run several
 * rounds; the emitted ids must stay inside the nucleus a full sort computes. */
Test(sampler, top_p_and_top_k_on_a_large_vocabulary_match_a_full_sort) {
    enum { V = 20000 };
    static float l[V];
    static int order[V];
    random_logits(l, V, 1);
    for (int i = 0; i < V; i++) order[i] = i;
    qsort_r(order, V, sizeof(int), cmp_desc_by, l);
    const struct { int k; float p; } cases[] = {{0, 0.5f}, {3000, 0.9f}, {700, 1.0f}, {0, 0.02f}};
    for (size_t c = 0; c < ATTND_ARRAY_LEN(cases); c++) {
        int n = cases[c].k ? cases[c].k : V;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += exp(l[order[i]] - l[order[0]]);
        int keep = mass_cut(l, order, n, l[order[0]], sum, cases[c].p);
        sampler_params p = plain(1.0f, 100 + c);
        p.top_k = cases[c].k;
        p.top_p = cases[c].p;
        sampler *s = make(&p, V);
        char what[32];
        snprintf(what, sizeof(what), "case %zu (nucleus)", c);
        expect_draws_within(s, l, V, order, n, keep, what);
        sampler_destroy(s);
    }
}

static double typical_centre;
static int cmp_typical_ref(const void *a, const void *b, void *ctx) {
    const float *l = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    double dx = fabs(l[x] - typical_centre), dy = fabs(l[y] - typical_centre);
    if (dx != dy) return dx < dy ? -1 : 1;
    return x - y;
}

/* typical-p over a large vocabulary (its cut found by selection, not sorting) against the
 * definition computed with a full sort in double. */
Test(sampler, typical_p_on_a_large_vocabulary_matches_the_definition) {
    enum { V = 20000 };
    static float l[V];
    static int order[V];
    random_logits(l, V, 4);
    double max = -INFINITY, sum = 0, entropy = 0;
    for (int i = 0; i < V; i++) max = fmax(max, l[i]);
    for (int i = 0; i < V; i++) sum += exp(l[i] - max);
    for (int i = 0; i < V; i++) {
        double p = exp(l[i] - max) / sum;
        entropy -= p * log(p);
    }
    typical_centre = max + log(sum) - entropy;
    for (int i = 0; i < V; i++) order[i] = i;
    qsort_r(order, V, sizeof(int), cmp_typical_ref, l);
    int keep = mass_cut(l, order, V, max, sum, 0.3);
    cr_assert_lt(keep, V / 2, "the test should cut a real part of the vocabulary (kept %d)", keep);
    sampler_params p = plain(1.0f, 31);
    p.typical_p = 0.3f;
    sampler *s = make(&p, V);
    expect_draws_within(s, l, V, order, V, keep, "the typical set");
    sampler_destroy(s);
}

// ---- penalties and bias ---------------------------------------------------------------------

Test(sampler, repeat_penalty_divides_positive_and_multiplies_negative_logits) {
    float l[6] = {2.0f, -2.0f, 4.0f, -1.0f, 3.0f, 0.0f};
    sampler_params p = plain(1.0f, 0);
    p.repeat_penalty = 2.0f;
    sampler *s = make(&p, 6);
    sampler_accept(s, 0);
    sampler_accept(s, 1);
    sampler_accept(s, 1);
    sampler_accept(s, 5);
    sampler_adjust_logits(s, l);
    const float want[6] = {1.0f, -4.0f, 4.0f, -1.0f, 3.0f, 0.0f};
    for (int i = 0; i < 6; i++) cr_assert_float_eq(l[i], want[i], 1e-6, "id %d: %g != %g", i, l[i], want[i]);
    sampler_destroy(s);
}

Test(sampler, presence_and_frequency_penalties_follow_the_counts) {
    float l[5] = {1, 1, 1, 1, 1};
    sampler_params p = plain(1.0f, 0);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    sampler *s = make(&p, 5);
    const int32_t hist[] = {3, 3, 3, 4, 0, 3};
    for (size_t i = 0; i < ATTND_ARRAY_LEN(hist); i++) sampler_accept(s, hist[i]);
    sampler_adjust_logits(s, l);
    const float want[5] = {1 - 0.5f - 0.25f, 1, 1, 1 - 0.5f - 4 * 0.25f, 1 - 0.5f - 0.25f};
    for (int i = 0; i < 5; i++) cr_assert_float_eq(l[i], want[i], 1e-6, "id %d: %g != %g", i, l[i], want[i]);
    sampler_destroy(s);
}

Test(sampler, penalties_look_only_at_the_last_n_tokens) {
    sampler_params p = plain(1.0f, 0);
    p.presence_penalty = 1.0f;
    const int windows[] = {2, -1, 0};
    const float want[3][5] = {{5, 5, 4, 4, 5}, {5, 4, 4, 4, 5}, {5, 5, 5, 5, 5}};
    for (int w = 0; w < 3; w++) {
        p.repeat_last_n = windows[w];
        sampler *s = make(&p, 5);
        sampler_accept(s, 1);
        sampler_accept(s, 2);
        sampler_accept(s, 3);
        float l[5] = {5, 5, 5, 5, 5};
        sampler_adjust_logits(s, l);
        for (int i = 0; i < 5; i++)
            cr_assert_float_eq(l[i], want[w][i], 1e-6, "window %d, id %d: %g", windows[w], i, l[i]);
        sampler_destroy(s);
    }
}

Test(sampler, window_slides_and_reset_forgets) {
    sampler_params p = plain(1.0f, 0);
    p.frequency_penalty = 1.0f;
    p.repeat_last_n = 3;
    sampler *s = make(&p, 4);
    const int32_t hist[] = {0, 0, 1, 2, 2, 2, 3, 99, -5}; /* 99 and -5: out of range, ignored */
    for (size_t i = 0; i < ATTND_ARRAY_LEN(hist); i++) sampler_accept(s, hist[i]);
    float l[4] = {0, 0, 0, 0};
    sampler_adjust_logits(s, l); /* window: 2, 2, 3 */
    cr_assert_float_eq(l[0], 0.0f, 1e-6);
    cr_assert_float_eq(l[1], 0.0f, 1e-6);
    cr_assert_float_eq(l[2], -2.0f, 1e-6);
    cr_assert_float_eq(l[3], -1.0f, 1e-6);
    sampler_reset(s);
    float r[4] = {0, 0, 0, 0};
    sampler_adjust_logits(s, r);
    for (int i = 0; i < 4; i++) cr_assert_float_eq(r[i], 0.0f, 1e-6);
    sampler_accept(s, 1);
    sampler_adjust_logits(s, r);
    cr_assert_float_eq(r[1], -1.0f, 1e-6);
    sampler_destroy(s);
}

Test(sampler, penalties_change_the_greedy_choice) {
    float l[3] = {3.0f, 2.5f, 0.0f};
    sampler_params p = plain(0, 0);
    p.repeat_penalty = 1.5f; /* 3 / 1.5 = 2 < 2.5 */
    sampler *s = make(&p, 3);
    cr_assert_eq(sampler_sample(s, l), 0);
    sampler_accept(s, 0);
    cr_assert_eq(sampler_sample(s, l), 1);
    sampler_destroy(s);
}

Test(sampler, logit_bias_adds_and_minus_infinity_bans) {
    float l[4] = {1, 5, 2, 0};
    logit_bias b[3] = {{1, -INFINITY}, {3, 10.0f}, {0, -0.5f}};
    sampler_params p = plain(0, 0);
    p.bias = b;
    p.n_bias = 3;
    sampler *s = make(&p, 4);
    float adj[4];
    memcpy(adj, l, sizeof(l));
    sampler_adjust_logits(s, adj);
    cr_assert_float_eq(adj[0], 0.5f, 1e-6);
    cr_assert(isinf(adj[1]) && adj[1] < 0);
    cr_assert_float_eq(adj[2], 2.0f, 1e-6);
    cr_assert_float_eq(adj[3], 10.0f, 1e-6);
    cr_assert_eq(sampler_sample(s, l), 3);
    sampler_destroy(s);
    /* A banned token is never drawn, even as the favourite at high temperature. */
    b[1] = (logit_bias){1, -INFINITY};
    p = plain(4.0f, 3);
    p.bias = b;
    p.n_bias = 2;
    s = make(&p, 4);
    for (int i = 0; i < 2000; i++) cr_assert_neq(sampler_sample(s, l), 1);
    sampler_destroy(s);
}

/* The greedy and top-k scans pass over runs of ids whose raw logits cannot win: a token brought
 * up by a bias from far below, one banned at the top, ties across runs, NaN and the vocabulary's
 * ragged tail must come out as a plain scan of the adjusted logits would have them. */
Test(sampler, large_vocabulary_scans_skip_nothing_that_matters) {
    enum { V = 4101 }; /* runs of 16 and a 5-id tail */
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = roundf((float)(test_uniform() * 2 - 1) * 64) / 64; /* many ties */
    l[77] = l[3001] = NAN;
    l[17] = l[3000] = 2.0f; /* the raw maximum, tied across runs */
    sampler_params p = plain(0, 1);
    sampler *s = make(&p, V);
    cr_assert_eq(sampler_sample(s, l), 17, "greedy: the lower id of a tie in two runs");
    sampler_destroy(s);

    logit_bias b[3] = {{17, -INFINITY}, {3000, -INFINITY}, {V - 2, 0}};
    for (int target = 0; target < 3; target++) {
        int id = target == 0 ? 2050 : target == 1 ? V - 2 : 33; /* mid-run, tail, second run */
        l[id] = -0.99f;
        b[2] = (logit_bias){id, 4.0f}; /* -0.99 + 4 beats every other logit (<= 1) */
        p = plain(0, 2);
        p.bias = b;
        p.n_bias = 3;
        s = make(&p, V);
        cr_assert_eq(sampler_sample(s, l), id, "greedy: id %d raised from below by its bias", id);
        sampler_destroy(s);
        p = plain(0.05f, 3); /* top-k through the heap (40 < V / 8): the raised id, never the banned */
        p.top_k = 40;
        p.bias = b;
        p.n_bias = 3;
        s = make(&p, V);
        for (int i = 0; i < 200; i++) {
            int32_t got = sampler_sample(s, l);
            cr_assert(got == id, "top-k draw %d: %d, want %d (its logit is 2 above the rest at T 0.05)", i, got, id);
        }
        sampler_destroy(s);
    }
}

Test(sampler, non_finite_logits_are_handled) {
    /* NaN and -inf never drawn; a +inf logit wins outright. */
    float l[5] = {NAN, -INFINITY, 0.0f, 1.0f, NAN};
    sampler_params p = plain(1.0f, 8);
    sampler *s = make(&p, 5);
    for (int i = 0; i < 500; i++) {
        int32_t id = sampler_sample(s, l);
        cr_assert(id == 2 || id == 3, "drew %d", id);
    }
    l[2] = INFINITY;
    for (int i = 0; i < 50; i++) cr_assert_eq(sampler_sample(s, l), 2);
    sampler_destroy(s);
    /* Nothing drawable: the lowest id logit_bias does not ban. */
    float none[3] = {-INFINITY, NAN, -INFINITY};
    logit_bias b = {0, -INFINITY};
    p.bias = &b;
    p.n_bias = 1;
    s = make(&p, 3);
    cr_assert_eq(sampler_sample(s, none), 1);
    sampler_destroy(s);
}

// ---- determinism ----------------------------------------------------------------------------

enum { DV = 3000, DN = 300 };
static float det_logits[DN][DV];

static void run_sequence(uint64_t seed, int32_t *out) {
    sampler_params p = plain(0.8f, seed); /* with top-p, min-p and the repeat penalty on */
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.1f;
    sampler *s = make(&p, DV);
    for (int t = 0; t < DN; t++) {
        out[t] = sampler_sample(s, det_logits[t]);
        sampler_accept(s, out[t]);
    }
    sampler_destroy(s);
}

static void *run_thread(void *arg) {
    run_sequence(7, arg);
    return NULL;
}

Test(sampler, same_seed_same_tokens_across_runs_and_threads) {
    for (int t = 0; t < DN; t++) random_logits(det_logits[t], DV, 4);
    static int32_t a[DN], b[DN], c[DN], d[DN], e[DN];
    run_sequence(7, a);
    run_sequence(7, b);
    cr_assert_arr_eq(a, b, sizeof(a), "two runs with seed 7 differ");
    /* Two samplers at once on two threads: no shared state between them. */
    pthread_t t1, t2;
    cr_assert_eq(pthread_create(&t1, NULL, run_thread, c), 0);
    cr_assert_eq(pthread_create(&t2, NULL, run_thread, d), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    cr_assert_arr_eq(a, c, sizeof(a), "thread 1 differs from the sequential run");
    cr_assert_arr_eq(a, d, sizeof(a), "thread 2 differs from the sequential run");
    run_sequence(8, e);
    cr_assert(memcmp(a, e, sizeof(a)) != 0, "seeds 7 and 8 gave the same %d tokens", DN);
}

// ---- log-probabilities ----------------------------------------------------------------------

Test(sampler, logprobs_are_the_raw_log_softmax_with_top_n_best_first) {
    enum { V = 1000 };
    static float l[V];
    random_logits(l, V, 5);
    l[10] = l[20] = 9.0f; /* a tie at the top: lower id first */
    double max = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) max = fmax(max, l[i]);
    for (int i = 0; i < V; i++) sum += exp(l[i] - max);
    double lz = max + log(sum);
    token_logprob chosen, top[SAMPLER_MAX_TOP_LOGPROBS];
    sampler_logprobs(l, V, 123, SAMPLER_MAX_TOP_LOGPROBS, &chosen, top);
    cr_assert_eq(chosen.id, 123);
    cr_assert_float_eq(chosen.logprob, l[123] - lz, 1e-5);
    cr_assert_eq(top[0].id, 10);
    cr_assert_eq(top[1].id, 20);
    for (int i = 0; i < SAMPLER_MAX_TOP_LOGPROBS; i++) {
        cr_assert_float_eq(top[i].logprob, l[top[i].id] - lz, 1e-5);
        if (i > 0) cr_assert_geq(top[i - 1].logprob, top[i].logprob);
    }
    /* Nothing outside the list beats its last entry. */
    for (int i = 0; i < V; i++) {
        bool listed = false;
        for (int j = 0; j < SAMPLER_MAX_TOP_LOGPROBS; j++) listed |= top[j].id == i;
        if (!listed) cr_assert_leq(l[i] - lz, top[SAMPLER_MAX_TOP_LOGPROBS - 1].logprob + 1e-6);
    }
}

Test(sampler, logprobs_handle_small_vocabularies_and_bans) {
    const float l[3] = {0.0f, -INFINITY, 0.0f};
    token_logprob chosen, top[5];
    sampler_logprobs(l, 3, 1, 5, &chosen, top);
    cr_assert(isinf(chosen.logprob) && chosen.logprob < 0);
    cr_assert_eq(top[0].id, 0);
    cr_assert_float_eq(top[0].logprob, logf(0.5f), 1e-6);
    cr_assert_eq(top[1].id, 2);
    cr_assert_eq(top[2].id, 1);
    cr_assert_eq(top[3].id, -1);
    cr_assert_eq(top[4].id, -1);
    sampler_logprobs(l, 3, 2, 0, &chosen, NULL);
    cr_assert_float_eq(chosen.logprob, logf(0.5f), 1e-6);
}

Test(sampler, finish_reasons_are_openai_names) {
    cr_assert_str_eq(stop_reason_finish(STOP_EOG), "stop");
    cr_assert_str_eq(stop_reason_finish(STOP_STRING), "stop");
    cr_assert_str_eq(stop_reason_finish(STOP_LENGTH), "length");
    cr_assert_null(stop_reason_finish(STOP_NONE));
}

// ---- stop strings ---------------------------------------------------------------------------

typedef struct feed_result {
    char text[4096];
    size_t len;
    bool stopped;
} feed_result;

/* Feeds pieces (split at the given cut points) and collects what the matcher releases,
 * flushing at the end when no stop matched. */
static feed_result feed(const char *const *stops, int n_stops, const char *text, const size_t *cuts, int n_cuts) {
    stop_matcher *m = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(stop_matcher_create(&m, stops, n_stops, &err), ATTND_OK, "%s", err.msg);
    feed_result r = {.len = 0, .stopped = false};
    size_t total = strlen(text), at = 0;
    for (int c = 0; c <= n_cuts && !r.stopped; c++) {
        size_t end = c < n_cuts ? cuts[c] : total;
        const char *out;
        size_t n_out;
        r.stopped = stop_matcher_push(m, text + at, end - at, &out, &n_out);
        cr_assert_lt(r.len + n_out, sizeof(r.text));
        memcpy(r.text + r.len, out, n_out);
        r.len += n_out;
        at = end;
    }
    if (!r.stopped) {
        const char *out;
        size_t n_out = stop_matcher_flush(m, &out);
        memcpy(r.text + r.len, out, n_out);
        r.len += n_out;
    }
    r.text[r.len] = '\0';
    stop_matcher_destroy(m);
    return r;
}

/* What a correct matcher returns: the text before the stop string that is complete first
 * (ties: the longer one). */
static size_t ref_stop(const char *const *stops, int n_stops, const char *text, bool *stopped) {
    size_t best = strlen(text), best_end = SIZE_MAX;
    *stopped = false;
    for (int i = 0; i < n_stops; i++) {
        const char *hit = strstr(text, stops[i]);
        if (!hit) continue;
        size_t at = (size_t)(hit - text), end = at + strlen(stops[i]);
        if (end < best_end || (end == best_end && at < best)) {
            best = at;
            best_end = end;
            *stopped = true;
        }
    }
    return best;
}

Test(stop, stop_inside_one_piece_returns_text_before_it) {
    const char *stops[] = {"STOP"};
    feed_result r = feed(stops, 1, "hello STOP world", NULL, 0);
    cr_assert(r.stopped);
    cr_assert_str_eq(r.text, "hello ");
}

/* One push into a matcher: the piece, whether push says stop, and the bytes it releases. */
typedef struct push_step {
    const char *piece, *released;
    bool stop;
} push_step;

/* A matcher for stops (NULL: none) fed the steps in order, each checked; the caller destroys it. */
static stop_matcher *push_steps(const char *const *stops, int n_stops, const push_step *steps, int n_steps) {
    stop_matcher *m;
    cr_assert_eq(stop_matcher_create(&m, stops, n_stops, NULL), ATTND_OK);
    for (int i = 0; i < n_steps; i++) {
        const char *out;
        size_t n, want = strlen(steps[i].released);
        cr_assert_eq(stop_matcher_push(m, steps[i].piece, strlen(steps[i].piece), &out, &n), steps[i].stop,
                     "step %d: push said the wrong thing about stopping", i);
        cr_assert_eq(n, want, "step %d: released %zu bytes, want %zu", i, n, want);
        cr_assert(n == 0 || memcmp(out, steps[i].released, n) == 0, "step %d: released other bytes", i);
    }
    return m;
}

Test(stop, stop_split_across_pieces_is_held_then_cut) {
    const char *stops[] = {"STOP"};
    const push_step steps[] = {
        {"hel", "hel", false},
        {"lo ST", "lo ", false}, /* "ST" held */
        {"OP and more", "", true},
        {"x", "", true}, /* pushes after a stop keep saying stop */
    };
    stop_matcher *m = push_steps(stops, 1, steps, ATTND_ARRAY_LEN(steps));
    cr_assert_str_eq(stop_matcher_matched(m), "STOP");
    const char *out;
    cr_assert_eq(stop_matcher_flush(m, &out), 0);
    stop_matcher_destroy(m);
}

Test(stop, a_false_start_is_released) {
    const char *stops[] = {"STOP"};
    const push_step steps[] = {{"ST", "", false}, {"AR", "STAR", false}};
    stop_matcher *m = push_steps(stops, 1, steps, ATTND_ARRAY_LEN(steps));
    cr_assert_null(stop_matcher_matched(m));
    stop_matcher_destroy(m);
}

Test(stop, overlapping_prefixes_match_at_every_split) {
    const char *stops[] = {"abcabd"};
    const char *text = "xabcabcabdyy";
    size_t len = strlen(text);
    /* Every split into two pieces and a byte-at-a-time feed. */
    for (size_t cut = 0; cut <= len; cut++) {
        feed_result r = feed(stops, 1, text, &cut, 1);
        cr_assert(r.stopped, "cut %zu", cut);
        cr_assert_str_eq(r.text, "xabc", "cut %zu", cut);
    }
    size_t cuts[16];
    for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
    feed_result r = feed(stops, 1, text, cuts, (int)len - 1);
    cr_assert(r.stopped);
    cr_assert_str_eq(r.text, "xabc");
}

Test(stop, the_stop_completed_first_wins_whatever_the_pieces) {
    const char *stops[] = {"world", "lo w", "hello world!"};
    size_t cuts[] = {2, 4, 7};
    feed_result r = feed(stops, 3, "hello world", cuts, 3);
    cr_assert(r.stopped);
    cr_assert_str_eq(r.text, "hel");
    /* "c" completes before "acbb" does, in one piece or byte by byte. */
    const char *overlap[] = {"acbb", "c"};
    size_t bytes[] = {1, 2, 3, 4};
    r = feed(overlap, 2, "xacbby", NULL, 0);
    cr_assert_str_eq(r.text, "xa");
    r = feed(overlap, 2, "xacbby", bytes, 4);
    cr_assert_str_eq(r.text, "xa");
    /* Completing at the same byte: the longer one is cut. */
    const char *same_end[] = {"b", "ab"};
    r = feed(same_end, 2, "xaby", NULL, 0);
    cr_assert_str_eq(r.text, "x");
}

Test(stop, flush_releases_a_held_prefix_at_the_end) {
    const char *stops[] = {"STOP", "\n\n"};
    size_t cuts[] = {3};
    feed_result r = feed(stops, 2, "fooST", cuts, 1);
    cr_assert_not(r.stopped);
    cr_assert_str_eq(r.text, "fooST");
    r = feed(stops, 2, "a\n", NULL, 0);
    cr_assert_not(r.stopped);
    cr_assert_str_eq(r.text, "a\n");
}

Test(stop, utf8_characters_are_never_split) {
    const push_step steps[] = {
        {"caf\xc3", "caf", false},
        {"\xa9!", "\xc3\xa9!", false},
        /* A 4-byte character in three pieces. */
        {"\xf0\x9f", "", false},
        {"\x98", "", false},
        {"\x80", "\xf0\x9f\x98\x80", false},
        /* Invalid bytes are not held forever. */
        {"\xe2" "A", "\xe2" "A", false},
        {"\xe2", "", false},
    };
    stop_matcher *m = push_steps(NULL, 0, steps, ATTND_ARRAY_LEN(steps));
    const char *out;
    cr_assert_eq(stop_matcher_flush(m, &out), 1, "flush releases an incomplete tail as-is");
    stop_matcher_destroy(m);
}

Test(stop, utf8_stop_strings_match_across_pieces) {
    const char *stops[] = {"\xe2\x86\x92 end", "\xc3\xa9t\xc3\xa9"}; /* "→ end", "été" */
    const char *text = "a \xe2\x86\x92 b \xe2\x86\x92 end c";
    size_t len = strlen(text);
    for (size_t cut = 0; cut <= len; cut++) {
        size_t cuts[2] = {cut / 2, cut};
        feed_result r = feed(stops, 2, text, cuts, 2);
        cr_assert(r.stopped, "cut %zu", cut);
        cr_assert_str_eq(r.text, "a \xe2\x86\x92 b ", "cut %zu", cut);
    }
}

Test(stop, random_texts_match_a_reference) {
    const char alphabet[] = "abc";
    char text[64], s1[5], s2[4], s3[3];
    for (int round = 0; round < 3000; round++) {
        size_t len = 1 + (size_t)(test_uniform() * 40);
        for (size_t i = 0; i < len; i++) text[i] = alphabet[(int)(test_uniform() * 3)];
        text[len] = '\0';
        char *st[3] = {s1, s2, s3};
        size_t sl[3] = {4, 3, 2};
        for (int k = 0; k < 3; k++) {
            size_t l = 1 + (size_t)(test_uniform() * sl[k]);
            for (size_t i = 0; i < l; i++) st[k][i] = alphabet[(int)(test_uniform() * 3)];
            st[k][l] = '\0';
        }
        int n_stops = (int)(test_uniform() * 4);
        const char *stops[3] = {s1, s2, s3};
        size_t cuts[64];
        int n_cuts = 0;
        for (size_t i = 1; i < len; i++)
            if (test_uniform() < 0.4) cuts[n_cuts++] = i;
        bool want_stop;
        size_t want = ref_stop(stops, n_stops, text, &want_stop);
        feed_result r = feed(stops, n_stops, text, cuts, n_cuts);
        cr_assert_eq(r.stopped, want_stop, "text '%s'", text);
        cr_assert_eq(r.len, want, "text '%s', %d stops ('%s' '%s' '%s'): got '%s'", text, n_stops, s1, s2, s3,
                     r.text);
        cr_assert_eq(memcmp(r.text, text, want), 0);
    }
}

Test(stop, large_pieces_grow_the_buffer) {
    static char big[20001];
    memset(big, 'x', 20000);
    memcpy(big + 15000, "<END>", 5);
    const char *stops[] = {"<END>"};
    size_t cuts[] = {10, 14998};
    stop_matcher *m;
    cr_assert_eq(stop_matcher_create(&m, stops, 1, NULL), ATTND_OK);
    const char *out;
    size_t n, total = 0;
    cr_assert_not(stop_matcher_push(m, big, cuts[0], &out, &n));
    total += n;
    cr_assert_not(stop_matcher_push(m, big + cuts[0], cuts[1] - cuts[0], &out, &n));
    total += n;
    cr_assert(stop_matcher_push(m, big + cuts[1], 20000 - cuts[1], &out, &n));
    total += n;
    cr_assert_eq(total, 15000);
    cr_assert_eq(stop_matcher_status(m), ATTND_OK);
    stop_matcher_destroy(m);
}

Test(stop, empty_or_missing_stop_strings_are_rejected) {
    stop_matcher *m = (stop_matcher *)1;
    attnd_err err = {{0}};
    const char *empty[] = {"ok", ""};
    cr_assert_eq(stop_matcher_create(&m, empty, 2, &err), ATTND_ERR_INVALID);
    cr_assert_null(m);
    cr_assert(strstr(err.msg, "empty"), "%s", err.msg);
    const char *missing[] = {NULL};
    cr_assert_eq(stop_matcher_create(&m, missing, 1, &err), ATTND_ERR_INVALID);
    cr_assert_eq(stop_matcher_create(&m, NULL, -1, &err), ATTND_ERR_INVALID);
    stop_matcher_destroy(NULL);
    sampler_destroy(NULL);
}

Test(sampler, seed_streams_start_at_the_seed_and_draw_apart) {
    cr_assert_eq(sampler_seed_stream(42, 0), 42, "stream 0 is the request's own seed");
    cr_assert_neq(sampler_seed_stream(42, 1), sampler_seed_stream(42, 2));
    cr_assert_eq(sampler_seed_stream(42, 3), sampler_seed_stream(42, 3));
    cr_assert_neq(sampler_seed_stream(42, 1), sampler_seed_stream(43, 1));
    /* samplers on streams 0..3 over the same logits pick differently at temperature 1 */
    enum { V = 64, DRAWS = 32 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = 0.0f; /* uniform: every pick is pure chance */
    int32_t picks[4][DRAWS];
    for (int k = 0; k < 4; k++) {
        sampler_params p = plain(1.0f, sampler_seed_stream(7, k));
        sampler *s;
        cr_assert_eq(sampler_create(&s, &p, V, NULL), ATTND_OK);
        for (int d = 0; d < DRAWS; d++) picks[k][d] = sampler_sample(s, l);
        sampler_destroy(s);
    }
    for (int a = 0; a < 4; a++)
        for (int b = a + 1; b < 4; b++)
            cr_assert_neq(memcmp(picks[a], picks[b], sizeof(picks[a])), 0, "streams %d and %d drew the same", a, b);
}
