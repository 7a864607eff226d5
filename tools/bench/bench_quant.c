/*
 * bench_quant.c — micro-benchmark of quant_matmul: ns per call, ns per weight row and GFLOP/s
 * for each weight type and instruction set, on the matrix shapes of the rand-* fixture models
 * (dim 256, FFN 768, vocab 1024), plus the matmul time of one decoded token of those models.
 * A benchmark, not a test: it prints numbers and ratios, it asserts nothing.
 *
 *   tools/bench/build.sh && build/bench_quant [n_threads] [n_tok] [models]   (models: skip the per-shape table)
 *   build/bench_quant [n_threads] [n_tok] tl [isa [type]]   (TinyLlama-1.1B matrix shapes, every quantized type incl.
 *                                               those of issue 27, best ISA only: GFLOP/s and weight GB/s, the
 *                                               kernel path that ran (amx tiles or not), weights packed where the
 *                                               ISA packs them, as a model loads them; for n_tok <= 16 the weights rotate through
 *                                               96 MB of copies, so they stream from DRAM as in decode)
 *   build/bench_quant [n_threads] [n_tok] tlpack [type]   (every packed type, or only `type`, at those
 *                                               shapes: the mapped layout against the copy packed at load,
 *                                               alternating in one process; packing cost; tlpackhot: one
 *                                               copy of the weights, cached when it fits)
 * Streamed runs (tl with n_tok <= 16, tlpack) first measure the machine's DRAM read bandwidth with
 * the same threads (256 MB read by the widest loads, best of 5) and print decode as a share of it.
 * ATTND_PF_DIST=bytes[,nta] sets the packed decode kernels' software prefetch (quant_impl.h).
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>

#include "attnd/gguf.h"
#include "attnd/quantize.h"
#include "quant.h"

/* With one thread, the process's CPU time: on a shared machine it leaves out the time other
 * processes hold the core (cache pollution still shows). With more, wall-clock time. */
static int g_cpu_clock = 1;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

// ---- the machine's DRAM read bandwidth, measured in the same run ------------------------------

#define BW_BYTES ((size_t)256 << 20) /* well past any L3; on 2 MB pages where allowed, as the packed copies */

typedef struct bw_part {
    const uint8_t *p;
    size_t n;
    uint64_t sink;
} bw_part;

/* Every byte of [p, p + n) through the widest loads the CPU has, four independent chains. */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint8_t *p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        a0 = _mm512_xor_si512(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512((const void *)(p + i + 128)));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)));
}
#endif

static uint64_t read_plain(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)(const void *)p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) a0 ^= q[i], a1 ^= q[i + 1], a2 ^= q[i + 2], a3 ^= q[i + 3];
    return a0 ^ a1 ^ a2 ^ a3;
}

static void *bw_thread(void *arg) {
    bw_part *b = arg;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        b->sink = read_avx512(b->p, b->n);
        return NULL;
    }
#endif
    b->sink = read_plain(b->p, b->n);
    return NULL;
}

/* GB/s of reading BW_BYTES from DRAM with n_threads threads (each its share), best of 5, timed as
 * the kernels are (one thread: its CPU time). 0 when the buffer cannot be had. */
static double dram_read_gbs(int n_threads) {
    void *mem = NULL;
    if (posix_memalign(&mem, (size_t)2 << 20, BW_BYTES) != 0) return 0;
    uint8_t *buf = mem;
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, BW_BYTES, MADV_HUGEPAGE); /* as quant_pack's copies: 2 MB pages where the kernel allows */
#endif
    memset(buf, 1, BW_BYTES); /* backed by pages, not the shared zero page */
    double best = 1e30;
    enum { MAX_T = 64 };
    int nt = n_threads < MAX_T ? n_threads : MAX_T;
    for (int rep = 0; rep < 5; rep++) {
        bw_part part[MAX_T];
        pthread_t th[MAX_T];
        size_t per = BW_BYTES / (size_t)nt / 256 * 256;
        double t0 = now_s();
        for (int i = 0; i < nt; i++) {
            part[i] = (bw_part){buf + (size_t)i * per, per, 0};
            if (nt == 1) bw_thread(&part[0]);
            else pthread_create(&th[i], NULL, bw_thread, &part[i]);
        }
        for (int i = 0; nt > 1 && i < nt; i++) pthread_join(th[i], NULL);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
        if (part[0].sink == 42) printf(" "); /* keeps the reads */
    }
    free(buf);
    return (double)(BW_BYTES / (size_t)nt / 256 * 256) * (double)nt / best * 1e-9;
}

