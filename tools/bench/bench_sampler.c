/*
 * bench_sampler.c — microseconds per sampled token for a large vocabulary (default 128 000),
 * for the sampler's common configurations, next to a naive baseline that sorts the whole
 * vocabulary every token. A benchmark, not a test: it prints numbers and ratios, asserts nothing.
 *
 * Build and run (from the repository root; not part of the CMake build):
 *   cc -O2 -Iinclude tools/bench/bench_sampler.c engine/sampler.c engine/common.c -lm \
 *      -o /tmp/bench_sampler && /tmp/bench_sampler [n_vocab] [n_tokens]
 *
 * Logits are synthetic: Gaussian with a spread like a language model's output (sd 2.5, "flat")
 * and the same plus a few dominant tokens ("peaked"), so top-p has to look at thousands of
 * candidates in one case and a handful in the other.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/sampler.h"

static uint64_t state = 88172645463325252ULL;
static double uniform(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return ((double)(state >> 11) + 0.5) * 0x1.0p-53;
}
static float gaussian(void) { return (float)(sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform())); }

/* CPU time of this thread: the machines this runs on are often shared, and wall time would
 * mostly measure the neighbours. */
static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* The baseline: what a sampler that sorts everything per token costs (copy, sort V, softmax). */
typedef struct pair {
    float logit;
    int id;
} pair;
static int cmp_pair(const void *a, const void *b) {
    float x = ((const pair *)a)->logit, y = ((const pair *)b)->logit;
    return (x < y) - (x > y);
}
static double bench_full_sort(const float *logits, int n_vocab, int n_tokens) {
    pair *p = malloc(sizeof(*p) * (size_t)n_vocab);
    volatile int sink = 0;
    double t0 = now_us();
    for (int t = 0; t < n_tokens; t++) {
        for (int i = 0; i < n_vocab; i++) p[i] = (pair){logits[i], i};
        qsort(p, (size_t)n_vocab, sizeof(*p), cmp_pair);
        sink += p[0].id;
    }
    double us = (now_us() - t0) / n_tokens;
    free(p);
    (void)sink;
    return us;
}

static double bench(const sampler_params *p, const float *logits, int n_vocab, int n_tokens) {
    sampler *s;
    attnd_err err;
    if (sampler_create(&s, p, n_vocab, &err) != ATTND_OK) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    volatile int sink = 0;
    for (int t = 0; t < 64; t++) sampler_accept(s, (int32_t)(uniform() * n_vocab));
    double t0 = now_us();
    for (int t = 0; t < n_tokens; t++) {
        int32_t id = sampler_sample(s, logits);
        sampler_accept(s, id);
        sink += id;
    }
    double us = (now_us() - t0) / n_tokens;
    sampler_destroy(s);
    (void)sink;
    return us;
}

int main(int argc, char **argv) {
    int n_vocab = argc > 1 ? atoi(argv[1]) : 128000;
    int n_tokens = argc > 2 ? atoi(argv[2]) : 200;
    if (n_vocab < 100 || n_tokens < 1) {
        fprintf(stderr, "usage: bench_sampler [n_vocab >= 100] [n_tokens >= 1]\n");
        return 2;
    }
    float *flat = malloc(sizeof(float) * (size_t)n_vocab), *peaked = malloc(sizeof(float) * (size_t)n_vocab);
    for (int i = 0; i < n_vocab; i++) flat[i] = peaked[i] = 2.5f * gaussian();
    for (int i = 0; i < 5; i++) peaked[(int)(uniform() * n_vocab)] += 15.0f - 2.0f * i;

    double base = bench_full_sort(flat, n_vocab, n_tokens > 50 ? 50 : n_tokens);
    printf("n_vocab %d, %d tokens per case; baseline (copy + full qsort): %.1f us/token\n\n", n_vocab, n_tokens,
           base);
    printf("%-46s %12s %12s %14s\n", "configuration", "flat us/tok", "peaked us/tok", "sort / flat");

    struct {
        const char *name;
        float temp, top_p, min_p, typical_p, repeat;
        int top_k;
    } cases[] = {
        {"greedy (temperature 0)", 0, 1, 0, 1, 1, 0},
        {"defaults (k 40, p 0.95, min_p 0.05, T 0.8)", 0.8f, 0.95f, 0.05f, 1, 1, 40},
        {"defaults + repeat_penalty 1.1", 0.8f, 0.95f, 0.05f, 1, 1.1f, 40},
        {"top_p 0.95 only (no top-k)", 0.8f, 0.95f, 0, 1, 1, 0},
        {"min_p 0.05 only", 0.8f, 1, 0.05f, 1, 1, 0},
        {"no truncation (softmax over V)", 1.0f, 1, 0, 1, 1, 0},
        {"top_k 1000", 1.0f, 1, 0, 1, 1, 1000},
        {"typical_p 0.9 after top_k 40", 1.0f, 1, 0, 0.9f, 1, 40},
        {"typical_p 0.9 alone", 1.0f, 1, 0, 0.9f, 1, 0},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        sampler_params p;
        sampler_params_default(&p);
        p.temperature = cases[c].temp;
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.typical_p = cases[c].typical_p;
        p.repeat_penalty = cases[c].repeat;
        double f = bench(&p, flat, n_vocab, n_tokens), k = bench(&p, peaked, n_vocab, n_tokens);
        printf("%-46s %12.1f %12.1f %13.1fx\n", cases[c].name, f, k, base / f);
    }

    /* logprobs: the chosen token + top 20 from the raw distribution. */
    token_logprob chosen, top[SAMPLER_MAX_TOP_LOGPROBS];
    double t0 = now_us();
    for (int t = 0; t < n_tokens; t++) sampler_logprobs(flat, n_vocab, t % n_vocab, 20, &chosen, top);
    printf("%-46s %12.1f\n", "sampler_logprobs, top 20", (now_us() - t0) / n_tokens);
    free(flat);
    free(peaked);
    return 0;
}
