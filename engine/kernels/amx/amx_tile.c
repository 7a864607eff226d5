/*
 * amx_tile.c — see amx_tile.h: the process's AMX permission, the plain-C emulation of the tile
 * instructions, and a one-instruction runner over both for the tests. Only amx_tile_run_op's real
 * half (and quant_amx.c) are compiled for amx-tile/amx-int8; the rest is baseline C.
 */
#include "amx_tile.h"

#include <pthread.h>
#include <string.h>

#include "attnd/common.h"
#include "isa_target.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define AMX_X86_LINUX 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define AMX_X86_LINUX 0
#endif

void amx_cfg_init(amx_tilecfg *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
}

void amx_cfg_tile(amx_tilecfg *cfg, int t, int rows, int colsb) {
    ATTND_ASSERT(t >= 0 && t < AMX_TILES && rows >= 1 && rows <= AMX_MAX_ROWS && colsb >= 1 && colsb <= AMX_MAX_COLSB);
    cfg->rows[t] = (uint8_t)rows;
    cfg->colsb[t] = (uint16_t)colsb;
}

// ---- permission --------------------------------------------------------------------------------

/* Linux's arch_prctl codes for the dynamically enabled tile state (arch/x86/include/uapi/asm/prctl.h) */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static amx_state g_amx_state = AMX_ABSENT;
static int g_amx_bf16;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void amx_probe_once(void) {
#if AMX_X86_LINUX
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return; /* OSXSAVE: XGETBV works */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return; /* EDX 24 AMX-TILE, 25 AMX-INT8 */
    g_amx_bf16 = (d >> 22) & 1;                           /* EDX 22 AMX-BF16 */
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    g_amx_state = AMX_REFUSED;
    if ((xlo & (3u << 17)) != (3u << 17)) return; /* XCR0 17 XTILECFG, 18 XTILEDATA */
    /* Process-wide: the grant covers this thread, the pool's threads and any made later. */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return;
    g_amx_state = AMX_USABLE;
#endif
}

amx_state amx_probe(void) {
    pthread_once(&g_amx_once, amx_probe_once);
    return g_amx_state;
}

int amx_has_bf16(void) { return amx_probe() == AMX_USABLE && g_amx_bf16; }

const char *amx_state_name(amx_state s) {
    switch (s) {
    case AMX_ABSENT: return "absent";
    case AMX_REFUSED: return "refused by the OS";
    case AMX_USABLE: return "usable";
    }
    return "?";
}

// ---- the emulation -----------------------------------------------------------------------------

typedef struct emu_tiles {
    int configured;
    uint8_t rows[AMX_TILES];
    uint16_t colsb[AMX_TILES];
    _Alignas(64) uint8_t t[AMX_TILES][AMX_MAX_ROWS][AMX_MAX_COLSB];
} emu_tiles;

static _Thread_local emu_tiles g_emu;

void amx_emu_loadconfig(const amx_tilecfg *cfg) {
    ATTND_ASSERT(cfg->palette <= 1 && cfg->start_row == 0);
    for (int i = 0; i < 14; i++) ATTND_ASSERT(cfg->reserved[i] == 0);
    memset(&g_emu, 0, sizeof g_emu); /* ldtilecfg zeroes every tile */
    if (cfg->palette == 0) return;   /* palette 0: the init state, as tilerelease */
    for (int i = 0; i < 16; i++) {
        if (i >= AMX_TILES) {
            ATTND_ASSERT(cfg->rows[i] == 0 && cfg->colsb[i] == 0);
            continue;
        }
        ATTND_ASSERT(cfg->rows[i] <= AMX_MAX_ROWS && cfg->colsb[i] <= AMX_MAX_COLSB);
        ATTND_ASSERT((cfg->rows[i] == 0) == (cfg->colsb[i] == 0)); /* a tile is wholly configured or not */
        g_emu.rows[i] = cfg->rows[i];
        g_emu.colsb[i] = cfg->colsb[i];
    }
    g_emu.configured = 1;
}

void amx_emu_release(void) { memset(&g_emu, 0, sizeof g_emu); }

static void emu_check(int t) {
    ATTND_ASSERT(g_emu.configured && t >= 0 && t < AMX_TILES && g_emu.rows[t] > 0);
}

void amx_emu_loadd(int t, const void *base, size_t stride) {
    emu_check(t);
    const uint8_t *p = base;
    memset(g_emu.t[t], 0, sizeof g_emu.t[t]);
    for (int r = 0; r < g_emu.rows[t]; r++) memcpy(g_emu.t[t][r], p + (size_t)r * stride, g_emu.colsb[t]);
}

void amx_emu_stored(int t, void *base, size_t stride) {
    emu_check(t);
    uint8_t *p = base;
    for (int r = 0; r < g_emu.rows[t]; r++) memcpy(p + (size_t)r * stride, g_emu.t[t][r], g_emu.colsb[t]);
}

void amx_emu_zero(int t) {
    emu_check(t);
    memset(g_emu.t[t], 0, sizeof g_emu.t[t]);
}

static inline int32_t emu_byte(const uint8_t *p, int is_signed) { return is_signed ? (int32_t)(int8_t)*p : (int32_t)*p; }

