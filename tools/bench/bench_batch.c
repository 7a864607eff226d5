/*
 * bench_batch.c — aggregate tokens/s of one batched decode step (engine_eval with B sequences,
 * one token each, as the scheduler sends them) at B = 1, 2, 4, 8, 16, and each B's ratio to
 * B = 1 measured in the same process. Rounds alternate the batch sizes, so a neighbour's load
 * touches them alike; medians over the rounds. Then the same for a decode step that also carries
 * a prefill chunk of C tokens (the cost the scheduler's prefill pacing learns), at prefix
 * lengths 0, 512, 1024: how a chunk's cost grows with the prompt already read. Last, one
 * stream's decode at position 2000 with an F16 KV cache and with a Q8_0 one (issue 30).
 * A benchmark, not a test: it prints numbers and ratios, asserts nothing.
 *
 *   tools/bench/build.sh && build/bench_batch MODEL [threads (default: all)] [rounds (5)] [only-B]
 * (only-B: just 48 decode steps of batch B, for a profiler)
 *
 * Every sequence starts with a 64-token context (the synthetic prompt is token ids 1..64 of the
 * vocabulary cycled), so attention reads a realistic, not an empty, cache.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/common.h"
#include "attnd/engine.h"
#include "attnd/kv.h"
#include "attnd/model.h"

enum { MAX_B = 16, CTX0 = 64, STEPS = 8 };

typedef struct bench {
    engine *e;
    kv_pool *pool;
    kv_seq *seq[MAX_B + 1]; /* the last one is the prefilling prompt */
    batch_entry *batch;     /* (MAX_B + chunk) */
    float *logits;          /* (MAX_B + 1, n_vocab) */
    int n_vocab;
    double cpu; /* CPU seconds of the last time_steps */
} bench;

/* CPU seconds of the whole process (all engine threads): on a shared machine wall time mostly
 * measures the neighbours, CPU time what the step costs (spin-waits included). */
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

