/*
 * roofline.c — see attnd/roofline.h. The bandwidth probe (streaming loads on the engine's pool),
 * the clock loop and the per-path peaks, and the byte and operation counts of one token.
 *
 * The read loops keep four independent accumulators and fold every load into one of them, so
 * the loads cannot be dropped and no dependency chain limits them: the loop is load-bound, as
 * decode's matmuls are when they run at the wall. Loads only: a copy would also count the writes
 * (and their read-for-ownership), which decode does not do.
 */
#include "attnd/roofline.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "attnd/gguf.h"
#include "isa_target.h"
#include "quant.h"
#include "threads.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define ROOFLINE_X86 1
#else
#define ROOFLINE_X86 0
#endif

#define ROOFLINE_ALIGN ((size_t)2 << 20) /* 2 MiB: transparent huge pages can back the buffer */
#define ROOFLINE_SLICE 4096              /* slices are whole pages (and whole 256-byte steps) */

struct roofline_probe {
    uint8_t *buf; /* (bytes) 2 MiB-aligned, written once at create */
    size_t bytes;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

// ---- the read loops ----------------------------------------------------------------------------

/* Sum of every 64-bit word of p[0, n) (n a multiple of 256); the sum only keeps the loads alive. */
static uint64_t read_portable(const uint8_t *p, size_t n) {
    const uint64_t *w = (const uint64_t *)(const void *)p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i < n / 8; i += 4) a0 += w[i], a1 += w[i + 1], a2 += w[i + 2], a3 += w[i + 3];
    return a0 + a1 + a2 + a3;
}

#if ROOFLINE_X86
ISA_TARGET_BEGIN("avx2")
static uint64_t read_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 256) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(const void *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(const void *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(const void *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(const void *)(p + i + 96)));
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(const void *)(p + i + 128)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(const void *)(p + i + 160)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(const void *)(p + i + 192)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(const void *)(p + i + 224)));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)(void *)out, s);
    return out[0] + out[1] + out[2] + out[3];
}
ISA_TARGET_END

ISA_TARGET_BEGIN("avx512f")
static uint64_t read_avx512(const uint8_t *p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 256) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(p + i + 128)));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    __m512i s = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
    uint64_t out[8];
    _mm512_storeu_si512((void *)out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}
ISA_TARGET_END
#endif

typedef uint64_t (*read_fn)(const uint8_t *p, size_t n);

/* The widest loads this CPU has (what it has, not what ATTND_ISA lets the kernels use: the wall
 * is the machine's). */
static read_fn read_pick(const char **name) {
#if ROOFLINE_X86
    quant_isa best = quant_isa_best();
    if (best >= QUANT_ISA_AVX512) return *name = "avx512", read_avx512;
    if (best >= QUANT_ISA_AVX2) return *name = "avx2", read_avx2;
#endif
    return *name = "portable", read_portable;
}

const char *roofline_read_isa(void) {
    const char *name;
    read_pick(&name);
    return name;
}

// ---- the probe ---------------------------------------------------------------------------------

attnd_status roofline_probe_create(roofline_probe **out, size_t bytes, attnd_err *err) {
    *out = NULL;
    bytes = bytes / ROOFLINE_SLICE * ROOFLINE_SLICE;
    if (bytes < ROOFLINE_SLICE) bytes = ROOFLINE_SLICE;
    roofline_probe *p = calloc(1, sizeof(*p));
    size_t alloc = (bytes + ROOFLINE_ALIGN - 1) / ROOFLINE_ALIGN * ROOFLINE_ALIGN;
    if (p) p->buf = aligned_alloc(ROOFLINE_ALIGN, alloc);
    if (!p || !p->buf) {
        free(p);
        return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory for a %zu-byte bandwidth probe", bytes);
    }
#ifdef MADV_HUGEPAGE
    madvise(p->buf, alloc, MADV_HUGEPAGE); /* advice only: fewer TLB misses where THP is on */
#endif
    memset(p->buf, 0x5a, bytes); /* present pages, and not the shared zero page */
    p->bytes = bytes;
    *out = p;
    return ATTND_OK;
}

void roofline_probe_destroy(roofline_probe *p) {
    if (!p) return;
    free(p->buf);
    free(p);
}

size_t roofline_probe_bytes(const roofline_probe *p) { return p->bytes; }

typedef struct sweep_ctx {
    const roofline_probe *p;
    read_fn fn;
    int n_slices;
    uint64_t sink[256]; /* (n_slices) one per slice, so that no two tasks write one word */
} sweep_ctx;