/* Another copy of weights w (rows x cols of type) at another address: the streamed runs read
 * copies in turn so that they come from DRAM, and encoding each (the types of issue 27 go through
 * their quantizers) would take most of the run. */
static uint8_t *copy_weights(const uint8_t *w, uint32_t type, int64_t rows, int64_t cols) {
    size_t n = quant_row_bytes(type, cols) * (size_t)rows;
    uint8_t *c = aligned_alloc(64, (n + 63) / 64 * 64);
    memcpy(c, w, n);
    return c;
}

/* Random but well-formed weights: every f16 field set to a small finite scale. */
static uint8_t *make_weights(uint32_t type, int64_t rows, int64_t cols) {
    size_t rb = quant_row_bytes(type, cols), n = rb * (size_t)rows;
    uint8_t *w = aligned_alloc(64, (n + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)rnd();
    uint16_t h = quant_f32_to_f16(0.01f);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *p = w + (size_t)r * rb;
        for (int64_t c = 0; c < cols; c++) {
            switch (type) {
            case GGUF_TYPE_F32: ((float *)p)[c] = (float)(rnd() % 1000) / 1000.f - 0.5f; break;
            case GGUF_TYPE_F16: memcpy(p + 2 * c, &h, 2); break;
            case GGUF_TYPE_BF16: {
                uint16_t b = quant_f32_to_bf16(0.01f * (float)(rnd() % 100));
                memcpy(p + 2 * c, &b, 2);
                break;
            }
            case GGUF_TYPE_Q8_0: if (c % 32 == 0) memcpy(p + c / 32 * 34, &h, 2); break;
            case GGUF_TYPE_Q4_0: if (c % 32 == 0) memcpy(p + c / 32 * 18, &h, 2); break;
            case GGUF_TYPE_Q4_K: if (c % 256 == 0) { memcpy(p + c / 256 * 144, &h, 2); memcpy(p + c / 256 * 144 + 2, &h, 2); } break;
            case GGUF_TYPE_Q6_K: if (c % 256 == 0) memcpy(p + c / 256 * 210 + 208, &h, 2); break;
            default: break; /* the types of issue 27: encoded from floats below */
            }
        }
        if (type == GGUF_TYPE_Q4_1 || type == GGUF_TYPE_Q5_0 || type == GGUF_TYPE_Q5_1 || type == GGUF_TYPE_IQ4_NL ||
            type == GGUF_TYPE_MXFP4 || type == GGUF_TYPE_Q2_K || type == GGUF_TYPE_Q3_K || type == GGUF_TYPE_Q5_K ||
            type == GGUF_TYPE_IQ4_XS) {
            static float row[8192];
            for (int64_t c = 0; c < cols && c < 8192; c++) row[c] = (float)(rnd() % 2001) / 10000.f - 0.1f; /* d stays a normal f16 */
            quantize_row(p, row, type, cols);
        }
    }
    return w;
}

