/*
 * bench_amx.c — what one AMX tile product of the prefill kernel (engine/kernels/amx/quant_amx.inc) costs on
 * this CPU, part by part, and whether the tile unit and the AVX-512 scaling run side by side.
 * A benchmark, not a test: it prints numbers, it asserts nothing.
 *
 *   tools/bench/build.sh && build/bench_amx [rounds]
 *
 * One "product" is the kernel's unit: C (16 tokens x 16 rows, int32) = A (16 x 32 int8) . B
 * (8 x 64 int8), i.e. one Q8_0 block of 16 tokens x 16 weight rows. The scaling is what the
 * exactness rule fixes per product (quant_amx.inc): 16 x (cvt(C row), d_w * d_x, fma into the
 * float sums). The tiles run in the kernel's 2 x 2 pattern (two A, two B, four C per slice).
 * Printed per product, best of `rounds` (process CPU time): each part alone, then tiles and
 * scaling together; "together" near the sum of the two means they do not overlap.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amx/amx_tile.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define NC 2048    /* activation row stride (TinyLlama's width) */
#define SLICES 32  /* one 1024-column chunk of Q8_0 blocks */
#define ITERS 4000 /* chunks per timing */

static _Alignas(64) int8_t g_a[32 * NC];
static _Alignas(64) int8_t g_b[2][SLICES][256];
static _Alignas(64) int32_t g_c[2][4][16][16];
static _Alignas(64) float g_acc[4][16][16];
static _Alignas(64) float g_sc[2][SLICES][16];
static float g_dx[SLICES * 64];

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define TGT __attribute__((target("avx512f,avx512bw,amx-tile,amx-int8")))
#define AI inline __attribute__((always_inline))

/* The kernel's Q8_0 scaling of one stored tile: acc += cvt(C) * (d_w * d_x), row by row */
TGT static AI void scale(float (*acc)[16], const int32_t (*c)[16], const float *sc, const float *dx) {
    const __m512 vs = _mm512_load_ps(sc);
    for (int t = 0; t < 16; t++) {
        __m512 s = _mm512_mul_ps(vs, _mm512_set1_ps(dx[t]));
        __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)c[t]));
        _mm512_store_ps(acc[t], _mm512_fmadd_ps(v, s, _mm512_load_ps(acc[t])));
    }
}

enum { P_LOAD = 1, P_DP = 2, P_STORE = 4, P_SCALE = 8 };

/* ns per product of the parts in `what`, over ITERS chunks of SLICES slices x 4 products */
TGT static double run(int what) {
    double t0 = cpu_s();
    for (int it = 0; it < ITERS; it++)
        for (int s = 0; s < SLICES; s++) {
            const int p = s & 1;
            if (what & P_LOAD) {
                _tile_loadd(4, g_a + 32 * s, NC);
                _tile_loadd(5, g_a + 32 * s + 16 * NC, NC);
                _tile_loadd(6, g_b[0][s], 64);
                _tile_loadd(7, g_b[1][s], 64);
            }
            if (what & P_DP) {
                _tile_zero(0);
                _tile_dpbssd(0, 4, 6);
                _tile_zero(1);
                _tile_dpbssd(1, 4, 7);
                _tile_zero(2);
                _tile_dpbssd(2, 5, 6);
                _tile_zero(3);
                _tile_dpbssd(3, 5, 7);
            }
            if (what & P_SCALE) /* the previous slice's tiles, as the kernel's pipeline does */
                for (int q = 0; q < 4; q++)
                    scale(g_acc[q], (const int32_t(*)[16])g_c[p ^ 1][q], g_sc[q & 1][s], g_dx + 64 * s + 16 * (q >> 1));
            if (what & P_STORE) {
                _tile_stored(0, g_c[p][0], 64);
                _tile_stored(1, g_c[p][1], 64);
                _tile_stored(2, g_c[p][2], 64);
                _tile_stored(3, g_c[p][3], 64);
            }
        }
    return (cpu_s() - t0) / ((double)ITERS * SLICES * 4) * 1e9;
}

TGT static void tiles_on(void) {
    amx_tilecfg cfg;
    amx_cfg_init(&cfg);
    for (int t = 0; t < 4; t++) amx_cfg_tile(&cfg, t, 16, 64);
    for (int t = 4; t < 6; t++) amx_cfg_tile(&cfg, t, 16, 32);
    for (int t = 6; t < 8; t++) amx_cfg_tile(&cfg, t, 8, 64);
    _tile_loadconfig(&cfg);
    _tile_loadd(4, g_a, NC);
    _tile_loadd(5, g_a, NC);
    _tile_loadd(6, g_b[0][0], 64);
    _tile_loadd(7, g_b[1][0], 64);
}

TGT static void tiles_off(void) { _tile_release(); }

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (rounds < 1) rounds = 1;
    if (amx_probe() != AMX_USABLE || !__builtin_cpu_supports("avx512f")) {
        printf("AMX %s: nothing to measure here\n", amx_state_name(amx_probe()));
        return 0;
    }
    for (size_t i = 0; i < sizeof g_a; i++) g_a[i] = (int8_t)(i * 7);
    for (size_t i = 0; i < sizeof g_b; i++) ((int8_t *)g_b)[i] = (int8_t)(i * 13);
    for (size_t i = 0; i < sizeof g_dx / sizeof *g_dx; i++) g_dx[i] = 1e-3f;
    for (size_t i = 0; i < sizeof g_sc / sizeof(float); i++) ((float *)g_sc)[i] = 1e-2f;
    tiles_on();
    static const struct { int what; const char *name; } parts[] = {
        {P_LOAD, "tile loads (A and B, 1 per product)"},
        {P_DP, "tilezero + tdpbssd"},
        {P_STORE, "tile stores of C"},
        {P_LOAD | P_DP | P_STORE, "all tile work"},
        {P_SCALE, "scaling (AVX-512, float sums in L1)"},
        {P_LOAD | P_DP | P_STORE | P_SCALE, "tiles and scaling together"},
    };
    enum { NP = sizeof parts / sizeof *parts };
    double best[NP];
    for (int i = 0; i < NP; i++) best[i] = 1e30;
    for (int r = 0; r < rounds; r++) /* alternating, best of rounds */
        for (int i = 0; i < NP; i++) {
            double ns = run(parts[i].what);
            if (ns < best[i]) best[i] = ns;
        }
    tiles_off();
    printf("ns per 16x16x32 product (Q8_0 block of 16 tokens x 16 rows), best of %d, process CPU time\n", rounds);
    for (int i = 0; i < NP; i++) printf("  %-40s %6.2f\n", parts[i].name, best[i]);
    printf("  %-40s %6.2f (together / sum %.2f: 0.5 = full overlap, 1 = none)\n", "sum of tiles alone + scaling alone",
           best[3] + best[4], best[5] / (best[3] + best[4]));
    float sink = 0;
    for (size_t i = 0; i < sizeof g_acc / sizeof(float); i++) sink += ((float *)g_acc)[i];
    return sink == 12345.f;
}
#else
int main(void) {
    printf("bench_amx: x86-64 only\n");
    return 0;
}
#endif
