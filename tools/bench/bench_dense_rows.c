/*
 * bench_dense_rows.c — what a speculative verify's few rows cost in the dense row kernels:
 * quant_matmul of F16 (or F32 / BF16) weights against 2, 3 and 4 tokens, as a ratio to 1 token,
 * on one shape. The weights rotate through `mb` MB of copies (default 192), so they stream from
 * DRAM as a decode step's do; mb 0 keeps one copy, which stays in cache (the kernel's compute
 * alone). Timed by the process's CPU time, medians of the repetitions, the token counts
 * alternating in one loop. bench_mtp's model (8 x 1024, FFN 3072, vocabulary 16384) has the
 * shapes 3072 x 1024 (FFN gate/up), 1024 x 3072 (FFN down) and 16384 x 1024 (the head).
 * A benchmark, not a test: it prints numbers, it asserts nothing.
 *
 *   tools/bench/build.sh && build/bench_dense_rows [threads 1] [reps 7] [rows 3072] [cols 1024] [mb 192] [type F16]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/gguf.h"
#include "quant.h"

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 7;
    int64_t rows = argc > 3 ? atoll(argv[3]) : 3072, cols = argc > 4 ? atoll(argv[4]) : 1024;
    size_t total = (size_t)(argc > 5 ? atoll(argv[5]) : 192) << 20;
    const char *tname = argc > 6 ? argv[6] : "F16";
    uint32_t type = !strcmp(tname, "F32") ? GGUF_TYPE_F32 : !strcmp(tname, "BF16") ? GGUF_TYPE_BF16 : GGUF_TYPE_F16;
    if (threads < 1 || reps < 1 || reps > 64 || rows < 1 || cols < 1) {
        fprintf(stderr, "usage: bench_dense_rows [threads] [reps 1..64] [rows] [cols] [mb] [F16|F32|BF16]\n");
        return 2;
    }
    size_t bytes = quant_row_bytes(type, cols) * (size_t)rows;
    int copies = total / bytes > 0 ? (int)(total / bytes) : 1, calls = copies < 200 ? 200 : copies;
    uint8_t **w = malloc(sizeof(uint8_t *) * (size_t)copies);
    float *x = malloc(sizeof(float) * 4 * (size_t)cols), *out = malloc(sizeof(float) * 4 * (size_t)rows);
    void *scratch = malloc(quant_scratch_bytes(type, 4, cols) + 64);
    if (!w || !x || !out || !scratch) return 1;
    uint64_t r = 7;
    for (int m = 0; m < copies; m++) {
        if (!(w[m] = malloc(bytes))) return 1;
        for (size_t i = 0; i < bytes; i += 2) { /* small finite values in every 16-bit half */
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            uint16_t h = (uint16_t)(0x3000 + ((r >> 40) & 0x3ff));
            memcpy(w[m] + i, &h, 2);
        }
    }
    for (int64_t i = 0; i < 4 * cols; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    double t[5][64];
    for (int rep = 0; rep < reps; rep++)
        for (int nt = 1; nt <= 4; nt++) {
            double t0 = cpu_s();
            for (int c = 0; c < calls; c++) quant_matmul(out, w[c % copies], type, rows, cols, x, nt, scratch, threads);
            t[nt][rep] = (cpu_s() - t0) / calls;
        }
    for (int nt = 1; nt <= 4; nt++) qsort(t[nt], (size_t)reps, sizeof(double), cmp_double);
    double one = t[1][reps / 2];
    printf("%s %s %lld x %lld, %d thread(s), %s: 1 token %.3f ms (%.1f GB/s of weights)", quant_isa_name(quant_isa_active()),
           tname, (long long)rows, (long long)cols, threads, copies > 1 ? "streamed" : "cached", one * 1e3, bytes / one / 1e9);
    for (int nt = 2; nt <= 4; nt++) printf(" | %d: %.2fx", nt, t[nt][reps / 2] / one);
    printf("\n");
    for (int m = 0; m < copies; m++) free(w[m]);
    free(w), free(x), free(out), free(scratch);
    return 0;
}
