/*
 * amx_tile.h — (engine-private) a thin layer over Intel AMX tiles (AMX-TILE, AMX-INT8, AMX-BF16) that
 * compiles either to the real instructions or to a plain-C emulation of them, so that one kernel
 * source (quant_amx.inc) runs on both: quant_amx.c includes it with AMX_TILE_REAL 1 (the
 * intrinsics; that file alone is compiled for amx-tile/amx-int8/amx-bf16), quant_amx_emu.c with 0 (the
 * functions below, on any CPU). Which one runs is chosen at run time through the dispatch table
 * (QUANT_ISA_AMX or QUANT_ISA_AMX_EMU, quant.h).
 *
 * The emulation follows the Intel SDM's pseudo-code, limits included: palette 1, 8 tiles of at
 * most 16 rows x 64 bytes; loads and stores move `rows` rows of `colsb` bytes at a byte stride and
 * zero the rest of the tile; tdpb{ss,su,us,uu}d add, to each int32 of C (rows(C) x colsb(C)/4),
 * the sums of four byte products of a row of A and a column quadruple of B, K = colsb(A)/4 of them,
 * wrapping as the hardware does. A use the hardware would fault on (an unconfigured tile,
 * mismatched shapes, a bad configuration) is a bug here: ATTND_ASSERT. The emulated tiles are
 * per thread, as the real ones are.
 *
 * Tile numbers in the TILE_* macros must be integer constants (the instructions encode them).
 */
#ifndef ATTND_AMX_TILE_H
#define ATTND_AMX_TILE_H

#include <stddef.h>
#include <stdint.h>

#define AMX_TILES 8
#define AMX_MAX_ROWS 16
#define AMX_MAX_COLSB 64

/* The 64-byte operand of ldtilecfg (palette 1). */
typedef struct amx_tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile i (i < 8) */
    uint8_t rows[16];
} amx_tilecfg;

/* cfg zeroed with palette 1; amx_cfg_tile sets tile t to rows x colsb. */
void amx_cfg_init(amx_tilecfg *cfg);
void amx_cfg_tile(amx_tilecfg *cfg, int t, int rows, int colsb);

/* Whether this process may run AMX instructions: CPUID has AMX-TILE and AMX-INT8, the OS enables
 * the tile state in XCR0, and Linux granted the permission (arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA), asked once per process on the first call; the grant covers every thread).
 * Thread-safe. */
typedef enum amx_state {
    AMX_ABSENT = 0,  /* no AMX-INT8 on this CPU (or not x86-64) */
    AMX_REFUSED = 1, /* the CPU has it, the OS does not let this process use it */
    AMX_USABLE = 2,
} amx_state;
amx_state amx_probe(void);
const char *amx_state_name(amx_state s); /* "absent", "refused by the OS", "usable" */
/* Whether the CPU also has AMX-BF16 (tdpbf16ps; CPUID.7.0 EDX bit 22); every AMX CPU so far does */
int amx_has_bf16(void);

// ---- the emulation ------------------------------------------------------------------------------

void amx_emu_loadconfig(const amx_tilecfg *cfg);
void amx_emu_release(void);
void amx_emu_loadd(int t, const void *base, size_t stride);
void amx_emu_stored(int t, void *base, size_t stride);
void amx_emu_zero(int t);
/* C += A . B with A's bytes signed (s) or unsigned (u), then B's: dpbssd, dpbsud, dpbusd, dpbuud */
void amx_emu_dp(int c, int a, int b, int a_signed, int b_signed);
/* tdpbf16ps: C (float32) += A . B over bf16 pairs: for each row m of C and column n, for each
 * pair k of A's row (colsb(A)/4 of them), C += A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1], each
 * product exact in float32 and added in that order with round-to-nearest-even; bf16 and float32
 * denormals read as zero and results flush to zero (the SDM's DAZ/FTZ). */
void amx_emu_dpbf16(int c, int a, int b);

/*
 * One instruction on both paths, for the tests: configures `cfg`, loads tiles 0 (C), 1 (A) and
 * 2 (B) from c, a, b (strides sc, sa, sb; a NULL source leaves the tile zero), runs `op` on them
 * (0: nothing, i.e. load and store; 1: tilezero of C; 2: dpbssd, 3: dpbsud, 4: dpbusd,
 * 5: dpbuud, 6: dpbf16ps, all C += A . B), stores tile 0 to c (stride sc) and releases. real: the hardware
 * (only where amx_probe() is AMX_USABLE), else the emulation.
 */
void amx_tile_run_op(int real, int op, const amx_tilecfg *cfg, void *c, size_t sc, const void *a, size_t sa,
                     const void *b, size_t sb);

// ---- the kernel-facing macros -------------------------------------------------------------------

#if defined(AMX_TILE_REAL) && AMX_TILE_REAL
#include <immintrin.h>
#define TILE_CONFIG(cfg) _tile_loadconfig(cfg)
#define TILE_RELEASE() _tile_release()
/* GCC's tileloadd asm does not say it reads memory: the barrier keeps the stores that fill the
 * source (the unpacked weights) ahead of it */
#define TILE_LOAD(t, base, stride)                   \
    do {                                             \
        __asm__ volatile("" ::: "memory");           \
        _tile_loadd(t, base, (long)(stride));        \
    } while (0)
#define TILE_STORE(t, base, stride) _tile_stored(t, base, (long)(stride))
#define TILE_ZERO(t) _tile_zero(t)
#define TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define TILE_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#else
#define TILE_CONFIG(cfg) amx_emu_loadconfig(cfg)
#define TILE_RELEASE() amx_emu_release()
#define TILE_LOAD(t, base, stride) amx_emu_loadd(t, base, (size_t)(stride))
#define TILE_STORE(t, base, stride) amx_emu_stored(t, base, (size_t)(stride))
#define TILE_ZERO(t) amx_emu_zero(t)
#define TILE_DPBSSD(c, a, b) amx_emu_dp(c, a, b, 1, 1)
#define TILE_DPBUSD(c, a, b) amx_emu_dp(c, a, b, 0, 1)
#define TILE_DPBF16PS(c, a, b) amx_emu_dpbf16(c, a, b)
#endif

#endif /* ATTND_AMX_TILE_H */
