/*
 * bench_histo.c — what the scheduler's latency histograms cost a token: one locked observation
 * (the inter-token gap; the per-request ones are rarer) against the time a token takes at a
 * given decode speed. A benchmark, not a test: it prints figures and asserts nothing.
 *
 *   build/bench_histo [TOKENS_PER_SECOND]   (default 238: 8 streams of the TinyLlama Q4_K_M shape,
 *                                            docs/performance.md)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "attnd/common.h"
#include "histo.h"

static const double LE[] = {0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5};

int main(int argc, char **argv) {
    double tps = argc > 1 ? atof(argv[1]) : 238.0;
    histo h;
    histo_init(&h, LE, (int)ATTND_ARRAY_LEN(LE));
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    const int n = 5000000;
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = attnd_now_s(), v = 0.001;
        for (int i = 0; i < n; i++) {
            pthread_mutex_lock(&mu);
            histo_observe(&h, v);
            pthread_mutex_unlock(&mu);
            v = v * 1.37 > 6 ? 0.001 : v * 1.37; /* walks every bucket */
        }
        double ns = (attnd_now_s() - t0) / n * 1e9;
        if (ns < best) best = ns;
    }
    double per_token_ns = 1e9 / tps;
    printf("one observation (lock, bisect, unlock): %.1f ns, best of 5 x %d\n", best, n);
    printf("a token at %.0f tok/s: %.0f ns; the histograms' share: %.5f %% (one observation a token)\n", tps,
           per_token_ns, 100.0 * best / per_token_ns);
    return h.count == 5ull * n ? 0 : 1;
}