/* Evaluates tokens [from, to) of the synthetic prompt into seq in chunks of at most 256. */
static int fill(bench *b, kv_seq *seq, int from, int to) {
    attnd_err err;
    while (from < to) {
        int n = 0;
        for (; from < to && n < 256; from++, n++)
            b->batch[n] = (batch_entry){seq, 1 + from % 64, from, false};
        if (engine_eval(b->e, b->batch, n, NULL, &err) != ATTND_OK) {
            fprintf(stderr, "engine_eval: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

/* Seconds of STEPS decode steps of B sequences (plus a chunk of `chunk` prompt tokens at
 * position pf_pos of the last sequence); the caches are truncated back afterwards. */
static double time_steps(bench *b, int B, int chunk, int pf_pos) {
    attnd_err err;
    double t0 = attnd_now_s(), c0 = cpu_s();
    for (int s = 0; s < STEPS; s++) {
        int n = 0;
        for (int i = 0; i < B; i++) b->batch[n++] = (batch_entry){b->seq[i], 7 + s, CTX0 + s, true};
        for (int c = 0; c < chunk; c++) b->batch[n++] = (batch_entry){b->seq[MAX_B], 3 + c % 50, pf_pos + c, false};
        if (engine_eval(b->e, b->batch, n, b->logits, &err) != ATTND_OK) {
            fprintf(stderr, "engine_eval: %s\n", err.msg);
            return -1;
        }
        if (chunk) kv_seq_truncate(b->seq[MAX_B], pf_pos);
    }
    double dt = attnd_now_s() - t0;
    b->cpu = cpu_s() - c0;
    for (int i = 0; i < B; i++) kv_seq_truncate(b->seq[i], CTX0);
    return dt;
}

static void run_decode(bench *b, int rounds) {
    static const int sizes[] = {1, 2, 4, 8, 16};
    enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
    double tps[NS][64], cpt[NS][64];
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < NS; k++) {
            tps[k][r] = sizes[k] * STEPS / time_steps(b, sizes[k], 0, 0);
            cpt[k][r] = b->cpu * 1e3 / (sizes[k] * STEPS);
        }
    double base = 0, cbase = 0;
    printf("batched decode (context %d):\n  %-6s %10s %9s %9s %14s %9s\n", CTX0, "batch", "tokens/s", "x batch1",
           "ms/step", "cpu ms/token", "x batch1");
    for (int k = 0; k < NS; k++) {
        double m = median(tps[k], rounds), c = median(cpt[k], rounds);
        if (k == 0) base = m, cbase = c;
        printf("  %-6d %10.1f %9.2f %9.2f %14.2f %9.2f\n", sizes[k], m, m / base, sizes[k] * 1e3 / m, c, cbase / c);
    }
}

/* A decode step of 2 streams plus a prefill chunk at growing prefix lengths: ms per chunk token
 * beyond the decode step alone. */
static void run_chunks(bench *b, int rounds) {
    static const int chunks[] = {32, 128}, prefix[] = {0, 512, 1024};
    double per_tok[3][2];
    for (size_t p = 0; p < 3; p++) {
        if (fill(b, b->seq[MAX_B], kv_seq_len(b->seq[MAX_B]), prefix[p]) != 0) return;
        for (size_t c = 0; c < 2; c++) {
            double d[64], w[64];
            for (int r = 0; r < rounds; r++) {
                d[r] = time_steps(b, 2, 0, 0);
                w[r] = time_steps(b, 2, chunks[c], prefix[p]);
            }
            per_tok[p][c] = (median(w, rounds) - median(d, rounds)) * 1e3 / STEPS / chunks[c];
        }
    }
    printf("decode step of 2 streams + prefill chunk (ms per chunk token beyond the decode step):\n");
    printf("  %-6s %8s %8s %8s\n", "chunk", "pos 0", "pos 512", "pos 1024");
    for (size_t c = 0; c < 2; c++)
        printf("  %-6d %8.3f %8.3f %8.3f\n", chunks[c], per_tok[0][c], per_tok[1][c], per_tok[2][c]);
}

/* Seconds of STEPS single-token decode steps of seq at position pos (truncated back after). */
static double time_long(bench *b, kv_seq *seq, int pos) {
    attnd_err err;
    double t0 = attnd_now_s();
    for (int s = 0; s < STEPS; s++) {
        b->batch[0] = (batch_entry){seq, 7 + s, pos + s, true};
        if (engine_eval(b->e, b->batch, 1, b->logits, &err) != ATTND_OK) {
            fprintf(stderr, "engine_eval: %s\n", err.msg);
            return -1;
        }
    }
    kv_seq_truncate(seq, pos);
    return attnd_now_s() - t0;
}

/* Issue 30's target: one stream's decode at position LONG_POS with an F16 cache against a Q8_0 one
 * (alternating rounds; the same engine and weights), and each cache's bytes per token. */
enum { LONG_POS = 2000 };
static void run_long_kv(bench *b, const model *m, int rounds) {
    const kv_type types[] = {KV_F16, KV_Q8_0};
    kv_pool *pool[2] = {NULL, NULL};
    kv_seq *seq[2] = {NULL, NULL};
    attnd_err err = {0};
    double tps[2][64];
    if (model_info_get(m)->n_ctx < LONG_POS + STEPS || kv_type_unsupported(m, KV_Q8_0)) {
        printf("decode at position %d, f16 vs q8_0 KV: skipped (%s)\n", LONG_POS,
               kv_type_unsupported(m, KV_Q8_0) ? kv_type_unsupported(m, KV_Q8_0) : "context too short");
        return;
    }
    for (int k = 0; k < 2; k++)
        if (kv_pool_create(&pool[k], m, (size_t)1 << 30, types[k], &err) != ATTND_OK ||
            kv_seq_create(&seq[k], pool[k], &err) != ATTND_OK || fill(b, seq[k], 0, LONG_POS) != 0) {
            fprintf(stderr, "bench_batch: %s\n", err.msg);
            goto done;
        }
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) tps[k][r] = STEPS / time_long(b, seq[k], LONG_POS);
    printf("decode at position %d, one stream:\n  %-6s %10s %9s %14s\n", LONG_POS, "kv", "tokens/s", "x f16",
           "bytes/token");
    double base = median(tps[0], rounds);
    for (int k = 0; k < 2; k++) {
        double t = median(tps[k], rounds);
        printf("  %-6s %10.1f %9.2f %14zu\n", kv_type_name(types[k]), t, t / base, kv_pool_bytes_per_token(pool[k]));
    }
done:
    for (int k = 0; k < 2; k++) kv_seq_destroy(seq[k]), kv_pool_destroy(pool[k]);
}

/* Only batch B, for a profiler: 50 steps. */
static void run_only(bench *b, int B) {
    double dt = time_steps(b, B, 0, 0), cpu = b->cpu;
    for (int i = 0; i < 5; i++) {
        dt += time_steps(b, B, 0, 0);
        cpu += b->cpu;
    }
    printf("batch %d: %.1f tokens/s, %.2f cpu ms/token\n", B, B * STEPS * 6 / dt, cpu * 1e3 / (B * STEPS * 6));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [threads] [rounds]\n", argv[0]);
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 0, rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (rounds < 1 || rounds > 64) rounds = 5;
    model *m = NULL;
    bench b = {0};
    attnd_err err = {0};
    int rc = 1;
    if (model_load(&m, argv[1], &err) != ATTND_OK) goto fail;
    b.n_vocab = model_info_get(m)->n_vocab;
    if (engine_create(&b.e, m, 512, threads, &err) != ATTND_OK) goto fail;
    if (kv_pool_create(&b.pool, m, (size_t)1 << 30, KV_F16, &err) != ATTND_OK) goto fail;
    b.batch = malloc(512 * sizeof(*b.batch));
    b.logits = malloc((size_t)(MAX_B + 1) * b.n_vocab * sizeof(float));
    if (!b.batch || !b.logits) goto fail;
    for (int i = 0; i <= MAX_B; i++) {
        if (kv_seq_create(&b.seq[i], b.pool, &err) != ATTND_OK) goto fail;
        if (i < MAX_B && fill(&b, b.seq[i], 0, CTX0) != 0) goto fail;
    }
    printf("# %s, %d threads, %d alternating rounds of %d steps; medians\n", argv[1], engine_threads(b.e), rounds,
           STEPS);
    if (argc > 4) run_only(&b, atoi(argv[4]) < 1 || atoi(argv[4]) > MAX_B ? 1 : atoi(argv[4]));
    else {
        run_decode(&b, rounds);
        run_chunks(&b, rounds);
        run_long_kv(&b, m, rounds);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "bench_batch: %s\n", err.msg);
    for (int i = 0; i <= MAX_B; i++) kv_seq_destroy(b.seq[i]);
    free(b.batch);
    free(b.logits);
    kv_pool_destroy(b.pool);
    engine_destroy(b.e);
    model_destroy(m);
    return rc;
}
