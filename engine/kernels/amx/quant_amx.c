/*
 * quant_amx.c — the AMX tile GEMM of quant_amx.inc on the real instructions (AMX-TILE, AMX-INT8,
 * AMX-BF16, with AVX-512 for the conversions and the scaling): the table quant_kernels_amx, chosen
 * by quant_dispatch.c only when amx_probe() says this process may use the tiles (CPUID, XCR0, and
 * Linux's permission). Below AX_MIN_TOK / AXB_MIN_TOK tokens (decode, small batches) its entries
 * hand over to the AVX-512 kernels, whose bits the int8 tiles give too (quant_amx.inc); the bf16
 * tiles (the default, quant.h) differ from them in the last bits.
 */
#include "quant_impl.h"
#include "quant.h"
#include "isa_target.h"

#if defined(__x86_64__)
ISA_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8,amx-bf16")
#define AMX_TILE_REAL 1
#define ALWAYS_INLINE inline __attribute__((always_inline))
/* Tiles hold 16 tokens, but below 128 the AVX-512 register tiles are faster: TinyLlama Q8_0
 * prefill, 1 thread, quiet (attnd bench --prompt-len P, ATTND_ISA=avx512 / amx): 16 tokens
 * 75.7 / 46.2 tok/s, 64: 135.1 / 110.9, 128: 131.6 / 133.1, 256: 139.9 / 144.5, 512: 130.9 /
 * 135.2 (docs/kernels.md) */
#define AX_MIN_TOK 128
#define AXB_MIN_TOK 128 /* the bf16 tiles too: at 64 tokens 0.8x the AVX-512 kernels, at 128 1.1x (docs/kernels.md) */
#define AX_FALLBACK_ROWS(qt) quant_kernels_avx512.rows[qt]
#define AX_FALLBACK_PACKED(qt) quant_kernels_avx512.packed[qt]
#define AX_TABLE quant_kernels_amx
#include "quant_amx.inc"
ISA_TARGET_END
#endif