/* Median-free but robust enough: best of several timed batches (the machine is shared). */
static double time_matmul(uint32_t type, int64_t rows, int64_t cols, int n_tok, int n_threads, int reps) {
    uint8_t *w = make_weights(type, rows, cols);
    float *x = malloc((size_t)n_tok * (size_t)cols * sizeof(float));
    float *out = malloc((size_t)n_tok * (size_t)rows * sizeof(float));
    for (int64_t i = 0; i < n_tok * cols; i++) x[i] = (float)(rnd() % 2001) / 1000.f - 1.f;
    void *scratch = malloc(quant_scratch_bytes(type, n_tok, cols) + 1);
    double best = 1e30;
    for (int batch = 0; batch < 7; batch++) {
        double t0 = now_s();
        for (int i = 0; i < reps; i++) quant_matmul(out, w, type, rows, cols, x, n_tok, scratch, n_threads);
        double dt = (now_s() - t0) / reps;
        if (dt < best) best = dt;
    }
    free(w);
    free(x);
    free(out);
    free(scratch);
    return best;
}

static const uint32_t TYPES[] = {GGUF_TYPE_F32,  GGUF_TYPE_F16,  GGUF_TYPE_BF16, GGUF_TYPE_Q8_0,
                                 GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K};

/* The matmuls of one decoded token of a rand-* model: per layer q, k, v, o, gate, up, down; then the
 * F32 output head. */
static double model_token_s(uint32_t attn_t, uint32_t down_t, int n_threads, int n_tok) {
    const int L = 4;
    double s = 0;
    s += 2 * time_matmul(attn_t, 256, 256, n_tok, n_threads, 200);  /* q, o */
    s += 2 * time_matmul(attn_t, 128, 256, n_tok, n_threads, 200);  /* k, v */
    s += 2 * time_matmul(attn_t, 768, 256, n_tok, n_threads, 100);  /* gate, up */
    s += time_matmul(down_t, 256, 768, n_tok, n_threads, 100);      /* down */
    s *= L;
    s += time_matmul(GGUF_TYPE_F32, 1024, 256, n_tok, n_threads, 100); /* output */
    return s;
}

/* The same step with every layer's weights in their own buffers, as in a real model: weights
 * stream through the caches instead of staying hot in L1/L2. Returns seconds per step. */
static double model_stream_s(uint32_t attn_t, uint32_t down_t, int n_threads, int n_tok) {
    enum { L = 4, D = 256, KVD = 128, F = 768, V = 1024 };
    const int64_t shp[7][2] = {{D, D}, {KVD, D}, {KVD, D}, {D, D}, {F, D}, {F, D}, {D, F}};
    uint8_t *w[L][7];
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 7; k++) w[l][k] = make_weights(k == 6 ? down_t : attn_t, shp[k][0], shp[k][1]);
    uint8_t *head = make_weights(GGUF_TYPE_F32, V, D);
    float *x = malloc((size_t)n_tok * F * sizeof(float)), *out = malloc((size_t)n_tok * V * sizeof(float));
    for (int64_t i = 0; i < (int64_t)n_tok * F; i++) x[i] = (float)(rnd() % 2001) / 1000.f - 1.f;
    size_t sb = quant_scratch_bytes(attn_t, n_tok, F);
    if (quant_scratch_bytes(down_t, n_tok, F) > sb) sb = quant_scratch_bytes(down_t, n_tok, F);
    void *scratch = malloc(sb);
    double best = 1e30;
    for (int batch = 0; batch < 7; batch++) {
        const int reps = 50;
        double t0 = now_s();
        for (int i = 0; i < reps; i++) {
            for (int l = 0; l < L; l++)
                for (int k = 0; k < 7; k++)
                    quant_matmul(out, w[l][k], k == 6 ? down_t : attn_t, shp[k][0], shp[k][1], x, n_tok, scratch,
                                 n_threads);
            quant_matmul(out, head, GGUF_TYPE_F32, V, D, x, n_tok, scratch, n_threads);
        }
        double dt = (now_s() - t0) / reps;
        if (dt < best) best = dt;
    }
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 7; k++) free(w[l][k]);
    free(head);
    free(x);
    free(out);
    free(scratch);
    return best;
}

