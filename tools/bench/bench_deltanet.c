/*
 * bench_deltanet.c — the Gated DeltaNet token mixer (engine/deltanet.c) at Qwen3.6-35B-A3B's widths
 * (32 value heads x 128, 16 key heads x 128, conv of 4): ms per dn_forward of one sequence's run
 * of n entries in the sequential and the chunked form, alternating in one process (so both see
 * the same neighbours), median of the repetitions, and their ratio. It picks DN_CHUNKED_MIN.
 * A benchmark, not a test: it prints numbers, it asserts nothing.
 *
 *   tools/bench/build.sh && build/bench_deltanet [n_threads] [reps] [n ...]   (default: 1 7 8 16 32 64 128 512)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deltanet.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static float uni(unsigned long long *s, float a) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((float)(*s >> 40) / (float)(1 << 24) * 2 - 1) * a;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int n_threads = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 7;
    int lens[32] = {8, 16, 32, 64, 128, 512}, n_lens = 6;
    if (argc > 3) n_lens = 0;
    for (int i = 3; i < argc && n_lens < 32; i++) lens[n_lens++] = atoi(argv[i]);
    dn_dims d = {.K = 4, .hk = 16, .hv = 32, .dk = 128, .dv = 128, .eps = 1e-6f};
    d.conv_dim = 2 * d.hk * d.dk + d.hv * d.dv;
    int N = 0;
    for (int i = 0; i < n_lens; i++) N = lens[i] > N ? lens[i] : N;
    size_t C = (size_t)d.conv_dim, VD = (size_t)d.hv * d.dv, SF = dn_state_floats(&d);
    float *qkv0 = malloc(sizeof(float) * N * C), *qkv = malloc(sizeof(float) * N * C), *z = malloc(sizeof(float) * N * VD);
    float *beta = malloc(sizeof(float) * N * d.hv), *alpha = malloc(sizeof(float) * N * d.hv), *out = malloc(sizeof(float) * N * VD);
    float *conv_w = malloc(sizeof(float) * C * d.K), dt_bias[32], ssm_a[32], norm_w[128];
    float *state = calloc(SF, sizeof(float)), *scratch = malloc(sizeof(float) * n_threads * dn_scratch_floats(&d));
    int *order = malloc(sizeof(int) * N), run[2] = {0, 0};
    unsigned long long s = 1;
    for (size_t i = 0; i < (size_t)N * C; i++) qkv0[i] = uni(&s, 1);
    for (size_t i = 0; i < (size_t)N * VD; i++) z[i] = uni(&s, 2);
    for (int i = 0; i < N * d.hv; i++) beta[i] = uni(&s, 2), alpha[i] = uni(&s, 0.5f);
    for (size_t i = 0; i < C * d.K; i++) conv_w[i] = uni(&s, 0.8f);
    for (int h = 0; h < 32; h++) dt_bias[h] = -4, ssm_a[h] = -1 - 8 * (uni(&s, 1) + 1);
    for (int i = 0; i < 128; i++) norm_w[i] = 1;
    for (int i = 0; i < N; i++) order[i] = i;
    printf("threads %d, reps %d (median ms per dn_forward of one run; conv and norms included)\n", n_threads, reps);
    printf("%6s %12s %12s %8s\n", "n", "sequential", "chunked", "seq/chk");
    for (int li = 0; li < n_lens; li++) {
        int n = lens[li];
        double t[2][64];
        run[1] = n;
        for (int r = 0; r < reps && r < 64; r++)
            for (int f = 0; f < 2; f++) {
                memcpy(qkv, qkv0, sizeof(float) * n * C);
                memset(state, 0, sizeof(float) * SF);
                dn_job j = {.d = &d, .n = n, .order = order, .run_start = run, .n_runs = 1, .state = &state, .qkv = qkv,
                            .z = z, .beta = beta, .alpha = alpha, .conv_w = conv_w, .dt_bias = dt_bias, .ssm_a = ssm_a,
                            .norm_w = norm_w, .out = out, .scratch = scratch,
                            .form = f ? DN_FORM_CHUNKED : DN_FORM_SEQUENTIAL, .n_threads = n_threads};
                double t0 = now_ms();
                dn_forward(&j);
                t[f][r] = now_ms() - t0;
            }
        int m = reps < 64 ? reps : 64;
        qsort(t[0], m, sizeof(double), cmp_double), qsort(t[1], m, sizeof(double), cmp_double);
        printf("%6d %12.3f %12.3f %8.2f\n", n, t[0][m / 2], t[1][m / 2], t[0][m / 2] / t[1][m / 2]);
    }
    return 0;
}