/* Task i reads slice i: [i * bytes / n, (i + 1) * bytes / n) rounded to whole pages. */
static void sweep_task(void *ctx, int task, int worker) {
    (void)worker;
    sweep_ctx *c = ctx;
    size_t pages = c->p->bytes / ROOFLINE_SLICE;
    size_t lo = pages * (size_t)task / (size_t)c->n_slices, hi = pages * (size_t)(task + 1) / (size_t)c->n_slices;
    uint64_t s = c->fn(c->p->buf + lo * ROOFLINE_SLICE, (hi - lo) * ROOFLINE_SLICE);
    c->sink[task] += s;
}

double roofline_read_gbs(roofline_probe *p, int n_threads, int reps) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 256) n_threads = 256; /* one sink per slice */
    if (reps < 1) reps = 1;
    const char *name;
    sweep_ctx c = {.p = p, .fn = read_pick(&name), .n_slices = n_threads};
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        threads_run(n_threads, c.n_slices, sweep_task, &c);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    volatile uint64_t keep = 0; /* the sums are used: the loads stay */
    for (int i = 0; i < c.n_slices; i++) keep += c.sink[i];
    (void)keep;
    if (!(best > 0)) best = 1e-9; /* a clock that did not move: still a finite figure */
    return (double)p->bytes / best / 1e9;
}

// ---- clock and peaks ---------------------------------------------------------------------------

double roofline_clock_ghz(void) {
#if ROOFLINE_X86
    /* Many short bursts (32000 adds: ~10 us at 3 GHz), the best of them: a burst fits in one
     * scheduler slice even on a busy machine, where a long loop would count the time others ran.
     * Each add doubles the register (x += x), one cycle of latency on every x86 core: a chain of
     * immediate adds is not, since newer Intel cores (Golden Cove on) fold those at rename and
     * ran 16 of them in ~3 cycles here (15.7 "GHz" on a 3 GHz Xeon). */
    enum { N = 2000, BURSTS = 300 };
    double best = 0;
    for (int r = 0; r < BURSTS; r++) {
        uint64_t x = 1;
        double t0 = now_s();
        for (int i = 0; i < N; i++)
            __asm__ volatile("add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\t"
                             "add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\t"
                             "add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\t"
                             "add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0"
                             : "+r"(x));
        double dt = now_s() - t0, ghz = dt > 0 ? 16.0 * N / dt / 1e9 : 0;
        if (ghz > best) best = ghz;
    }
    return best;
#else
    return 0;
#endif
}

/* Where a peak comes from. What one instruction computes is from the instruction-set reference
 * (Intel SDM vol. 2): VPDPBUSD zmm adds 16 lanes x 4 u8*s8 products = 64 multiply-adds = 128 ops;
 * VPMADDUBSW ymm makes 32 u8*s8 products summed in pairs = 64 ops (the AVX2 path's int8 step);
 * VFMADD231PS zmm is 16 float multiply-adds = 32 ops (the float path of F32/F16/BF16 weights);
 * TDPBSSD multiplies a 16x64 int8 tile by a 64x16 one = 16384 multiply-adds, TDPBF16PS a 16x32
 * bf16 pair tile by a 32x16 one = 8192. How many issue per cycle is from the vendors'
 * optimization manuals: two 512-bit VNNI per cycle on Intel Xeon (ports 0 and 5) and on AMD
 * family 1Ah (Zen 5, full-width 512-bit units); one on family 19h (Zen 4 runs a zmm instruction
 * on two 256-bit halves), and the same counts for VFMADD zmm; two VPMADDUBSW ymm or two VFMADD ymm
 * per cycle; one AMX TDP* per 16 cycles (Intel
 * Optimization Reference Manual, AMX chapter: 2048 int8 or 1024 bf16 ops per cycle per core). */
static double zmm_per_cycle(void) {
#if ROOFLINE_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541u) { /* "AuthenticAMD" */
        __get_cpuid(1, &a, &b, &c, &d);
        unsigned family = ((a >> 8) & 0xf) + ((a >> 20) & 0xff);
        return family >= 0x1a ? 2 : 1;
    }
#endif
    return 2;
}

/* True when most of the layers' matrix bytes are float (F32, F16, BF16): they run the float
 * kernels (FMA), not the int8 ones. */
static bool float_weights(const model *m) {
    const gguf_file *f = model_gguf(m);
    double fl = 0, all = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (strncmp(t->name, "blk.", 4) != 0 || t->n_dims < 2) continue;
        all += (double)t->n_bytes;
        if (t->type == GGUF_TYPE_F32 || t->type == GGUF_TYPE_F16 || t->type == GGUF_TYPE_BF16) fl += (double)t->n_bytes;
    }
    return all > 0 && 2 * fl > all;
}