/* The shapes a tdp* instruction requires of C, A and B (else #UD); sets C's m x n dwords, depth k */
static void emu_dp_shapes(int c, int a, int b, int *m, int *n, int *k) {
    emu_check(c);
    emu_check(a);
    emu_check(b);
    ATTND_ASSERT(c != a && c != b && a != b);
    *m = g_emu.rows[c], *n = g_emu.colsb[c] / 4, *k = g_emu.colsb[a] / 4;
    ATTND_ASSERT(g_emu.colsb[c] % 4 == 0 && g_emu.colsb[a] % 4 == 0);
    ATTND_ASSERT(g_emu.rows[a] == *m && g_emu.colsb[b] == g_emu.colsb[c] && g_emu.rows[b] == *k);
}

/* C's bytes past colsb, and its rows past rows, are zeroed */
static void emu_dp_clear_rest(int c) {
    for (int i = 0; i < AMX_MAX_ROWS; i++)
        memset(&g_emu.t[c][i][i < g_emu.rows[c] ? g_emu.colsb[c] : 0], 0,
               AMX_MAX_COLSB - (i < g_emu.rows[c] ? g_emu.colsb[c] : 0));
}

void amx_emu_dp(int c, int a, int b, int a_signed, int b_signed) {
    int m, n, k;
    emu_dp_shapes(c, a, b, &m, &n, &k);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            uint32_t acc;
            memcpy(&acc, &g_emu.t[c][i][4 * j], 4);
            for (int l = 0; l < k; l++) {
                int32_t s = 0; /* four products, |s| <= 4 * 255 * 255: no overflow */
                for (int q = 0; q < 4; q++)
                    s += emu_byte(&g_emu.t[a][i][4 * l + q], a_signed) * emu_byte(&g_emu.t[b][l][4 * j + q], b_signed);
                acc += (uint32_t)s; /* the hardware's int32 addition wraps */
            }
            memcpy(&g_emu.t[c][i][4 * j], &acc, 4);
        }
    emu_dp_clear_rest(c);
}

/* float32 with denormals read (or written) as zero */
static inline float emu_daz(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0) u &= 0x80000000u;
    memcpy(&f, &u, 4);
    return f;
}

static inline float emu_bf16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return emu_daz(f);
}

void amx_emu_dpbf16(int c, int a, int b) {
    int m, n, k;
    emu_dp_shapes(c, a, b, &m, &n, &k);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float acc;
            memcpy(&acc, &g_emu.t[c][i][4 * j], 4);
            acc = emu_daz(acc);
            for (int l = 0; l < k; l++)
                for (int q = 0; q < 2; q++) { /* the product of two bf16 is exact in float32 */
                    float p = emu_daz(emu_bf16(&g_emu.t[a][i][4 * l + 2 * q]) * emu_bf16(&g_emu.t[b][l][4 * j + 2 * q]));
                    acc = emu_daz(acc + p);
                }
            memcpy(&g_emu.t[c][i][4 * j], &acc, 4);
        }
    emu_dp_clear_rest(c);
}

// ---- one instruction on either path (tests) ----------------------------------------------------

static void run_op_emu(int op, const amx_tilecfg *cfg, void *c, size_t sc, const void *a, size_t sa, const void *b,
                       size_t sb) {
    amx_emu_loadconfig(cfg);
    if (c) amx_emu_loadd(0, c, sc);
    if (a) amx_emu_loadd(1, a, sa);
    if (b) amx_emu_loadd(2, b, sb);
    if (op == 1) amx_emu_zero(0);
    if (op >= 2 && op <= 5) amx_emu_dp(0, 1, 2, op == 2 || op == 3, op == 2 || op == 4);
    if (op == 6) amx_emu_dpbf16(0, 1, 2);
    amx_emu_stored(0, c, sc);
    amx_emu_release();
}

#if AMX_X86_LINUX
ISA_TARGET_BEGIN("amx-tile,amx-int8,amx-bf16")
#include <immintrin.h>
static void run_op_real(int op, const amx_tilecfg *cfg, void *c, size_t sc, const void *a, size_t sa, const void *b,
                        size_t sb) {
    _tile_loadconfig(cfg);
    __asm__ volatile("" ::: "memory"); /* the sources are written before the loads (see amx_tile.h) */
    if (c) _tile_loadd(0, c, (long)sc);
    if (a) _tile_loadd(1, a, (long)sa);
    if (b) _tile_loadd(2, b, (long)sb);
    switch (op) {
    case 1: _tile_zero(0); break;
    case 2: _tile_dpbssd(0, 1, 2); break;
    case 3: _tile_dpbsud(0, 1, 2); break;
    case 4: _tile_dpbusd(0, 1, 2); break;
    case 5: _tile_dpbuud(0, 1, 2); break;
    case 6: _tile_dpbf16ps(0, 1, 2); break;
    default: break;
    }
    _tile_stored(0, c, (long)sc);
    _tile_release();
}
ISA_TARGET_END
#endif

void amx_tile_run_op(int real, int op, const amx_tilecfg *cfg, void *c, size_t sc, const void *a, size_t sa,
                     const void *b, size_t sb) {
    ATTND_ASSERT(c != NULL && op >= 0 && op <= 6 && (op != 6 || !real || amx_has_bf16()));
#if AMX_X86_LINUX
    if (real) {
        ATTND_ASSERT(amx_probe() == AMX_USABLE);
        run_op_real(op, cfg, c, sc, a, sa, b, sb);
        return;
    }
#else
    ATTND_ASSERT(!real);
#endif
    run_op_emu(op, cfg, c, sc, a, sa, b, sb);
}