/* One line per instruction set up to best: the matmul time of one step of the rand-Q8_0 and
 * rand-Q4_K models as step_s measures it (weights shared or streamed). */
static void print_model_steps(double (*step_s)(uint32_t, uint32_t, int, int), quant_isa best, int n_threads,
                              int n_tok) {
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)best; isa++) {
        quant_isa_force((quant_isa)isa);
        double q8 = step_s(GGUF_TYPE_Q8_0, GGUF_TYPE_Q8_0, n_threads, n_tok);
        double q4k = step_s(GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K, n_threads, n_tok);
        printf("  %-8s rand-Q8_0 %8.1f us (%6.0f steps/s)   rand-Q4_K %8.1f us (%6.0f steps/s)\n",
               quant_isa_name((quant_isa)isa), q8 * 1e6, 1 / q8, q4k * 1e6, 1 / q4k);
    }
}

/* ns per element of the vector primitives, per ISA (attention over 256 keys of head size 32). */
static void bench_primitives(void) {
    enum { NK = 256, HD = 32, NE = 4096 };
    static float K[NK * HD], q[HD], sc[NK], acc[HD], x[NE], y[NE];
    static uint16_t h[NE];
    for (int i = 0; i < NK * HD; i++) K[i] = (float)(rnd() % 2001) / 1000.f - 1.f;
    for (int i = 0; i < HD; i++) q[i] = K[i];
    for (int i = 0; i < NE; i++) x[i] = (float)(rnd() % 20001) / 1000.f - 10.f;
    printf("\nvector primitives (ns per key or element):\n");
    for (int isa = QUANT_ISA_PORTABLE; isa <= (int)quant_isa_best(); isa++) {
        quant_isa_force((quant_isa)isa);
        double best[4] = {1e30, 1e30, 1e30, 1e30};
        for (int b = 0; b < 7; b++) {
            double t0 = now_s();
            for (int r = 0; r < 200; r++) quant_dot_rows(sc, q, K, HD, NK, HD, 0.1f);
            double t1 = now_s();
            for (int r = 0; r < 200; r++) quant_axpy_rows(acc, sc, K, HD, NK, HD);
            double t2 = now_s();
            for (int r = 0; r < 50; r++) quant_exp(y, x, NE);
            double t3 = now_s();
            for (int r = 0; r < 50; r++) quant_f32_to_f16_row(h, x, NE);
            double t4 = now_s();
            double t[4] = {(t1 - t0) / 200 / NK, (t2 - t1) / 200 / NK, (t3 - t2) / 50 / NE, (t4 - t3) / 50 / NE};
            for (int k = 0; k < 4; k++)
                if (t[k] < best[k]) best[k] = t[k];
        }
        printf("  %-8s dot_rows(hd %d) %6.2f   axpy_rows(hd %d) %6.2f   exp %6.2f   f32->f16 %6.2f\n",
               quant_isa_name((quant_isa)isa), HD, best[0] * 1e9, HD, best[1] * 1e9, best[2] * 1e9, best[3] * 1e9);
    }
}