roofline_peak roofline_prefill_peak(const model *m, int n_tokens, int n_threads) {
    roofline_peak pk = {.path = "portable", .ops_per_cycle = 0};
    quant_isa isa = quant_isa_active();
    bool fl = float_weights(m);
    bool tiles = isa == QUANT_ISA_AMX && n_tokens >= 128 && !fl; /* quant_amx.c's AX_MIN_TOK / AXB_MIN_TOK */
    if (tiles && quant_amx_math_active() == QUANT_AMX_BF16) pk.path = "amx bf16", pk.ops_per_cycle = 1024;
    else if (tiles) pk.path = "amx int8", pk.ops_per_cycle = 2048;
    else if (isa == QUANT_ISA_AMX_EMU) pk.path = "amx-emu (emulated tiles: no peak)";
    else if (isa >= QUANT_ISA_AVX512 && fl) pk.path = "avx512 fma f32", pk.ops_per_cycle = 32 * zmm_per_cycle();
    else if (isa >= QUANT_ISA_AVX512) pk.path = "avx512 vnni int8", pk.ops_per_cycle = 128 * zmm_per_cycle();
    else if (isa == QUANT_ISA_AVX2 && fl) pk.path = "avx2 fma f32", pk.ops_per_cycle = 2 * 16;
    else if (isa == QUANT_ISA_AVX2) pk.path = "avx2 int8", pk.ops_per_cycle = 2 * 64;
    if (pk.ops_per_cycle > 0) pk.ghz = roofline_clock_ghz();
    pk.gops = pk.ops_per_cycle * (n_threads > 0 ? n_threads : 1) * pk.ghz;
    return pk;
}

// ---- one token's bytes and operations ----------------------------------------------------------

static bool is_expert(const char *name) { return strstr(name, "_exps") != NULL; }

/* The block of a layer's tensor ("blk.N."), or -1. */
static long block_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long n = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' ? n : -1;
}

/* What one decode token reads of the weights, in bytes (or in elements): every tensor once, one
 * row of an embedding table that is not the head (token_embd, per_layer_token_embd), the used
 * share of the experts, nothing of the MTP blocks (loaded, never run by decode). */
static double per_token(const model *m, bool bytes) {
    const gguf_file *f = model_gguf(m);
    const model_info *mi = model_info_get(m);
    bool tied = !gguf_find_tensor(f, "output.weight");
    double used = mi->n_expert ? (double)mi->n_expert_used / mi->n_expert : 1, sum = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (block_of(t->name) >= mi->n_layer) continue;
        double b = bytes ? (double)t->n_bytes : (double)t->n_elems;
        bool table = (strcmp(t->name, "token_embd.weight") == 0 && !tied) ||
                     strcmp(t->name, "per_layer_token_embd.weight") == 0;
        if (table) b /= (double)(t->n_elems / t->ne[0]); /* one row */
        else if (is_expert(t->name)) b *= used;
        sum += b;
    }
    return sum;
}

double roofline_weight_bytes(const model *m) { return per_token(m, true) + (double)kv_state_bytes(m); }

double roofline_active_params(const model *m) { return per_token(m, false); }

double roofline_decode_bytes(const model *m, kv_type kv, double pos) {
    const model_info *mi = model_info_get(m);
    double local_pos = mi->window > 0 && pos > mi->window ? mi->window : pos;
    return roofline_weight_bytes(m) + (double)kv_layer_bytes_per_token(m, kv, false) * pos +
           (double)kv_layer_bytes_per_token(m, kv, true) * local_pos;
}

double roofline_prefill_ops(const model *m, int n_tokens) {
    const gguf_file *f = model_gguf(m);
    const model_info *mi = model_info_get(m);
    double used = mi->n_expert ? (double)mi->n_expert_used / mi->n_expert : 1, macs = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        long blk = block_of(t->name);
        if (blk < 0 || blk >= mi->n_layer || t->n_dims < 2) continue; /* the run layers' matrices */
        macs += (double)t->n_elems * (is_expert(t->name) ? used : 1);
    }
    double keys = (n_tokens + 1) / 2.0, local_keys = mi->window > 0 && keys > mi->window ? mi->window : keys;
    int n_global = mi->n_layer - mi->n_local_layers;
    /* Q.K and P.V: n_head * head_dim multiply-adds per key each */
    macs += 2.0 * mi->n_head * mi->head_dim * (n_global * keys + mi->n_local_layers * local_keys);
    return 2 * macs;
}
