/*
 * quant_dispatch.c — which kernels run: the instruction sets this CPU has (CPUID, XGETBV, the
 * AMX probe of amx/amx_tile.h), the environment's overrides (ATTND_ISA, ATTND_NO_SIMD,
 * ATTND_AMX), the AMX tiles' arithmetic, and the one resolved dispatch table (quant_impl.h's
 * quant_kernels_active) built from the tables of quant_ref.c, x86/ and amx/; then the vector
 * primitives of quant.h, which call through that table.
 *
 * The kernels it chooses from never call back into it (their per-CPU parameters are
 * quant_tune.c's), and the formats (quant_format.c) do not call it: calls go one way, driver ->
 * dispatch -> kernels -> formats. Of the rest of engine/, the kernels call only the pool
 * (threads.c) and GGUF (gguf.c; the writer for quantize.c), never the attention loops above them.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amx/amx_tile.h"
#include "attnd/common.h"
#include "attnd/gguf.h"
#include "quant.h"
#include "quant_impl.h"
#include "quant_types.h"

// ---- instruction-set selection -----------------------------------------------------------------

static _Atomic int g_isa = -1; /* -1: not chosen yet */

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

/* Best instruction set from CPUID, counting a feature only when the OS also saves the registers
 * it needs (XCR0: YMM state for AVX2; opmask and ZMM state for AVX-512). Bit positions are the
 * Intel SDM's: leaf 1 ECX 12 FMA, 27 OSXSAVE, 28 AVX, 29 F16C; leaf 7 EBX 5 AVX2, 16 AVX512F,
 * 30 AVX512BW, 31 AVX512VL; leaf 7 ECX 11 AVX512_VNNI. */
static quant_isa detect_isa(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return QUANT_ISA_PORTABLE;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx || !fma || !f16c) return QUANT_ISA_PORTABLE;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    if ((xlo & 0x6) != 0x6) return QUANT_ISA_PORTABLE; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return QUANT_ISA_PORTABLE;
    if (!((b >> 5) & 1)) return QUANT_ISA_PORTABLE; /* AVX2 */
    int avx512 = ((b >> 16) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1) && ((c >> 11) & 1);
    if (avx512 && (xlo & 0xE0) == 0xE0) return QUANT_ISA_AVX512; /* opmask, ZMM_Hi256, Hi16_ZMM state */
    return QUANT_ISA_AVX2;
}
#endif

/* The best set without AMX, then AMX on top when the CPU has AVX-512 and the tiles are usable. */
static quant_isa detect_best(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    quant_isa isa = detect_isa();
    if (isa == QUANT_ISA_AVX512 && amx_probe() == AMX_USABLE) isa = QUANT_ISA_AMX;
    return isa;
#else
    return QUANT_ISA_PORTABLE;
#endif
}

quant_isa quant_isa_best(void) {
    static _Atomic int best = -1; /* CPUID is slow under some hypervisors: ask once */
    int v = atomic_load_explicit(&best, memory_order_relaxed);
    if (v < 0) {
        v = (int)detect_best();
        atomic_store_explicit(&best, v, memory_order_relaxed);
    }
    return (quant_isa)v;
}

static const char *const ISA_NAMES[QUANT_ISA_COUNT] = {"portable", "avx2", "avx512", "amx", "amx-emu"};

/* The choice the environment makes: ATTND_ISA (a name of ISA_NAMES), else ATTND_NO_SIMD=1. */
static int isa_from_env(void) {
    const char *name = getenv("ATTND_ISA");
    if (name && *name)
        for (int i = 0; i < QUANT_ISA_COUNT; i++)
            if (strcmp(name, ISA_NAMES[i]) == 0) return i;
    const char *no = getenv("ATTND_NO_SIMD");
    if (no && *no && strcmp(no, "0") != 0) return QUANT_ISA_PORTABLE;
    return -1;
}

static quant_isa isa_clamp(int isa) {
    if (isa == QUANT_ISA_AMX_EMU) return QUANT_ISA_AMX_EMU;
    if (isa < 0 || isa >= QUANT_ISA_COUNT) return QUANT_ISA_PORTABLE;
    return isa > (int)quant_isa_best() ? quant_isa_best() : (quant_isa)isa;
}

quant_isa quant_isa_active(void) {
    int isa = atomic_load_explicit(&g_isa, memory_order_relaxed);
    if (isa < 0) {
        int env = isa_from_env();
        isa = (int)(env >= 0 ? isa_clamp(env) : quant_isa_best());
        atomic_store_explicit(&g_isa, isa, memory_order_relaxed);
    }
    return (quant_isa)isa;
}

quant_isa quant_isa_force(quant_isa isa) {
    quant_isa prev = quant_isa_active();
    atomic_store_explicit(&g_isa, (int)isa_clamp((int)isa), memory_order_relaxed);
    return prev;
}

const char *quant_isa_name(quant_isa isa) { return (int)isa >= 0 && isa < QUANT_ISA_COUNT ? ISA_NAMES[isa] : "?"; }

const char *quant_amx_unused_reason(void) {
    quant_isa act = quant_isa_active();
    if (act == QUANT_ISA_AMX) return NULL;
    amx_state st = amx_probe();
    if (st == AMX_ABSENT) return NULL;
    if (st == AMX_REFUSED) return "refused by the OS";
    if (quant_isa_best() != QUANT_ISA_AMX) return "needs AVX-512";
    return isa_from_env() >= 0 ? "turned off by ATTND_ISA / ATTND_NO_SIMD" : "not selected";
}

