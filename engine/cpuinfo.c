/*
 * cpuinfo.c — see attnd/cpuinfo.h. Thin: the decisions live in engine.c (threads) and quant.c
 * (instruction set); this only reports them.
 */
#include "attnd/cpuinfo.h"

#include "quant.h"
#include "threads.h"

#include <stdio.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

int cpuinfo_threads(int n) {
    if (n > 0) return n;
    return threads_default(); /* affinity mask, capped by the cgroup CPU quota */
}

const char *cpuinfo_isa(void) { return quant_isa_name(quant_isa_active()); }

bool cpuinfo_has_amx(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (d >> 24 & 1) && (d >> 25 & 1); /* CPUID.(7,0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8 */
#else
    return false;
#endif
}

const char *cpuinfo_kernels(void) {
    static char buf[320];
    const char *isa = cpuinfo_isa(), *why = quant_amx_unused_reason();
    if (quant_isa_active() == QUANT_ISA_AMX) {
        char types[240];
        quant_amx_type_names(types, sizeof types);
        snprintf(buf, sizeof buf, "%s (AMX %s tiles from 128 tokens: %s; avx512 otherwise)", isa,
                 quant_amx_math_name(quant_amx_math_active()), types);
    } else if (why)
        snprintf(buf, sizeof buf, "%s (CPU has AMX: %s)", isa, why);
    else
        snprintf(buf, sizeof buf, "%s", isa);
    return buf;
}