/* One TinyLlama-shaped matmul, seconds per call (best of 5 batches). */
static double time_tl(uint32_t type, int64_t rows, int64_t cols, int n_tok, int n_threads) {
    size_t wbytes = quant_row_bytes(type, cols) * (size_t)rows;
    int copies = n_tok <= 16 ? (int)((96u << 20) / wbytes + 1) : 1;
    uint8_t **w = malloc((size_t)copies * sizeof *w);
    quant_packed **pk = malloc((size_t)copies * sizeof *pk);
    for (int i = 0; i < copies; i++) {
        w[i] = i ? copy_weights(w[0], type, rows, cols) : make_weights(type, rows, cols);
        pk[i] = quant_pack(w[i], type, rows, cols); /* as a model loads: packed where the ISA packs it */
    }
    float *x = malloc((size_t)n_tok * (size_t)cols * sizeof(float));
    float *out = malloc((size_t)n_tok * (size_t)rows * sizeof(float));
    for (int64_t i = 0; i < n_tok * cols; i++) x[i] = (float)(rnd() % 2001) / 1000.f - 1.f;
    void *scratch = malloc(quant_scratch_bytes(type, n_tok, cols) + 1);
    double flop = 2.0 * (double)rows * (double)cols * n_tok;
    int reps = (int)(2e9 / flop) + 1; /* ~0.05 s per batch at 40 GFLOP/s */
    if (n_tok <= 16 && reps < copies) reps = copies;
    double best = 1e30;
    for (int batch = 0; batch < 5; batch++) {
        double t0 = now_s();
        for (int i = 0; i < reps; i++)
            quant_matmul_packed(out, w[i % copies], pk[i % copies], type, rows, cols, x, n_tok, scratch, n_threads);
        double dt = (now_s() - t0) / reps;
        if (dt < best) best = dt;
    }
    for (int i = 0; i < copies; i++) {
        free(w[i]);
        quant_packed_destroy(pk[i]);
    }
    free(w);
    free(pk);
    free(x);
    free(out);
    free(scratch);
    return best;
}

/* The kernel path a call of n_tok tokens on `type` takes under `isa`: the instruction set, and
 * for amx whether this type and batch go through the tiles. */
static const char *kernel_path(quant_isa isa, uint32_t type, int n_tok) {
    if (isa != QUANT_ISA_AMX) return quant_isa_name(isa);
    int tiled = type == GGUF_TYPE_Q8_0 || type == GGUF_TYPE_Q4_0 || type == GGUF_TYPE_Q4_K || type == GGUF_TYPE_Q6_K ||
                type == GGUF_TYPE_Q5_K || type == GGUF_TYPE_Q4_1 || type == GGUF_TYPE_Q5_0 || type == GGUF_TYPE_Q5_1 ||
                type == GGUF_TYPE_IQ4_NL || type == GGUF_TYPE_MXFP4 || type == GGUF_TYPE_IQ4_XS;
    return tiled && n_tok >= 128 ? "amx tiles" : "amx (avx512)"; /* AX_MIN_TOK of quant_amx.c */
}

static void bench_tl(int n_threads, int n_tok, quant_isa isa, const char *only) {
    static const uint32_t types[] = {GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K,
                                     /* issue 27 */
                                     GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1, GGUF_TYPE_IQ4_NL, GGUF_TYPE_MXFP4,
                                     GGUF_TYPE_Q2_K, GGUF_TYPE_Q3_K, GGUF_TYPE_Q5_K, GGUF_TYPE_IQ4_XS};
    static const int64_t shapes[][2] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
    double dram = n_tok <= 16 ? dram_read_gbs(n_threads) : 0;
    if (dram > 0) printf("DRAM read bandwidth, %d thread(s), same run: %.2f GB/s (decode: %% of it below)\n", n_threads, dram);
    printf("isa %s\n%-5s %-11s %-13s %10s %9s %9s %7s\n", quant_isa_name(isa), "type", "shape", "kernel", "ms/call", "GFLOP/s",
           "GB/s w", "% DRAM");
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            if (only && strcasecmp(only, gguf_type_name(types[ti])) != 0) continue;
            int64_t rows = shapes[si][0], cols = shapes[si][1];
            quant_isa_force(isa);
            double t = time_tl(types[ti], rows, cols, n_tok, n_threads);
            char shape[32];
            snprintf(shape, sizeof shape, "%ldx%ld", (long)rows, (long)cols);
            double gbs = (double)quant_row_bytes(types[ti], cols) * (double)rows / t * 1e-9;
            char share[16] = "-"; /* prefill: the weights are cached, no share of DRAM */
            if (dram > 0) snprintf(share, sizeof share, "%.1f%%", 100.0 * gbs / dram);
            printf("%-5s %-11s %-13s %10.3f %9.2f %9.2f %7s\n", gguf_type_name(types[ti]), shape,
                   kernel_path(quant_isa_active(), types[ti], n_tok), t * 1e3,
                   2.0 * (double)rows * (double)cols * n_tok / t * 1e-9, gbs, share);
            fflush(stdout);
        }
}

