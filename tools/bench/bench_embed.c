/*
 * bench_embed.c — in-process tokens/s of engine_embed on an encoder file (e.g. the bge-base shape
 * of tools/bench/make_model.py --shape bge-base), as the server runs it: passes of up to 512
 * tokens (the default max_batch), inputs of 16..512 tokens (seeded, uniform), the file's pooling.
 * Reports the median over rounds of wall-clock and CPU tokens/s, and the load average; a second
 * line with --rank runs POOL_RANK on 100 pairs of 49..289 tokens when the file has a head.
 * A benchmark, not a test: it prints numbers, asserts nothing.
 *
 *   tools/bench/build.sh && build/bench_embed MODEL [threads (2)] [inputs (64)] [rounds (3)] [--rank]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/common.h"
#include "attnd/embed.h"
#include "attnd/engine.h"
#include "attnd/model.h"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static unsigned long long rng_state = 88172645463325252ULL;
static int rnd(int lo, int hi) { /* [lo, hi] */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return lo + (int)(rng_state % (unsigned long long)(hi - lo + 1));
}

/* Runs n inputs of lengths lo..hi `rounds` times with pooling pool; prints a line named what. */
static int run(engine *e, const char *what, int n, int lo, int hi, int rounds, model_pooling pool) {
    const model *m = engine_model(e);
    int dim = model_pool_dim(m, pool), n_vocab = model_info_get(m)->n_vocab;
    embed_input *in = calloc((size_t)n, sizeof(*in));
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)(dim > 0 ? dim : 1));
    long n_tok = 0;
    for (int i = 0; i < n; i++) {
        int len = rnd(lo, hi);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)len);
        for (int t = 0; t < len; t++) ids[t] = rnd(3, n_vocab - 1);
        in[i] = (embed_input){ids, len, NULL};
        n_tok += len;
    }
    attnd_err err;
    double wall[64], cpu[64];
    int rc = 0;
    if (engine_embed(e, in, 1, pool, out, &err) != ATTND_OK) goto fail; /* warm-up */
    for (int r = 0; r < rounds && r < 64; r++) {
        double t0 = attnd_now_s(), c0 = cpu_s();
        if (engine_embed(e, in, n, pool, out, &err) != ATTND_OK) goto fail;
        wall[r] = n_tok / (attnd_now_s() - t0);
        cpu[r] = n_tok / (cpu_s() - c0);
    }
    double la[1] = {0};
    if (getloadavg(la, 1) < 1) la[0] = -1;
    printf("%-11s %4d inputs %7ld tokens: %8.1f tok/s wall, %8.1f tok/s per CPU-second (load %.2f)\n", what, n, n_tok,
           median(wall, rounds), median(cpu, rounds), la[0]);
    goto done;
fail:
    fprintf(stderr, "engine_embed: %s\n", err.msg);
    rc = 1;
done:
    for (int i = 0; i < n; i++) free((void *)in[i].tokens);
    free(in);
    free(out);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [threads (2)] [inputs (64)] [rounds (3)] [--rank]\n", argv[0]);
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2, n = argc > 3 ? atoi(argv[3]) : 64, rounds = argc > 4 ? atoi(argv[4]) : 3;
    bool rank = argc > 5 && strcmp(argv[5], "--rank") == 0;
    model *m = NULL;
    engine *e = NULL;
    attnd_err err;
    if (model_load(&m, argv[1], &err) != ATTND_OK || engine_create(&e, m, 512, threads, &err) != ATTND_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], err.msg);
        model_destroy(m);
        return 1;
    }
    printf("# %s, %d threads, median of %d rounds\n", argv[1], engine_threads(e), rounds);
    int rc = run(e, "embeddings", n, 16, 512, rounds, POOL_FILE);
    if (!rc && rank && model_n_cls_out(m) > 0) rc = run(e, "rerank", 100, 49, 289, rounds, POOL_RANK);
    engine_destroy(e);
    model_destroy(m);
    return rc;
}