size_t quant_amx_type_names(char *out, size_t cap) {
    size_t len = 0;
    bool fits = cap > 0; /* false from the first name that does not fit: the list stops there */
    if (fits) out[0] = '\0';
    for (int t = 0; t < QT_COUNT; t++) { /* the emulated table has the real one's entries, on any CPU */
        if (!quant_kernels_amx_emu.packed[t] && !quant_kernels_amx_emu.rows[t]) continue;
        const char *name = gguf_type_name(quant_traits_table[t].type);
        size_t add = strlen(name) + (len ? 2 : 0);
        fits = fits && len + add < cap;
        if (fits) snprintf(out + len, cap - len, "%s%s", len ? ", " : "", name);
        len += add;
    }
    return len;
}

static _Atomic int g_amx_math = -1; /* -1: not chosen yet */

quant_amx_math quant_amx_math_active(void) {
    int m = atomic_load_explicit(&g_amx_math, memory_order_relaxed);
    if (m < 0) {
        const char *e = getenv("ATTND_AMX");
        m = e && strcmp(e, "int8") == 0 ? QUANT_AMX_INT8 : QUANT_AMX_BF16;
        atomic_store_explicit(&g_amx_math, m, memory_order_relaxed);
    }
    if (quant_isa_active() == QUANT_ISA_AMX && !amx_has_bf16()) return QUANT_AMX_INT8; /* no tdpbf16ps */
    return (quant_amx_math)m;
}

quant_amx_math quant_amx_math_force(quant_amx_math m) {
    quant_amx_math prev = quant_amx_math_active();
    atomic_store_explicit(&g_amx_math, m == QUANT_AMX_INT8 ? QUANT_AMX_INT8 : QUANT_AMX_BF16, memory_order_relaxed);
    return prev;
}

const char *quant_amx_math_name(quant_amx_math m) { return m == QUANT_AMX_INT8 ? "int8" : "bf16"; }

static const quant_kernels *kernels_at(int isa) {
    switch (isa) {
#if defined(__x86_64__)
    case QUANT_ISA_AMX: return &quant_kernels_amx;
    case QUANT_ISA_AVX512: return &quant_kernels_avx512;
    case QUANT_ISA_AVX2: return &quant_kernels_avx2;
#endif
    case QUANT_ISA_AMX_EMU: return &quant_kernels_amx_emu;
    default: return &quant_kernels_portable;
    }
}

/* The set an instruction set's empty entries come from: AMX -> AVX-512 -> AVX2 -> portable;
 * the emulated AMX sits on the portable path, so that it runs on any CPU. */
static int isa_parent(int isa) { return isa == QUANT_ISA_AMX_EMU ? QUANT_ISA_PORTABLE : isa - 1; }

/* The first non-NULL entry `field` of the kernel tables, from instruction set `isa` down. */
#define RESOLVE(dst, isa, field)                                                                              \
    do {                                                                                                      \
        (dst)->field = NULL;                                                                                  \
        for (int i_ = (isa); i_ >= 0 && !(dst)->field; i_ = isa_parent(i_)) (dst)->field = kernels_at(i_)->field; \
    } while (0)

static quant_kernels g_resolved[QUANT_ISA_COUNT];
static pthread_once_t g_resolved_once = PTHREAD_ONCE_INIT;

static void resolve_tables(void) {
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        quant_kernels *k = &g_resolved[isa];
        for (int t = 0; t < QT_COUNT; t++) {
            RESOLVE(k, isa, rows[t]);
            RESOLVE(k, isa, packed[t]);
            k->bf16_from[t] = kernels_at(isa)->bf16_from[t]; /* only the tile sets' own kernels */
        }
        RESOLVE(k, isa, prep_q8_0); RESOLVE(k, isa, prep_q8_k); RESOLVE(k, isa, prep_f16);
        RESOLVE(k, isa, prep_bf16);
        RESOLVE(k, isa, dot_rows); RESOLVE(k, isa, axpy_rows); RESOLVE(k, isa, exp); RESOLVE(k, isa, h2f);
        RESOLVE(k, isa, f2h);
        RESOLVE(k, isa, gemm); RESOLVE(k, isa, softmax); RESOLVE(k, isa, gelu);
    }
}

const quant_kernels *quant_kernels_active(void) {
    pthread_once(&g_resolved_once, resolve_tables);
    return &g_resolved[quant_isa_active()];
}

// ---- vector primitives (dispatch) --------------------------------------------------------------

void quant_dot_rows(float *scores, const float *q, const float *K, int64_t k_stride, int n, int hd, float scale) {
    quant_kernels_active()->dot_rows(scores, q, K, k_stride, n, hd, scale);
}

void quant_axpy_rows(float *acc, const float *p, const float *V, int64_t v_stride, int n, int hd) {
    quant_kernels_active()->axpy_rows(acc, p, V, v_stride, n, hd);
}

void quant_exp(float *y, const float *x, int64_t n) { quant_kernels_active()->exp(y, x, n); }

void quant_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n) { quant_kernels_active()->h2f(dst, src, n); }

void quant_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n) { quant_kernels_active()->f2h(dst, src, n); }

void quant_gemm_f32(float *C, int64_t ldc, const float *A, int64_t lda, const float *B, int64_t ldb, int m, int n, int k,
                    bool acc) {
    quant_kernels_active()->gemm(C, ldc, A, lda, B, ldb, m, n, k, acc);
}

void quant_softmax(float *s, int n, float scale) { quant_kernels_active()->softmax(s, n, scale); }

void quant_gelu(float *y, const float *x, int64_t n) { quant_kernels_active()->gelu(y, x, n); }
