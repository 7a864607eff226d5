/*
 * iq_vs_peer.c — issue 47's lattice encoders against llama.cpp's: the same rows quantized with the
 * same importances by attnd (quantize_row_weighted) and by the peer's ggml_quantize_chunk, both
 * decoded by attnd's dequantizer (the formats are the same bytes), and the importance-weighted
 * error of each:  E = sum imp[i] (x[i] - y[i])^2 / sum imp[i] x[i]^2  over all rows.
 * Prints one line per type: both errors and attnd / llama.cpp (below 1: attnd's error is lower;
 * issue 47's target is at most 1.02). A measurement tool, not a test: it needs the peer.
 *
 *   tools/bench/build.sh && build/iq_vs_peer LIBDIR [MODEL.gguf IMATRIX [ROWS]]
 *     LIBDIR: the folder of the peer's libggml-base.so.
 *     Without a model: 512 random rows of 4096 (sd 1 with a heavy-tailed scale per row) and
 *     log-normal importances per column. With one: every F32/F16/BF16 2-D weight whose rows 256
 *     divides and that IMATRIX has, up to ROWS rows (default 64) each.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/gguf.h"
#include "attnd/imatrix.h"
#include "attnd/quantize.h"
#include "quant.h"

typedef size_t (*peer_chunk_fn)(int type, const float *src, void *dst, int64_t start, int64_t nrows, int64_t n_per_row,
                                const float *imatrix);

static const uint32_t TYPES[] = {GGUF_TYPE_IQ2_XXS, GGUF_TYPE_IQ2_XS, GGUF_TYPE_IQ2_S, GGUF_TYPE_IQ3_XXS,
                                 GGUF_TYPE_IQ3_S,   GGUF_TYPE_IQ1_S,  GGUF_TYPE_IQ1_M};
#define N_TYPES (sizeof(TYPES) / sizeof(TYPES[0]))

typedef struct tally {
    double err[2], ref; /* weighted squared error of attnd [0] and the peer [1]; weighted sum of x^2 */
    double secs[2];
} tally;

static uint64_t rng = 88172645463325252ull;
static double unif(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float randn(void) { return (float)(sqrt(-2 * log(unif() + 1e-300)) * cos(6.283185307179586 * unif())); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* rows x (n_rows, n) with importances imp (n) into every type's tally */
static void measure(tally *t, peer_chunk_fn peer, const float *x, int64_t n_rows, int64_t n, const float *imp) {
    float *y = malloc(sizeof(float) * (size_t)n);
    for (size_t k = 0; k < N_TYPES; k++) {
        size_t rb = quant_row_bytes(TYPES[k], n);
        uint8_t *q[2] = {malloc(rb * (size_t)n_rows), malloc(rb * (size_t)n_rows)};
        double t0 = now_s();
        for (int64_t r = 0; r < n_rows; r++) quantize_row_weighted(q[0] + (size_t)r * rb, x + r * n, TYPES[k], n, imp);
        double t1 = now_s();
        peer((int)TYPES[k], x, q[1], 0, n_rows, n, imp);
        double t2 = now_s();
        t[k].secs[0] += t1 - t0, t[k].secs[1] += t2 - t1;
        for (int side = 0; side < 2; side++)
            for (int64_t r = 0; r < n_rows; r++) {
                quant_dequantize_row(y, q[side] + (size_t)r * rb, TYPES[k], n);
                for (int64_t i = 0; i < n; i++) {
                    double e = (double)x[r * n + i] - y[i];
                    t[k].err[side] += imp[i] * e * e;
                    if (side == 0) t[k].ref += imp[i] * (double)x[r * n + i] * x[r * n + i];
                }
            }
        free(q[0]);
        free(q[1]);
    }
    free(y);
}

static int from_model(tally *t, peer_chunk_fn peer, const char *model, const char *im_path, int max_rows) {
    attnd_err err = {{0}};
    gguf_file *f = NULL;
    imatrix *im = NULL;
    if (gguf_open(&f, model, &err) != ATTND_OK || imatrix_load(&im, im_path, &err) != ATTND_OK) {
        fprintf(stderr, "iq_vs_peer: %s\n", err.msg);
        gguf_close(f);
        return 1;
    }
    int used = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *ti = gguf_tensor_at(f, i);
        const imatrix_entry *e = imatrix_find(im, ti->name);
        bool is_float = ti->type == GGUF_TYPE_F32 || ti->type == GGUF_TYPE_F16 || ti->type == GGUF_TYPE_BF16;
        if (!e || !is_float || ti->n_dims != 2 || ti->ne[0] % 256 || (uint64_t)e->cols != ti->ne[0]) continue;
        int64_t n = (int64_t)ti->ne[0], rows = (int64_t)ti->ne[1] < max_rows ? (int64_t)ti->ne[1] : max_rows;
        float *x = malloc(sizeof(float) * (size_t)(n * rows)), *imp = malloc(sizeof(float) * (size_t)n);
        size_t in_row = quant_row_bytes(ti->type, n);
        for (int64_t r = 0; r < rows; r++) quant_dequantize_row(x + r * n, (const uint8_t *)ti->data + (size_t)r * in_row, ti->type, n);
        imatrix_importance(e, 0, imp);
        measure(t, peer, x, rows, n, imp);
        printf("  %-28s %lld x %lld\n", ti->name, (long long)rows, (long long)n);
        used++;
        free(x);
        free(imp);
    }
    imatrix_destroy(im);
    gguf_close(f);
    if (!used) fprintf(stderr, "iq_vs_peer: no tensor of %s has 256-divisible rows and an imatrix entry\n", model);
    return used ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc != 2 && argc < 4) {
        fprintf(stderr, "usage: %s LIBDIR [MODEL.gguf IMATRIX [ROWS]]\n", argv[0]);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml-base.so", argv[1]);
    void *base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    peer_chunk_fn peer = base ? (peer_chunk_fn)dlsym(base, "ggml_quantize_chunk") : NULL;
    if (!peer) {
        fprintf(stderr, "iq_vs_peer: %s\n", dlerror());
        return 1;
    }
    tally t[N_TYPES];
    memset(t, 0, sizeof t);
    if (argc >= 4) {
        if (from_model(t, peer, argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 64)) return 1;
    } else {
        enum { ROWS = 512, N = 4096 };
        float *x = malloc(sizeof(float) * ROWS * N), *imp = malloc(sizeof(float) * N);
        for (int i = 0; i < N; i++) imp[i] = expf(1.5f * randn());
        for (int r = 0; r < ROWS; r++) {
            float s = expf(0.5f * randn());
            for (int i = 0; i < N; i++) x[r * N + i] = s * randn() * (unif() < 0.01 ? 4.f : 1.f);
        }
        measure(t, peer, x, ROWS, N, imp);
        free(x);
        free(imp);
    }
    printf("%-8s %12s %12s %8s %10s %10s\n", "type", "attnd E", "llama.cpp E", "ratio", "attnd s", "llama s");
    for (size_t k = 0; k < N_TYPES; k++)
        printf("%-8s %12.6f %12.6f %8.4f %10.3f %10.3f\n", gguf_type_name(TYPES[k]), t[k].err[0] / t[k].ref,
               t[k].err[1] / t[k].ref, t[k].err[0] / t[k].err[1], t[k].secs[0], t[k].secs[1]);
    return 0;
}
