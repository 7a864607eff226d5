/*
 * bench_iq_peer.c — issue 47's low-bit types (IQ1_S ... IQ3_S, TQ1_0, TQ2_0, NVFP4) at kernel
 * level against llama.cpp's CPU library, in one process: attnd's quant_matmul against the peer's
 * own ggml_mul_mat, one node computed by ggml_graph_compute_with_ctx on 1 thread (or
 * ATTND_BENCH_THREADS): what llama.cpp runs for a batch (its activation rounding, and from 8
 * tokens on the grid types' "iqp" path, ggml-cpu/iqp.cpp: 8 rows decoded once into an int8 panel,
 * then a gemm over all tokens). The column "vec_dot" is the older model of it, one
 * `ggml_vec_dot_<type>_q8_K` (NVFP4: `_q8_0`) per row and token in 16 x 16 blocks, on 1 thread
 * (what ggml runs below 8 tokens, and for TQ1_0, TQ2_0 and NVFP4 at any count): it made attnd
 * look 2-3x faster at 32 and 128 tokens than it was. One 5632 x 2048 matrix (TinyLlama's ffn_up)
 * of random blocks with small finite scales, hot caches, process CPU time (ATTND_BENCH_THREADS=n:
 * both sides on n threads, wall time). The sides alternate, `reps` times each; the table gives the
 * medians, the ratio (llama.cpp mul_mat time / attnd time: above 1, attnd is faster), and the
 * largest difference of the two sides' results relative to the largest result (a sanity check,
 * not a test). Tokens up to 512.
 * A benchmark, not a test: it needs llama.cpp's CPU library and asserts nothing.
 *
 *   tools/bench/build.sh && build/bench_iq_peer LIBDIR [tokens,...] [reps] [TYPE...]
 *     LIBDIR: the folder of llama.cpp's libggml-base.so and libggml-cpu-<variant>.so
 *     (ATTND_PEER_CPU=zen4 by default: the variant ggml picks on this CPU); tokens default 1,32;
 *     reps default 9; types default all ten. On a CPU without AVX-512 (Zen 3, Haswell...) set
 *     ATTND_PEER_CPU=haswell.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "attnd/gguf.h"
#include "quant.h"

typedef void (*peer_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);
typedef void (*peer_quant_fn)(const float *x, void *y, int64_t k);

/* The few ggml calls the graph needs, by dlsym (ggml.h's types kept opaque; enums passed as int). */
typedef struct peer_init_params {
    size_t mem_size;
    void *mem_buffer;
    _Bool no_alloc;
} peer_init_params;
typedef struct peer_ggml {
    void *(*init)(peer_init_params);
    void *(*new_2d)(void *ctx, int type, int64_t ne0, int64_t ne1);
    void *(*mul_mat)(void *ctx, void *a, void *b);
    void *(*new_graph)(void *ctx);
    void (*expand)(void *graph, void *t);
    int (*compute)(void *ctx, void *graph, int n_threads);
    void *(*data)(const void *t);
    void (*free)(void *ctx);
} peer_ggml;
static peer_ggml G;

static int n_threads = 1; /* ATTND_BENCH_THREADS: both sides on that many threads (then wall time) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(n_threads > 1 ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

typedef struct bench_type {
    uint32_t type;
    const char *dot; /* the peer's symbol */
    int d_off;       /* the f16 d (-1: IQ1_M's nibbles; -2: NVFP4's byte scales) */
    int q8_0;        /* activations are Q8_0 blocks (else Q8_K) */
    peer_dot_fn fn;
} bench_type;

static bench_type TYPES[] = {
    {GGUF_TYPE_IQ2_XXS, "ggml_vec_dot_iq2_xxs_q8_K", 0, 0, NULL}, {GGUF_TYPE_IQ2_XS, "ggml_vec_dot_iq2_xs_q8_K", 0, 0, NULL},
    {GGUF_TYPE_IQ2_S, "ggml_vec_dot_iq2_s_q8_K", 0, 0, NULL},     {GGUF_TYPE_IQ3_XXS, "ggml_vec_dot_iq3_xxs_q8_K", 0, 0, NULL},
    {GGUF_TYPE_IQ3_S, "ggml_vec_dot_iq3_s_q8_K", 0, 0, NULL},     {GGUF_TYPE_IQ1_S, "ggml_vec_dot_iq1_s_q8_K", 0, 0, NULL},
    {GGUF_TYPE_IQ1_M, "ggml_vec_dot_iq1_m_q8_K", -1, 0, NULL},    {GGUF_TYPE_TQ1_0, "ggml_vec_dot_tq1_0_q8_K", 52, 0, NULL},
    {GGUF_TYPE_TQ2_0, "ggml_vec_dot_tq2_0_q8_K", 64, 0, NULL},    {GGUF_TYPE_NVFP4, "ggml_vec_dot_nvfp4_q8_0", -2, 1, NULL},
};
#define N_TYPES (sizeof TYPES / sizeof *TYPES)

