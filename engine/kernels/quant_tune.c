/*
 * quant_tune.c — the per-CPU-family parameters the kernels read (quant_tune, quant_impl.h): one
 * kernel per instruction set, tuned per family by these numbers rather than by a second kernel.
 * Its own file because the kernels call it while quant_dispatch.c's table names the kernels: in
 * one file the two would call each other.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "quant_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

/* The family's choice: CPUID leaf 0's vendor string (EBX, EDX, ECX). Measured A/B with the same
 * binary (ATTND_PF_DIST, docs/kernels.md): on the Intel Xeon (Sapphire/Emerald Rapids) the packed
 * decode kernels stream faster with a software prefetch PF_INTEL bytes ahead; AMD keeps the
 * hardware prefetchers alone (its packed kernels were measured so on Zen 4). */
#define PF_INTEL 8192
static quant_tune tune_for_cpu(void) {
    quant_tune t = {0, 0, 0};
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu) /* GenuineIntel */
        t.pf_dist = PF_INTEL;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) t.vbmi = (int)((c >> 1) & (c >> 8) & 1); /* leaf 7 ECX: AVX512_VBMI, GFNI */
#endif
    return t;
}

static int g_cpu_vbmi;

static quant_tune g_tune;
static pthread_once_t g_tune_once = PTHREAD_ONCE_INIT;

static void tune_init(void) {
    g_tune = tune_for_cpu();
    g_cpu_vbmi = g_tune.vbmi;
    const char *nv = getenv("ATTND_NO_VBMI");
    if (nv && *nv && strcmp(nv, "0") != 0) g_tune.vbmi = 0;
    const char *e = getenv("ATTND_PF_DIST");
    if (e && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (end != e && v >= 0 && v <= (1 << 20)) {
            g_tune.pf_dist = (int)(v / 64 * 64);
            g_tune.pf_nta = strcmp(end, ",nta") == 0;
        }
    }
}

const quant_tune *quant_tune_get(void) {
    pthread_once(&g_tune_once, tune_init);
    return &g_tune;
}

int quant_tune_vbmi_force(int on) {
    pthread_once(&g_tune_once, tune_init);
    int prev = g_tune.vbmi;
    g_tune.vbmi = on && g_cpu_vbmi;
    return prev;
}