/* The packed types (or only the type named `only`) at TinyLlama shapes, read from the mapping's
 * layout (A) and from quant_pack's copy (B), in alternating batches in this one process (so a busy
 * machine slows both alike): ms per call, weight GB/s, B/A speed ratio, and the packing's cost
 * (ms per MB of weights). */
static void bench_tl_packed(int n_threads, int n_tok, int hot, const char *only) {
    static const int64_t shapes[][2] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
    static const uint32_t types[] = {GGUF_TYPE_Q8_0,  GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_K,   GGUF_TYPE_Q6_K,
                                     GGUF_TYPE_Q4_1,  GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1,   GGUF_TYPE_IQ4_NL,
                                     GGUF_TYPE_MXFP4, GGUF_TYPE_Q5_K, GGUF_TYPE_IQ4_XS, GGUF_TYPE_Q2_K,
                                     GGUF_TYPE_Q3_K};
    double dram = hot ? 0 : dram_read_gbs(n_threads);
    printf("mapped (A) vs packed at load (B), isa %s, alternating batches, best of 7\n", quant_isa_name(quant_isa_active()));
    if (dram > 0) printf("DRAM read bandwidth, %d thread(s), same run: %.2f GB/s\n", n_threads, dram);
    printf("%-5s %-11s %9s %9s %8s %8s %7s %7s %12s\n", "type", "shape", "A ms", "B ms", "A GB/s", "B GB/s", "B/A", "B %DRAM",
           "pack ms/MB");
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const uint32_t type = types[ti];
        if (only && strcasecmp(only, gguf_type_name(type)) != 0) continue;
        int64_t rows = shapes[si][0], cols = shapes[si][1];
        size_t wbytes = quant_row_bytes(type, cols) * (size_t)rows;
        int copies = hot ? 1 : (int)((96u << 20) / wbytes + 1);
        uint8_t **w = malloc((size_t)copies * sizeof *w);
        quant_packed **pk = malloc((size_t)copies * sizeof *pk);
        double pack_s = 0;
        for (int i = 0; i < copies; i++) {
            w[i] = i ? copy_weights(w[0], type, rows, cols) : make_weights(type, rows, cols);
            double t0 = now_s();
            pk[i] = quant_pack(w[i], type, rows, cols);
            pack_s += now_s() - t0;
        }
        if (!pk[0]) {
            printf("no packed kernel for %s on this instruction set\n", gguf_type_name(type));
            return;
        }
        float *x = malloc((size_t)n_tok * (size_t)cols * sizeof(float));
        float *out = malloc((size_t)n_tok * (size_t)rows * sizeof(float));
        for (int64_t i = 0; i < n_tok * cols; i++) x[i] = (float)(rnd() % 2001) / 1000.f - 1.f;
        void *scratch = malloc(quant_scratch_bytes(type, n_tok, cols) + 1);
        int reps = hot ? 40 : copies * 4;
        double best[2] = {1e30, 1e30};
        for (int batch = 0; batch < 14; batch++) {
            int b = batch % 2;
            double t0 = now_s();
            for (int i = 0; i < reps; i++)
                quant_matmul_packed(out, w[i % copies], b ? pk[i % copies] : NULL, type, rows, cols, x, n_tok, scratch,
                                    n_threads);
            double dt = (now_s() - t0) / reps;
            if (dt < best[b]) best[b] = dt;
        }
        char shape[32];
        snprintf(shape, sizeof shape, "%ldx%ld", (long)rows, (long)cols);
        printf("%-5s %-11s %9.3f %9.3f %8.2f %8.2f %6.2fx %6.1f%% %12.3f\n", gguf_type_name(type), shape, best[0] * 1e3,
               best[1] * 1e3, wbytes / best[0] * 1e-9, wbytes / best[1] * 1e-9, best[0] / best[1],
               dram > 0 ? 100.0 * wbytes / best[1] * 1e-9 / dram : 0.0, pack_s * 1e3 / ((double)wbytes * copies / (1 << 20)));
        fflush(stdout);
        for (int i = 0; i < copies; i++) {
            free(w[i]);
            quant_packed_destroy(pk[i]);
        }
        free(w), free(pk), free(x), free(out), free(scratch);
    }
}