enum { ROWS = 5632, COLS = 2048, MAX_TOK = 512, MAX_REPS = 99 };

/* Random block bytes with every scale field a small finite value. */
static uint8_t *make_weights(const bench_type *t) {
    size_t rb = quant_row_bytes(t->type, COLS), n = rb * ROWS;
    size_t bb = gguf_type_block_bytes(t->type);
    uint8_t *w = malloc(n);
    if (!w) return NULL;
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)rnd();
    uint16_t h = quant_f32_to_f16(0.01f);
    for (uint8_t *p = w; p < w + n; p += bb) {
        if (t->d_off >= 0) memcpy(p + t->d_off, &h, 2);
        else if (t->d_off == -1) /* IQ1_M: the f16 d is the top nibbles of the 4 scale words */
            for (int k = 0; k < 4; k++) p[49 + 2 * k] = (uint8_t)((p[49 + 2 * k] & 15) | ((h >> (4 * k)) & 15) << 4);
        else
            for (int k = 0; k < 4; k++) p[k] = 0x38; /* UE4M3 1.0 */
    }
    return w;
}

/* llama.cpp's side: round the activations, then one vec_dot per (row, token) in 16 x 16 blocks,
 * as ggml_compute_forward_mul_mat_one_chunk orders them. */
static void peer_matmul(float *out, const uint8_t *w, const bench_type *t, const float *x, int nt, uint8_t *q8,
                        peer_quant_fn q8k, peer_quant_fn q80) {
    size_t rb = quant_row_bytes(t->type, COLS), yb = t->q8_0 ? (size_t)COLS / 32 * 34 : (size_t)COLS / 256 * 292;
    for (int k = 0; k < nt; k++) (t->q8_0 ? q80 : q8k)(x + (size_t)k * COLS, q8 + (size_t)k * yb, COLS);
    for (int k0 = 0; k0 < nt; k0 += 16)
        for (int r0 = 0; r0 < ROWS; r0 += 16)
            for (int k = k0; k < k0 + 16 && k < nt; k++)
                for (int r = r0; r < r0 + 16 && r < ROWS; r++)
                    t->fn(COLS, out + (size_t)k * ROWS + r, 0, w + (size_t)r * rb, 0, q8 + (size_t)k * yb, 0, 1);
}

/* llama.cpp's mul_mat of w (ROWS x COLS) and nt tokens x, as its graph runs it; the time of the
 * compute alone (the tensors are filled before). Returns the seconds, or -1. */
