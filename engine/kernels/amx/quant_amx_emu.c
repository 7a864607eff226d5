/*
 * quant_amx_emu.c — the AMX tile GEMM of quant_amx.inc over the plain-C emulation of the tiles
 * (amx_tile.h): the table quant_kernels_amx_emu, which runs on any CPU (baseline C, no target),
 * so the suite checks the tile kernels' logic — layouts, strides, tile edges, configurations —
 * everywhere, and, where the CPU has AMX, against the real instructions. Every token count goes
 * through the tiles (no decode fallback). Slow: for tests, and `ATTND_ISA=amx-emu`.
 */
#include "attnd/common.h"
#include "quant.h"
#include "quant_impl.h"

#define AMX_TILE_REAL 0
#define ALWAYS_INLINE inline __attribute__((always_inline))
#define AX_MIN_TOK 1
#define AXB_MIN_TOK 1

/* never called: every call has n_tok >= 1 */
static void ax_never(float *out, const uint8_t *w, size_t rb, int64_t r0, int64_t r1, int64_t n_rows,
                     const quant_act *a, int n_tok) {
    (void)out, (void)w, (void)rb, (void)r0, (void)r1, (void)n_rows, (void)a, (void)n_tok;
    ATTND_ASSERT(0);
}
#define AX_FALLBACK_ROWS(qt) ax_never
#define AX_FALLBACK_PACKED(qt) ax_never
#define AX_TABLE quant_kernels_amx_emu
#include "quant_amx.inc"