int main(int argc, char **argv) {
    int n_threads = argc > 1 ? atoi(argv[1]) : 1;
    int n_tok = argc > 2 ? atoi(argv[2]) : 1;
    int only_models = argc > 3 && strcmp(argv[3], "models") == 0;
    if (n_threads < 1 || n_tok < 1) {
        fprintf(stderr, "usage: bench_quant [n_threads >= 1] [n_tok >= 1] [models]\n");
        return 2;
    }
    g_cpu_clock = n_threads == 1;
    quant_isa best = quant_isa_best();
    printf("threads %d, n_tok %d, best isa %s, timing by %s\n\n", n_threads, n_tok, quant_isa_name(best),
           g_cpu_clock ? "process CPU time" : "wall clock");
    if (argc > 3 && (strcmp(argv[3], "tlpack") == 0 || strcmp(argv[3], "tlpackhot") == 0)) {
        bench_tl_packed(n_threads, n_tok, strcmp(argv[3], "tlpackhot") == 0, argc > 4 ? argv[4] : NULL);
        return 0;
    }
    if (argc > 3 && strcmp(argv[3], "tl") == 0) {
        /* optional 4th argument: the instruction set (portable, avx2, avx512, amx, amx-emu); default the best */
        quant_isa isa = best;
        for (int i = 0; argc > 4 && i < QUANT_ISA_COUNT; i++)
            if (strcmp(argv[4], quant_isa_name((quant_isa)i)) == 0) isa = (quant_isa)i;
        bench_tl(n_threads, n_tok, isa, argc > 5 ? argv[5] : NULL);
        return 0;
    }
    printf("%-5s %-9s %10s %10s %9s %9s %9s\n", "type", "shape", "isa", "us/call", "ns/row", "GFLOP/s", "vs port.");
    const int64_t shapes[][2] = {{256, 256}, {768, 256}, {256, 768}, {1024, 256}};
    for (size_t ti = 0; ti < (only_models ? 0 : sizeof TYPES / sizeof *TYPES); ti++) {
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            int64_t rows = shapes[si][0], cols = shapes[si][1];
            double port = 0;
            for (int isa = QUANT_ISA_PORTABLE; isa <= (int)best; isa++) {
                quant_isa_force((quant_isa)isa);
                double t = time_matmul(TYPES[ti], rows, cols, n_tok, n_threads, 200);
                if (isa == QUANT_ISA_PORTABLE) port = t;
                char shape[32];
                snprintf(shape, sizeof shape, "%ldx%ld", (long)rows, (long)cols);
                printf("%-5s %-9s %10s %10.2f %9.1f %9.2f %8.1fx\n", gguf_type_name(TYPES[ti]), shape,
                       quant_isa_name((quant_isa)isa), t * 1e6, t * 1e9 / (double)rows,
                       2.0 * (double)rows * (double)cols * n_tok / t * 1e-9, port / t);
            }
        }
    }
    printf("\nmatmul time of one step (n_tok %d) of the rand-* models:\n", n_tok);
    print_model_steps(model_token_s, best, n_threads, n_tok);
    bench_primitives();
    printf("\nthe same with each layer's weights in separate buffers (streamed, as in a model):\n");
    print_model_steps(model_stream_s, best, n_threads, n_tok);
    return 0;
}