static double peer_graph(float *out, const uint8_t *w, const bench_type *t, const float *x, int nt) {
    size_t wbytes = quant_row_bytes(t->type, COLS) * ROWS;
    peer_init_params ip = {wbytes + sizeof(float) * (size_t)nt * (COLS + ROWS) + ((size_t)64 << 20), NULL, 0};
    void *ctx = G.init(ip);
    if (!ctx) return -1;
    void *a = G.new_2d(ctx, (int)t->type, COLS, ROWS), *b = G.new_2d(ctx, 0 /* F32 */, COLS, nt);
    void *c = G.mul_mat(ctx, a, b), *gf = G.new_graph(ctx);
    G.expand(gf, c);
    memcpy(G.data(a), w, wbytes);
    memcpy(G.data(b), x, sizeof(float) * (size_t)nt * COLS);
    double t0 = now_s();
    int st = G.compute(ctx, gf, n_threads);
    double t1 = now_s();
    memcpy(out, G.data(c), sizeof(float) * (size_t)nt * ROWS);
    G.free(ctx);
    return st == 0 ? t1 - t0 : -1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int wanted(const bench_type *t, int argc, char **argv, int first) {
    if (first >= argc) return 1;
    for (int i = first; i < argc; i++)
        if (strcasecmp(argv[i], gguf_type_name(t->type)) == 0) return 1;
    return 0;
}

static void bench_one(const bench_type *t, int nt, int reps, peer_quant_fn q8k, peer_quant_fn q80) {
    uint8_t *w = make_weights(t);
    float *x = malloc(sizeof(float) * (size_t)nt * COLS);
    float *oa = malloc(sizeof(float) * (size_t)nt * ROWS * 2), *ol = malloc(sizeof(float) * (size_t)nt * ROWS);
    void *scratch = malloc(quant_scratch_bytes(t->type, nt, COLS));
    uint8_t *q8 = malloc((size_t)nt * COLS * 2);
    if (!w || !x || !oa || !ol || !scratch || !q8) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < (size_t)nt * COLS; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.f;
    double ta[MAX_REPS], tl[MAX_REPS], tv[MAX_REPS];
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now_s();
        quant_matmul(oa, w, t->type, ROWS, COLS, x, nt, scratch, n_threads);
        double t1 = now_s();
        tl[rep] = peer_graph(ol, w, t, x, nt);
        double t2 = now_s();
        if (t->fn) peer_matmul(oa + (size_t)nt * ROWS, w, t, x, nt, q8, q8k, q80);
        double t3 = now_s();
        ta[rep] = t1 - t0, tv[rep] = t3 - t2;
    }
    double big = 0, diff = 0;
    for (size_t i = 0; i < (size_t)nt * ROWS; i++) {
        big = fmax(big, fabs((double)ol[i]));
        diff = fmax(diff, fabs((double)oa[i] - (double)ol[i]));
    }
    double ma = median(ta, reps), ml = median(tl, reps), mv = median(tv, reps);
    printf("| %-7s | %3d | %8.3f | %8.3f | %5.2fx | %8.3f | %.1e |\n", gguf_type_name(t->type), nt, ma * 1e3, ml * 1e3,
           ml / ma, t->fn ? mv * 1e3 : 0., big > 0 ? diff / big : diff);
    fflush(stdout);
    free(w), free(x), free(oa), free(ol), free(scratch), free(q8);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s LIBDIR [tokens,...] [reps] [TYPE...]\n", argv[0]);
        return 2;
    }
    if (getenv("ATTND_BENCH_THREADS")) n_threads = atoi(getenv("ATTND_BENCH_THREADS"));
    if (n_threads < 1) n_threads = 1;
    const char *variant = getenv("ATTND_PEER_CPU") ? getenv("ATTND_PEER_CPU") : "zen4";
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml-base.so", argv[1]);
    void *base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", argv[1], variant);
    void *cpu = base ? dlopen(path, RTLD_NOW | RTLD_GLOBAL) : NULL;
    if (!cpu) {
        fprintf(stderr, "cannot load llama.cpp's CPU library: %s\n", dlerror());
        return 1;
    }
    void (*cpu_init)(void) = (void (*)(void))dlsym(cpu, "ggml_cpu_init");
    peer_quant_fn q8k = (peer_quant_fn)dlsym(cpu, "quantize_row_q8_K"), q80 = (peer_quant_fn)dlsym(cpu, "quantize_row_q8_0");
    if (!cpu_init || !q8k || !q80) {
        fprintf(stderr, "llama.cpp's CPU library lacks ggml_cpu_init / quantize_row_q8_K / quantize_row_q8_0\n");
        return 1;
    }
    cpu_init();
    for (size_t i = 0; i < N_TYPES; i++) TYPES[i].fn = (peer_dot_fn)dlsym(cpu, TYPES[i].dot);
    *(void **)&G.init = dlsym(base, "ggml_init");
    *(void **)&G.new_2d = dlsym(base, "ggml_new_tensor_2d");
    *(void **)&G.mul_mat = dlsym(base, "ggml_mul_mat");
    *(void **)&G.new_graph = dlsym(base, "ggml_new_graph");
    *(void **)&G.expand = dlsym(base, "ggml_build_forward_expand");
    *(void **)&G.compute = dlsym(cpu, "ggml_graph_compute_with_ctx");
    *(void **)&G.data = dlsym(base, "ggml_get_data");
    *(void **)&G.free = dlsym(base, "ggml_free");
    if (!G.init || !G.new_2d || !G.mul_mat || !G.new_graph || !G.expand || !G.compute || !G.data || !G.free) {
        fprintf(stderr, "llama.cpp's libraries lack a ggml graph call\n");
        return 1;
    }

    int toks[16], n_toks = 0;
    for (char *s = argc > 2 ? argv[2] : "1,32"; *s && n_toks < 16;) {
        int v = (int)strtol(s, &s, 10);
        if (v >= 1 && v <= MAX_TOK) toks[n_toks++] = v;
        while (*s == ',') s++;
        if (*s && (*s < '0' || *s > '9')) break;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 9;
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;

    printf("attnd isa %s vs llama.cpp libggml-cpu-%s (ggml_mul_mat in a graph; vec_dot: per row and token); %d x %d, %d thread(s) (%s time), medians of %d alternating runs\n\n",
           quant_isa_name(quant_isa_active()), variant, ROWS, COLS, n_threads, n_threads > 1 ? "wall" : "process CPU", reps);
    printf("| type | tokens | attnd ms | llama.cpp mul_mat ms | llama.cpp / attnd | vec_dot ms | max diff / max |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    for (int k = 0; k < n_toks; k++)
        for (size_t i = 0; i < N_TYPES; i++) {
            if (!wanted(&TYPES[i], argc, argv, 4)) continue;
            bench_one(&TYPES[i], toks[k], reps, q8k, q80);
        }
    return 0;
}
